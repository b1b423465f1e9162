"""Which model each llama-server serves, from its command line: beside its process in the
monitor's table, and as a label of its GPU memory in the exporter (read back by a scrape)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.app_helpers import feed, sim_app

from lltui.app.widgets.process_table import process_rows
from lltui.core.llama.served_model import served_model, served_model_of_command
from lltui.core.monitor.models import GpuProcess, RigSample
from lltui.core.monitor.prom import PROCESS_MEMORY
from lltui.core.monitor.prom_export import rig_families
from lltui.core.monitor.prom_import import rigs_from_series
from lltui.services.exporter import to_metric
from lltui.sources.gpu.prom import parse_exposition

SERVER = "/opt/llama.cpp/bin/llama-server"


@pytest.mark.parametrize(
    ("argv", "model"),
    [
        # a router's model server: --alias NAME --model PATH (server-models.cpp)
        (
            [
                SERVER,
                "--host",
                "127.0.0.1",
                "--port",
                "4711",
                "--alias",
                "coder",
                "--model",
                "/m/qwen.gguf",
            ],
            "coder",
        ),
        ([SERVER, "-m", "/models/Qwen3-8B-Q4_K_M.gguf", "-c", "8192"], "Qwen3-8B-Q4_K_M"),
        ([SERVER, "--model=/models/a b.gguf"], "a b"),
        (
            [SERVER, "-hf", "ggml-org/gemma-3-4b-it-GGUF:Q4_K_M"],
            "ggml-org/gemma-3-4b-it-GGUF:Q4_K_M",
        ),
        ([SERVER, "-a", "chat,assistant", "-m", "x.gguf"], "chat"),
        ([SERVER, "--models-preset", "/p.ini", "--port", "8080"], "router"),
        (["/usr/bin/llama", "serve", "-m", "m.gguf"], "m"),
        (["python", "train.py", "-m", "model.gguf"], None),  # not a llama-server
        ([SERVER, "--port", "8080"], None),
    ],
)
def test_the_model_a_command_line_serves(argv, model):
    assert served_model(argv) == model


def test_a_joined_command_line_and_a_process_without_one():
    assert served_model_of_command("llama-server -m /models/tiny.gguf -c 512") == "tiny"
    assert served_model_of_command(None) is None
    p = GpuProcess(pid=1, gpu_index=0, used_memory=1, command="llama-server -m /m/x.gguf")
    assert p.served == "x"
    assert replace(p, model="from-argv").served == "from-argv"  # the source's argv wins


def _servers(sample: RigSample) -> RigSample:
    """Two llama-servers of a router on GPU 0, each with the model its argv names."""
    gpus = list(sample.gpus)
    router = "llama-server --host 127.0.0.1 --port {} --alias {} --model /m/{}.gguf"
    procs = (
        GpuProcess(
            pid=501,
            gpu_index=0,
            used_memory=3 << 30,
            name="llama-server",
            command=router.format(4101, "chat", "qwen"),
            model="chat",
        ),
        GpuProcess(
            pid=502,
            gpu_index=0,
            used_memory=1 << 30,
            name="llama-server",
            command=router.format(4102, "embed", "bge"),
            model="embed",
        ),
    )
    gpus[0] = replace(gpus[0], processes=procs)
    return replace(sample, gpus=tuple(gpus))


def test_the_process_table_shows_which_model_holds_which_memory():
    app = sim_app("2x3090-nvlink")
    (sample,) = feed(app, 1)
    rows = process_rows(_servers(sample))
    # the alias first, then the file and the program (the model's path left out)
    assert rows[501].cells()[-1].startswith(r"\[chat] qwen.gguf · llama-server --host")
    assert rows[502].shown_command.startswith("[embed] bge.gguf · llama-server")
    assert rows[502].matches("embed") and not rows[502].matches("chat")


def test_the_exporter_labels_each_process_memory_with_its_model():
    app = sim_app("2x3090-nvlink")
    (sample,) = feed(app, 1)
    sample = _servers(sample)
    families = {f.name: f for f in rig_families(sample, host="rig")}
    labels = [dict(lbl) for lbl, _v in families[PROCESS_MEMORY].samples]
    assert {lbl.get("model") for lbl in labels if lbl["gpu"] == "0"} == {"chat", "embed"}
    registry = CollectorRegistry(auto_describe=False)

    class C:
        def collect(self):  # type: ignore[no-untyped-def]
            for f in rig_families(sample, host="rig"):
                yield to_metric(f)

    registry.register(C())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    rig = rigs_from_series(parse_exposition(text), source="scrape:x", default_host="x", seq=1,
                           t=0, wall=0)["rig"]  # fmt: skip
    assert {p.pid: p.served for p in rig.gpus[0].processes} == {501: "chat", 502: "embed"}

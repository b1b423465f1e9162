"""``lltui explain`` on logs the pinned llama-server writes here (CPU, and loopback
ggml-rpc-server processes as devices), with several flags, and an out-of-memory load forced on
an RPC device; and the launch's comparison once its server has loaded. The log's own buffer
lines are the truth: weights, KV cache and outputs exact (llama.cpp's two decimals), compute
buffers within 10 %."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.llama_fixture import llama_bins, llama_server, rpc_servers, running, tiny_model

from lltui.cli import main
from lltui.core.cmdline.args import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory.devices import DeviceSpec
from lltui.services.explain import ExplainRequest, explain

__all__ = ["llama_bins", "tiny_model"]  # session fixtures used by name

pytestmark = pytest.mark.slow
COMPUTE_TOLERANCE = 0.10


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("explain-models")
    out = {}
    for arch, wt in (("llama", "Q8_0"), ("gemma3", "Q4_K"), ("qwen3moe", "Q4_K")):
        out[arch] = root / f"{arch}-{wt}.gguf"
        gf.write_model(out[arch], gf.SPECS[arch](), wt)
    return out


def served_log(bins, model: Path, tmp_path: Path, flags: list[str]) -> Path:
    log = tmp_path / "server.log"
    with llama_server(bins, model, log, [*flags, "--no-warmup"]):
        pass
    return log


def assert_matches(report) -> None:
    assert report.model_read and report.result is not None, report.model_note
    last = [c for c in report.checks if c.line.load == report.facts.loads]
    assert last, "no buffer lines in the log"
    for c in last:
        where = f"line {c.line.line}: {c.line.device} {c.line.kind} {c.line.mib_text} MiB"
        if c.line.kind == "compute":
            assert c.within(COMPUTE_TOLERANCE), f"{where}, predicted {c.predicted_bytes}"
        else:
            assert c.exact, f"{where}, predicted {c.predicted_bytes}"


CPU_CASES = {
    "defaults": ("llama", []),
    "slots-q8-kv": ("llama", ["-c", "4096", "-np", "4", "-no-kvu", "-ctk", "q8_0", "-ctv", "q8_0"]),
    "swa-odd-ctx": ("gemma3", ["-c", "5000", "-np", "3", "-no-kvu", "-ub", "256", "-lm", "none"]),
    "moe-unified-fa-off": ("qwen3moe", ["-c", "2048", "-np", "2", "-kvu", "-fa", "off"]),
}


@pytest.mark.parametrize("case", list(CPU_CASES))
def test_cpu_logs_match_line_by_line(llama_bins, models, tmp_path, case):
    arch, flags = CPU_CASES[case]
    log = served_log(llama_bins, models[arch], tmp_path, flags)
    report = explain(ExplainRequest(str(log), model_from_log=True))  # the path in the log
    assert report.build is not None  # lltui's own build: the pinned one
    assert_matches(report)
    assert report.failed is None


@pytest.fixture(scope="module")
def rpc_endpoints(llama_bins, tmp_path_factory) -> Iterator[list[str]]:
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(
            rpc_servers(llama_bins, 2, tmp_path_factory.mktemp("explain-rpc"))
        )
        yield [f"127.0.0.1:{s.port}" for s in servers]


@pytest.mark.parametrize(
    "flags",
    [
        ["-c", "1024", "-np", "1"],  # llama.cpp's split by free memory
        ["-c", "1024", "-np", "1", "-ts", "3,1", "-ngl", "4"],  # a split the log does not print
    ],
    ids=["free-memory-split", "ts-partial"],
)
def test_rpc_devices_match_line_by_line(llama_bins, models, rpc_endpoints, tmp_path, flags):
    log = served_log(
        llama_bins, models["llama"], tmp_path, ["--rpc", ",".join(rpc_endpoints), *flags]
    )
    report = explain(ExplainRequest(str(log), model_from_log=True))
    assert [d.kind for d in report.devices.devices] == ["rpc", "rpc"]
    assert all(d.free_bytes for d in report.devices.devices)  # "using device ... MiB free"
    weights = [c for c in report.checks if c.line.kind == "model"]
    assert any(c.line.device.startswith("RPC") for c in weights)
    # the RPC servers run the CPU backend: its buffers are aligned as a CPU's, not a CUDA's
    # device; weights, KV and outputs still agree to the printed hundredth
    for c in report.checks:
        if c.line.kind != "compute":
            assert c.exact, (c.line.line, c.line.device, c.line.kind, c.predicted_bytes)


def test_out_of_memory_on_an_rpc_device(llama_bins, tmp_path):
    """A KV cache no machine has memory for (128 GiB): the RPC server refuses it, the load
    fails; explain names the device, what it asked, what it had, and a command that fits."""
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
        pytest.skip("this kernel promises any allocation (overcommit 1): nothing would fail")
    model = tmp_path / "wide.gguf"
    spec = gf.llama_spec(n_layer=4, n_embd=256, n_head=32, n_head_kv=32, head_dim=128)
    gf.write_model(model, spec, "F16")
    log = tmp_path / "oom.log"
    with rpc_servers(llama_bins, 1, tmp_path) as rpcs:
        ep = f"127.0.0.1:{rpcs[0].port}"
        argv = [
            str(llama_bins.binaries["llama-server"]), "-lv", "4", "-m", str(model),
            "--rpc", ep, "-c", "2000000", "-np", "1", "-fit", "off", "-t", "1",
            "--host", "127.0.0.1", "--port", "0", "--no-warmup",
        ]  # fmt: skip
        with contextlib.suppress(AssertionError), running(argv, log, 0, lambda r: False, 60):
            pass  # it exits before it is ready: that is the point
    report = explain(ExplainRequest(str(log), model_from_log=True))
    f = report.failed
    assert f is not None and f.kind == "oom" and f.stage == "kv"
    assert f.device == f"RPC0[{ep}]"
    assert f.needed_bytes == f.predicted_bytes  # lltui sizes the refused KV cache exactly
    assert f.free_bytes is not None and f.short_bytes is not None and f.short_bytes > 0
    assert report.fix is not None
    fix_args = parse_llama_args([a for a in report.fix.argv[3:]])
    assert fix_args.n_ctx < 2000000
    assert fix_args.rpc == (ep,)  # the log's rpc-server, though no command line named it
    # the fix fits the memory the device had (lltui's margin kept)
    free = f.free_at_load_bytes
    dev = DeviceSpec(f"RPC0[{ep}]", "rpc", free, free, endpoint=ep, dev_name="RPC0")
    res = estimate(read_gguf(str(model)), fix_args, [dev], FitOptions(search=False))
    assert res.fits
    # the command line says it in words and in JSON
    assert main(["explain", str(log), "--model-from-log"]) == 0
    assert main(["explain", str(log), "--model-from-log", "--json"]) == 0


def test_launch_keeps_prediction_beside_allocation(llama_bins, models, monkeypatch, capsys):
    """``lltui launch --json``: the ready event's devices carry lltui's prediction for the
    same flags, and the event says how many lines matched."""
    import threading

    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    from lltui.commands.launch_output import ready_event
    from lltui.services.launch.request import LaunchRequest
    from lltui.services.launch.session import LaunchSession
    from lltui.services.launch.watch import LaunchWatch

    ready = threading.Event()
    words = (str(models["gemma3"]), "-c", "2048", "-t", "1", "--port", "0", "--no-warmup")
    with LaunchSession(LaunchRequest(words=words)) as session:
        session.prepare()
        watch = LaunchWatch(session, lambda st: st.ready_at is not None and ready.set())
        watch.start()
        assert ready.wait(90)
        event = ready_event(watch.state)
        session.stop()
        watch.close()
    (cpu,) = event["devices"]
    assert cpu["name"] == "CPU"
    assert cpu["predicted"]["model_mib"] == cpu["model_mib"]
    assert cpu["predicted"]["kv_mib"] == cpu["kv_mib"]
    pred = event["prediction"]
    assert pred["compared"] >= 4 and pred["exact"] >= pred["compared"] - 1  # compute may differ
    assert json.dumps(event)  # a JSON line as printed


def test_launch_state_keeps_the_comparison(llama_bins, models, monkeypatch):
    """The launch view's controller: once the server answers, the comparison is in the
    launch's state, per device as the view's placement names them."""
    import threading

    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    from lltui.services.launch.controller import LaunchController
    from lltui.services.launch.request import LaunchRequest

    changed = threading.Event()
    controller = LaunchController(changed.set, lambda: None, poll_interval_s=0.2)
    words = (str(models["llama"]), "-c", "1024", "-t", "1", "--port", "0", "--no-warmup")
    try:
        controller.start(LaunchRequest(words=words))
        deadline = 90.0
        import time

        end = time.monotonic() + deadline
        while time.monotonic() < end:
            check = controller.state.check
            if check is not None:
                break
            changed.wait(0.2)
            changed.clear()
        assert check is not None
        cpu = check.device("CPU")
        assert cpu is not None and cpu.predicted
        logged, predicted = dict(cpu.logged), dict(cpu.predicted)
        for kind in ("model", "kv", "output"):
            assert abs(logged[kind] - predicted[kind]) < 0.005 * 1024 * 1024, kind
        assert "exact" in check.summary
    finally:
        controller.close()


def test_a_verbose_logs_layer_placement_is_used(llama_bins, models, rpc_endpoints, tmp_path):
    """At -v llama-server prints each layer's device: the split is read, not recovered."""
    flags = ["--rpc", ",".join(rpc_endpoints), "-c", "1024", "-np", "1", "-ts", "1,3", "-v"]
    log = served_log(llama_bins, models["llama"], tmp_path, flags)
    report = explain(ExplainRequest(str(log), model_from_log=True))
    assert report.facts.layer_devices
    assert any("as the log printed them" in n for n in report.notes), report.notes
    for c in report.checks:
        if c.line.load == report.facts.loads and c.line.kind != "compute":
            assert c.exact, (c.line.line, c.line.device, c.line.kind, c.predicted_bytes)
    rows = {r.name: r.layers for r in report.device_rows()}
    assert sum(len(v) for k, v in rows.items() if k.startswith("RPC")) > 0


def test_out_of_memory_on_the_host(llama_bins, tmp_path):
    """The same KV cache asked of the host (no GPU): the CPU's allocation fails; what the host
    had comes from the log's own device list, and the fix fits it."""
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
        pytest.skip("this kernel promises any allocation (overcommit 1): nothing would fail")
    model = tmp_path / "wide.gguf"
    spec = gf.llama_spec(n_layer=4, n_embd=256, n_head=32, n_head_kv=32, head_dim=128)
    gf.write_model(model, spec, "F16")
    log = tmp_path / "oom.log"
    argv = [
        str(llama_bins.binaries["llama-server"]), "-lv", "4", "-m", str(model),
        "-c", "2000000", "-np", "1", "-fit", "off", "-t", "1",
        "--host", "127.0.0.1", "--port", "0", "--no-warmup",
    ]  # fmt: skip
    with contextlib.suppress(AssertionError), running(argv, log, 0, lambda r: False, 60):
        pass
    report = explain(ExplainRequest(str(log), model_from_log=True))
    f = report.failed
    assert f is not None and f.device == "CPU" and f.kind == "oom"
    assert f.needed_bytes == f.predicted_bytes
    assert f.free_at_load_bytes and f.short_bytes and f.short_bytes > 0
    assert report.fix is not None
    fix_args = parse_llama_args(list(report.fix.argv[3:]))
    opts = FitOptions(search=False, host_free_bytes=f.free_at_load_bytes)
    assert estimate(read_gguf(str(model)), fix_args, [], opts).fits

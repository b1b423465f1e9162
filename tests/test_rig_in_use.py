"""The rig in use, the same for the command line and the app: without a GPU, ``auto`` stands in
the simulated rig the monitor shows, and ``fit``, ``quant``, ``topo`` (text and JSON) say so
and work on it as the fit and topology views do; ``--gpus cpu`` is the host alone."""

from __future__ import annotations

import json
import sys

import pytest
from support import gguf_factory as gf

from lltui.cli import main

SIM = "sim:kaggle-2xt4"  # auto's stand-in


@pytest.fixture
def no_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("rig") / "tiny.gguf"
    gf.write_model(path, gf.llama_spec(n_ctx_train=8192))
    return str(path)


def _devices(data: dict) -> list[tuple[str, int | None, int]]:
    """Each device's name, free memory (the host's changes by the moment) and what it holds."""
    return [
        (d["name"], None if d["kind"] == "cpu" else d["free_bytes"], d["total_bytes"])
        for d in data["devices"]
    ]


def test_fit_without_gpus_is_the_fit_views_estimate_of_the_rig_the_app_opens(
    no_nvml, model, capsys
):
    from lltui.app.state.fit import LIVE, compute_estimate
    from lltui.app.state.fit import FitRequest as ViewRequest
    from lltui.core.fit.report import result_to_json
    from lltui.services.rig import RigRequest, open_rig

    rig = open_rig(RigRequest())  # as the app opens its rig
    try:
        sample = rig.source.poll()
    finally:
        rig.source.close()
    info = rig.info
    assert info.simulated and info.source == SIM
    chosen = info.source if info.simulated else LIVE  # the fit view's devices on a simulated rig
    view = compute_estimate(ViewRequest(0, model, {}, "", chosen), sample)
    assert view.result is not None
    assert main(["fit", model, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert _devices(data) == _devices(result_to_json(view.result))
    assert [d["kind"] for d in data["devices"]] == ["cuda", "cuda", "cpu"]
    assert data["simulated"] is True and "nvidia-ml-py is not installed" in data["simulated_reason"]
    assert main(["fit", model]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"SIMULATED rig ({SIM}): no NVIDIA GPU here")
    assert "estimated for its GPUs (2x T4 (CUDA0,1)); --gpus cpu" in first


def test_gpus_cpu_is_still_the_host_alone_and_not_simulated(no_nvml, model, capsys):
    assert main(["fit", model, "--gpus", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["kind"] for d in data["devices"]] == ["cpu"] and data["simulated"] is False
    assert main(["fit", model, "--gpus", "cpu"]) == 0
    assert "SIMULATED" not in capsys.readouterr().out


def test_quant_and_a_plan_say_simulated_too(no_nvml, model, capsys):
    assert main(["quant", model, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulated"] is True
    assert [(d["name"], d["kind"]) for d in data["devices"]] == [
        ("CUDA0", "cuda"),
        ("CUDA1", "cuda"),
    ]
    assert main(["quant", model]) == 0
    assert capsys.readouterr().out.startswith(f"SIMULATED rig ({SIM})")
    assert main(["fit", model, model, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulated"] is True
    assert main(["--source", "sim:4xl4", "fit", model, "--json"]) == 0  # the --source asked
    data = json.loads(capsys.readouterr().out)
    assert (
        len(data["devices"]) == 5
        and data["simulated_reason"] == "the simulated rig 4xl4 was asked for"
    )


def test_topo_shows_the_simulated_topology_the_app_shows(no_nvml, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi either
    assert main(["topo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulated"] is True and data["source"] == SIM
    assert "nvidia-ml-py is not installed" in data["simulated_reason"]
    assert data["links"] == {"GPU0-GPU1": "PHB"}
    assert main(["topo"]) == 0
    assert capsys.readouterr().out.startswith(f"SIMULATED rig ({SIM}): no NVIDIA GPU here")
    # a source named and not there still fails
    assert main(["topo", "--source", "nvml"]) == 1

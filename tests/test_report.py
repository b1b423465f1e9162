"""``lltui report`` on a simulated rig with a real llama-server (the pinned build, a tiny
model) started with an API key: every section is there, the server's build, flags, load
beside the prediction and speed are read, and no secret, user name or other user's command
line is in the Markdown or the JSON."""

from __future__ import annotations

import json

import httpx
import pytest
from support.llama_fixture import llama_bins, llama_server, tiny_model

from lltui.cli import main

__all__ = ["llama_bins", "tiny_model"]

KEY = "sk-report-7f3c9a1e5b"
HF = "hf_ReportTokenAbcdefghijklmnop"
SECTIONS = (
    "Rig",
    "Topology",
    "NCCL",
    "llama.cpp build and flags",
    "Load and prediction",
    "Speed",
    "Alerts",
)


def _ready_with_key(run) -> bool:
    try:
        return httpx.get(f"{run.url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def someone_else(monkeypatch):
    """This user is ``alice`` (the simulated rig's Xorg runs as root: another user)."""
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    monkeypatch.setenv("HF_TOKEN", HF)
    monkeypatch.setenv("LLAMA_API_KEY", KEY)


def test_report_has_every_section_and_no_secret(
    llama_bins, tiny_model, tmp_path, capsys, someone_else
):
    log = tmp_path / "alice-server.log"
    extra = ("--api-key", KEY, "--metrics")
    with llama_server(llama_bins, tiny_model, log, extra, ready=_ready_with_key) as run:
        body = {"prompt": "hello there", "n_predict": 8}
        headers = {"Authorization": f"Bearer {KEY}"}
        httpx.post(f"{run.url}/completion", json=body, headers=headers, timeout=60)
        out = tmp_path / "report.md"
        pid = str(run.proc.pid)
        argv = ["report", "--source", "sim:2x3090-nvlink", "--server", pid, "--log", str(log)]
        assert main([*argv, "--out", str(out)]) == 0
        assert main([*argv, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        # by its URL as by its pid: the command line of this user's server here (it was null)
        by_url = [*argv[:3], "--server", run.url, "--log", str(log), "--json"]
        assert main(by_url) == 0
        flags_by_url = json.loads(capsys.readouterr().out)["llama.cpp_build_and_flags"]
        assert flags_by_url["argv"] == data["llama.cpp_build_and_flags"]["argv"]
    text = out.read_text()
    for title in SECTIONS:
        assert f"## {title}\n" in text
        assert title.lower().replace(" ", "_") in data
    flags = data["llama.cpp_build_and_flags"]
    assert "--api-key ***" in flags["argv"] and flags["state"] == "ready"
    assert data["load_and_prediction"].get("error") is None
    assert data["speed"]["measured_decode_tps"] and data["speed"]["predicted_decode_tps"]
    everything = text + json.dumps(data)
    for secret in (KEY, HF, "alice", "Xorg"):
        assert secret not in everything, secret


def test_a_server_that_wants_a_key_not_given_is_said_so(
    llama_bins, tiny_model, tmp_path, capsys, monkeypatch
):
    """A server started with --api-key and --metrics, reported without LLAMA_API_KEY: its
    /metrics answered 401, and the report said it was 'not started with --metrics'."""
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    log = tmp_path / "server.log"
    extra = ("--api-key", KEY, "--metrics")
    with llama_server(llama_bins, tiny_model, log, extra, ready=_ready_with_key) as run:
        argv = ["report", "--source", "sim:2x3090-nvlink", "--server", run.url, "--log", str(log)]
        assert main(argv) == 0
    text = capsys.readouterr().out
    assert "state: unauthorized" in text
    assert "(no /metrics: the server asks for an API key; export LLAMA_API_KEY)" in text
    assert "not started with --metrics" not in text and KEY not in text


def test_a_log_that_is_not_there_is_one_line(capsys):
    assert main(["report", "--log", "/nonexistent/server.log"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--log", "."], "report: .: is a directory"),
        (["--server=-5"], "report: --server '-5': expected a URL, HOST:PORT or a pid"),
        # a mistyped source is bad input, as for gpus (it exited 0, each section saying so)
        (["--source", "sim:nope"], "report: unknown simulated profile 'nope'"),
        # said before the seconds of gathering (it was 'cannot write', exit 1, after them)
        (["--out", "/nonexistent/dir/r.md"], "report: --out /nonexistent/dir/r.md: no folder "),
        (["--out", "."], "report: --out .: is a directory"),
    ],
)
def test_a_bad_log_or_server_is_one_line(capsys, argv, said):
    assert main(["report", *argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"lltui: {said}")


def test_a_pid_that_is_no_process_here_is_said_so(capsys):
    assert main(["report", "--server", "999999999", "--source", "sim:colab-t4"]) == 0
    assert "pid 999999999: no such process here" in capsys.readouterr().out


def test_no_server_given_is_not_called_one_without_metrics(capsys):
    """`lltui report` alone: its speed section said the server 'was not started with
    --metrics, or is not reachable', of a server no one named."""
    assert main(["report", "--source", "sim:colab-t4"]) == 0
    text = capsys.readouterr().out
    assert "(no /metrics: no server address to ask; --server URL names one)" in text
    assert "not started with --metrics" not in text


def test_out_never_replaces_the_log_it_reports(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text("main: build = 5300 (abc)\nllama_model_loader: loaded meta data\n")
    before = log.read_bytes()
    link = tmp_path / "same.log"
    link.symlink_to(log)
    for out in (log, link):
        argv = ["report", "--log", str(log), "--out", str(out), "--source", "sim:colab-t4"]
        assert main(argv) == 2
        assert "is the log being reported" in capsys.readouterr().err
    assert log.read_bytes() == before


def test_the_nccl_section_speaks_words_not_python(capsys):
    """It printed "available: True": a Python value in a Markdown report."""
    assert main(["report", "--source", "sim:kaggle-2xt4"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.startswith("available: "))
    assert line.split()[1] in ("yes", "no") and "True" not in text and "False" not in text


def test_a_server_of_this_machine_is_predicted_on_its_cpu(llama_bins, tiny_model, tmp_path, capsys):
    """A llama-server running here: the report predicted its speed on an assumed desktop CPU
    (1827 t/s where launch and fit, on this machine's CPU, said 2152). It takes this
    machine's host facts, as launch and ``fit --gpus cpu`` do."""
    log = tmp_path / "server.log"
    with llama_server(llama_bins, tiny_model, log, ("--metrics",)) as run:
        argv = ["report", "--source", "sim:2x3090-nvlink", "--server", run.url, "--log", str(log)]
        assert main([*argv, "--json"]) == 0
        reported = json.loads(capsys.readouterr().out)["speed"]["predicted_decode_tps"]
    assert main(["fit", str(tiny_model), "--gpus", "cpu", "-t", "1", "-c", "512", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["speed"]["decode_tps"]
    assert reported == pytest.approx(fit, abs=0.1)


def test_a_server_of_this_machine_is_predicted_with_this_rigs_calibration(
    llama_bins, tiny_model, tmp_path, capsys, monkeypatch
):
    """With a calibration kept for this rig, launch and fit predict with it; the report did
    not (twice fit's decode here) and did not say which it used."""
    from lltui.core.speed.calibration import fit_calibration
    from lltui.services.bench import local_rig
    from lltui.sources.gpu import rig_store
    from lltui.sources.gpu.cpu import local_host

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    rig, day = local_rig([], local_host()), "2026-01-02"
    points = (  # the host decodes at half its prediction, prompts at 1.5x
        rig_store.StoredPoint("m.gguf", "CPU", "tg128", True, 50, 100, 0, 0.01, 0, day),
        rig_store.StoredPoint("m.gguf", "CPU", "pp512", False, 300, 200, 0, 0.005, 0, day),
    )
    cal = fit_calibration(rig.describe(), day, [p.measured() for p in points])
    rig_store.save(rig_store.RigRecord(rig, "b1 (x)", cal, points))
    said = "calibrated on this rig from 2 points, 2026-01-02"
    log = tmp_path / "server.log"
    with llama_server(llama_bins, tiny_model, log, ("--metrics",)) as run:
        argv = ["report", "--source", "sim:2x3090-nvlink", "--server", run.url, "--log", str(log)]
        assert main([*argv, "--json"]) == 0
        speed = json.loads(capsys.readouterr().out)["speed"]
        assert main(argv) == 0
        assert f"predicted: {said}" in capsys.readouterr().out
    assert speed["predicted_calibrated"] == said
    assert main(["fit", str(tiny_model), "--gpus", "cpu", "-t", "1", "-c", "512", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)["speed"]
    assert fit["calibrated"] == said
    assert speed["predicted_decode_tps"] == pytest.approx(fit["decode_tps"], abs=0.1)

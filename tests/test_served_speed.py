"""Served requests against the prediction: llama-server's own timing lines read, each request
checked at its size, a large miss kept as a calibration point of this rig; and for real, a
request to the pinned CPU llama-server."""

from __future__ import annotations

from pathlib import Path

import gguf_factory as gf
import pytest
from llama_fixture import llama_bins, llama_server, tiny_model

from lltui.core.llama.flags import parse_llama_args
from lltui.core.llama.timings import parse_timing
from lltui.core.speed.served import ServedSpeeds
from lltui.services.bench import local_rig
from lltui.services.launch_speed import SpeedWatch
from lltui.sources.gpu import rig_store
from lltui.sources.gpu.cpu import local_host

LOGS = Path(__file__).parent / "fixtures" / "llama-server"
__all__ = ["llama_bins", "tiny_model"]  # fixtures


def _t(line: str):
    got = parse_timing(line)
    assert got is not None
    return got


def _line(task: int, prompt: bool, tokens: int, ms: float) -> str:
    what = "prompt eval time" if prompt else "       eval time"
    return (
        f"0.01.000.000 I slot print_timing: id  0 | task {task} | {what} = {ms:10.2f} ms / "
        f"{tokens:5d} tokens (    1.00 ms per token,   100.00 tokens per second)"
    )


def test_timings_are_read_from_real_logs_plain_and_jsonl():
    plain = [parse_timing(ln) for ln in (LOGS / "request_lv4.log").read_text().splitlines()]
    jsonl = [
        parse_timing(ln) for ln in (LOGS / "server_jsonl_lv4_full.log").read_text().splitlines()
    ]
    for got in ([t for t in plain if t], [t for t in jsonl if t]):
        assert [(t.task, t.prompt, t.tokens) for t in got] == [(2, True, 22), (2, False, 6)]
        assert got[0].tps > 0
    assert parse_timing("slot print_timing: id 0 | task x | garbage") is None


def test_generation_is_checked_at_the_depth_its_prompt_left():
    asked = []

    def predict(prompt: bool, depth: int, tokens: int) -> float:
        asked.append((prompt, depth, tokens))
        return 100.0

    served = ServedSpeeds(predict)
    p = served.feed(_t(_line(7, True, 1000, 500.0)))
    g = served.feed(_t(_line(7, False, 64, 800.0)))
    assert p is not None and g is not None
    assert asked == [(True, 0, 1000), (False, 1032, 64)]
    assert p.measured_tps == pytest.approx(2000.0) and p.diff == pytest.approx(19.0)
    assert g.measured_tps == pytest.approx(80.0) and not g.large_miss
    # too few tokens to time throughput
    assert served.feed(_t(_line(8, True, 10, 5.0))) is None
    assert served.feed(_t(_line(8, False, 3, 5.0))) is None


@pytest.fixture
def tiny(tmp_path) -> Path:
    (path,) = gf.write_model(tmp_path / "tiny.gguf", gf.llama_spec(n_layer=4), "Q8_0")
    return path


def test_a_large_miss_is_kept_once_per_kind_and_calibrates_the_rig(tiny, tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    args = parse_llama_args(["-m", str(tiny), "-c", "4096", "-t", "1"])
    watch = SpeedWatch.for_command(args, [], env=env)
    assert watch is not None
    predicted = watch.predict(True, 0, 512)
    assert predicted is not None and predicted > 0
    # a prompt ten times faster than predicted: kept
    ms = 512 / (10 * predicted) * 1000
    check = watch.feed(_line(1, True, 512, ms))
    assert check is not None and check.large_miss and check.diff > 5
    assert watch.stored == ["prompt speed kept"]
    record = rig_store.load(local_rig([], local_host()), env)
    assert record is not None
    (point,) = record.points
    assert point.source == "llama-server" and point.test == "served prompt"
    assert record.calibration.host_prefill < 0.5  # the host's prompts run faster than said
    # another miss of the same kind in this launch is shown, not kept again
    assert watch.feed(_line(2, True, 512, ms)) is not None
    assert watch.stored == ["prompt speed kept"]
    # the next watch on this rig predicts with it
    again = SpeedWatch.for_command(args, [], env=env)
    assert again is not None
    calibrated = again.predict(True, 0, 512)
    assert calibrated is not None and calibrated > 3 * predicted


@pytest.mark.slow
def test_a_real_servers_requests_are_checked(llama_bins, tiny_model, tmp_path):
    import httpx

    log = tmp_path / "server.log"
    with llama_server(llama_bins, tiny_model, log, extra=["-np", "1"]) as run:
        prompt = " ".join(["the gpu layer cache"] * 12)  # about 240 of the 512 cells
        r = httpx.post(
            f"{run.url}/completion",
            json={"prompt": prompt, "n_predict": 32, "ignore_eos": True},
            timeout=120,
        )
        assert r.status_code == 200
    lines = run.log().splitlines()  # once stopped: llama.cpp's log thread has written all
    args = parse_llama_args(["-m", str(tiny_model), "-c", "512", "-t", "1"])
    watch = SpeedWatch.for_command(args, [], store=False)
    assert watch is not None
    checks = [c for c in (watch.feed(ln) for ln in lines) if c is not None]
    kinds = {c.prompt for c in checks}
    assert kinds == {True, False}
    for c in checks:
        assert c.measured_tps > 0 and c.predicted_tps > 0
        assert "measured" in c.line() and "predicted" in c.line()

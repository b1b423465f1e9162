"""Served requests against the prediction: llama-server's own timing lines read, each request
checked at its size; a request kept as a calibration point of this rig only when the host was
otherwise idle, nothing shared the server or its GPUs and the model is large enough for the
speed model to apply, held until three agree and then moving the calibration a bounded step;
and for real, a busy host (processes spinning on every CPU) and a request to the pinned CPU
llama-server."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.llama_fixture import llama_bins, llama_server, tiny_model

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.llama.timings import parse_timing
from lltui.core.speed.calibration import HOST_BUSY_MAX
from lltui.core.speed.served import ServedSpeeds, ServedTasks
from lltui.services.bench import local_calibration, local_rig
from lltui.services.launch.speed import SpeedWatch
from lltui.sources.gpu import rig_store
from lltui.sources.gpu.cpu import local_host
from lltui.sources.gpu.procfs import OthersMeter

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


def test_a_requests_start_and_end_are_read_from_real_logs_plain_and_jsonl():
    for name in ("server_default_verbosity_full.log", "server_jsonl_lv4_full.log"):
        tasks = ServedTasks()
        starts = [tasks.feed(ln, float(i)) for i, ln in enumerate((LOGS / name).open())]
        assert starts.count(True) == 1
        assert tasks.window(2) == (float(starts.index(True)), False)


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


def test_a_prompt_that_found_cells_cached_runs_from_their_depth():
    """A chat's next turn: 1501 cells cached, 80 new tokens timed. Its prompt was judged at
    depth 0 and its generation at 96, where it ran past 1581."""
    from lltui.core.llama.timings import parse_cached

    asked = []

    def predict(prompt: bool, depth: int, tokens: int) -> float:
        asked.append((prompt, depth, tokens))
        return 100.0

    served = ServedSpeeds(predict)
    line = "0.01.000.000 I slot   operator(): id  0 | task 9 | cached n_tokens = 1501, memory_seq_rm [1501, end)"  # noqa: E501
    assert parse_cached(line) == (9, 1501)
    jsonl = json.dumps({"type": "log", "msg": line.split(" I ", 1)[1] + "\n"})
    assert parse_cached(jsonl) == (9, 1501)
    served.cached(*parse_cached(line))
    served.feed(_t(_line(9, True, 80, 100.0)))
    served.feed(_t(_line(9, False, 64, 800.0)))
    assert asked == [(True, 1501, 80), (False, 1501 + 80 + 32, 64)]


@pytest.fixture
def tiny(tmp_path) -> Path:
    (path,) = gf.write_model(tmp_path / "tiny.gguf", gf.llama_spec(n_layer=4), "Q8_0")
    return path


@pytest.fixture
def large(tmp_path) -> Path:
    """An 8B-shaped model (the header; a hole for its 3.8 GiB of weights): on a CPU its fixed
    per-token costs are a few % of its predicted time, so the speed model applies."""
    spec = gf.llama_spec(
        n_layer=32, n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8, head_dim=128, n_vocab=32000
    )
    (path,) = gf.write_model(tmp_path / "large.gguf", spec, "Q4_0", sparse=True)
    return path


SERVER_PID = 4242


class FakeProc:
    """A /proc tree whose CPU counters the test moves: the host's (all CPUs), the server's
    and lltui's own, in ticks."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.user = self.idle = self.server = 0
        self.advance()

    def advance(self, total: int = 0, others: int = 0, server: int = 0) -> None:
        """``total`` ticks of all CPUs pass: ``others`` busy in other processes, ``server``
        in the server, the rest idle."""
        self.user += others + server
        self.idle += total - others - server
        self.server += server
        proc = self.root / "proc"
        (proc / str(SERVER_PID)).mkdir(parents=True, exist_ok=True)
        (proc / "self").mkdir(exist_ok=True)
        (proc / "stat").write_text(f"cpu {self.user} 0 0 {self.idle} 0 0 0 0 0 0\n")
        for name, ticks in ((str(SERVER_PID), self.server), ("self", 0)):
            fields = ["S"] + ["0"] * 10 + [str(ticks), "0"] + ["0"] * 10
            (proc / name / "stat").write_text(f"1 (x) {' '.join(fields)}\n")


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def idle_host(tmp_path):
    """A watch factory on a fixture /proc: the host idle unless the test says otherwise."""
    proc = FakeProc(tmp_path / "root")
    clock = Clock()
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}

    def watch(model: Path, **kw):
        meter = OthersMeter(lambda: SERVER_PID, proc.root, clock)
        args = parse_llama_args(["-m", str(model), "-c", "4096", "-t", "2"])
        w = SpeedWatch.for_command(args, [], env=env, meter=meter, **kw)
        assert w is not None
        w._clock = clock
        return w

    return watch, proc, clock, env


def _start(task: int) -> str:
    return f"0.01.000.000 I slot launch_slot_: id  0 | task {task} | processing task, is_child = 0"


def _stop(task: int) -> str:
    return f"0.01.000.000 I slot      release: id  0 | task {task} | stop processing: n_tokens = 9"


def _serve(watch, proc, clock, task: int, tokens: int, slower: float, others: int = 0):
    """One request of ``tokens`` generated ``slower`` times slower than predicted, the host's
    other processes taking ``others`` of 200 ticks meanwhile; the generation's check."""
    predicted = watch.predict(False, 32 + tokens // 2, tokens)
    ms = tokens / (predicted / slower) * 1000
    watch.feed(_start(task))
    clock.t += ms / 1000
    proc.advance(total=200, others=others, server=100)
    watch.feed(_line(task, True, 32, 10.0))  # too short to check: generation alone
    check = watch.feed(_line(task, False, tokens, ms))
    watch.feed(_stop(task))
    return check


def _record(env):
    return rig_store.load(local_rig([], local_host()), env)


def test_the_meter_leaves_out_the_server_and_lltui(tmp_path):
    proc = FakeProc(tmp_path)
    clock = Clock()
    meter = OthersMeter(lambda: SERVER_PID, tmp_path, clock)
    meter.mark()
    clock.t += 1
    proc.advance(total=40, others=40)
    assert meter.share_since(100.0) is None  # too few ticks to tell
    proc.advance(total=360, others=20, server=200)
    assert meter.share_since(100.0) == pytest.approx(60 / 400)
    assert meter.share_since(50.0) is None  # no reading that early
    clock.t += 10
    proc.advance(total=400, others=300)
    assert meter.share_since(105.0) is None  # nor one close enough to the request's start
    assert OthersMeter(lambda: None, tmp_path, clock).share_since(100.0) is None


def test_without_a_pid_the_meter_leaves_out_lltui_and_the_children_it_waited_for(tmp_path):
    """What ``lltui bench`` measures with: a benchmark lltui ran and waited for is its own
    time, not another process's (a real child burning CPU, the host's counters a fixture)."""
    proc = FakeProc(tmp_path)
    clock = Clock()
    meter = OthersMeter(None, tmp_path, clock)
    meter.mark()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    proc.advance(total=400, others=200)
    share = meter.share_since(100.0)
    # the child's 0.4 s (40 ticks at 100 Hz) and more are lltui's own, not the others'
    assert share is not None and share <= (200 - 0.4 * os.sysconf("SC_CLK_TCK")) / 400


def test_a_request_on_a_busy_host_is_not_kept(large, tmp_path):
    """For real: this host's /proc, processes spinning on every CPU while a request is
    served; the miss is shown, the rig's calibration left alone."""
    env = {"XDG_DATA_HOME": str(tmp_path / "data")}
    spin = [sys.executable, "-c", "while True: pass"]
    with (
        subprocess.Popen(["sleep", "300"]) as server,
        contextlib.ExitStack() as stack,
    ):
        burners = [stack.enter_context(subprocess.Popen(spin)) for _ in range(os.cpu_count() or 1)]
        try:
            meter = OthersMeter(lambda: server.pid)
            args = parse_llama_args(["-m", str(large), "-c", "4096", "-t", "2"])
            watch = SpeedWatch.for_command(args, [], env=env, meter=meter)
            assert watch is not None
            predicted = watch.predict(False, 64, 128)
            assert predicted is not None
            watch.feed(_start(1))
            began = time.monotonic()
            deadline = began + 60
            while (meter.share_since(began) or 0) < 2 * HOST_BUSY_MAX:
                assert time.monotonic() < deadline, "the spinners never showed in /proc/stat"
                time.sleep(0.05)
            watch.feed(_line(1, True, 64, 10.0))
            check = watch.feed(_line(1, False, 128, 128 / (predicted / 10) * 1000))
        finally:
            for b in [*burners, server]:
                b.kill()
    assert check is not None and check.large_miss and check.diff < -0.8
    assert check.calibration is not None
    assert check.calibration.startswith("not kept as a calibration point: the host was busy")
    assert watch.stored == [] and _record(env) is None


def test_a_tiny_model_is_too_small_to_calibrate(tiny, idle_host):
    watch_for, proc, clock, env = idle_host
    check = _serve(watch_for(tiny), proc, clock, 1, 128, slower=10)
    assert check is not None and check.calibration is not None
    assert "too small for the speed model to apply" in check.calibration
    assert _record(env) is None


def test_a_tiny_models_short_request_is_refused_for_its_size_not_the_hosts_load(tiny, idle_host):
    """A toy model's request is over in milliseconds, too short for /proc to tell the
    host's load: the reason given is the one no longer request changes, its size."""
    watch_for, proc, clock, env = idle_host
    watch = watch_for(tiny)
    predicted = watch.predict(False, 32 + 64, 128)
    assert predicted is not None
    ms = 128 / (predicted / 10) * 1000
    watch.feed(_start(1))
    clock.t += ms / 1000
    proc.advance(total=10, server=5)  # fewer ticks than the meter needs to tell
    watch.feed(_line(1, True, 32, 10.0))
    check = watch.feed(_line(1, False, 128, ms))
    assert check is not None and check.large_miss and check.calibration is not None
    assert "too small for the speed model to apply" in check.calibration
    assert "could not be told" not in check.calibration
    assert _record(env) is None


def test_a_request_beside_another_or_a_busy_gpu_is_not_kept(large, idle_host):
    watch_for, proc, clock, env = idle_host
    watch = watch_for(large)
    watch.feed(_start(7))  # another request, still running
    check = _serve(watch, proc, clock, 8, 128, slower=3)
    assert check is not None and "another request" in (check.calibration or "")
    assert _record(env) is None
    watch.feed(_stop(7))
    # a request whose release line never came is over once its generation is timed
    watch.feed(_start(10))
    watch.feed(_line(10, False, 4, 1.0))
    check = _serve(watch, proc, clock, 11, 128, slower=3)
    assert check is not None and "kept as a calibration point" in (check.calibration or "")
    busy = watch_for(large, gpu_busy=lambda: 80.0)
    check = _serve(busy, proc, clock, 9, 128, slower=3)
    assert check is not None and "kept a GPU 80% busy" in (check.calibration or "")


def test_served_points_are_held_until_three_agree_then_move_a_bounded_step(large, idle_host):
    watch_for, proc, clock, env = idle_host
    first = watch_for(large)
    before = first.predict(False, 128, 128)
    assert before is not None
    check = _serve(first, proc, clock, 1, 128, slower=2)
    assert check is not None
    assert check.calibration == (
        "kept as a calibration point, held: 1 of the 3 agreeing ones a calibration waits for"
    )
    # once per kind and launch: the next request of this launch is shown, not kept
    assert _serve(first, proc, clock, 2, 128, slower=2).calibration is None
    record = _record(env)
    assert record is not None and record.calibration.held == 1
    assert local_calibration([], local_host(), env) is None  # nothing applies yet
    second = watch_for(large)
    assert second.predict(False, 128, 128) == pytest.approx(before)
    _serve(second, proc, clock, 1, 128, slower=2)
    third = watch_for(large)
    check = _serve(third, proc, clock, 1, 128, slower=2)
    # three agree: the host's decode scale moves, at most 1.25x a point (not the 2x measured)
    assert check is not None and check.calibration == (
        "kept as a calibration point: host decode now x1.95 (was x1.00)"
    )
    cal = local_calibration([], local_host(), env)
    assert cal is not None and cal.points == 3 and cal.held == 0
    assert cal.note().startswith("calibrated on this rig from 3 points, ")
    after = watch_for(large).predict(False, 128, 128)
    assert after is not None and after == pytest.approx(before / 1.953, rel=0.02)
    # an outlier later (ten times slower) is held: it does not agree with the three
    check = _serve(watch_for(large), proc, clock, 1, 128, slower=10)
    assert check is not None
    assert check.calibration == "kept as a calibration point; the calibration stays as it was"
    cal = local_calibration([], local_host(), env)
    assert cal is not None and cal.held == 1 and cal.host_decode == pytest.approx(1.953, rel=1e-3)


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


def test_the_launch_view_and_command_say_what_became_of_a_request(tiny, idle_host, capsys):
    from lltui.app.screens.launch import render_rates
    from lltui.commands.launch_output import StatePrinter
    from lltui.services.launch.state import LaunchState, Speed, Tail
    from lltui.services.launch.watch import LaunchWatch

    watch_for, proc, clock, _env = idle_host
    check = _serve(watch_for(tiny), proc, clock, 1, 128, slower=10)
    st = LaunchState(phase="ready", speed=Speed(served=Tail(limit=16).add([check])))
    text = render_rates(st, 200)
    assert "measured -90% vs predicted; not kept as a calibration point: the model" in text
    # the command: the launch's watch times the server's lines, its printer says each request
    watch = LaunchWatch(None, StatePrinter(lambda st: [], as_json=True))
    watch._speed = watch_for(tiny)
    watch._line(_start(2))
    proc.advance(total=200)
    for line in (_line(2, True, 32, 10.0), _line(2, False, 128, 30000.0)):
        watch._line(line)
    watch._fold_inbox(clock())
    event = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert event["event"] == "speed" and not event["kept"]
    assert "too small" in event["calibration"]


def test_a_servers_rpc_devices_are_in_its_served_prediction(llama_bins, large, tmp_path):
    """A launch with --rpc: its served requests are predicted with the rpc-servers' devices
    too (before, on this machine's devices alone: the prediction of another command)."""
    from support.llama_fixture import rpc_servers

    from lltui.core.fit.estimate import estimate
    from lltui.core.memory.results import FitOptions
    from lltui.services.devices import with_rpc
    from lltui.services.fit import read_model

    with rpc_servers(llama_bins, 2, tmp_path) as servers:
        endpoints = ",".join(f"127.0.0.1:{s.port}" for s in servers)
        args = parse_llama_args(["-m", str(large), "-c", "4096", "-t", "1", "--rpc", endpoints])
        watch = SpeedWatch.for_command(args, [], store=False)
        assert watch is not None
        devices = with_rpc([], args.rpc)[0]
    assert [d.kind for d in devices] == ["rpc", "rpc"]
    res = estimate(read_model(str(large)), args, devices, FitOptions(search=False))
    assert [d.name for d in watch.basis.result.devices] == [d.name for d in res.devices]


def test_a_launch_says_its_speed_predictions_are_this_rigs_calibrated_ones(large, idle_host):
    """Launch held each served request against a calibrated prediction but never said so
    (fit says it): the ready line and event now do, and nothing where none applies."""
    from lltui.commands.launch_output import ready_event, ready_lines
    from lltui.core.hardware.calibration import Calibration
    from lltui.services.launch.state import LaunchState, Speed

    watch_for, _proc, _clock, env = idle_host

    def ready(watch: SpeedWatch) -> tuple[dict, list[str]]:
        speed = Speed(calibrated=watch.calibrated)
        event = ready_event(LaunchState(url="http://127.0.0.1:8080", pid=7, speed=speed))
        return event, ready_lines(event)

    event, lines = ready(watch_for(large))
    assert event["calibrated"] is None and not any("calibrated" in ln for ln in lines)
    rig = local_rig([], local_host())
    cal = Calibration(rig.describe(), "2026-01-02", host_decode=2.0, points=2)
    rig_store.save(rig_store.RigRecord(rig, "b1", cal), env)
    event, lines = ready(watch_for(large))
    said = "calibrated on this rig from 2 points, 2026-01-02"
    assert event["calibrated"] == said
    assert f"  speed predictions: {said}" in lines

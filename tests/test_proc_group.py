"""The process toolkit: stopping a process group (every member, a child that ignores SIGTERM
or was left in the background included) and the periodic loop (never overlapping, woken,
parked, stopped). Real processes; waits on conditions."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.proc_helpers import gone, wait_for

from lltui.core.periodic import Periodic
from lltui.sources.proc_group import group_gone, stop_group, stop_process


def _group(script: str, pidfile: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    assert wait_for(lambda: pidfile.exists() and pidfile.read_text().endswith("\n"))
    return proc


def test_a_leader_that_ignores_sigterm_and_its_child_are_killed(tmp_path):
    pidfile = tmp_path / "child"
    proc = _group(f"trap '' TERM; sleep 300 & echo $! > {pidfile}; wait; sleep 300", pidfile)
    started = time.monotonic()
    code = stop_process(proc, ((signal.SIGTERM, 0.5), (signal.SIGKILL, 5.0)))
    assert code == -signal.SIGKILL and time.monotonic() - started < 10
    child = int(pidfile.read_text())
    assert wait_for(lambda: gone(child), 10)


def test_a_child_left_behind_that_ignores_sigterm_gets_sigkill(tmp_path):
    pidfile = tmp_path / "child"
    # the leader ends at SIGTERM; its child ignores it and would live on
    script = f"(trap '' TERM; exec sleep 300) & echo $! > {pidfile}; sleep 300"
    proc = _group(script, pidfile)
    child = int(pidfile.read_text())
    assert wait_for(lambda: "300" in Path(f"/proc/{child}/cmdline").read_text())  # exec'd
    stop_process(proc, ((signal.SIGTERM, 0.5), (signal.SIGKILL, 5.0)))
    assert proc.returncode == -signal.SIGTERM
    assert wait_for(lambda: gone(child), 10)


def test_a_group_that_ends_by_itself_is_not_waited_out(tmp_path):
    proc = subprocess.Popen(["sh", "-c", "exit 3"], start_new_session=True)
    assert group_gone(proc)(30)
    started = time.monotonic()
    sent: list[int] = []
    assert stop_group(proc.pid, group_gone(proc), send=lambda _p, s: bool(sent.append(s)))
    assert proc.returncode == 3 and time.monotonic() - started < 5
    assert sent == [signal.SIGTERM, signal.SIGKILL]  # the sweep finds nobody


def test_periodic_never_overlaps_a_slow_step_and_stops():
    running, most, runs = [0], [0], [0]
    lock = threading.Lock()

    def step() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.03)  # longer than the interval: the next run waits for this one
        with lock:
            running[0] -= 1
            runs[0] += 1

    loop = Periodic(step, 0.001, name="test-periodic")
    loop.start()
    assert wait_for(lambda: runs[0] >= 5)
    loop.stop(join_s=10)
    after = runs[0]
    assert most[0] == 1 and loop.stopped
    time.sleep(0.1)  # nothing runs once stopped
    assert runs[0] == after


def test_periodic_parks_on_an_infinite_pace_until_woken():
    runs = []
    loop = Periodic(lambda: runs.append(1), 0.001, pace=lambda: math.inf)
    loop.start()
    assert wait_for(lambda: len(runs) == 1)
    time.sleep(0.1)
    assert len(runs) == 1  # parked
    loop.wake()
    assert wait_for(lambda: len(runs) == 2)
    loop.stop(join_s=10)


def test_periodic_runs_on_the_callers_thread_until_a_step_stops_it():
    seen: list[str] = []

    def step() -> None:
        seen.append(threading.current_thread().name)
        if len(seen) == 3:
            loop.stop()

    loop = Periodic(step, 0.001)
    loop.run()
    assert seen == [threading.current_thread().name] * 3


def test_a_probe_that_hangs_is_killed_with_what_it_started(tmp_path):
    """subprocess.run's timeout killed the program alone: a llama-server that is a wrapper
    script left its child (here a sleep) running with parent 1."""
    from lltui.sources.llama.binary import LlamaBinaryError, list_devices

    pid_file = tmp_path / "child.pid"
    fake = tmp_path / "llama-server"
    fake.write_text(f"#!/bin/sh\nsleep 1000 &\necho $! > {pid_file}\nwait\n")
    fake.chmod(0o755)
    with pytest.raises(LlamaBinaryError, match="did not answer"):
        list_devices(str(fake), timeout_s=1.0)
    assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
    child = int(pid_file.read_text())
    assert wait_for(lambda: gone(child))


def test_a_command_that_prints_without_end_is_killed_past_its_output_limit():
    """A remote host's answer was read whole, however long."""
    import sys

    from lltui.sources.proc_group import OutputTooLong, run_group

    endless = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    start = time.monotonic()
    with pytest.raises(OutputTooLong, match="more than 1 MiB"):
        run_group([sys.executable, "-c", endless], 60.0, max_bytes=1 << 20)
    assert time.monotonic() - start < 30  # the limit ended it, not the timeout
    both = "import sys\nprint('a\\r\\nb')\nsys.stderr.write('e')"
    done = run_group([sys.executable, "-c", both], 30)
    assert (done.returncode, done.stdout, done.stderr) == (0, "a\nb\n", "e")


def _hung(pid_file: Path) -> str:
    """A command that writes its pid to ``pid_file`` and sleeps."""
    return f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)"


def _pid_in(path: Path) -> int | None:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


def _waiting_on_output(pid: int, threads: int = 1) -> bool:
    """``threads`` of process ``pid`` wait in epoll (run_group reading its commands'
    output: each registered with the reaper by then)."""
    waiting = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            waiting += (task / "wchan").read_text() in ("do_epoll_wait", "ep_poll")
    return waiting >= threads


def _reaper_of(pid: int) -> int | None:
    import psutil

    return next((c.pid for c in psutil.Process(pid).children() if "-I" in c.cmdline()[1:3]), None)


def test_what_run_group_runs_dies_with_an_lltui_that_is_killed(tmp_path):
    """atexit never runs on SIGKILL: a hung ssh of a fleet's poll lived on. A reaper that
    was itself killed is started anew and told of every group that runs, not only the
    next one."""
    import sys

    first, second, go = tmp_path / "a.pid", tmp_path / "b.pid", tmp_path / "go"
    lltui = (
        "import os, sys, threading, time\nfrom lltui.sources.proc_group import run_group\n"
        f"threading.Thread(target=run_group, args=([sys.executable, '-c', {_hung(first)!r}], 600),"
        " daemon=True).start()\n"
        f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.02)\n"
        f"run_group([sys.executable, '-c', {_hung(second)!r}], 600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", lltui])
    try:
        assert wait_for(lambda: _pid_in(first) and _waiting_on_output(parent.pid))
        reaper = _reaper_of(parent.pid)
        assert reaper is not None
        os.kill(reaper, signal.SIGKILL)  # (the OOM killer, a user's kill)
        assert wait_for(lambda: gone(reaper))
        go.write_text("")
        assert wait_for(lambda: _pid_in(second) and _waiting_on_output(parent.pid, 2))
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        for path in (first, second):
            child = _pid_in(path)
            assert child and wait_for(lambda c=child: gone(c)), f"{path.name} outlived lltui"
    finally:
        parent.kill()
        parent.wait(10)
        for path in (first, second):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(_pid_in(path), signal.SIGKILL)  # type: ignore[arg-type]

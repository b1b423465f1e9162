"""Stopping a process group: the one way lltui ends what it started; and a process that dies
with lltui's (:func:`dies_with_us`).

Everything lltui runs that may start processes of its own (llama-server, llama-bench, a
build, an ssh session, an alert hook, a browser tab's app) runs as the leader of a process
group of its own (``start_new_session=True``). :func:`stop_group` ends such a group: each
step sends a signal to the whole group and waits on a condition (never a fixed sleep), and
whatever is left at the end, a background child the leader left behind included, gets
SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence

# (signal or None, seconds to wait after it); None: nothing sent, the caller asked politely
Step = tuple[int | None, float]
TERM_THEN_KILL: tuple[Step, ...] = ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
_POLL_MAX_S = 0.05  # the longest nap while looking whether a group has emptied


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to every process of group ``pgid``; False when none is left (or none
    is ours to signal)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_group(
    pgid: int,
    ended: Callable[[float], bool],
    steps: Sequence[Step] = TERM_THEN_KILL,
    *,
    send: Callable[[int, int], bool] = signal_group,
) -> bool:
    """Stop the process group ``pgid``. Each step sends its signal to the group and waits up
    to its seconds on ``ended`` (True once what the caller waits for has ended); then
    SIGKILL to what is left of the group. True when it ended within the steps.

    ``send`` replaces :func:`signal_group` where the caller guards the group id (a
    supervisor that must not signal a group whose leader it has reaped)."""
    done = False
    for sig, wait_s in steps:
        if sig is not None:
            send(pgid, sig)
        if ended(wait_s):
            done = True
            break
    send(pgid, signal.SIGKILL)  # what the leader left behind in the background
    return done


def group_gone(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> Callable[[float], bool]:
    """A condition for :func:`stop_group`: ``proc`` (a group leader) has exited, is reaped,
    and no process is left in its group. The group's id cannot be taken by another group
    while one of its members lives, so signalling it until it is empty is safe."""

    def ended(timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        nap = 0.002
        while True:
            if proc.poll() is not None and not signal_group(proc.pid, 0):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(nap, left))  # no event tells a group has emptied: look again
            nap = min(nap * 2, _POLL_MAX_S)

    return ended


def stop_process(
    proc: subprocess.Popen[bytes] | subprocess.Popen[str], steps: Sequence[Step] = TERM_THEN_KILL
) -> int | None:
    """Stop ``proc`` (started with ``start_new_session=True``) and everything in its group,
    and reap it; its return code (None only if even SIGKILL did not end it)."""
    stop_group(proc.pid, group_gone(proc), steps)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(steps[-1][1] if steps else 5.0)
    return proc.returncode


def run_group(
    argv: Sequence[str], timeout_s: float, *, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end as the leader of a group of its own, its output captured as
    text (bad bytes replaced). Past ``timeout_s`` the whole group is killed, what the
    program started included (``subprocess.run``'s timeout kills the program alone: a
    wrapper script's children lived on), and subprocess.TimeoutExpired raised. OSError
    where it cannot start."""
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
        errors="replace",
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    with _RUNNING_LOCK:
        _RUNNING.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:  # the timeout, or lltui stopping while it waits
        stop_process(proc, ((signal.SIGKILL, 5.0),))
        try:
            proc.communicate(timeout=KILLED_DRAIN_S)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            # another process holds the pipes (an ssh master holds a multiplexed session's
            # output until the remote command ends): never wait on it
            for pipe in (proc.stdout, proc.stderr):
                with contextlib.suppress(OSError):
                    if pipe is not None:
                        pipe.close()
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)


# what run_group runs now: one a caller gave up on (a poll thread of a fleet host that
# hangs) is stopped, with its group, when lltui exits, not left to end by its timeout
_RUNNING: set[subprocess.Popen[str]] = set()
_RUNNING_LOCK = threading.Lock()
KILLED_DRAIN_S = 1.0  # what a killed command's pipes are read for, at most


@atexit.register
def _kill_running() -> None:
    with _RUNNING_LOCK:
        left = list(_RUNNING)
    for proc in left:
        signal_group(proc.pid, signal.SIGKILL)


# Runs in the child between fork and the program: ask the kernel for the death signal when
# the parent thread dies, make sure the parent did not die already, then become the program.
_SHIM = r"""
import os, sys
parent, deathsig = int(sys.argv[1]), int(sys.argv[2])
if deathsig:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, deathsig, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)
try:
    os.execv(sys.argv[3], sys.argv[3:])
except OSError as exc:
    sys.stderr.write("lltui: cannot run %s: %s\n" % (sys.argv[3], exc.strerror))
    os._exit(127)
"""


def dies_with_us(
    argv: Sequence[str], deathsig: int = int(signal.SIGTERM), *, isolated: bool = False
) -> list[str]:
    """``argv`` (a program's path first) run through the shim above: the kernel sends
    ``deathsig`` to it when the thread of this process that starts it dies, even by SIGKILL
    (0: no signal, the program outlives lltui). ``isolated``: the shim's Python reads no
    environment, user site or site-packages (nothing of the user's runs before the program)."""
    python = [sys.executable, "-I", "-S"] if isolated else [sys.executable]
    return [*python, "-c", _SHIM, str(os.getpid()), str(deathsig), *argv]

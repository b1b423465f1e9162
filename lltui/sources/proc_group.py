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
import selectors
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


MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # what a command may print, its two streams together


class OutputTooLong(OSError):
    """A command printed more than :data:`MAX_OUTPUT_BYTES` (a remote host's answer, read
    whole, had no bound)."""


def run_group(
    argv: Sequence[str],
    timeout_s: float,
    *,
    env: Mapping[str, str] | None = None,
    max_bytes: int = MAX_OUTPUT_BYTES,
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end as the leader of a group of its own, its output captured as
    text (bad bytes replaced). Past ``timeout_s`` the whole group is killed, what the
    program started included (``subprocess.run``'s timeout kills the program alone: a
    wrapper script's children lived on), and subprocess.TimeoutExpired raised; past
    ``max_bytes`` of output it is killed too, and :class:`OutputTooLong` raised. OSError
    where it cannot start. The group is killed when lltui ends, however it ends
    (:func:`_tell_reaper`)."""
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    try:
        with _RUNNING_LOCK:
            _RUNNING.add(proc)
            _tell_reaper(f"+{proc.pid}")
        out, err = _read_capped(proc, timeout_s, max_bytes)
    except BaseException:  # the timeout, too much output, or lltui stopping while it waits
        # (never wait for the pipes to close: an ssh master holds a multiplexed session's
        # output until the remote command ends)
        stop_process(proc, ((signal.SIGKILL, 5.0),))
        raise
    finally:
        for pipe in (proc.stdout, proc.stderr):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        with _RUNNING_LOCK:
            _RUNNING.discard(proc)
            _tell_reaper(f"-{proc.pid}")
    return subprocess.CompletedProcess(list(argv), proc.returncode, _text(out), _text(err))


def _read_capped(
    proc: subprocess.Popen[bytes], timeout_s: float, max_bytes: int
) -> tuple[bytes, bytes]:
    """``proc``'s two streams read to their end and ``proc`` reaped, within ``timeout_s``
    and ``max_bytes``."""
    deadline = time.monotonic() + timeout_s
    chunks: dict[int, list[bytes]] = {}
    size = 0
    with selectors.DefaultSelector() as sel:
        for pipe in (proc.stdout, proc.stderr):
            assert pipe is not None
            sel.register(pipe, selectors.EVENT_READ)
            chunks[pipe.fileno()] = []
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout_s)
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                size += len(chunk)
                if size > max_bytes:
                    raise OutputTooLong(f"printed more than {max_bytes // (1 << 20)} MiB")
                chunks[key.fd].append(chunk)
    proc.wait(max(0.0, deadline - time.monotonic()))  # TimeoutExpired past the deadline
    out, err = (b"".join(c) for c in chunks.values())
    return out, err


def _text(data: bytes) -> str:
    """What text mode gave: UTF-8 with bad bytes replaced, line ends made \\n."""
    return data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")


# what run_group runs now: one a caller gave up on (a poll thread of a fleet host that
# hangs) is stopped, with its group, when lltui exits, not left to end by its timeout
_RUNNING: set[subprocess.Popen[bytes]] = set()
_RUNNING_LOCK = threading.Lock()


@atexit.register
def _kill_running() -> None:
    with _RUNNING_LOCK:
        left = list(_RUNNING)
    for proc in left:
        signal_group(proc.pid, signal.SIGKILL)


# The reaper: one small process per lltui that reads the groups run_group runs (+PGID, -PGID)
# and, once its input ends (lltui is gone, a SIGKILL included, where atexit never runs),
# kills what is left: a hung ssh of a fleet's poll lived on until its remote command ended.
_REAPER_CODE = r"""
import collections, os, signal, sys
groups = collections.Counter()  # (a pid reused by a new group before its old one's "-")
for line in sys.stdin:
    groups[int(line[1:])] += 1 if line[0] == "+" else -1
for pgid in [g for g, n in groups.items() if n > 0]:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""
_reaper_proc: subprocess.Popen[bytes] | None = None


def _tell_reaper(line: str) -> None:
    """Tell the reaper (started on first use) of a group; called under _RUNNING_LOCK. A
    reaper started anew (the last one was killed) is told every group that runs."""
    global _reaper_proc
    proc = _reaper_proc
    if proc is None or proc.poll() is not None:
        try:
            proc = _reaper_proc = subprocess.Popen(
                [sys.executable or "python3", "-I", "-S", "-c", _REAPER_CODE],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # (a Ctrl-C to the terminal's group must not end it)
            )
        except OSError:
            return  # lltui's own exit still kills what runs
        running = [p.pid for p in _RUNNING if f"+{p.pid}" != line]
        line = "".join(f"+{pid}\n" for pid in running) + line
    assert proc.stdin is not None
    with contextlib.suppress(OSError):
        proc.stdin.write(f"{line}\n".encode())
        proc.stdin.flush()


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

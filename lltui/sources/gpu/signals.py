"""Signals to local processes: whose a process is, and ``os.kill`` (no shell, no helper).

The monitor offers a signal only for a process this user may signal (kill(2)'s rule, see
:func:`lltui.core.monitor.signals.may_signal`), checked against the process's real owner. A
signal goes only to the process that was shown: a pid that has exited is reported gone, one
reused by a later process since (another start time) is not signalled.
"""

from __future__ import annotations

import os
import signal

import psutil

from lltui.core.monitor.signals import (
    SIGNALS,
    ProcessIdentity,
    SignalCheck,
    SignalOutcome,
    gone_line,
    may_signal,
    not_permitted_line,
    reused_line,
    sent_line,
)

_NUMBERS = {"TERM": signal.SIGTERM, "KILL": signal.SIGKILL}


def caller_ids() -> tuple[int, int]:
    """This process's real and effective uid."""
    return os.getuid(), os.geteuid()


def deliver(pid: int, signum: int) -> None:
    """``kill(pid, signum)``: the one place a signal leaves lltui's monitor."""
    os.kill(pid, signum)


def identify(pid: int) -> ProcessIdentity | None:
    """The local process ``pid`` (owner, command, start time), or None when there is none."""
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            uids = proc.uids()
            try:
                user = proc.username()
            except (KeyError, psutil.Error):  # a uid without a passwd entry
                user = str(uids.real)
            try:
                cmdline = proc.cmdline()
            except psutil.AccessDenied:
                cmdline = []
            return ProcessIdentity(
                pid=pid,
                user=user,
                command=" ".join(cmdline) if cmdline else proc.name(),
                uid_real=uids.real,
                uid_saved=uids.saved,
                started=proc.create_time(),
            )
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    except (psutil.Error, OSError, ValueError):  # ValueError: a negative pid
        return None


def still_running(target: ProcessIdentity) -> bool:
    """Whether ``target`` still runs (the same process: a pid reused since is not it; a
    zombie has exited)."""
    now = identify(target.pid)
    return now is not None and abs(now.started - target.started) <= 0.01


def check_signal(pid: int) -> SignalCheck:
    """Whether this user may signal ``pid``, with the process or the reason it may not."""
    target = identify(pid)
    if target is None:
        return SignalCheck(None, gone_line(pid))
    real, effective = caller_ids()
    if not may_signal(real, effective, target):
        return SignalCheck(target, not_permitted_line(pid, target.user))
    return SignalCheck(target)


def send_signal(target: ProcessIdentity, name: str) -> SignalOutcome:
    """Send SIG``name`` (TERM or KILL) to ``target`` if it is still the same process."""
    if name not in SIGNALS:
        raise ValueError(f"unknown signal {name!r}; one of {', '.join(SIGNALS)}")
    now = identify(target.pid)
    if now is None:
        return SignalOutcome(False, gone_line(target.pid), gone=True)
    if abs(now.started - target.started) > 0.01:
        return SignalOutcome(False, reused_line(target.pid), gone=True)
    try:
        deliver(target.pid, _NUMBERS[name])
    except ProcessLookupError:
        return SignalOutcome(False, gone_line(target.pid), gone=True)
    except PermissionError:
        return SignalOutcome(False, not_permitted_line(target.pid, now.user))
    except OSError as exc:
        return SignalOutcome(False, f"SIG{name} to pid {target.pid} failed: {exc.strerror}")
    return SignalOutcome(True, sent_line(name, target))

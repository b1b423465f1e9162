"""Signalling a GPU process from the monitor: who may, what the user is told.

Pure rules and models; :mod:`lltui.sources.gpu.signals` reads the process and sends the signal.
"""

from __future__ import annotations

from dataclasses import dataclass

SIGNALS: tuple[str, ...] = ("TERM", "KILL")


@dataclass(frozen=True, slots=True)
class ProcessIdentity:
    """One local process as the host sees it when a signal is offered: who owns it and
    when it started (a pid reused by another process since has another start time)."""

    pid: int
    user: str
    command: str
    uid_real: int
    uid_saved: int
    started: float  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class SignalCheck:
    """Whether this user may signal a pid: the process when it may (``message`` None), or
    the one line that says why not."""

    target: ProcessIdentity | None
    message: str | None = None

    @property
    def allowed(self) -> bool:
        return self.target is not None and self.message is None


@dataclass(frozen=True, slots=True)
class SignalOutcome:
    """What sending one signal did, in one line."""

    sent: bool
    message: str
    gone: bool = False  # the process is no longer there (exited, or its pid was reused)


def may_signal(caller_real: int, caller_effective: int, target: ProcessIdentity) -> bool:
    """kill(2)'s rule: root (CAP_KILL), or the caller's real or effective uid is the
    target's real or saved uid."""
    if caller_effective == 0:
        return True
    return bool({caller_real, caller_effective} & {target.uid_real, target.uid_saved})


def gone_line(pid: int) -> str:
    return f"pid {pid} is gone: it has exited"


def not_permitted_line(pid: int, user: str) -> str:
    return f"not permitted: pid {pid} belongs to {user}"


def reused_line(pid: int) -> str:
    return f"pid {pid} is now another process: not signalled"


def sent_line(signal: str, target: ProcessIdentity) -> str:
    command = target.command if len(target.command) <= 60 else target.command[:59] + "…"
    return f"SIG{signal} sent to pid {target.pid} ({command})"

"""Waiting on real processes in tests: whether one is gone, and a condition polled until it
holds or a deadline passes (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def gone(pid: int) -> bool:
    """No such process, or one that has exited (a zombie whoever adopted it has not reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def wait_for(condition: Callable[[], object], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True

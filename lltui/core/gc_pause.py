"""The cycle collector held off while a large structure of many small objects is built.

CPython runs its cycle collector as allocations pile up, each full pass walking every
object still alive: building a million tensor entries (or a history of samples) triggers
pass after pass over what was already built. Nothing such a build makes is a cycle, so the
collector is paused for its duration and then resumed. Pausing is process-wide; so that
threads that pause at once never leave it paused, it is resumed when the last one is done.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_resume = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block (reference counting goes on)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()

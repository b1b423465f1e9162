"""The one interface every GPU source implements."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from lltui.core.monitor.models import RigInfo, RigSample

Clock = Callable[[], float]


@runtime_checkable
class GpuSource(Protocol):
    """A source of :class:`RigSample` snapshots.

    ``open`` raises :class:`lltui.core.monitor.models.SourceUnavailable` with a one-line reason when
    the source cannot run here; ``poll`` never raises for a field or a GPU that fails (those
    become ``None`` or a lost GPU), only for the whole source failing, and callers catch that.
    ``poll`` is called from one worker thread at a time.
    """

    name: str

    def open(self) -> RigInfo: ...

    def poll(self) -> RigSample: ...

    def close(self) -> None: ...


class SequenceCounter:
    """Numbers samples of one source: 1, 2, 3, ..."""

    def __init__(self) -> None:
        self._it = itertools.count(1)

    def next(self) -> int:
        return next(self._it)


def wall_clock() -> float:
    return time.time()


def mono_clock() -> float:
    return time.monotonic()

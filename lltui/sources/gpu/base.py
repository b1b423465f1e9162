"""What GPU sources share: sample numbers and clocks (the interface, GpuSource, is the
core's: lltui.core.monitor.models)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

Clock = Callable[[], float]
PROCESS_TTL_S = 2.0  # how long a source keeps the process lists it read


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

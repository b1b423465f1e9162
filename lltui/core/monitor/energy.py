"""Joules per generated token, from GPU energy counters and the server's token counter."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from lltui.core.monitor.models import RigSample


@dataclass(frozen=True, slots=True)
class EnergyPoint:
    t: float  # monotonic seconds
    energy_mj: int  # summed counters of the GPUs the server uses
    tokens: float  # generated tokens so far


def rig_energy_mj(sample: RigSample, gpu_indexes: set[int] | None = None) -> int | None:
    """The summed energy counters of the chosen GPUs (all when None); None when any of them
    has no counter (Volta and newer have one), so a partial sum is never shown."""
    total = 0
    seen = False
    for g in sample.gpus:
        if gpu_indexes is not None and g.info.index not in gpu_indexes:
            continue
        if g.lost or g.energy_mj is None:
            return None
        total += g.energy_mj
        seen = True
    return total if seen else None


class JoulesPerToken:
    """Pairs of (energy, tokens) over a sliding window; J/token over the window's span.

    Counters, not sampled power: the energy used between two readings divided by the tokens
    generated between them, so idle time between requests is charged to the tokens around it.
    """

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._points: deque[EnergyPoint] = deque()

    def add(self, point: EnergyPoint) -> None:
        if self._points and (
            point.energy_mj < self._points[-1].energy_mj or point.tokens < self._points[-1].tokens
        ):
            self._points.clear()  # a counter went back: a driver reload or a new server
        self._points.append(point)
        while self._points and point.t - self._points[0].t > self.window_s:
            self._points.popleft()

    def value(self) -> float | None:
        if len(self._points) < 2:
            return None
        first, last = self._points[0], self._points[-1]
        tokens = last.tokens - first.tokens
        if tokens <= 0:
            return None
        return (last.energy_mj - first.energy_mj) / 1000.0 / tokens

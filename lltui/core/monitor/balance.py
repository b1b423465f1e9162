"""Load balance across the GPUs that serve one process (a llama-server split over GPUs).

A split is judged by the process's own memory on each GPU, not by how full each GPU is: a
shared box has other people's jobs beside it, and their memory says nothing about how evenly
llama.cpp spread the model. Those other processes are named, so the user sees why a GPU is
fuller than the split alone would make it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lltui.core.monitor.models import RigSample

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class Neighbour:
    """Another process on some of the GPUs a split uses, with what it holds there."""

    pid: int
    name: str
    gpu_indexes: tuple[int, ...]
    used_bytes: int | None  # over those GPUs; None where the driver does not say


@dataclass(frozen=True, slots=True)
class Imbalance:
    pid: int
    name: str
    gpu_indexes: tuple[int, ...]
    own_bytes: tuple[int | None, ...]  # the process's memory on each GPU, gpu_indexes order
    # each GPU's whole fill, utilisation and power, for the detail (None: not reported)
    vram_pct: tuple[float | None, ...]
    util_pct: tuple[float | None, ...]
    power_pct: tuple[float | None, ...]
    # ± % around the mean of the process's own memory per GPU (None: a GPU does not say)
    vram_spread: float | None
    util_spread: float | None  # max - min, percentage points (None: a GPU does not say)
    fullest: int | None  # GPU index holding the most of the process's memory
    emptiest: int | None
    busiest: int | None
    neighbours: tuple[Neighbour, ...] = ()  # other processes on these GPUs, biggest first

    @property
    def level(self) -> str:
        """ok / uneven / skewed, from the larger spread (the memory's range around its mean
        counts as twice its ± figure, like the utilisation's range); unknown where the GPUs
        report neither."""
        vram = None if self.vram_spread is None else 2 * self.vram_spread
        known = [x for x in (vram, self.util_spread) if x is not None]
        if not known:
            return "unknown"
        worst = max(known)
        if worst < 10:
            return "ok"
        if worst < 25:
            return "uneven"
        return "skewed"


def imbalances(sample: RigSample) -> list[Imbalance]:
    """One entry per process that holds memory on two or more GPUs, largest first."""
    by_pid: dict[int, dict[int, int | None]] = {}  # pid -> GPU position -> bytes
    names: dict[int, str] = {}
    for pos, g in enumerate(sample.gpus):
        if g.lost:
            continue
        for p in g.processes:
            if p.kind == "G":
                continue
            on = by_pid.setdefault(p.pid, {})
            before = on.get(pos)
            mem = p.used_memory
            on[pos] = mem if before is None else before + (mem or 0)
            names[p.pid] = p.name or str(p.pid)
    out = [
        _imbalance(sample, pid, names[pid], on, by_pid, names)
        for pid, on in by_pid.items()
        if len(on) >= 2
    ]
    out.sort(key=lambda im: -sum(b or 0 for b in im.own_bytes))
    return out


def _imbalance(
    sample: RigSample,
    pid: int,
    name: str,
    on: dict[int, int | None],
    by_pid: dict[int, dict[int, int | None]],
    names: dict[int, str],
) -> Imbalance:
    positions = sorted(on)
    gs = [sample.gpus[i] for i in positions]
    idx = tuple(g.info.index for g in gs)
    own = tuple(on[i] for i in positions)
    util = tuple(g.util_gpu for g in gs)
    fill = tuple(g.memory_pct for g in gs)
    known = [b for b in own if b is not None]
    by: Sequence[float | int | None] = own  # what the fullest and emptiest are judged by
    if len(known) == len(own) and known and sum(known) > 0:
        mean = sum(known) / len(known)
        spread: float | None = (max(known) - min(known)) / 2 / mean * 100
    else:  # the driver hides per-process memory: fall back on each GPU's fill
        by, spread = fill, _range(fill)
        spread = None if spread is None else spread / 2
    return Imbalance(
        pid=pid,
        name=name,
        gpu_indexes=idx,
        own_bytes=own,
        vram_pct=fill,
        util_pct=util,
        power_pct=tuple(g.power_pct for g in gs),
        vram_spread=spread,
        util_spread=_range(util),
        fullest=_at(idx, by, max) if spread is not None else None,
        emptiest=_at(idx, by, min) if spread is not None else None,
        busiest=_at(idx, util, max) if None not in util else None,
        neighbours=_neighbours(sample, pid, set(positions), by_pid, names),
    )


def _range(values: tuple[float | None, ...]) -> float | None:
    """max - min; None where one is not reported (an unknown is no 0)."""
    if None in values:
        return None
    known = [v for v in values if v is not None]
    return max(known) - min(known)


def _at(
    idx: tuple[int, ...], values: Sequence[float | int | None], pick: Callable[..., Any]
) -> int:
    """The GPU index of the largest (``max``) or smallest (``min``) of known ``values``."""
    known = [v for v in values if v is not None]
    return idx[list(values).index(pick(known))]


def _neighbours(
    sample: RigSample,
    pid: int,
    positions: set[int],
    by_pid: dict[int, dict[int, int | None]],
    names: dict[int, str],
) -> tuple[Neighbour, ...]:
    out = []
    for other, on in by_pid.items():
        shared = sorted(positions & set(on))
        if other == pid or not shared:
            continue
        sizes = [on[i] for i in shared]
        used = None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)
        idx = tuple(sample.gpus[i].info.index for i in shared)
        out.append(Neighbour(other, names[other], idx, used))
    out.sort(key=lambda n: -(n.used_bytes or 0))
    return tuple(out)

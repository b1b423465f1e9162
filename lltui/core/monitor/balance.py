"""Load balance across the GPUs that serve one process (a llama-server split over GPUs)."""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.monitor.models import RigSample


@dataclass(frozen=True, slots=True)
class Imbalance:
    pid: int
    name: str
    gpu_indexes: tuple[int, ...]
    vram_pct: tuple[float, ...]  # per GPU, in gpu_indexes order
    util_pct: tuple[float, ...]
    power_pct: tuple[float, ...]
    vram_spread: float  # max - min, percentage points
    util_spread: float
    fullest: int  # GPU index
    emptiest: int
    busiest: int

    @property
    def level(self) -> str:
        """ok / uneven / skewed, from the larger spread."""
        worst = max(self.vram_spread, self.util_spread)
        if worst < 10:
            return "ok"
        if worst < 25:
            return "uneven"
        return "skewed"


def imbalances(sample: RigSample) -> list[Imbalance]:
    """One entry per process that holds memory on two or more GPUs, largest first."""
    by_pid: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    held: dict[int, int] = {}
    for pos, g in enumerate(sample.gpus):
        if g.lost:
            continue
        for p in g.processes:
            if p.kind == "G":
                continue
            gpus = by_pid.setdefault(p.pid, [])
            if pos not in gpus:
                gpus.append(pos)
            names[p.pid] = p.name or str(p.pid)
            held[p.pid] = held.get(p.pid, 0) + (p.used_memory or 0)
    out = []
    for pid, positions in by_pid.items():
        if len(positions) < 2:
            continue
        gs = [sample.gpus[i] for i in positions]
        vram = tuple(g.memory_pct or 0.0 for g in gs)
        util = tuple(float(g.util_gpu or 0.0) for g in gs)
        power = tuple(g.power_pct or 0.0 for g in gs)
        idx = tuple(g.info.index for g in gs)

        out.append(
            Imbalance(
                pid=pid,
                name=names[pid],
                gpu_indexes=idx,
                vram_pct=vram,
                util_pct=util,
                power_pct=power,
                vram_spread=max(vram) - min(vram),
                util_spread=max(util) - min(util),
                fullest=idx[vram.index(max(vram))],
                emptiest=idx[vram.index(min(vram))],
                busiest=idx[util.index(max(util))],
            )
        )
    out.sort(key=lambda im: -held[im.pid])
    return out

"""The processes on each GPU: compute and graphics lists merged, across the v3/v2/v1 API
versions, then joined with what the host knows of each process."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lltui.core.monitor.models import GpuProcess
from lltui.sources.nvml.calls import MISSING, NvmlCalls, Variant
from lltui.sources.nvml.codes import VALUE_NOT_AVAILABLE_ULL
from lltui.sources.nvml.state import GpuState

if TYPE_CHECKING:
    from lltui.sources.host import HostSampler

# (kind, key, function) for each list; each function comes in _v3, _v2 and plain.
PROCESS_FAMILIES = (
    ("C", "procs_compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("G", "procs_graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
)
_VARIANTS: dict[str, tuple[Variant, ...]] = {
    key: ((f"{base}_v3", (), {}), (f"{base}_v2", (), {}), (base, (), {}))
    for _, key, base in PROCESS_FAMILIES
}
_MISSING_ONLY = frozenset({MISSING})


def used_memory(value: Any) -> int | None:
    """Bytes a process holds, or None where the driver hides it."""
    if value is None:
        return None
    used = int(value)
    return None if used in (VALUE_NOT_AVAILABLE_ULL, -1) else used


def read_processes(calls: NvmlCalls, g: GpuState) -> tuple[GpuProcess, ...]:
    """This GPU's processes, most memory first; one entry per pid ("C+G" when in both)."""
    merged: dict[int, tuple[str, int | None]] = {}
    for kind, key, _ in PROCESS_FAMILIES:
        listed = calls.versioned(g, key, _VARIANTS[key], older_on=_MISSING_ONLY)
        if listed is None:
            continue
        try:
            entries = [(int(p.pid), used_memory(p.usedGpuMemory)) for p in listed]
        except Exception as exc:
            g.errors.append(f"{key}: unreadable answer ({type(exc).__name__}: {exc})")
            continue
        for pid, used in entries:
            if pid not in merged:
                merged[pid] = (kind, used)
                continue
            kinds, known = merged[pid]
            # Both lists report the process's memory on this GPU, not a share of it.
            both = max((v for v in (known, used) if v is not None), default=None)
            merged[pid] = (kinds if kind in kinds else f"{kinds}+{kind}", both)
    out = [
        GpuProcess(pid=pid, gpu_index=g.index, used_memory=used, kind=kind)
        for pid, (kind, used) in merged.items()
    ]
    out.sort(key=lambda p: (-(p.used_memory or 0), p.pid))
    return tuple(out)


def enrich_processes(host: HostSampler | None, gpus: Sequence[GpuState]) -> None:
    """Give each live GPU its processes with host facts (name, user, command) added."""
    live = [g for g in gpus if g.lost_reason is None]
    everyone = [p for g in live for p in g.raw_procs]
    if host is None or not everyone:
        for g in live:
            g.procs = g.raw_procs
        return
    try:
        enriched = host.enrich(everyone)
    except Exception:
        enriched = tuple(everyone)  # host facts are extras; the GPU list still stands
    by_gpu: dict[int, list[GpuProcess]] = {}
    for p in enriched:
        by_gpu.setdefault(p.gpu_index, []).append(p)
    for g in live:
        g.procs = tuple(by_gpu.get(g.index, ()))

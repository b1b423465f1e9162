"""The processes on each GPU: compute and graphics lists merged, across the v3/v2/v1 API
versions, with each one's SM utilisation, then joined with what the host knows of each process.

Per-process utilisation comes from ``nvmlDeviceGetProcessesUtilizationInfo`` where the driver
has it (R550 and later), else ``nvmlDeviceGetProcessUtilization`` (Maxwell and later): one call
per GPU per process tick, and only when the GPU lists a process. NVML keeps a buffer of samples
and answers those newer than the timestamp it is given, so each GPU keeps the newest timestamp
it has read and asks only for what came since. NVML lists only processes that used the SMs in
the period: a listed process without a sample had 0 %. ``NOT_FOUND`` means no sample at all
in the period (every process 0 %); a GPU that will not say (``NOT_SUPPORTED``, MIG, no
permission, a driver without either function) gives None for every process, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lltui.core.monitor.models import GpuProcess
from lltui.core.text import error_text
from lltui.sources.gpu.nvml.calls import EMPTY, MISSING, OK, NvmlCalls, Variant
from lltui.sources.gpu.nvml.codes import ERR_NOT_FOUND, NVML_SUCCESS, VALUE_NOT_AVAILABLE_ULL
from lltui.sources.gpu.nvml.state import GpuState

if TYPE_CHECKING:
    from lltui.sources.gpu.host_facts import HostSampler

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
UTIL_KEY = "proc_util"
# newest first; the binding wraps each in a size query and a read (one call from here)
UTIL_FUNCTIONS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
# NOT_FOUND: no sample since the timestamp. SUCCESS raised: the binding's answer when the
# size query finds no sample (it raises whatever the first call returned but INSUFFICIENT_SIZE).
_NO_SAMPLES = frozenset({ERR_NOT_FOUND, NVML_SUCCESS})


def used_memory(value: Any) -> int | None:
    """Bytes a process holds, or None where the driver hides it."""
    if value is None:
        return None
    used = int(value)
    return None if used in (VALUE_NOT_AVAILABLE_ULL, -1) else used


def read_processes(calls: NvmlCalls, g: GpuState) -> tuple[GpuProcess, ...]:
    """This GPU's processes, most memory first; one entry per pid ("C+G" when in both)."""
    merged: dict[int, tuple[str, int | None]] = {}
    instances: dict[int, tuple[int | None, int | None]] = {}
    for kind, key, _ in PROCESS_FAMILIES:
        listed = calls.versioned(g, key, _VARIANTS[key], older_on=_MISSING_ONLY)
        if listed is None:
            continue
        try:
            entries = [(int(p.pid), used_memory(p.usedGpuMemory)) for p in listed]
            if g.mig is not None:  # v2/v3 entries say which MIG instance a process is in
                for p in listed:
                    instances[int(p.pid)] = (
                        _instance_id(getattr(p, "gpuInstanceId", None)),
                        _instance_id(getattr(p, "computeInstanceId", None)),
                    )
        except Exception as exc:
            g.errors.append(f"{key}: unreadable answer ({error_text(exc)})")
            continue
        for pid, used in entries:
            if pid not in merged:
                merged[pid] = (kind, used)
                continue
            kinds, known = merged[pid]
            # Both lists report the process's memory on this GPU, not a share of it.
            both = max((v for v in (known, used) if v is not None), default=None)
            merged[pid] = (kinds if kind in kinds else f"{kinds}+{kind}", both)
    util = read_process_util(calls, g) if merged else None
    out = [
        GpuProcess(
            pid=pid,
            gpu_index=g.index,
            used_memory=used,
            kind=kind,
            sm_util=None if util is None else util.get(pid, (0.0, 0.0))[0],
            mem_util=None if util is None else util.get(pid, (0.0, 0.0))[1],
            gpu_instance_id=instances.get(pid, (None, None))[0],
            compute_instance_id=instances.get(pid, (None, None))[1],
        )
        for pid, (kind, used) in merged.items()
    ]
    out.sort(key=lambda p: (-(p.used_memory or 0), p.pid))
    return tuple(out)


def _instance_id(value: Any) -> int | None:
    """A MIG instance id from a process entry; None for the "no instance" value (0xFFFFFFFF)."""
    if value is None:
        return None
    number = int(value)
    return None if number >= 0xFFFFFFFF or number < 0 else number


def read_process_util(calls: NvmlCalls, g: GpuState) -> dict[int, tuple[float, float]] | None:
    """(SM %, memory %) per pid from the samples since the last read (the newest per pid);
    ``{}`` when there was none; None when this GPU or driver will not say."""
    if UTIL_KEY in g.skip:
        return None
    for i in range(g.api.get(UTIL_KEY, 0), len(UTIL_FUNCTIONS)):
        outcome, value = calls.attempt(
            g, UTIL_FUNCTIONS[i], (g.util_seen_us,), {}, empty_on=_NO_SAMPLES
        )
        if outcome == MISSING and i + 1 < len(UTIL_FUNCTIONS):
            g.api[UTIL_KEY] = i + 1
            continue
        if outcome == EMPTY:
            return {}
        if outcome != OK:
            return calls.settle(g, UTIL_KEY, outcome, value, None)  # None, and noted
        try:
            return _newest_per_pid(g, value)
        except Exception as exc:
            g.errors.append(f"{UTIL_KEY}: unreadable answer ({error_text(exc)})")
            return None
    return None


def _newest_per_pid(g: GpuState, samples: Any) -> dict[int, tuple[float, float]]:
    newest: dict[int, tuple[int, float, float]] = {}
    seen = g.util_seen_us
    for s in samples:
        stamp, sm, mem = int(s.timeStamp), int(s.smUtil), int(s.memUtil)
        seen = max(seen, stamp)
        if sm > 100:  # not a percentage: the driver's "not available" or garbage
            continue
        pid = int(s.pid)
        if pid not in newest or stamp >= newest[pid][0]:
            newest[pid] = (stamp, float(sm), float(mem) if mem <= 100 else 0.0)
    g.util_seen_us = seen
    return {pid: (sm, mem) for pid, (_stamp, sm, mem) in newest.items()}


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

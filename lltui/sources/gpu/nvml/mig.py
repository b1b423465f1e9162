"""MIG instances of a GPU in MIG mode, as nvidia-ml-py gives them.

At open (and again on the link TTL, as instances are made and destroyed without a reset)
each MIG device handle is found with ``nvmlDeviceGetMaxMigDeviceCount`` and
``nvmlDeviceGetMigDeviceHandleByIndex`` (NOT_FOUND for an empty slot), then its UUID
(``MIG-...``), name (which carries the profile, ``... MIG 1g.10gb``), attributes
(``c_nvmlDeviceAttributes``: memory, SMs, slices), GPU and compute instance ids and memory.
Memory is read again on the slow TTL. Utilisation per instance is not something NVML gives
(``nvmlDeviceGetUtilizationRates`` is NOT_SUPPORTED on a MIG handle): it stays None.
Processes are assigned to instances by the ids their v2/v3 entries carry.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from typing import Any

from lltui.core.monitor.models import MigDevice
from lltui.sources.gpu.nvml.calls import GpuLost, NvmlCalls
from lltui.sources.gpu.nvml.codes import ERR_GPU_IS_LOST, error_code, text
from lltui.sources.gpu.nvml.state import GpuState, MigInstance, MigState

MIB = 1024 * 1024
MAX_MIG_DEVICES = 16  # 7 on an A100/H100, 8 on some; a bound for a driver's odd answer
_PROFILE = re.compile(r"\bMIG\s+(\d+g\.\d+gb)\b", re.IGNORECASE)


def _call(calls: NvmlCalls, name: str, handle: Any, *args: Any) -> Any:
    """``name(handle, *args)`` on a MIG handle, or None when it fails (GpuLost when the
    GPU is lost)."""
    fn = getattr(calls.nv, name, None)
    if fn is None:
        return None
    try:
        return fn(handle, *args)
    except Exception as exc:
        if error_code(exc) == ERR_GPU_IS_LOST:
            raise GpuLost() from None
        return None


def profile_name(name: str | None, slices: int | None, memory_mib: int | None) -> str:
    """The profile as nvidia-smi names it: from the device's name where it says
    (``... MIG 3g.40gb``), else from its slices and memory."""
    found = _PROFILE.search(name or "")
    if found:
        return found.group(1).lower()
    gb = math.ceil(memory_mib / 1024) if memory_mib else 0
    return f"{slices or '?'}g.{gb}gb"


def enumerate_mig(calls: NvmlCalls, g: GpuState) -> MigState:
    """The GPU's MIG instances now (an empty state when it lists none)."""
    count = _call(calls, "nvmlDeviceGetMaxMigDeviceCount", g.handle)
    state = MigState()
    for i in range(min(int(count or 0), MAX_MIG_DEVICES)):
        handle = _call(calls, "nvmlDeviceGetMigDeviceHandleByIndex", g.handle, i)
        if handle is None:
            continue  # an empty slot
        device = _read_instance(calls, handle)
        if device is not None:
            state.instances.append(MigInstance(handle, device))
    state.instances.sort(key=lambda m: (m.device.gpu_instance_id, m.device.compute_instance_id))
    return state


def _read_instance(calls: NvmlCalls, handle: Any) -> MigDevice | None:
    uuid = _call(calls, "nvmlDeviceGetUUID", handle)
    gi = _call(calls, "nvmlDeviceGetGpuInstanceId", handle)
    ci = _call(calls, "nvmlDeviceGetComputeInstanceId", handle)
    if uuid is None or gi is None or ci is None:
        return None
    name = _call(calls, "nvmlDeviceGetName", handle)
    attrs = _call(calls, "nvmlDeviceGetAttributes", handle)
    memory = _call(calls, "nvmlDeviceGetMemoryInfo", handle)
    try:
        memory_mib = int(attrs.memorySizeMB) if attrs is not None else None
        slices = int(attrs.gpuInstanceSliceCount) if attrs is not None else None
        sms = int(attrs.multiprocessorCount) if attrs is not None else None
        total = int(memory.total) if memory is not None else (memory_mib or 0) * MIB
        return MigDevice(
            uuid=text(uuid),
            gpu_instance_id=int(gi),
            compute_instance_id=int(ci),
            profile=profile_name(text(name) if name is not None else None, slices, memory_mib),
            memory_total=total,
            memory_used=int(memory.used) if memory is not None else None,
            memory_free=int(memory.free) if memory is not None else None,
            sm_count=sms,
            slices=slices,
        )
    except (AttributeError, TypeError, ValueError):
        return None  # an answer of a shape this does not know: the instance is left out


def read_mig_memory(calls: NvmlCalls, g: GpuState) -> None:
    """Each instance's memory, on the slow TTL."""
    if g.mig is None:
        return
    for inst in g.mig.instances:
        memory = _call(calls, "nvmlDeviceGetMemoryInfo", inst.handle)
        if memory is None:
            continue
        try:
            inst.device = replace(
                inst.device, memory_used=int(memory.used), memory_free=int(memory.free)
            )
        except (AttributeError, TypeError, ValueError):
            continue


def mig_devices(g: GpuState) -> tuple[MigDevice, ...]:
    return () if g.mig is None else tuple(i.device for i in g.mig.instances)

"""What is read once per GPU when the source opens: names, ids, limits, max clocks, compute
capability, NVLink links, and the index CUDA gives each GPU."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lltui.core.monitor.cuda_order import (
    PCI_BUS_ID,
    CudaCandidate,
    cuda_indices_from_env,
    enumeration_order,
)
from lltui.core.monitor.models import GpuStatic, gpu_key
from lltui.sources.gpu.nvml.calls import OK, GpuLost, NvmlCalls
from lltui.sources.gpu.nvml.codes import (
    CLOCK_MEM,
    CLOCK_SM,
    FEATURE_ENABLED,
    LOST_WORDS,
    NVLINK_MAX_LINKS,
    mw_to_w,
    text,
)
from lltui.sources.gpu.nvml.fields import LINK_COUNT_FIELD, read_fields
from lltui.sources.gpu.nvml.state import GpuState
from lltui.sources.gpu.nvml.vgpu import virtualization_mode

CUDA_ORDER_HINT = (
    "CUDA numbers these GPUs differently from nvidia-smi (by compute capability); "
    "set CUDA_DEVICE_ORDER=PCI_BUS_ID so --main-gpu and --tensor-split follow "
    "nvidia-smi's order"
)


def placeholder_static(index: int) -> GpuStatic:
    """What stands for a GPU whose facts could not be read."""
    return GpuStatic(index, "", f"GPU {index}", "", 0, vendor="nvidia")


def _bus_id(p: Any) -> str:
    return text(p.busId)


def _max_limit(c: Any) -> float:
    return mw_to_w(c[1])


def _capability(c: Any) -> tuple[int, int]:
    return int(c[0]), int(c[1])


def _mig_enabled(modes: Any) -> bool:
    """nvmlDeviceGetMigMode's [current, pending]: whether MIG is on now."""
    return int(modes[0]) == FEATURE_ENABLED


def _enabled(m: Any) -> bool:
    return int(m) == FEATURE_ENABLED


def read_static(calls: NvmlCalls, g: GpuState) -> GpuState:
    """Fill ``g.static``; a GPU lost while being read is marked lost with a placeholder."""
    i = g.index
    call = calls.call
    try:
        name = call(g, "name", "nvmlDeviceGetName", convert=text)
        uuid = call(g, "uuid", "nvmlDeviceGetUUID", convert=text)
        pci = call(g, "pci", "nvmlDeviceGetPciInfo", convert=_bus_id)
        memory = calls.versioned(g, "memory", calls.memory_variants)
        total = int(memory.total) if memory is not None else None
        default_limit = call(
            g, "power_default", "nvmlDeviceGetPowerManagementDefaultLimit", convert=mw_to_w
        )
        max_limit = call(
            g, "power_max", "nvmlDeviceGetPowerManagementLimitConstraints", convert=_max_limit
        )
        max_sm = call(g, "max_sm", "nvmlDeviceGetMaxClockInfo", CLOCK_SM, convert=int)
        max_mem = call(g, "max_mem", "nvmlDeviceGetMaxClockInfo", CLOCK_MEM, convert=int)
        cc = call(g, "cc", "nvmlDeviceGetCudaComputeCapability", convert=_capability)
        serial = call(g, "serial", "nvmlDeviceGetSerial", convert=text)
        vbios = call(g, "vbios", "nvmlDeviceGetVbiosVersion", convert=text)
        persistence = call(g, "persistence", "nvmlDeviceGetPersistenceMode", convert=_enabled)
        bus = call(g, "bus_width", "nvmlDeviceGetMemoryBusWidth", convert=int)
        gen_max = call(g, "gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", convert=int)
        width_max = call(g, "width_max", "nvmlDeviceGetMaxPcieLinkWidth", convert=int)
        g.nvlink_links = count_nvlinks(calls, g)
        mig = call(g, "mig_mode", "nvmlDeviceGetMigMode", convert=_mig_enabled)
        virt = call(
            g, "virtualization", "nvmlDeviceGetVirtualizationMode", convert=virtualization_mode
        )
    except GpuLost:
        g.lost_reason = LOST_WORDS
        g.static = placeholder_static(i)
        return g
    g.static_errors, g.errors = g.errors, []
    g.static = GpuStatic(
        index=i,
        uuid=gpu_key(uuid, i),
        name=name or f"GPU {i}",
        pci_bus_id=pci or "",
        memory_total=total,
        power_limit_default_w=default_limit,
        power_limit_max_w=max_limit,
        max_sm_clock_mhz=max_sm,
        max_mem_clock_mhz=max_mem,
        compute_capability=cc,
        pcie_gen_max=gen_max,
        pcie_width_max=width_max,
        nvlink_links=g.nvlink_links,
        serial=serial or None,
        vbios=vbios or None,
        persistence_mode=persistence,
        mem_bus_width_bits=bus or None,
        mig_mode=mig,
        virtualization=virt,
        vendor="nvidia",
    )
    return g


def count_nvlinks(calls: NvmlCalls, g: GpuState) -> int | None:
    """Links present: the link-count field, else the links whose state NVML answers."""
    values, _ = read_fields(calls, g, (LINK_COUNT_FIELD,))
    count = values.get(LINK_COUNT_FIELD.key)
    if count is None:
        count = 0
        for link in range(NVLINK_MAX_LINKS):
            outcome, _ = calls.attempt(g, "nvmlDeviceGetNvLinkState", (link,), {})
            if outcome != OK:
                break
            count += 1
    return int(count) or None


def assign_cuda_indices(gpus: Sequence[GpuState], env: Mapping[str, str]) -> str | None:
    """Give each GPU the index CUDA will use under ``env``; a hint when CUDA's order is not
    nvidia-smi's."""
    statics = [g.static for g in gpus if g.static is not None]
    candidates = [CudaCandidate(s.uuid, s.pci_bus_id, s.compute_capability) for s in statics]
    indices = cuda_indices_from_env(candidates, env)
    for g, cuda_index in zip(gpus, indices, strict=True):
        if g.static is not None:
            g.static = replace(g.static, cuda_index=cuda_index)
    order = (env.get("CUDA_DEVICE_ORDER") or "").strip().upper()
    if order != PCI_BUS_ID and enumeration_order(candidates, order) != list(range(len(candidates))):
        return CUDA_ORDER_HINT
    return None

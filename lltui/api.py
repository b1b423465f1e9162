"""The public Python API: thin functions over lltui's core and sources.

    >>> from lltui.api import detect_gpus, MultiGPUConfig, SplitMode
    >>> cfg = MultiGPUConfig(n_gpu=2, split_mode=SplitMode.LAYER, tensor_split=[0.5, 0.5])
    >>> cfg.to_llama_args()
    ['-sm', 'layer', '-ts', '0.5,0.5']

GPU functions read real GPUs through NVML by default and return empty results where there
are none; pass ``source="sim:PROFILE"`` to read a simulated rig instead.
"""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.models import RigSample, SourceUnavailable
from lltui.core.multigpu import MultiGPUConfig, SplitMode
from lltui.core.nccl_env import NCCLDataType, NCCLResult
from lltui.sources.nccl import (
    NCCLCommunicator,
    get_nccl_info,
    get_nccl_version,
    is_nccl_available,
    kaggle_nccl_config,
    print_nccl_info,
    setup_nccl_environment,
)

__all__ = [
    "GPUInfo",
    "MultiGPUConfig",
    "NCCLCommunicator",
    "NCCLDataType",
    "NCCLResult",
    "SplitMode",
    "detect_gpus",
    "get_cuda_version",
    "get_free_vram",
    "get_nccl_info",
    "get_nccl_version",
    "get_total_vram",
    "gpu_count",
    "is_nccl_available",
    "kaggle_nccl_config",
    "print_nccl_info",
    "rig_sample",
    "setup_nccl_environment",
]


@dataclass(frozen=True)
class GPUInfo:
    """One GPU as the API reports it. ``index`` is the CUDA device index where known."""

    index: int
    name: str
    total_memory: int  # bytes
    free_memory: int  # bytes, when read
    compute_capability: str  # "7.5"
    cuda_version: str  # the driver's CUDA version, "12.4"
    uuid: str = ""
    pci_bus_id: str = ""
    nvml_index: int = 0


def rig_sample(source: str = "nvml") -> RigSample | None:
    """One sample of the rig ``source`` names, or None when that source cannot run here."""
    from lltui.sources.registry import open_source

    try:
        src, _info = open_source(source)
    except (SourceUnavailable, ImportError):
        return None
    try:
        return src.poll()
    finally:
        src.close()


def detect_gpus(source: str = "nvml") -> list[GPUInfo]:
    """Every visible GPU in CUDA order; an empty list when there is none or no driver."""
    sample = rig_sample(source)
    if sample is None:
        return []
    out = []
    for g in sample.gpus:
        if g.lost:
            continue
        info = g.info
        cc = info.compute_capability
        out.append(
            GPUInfo(
                index=info.cuda_index if info.cuda_index is not None else info.index,
                name=info.name,
                total_memory=info.memory_total,
                free_memory=g.memory_free if g.memory_free is not None else 0,
                compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
                cuda_version=sample.info.cuda_version or "",
                uuid=info.uuid,
                pci_bus_id=info.pci_bus_id,
                nvml_index=info.index,
            )
        )
    return sorted(out, key=lambda g: g.index)


def gpu_count(source: str = "nvml") -> int:
    """Number of visible GPUs; 0 on a machine without one."""
    return len(detect_gpus(source))


def get_cuda_version(source: str = "nvml") -> str | None:
    """The CUDA version the driver supports ("12.4"), or None without a driver."""
    sample = rig_sample(source)
    return sample.info.cuda_version if sample is not None else None


def _select(gpus: list[GPUInfo], gpu_indices: list[int] | None) -> list[GPUInfo]:
    if gpu_indices is None:
        return gpus
    known = {g.index for g in gpus}
    missing = [i for i in gpu_indices if i not in known]
    if missing:
        raise ValueError(f"no GPU with index {missing[0]} (have {sorted(known)})")
    return [g for g in gpus if g.index in set(gpu_indices)]


def get_total_vram(gpu_indices: list[int] | None = None, source: str = "nvml") -> int:
    """Total VRAM in bytes over all GPUs or the CUDA indices given."""
    return sum(g.total_memory for g in _select(detect_gpus(source), gpu_indices))


def get_free_vram(gpu_indices: list[int] | None = None, source: str = "nvml") -> int:
    """Free VRAM in bytes now over all GPUs or the CUDA indices given."""
    return sum(g.free_memory for g in _select(detect_gpus(source), gpu_indices))

"""What every part of the estimator shares: llama.cpp's alignment and padding constants, the
one error type, and how a device's buffers are sized."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lltui.core.ggml.align import (
    CPU_ALIGNMENT,
    CUDA_ALIGNMENT,
    CUDA_MATRIX_ROW_PADDING,
    VULKAN_ALIGNMENT,
    pad,
)
from lltui.core.gguf.types import GGML_TYPES
from lltui.core.memory.devices import DeviceSpec
from lltui.core.units import MIB

if TYPE_CHECKING:
    from lltui.core.llama.builds import BuildRules

CPU = "CPU"
KV_PAD = 256  # n_ctx and the SWA cache are padded to this many cells
DEFAULT_MARGIN = 1024 * MIB  # --fit-target's default: CUDA context, cuBLAS, the pool
OP_OFFLOAD_MIN_BATCH = 32  # GGML_OP_OFFLOAD_MIN_BATCH
SCHED_MAX_COPIES = 4  # GGML_SCHED_MAX_COPIES, the pipeline-parallel input copies
FLOAT_KV = ("f32", "f16", "bf16")  # the K/V cache types -sm tensor loads with before b9455
QUANT_KV_REFUSED = "llama.cpp refuses -sm tensor with a quantized K/V cache before b9455"


def tensor_kv_refused(type_k: str, type_v: str, rules: BuildRules) -> str:
    """Why llama.cpp refuses -sm tensor with this K/V cache ("": it takes it): a quantized
    one, before b9455 (llama_init_from_model)."""
    quantized = type_k not in FLOAT_KV or type_v not in FLOAT_KV
    return QUANT_KV_REFUSED if quantized and not rules.sm_tensor_quant_kv else ""


__all__ = [
    "CPU",
    "CPU_ALIGNMENT",
    "CUDA_ALIGNMENT",
    "CUDA_MATRIX_ROW_PADDING",
    "DEFAULT_MARGIN",
    "KV_PAD",
    "OP_OFFLOAD_MIN_BATCH",
    "SCHED_MAX_COPIES",
    "FitError",
    "backend_of",
    "buffer_alignment",
    "device_alloc_size",
    "f32",
    "is_gpu",
    "pad",
]


class FitError(ValueError):
    """Settings llama.cpp itself would refuse; the message is one line."""


def f32(x: float) -> float:
    """Round to float32, as llama.cpp's split arithmetic does."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def device_alloc_size(dev: DeviceSpec | None, t_type: int, dims: Sequence[int], nbytes: int) -> int:
    """Bytes a tensor takes in a device buffer: CUDA pads quantized rows and aligns to 128;
    Vulkan takes the plain size."""
    backend = "cpu" if dev is None else backend_of(dev)
    if backend == "cpu":
        return pad(nbytes, CPU_ALIGNMENT)
    if backend == "vulkan":
        return pad(nbytes, VULKAN_ALIGNMENT)
    info = GGML_TYPES.get(t_type)
    size = nbytes
    ne0 = dims[0] if dims else 1
    if info is not None and info.quantized and ne0 % CUDA_MATRIX_ROW_PADDING:
        pad_elems = CUDA_MATRIX_ROW_PADDING - ne0 % CUDA_MATRIX_ROW_PADDING
        size += pad_elems // info.block_size * info.type_size
    return pad(size, CUDA_ALIGNMENT)


def backend_of(dev: DeviceSpec) -> str:
    """The backend behind a device: "cuda" (CUDA, ROCm/HIP, MUSA: one ggml backend) unless its
    spec says otherwise ("vulkan"; an RPC server's "cpu")."""
    return dev.backend or "cuda"


def buffer_alignment(dev: DeviceSpec) -> int:
    """The alignment of the device's buffers (ggml_backend_buft_get_alignment)."""
    return {"cuda": CUDA_ALIGNMENT, "vulkan": VULKAN_ALIGNMENT}.get(backend_of(dev), CPU_ALIGNMENT)


def is_gpu(dev: DeviceSpec) -> bool:
    """A device whose backend keeps a GPU's buffers (CUDA's family or Vulkan)."""
    return backend_of(dev) in ("cuda", "vulkan")

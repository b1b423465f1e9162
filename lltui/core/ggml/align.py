"""ggml's alignment and padding rules, as its backends apply them to buffers and tensors."""

from __future__ import annotations

CPU_ALIGNMENT = 32  # TENSOR_ALIGNMENT (ggml-impl.h)
CUDA_ALIGNMENT = 128
CUDA_MATRIX_ROW_PADDING = 512  # quantized rows are padded to a multiple of this (common.cuh)
# ggml-vulkan sizes a tensor as ggml_nbytes (no row padding) and aligns it to the device's
# minStorageBufferOffsetAlignment, which logs do not print; drivers report 4 (AMD), 16
# (NVIDIA) or 64 (Intel): the largest is taken, a few KiB over a whole model at most
VULKAN_ALIGNMENT = 64


def pad(x: int, a: int) -> int:
    """``x`` rounded up to a multiple of ``a``."""
    return (x + a - 1) // a * a

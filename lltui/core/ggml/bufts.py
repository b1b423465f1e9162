"""The backends' buffer types as the graph planner sees them: alignment and how many bytes
a tensor takes (ggml-cpu: the plain ggml_nbytes; ggml-cuda: quantized rows padded to 512
elements, flash attention's output followed by F16 copies of a non-F16 K and V)."""

from __future__ import annotations

from lltui.core.ggml.align import CPU_ALIGNMENT, CUDA_ALIGNMENT, CUDA_MATRIX_ROW_PADDING, pad
from lltui.core.ggml.alloc import BufferType
from lltui.core.ggml.graph import F16, Tensor, nelements, row_bytes
from lltui.core.gguf.types import type_info


def cuda_alloc_size(t: Tensor) -> int:
    """ggml_backend_cuda_buffer_type_get_alloc_size."""
    size = t.nbytes()
    if t.op == "FLASH_ATTN_EXT":
        # ggml_cuda_flash_attn_ext_get_f16_extra_data, for the kernels that need F16 K/V
        k, v = t.src[1], t.src[2]
        if k.type != F16:
            size = pad(size, CUDA_ALIGNMENT) + nelements(k) * 2
        if v.type != F16:
            size = pad(size, CUDA_ALIGNMENT) + nelements(v) * 2
    info = type_info(t.type)
    if info.quantized and t.ne[0] % CUDA_MATRIX_ROW_PADDING:
        size += row_bytes(t.type, CUDA_MATRIX_ROW_PADDING - t.ne[0] % CUDA_MATRIX_ROW_PADDING)
    return size


CPU_BUFT = BufferType(alignment=CPU_ALIGNMENT)
CUDA_BUFT = BufferType(alignment=CUDA_ALIGNMENT, alloc_size=cuda_alloc_size)

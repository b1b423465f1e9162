"""The backends' buffer types as the graph planner sees them: alignment and how many bytes
a tensor takes (ggml-cpu: the plain ggml_nbytes; ggml-cuda: quantized rows padded to 512
elements, flash attention's output followed by F16 copies of a non-F16 K and V)."""

from __future__ import annotations

from functools import lru_cache

from lltui.core.ggml.align import CPU_ALIGNMENT, CUDA_ALIGNMENT, CUDA_MATRIX_ROW_PADDING, pad
from lltui.core.ggml.alloc import BufferType
from lltui.core.ggml.graph import F16, Ne, Tensor, nelements, row_bytes, span_bytes
from lltui.core.gguf.types import type_info


def cuda_alloc_size(t: Tensor) -> int:
    """ggml_backend_cuda_buffer_type_get_alloc_size."""
    if t.op != "FLASH_ATTN_EXT":
        return _padded_rows(t.type, t.ne, t.nb)
    size = t.nbytes()
    # ggml_cuda_flash_attn_ext_get_f16_extra_data, for the kernels that need F16 K/V
    k, v = t.src[1], t.src[2]
    if k.type != F16:
        size = pad(size, CUDA_ALIGNMENT) + nelements(k) * 2
    if v.type != F16:
        size = pad(size, CUDA_ALIGNMENT) + nelements(v) * 2
    return size + _row_padding(t.type, t.ne[0])


@lru_cache(maxsize=4096)  # asked per tensor of every planned graph; the shapes are few
def _padded_rows(type_id: int, ne: Ne, nb: Ne) -> int:
    return span_bytes(type_id, ne, nb) + _row_padding(type_id, ne[0])


def _row_padding(type_id: int, ne0: int) -> int:
    """Quantized rows are padded to a multiple of 512 elements."""
    if type_info(type_id).quantized and ne0 % CUDA_MATRIX_ROW_PADDING:
        return row_bytes(type_id, CUDA_MATRIX_ROW_PADDING - ne0 % CUDA_MATRIX_ROW_PADDING)
    return 0


CPU_BUFT = BufferType(alignment=CPU_ALIGNMENT)
CUDA_BUFT = BufferType(alignment=CUDA_ALIGNMENT, alloc_size=cuda_alloc_size)

"""ggml tensor types and llama.cpp file types (ftypes), as the pinned llama.cpp defines them.

Block sizes and block byte sizes follow ggml's type traits (ggml/src/ggml.c, ggml-common.h);
ftype numbers, names and default tensor types follow include/llama.h, llama-model-loader.cpp
and src/llama-quant.cpp. A test checks the table against gguf-py's GGML_QUANT_SIZES.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum


class GgmlType(IntEnum):
    """ggml_type ids as stored in a GGUF tensor table. Gaps are removed types."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42


@dataclass(frozen=True)
class GgmlTypeInfo:
    """One ggml type: ``block_size`` elements are stored in ``type_size`` bytes."""

    type: GgmlType
    name: str  # as ggml prints it: "q4_K", "f16"
    block_size: int
    type_size: int
    quantized: bool

    @property
    def canonical(self) -> str:
        """The upper-case spelling used by gguf-py and llama-quantize: ``Q4_K``."""
        return self.type.name

    @property
    def bits_per_weight(self) -> float:
        return self.type_size * 8 / self.block_size


_QK_K = 256

# (type, ggml name, block size, bytes per block, quantized)
_TABLE: tuple[tuple[GgmlType, str, int, int, bool], ...] = (
    (GgmlType.F32, "f32", 1, 4, False),
    (GgmlType.F16, "f16", 1, 2, False),
    (GgmlType.Q4_0, "q4_0", 32, 2 + 16, True),
    (GgmlType.Q4_1, "q4_1", 32, 2 * 2 + 16, True),
    (GgmlType.Q5_0, "q5_0", 32, 2 + 4 + 16, True),
    (GgmlType.Q5_1, "q5_1", 32, 2 * 2 + 4 + 16, True),
    (GgmlType.Q8_0, "q8_0", 32, 2 + 32, True),
    (GgmlType.Q8_1, "q8_1", 32, 2 * 2 + 32, True),
    (GgmlType.Q2_K, "q2_K", _QK_K, 2 * 2 + _QK_K // 16 + _QK_K // 4, True),
    (GgmlType.Q3_K, "q3_K", _QK_K, 2 + _QK_K // 4 + _QK_K // 8 + 12, True),
    (GgmlType.Q4_K, "q4_K", _QK_K, 2 * 2 + 12 + _QK_K // 2, True),
    (GgmlType.Q5_K, "q5_K", _QK_K, 2 * 2 + 12 + _QK_K // 2 + _QK_K // 8, True),
    (GgmlType.Q6_K, "q6_K", _QK_K, 2 + _QK_K // 16 + 3 * _QK_K // 4, True),
    (GgmlType.Q8_K, "q8_K", _QK_K, 4 + _QK_K + _QK_K // 16 * 2, True),
    (GgmlType.IQ2_XXS, "iq2_xxs", _QK_K, 2 + _QK_K // 8 * 2, True),
    (GgmlType.IQ2_XS, "iq2_xs", _QK_K, 2 + _QK_K // 8 * 2 + _QK_K // 32, True),
    (GgmlType.IQ3_XXS, "iq3_xxs", _QK_K, 2 + 3 * (_QK_K // 8), True),
    (GgmlType.IQ1_S, "iq1_s", _QK_K, 2 + _QK_K // 8 + _QK_K // 16, True),
    (GgmlType.IQ4_NL, "iq4_nl", 32, 2 + 16, True),
    (GgmlType.IQ3_S, "iq3_s", _QK_K, 2 + 13 * (_QK_K // 32) + _QK_K // 64, True),
    (GgmlType.IQ2_S, "iq2_s", _QK_K, 2 + _QK_K // 4 + _QK_K // 16, True),
    (GgmlType.IQ4_XS, "iq4_xs", _QK_K, 2 + 2 + _QK_K // 64 + _QK_K // 2, True),
    (GgmlType.I8, "i8", 1, 1, False),
    (GgmlType.I16, "i16", 1, 2, False),
    (GgmlType.I32, "i32", 1, 4, False),
    (GgmlType.I64, "i64", 1, 8, False),
    (GgmlType.F64, "f64", 1, 8, False),
    (GgmlType.IQ1_M, "iq1_m", _QK_K, _QK_K // 8 + _QK_K // 16 + _QK_K // 32, True),
    (GgmlType.BF16, "bf16", 1, 2, False),
    (GgmlType.TQ1_0, "tq1_0", _QK_K, 2 + _QK_K // 64 + (_QK_K - 4 * _QK_K // 64) // 5, True),
    (GgmlType.TQ2_0, "tq2_0", _QK_K, 2 + _QK_K // 4, True),
    (GgmlType.MXFP4, "mxfp4", 32, 1 + 16, True),
    (GgmlType.NVFP4, "nvfp4", 64, 64 // 16 + 32, True),
    (GgmlType.Q1_0, "q1_0", 128, 2 + 128 // 8, True),
    (GgmlType.Q2_0, "q2_0", 64, 2 + 64 // 4, True),
)

GGML_TYPES: dict[int, GgmlTypeInfo] = {
    int(t): GgmlTypeInfo(t, name, blck, size, quant) for t, name, blck, size, quant in _TABLE
}

_BY_NAME: dict[str, GgmlTypeInfo] = {info.name.lower(): info for info in GGML_TYPES.values()}


def type_info(type_id: int) -> GgmlTypeInfo:
    """Traits of a ggml type id; ValueError for ids this llama.cpp does not know."""
    info = GGML_TYPES.get(int(type_id))
    if info is None:
        raise ValueError(f"unknown ggml type id {type_id}")
    return info


def type_from_name(name: str) -> GgmlType:
    """``q4_K``, ``Q4_K`` or ``q4_k`` -> GgmlType.Q4_K; ValueError if unknown."""
    info = _BY_NAME.get(name.strip().lower())
    if info is None:
        raise ValueError(f"unknown ggml type {name!r}")
    return info.type


def type_name(type_id: int) -> str:
    """ggml's own spelling (``q4_K``); ``type<N>`` for unknown ids."""
    info = GGML_TYPES.get(int(type_id))
    return info.name if info else f"type{type_id}"


def n_dims(dims: Sequence[int]) -> int:
    """ggml_n_dims: trailing dimensions of 1 do not count; at least 1."""
    for i in range(len(dims) - 1, 0, -1):
        if dims[i] > 1:
            return i + 1
    return 1


def tensor_nbytes(type_id: int, dims: tuple[int, ...] | list[int]) -> int:
    """ggml_nbytes of a contiguous tensor with ggml dims (ne0 first, a whole number of
    blocks)."""
    info = type_info(type_id)
    return (dims[0] if dims else 1) // info.block_size * info.type_size * math.prod(dims[1:])


class LlamaFtype(IntEnum):
    """llama_ftype: the "file type" llama-quantize produces (include/llama.h)."""

    ALL_F32 = 0
    MOSTLY_F16 = 1
    MOSTLY_Q4_0 = 2
    MOSTLY_Q4_1 = 3
    MOSTLY_Q8_0 = 7
    MOSTLY_Q5_0 = 8
    MOSTLY_Q5_1 = 9
    MOSTLY_Q2_K = 10
    MOSTLY_Q3_K_S = 11
    MOSTLY_Q3_K_M = 12
    MOSTLY_Q3_K_L = 13
    MOSTLY_Q4_K_S = 14
    MOSTLY_Q4_K_M = 15
    MOSTLY_Q5_K_S = 16
    MOSTLY_Q5_K_M = 17
    MOSTLY_Q6_K = 18
    MOSTLY_IQ2_XXS = 19
    MOSTLY_IQ2_XS = 20
    MOSTLY_Q2_K_S = 21
    MOSTLY_IQ3_XS = 22
    MOSTLY_IQ3_XXS = 23
    MOSTLY_IQ1_S = 24
    MOSTLY_IQ4_NL = 25
    MOSTLY_IQ3_S = 26
    MOSTLY_IQ3_M = 27
    MOSTLY_IQ2_S = 28
    MOSTLY_IQ2_M = 29
    MOSTLY_IQ4_XS = 30
    MOSTLY_IQ1_M = 31
    MOSTLY_BF16 = 32
    MOSTLY_TQ1_0 = 36
    MOSTLY_TQ2_0 = 37
    MOSTLY_MXFP4_MOE = 38
    MOSTLY_NVFP4 = 39
    MOSTLY_Q1_0 = 40
    MOSTLY_Q2_0 = 41


_F = LlamaFtype

# The name llama-quantize takes on its command line, per ftype.
FTYPE_NAMES: dict[LlamaFtype, str] = {
    _F.ALL_F32: "F32",
    _F.MOSTLY_F16: "F16",
    _F.MOSTLY_BF16: "BF16",
    _F.MOSTLY_Q4_0: "Q4_0",
    _F.MOSTLY_Q4_1: "Q4_1",
    _F.MOSTLY_Q5_0: "Q5_0",
    _F.MOSTLY_Q5_1: "Q5_1",
    _F.MOSTLY_Q8_0: "Q8_0",
    _F.MOSTLY_Q2_K: "Q2_K",
    _F.MOSTLY_Q2_K_S: "Q2_K_S",
    _F.MOSTLY_Q3_K_S: "Q3_K_S",
    _F.MOSTLY_Q3_K_M: "Q3_K_M",
    _F.MOSTLY_Q3_K_L: "Q3_K_L",
    _F.MOSTLY_Q4_K_S: "Q4_K_S",
    _F.MOSTLY_Q4_K_M: "Q4_K_M",
    _F.MOSTLY_Q5_K_S: "Q5_K_S",
    _F.MOSTLY_Q5_K_M: "Q5_K_M",
    _F.MOSTLY_Q6_K: "Q6_K",
    _F.MOSTLY_IQ2_XXS: "IQ2_XXS",
    _F.MOSTLY_IQ2_XS: "IQ2_XS",
    _F.MOSTLY_IQ2_S: "IQ2_S",
    _F.MOSTLY_IQ2_M: "IQ2_M",
    _F.MOSTLY_IQ3_XXS: "IQ3_XXS",
    _F.MOSTLY_IQ3_XS: "IQ3_XS",
    _F.MOSTLY_IQ3_S: "IQ3_S",
    _F.MOSTLY_IQ3_M: "IQ3_M",
    _F.MOSTLY_IQ1_S: "IQ1_S",
    _F.MOSTLY_IQ1_M: "IQ1_M",
    _F.MOSTLY_IQ4_NL: "IQ4_NL",
    _F.MOSTLY_IQ4_XS: "IQ4_XS",
    _F.MOSTLY_TQ1_0: "TQ1_0",
    _F.MOSTLY_TQ2_0: "TQ2_0",
    _F.MOSTLY_MXFP4_MOE: "MXFP4_MOE",
    _F.MOSTLY_NVFP4: "NVFP4",
    _F.MOSTLY_Q1_0: "Q1_0",
    _F.MOSTLY_Q2_0: "Q2_0",
}

# llama_ftype_get_default_type; NVFP4 has none in this version (llama-quantize rejects it).
FTYPE_DEFAULT_TYPE: dict[LlamaFtype, GgmlType] = {
    _F.MOSTLY_Q4_0: GgmlType.Q4_0,
    _F.MOSTLY_Q4_1: GgmlType.Q4_1,
    _F.MOSTLY_Q5_0: GgmlType.Q5_0,
    _F.MOSTLY_Q5_1: GgmlType.Q5_1,
    _F.MOSTLY_Q8_0: GgmlType.Q8_0,
    _F.MOSTLY_F16: GgmlType.F16,
    _F.MOSTLY_BF16: GgmlType.BF16,
    _F.ALL_F32: GgmlType.F32,
    _F.MOSTLY_Q1_0: GgmlType.Q1_0,
    _F.MOSTLY_Q2_0: GgmlType.Q2_0,
    _F.MOSTLY_MXFP4_MOE: GgmlType.MXFP4,
    _F.MOSTLY_Q2_K_S: GgmlType.Q2_K,
    _F.MOSTLY_Q2_K: GgmlType.Q2_K,
    _F.MOSTLY_IQ3_XS: GgmlType.IQ3_S,
    _F.MOSTLY_Q3_K_S: GgmlType.Q3_K,
    _F.MOSTLY_Q3_K_M: GgmlType.Q3_K,
    _F.MOSTLY_Q3_K_L: GgmlType.Q3_K,
    _F.MOSTLY_Q4_K_S: GgmlType.Q4_K,
    _F.MOSTLY_Q4_K_M: GgmlType.Q4_K,
    _F.MOSTLY_Q5_K_S: GgmlType.Q5_K,
    _F.MOSTLY_Q5_K_M: GgmlType.Q5_K,
    _F.MOSTLY_Q6_K: GgmlType.Q6_K,
    _F.MOSTLY_TQ1_0: GgmlType.TQ1_0,
    _F.MOSTLY_TQ2_0: GgmlType.TQ2_0,
    _F.MOSTLY_IQ2_XXS: GgmlType.IQ2_XXS,
    _F.MOSTLY_IQ2_XS: GgmlType.IQ2_XS,
    _F.MOSTLY_IQ2_S: GgmlType.IQ2_XS,
    _F.MOSTLY_IQ2_M: GgmlType.IQ2_S,
    _F.MOSTLY_IQ3_XXS: GgmlType.IQ3_XXS,
    _F.MOSTLY_IQ1_S: GgmlType.IQ1_S,
    _F.MOSTLY_IQ1_M: GgmlType.IQ1_M,
    _F.MOSTLY_IQ4_NL: GgmlType.IQ4_NL,
    _F.MOSTLY_IQ4_XS: GgmlType.IQ4_XS,
    _F.MOSTLY_IQ3_S: GgmlType.IQ3_S,
    _F.MOSTLY_IQ3_M: GgmlType.IQ3_S,
}

# The types llama-quantize offers, in its own order, without aliases and COPY.
QUANTIZE_FTYPES: tuple[LlamaFtype, ...] = (
    _F.MOSTLY_Q1_0,
    _F.MOSTLY_Q2_0,
    _F.MOSTLY_Q4_0,
    _F.MOSTLY_Q4_1,
    _F.MOSTLY_MXFP4_MOE,
    _F.MOSTLY_Q5_0,
    _F.MOSTLY_Q5_1,
    _F.MOSTLY_IQ2_XXS,
    _F.MOSTLY_IQ2_XS,
    _F.MOSTLY_IQ2_S,
    _F.MOSTLY_IQ2_M,
    _F.MOSTLY_IQ1_S,
    _F.MOSTLY_IQ1_M,
    _F.MOSTLY_TQ1_0,
    _F.MOSTLY_TQ2_0,
    _F.MOSTLY_Q2_K,
    _F.MOSTLY_Q2_K_S,
    _F.MOSTLY_IQ3_XXS,
    _F.MOSTLY_IQ3_S,
    _F.MOSTLY_IQ3_M,
    _F.MOSTLY_IQ3_XS,
    _F.MOSTLY_Q3_K_S,
    _F.MOSTLY_Q3_K_M,
    _F.MOSTLY_Q3_K_L,
    _F.MOSTLY_IQ4_NL,
    _F.MOSTLY_IQ4_XS,
    _F.MOSTLY_Q4_K_S,
    _F.MOSTLY_Q4_K_M,
    _F.MOSTLY_Q5_K_S,
    _F.MOSTLY_Q5_K_M,
    _F.MOSTLY_Q6_K,
    _F.MOSTLY_Q8_0,
    _F.MOSTLY_F16,
    _F.MOSTLY_BF16,
    _F.ALL_F32,
)

LLAMA_FTYPE_GUESSED = 1024


def ftype_name(ftype: int) -> str:
    """llama-quantize's name for an ftype; ``ftype<N>`` if unknown."""
    try:
        return FTYPE_NAMES[LlamaFtype(int(ftype) & ~LLAMA_FTYPE_GUESSED)]
    except ValueError:
        return f"ftype{ftype}"

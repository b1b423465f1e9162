"""The rough path: VRAM from a parameter count in billions, for when there is no GGUF.

Rules of thumb, documented as such: bits per weight per llama-quantize type as llama-quantize
reports them for Llama-class models, and a Llama-class shape (layers, KV width) guessed from
the size. With a GGUF file, lltui's exact estimator (``lltui fit``) replaces all of this.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from lltui.core.gguf.types import FTYPE_DEFAULT_TYPE, FTYPE_NAMES, LlamaFtype, type_info

# Effective bits per weight of a whole model file (mixes included), Llama-class models; the
# other llama-quantize types (Q1_0, Q2_0, TQ1_0, TQ2_0) at their ggml type's (_BPW).
BITS_PER_WEIGHT: dict[str, float] = {
    "F32": 32.0,
    "F16": 16.0,
    "BF16": 16.0,
    "Q8_0": 8.50,
    "Q6_K": 6.56,
    "Q5_1": 6.00,
    "Q5_K_M": 5.69,
    "Q5_K_S": 5.54,
    "Q5_0": 5.50,
    "Q4_1": 5.00,
    "Q4_K_M": 4.89,
    "Q4_K_S": 4.58,
    "Q4_0": 4.50,
    "IQ4_NL": 4.50,
    "IQ4_XS": 4.25,
    "Q3_K_L": 4.27,
    "Q3_K_M": 3.91,
    "IQ3_M": 3.66,
    "Q3_K_S": 3.50,
    "IQ3_S": 3.44,
    "IQ3_XS": 3.30,
    "IQ3_XXS": 3.06,
    "Q2_K": 3.00,
    "Q2_K_S": 2.97,
    "IQ2_M": 2.70,
    "IQ2_S": 2.50,
    "IQ2_XS": 2.31,
    "IQ2_XXS": 2.06,
    "IQ1_M": 1.75,
    "IQ1_S": 1.56,
}

# Best quality first: what recommend_quantization walks down.
QUALITY_ORDER: tuple[str, ...] = (
    "Q8_0",
    "Q6_K",
    "Q5_K_M",
    "Q5_K_S",
    "Q4_K_M",
    "Q4_K_S",
    "IQ4_XS",
    "Q3_K_M",
    "IQ3_M",
    "Q3_K_S",
    "IQ3_XXS",
    "Q2_K",
    "IQ2_M",
    "IQ2_XS",
    "IQ2_XXS",
    "IQ1_M",
    "IQ1_S",
)

GIB = 1024**3


@dataclass(frozen=True, slots=True)
class RoughShape:
    n_layer: int
    n_embd_kv: int  # K (= V) width per layer with grouped-query attention


# (up to this many billions, shape): Llama 3.2 1B/3B, Llama 3.1 8B, Qwen 2.5 14B, Qwen 3 32B,
# Llama 3.x 70B, Llama 3.1 405B; all with 8 KV heads of 128.
_SHAPES: tuple[tuple[float, RoughShape], ...] = (
    (2.0, RoughShape(16, 512)),
    (4.5, RoughShape(28, 1024)),
    (10.0, RoughShape(32, 1024)),
    (20.0, RoughShape(48, 1024)),
    (40.0, RoughShape(64, 1024)),
    (100.0, RoughShape(80, 1024)),
    (float("inf"), RoughShape(126, 1024)),
)


def rough_shape(model_size_b: float) -> RoughShape:
    return next(shape for limit, shape in _SHAPES if model_size_b <= limit)


def _bits_per_weight() -> dict[str, float]:
    """BITS_PER_WEIGHT, then every other llama-quantize type ggml has a size for (not
    MXFP4_MOE: MXFP4 experts, Q8_0 on a dense model, and a size in billions says neither)."""
    pure = {
        FTYPE_NAMES[f]: type_info(t).bits_per_weight
        for f, t in FTYPE_DEFAULT_TYPE.items()
        if f != LlamaFtype.MOSTLY_MXFP4_MOE
    }
    return BITS_PER_WEIGHT | {k: v for k, v in pure.items() if k not in BITS_PER_WEIGHT}


_BPW = _bits_per_weight()


def normalize_quant(name: str) -> str:
    key = name.strip().upper().replace("-", "_")
    if key not in _BPW:
        known = ", ".join(_BPW)
        raise ValueError(f"unknown quantization {name!r}; known: {known}")
    return key


def rough_weights_bytes(model_size_b: float, quantization: str) -> int:
    bpw = _BPW[normalize_quant(quantization)]
    return int(model_size_b * 1e9 * bpw / 8)


def rough_kv_bytes(model_size_b: float, context_size: int, bytes_per_value: float = 2.0) -> int:
    """K and V for every layer at ``context_size`` cells in f16 (llama-server's default)."""
    shape = rough_shape(model_size_b)
    return int(2 * shape.n_layer * shape.n_embd_kv * context_size * bytes_per_value)


def estimate_vram_bytes(
    model_size_b: float,
    quantization: str = "Q4_K_M",
    context_size: int = 4096,
    overhead_factor: float = 1.15,
) -> int:
    """(weights + KV cache) x overhead_factor, in bytes."""
    if not math.isfinite(model_size_b) or model_size_b <= 0:
        raise ValueError(f"model_size_b must be a positive number, got {model_size_b}")
    if context_size < 0:
        raise ValueError(f"context_size must not be negative, got {context_size}")
    if not math.isfinite(overhead_factor) or overhead_factor < 1.0:
        raise ValueError(f"overhead_factor must be at least 1.0, got {overhead_factor}")
    weights = rough_weights_bytes(model_size_b, quantization)
    kv = rough_kv_bytes(model_size_b, context_size)
    return int((weights + kv) * overhead_factor)


def best_quant_for(
    model_size_b: float, available_bytes: int, context_size: int = 4096
) -> str | None:
    """The highest-quality type whose rough estimate fits, or None when none does."""
    return first_fitting(
        lambda q: estimate_vram_bytes(model_size_b, q, context_size), available_bytes
    )


def first_fitting(need: Callable[[str], int | None], available_bytes: int) -> str | None:
    """The highest-quality type whose ``need`` in bytes (None: no such type here) is within
    ``available_bytes``; None when none is."""
    return next(
        (q for q in QUALITY_ORDER if (n := need(q)) is not None and n <= available_bytes), None
    )

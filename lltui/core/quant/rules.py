"""llama-quantize's per-tensor type rules: a port of the type selection in llama.cpp's
src/llama-quant.cpp (tensor_allows_quantization, llama_tensor_get_type_impl,
tensor_type_fallback), applied to a model's tensor names and shapes."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from lltui.core.gguf.types import FTYPE_DEFAULT_TYPE, GgmlType, LlamaFtype, n_dims, type_info


class _Members:
    """An enum's members as plain attributes: the same objects, without the cost of an enum
    class's attribute lookup (Python 3.11), which the rules below make per tensor and type."""

    def __init__(self, members: Mapping[str, Any]) -> None:
        self.__dict__.update(members)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


_G = _Members(GgmlType.__members__)
_F = _Members(LlamaFtype.__members__)


class QuantizeRefused(Exception):
    """llama-quantize would stop on this model with this type (the message says why)."""


class Category(Enum):
    TOKEN_EMBD = auto()
    ATTENTION_Q = auto()
    ATTENTION_V = auto()
    ATTENTION_K = auto()
    ATTENTION_QKV = auto()
    ATTENTION_KV_B = auto()
    ATTENTION_OUTPUT = auto()
    FFN_UP = auto()
    FFN_GATE = auto()
    FFN_DOWN = auto()
    OUTPUT = auto()
    OTHER = auto()


_C = _Members(Category.__members__)

_ATTN_V_LIKE = (_C.ATTENTION_V, _C.ATTENTION_QKV, _C.ATTENTION_KV_B)
_ATTN_K_Q = (_C.ATTENTION_K, _C.ATTENTION_Q)
_FFN_GATE_UP = (_C.FFN_GATE, _C.FFN_UP)


def tensor_category(name: str) -> Category:
    """The broad class llama-quantize sorts a tensor into, by substring of its name."""
    if name == "output.weight":
        return _C.OUTPUT
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return _C.TOKEN_EMBD
    for needle, cat in (
        ("attn_qkv.weight", _C.ATTENTION_QKV),
        ("attn_kv_b.weight", _C.ATTENTION_KV_B),
        ("attn_v.weight", _C.ATTENTION_V),
        ("attn_k.weight", _C.ATTENTION_K),
        ("attn_q.weight", _C.ATTENTION_Q),
        ("attn_output.weight", _C.ATTENTION_OUTPUT),
        ("ffn_up", _C.FFN_UP),
        ("ffn_gate", _C.FFN_GATE),
        ("ffn_down", _C.FFN_DOWN),
    ):
        if needle in name:
            return cat
    return _C.OTHER


_NOT_QUANTIZED_SUBSTRINGS = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
)
_GLM5_NEXT_NOT_QUANTIZED = (
    "hc_",
    "indexer.attn_q_b",
    "indexer.attn_k",
    "indexer.proj",
    "indexer_compressor_gate",
    "indexer_compressor_ape",
    "ssm_f_a.weight",
    "ssm_f_b.weight",
    "ssm_g_a.weight",
    "ssm_g_b.weight",
    "ssm_beta.weight",
    "attn_kv_a_mqa.weight",
    "attn_k_b.weight",
    "attn_v_b.weight",
)


def allows_quantization(arch: str, name: str, dims: Sequence[int]) -> bool:
    """Whether llama-quantize changes this tensor's type at all (else it is copied as is)."""
    if n_dims(dims) < 2:
        return False
    # llama.cpp tests name.rfind("weight") == name.size() - 6 on size_t, which also holds
    # for a 5-character name that lacks "weight" (npos == size - 6 after wrap-around).
    if not (name.endswith("weight") or len(name) == 5):
        return False
    if name in ("position_embd.weight", "token_types.weight"):
        return False
    if any(s in name for s in _NOT_QUANTIZED_SUBSTRINGS):
        return False
    return not (arch == "glm5-next" and any(s in name for s in _GLM5_NEXT_NOT_QUANTIZED))


_BLK_RE = re.compile(r"blk\.\s*([+-]?\d+)")


def layer_index(name: str) -> int | None:
    """The N of ``blk.N.``, parsed as llama.cpp's sscanf("blk.%d.") does; None if absent."""
    m = _BLK_RE.match(name)
    return int(m.group(1)) if m else None


def tensor_sort_key(name: str) -> tuple[int, bytes]:
    """llama_model_loader's weight order: by layer (-1 outside blocks), then by name."""
    layer = layer_index(name)
    return (-1 if layer is None else layer, name.encode("utf-8"))


@dataclass(frozen=True)
class SourceTensor:
    """A tensor of the model being quantized, as the rules see it."""

    name: str
    dims: tuple[int, ...]  # ggml order, ne0 first
    type: int = _G.F16  # only matters for tensors that are copied unchanged


@dataclass(frozen=True)
class QuantSource:
    """What the rules need from a model: a few hyperparameters and the tensor list."""

    arch: str
    n_layer: int  # block_count, MTP/nextn layers included
    n_head: int  # layer 0
    n_head_kv: int  # layer 0
    n_expert: int
    tensors: tuple[SourceTensor, ...]
    kv_bytes: int = 0  # encoded metadata copied to the output (split/quant keys excluded)
    n_kv: int = 0

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_llama_70b(self) -> bool:
        """llama.cpp's LLM_TYPE_70B, which gets more bits on attn_v."""
        return self.arch == "llama" and self.n_layer == 80 and self.n_head != self.n_head_kv


@dataclass(frozen=True, slots=True)
class TensorFacts:
    """What the rules need of one tensor that does not depend on the target type: worked
    out once per model (:func:`prepare`), not once per type."""

    tensor: SourceTensor
    quantizable: bool  # allows_quantization
    category: Category
    layer: int | None  # the N of blk.N., for expert tensors
    imatrix_exempt: bool  # token_embd / output: never need an imatrix
    source_quantized: bool  # the source tensor is quantized (changing it is requantizing)
    kept_type: GgmlType | None  # the type a tensor copied unchanged keeps (None: quantizable)


@dataclass(frozen=True, slots=True)
class PreparedSource:
    """A model's tensors in llama-quantize's order with their type-independent facts."""

    ordered: tuple[TensorFacts, ...]
    n_attention_wv: int
    has_tied_embeddings: bool
    any_source_quantized: bool = False  # some tensor is quantized already
    # the type (F16, Q4_0, ...) most weights llama-quantize would touch are in: no type with
    # more bits gets back what it dropped; None when there are none
    precision: GgmlType | None = None


_IMATRIX_EXEMPT = frozenset({"token_embd.weight", "per_layer_token_embd.weight", "output.weight"})


def prepare(src: QuantSource) -> PreparedSource:
    """The per-tensor checks every type shares, done once for ``src``."""
    ordered = sorted(src.tensors, key=lambda t: tensor_sort_key(t.name))
    facts = []
    for t in ordered:
        quantizable = allows_quantization(src.arch, t.name, t.dims)
        facts.append(
            TensorFacts(
                tensor=t,
                quantizable=quantizable,
                category=tensor_category(t.name),
                layer=layer_index(t.name),
                imatrix_exempt=t.name in _IMATRIX_EXEMPT,
                source_quantized=type_info(t.type).quantized,
                kept_type=None if quantizable else GgmlType(t.type),
            )
        )
    cats = [f.category for f in facts]
    return PreparedSource(
        ordered=tuple(facts),
        n_attention_wv=sum(1 for c in cats if c in _ATTN_V_LIKE),
        has_tied_embeddings=_C.OUTPUT not in cats,
        any_source_quantized=any(f.source_quantized for f in facts),
        precision=_precision(facts),
    )


def _precision(facts: Sequence[TensorFacts]) -> GgmlType | None:
    """The type of most elements llama-quantize would quantize."""
    elements: dict[int, int] = {}
    for f in facts:
        if f.quantizable:
            elements[f.tensor.type] = elements.get(f.tensor.type, 0) + math.prod(f.tensor.dims)
    if not elements:
        return None
    return GgmlType(max(elements, key=lambda t: elements[t]))


class _State:
    """quantize_state_impl: counters advanced as tensors are visited in order."""

    def __init__(self, src: QuantSource, prepared: PreparedSource, imatrix: bool) -> None:
        self.n_attention_wv = prepared.n_attention_wv
        self.has_tied_embeddings = prepared.has_tied_embeddings
        self.n_ffn_down = self.n_ffn_gate = self.n_ffn_up = src.n_layer
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0
        self.n_fallback = 0
        self.has_imatrix = imatrix


# the types whose rules read whether an importance matrix is given (st.has_imatrix below);
# every other type comes out the same with or without one
_READS_IMATRIX = frozenset(
    {_F.MOSTLY_IQ3_XXS, _F.MOSTLY_IQ4_NL, _F.MOSTLY_IQ4_XS, _F.MOSTLY_Q4_0, _F.MOSTLY_Q5_0}
)


def reads_imatrix(ftype: LlamaFtype) -> bool:
    """Whether an importance matrix changes the types the rules pick for ``ftype``."""
    return ftype in _READS_IMATRIX


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


_IQ_LOW = (_F.MOSTLY_IQ2_XXS, _F.MOSTLY_IQ2_XS, _F.MOSTLY_IQ1_S, _F.MOSTLY_IQ2_S, _F.MOSTLY_IQ2_M)
_IQ_LOW_ALL = frozenset({*_IQ_LOW, _F.MOSTLY_IQ1_M})
_OUTPUT_Q5K = frozenset({*_IQ_LOW_ALL, _F.MOSTLY_IQ3_XXS})
_MOE8_ATTN_OUT_Q5K = (
    _F.MOSTLY_Q2_K,
    _F.MOSTLY_IQ3_XS,
    _F.MOSTLY_IQ3_XXS,
    _F.MOSTLY_Q3_K_S,
    _F.MOSTLY_Q3_K_M,
    _F.MOSTLY_IQ4_NL,
    _F.MOSTLY_Q4_K_S,
    _F.MOSTLY_Q4_K_M,
    _F.MOSTLY_IQ3_S,
    _F.MOSTLY_IQ3_M,
    _F.MOSTLY_IQ4_XS,
)


def _layer_info(
    src: QuantSource, i_layer: int, n_layer: int, name: str, parsed: int | None
) -> tuple[int, int]:
    if max(1, src.n_expert) > 1:
        # expert tensors are not visited one per layer: take the layer from the name
        if parsed is None:
            raise QuantizeRefused(f"failed to determine layer for tensor {name}")
        if parsed < 0 or parsed >= n_layer:
            raise QuantizeRefused(
                f"bad layer {parsed} for tensor {name}; must be in [0, {n_layer})"
            )
        i_layer = parsed
    return i_layer, n_layer


def _rules(
    st: _State, src: QuantSource, new: GgmlType, f: TensorFacts, ftype: LlamaFtype
) -> GgmlType:
    """llama_tensor_get_type_impl: the first branch that matches the tensor decides."""
    t, cat = f.tensor, f.category
    glm5_keep_q8 = ("attn_q_a", "attn_q_b", "nextn.eh_proj")
    if (
        src.arch == "glm5-next"
        and any(s in t.name for s in glm5_keep_q8)
        and new not in (_G.F32, _G.BF16, _G.F16)
    ):
        return _G.Q8_0
    if cat == _C.OUTPUT or (st.has_tied_embeddings and cat == _C.TOKEN_EMBD):
        return _output_type(src, new, t, ftype)
    if ftype == _F.MOSTLY_MXFP4_MOE:
        is_expert_role = cat in (_C.FFN_UP, _C.FFN_GATE, _C.FFN_DOWN)
        ne2 = t.dims[2] if len(t.dims) > 2 else 1
        return _G.MXFP4 if ne2 > 1 and (src.arch != "bailingmoe3" or is_expert_role) else _G.Q8_0
    if cat == _C.TOKEN_EMBD:
        return _token_embd_type(new, ftype)
    if ftype in _IQ_LOW_ALL:
        return _iq_low_type(st, src, new, ftype, cat)
    if cat in _ATTN_V_LIKE:
        return _attn_v_type(st, src, new, ftype)
    if cat in _ATTN_K_Q:
        return _attn_k_q_type(src, new, ftype, cat)
    if cat == _C.FFN_DOWN:
        return _ffn_down_type(st, src, new, f, ftype)
    if cat == _C.ATTENTION_OUTPUT:
        return _attn_output_type(src, new, ftype)
    if cat == _C.ATTENTION_QKV:
        if ftype in (_F.MOSTLY_Q3_K_M, _F.MOSTLY_Q3_K_L, _F.MOSTLY_IQ3_M):
            return _G.Q4_K
        if ftype == _F.MOSTLY_Q4_K_M:
            return _G.Q5_K
        if ftype == _F.MOSTLY_Q5_K_M:
            return _G.Q6_K
        return new
    if cat in _FFN_GATE_UP:
        return _ffn_gate_up_type(st, src, new, f, ftype, cat)
    return new


def _output_type(src: QuantSource, new: GgmlType, t: SourceTensor, ftype: LlamaFtype) -> GgmlType:
    """The output head (or the tied embeddings that serve as one)."""
    nx = t.dims[0] if t.dims else 1
    if ftype == _F.MOSTLY_MXFP4_MOE or src.arch == "falcon" or nx % type_info(new).block_size:
        return _G.Q8_0
    if ftype in _OUTPUT_Q5K:
        return _G.Q5_K
    if new != _G.Q8_0:
        return _G.Q6_K
    return new


def _token_embd_type(new: GgmlType, ftype: LlamaFtype) -> GgmlType:
    if ftype in (_F.MOSTLY_IQ2_XXS, _F.MOSTLY_IQ2_XS, _F.MOSTLY_IQ1_S, _F.MOSTLY_IQ1_M):
        return _G.Q2_K
    if ftype in (_F.MOSTLY_IQ2_S, _F.MOSTLY_IQ2_M, _F.MOSTLY_IQ3_XXS):
        return _G.IQ3_S
    if ftype in (_F.MOSTLY_TQ1_0, _F.MOSTLY_TQ2_0, _F.MOSTLY_Q2_0):
        return _G.Q4_K
    return new


def _iq_low_type(
    st: _State, src: QuantSource, new: GgmlType, ftype: LlamaFtype, cat: Category
) -> GgmlType:
    """The 1- and 2-bit IQ types: more bits where quality hangs on it."""
    n_gqa, n_expert = src.n_gqa, src.n_expert
    iq2s_or_m = ftype in (_F.MOSTLY_IQ2_S, _F.MOSTLY_IQ2_M)
    if cat in _ATTN_V_LIKE:
        low = _G.IQ3_S if iq2s_or_m else _G.Q2_K
        new = _G.Q4_K if n_gqa >= 4 or n_expert >= 4 else low
        st.i_attention_wv += 1
    elif n_expert == 8 and cat == _C.ATTENTION_K:
        new = _G.Q4_K
    elif cat == _C.FFN_DOWN:
        if st.i_ffn_down < st.n_ffn_down // 8:
            new = _G.IQ3_S if iq2s_or_m else _G.Q2_K
        st.i_ffn_down += 1
    elif cat == _C.ATTENTION_OUTPUT:
        if n_expert == 8:
            new = _G.Q5_K
        elif ftype in (_F.MOSTLY_IQ1_S, _F.MOSTLY_IQ1_M):
            new = _G.IQ2_XXS
        elif iq2s_or_m:
            new = _G.IQ3_S
    return new


def _attn_v_type(st: _State, src: QuantSource, new: GgmlType, ftype: LlamaFtype) -> GgmlType:
    """attn_v (and the fused qkv / kv_b that carry V)."""
    n_gqa = src.n_gqa
    i_wv, n_wv = st.i_attention_wv, st.n_attention_wv
    if ftype == _F.MOSTLY_Q2_K:
        new = _G.Q4_K if n_gqa >= 4 else _G.Q3_K
    elif ftype == _F.MOSTLY_Q2_K_S and n_gqa >= 4:
        new = _G.Q4_K
    elif ftype == _F.MOSTLY_IQ3_XXS:
        new = _G.Q4_K if n_gqa >= 4 else (_G.IQ3_XXS if st.has_imatrix else _G.IQ3_S)
    elif (ftype in (_F.MOSTLY_IQ3_XS, _F.MOSTLY_IQ3_S) and n_gqa >= 4) or ftype == _F.MOSTLY_IQ3_M:
        new = _G.Q4_K
    elif ftype == _F.MOSTLY_Q3_K_M:
        new = _G.Q5_K if i_wv < 2 else _G.Q4_K
    elif ftype == _F.MOSTLY_Q3_K_L or (
        ftype in (_F.MOSTLY_IQ4_NL, _F.MOSTLY_IQ4_XS) and n_gqa >= 4
    ):
        new = _G.Q5_K
    elif ftype in (_F.MOSTLY_Q4_K_M, _F.MOSTLY_Q5_K_M) and _use_more_bits(i_wv, n_wv):
        new = _G.Q6_K
    elif ftype == _F.MOSTLY_Q4_K_S and i_wv < 4:
        new = _G.Q5_K
    if src.is_llama_70b and new in (_G.Q3_K, _G.Q4_K):
        new = _G.Q5_K
    if src.n_expert == 8:
        new = _G.Q8_0
    st.i_attention_wv += 1
    return new


def _attn_k_q_type(src: QuantSource, new: GgmlType, ftype: LlamaFtype, cat: Category) -> GgmlType:
    if cat == _C.ATTENTION_K and src.n_expert == 8:
        return _G.Q8_0
    if ftype == _F.MOSTLY_IQ3_XS:
        return _G.IQ3_XXS
    if ftype == _F.MOSTLY_IQ3_XXS:
        return _G.IQ2_S
    return new


def _ffn_down_type(
    st: _State, src: QuantSource, new: GgmlType, f: TensorFacts, ftype: LlamaFtype
) -> GgmlType:
    """ffn_down: more bits in the first layers and on a regular pattern after."""
    i, n = _layer_info(src, st.i_ffn_down, st.n_ffn_down, f.tensor.name, f.layer)
    falcon = src.arch == "falcon"
    if ftype == _F.MOSTLY_Q2_K:
        new = _G.Q3_K
    elif ftype == _F.MOSTLY_Q2_K_S:
        if i < n // 8:
            new = _G.Q4_K
    elif ftype == _F.MOSTLY_IQ3_XXS and not st.has_imatrix:
        new = _G.Q4_K if i < n // 8 else _G.Q3_K
    elif ftype == _F.MOSTLY_Q3_K_M:
        if i < n // 16:
            new = _G.Q5_K
        elif not falcon or _use_more_bits(i, n):
            new = _G.Q4_K
        else:
            new = _G.Q3_K
    elif ftype == _F.MOSTLY_IQ3_M and (i < n // 8 or (src.n_expert == 8 and _use_more_bits(i, n))):
        new = _G.Q4_K
    elif ftype == _F.MOSTLY_Q3_K_L:
        new = _G.Q4_K if falcon else _G.Q5_K
    elif ftype == _F.MOSTLY_Q4_K_M:
        if falcon:
            new = _G.Q6_K if i < n // 16 else _G.Q5_K if _use_more_bits(i, n) else _G.Q4_K
        elif _use_more_bits(i, n):
            new = _G.Q6_K
    elif i < n // 8 and ftype in (_F.MOSTLY_IQ4_NL, _F.MOSTLY_IQ4_XS) and not st.has_imatrix:
        new = _G.Q5_K
    elif ftype == _F.MOSTLY_Q5_K_M and _use_more_bits(i, n):
        new = _G.Q6_K
    elif ftype == _F.MOSTLY_Q4_K_S and not falcon and i < n // 8:
        new = _G.Q5_K
    elif ftype in (_F.MOSTLY_Q4_0, _F.MOSTLY_Q5_0) and st.has_imatrix and i < n // 8:
        # llama.cpp guards the first ffn_down layers only when an imatrix is given
        new = _G.Q4_1 if ftype == _F.MOSTLY_Q4_0 else _G.Q5_1
    st.i_ffn_down += 1
    return new


_ATTN_OUTPUT_BY_FTYPE = {
    _F.MOSTLY_Q2_K: _G.Q3_K,
    _F.MOSTLY_IQ3_XXS: _G.IQ3_S,
    _F.MOSTLY_Q3_K_M: _G.Q4_K,
    _F.MOSTLY_Q3_K_L: _G.Q5_K,
    _F.MOSTLY_IQ3_M: _G.Q4_K,
}


def _attn_output_type(src: QuantSource, new: GgmlType, ftype: LlamaFtype) -> GgmlType:
    if src.arch == "falcon":
        return _G.Q4_K if ftype == _F.MOSTLY_Q3_K_L else new
    if src.n_expert == 8:
        return _G.Q5_K if ftype in _MOE8_ATTN_OUT_Q5K else new
    return _ATTN_OUTPUT_BY_FTYPE.get(ftype, new)


def _ffn_gate_up_type(
    st: _State, src: QuantSource, new: GgmlType, f: TensorFacts, ftype: LlamaFtype, cat: Category
) -> GgmlType:
    gate = cat == _C.FFN_GATE
    counter = st.i_ffn_gate if gate else st.i_ffn_up
    total = st.n_ffn_gate if gate else st.n_ffn_up
    i, n = _layer_info(src, counter, total, f.tensor.name, f.layer)
    if ftype == _F.MOSTLY_IQ3_XS and n // 8 <= i < 7 * n // 8:
        new = _G.IQ3_XXS
    if gate:
        st.i_ffn_gate += 1
    else:
        st.i_ffn_up += 1
    return new


_FALLBACK = {
    _G.IQ1_S: _G.IQ4_NL,
    _G.IQ1_M: _G.IQ4_NL,
    _G.IQ2_XXS: _G.IQ4_NL,
    _G.IQ2_XS: _G.IQ4_NL,
    _G.IQ2_S: _G.IQ4_NL,
    _G.IQ3_XXS: _G.IQ4_NL,
    _G.IQ3_S: _G.IQ4_NL,
    _G.IQ4_XS: _G.IQ4_NL,
    _G.Q2_0: _G.Q4_0,
    _G.Q2_K: _G.Q4_0,
    _G.Q3_K: _G.Q4_0,
    _G.TQ1_0: _G.Q4_0,
    _G.TQ2_0: _G.Q4_0,
    _G.Q4_K: _G.Q5_0,
    _G.Q5_K: _G.Q5_1,
    _G.Q6_K: _G.Q8_0,
}


def _fallback(st: _State, t: SourceTensor, target: GgmlType) -> tuple[GgmlType, bool]:
    """tensor_type_fallback: a type whose blocks fit the row length, else F16."""
    ncols = t.dims[0] if t.dims else 1
    block = type_info(target).block_size
    if ncols % block == 0:
        return target, False
    st.n_fallback += 1
    out = _FALLBACK.get(target)
    if out is None:
        if block > 32:
            raise QuantizeRefused(
                f"no tensor type fallback is defined for type {type_info(target).name} "
                f"({t.name} has rows of {ncols})"
            )
        out = target
    if ncols % type_info(out).block_size:
        out = _G.F16
    return out, True


_IMATRIX_TYPES = frozenset({_G.IQ3_XXS, _G.IQ2_XXS, _G.IQ2_XS, _G.IQ2_S, _G.IQ1_M, _G.IQ1_S})


def _requires_imatrix(f: TensorFacts, new: GgmlType, ftype: LlamaFtype) -> bool:
    if f.imatrix_exempt:
        return False
    if new in _IMATRIX_TYPES:
        return True
    return new == _G.Q2_K and ftype == _F.MOSTLY_Q2_K_S


def choose_types(
    src: QuantSource, ftype: LlamaFtype, imatrix: bool, prepared: PreparedSource | None = None
) -> tuple[list[tuple[SourceTensor, GgmlType, bool, bool]], int, bool]:
    """(tensor, type, quantizable, fallback) in output order, fallback count, imatrix needed.

    ``prepared`` (from :func:`prepare`) saves redoing the type-independent checks when the
    same model goes through many types."""
    default = FTYPE_DEFAULT_TYPE.get(ftype)
    if default is None:
        raise QuantizeRefused(f"invalid output file type {int(ftype)}")
    prep = prepared if prepared is not None else prepare(src)
    st = _State(src, prep, imatrix)
    quantized_default = type_info(default).quantized
    out = []
    needs_imatrix = False
    for f in prep.ordered:
        t = f.tensor
        if f.kept_type is not None:
            out.append((t, f.kept_type, False, False))
            continue
        new, fell_back = default, False
        if quantized_default:
            new = _rules(st, src, default, f, ftype)
            new, fell_back = _fallback(st, t, new)
        needs_imatrix = needs_imatrix or _requires_imatrix(f, new, ftype)
        out.append((t, new, True, fell_back))
    return out, st.n_fallback, needs_imatrix

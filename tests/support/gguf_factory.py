"""Tiny GGUF models of real architectures, written with the ``gguf`` package, for tests and benches.

Tensor names, shapes and metadata keys follow llama.cpp's loaders (src/models/*.cpp), so
llama.cpp can load these files: llama, qwen3, gemma3 (sliding window attention) and qwen3moe.
Weights are random (seeded); norms are F32 as converters write them. Also raw byte builders
for hand-made (and hostile) GGUF files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from lltui.core.gguf import writer
from lltui.sources.models.demo import spm_vocab  # the vocabulary lltui demo writes too

Q = gguf.GGMLQuantizationType
V = gguf.GGUFValueType

# llama_ftype written as general.file_type for each weight type
FILE_TYPE = {"F32": 0, "F16": 1, "Q8_0": 7, "Q4_K": 15, "Q4_0": 2, "BF16": 32}


@dataclass(frozen=True)
class ModelSpec:
    arch: str
    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 512
    n_vocab: int = 1024
    n_ctx_train: int = 4096
    tied: bool = False
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 256
    sliding_window: int = 0
    swa_pattern: int = 0
    qk_norm: bool = False
    post_norms: bool = False
    qkv_bias: bool = False
    n_nextn: int = 0  # trailing MTP (nextn) layers, counted in n_layer (glm4moe)
    fused_qkv: bool = False  # one attn_qkv matrix (phi3)
    fused_up: bool = False  # ffn_up holds gate and up, 2 * n_ff rows, no ffn_gate (phi3)
    # key -> (value, gguf.GGUFValueType)
    extra_kv: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    # more tensors of every layer (suffix after "blk.N.", ggml dims), and of the model
    extra_layer_tensors: tuple[tuple[str, tuple[int, ...]], ...] = ()
    extra_tensors: tuple[tuple[str, tuple[int, ...]], ...] = ()
    # tensors left out: a layer's (suffix after "blk.N.") or the model's (full name)
    drop: tuple[str, ...] = ()
    norm_bias: bool = False  # attn_norm, ffn_norm and output_norm biases (LayerNorm models)
    bias: bool = False  # biases on Q/K/V, the attention output and the FFN matrices
    ffn_gated: bool = True  # ffn_gate (a gated FFN); False: up, activation, down
    qk_norm_full: bool = False  # Q/K norms over the whole Q/K rows, not per head (olmo2)
    n_ff_shexp: int = 0  # a shared expert of this width in every MoE layer
    n_dense_lead: int = 0  # leading layers with a dense FFN in an MoE model
    moe_every: int = 1  # experts only in every Nth layer (the others dense)
    probs_bias: bool = False  # a selection bias (exp_probs_b) in every MoE layer


def llama_spec(**kw: Any) -> ModelSpec:
    return replace(ModelSpec(arch="llama", n_head=8, n_head_kv=2, head_dim=32), **kw)


def qwen3_spec(**kw: Any) -> ModelSpec:
    return replace(ModelSpec(arch="qwen3", tied=True, qk_norm=True), **kw)


def gemma3_spec(**kw: Any) -> ModelSpec:
    base = ModelSpec(
        arch="gemma3",
        n_layer=6,
        n_head=4,
        n_head_kv=1,
        tied=True,
        qk_norm=True,
        post_norms=True,
        sliding_window=128,
        swa_pattern=6,
    )
    return replace(base, **kw)


def qwen3moe_spec(**kw: Any) -> ModelSpec:
    base = ModelSpec(
        arch="qwen3moe", qk_norm=True, n_expert=8, n_expert_used=2, n_ff_exp=256, n_ff=512
    )
    return replace(base, **kw)


# Real model shapes, for sparse real-size files (benches, speed and search tests); any field
# may be overridden (fewer layers, another vocabulary, a trained context).
def llama_8b_spec(**kw: Any) -> ModelSpec:
    shape = dict(n_embd=4096, n_ff=14336, n_head=32, n_head_kv=8, head_dim=128, n_layer=32)
    return llama_spec(**{**shape, "n_vocab": 128256, **kw})


def qwen3moe_30b_a3b_spec(**kw: Any) -> ModelSpec:
    shape = dict(
        n_embd=2048,
        n_ff=6144,
        n_expert=128,
        n_expert_used=8,
        n_ff_exp=768,
        n_head=32,
        n_head_kv=4,
        head_dim=128,
        n_layer=48,
    )
    return qwen3moe_spec(**{**shape, "n_vocab": 151936, **kw})


def qwen3moe_235b_a22b_spec(**kw: Any) -> ModelSpec:
    shape = dict(
        n_embd=4096,
        n_ff=12288,
        n_expert=128,
        n_expert_used=8,
        n_ff_exp=1536,
        n_head=64,
        n_head_kv=4,
        head_dim=128,
        n_layer=94,
    )
    return qwen3moe_spec(**{**shape, "n_vocab": 151936, **kw})


def phi3_spec(**kw: Any) -> ModelSpec:
    base = ModelSpec(arch="phi3", n_head=4, n_head_kv=4, fused_qkv=True, fused_up=True)
    return replace(base, **kw)


def gpt2_spec(**kw: Any) -> ModelSpec:
    """gpt2 (starcoder with n_head_kv 1): learned positions, LayerNorm and biases everywhere."""
    eps = {"gpt2.attention.layer_norm_epsilon": (1e-5, V.FLOAT32)}
    base = ModelSpec(arch="gpt2", n_head=4, n_head_kv=4, fused_qkv=True, extra_kv=eps)
    return replace(base, **kw)


def starcoder_spec(**kw: Any) -> ModelSpec:
    eps = {"starcoder.attention.layer_norm_epsilon": (1e-5, V.FLOAT32)}
    return gpt2_spec(**{"arch": "starcoder", "n_head_kv": 1, "extra_kv": eps, **kw})


def gpt_oss_spec(**kw: Any) -> ModelSpec:
    """gpt-oss: sinks, biases, experts with biases, sliding windows every other layer; the head
    size (64) is not n_embd / n_head."""
    base = ModelSpec(
        arch="gpt-oss",
        n_embd=320,
        n_head=8,
        n_head_kv=2,
        head_dim=64,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=256,
        qkv_bias=True,
        sliding_window=128,
        swa_pattern=2,
    )
    return replace(base, **kw)


def glm4moe_spec(**kw: Any) -> ModelSpec:
    """glm4moe: a dense first layer, sigmoid routing with a selection bias, a shared expert,
    scaled normalised weights, attention biases."""
    extra = {
        "glm4moe.leading_dense_block_count": (1, V.UINT32),
        "glm4moe.expert_shared_count": (1, V.UINT32),
        "glm4moe.expert_gating_func": (2, V.UINT32),
        "glm4moe.expert_weights_scale": (2.5, V.FLOAT32),
        "glm4moe.expert_weights_norm": (True, V.BOOL),
    }
    base = ModelSpec(
        arch="glm4moe",
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=256,
        qkv_bias=True,
        extra_kv=extra,
    )
    return replace(base, **kw)


def mistral3_spec(**kw: Any) -> ModelSpec:
    """mistral3: llama's tensors, attention temperature scaling (needs the YaRN context)."""
    extra = {
        "mistral3.attention.temperature_scale": (0.1, V.FLOAT32),
        "mistral3.rope.scaling.original_context_length": (4096, V.UINT32),
    }
    return llama_spec(**{"arch": "mistral3", "extra_kv": extra, **kw})


def qwen2moe_spec(**kw: Any) -> ModelSpec:
    """qwen2moe: qwen2's attention, experts, a shared expert scaled by its own sigmoid gate."""
    extra = {"qwen2moe.expert_shared_feed_forward_length": (384, V.UINT32)}
    base = ModelSpec(
        arch="qwen2moe",
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=256,
        qkv_bias=True,
        extra_kv=extra,
    )
    return replace(base, **kw)


def deepseek2_spec(**kw: Any) -> ModelSpec:
    """deepseek2 with MLA: low-rank Q, one compressed KV row per token (a K-only cache of
    kv_lora + rope dims, one head), heads decompressed by attn_k_b / attn_v_b; a dense first
    layer, softmax routing, a shared expert."""
    kv_lora, q_lora, rope, nope, hv = 128, 96, 32, 64, 64
    extra = {
        "deepseek2.attention.kv_lora_rank": (kv_lora, V.UINT32),
        "deepseek2.attention.q_lora_rank": (q_lora, V.UINT32),
        "deepseek2.attention.key_length_mla": (nope + rope, V.UINT32),
        "deepseek2.attention.value_length_mla": (hv, V.UINT32),
        "deepseek2.attention.key_length": (kv_lora + rope, V.UINT32),
        "deepseek2.attention.value_length": (kv_lora, V.UINT32),
        "deepseek2.attention.head_count_kv": (1, V.UINT32),
        "deepseek2.rope.dimension_count": (rope, V.UINT32),
        "deepseek2.leading_dense_block_count": (1, V.UINT32),
        "deepseek2.expert_shared_count": (1, V.UINT32),
        "deepseek2.expert_weights_norm": (True, V.BOOL),
    }
    base = ModelSpec(
        arch="deepseek2",
        n_head=4,
        n_head_kv=1,
        head_dim=kv_lora + rope,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=256,
        extra_kv=extra,
    )
    return replace(base, **kw)


def deepseek3_spec(**kw: Any) -> ModelSpec:
    """deepseek2 as DeepSeek-V3 / Kimi-K2 convert it: sigmoid routing with scaled weights, an
    MTP layer (ungrouped routing)."""
    base = deepseek2_spec(n_layer=5, n_nextn=1)
    extra = {
        **base.extra_kv,
        "deepseek2.expert_gating_func": (2, V.UINT32),
        "deepseek2.expert_weights_scale": (2.5, V.FLOAT32),
    }
    return replace(base, extra_kv=extra, **kw)


def deepseek3_grouped_spec(**kw: Any) -> ModelSpec:
    """deepseek3_spec with DeepSeek-V3's grouped routing: 4 groups of 4 experts, 2 used."""
    base = deepseek3_spec(n_expert=16, n_expert_used=4)
    extra = {
        **base.extra_kv,
        "deepseek2.expert_group_count": (4, V.UINT32),
        "deepseek2.expert_group_used_count": (2, V.UINT32),
    }
    return replace(base, extra_kv=extra, **kw)


def glm_dsa_spec(**kw: Any) -> ModelSpec:
    """glm-dsa (GLM-5): deepseek2's MLA and routing (sigmoid, scaled, a shared expert) with
    DeepSeek's sparse attention: a lightning indexer per layer whose keys (one head of
    indexer.key_length) have a cache of their own; each query attends its top-k cells."""
    base = deepseek3_spec(arch="glm-dsa", n_layer=4, n_nextn=0)
    ih, ik = 4, 64
    extra = {k.replace("deepseek2.", "glm-dsa."): v for k, v in base.extra_kv.items()}
    extra |= {
        "glm-dsa.attention.indexer.head_count": (ih, V.UINT32),
        "glm-dsa.attention.indexer.key_length": (ik, V.UINT32),
        "glm-dsa.attention.indexer.top_k": (256, V.UINT32),
    }
    q_lora = extra["glm-dsa.attention.q_lora_rank"][0]
    e = base.n_embd
    layer = (
        ("indexer.k_norm.weight", (ik,)),
        ("indexer.k_norm.bias", (ik,)),
        ("indexer.proj.weight", (e, ih)),
        ("indexer.attn_k.weight", (e, ik)),
        ("indexer.attn_q_b.weight", (q_lora, ih * ik)),
    )
    return replace(base, extra_kv=extra, extra_layer_tensors=layer, **kw)


def qwen2_spec(**kw: Any) -> ModelSpec:
    return replace(ModelSpec(arch="qwen2", tied=True, qkv_bias=True), **kw)


SPECS = {"llama": llama_spec, "qwen3": qwen3_spec, "gemma3": gemma3_spec, "qwen3moe": qwen3moe_spec}


def tensor_plan(spec: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """(name, ggml dims with ne0 first) of every tensor llama.cpp expects for ``spec``."""
    e, hd = spec.n_embd, spec.head_dim
    plan: list[tuple[str, tuple[int, ...]]] = [
        ("token_embd.weight", (e, spec.n_vocab)),
        ("output_norm.weight", (e,)),
    ]
    gpt2 = spec.arch in ("gpt2", "starcoder")
    mla = spec.arch in ("deepseek2", "glm-dsa", "deepseek32", "mistral4")
    if gpt2:
        plan += [("position_embd.weight", (e, spec.n_ctx_train)), ("output_norm.bias", (e,))]
    if not spec.tied:
        plan.append(("output.weight", (e, spec.n_vocab)))
    for i in range(spec.n_layer):
        b = f"blk.{i}."
        if mla:
            ex = spec.extra_kv
            a = spec.arch
            kv_lora = ex[f"{a}.attention.kv_lora_rank"][0]
            q_lora = ex[f"{a}.attention.q_lora_rank"][0]
            rope = ex[f"{a}.rope.dimension_count"][0]
            k_mla = ex[f"{a}.attention.key_length_mla"][0]
            v_mla = ex[f"{a}.attention.value_length_mla"][0]
            h = spec.n_head
            plan += [
                (b + "attn_norm.weight", (e,)),
                (b + "attn_q_a_norm.weight", (q_lora,)),
                (b + "attn_kv_a_norm.weight", (kv_lora,)),
                (b + "attn_q_a.weight", (e, q_lora)),
                (b + "attn_q_b.weight", (q_lora, h * k_mla)),
                (b + "attn_kv_a_mqa.weight", (e, kv_lora + rope)),
                (b + "attn_k_b.weight", (k_mla - rope, kv_lora, h)),
                (b + "attn_v_b.weight", (kv_lora, v_mla, h)),
                (b + "attn_output.weight", (h * v_mla, e)),
                (b + "ffn_norm.weight", (e,)),
            ]
        elif spec.fused_qkv:
            qkv = hd * (spec.n_head + 2 * spec.n_head_kv)
            plan += [(b + "attn_norm.weight", (e,)), (b + "attn_qkv.weight", (e, qkv))]
        else:
            plan += [
                (b + "attn_norm.weight", (e,)),
                (b + "attn_q.weight", (e, hd * spec.n_head)),
                (b + "attn_k.weight", (e, hd * spec.n_head_kv)),
                (b + "attn_v.weight", (e, hd * spec.n_head_kv)),
            ]
        if not mla:
            plan.append((b + "attn_output.weight", (hd * spec.n_head, e)))
        if mla:
            pass
        elif spec.arch in ("gpt-oss", "glm4moe"):  # (their FFN reads the post-attention norm)
            plan.append((b + "post_attention_norm.weight", (e,)))
        else:
            plan.append((b + "ffn_norm.weight", (e,)))
        if gpt2:
            qkv = hd * (spec.n_head + 2 * spec.n_head_kv)
            plan += [
                (b + "attn_norm.bias", (e,)),
                (b + "attn_qkv.bias", (qkv,)),
                (b + "attn_output.bias", (e,)),
                (b + "ffn_norm.bias", (e,)),
                (b + "ffn_down.weight", (spec.n_ff, e)),
                (b + "ffn_down.bias", (e,)),
                (b + "ffn_up.weight", (e, spec.n_ff)),
                (b + "ffn_up.bias", (spec.n_ff,)),
            ]
            continue
        if spec.qk_norm:
            qn, kn = (hd * spec.n_head, hd * spec.n_head_kv) if spec.qk_norm_full else (hd, hd)
            plan += [(b + "attn_q_norm.weight", (qn,)), (b + "attn_k_norm.weight", (kn,))]
        if spec.norm_bias:
            plan += [(b + "attn_norm.bias", (e,)), (b + "ffn_norm.bias", (e,))]
        if spec.bias:
            plan.append((b + "attn_output.bias", (e,)))
            if spec.fused_qkv:
                plan.append((b + "attn_qkv.bias", (hd * (spec.n_head + 2 * spec.n_head_kv),)))
        if (spec.qkv_bias or spec.bias) and not spec.fused_qkv:
            kv_dim = hd * spec.n_head_kv
            plan += [
                (b + "attn_q.bias", (hd * spec.n_head,)),
                (b + "attn_k.bias", (kv_dim,)),
                (b + "attn_v.bias", (kv_dim,)),
            ]
        if spec.post_norms:
            plan += [(b + "post_attention_norm.weight", (e,)), (b + "post_ffw_norm.weight", (e,))]
        if spec.arch == "gpt-oss":
            x, fe = spec.n_expert, spec.n_ff_exp
            plan += [
                (b + "attn_output.bias", (e,)),
                (b + "attn_sinks.weight", (spec.n_head,)),
                (b + "ffn_gate_inp.bias", (x,)),
                (b + "ffn_gate_exps.bias", (fe, x)),
                (b + "ffn_down_exps.bias", (e, x)),
                (b + "ffn_up_exps.bias", (fe, x)),
            ]
        dense_lead = ((spec.arch == "glm4moe" or mla) and i == 0) or i < spec.n_dense_lead
        dense_lead = dense_lead or (i + 1) % spec.moe_every != 0
        if spec.probs_bias and spec.n_expert and not dense_lead:
            plan.append((b + "exp_probs_b.bias", (spec.n_expert,)))
        if spec.n_ff_shexp and spec.n_expert and not dense_lead:
            fs = spec.n_ff_shexp
            plan += [
                (b + "ffn_gate_shexp.weight", (e, fs)),
                (b + "ffn_down_shexp.weight", (fs, e)),
                (b + "ffn_up_shexp.weight", (e, fs)),
            ]
        if (spec.arch == "glm4moe" or mla) and not dense_lead:
            x, fe = spec.n_expert, spec.n_ff_exp
            plan += [
                (b + "exp_probs_b.bias", (x,)),
                (b + "ffn_gate_shexp.weight", (e, fe)),
                (b + "ffn_down_shexp.weight", (fe, e)),
                (b + "ffn_up_shexp.weight", (e, fe)),
            ]
        if spec.arch == "qwen2moe":
            fs = 384
            plan += [
                (b + "ffn_gate_inp_shexp.weight", (e,)),
                (b + "ffn_gate_shexp.weight", (e, fs)),
                (b + "ffn_down_shexp.weight", (fs, e)),
                (b + "ffn_up_shexp.weight", (e, fs)),
            ]
        if spec.n_expert and not dense_lead:
            x, fe = spec.n_expert, spec.n_ff_exp
            plan += [
                (b + "ffn_gate_inp.weight", (e, x)),
                (b + "ffn_gate_exps.weight", (e, fe, x)),
                (b + "ffn_down_exps.weight", (fe, e, x)),
                (b + "ffn_up_exps.weight", (e, fe, x)),
            ]
        elif spec.fused_up:
            plan += [
                (b + "ffn_down.weight", (spec.n_ff, e)),
                (b + "ffn_up.weight", (e, 2 * spec.n_ff)),
            ]
        else:
            if spec.ffn_gated:
                plan.append((b + "ffn_gate.weight", (e, spec.n_ff)))
            plan += [
                (b + "ffn_down.weight", (spec.n_ff, e)),
                (b + "ffn_up.weight", (e, spec.n_ff)),
            ]
            if spec.bias:
                plan += [(b + "ffn_down.bias", (e,)), (b + "ffn_up.bias", (spec.n_ff,))]
                if spec.ffn_gated:
                    plan.append((b + "ffn_gate.bias", (spec.n_ff,)))
    for i in range(spec.n_layer):
        plan += [(f"blk.{i}.{suffix}", dims) for suffix, dims in spec.extra_layer_tensors]
    plan += list(spec.extra_tensors)
    if spec.norm_bias:
        plan.append(("output_norm.bias", (e,)))
    if spec.drop:
        plan = [
            (n, d) for n, d in plan if n not in spec.drop and n.split(".", 2)[-1] not in spec.drop
        ]
    for i in range(spec.n_layer - spec.n_nextn, spec.n_layer):
        b = f"blk.{i}.nextn."
        plan += [
            (b + "eh_proj.weight", (2 * e, e)),
            (b + "enorm.weight", (e,)),
            (b + "hnorm.weight", (e,)),
        ]
    return plan


def bpe_merges(n: int) -> list[str]:
    return [f"t{i} m{i}" for i in range(n)]


def _is_norm_or_router(name: str, dims: tuple[int, ...]) -> bool:
    return len(dims) == 1 or "norm" in name or name.endswith(("ffn_gate_inp.weight", ".bias"))


# types gguf-py can quantize from float data
_GGUF_PY_QUANTIZES = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"}


def _weights(
    rng: np.random.Generator, dims: tuple[int, ...], wtype: str
) -> tuple[np.ndarray, Q | None]:
    """Random data for ggml ``dims`` as ``wtype``; F16 when the rows do not fit the blocks."""
    shape = tuple(reversed(dims))
    qt = Q[wtype.upper()]
    block, type_size = gguf.GGML_QUANT_SIZES[qt]
    if qt in (Q.F16, Q.F32) or dims[0] % block:
        data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        return (data, None) if qt == Q.F32 else (data.astype(np.float16), None)
    if qt.name in _GGUF_PY_QUANTIZES or qt == Q.BF16:
        data = (rng.standard_normal(shape) * 0.02).astype(np.float32)
        return gguf.quants.quantize(data, qt), qt
    n_blocks = dims[0] // block
    raw = np.zeros((*shape[:-1], n_blocks, type_size), dtype=np.uint8)
    if qt == Q.Q4_K:
        # gguf-py cannot quantize K-quants: random blocks with a small, finite d and dmin
        raw[...] = rng.integers(0, 256, size=raw.shape, dtype=np.uint8)
        raw[..., 0:4] = np.frombuffer(np.array([0.01, 0.001], dtype=np.float16).tobytes(), np.uint8)
    # other types: zero blocks (valid for every type; sizes are what the tests look at)
    return raw.reshape(*shape[:-1], n_blocks * type_size), qt


def write_model(
    path: str | Path,
    spec: ModelSpec,
    weight_type: str = "F16",
    *,
    seed: int = 0,
    split_max_tensors: int = 0,
    vocab: tuple[list[str], list[float], list[int]] | None = None,
    merges: list[str] | None = None,
    tensor_types: dict[str, str] | None = None,
    file_type: int | None = None,
    name: str | None = None,
    sparse: bool = False,
) -> list[Path]:
    """Write ``spec`` as a GGUF file (or split files); returns the paths written.

    ``name`` is the model's ``general.name`` (``tiny-ARCH`` by default).
    ``sparse`` writes the header only and extends the file to its full size with a hole: a
    model of real size (gigabytes) in no disk space, for readers of headers.
    ``tensor_types`` overrides ``weight_type`` per tensor name (e.g. {"output.weight": "Q6_K"}).
    """
    path = Path(path)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, spec.arch, split_max_tensors=split_max_tensors)
    a = spec.arch
    kv: dict[str, tuple[Any, Any]] = {
        "general.name": (name if name is not None else f"tiny-{a}", V.STRING),
        f"{a}.block_count": (spec.n_layer, V.UINT32),
        f"{a}.context_length": (spec.n_ctx_train, V.UINT32),
        f"{a}.embedding_length": (spec.n_embd, V.UINT32),
        f"{a}.feed_forward_length": (spec.n_ff, V.UINT32),
        f"{a}.attention.head_count": (spec.n_head, V.UINT32),
        f"{a}.attention.head_count_kv": (spec.n_head_kv, V.UINT32),
        f"{a}.attention.key_length": (spec.head_dim, V.UINT32),
        f"{a}.attention.value_length": (spec.head_dim, V.UINT32),
        f"{a}.rope.dimension_count": (spec.head_dim, V.UINT32),
        f"{a}.rope.freq_base": (10000.0, V.FLOAT32),
        f"{a}.attention.layer_norm_rms_epsilon": (1e-6, V.FLOAT32),
        f"{a}.vocab_size": (spec.n_vocab, V.UINT32),
        "general.quantization_version": (gguf.GGML_QUANT_VERSION, V.UINT32),
        "general.file_type": (
            FILE_TYPE.get(weight_type, 1) if file_type is None else file_type,
            V.UINT32,
        ),
    }
    if spec.n_expert:
        kv[f"{a}.expert_count"] = (spec.n_expert, V.UINT32)
        kv[f"{a}.expert_used_count"] = (spec.n_expert_used, V.UINT32)
        kv[f"{a}.expert_feed_forward_length"] = (spec.n_ff_exp, V.UINT32)
    if spec.n_nextn:
        kv[f"{a}.nextn_predict_layers"] = (spec.n_nextn, V.UINT32)
    if spec.sliding_window:
        kv[f"{a}.attention.sliding_window"] = (spec.sliding_window, V.UINT32)
        kv[f"{a}.attention.sliding_window_pattern"] = (spec.swa_pattern, V.UINT32)
    kv.update(spec.extra_kv)  # replaces a standard key in place
    for key, (value, vtype) in kv.items():
        if isinstance(value, list):
            w.add_array(key, value)  # (items typed by the writer: int -> INT32)
        else:
            w.add_key_value(key, value, vtype)

    tokens, scores, types = vocab or spm_vocab(spec.n_vocab)
    w.add_tokenizer_model("gpt2" if merges is not None else "llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    if merges is not None:
        w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    for name, dims in tensor_plan(spec):
        if tensor_types and name in tensor_types:
            wanted = tensor_types[name]
        elif _is_norm_or_router(name, dims):
            wanted = "F32"
        else:
            wanted = weight_type
        if sparse:
            qt = Q[wanted.upper()]
            block, type_size = gguf.GGML_QUANT_SIZES[qt]
            if dims[0] % block:
                qt, block, type_size = Q.F16, 1, 2
            n = int(np.prod(dims))
            w.add_tensor_info(
                name, tuple(reversed(dims)), np.float32, n // block * type_size, raw_dtype=qt
            )
            continue
        if wanted == "F32" and _is_norm_or_router(name, dims):
            data = (1.0 + rng.standard_normal(tuple(reversed(dims))) * 0.01).astype(np.float32)
            w.add_tensor(name, data)
            continue
        data, raw_dtype = _weights(rng, dims, wanted)
        if raw_dtype is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=raw_dtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    if sparse:
        w.write_ti_data_to_file()
        assert w.fout is not None
        for fout, infos in zip(w.fout, w.tensors, strict=True):
            size = -(-fout.tell() // 32) * 32
            size += sum(-(-ti.nbytes // 32) * 32 for ti in infos.values())
            fout.flush()
            fout.truncate(size)
    else:
        w.write_tensors_to_file()
    w.close()
    if split_max_tensors:
        return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))
    return [path]


def write_imatrix(
    path: str | Path, model_path: str | Path, *, dataset: str = "random", chunks: int = 4
) -> Path:
    """An importance matrix (llama-imatrix's GGUF format) with random positive sums for every
    2-d and 3-d weight of ``model_path``: enough for llama-quantize's IQ types."""
    reader = gguf.GGUFReader(model_path)
    rng = np.random.default_rng(1)
    w = gguf.GGUFWriter(path, "")
    w.add_array("imatrix.datasets", [dataset])
    w.add_uint32("imatrix.chunk_count", chunks)
    w.add_uint32("imatrix.chunk_size", 512)
    for t in reader.tensors:
        dims = [int(d) for d in t.shape]
        if len(dims) < 2 or not t.name.endswith(".weight") or "norm" in t.name:
            continue
        n_mat = dims[2] if len(dims) > 2 else 1
        sums = rng.uniform(0.5, 2.0, size=(n_mat, dims[0])).astype(np.float32)
        w.add_tensor(t.name + ".in_sum2", sums)
        w.add_tensor(t.name + ".counts", np.full((n_mat, 1), 512.0 * chunks, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def write_mmproj(
    path: str | Path,
    n_embd_text: int,
    *,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 128,
    image_size: int = 32,
    patch_size: int = 8,
    weight_type: str = "F16",
    seed: int = 0,
) -> Path:
    """A tiny LLaVA-style multimodal projector (``clip.projector_type = mlp``) as
    convert_hf_to_gguf writes one: a ViT of ``n_layer`` blocks over ``image_size`` pixels in
    ``patch_size`` patches and a two-layer MLP into the text model's ``n_embd_text``."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "clip")
    w.add_string("general.name", "tiny-mmproj")
    w.add_bool("clip.has_vision_encoder", True)
    w.add_string("clip.projector_type", "mlp")
    w.add_bool("clip.use_gelu", True)
    w.add_uint32("clip.vision.image_size", image_size)
    w.add_uint32("clip.vision.patch_size", patch_size)
    w.add_uint32("clip.vision.embedding_length", n_embd)
    w.add_uint32("clip.vision.feed_forward_length", n_ff)
    w.add_uint32("clip.vision.block_count", n_layer)
    w.add_uint32("clip.vision.projection_dim", n_embd_text)
    w.add_uint32("clip.vision.attention.head_count", n_head)
    w.add_float32("clip.vision.attention.layer_norm_epsilon", 1e-5)
    w.add_array("clip.vision.image_mean", [0.5, 0.5, 0.5])
    w.add_array("clip.vision.image_std", [0.5, 0.5, 0.5])
    n_pos = (image_size // patch_size) ** 2 + 1
    qtype = getattr(Q, weight_type)

    def add(name: str, shape: tuple[int, ...], matrix: bool = False) -> None:
        data = rng.standard_normal(shape).astype(np.float32) * 0.02
        if matrix and weight_type == "F16":
            w.add_tensor(name, data.astype(np.float16))
        elif matrix and weight_type != "F32":
            w.add_tensor(name, gguf.quantize(data, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, data)

    add("v.patch_embd.weight", (n_embd, 3, patch_size, patch_size))
    add("v.patch_embd.bias", (n_embd,))
    add("v.class_embd", (n_embd,))
    add("v.position_embd.weight", (n_pos, n_embd))
    add("v.pre_ln.weight", (n_embd,))
    add("v.pre_ln.bias", (n_embd,))
    for il in range(n_layer):
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add(f"v.blk.{il}.{t}.weight", (n_embd, n_embd), matrix=True)
            add(f"v.blk.{il}.{t}.bias", (n_embd,))
        for t in ("ln1", "ln2"):
            add(f"v.blk.{il}.{t}.weight", (n_embd,))
            add(f"v.blk.{il}.{t}.bias", (n_embd,))
        add(f"v.blk.{il}.ffn_up.weight", (n_ff, n_embd), matrix=True)
        add(f"v.blk.{il}.ffn_up.bias", (n_ff,))
        add(f"v.blk.{il}.ffn_down.weight", (n_embd, n_ff), matrix=True)
        add(f"v.blk.{il}.ffn_down.bias", (n_embd,))
    add("mm.0.weight", (n_embd_text, n_embd), matrix=True)
    add("mm.0.bias", (n_embd_text,))
    add("mm.2.weight", (n_embd_text, n_embd_text), matrix=True)
    add("mm.2.bias", (n_embd_text,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def write_lora(
    path: str | Path, spec: ModelSpec, *, rank: int = 8, layers: tuple[int, ...] | None = None
) -> Path:
    """A LoRA adapter (``general.type = adapter``) for ``spec``'s attention Q and V weights
    of ``layers`` (all by default), A and B in F32 as convert_lora_to_gguf writes them."""
    rng = np.random.default_rng(2)
    w = gguf.GGUFWriter(path, spec.arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", float(rank))
    n_q = spec.n_head * spec.head_dim
    n_kv = spec.n_head_kv * spec.head_dim
    for il in layers if layers is not None else range(spec.n_layer):
        for t, n_out in (("attn_q", n_q), ("attn_v", n_kv)):
            a = rng.standard_normal((rank, spec.n_embd)).astype(np.float32) * 0.01
            b = rng.standard_normal((n_out, rank)).astype(np.float32) * 0.01
            w.add_tensor(f"blk.{il}.{t}.weight.lora_a", a)
            w.add_tensor(f"blk.{il}.{t}.weight.lora_b", b)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def write_bert(
    path: str | Path,
    *,
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    n_ff: int = 256,
    n_vocab: int = 512,
    n_ctx: int = 512,
) -> Path:
    """A tiny BERT embedding model (non-causal, mean pooling, WordPiece vocabulary) as
    convert_hf_to_gguf writes one: llama-server loads it with --embedding or --rerank."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(path, "bert")
    w.add_name("tiny-bert")
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.MEAN)
    w.add_uint32("tokenizer.ggml.token_type_count", 2)
    w.add_file_type(1)
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(n_vocab - 5)]
    w.add_tokenizer_model("bert")
    w.add_token_list(toks)
    w.add_token_types([3, 2, 3, 3, 3] + [1] * (n_vocab - 5))
    w.add_bos_token_id(2)
    w.add_eos_token_id(3)
    w.add_unk_token_id(1)
    w.add_sep_token_id(3)
    w.add_pad_token_id(0)
    w.add_mask_token_id(4)

    def t(name: str, shape: tuple[int, ...], mat: bool = False) -> None:
        d = rng.standard_normal(shape).astype(np.float32) * 0.02
        w.add_tensor(name, d.astype(np.float16) if mat else d)

    t("token_embd.weight", (n_vocab, n_embd), True)
    t("token_types.weight", (2, n_embd))
    t("position_embd.weight", (n_ctx, n_embd), True)
    t("token_embd_norm.weight", (n_embd,))
    t("token_embd_norm.bias", (n_embd,))
    for il in range(n_layer):
        for x in ("attn_q", "attn_k", "attn_v", "attn_output"):
            t(f"blk.{il}.{x}.weight", (n_embd, n_embd), True)
            t(f"blk.{il}.{x}.bias", (n_embd,))
        for x in ("attn_output_norm", "layer_output_norm"):
            t(f"blk.{il}.{x}.weight", (n_embd,))
            t(f"blk.{il}.{x}.bias", (n_embd,))
        t(f"blk.{il}.ffn_up.weight", (n_ff, n_embd), True)
        t(f"blk.{il}.ffn_up.bias", (n_ff,))
        t(f"blk.{il}.ffn_down.weight", (n_embd, n_ff), True)
        t(f"blk.{il}.ffn_down.bias", (n_embd,))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


# -- raw builders for hand-made files --------------------------------------------------------

GGUF_STRING, GGUF_ARRAY, GGUF_UINT32 = 8, 9, 4


# the encoders lltui writes its own GGUF files with (lltui demo)
raw_str = writer.gguf_string
raw_kv = writer.kv
raw_kv_u32 = writer.kv_u32
raw_kv_str = writer.kv_str
raw_array = writer.array
raw_tensor_info = writer.tensor_info


def raw_gguf(
    kvs: list[bytes],
    tensor_infos: list[bytes],
    *,
    data: bytes = b"",
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    alignment: int = 32,
) -> bytes:
    """A GGUF file from raw parts; counts may be given to lie about the contents."""
    head = writer.gguf_header(
        kvs, tensor_infos, version=version, n_kv=n_kv, n_tensors=n_tensors, alignment=alignment
    )
    return head + data


def write_sparse(
    path: Path,
    spec: ModelSpec,
    wtype: str = "Q4_0",
    type_of: Callable[[str], str] | None = None,
    omit: tuple[str, ...] = (),
) -> Path:
    """A GGUF with the real tensor table and a hole for the data: real-size shapes, no disk.
    ``type_of``: the weight type of each matrix by name, for mixes (Q4_K_M), else ``wtype``.
    ``spec.extra_kv`` is written too, but for the keys in ``omit`` (the tensor plan reads
    them; an older converter wrote no such keys)."""
    q = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(str(path), spec.arch)
    extra = {k: v for k, v in spec.extra_kv.items() if k not in omit}
    w.add_name(f"sparse-{spec.arch}")
    w.add_block_count(spec.n_layer)
    w.add_context_length(spec.n_ctx_train)
    w.add_embedding_length(spec.n_embd)
    w.add_feed_forward_length(spec.n_ff)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    for key, add in (
        ("attention.key_length", w.add_key_length),
        ("attention.value_length", w.add_value_length),
        ("rope.dimension_count", w.add_rope_dimension_count),
    ):
        if f"{spec.arch}.{key}" not in extra:
            add(spec.head_dim)
    for key, (value, vtype) in extra.items():
        w.add_key_value(key, value, vtype)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(spec.n_vocab)
    w.add_file_type(FILE_TYPE.get(wtype, 2))
    if spec.n_expert:
        w.add_expert_count(spec.n_expert)
        w.add_expert_used_count(spec.n_expert_used)
        w.add_expert_feed_forward_length(spec.n_ff_exp)
    if spec.sliding_window:
        w.add_sliding_window(spec.sliding_window)
        w.add_uint32(f"{spec.arch}.attention.sliding_window_pattern", spec.swa_pattern)
    tokens, scores, types = spm_vocab(spec.n_vocab)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    data = 0
    for name, dims in tensor_plan(spec):
        pick = type_of(name) if type_of else wtype
        qt = q.F32 if len(dims) == 1 or name.endswith("ffn_gate_inp.weight") else q[pick]
        block, size = gguf.GGML_QUANT_SIZES[qt]
        if dims[0] % block:
            qt, block, size = q.F16, 1, 2
        nbytes = dims[0] // block * size * int(np.prod(dims[1:], dtype=np.int64))
        shape = tuple(reversed(dims))
        if qt in (q.F32, q.F16):
            dtype = np.dtype(np.float32 if qt == q.F32 else np.float16)
            w.add_tensor_info(name, shape, dtype, nbytes)
        else:
            shape = (*shape[:-1], dims[0] // block * size)
            w.add_tensor_info(name, shape, np.dtype(np.uint8), nbytes, raw_dtype=qt)
        data += -(-nbytes // 32) * 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    start = -(-path.stat().st_size // 32) * 32
    with path.open("r+b") as f:
        f.truncate(start + data)
    return path


# -- more architectures, each as llama.cpp's loader wants its tensors (src/models/*.cpp) ---------


def _kv(arch: str, **values: Any) -> dict[str, tuple[Any, Any]]:
    """``{arch}.KEY`` metadata, typed by the value (bool, float, else uint32)."""
    out = {}
    for k, v in values.items():
        vtype = V.BOOL if isinstance(v, bool) else V.FLOAT32 if isinstance(v, float) else V.UINT32
        out[f"{arch}.{k.replace('__', '.')}"] = (v, vtype)
    return out


def _ln(arch: str, **more: Any) -> dict[str, tuple[Any, Any]]:
    """A LayerNorm model's epsilon key (llama.cpp requires it), and more keys."""
    return _kv(arch, attention__layer_norm_epsilon=1e-5, **more)


_GRANITE = dict(logit_scale=8.0, residual_scale=0.22, embedding_scale=12.0, attention__scale=0.0078)
_E = 256  # ModelSpec's n_embd


def _spec(arch: str, **kw: Any) -> Callable[[], ModelSpec]:
    return lambda: ModelSpec(arch=arch, **kw)


# name -> spec; the name is the architecture, or the architecture and a variant
ARCH_SPECS: dict[str, Callable[[], ModelSpec]] = {
    # Q/K norms over whole rows (n_head == n_head_kv: the K norm is n_embd wide), experts
    "olmoe": _spec(
        "olmoe",
        n_head_kv=4,
        qk_norm=True,
        qk_norm_full=True,
        n_expert=8,
        n_expert_used=2,
        n_ff=256,
    ),
    # no pre-norms: norms after attention and after the FFN, full-row Q/K norms
    "olmo2": _spec(
        "olmo2",
        n_head_kv=4,
        qk_norm=True,
        qk_norm_full=True,
        post_norms=True,
        drop=("attn_norm.weight", "ffn_norm.weight"),
    ),
    # non-parametric LayerNorms (no norm tensors at all), clamped Q/K/V
    "olmo": _spec(
        "olmo",
        drop=("attn_norm.weight", "ffn_norm.weight", "output_norm.weight"),
        extra_kv=_ln("olmo", attention__clamp_kqv=8.0),
    ),
    # LayerNorm with biases, biases everywhere, a plain GELU FFN, tied output
    "starcoder2": _spec(
        "starcoder2",
        norm_bias=True,
        bias=True,
        ffn_gated=False,
        tied=True,
        extra_kv=_ln("starcoder2"),
    ),
    # embedding, residual and logit scales from the file
    "granite": _spec("granite", n_head=8, head_dim=32, extra_kv=_kv("granite", **_GRANITE)),
    "granitemoe": _spec(
        "granitemoe",
        n_head=8,
        head_dim=32,
        n_expert=8,
        n_expert_used=2,
        n_ff=256,
        extra_kv=_kv("granitemoe", **_GRANITE),
    ),
    "granitemoe-shared": _spec(
        "granitemoe",
        n_head=8,
        head_dim=32,
        n_expert=8,
        n_expert_used=2,
        n_ff=256,
        n_ff_shexp=192,
        extra_kv=_kv("granitemoe", expert_shared_feed_forward_length=192, **_GRANITE),
    ),
    # parallel attention and FFN on one LayerNorm; RoPE only in sliding-window layers
    "cohere2": _spec(
        "cohere2",
        n_layer=5,
        tied=True,
        drop=("ffn_norm.weight",),
        sliding_window=128,
        swa_pattern=4,
        extra_kv=_ln("cohere2", logit_scale=0.125),
    ),
    "command-r": _spec(
        "command-r",
        tied=True,
        drop=("ffn_norm.weight",),
        extra_kv=_ln("command-r", logit_scale=0.125),
    ),
    "exaone": _spec("exaone"),
    "ernie4_5": _spec("ernie4_5", extra_layer_tensors=(("attn_output.bias", (_E,)),)),
    # a dense first layer, then experts with a shared expert
    "ernie4_5-moe": _spec(
        "ernie4_5-moe",
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=128,
        n_ff_shexp=192,
        n_dense_lead=1,
        extra_kv=_kv(
            "ernie4_5-moe",
            expert_shared_feed_forward_length=192,
            interleave_moe_layer_step=1,
            leading_dense_block_count=1,
        ),
    ),
    "bailingmoe": _spec(
        "bailingmoe",
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=128,
        n_ff_shexp=256,
        extra_kv=_kv(
            "bailingmoe",
            expert_shared_count=2,
            expert_weights_norm=True,
            expert_weights_scale=1.5,
        ),
    ),
    # the FFN's norm is post_attention_norm (no ffn_norm)
    "seed_oss": _spec(
        "seed_oss", post_norms=True, drop=("ffn_norm.weight", "post_ffw_norm.weight")
    ),
    "gemma": _spec("gemma", tied=True),
    # sliding windows every other layer, post norms, soft-capped scores and logits
    "gemma2": _spec(
        "gemma2",
        tied=True,
        post_norms=True,
        sliding_window=128,
        swa_pattern=2,
        extra_kv=_kv("gemma2", final_logit_softcapping=30.0, attn_logit_softcapping=50.0),
    ),
    # a fused Q/K/V matrix with its bias; the file's FFN width is twice the matrices'
    "qwen": _spec(
        "qwen",
        n_head_kv=4,
        n_ff=256,
        fused_qkv=True,
        extra_layer_tensors=(("attn_qkv.bias", (3 * _E,)),),
        extra_kv=_kv("qwen", feed_forward_length=512),
    ),
    "internlm2": _spec("internlm2", fused_qkv=True),
    "orion": _spec("orion", norm_bias=True, extra_kv=_ln("orion")),
    "xverse": _spec("xverse"),
    "codeshell": _spec(
        "codeshell",
        norm_bias=True,
        fused_qkv=True,
        bias=True,
        ffn_gated=False,
        extra_kv=_ln("codeshell"),
    ),
    # ALiBi: no RoPE, no positions
    "refact": _spec("refact"),
    "baichuan": _spec("baichuan"),
    # LayerNorm Q/K norms with a weight per head
    "stablelm": _spec(
        "stablelm",
        norm_bias=True,
        extra_kv=_ln("stablelm"),
        extra_layer_tensors=(("attn_q_norm.weight", (64, 4)), ("attn_k_norm.weight", (64, 2))),
    ),
    # one norm: (attention + FFN) + input; scaled Q; an output bias
    "phi2": _spec(
        "phi2",
        n_head_kv=4,
        norm_bias=True,
        fused_qkv=True,
        bias=True,
        ffn_gated=False,
        drop=("ffn_norm.weight", "ffn_norm.bias"),
        extra_tensors=(("output.bias", (1024,)),),
        extra_kv=_ln("phi2"),
    ),
    # parallel residual with its own FFN norm (use_parallel_residual), or sequential
    "gptneox": _spec(
        "gptneox",
        n_head_kv=4,
        norm_bias=True,
        fused_qkv=True,
        bias=True,
        ffn_gated=False,
        extra_kv=_ln("gptneox", use_parallel_residual=True),
    ),
    "gptneox-sequential": _spec(
        "gptneox",
        n_head_kv=4,
        norm_bias=True,
        fused_qkv=True,
        bias=True,
        ffn_gated=False,
        extra_kv=_ln("gptneox", use_parallel_residual=False),
    ),
    # one norm: (FFN + attention) + input; one KV head
    "falcon": _spec(
        "falcon",
        n_head_kv=1,
        norm_bias=True,
        fused_qkv=True,
        ffn_gated=False,
        drop=("ffn_norm.weight", "ffn_norm.bias"),
        extra_kv=_ln("falcon"),
    ),
    # ALiBi, a LayerNorm of the embeddings
    "bloom": _spec(
        "bloom",
        n_head_kv=4,
        norm_bias=True,
        fused_qkv=True,
        bias=True,
        ffn_gated=False,
        extra_tensors=(("token_embd_norm.weight", (_E,)), ("token_embd_norm.bias", (_E,))),
        extra_kv=_ln("bloom"),
    ),
    "mpt": _spec(
        "mpt",
        n_head_kv=4,
        fused_qkv=True,
        ffn_gated=False,
        extra_kv=_ln("mpt", attention__clamp_kqv=8.0, attention__max_alibi_bias=8.0),
    ),
}
ARCH_SPECS |= {
    # ReLU² FFN without a gate
    "arcee": _spec("arcee", ffn_gated=False),
    # no RoPE in every 4th layer
    "smollm3": _spec("smollm3"),
    # Q/K norms after RoPE
    "maincoder": _spec("maincoder", qk_norm=True),
    # chunked sliding windows (3 of 4 layers), no RoPE in the others (scaled Q instead),
    # experts every other layer chosen by sigmoid, weighted before the FFN, a shared expert
    "llama4": _spec(
        "llama4",
        n_layer=8,
        n_expert=8,
        n_expert_used=1,
        n_ff_exp=256,
        n_ff_shexp=256,
        moe_every=2,
        extra_kv=_kv("llama4", interleave_moe_layer_step=2),
    ),
}
ARCH_SPECS |= {
    # LayerNorm (no bias), fused Q/K/V, clamped, softmax-routed experts
    "dbrx": _spec(
        "dbrx",
        fused_qkv=True,
        n_expert=8,
        n_expert_used=2,
        n_ff=256,
        drop=("ffn_norm.weight",),
        extra_layer_tensors=(("attn_output_norm.weight", (_E,)),),
        extra_kv=_ln("dbrx", attention__clamp_kqv=8.0),
    ),
    # a dense first layer, experts with a shared expert (unnormalised weights)
    "deepseek": _spec(
        "deepseek",
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=128,
        n_ff_shexp=256,
        n_dense_lead=1,
        extra_kv=_kv("deepseek", leading_dense_block_count=1, expert_shared_count=2),
    ),
    # ALiBi, LayerNorm with biases, a gated FFN with biases
    "jais": _spec("jais", norm_bias=True, fused_qkv=True, bias=True, extra_kv=_ln("jais")),
    # LayerNorm with biases, ReLU² without a gate
    "nemotron": _spec("nemotron", norm_bias=True, ffn_gated=False, extra_kv=_ln("nemotron")),
    # no pre-norms (post norms), Q/K norms before RoPE
    "exaone4": _spec(
        "exaone4", qk_norm=True, post_norms=True, drop=("attn_norm.weight", "ffn_norm.weight")
    ),
}
ARCH_SPECS |= {
    # post norms beside the pre-norms (the FFN's one pinned to the layer), a merged gate/up,
    # multi-section RoPE (four positions per token)
    "glm4": _spec(
        "glm4",
        post_norms=True,
        fused_up=True,
        extra_kv={"glm4.rope.dimension_sections": ([8, 12, 12, 0], V.UINT32)},
    ),
    "glm4-no-mrope": _spec("glm4", post_norms=True, fused_up=True),
    # a fused Q/K/V with its bias, a merged gate/up
    "chatglm": _spec(
        "chatglm",
        fused_qkv=True,
        fused_up=True,
        n_head=4,
        n_head_kv=2,
        extra_layer_tensors=(("attn_qkv.bias", (_E + 2 * 128,)),),
    ),
    "qwen2vl": _spec(
        "qwen2vl",
        qkv_bias=True,
        extra_kv={"qwen2vl.rope.dimension_sections": ([8, 12, 12, 0], V.UINT32)},
    ),
}
ARCH_SPECS |= {
    # phi3's graph with experts, LayerNorm biases and an output bias
    "phimoe": _spec(
        "phimoe",
        n_head_kv=4,
        norm_bias=True,
        bias=True,
        n_expert=4,
        n_expert_used=2,
        n_ff=256,
        extra_tensors=(("output.bias", (1024,)),),
    ),
    # Q/K norms after RoPE; experts beside a shared expert
    "hunyuan-moe": _spec(
        "hunyuan-moe",
        qk_norm=True,
        n_expert=8,
        n_expert_used=2,
        n_ff=256,
        n_ff_shexp=384,
        extra_kv=_kv("hunyuan-moe", expert_shared_feed_forward_length=384),
    ),
    # full-row Q/K norms, sigmoid routing with a selection bias
    "minimax-m2": _spec(
        "minimax-m2",
        qk_norm=True,
        qk_norm_full=True,
        n_expert=8,
        n_expert_used=2,
        n_ff=256,
        probs_bias=True,
        extra_kv=_kv("minimax-m2", expert_gating_func=2),
    ),
    # a dense first layer, experts (sigmoid, selection bias, scaled) and a shared expert
    "dots1": _spec(
        "dots1",
        n_head_kv=4,
        qk_norm=True,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=128,
        n_ff_shexp=256,
        n_dense_lead=1,
        probs_bias=True,
        extra_kv=_kv(
            "dots1",
            leading_dense_block_count=1,
            expert_shared_count=2,
            expert_gating_func=2,
            expert_weights_norm=True,
            expert_weights_scale=2.5,
        ),
    ),
}
ARCH_SPECS |= {
    # deepseek2's MLA and routing with DeepSeek sparse attention: a lightning indexer per
    # layer (keys in a cache of their own) picks the cells each token attends
    "glm-dsa": glm_dsa_spec,
    # GLM-5.2's pattern: shared indexer layers reuse the last full one's choice
    "glm-dsa-shared": lambda: replace(
        glm_dsa_spec(),
        extra_kv={
            **glm_dsa_spec().extra_kv,
            "glm-dsa.attention.indexer.types": ([1, 1, 0, 0], V.UINT32),
        },
    ),
}


def _deepseek32() -> ModelSpec:
    """DeepSeek-V3.2: glm-dsa's graph with an indexer in every layer."""
    base = glm_dsa_spec()
    extra = {k.replace("glm-dsa.", "deepseek32."): v for k, v in base.extra_kv.items()}
    extra["deepseek32.expert_gating_func"] = (2, V.UINT32)
    return replace(base, arch="deepseek32", extra_kv=extra)


ARCH_SPECS["deepseek32"] = _deepseek32


def _mistral4() -> ModelSpec:
    """mistral4: deepseek2's graph (MLA, routed and shared experts) under its own name."""
    base = deepseek2_spec()
    extra = {k.replace("deepseek2.", "mistral4."): v for k, v in base.extra_kv.items()}
    return replace(base, arch="mistral4", extra_kv=extra)


ARCH_SPECS |= {
    # granite's graph with default scales when the file has none
    "minicpm": _spec("minicpm"),
    "mistral4": _mistral4,
    # Q/K norms after RoPE (multi-section RoPE where the file has sections)
    "hunyuan-dense": _spec("hunyuan-dense", qk_norm=True),
    "hunyuan_vl": _spec(
        "hunyuan_vl",
        qk_norm=True,
        extra_kv={"hunyuan_vl.rope.dimension_sections": ([8, 12, 12, 0], V.UINT32)},
    ),
}

ARCH_SPECS |= {
    # Q/K norms before RoPE, xIELU on an ungated FFN (one op in place)
    "apertus": _spec(
        "apertus",
        qk_norm=True,
        ffn_gated=False,
        extra_kv={
            f"xielu.{k}": (v, V.FLOAT32)
            for k, v in (("alpha_n", 0.8), ("alpha_p", 0.8), ("beta", 0.5), ("eps", 1e-6))
        },
    ),
    # RoPE only in the sliding-window layers; a dense first layer; sigmoid experts and a
    # shared expert
    "exaone-moe": _spec(
        "exaone-moe",
        n_layer=5,
        qk_norm=True,
        sliding_window=128,
        swa_pattern=4,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=128,
        n_ff_shexp=128,
        n_dense_lead=1,
        probs_bias=True,
        extra_kv=_kv(
            "exaone-moe",
            expert_gating_func=2,
            expert_shared_count=1,
            leading_dense_block_count=1,
            expert_weights_norm=True,
        ),
    ),
    "bailingmoe2": _spec(
        "bailingmoe2",
        fused_qkv=True,
        qk_norm=True,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=128,
        n_ff_shexp=128,
        n_dense_lead=1,
        probs_bias=True,
        extra_kv=_kv(
            "bailingmoe2",
            expert_gating_func=2,
            expert_shared_count=1,
            leading_dense_block_count=1,
            expert_weights_norm=True,
            expert_weights_scale=2.5,
        ),
    ),
}

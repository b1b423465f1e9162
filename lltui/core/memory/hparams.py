"""The hyperparameters llama.cpp's loader derives from a GGUF's metadata: layer counts, heads,
sliding-window and recurrent layers, experts, per layer where llama.cpp keeps them so."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lltui.core.gguf.model import GgufModel
from lltui.core.gguf.values import GgufArray, as_int
from lltui.core.llama.limits import MAX_LAYERS as LLAMA_MAX_LAYERS
from lltui.core.memory.common import FitError

# Sliding-window layouts llama.cpp gives each architecture: (default period, dense first,
# window required). Period 0 with an explicit per-layer array in the file (gemma4, ...).
_SWA: dict[str, tuple[int, bool, bool]] = {
    "gemma2": (2, False, False),
    "gemma3": (6, False, True),
    "gemma3n": (5, False, False),
    "gemma-embedding": (6, False, False),
    "cohere2": (4, False, False),
    "cohere2moe": (4, True, False),
    "gpt-oss": (2, False, False),
    "llama4": (4, False, False),
    "olmo2": (4, False, True),
    "exaone-moe": (4, False, False),
    "afmoe": (4, False, True),
    "smallthinker": (4, True, True),
    "plamo3": (8, False, True),
    "mellum": (4, False, True),
    "muse-glimmer": (4, False, False),
    "gemma4": (0, False, False),
    "mimo2": (0, False, False),
    "step35": (0, False, False),
    "granite_swa": (0, False, False),
}
# Windows llama.cpp assumes when the file has none.
_SWA_DEFAULT_WINDOW = {"gemma2": 4096, "llama4": 8192}
# Architectures whose layers are all recurrent (state per sequence, no KV cache).
_RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# Architectures with no KV cache at all (encoders).
_NO_MEMORY = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "modern-bert",
        "gemma-embedding",
        "wavtokenizer-dec",
        "dream",
        "llada",
        "llada-moe",
        "rnd1",
    }
)


@dataclass(frozen=True, slots=True)
class Hparams:
    """What the estimator needs from the GGUF metadata, per layer where llama.cpp keeps it so."""

    arch: str
    n_layer_all: int  # block_count, MTP layers included
    n_layer: int  # without the MTP (nextn) layers
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_ff: tuple[int, ...]
    head_k: int
    head_v: int
    head_k_swa: int
    head_v_swa: int
    is_swa: tuple[bool, ...]
    n_swa: int
    is_recurrent: tuple[bool, ...]
    mla: bool
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_layer_kv_from_start: int  # -1: every layer has its own KV
    n_embd_r: int  # recurrent state sizes (floats per sequence per layer)
    n_embd_s: int
    has_memory: bool = True
    causal: bool = True  # {arch}.attention.causal (llama.cpp's default: true)
    # MoE routing (the compute graph's shape): gating function (llama.cpp's enum: 1 softmax,
    # 2 sigmoid; 0 unset), weight scale and normalisation, expert groups
    expert_gating: int = 0
    expert_weights_scale: float = 0.0
    expert_weights_norm: bool = False
    n_expert_groups: int = 0
    n_group_used: int = 0
    attn_temp_scale: float = 0.0  # mistral3's attention temperature scaling (an input per token)
    # MLA (deepseek2): the low-rank sizes and the full head sizes K/V decompress to; rope dims
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    head_k_mla: int = 0
    head_v_mla: int = 0
    n_rot: int = 0
    # scales the graph applies: granite's embedding, residual and logit scales, cohere's
    # logit scale, gemma's final logit soft-capping
    embedding_scale: float = 0.0
    residual_scale: float = 0.0
    logit_scale: float = 0.0
    final_logit_softcapping: float = 30.0  # llama.cpp's default where the file has none
    clamp_kqv: float = 0.0
    parallel_residual: bool = False  # gptneox's use_parallel_residual
    mrope: bool = False  # rope.dimension_sections with its first two set (use_mrope)
    # DeepSeek sparse attention (glm-dsa, deepseek32): the lightning indexer's key size and
    # heads, its top-k, and the layers whose indexer keeps keys in a cache of its own
    indexer_head_size: int = 0
    indexer_n_head: int = 0
    indexer_top_k: int = 0
    indexer_layers: tuple[bool, ...] = ()

    @property
    def swa_any(self) -> bool:
        return any(self.is_swa)

    def head_k_of(self, il: int) -> int:
        return self.head_k_swa if self.is_swa[il] else self.head_k

    def head_v_of(self, il: int) -> int:
        return self.head_v_swa if self.is_swa[il] else self.head_v

    def n_embd_k_gqa(self, il: int) -> int:
        return self.head_k_of(il) * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        return self.head_v_of(il) * self.n_head_kv[il]

    def has_kv(self, il: int) -> bool:
        if il >= self.n_layer or self.is_recurrent[il]:
            return False
        if self.n_layer_kv_from_start >= 0:
            return il < self.n_layer_kv_from_start
        return self.n_head_kv[il] > 0


def _per_layer(md: Mapping[str, Any], key: str, n: int, default: int) -> tuple[int, ...]:
    v = md.get(key)
    if isinstance(v, GgufArray):
        items = [int(x) for x in v.values()]
        if not items:
            return (default,) * n
        items = (items + [items[-1]] * n)[:n]
        return tuple(items)
    iv = as_int(v)
    return ((iv if iv is not None else default),) * n


def _bool_array(md: Mapping[str, Any], key: str, n: int) -> tuple[bool, ...] | None:
    v = md.get(key)
    if isinstance(v, GgufArray):
        items = [bool(x) for x in v.values()]
        return tuple((items + [False] * n)[:n])
    return None


def read_hparams(model: GgufModel) -> Hparams:
    """The hyperparameters llama.cpp's loader derives, from the GGUF metadata."""
    md = model.metadata
    arch = model.architecture
    if not arch:
        raise FitError(f"{model.path}: no general.architecture: not a llama.cpp model")
    # files that go beside a model (convert_hf_to_gguf's general.type; a projector's arch)
    kind = md.get("general.type")
    if arch == "clip" or kind == "mmproj":
        raise FitError(f"{model.path}: a multimodal projector, not a model: give it as --mmproj")
    if kind == "adapter":
        raise FitError(f"{model.path}: a LoRA adapter, not a model: give it as --lora")

    def key(k: str) -> str:
        return f"{arch}.{k}"

    given = as_int(md.get(key("block_count")))
    n_layer_all = given or 0
    if n_layer_all <= 0:
        why = "is missing" if given is None else f"is {given}: a model has at least one layer"
        raise FitError(f"{model.path}: {arch}.block_count {why}")
    if n_layer_all > LLAMA_MAX_LAYERS:
        raise FitError(f"{model.path}: {n_layer_all} layers; llama.cpp allows {LLAMA_MAX_LAYERS}")
    n_nextn = min(as_int(md.get(key("nextn_predict_layers"))) or 0, n_layer_all)
    n_layer = n_layer_all - n_nextn
    n_embd = as_int(md.get(key("embedding_length"))) or 0
    n_head = _per_layer(md, key("attention.head_count"), n_layer_all, 0)
    n_head_kv = (
        _per_layer(md, key("attention.head_count_kv"), n_layer_all, 0)
        if md.get(key("attention.head_count_kv")) is not None
        else n_head
    )
    heads = _head_sizes(md, key, n_embd, n_head)
    is_swa, n_swa = _swa_layers(md, key, arch, n_layer, n_layer_all)
    is_recurrent = _recurrent_layers(md, key, arch, n_layer, n_layer_all, n_head_kv)
    n_embd_r, n_embd_s = _recurrent_state_sizes(md, key, n_embd)
    n_expert, n_expert_used, n_ff_exp = _experts(md, key)
    return Hparams(
        arch=arch,
        n_layer_all=n_layer_all,
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=_n_vocab(model),
        n_ctx_train=as_int(md.get(key("context_length"))) or 0,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=_per_layer(md, key("feed_forward_length"), n_layer_all, 0),
        head_k=heads[0],
        head_v=heads[1],
        head_k_swa=heads[2],
        head_v_swa=heads[3],
        is_swa=is_swa,
        n_swa=n_swa,
        is_recurrent=is_recurrent,
        mla=(
            as_int(md.get(key("attention.key_length_mla"))) is not None
            and as_int(md.get(key("attention.value_length_mla"))) is not None
        ),
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        n_ff_exp=n_ff_exp,
        n_layer_kv_from_start=_kv_from_start(md, key, arch, n_layer_all),
        n_embd_r=n_embd_r,
        n_embd_s=n_embd_s,
        has_memory=arch not in _NO_MEMORY,
        causal=md.get(key("attention.causal")) is not False,
        expert_gating=as_int(md.get(key("expert_gating_func"))) or 0,
        expert_weights_scale=_meta_float(md.get(key("expert_weights_scale"))),
        expert_weights_norm=bool(as_int(md.get(key("expert_weights_norm"))) or 0),
        n_expert_groups=as_int(md.get(key("expert_group_count"))) or 0,
        n_group_used=as_int(md.get(key("expert_group_used_count"))) or 0,
        attn_temp_scale=_meta_float(md.get(key("attention.temperature_scale"))),
        kv_lora_rank=as_int(md.get(key("attention.kv_lora_rank"))) or 0,
        q_lora_rank=as_int(md.get(key("attention.q_lora_rank"))) or 0,
        head_k_mla=as_int(md.get(key("attention.key_length_mla"))) or 0,
        head_v_mla=as_int(md.get(key("attention.value_length_mla"))) or 0,
        n_rot=as_int(md.get(key("rope.dimension_count"))) or 0,
        embedding_scale=_meta_float(md.get(key("embedding_scale"))),
        residual_scale=_meta_float(md.get(key("residual_scale"))),
        logit_scale=_meta_float(md.get(key("logit_scale"))),
        final_logit_softcapping=_meta_float(md.get(key("final_logit_softcapping")), 30.0),
        clamp_kqv=_meta_float(md.get(key("attention.clamp_kqv"))),
        parallel_residual=bool(as_int(md.get(key("use_parallel_residual"))) or 0),
        mrope=_mrope(md.get(key("rope.dimension_sections"))),
        **_indexer(md, key, arch, n_layer),
    )


# Architectures with DeepSeek's sparse attention: an MLA cache and an indexer key cache
# (llama_kv_cache_dsa, llama-model.cpp create_memory).
DSA_ARCHS = frozenset({"glm-dsa", "deepseek32"})
# glm-dsa's indexer layers when the file does not list them and its trained context says
# GLM-5.2 (models/glm-dsa.cpp GLM_5_2_DEFAULT_INDEXER_TYPES): full at 0, 1, then every 4th
_GLM_52_CTX = 1048576


def _indexer(md: Mapping[str, Any], key: _Key, arch: str, n_layer: int) -> dict[str, Any]:
    if arch not in DSA_ARCHS:
        return {}
    full: tuple[bool, ...] = (True,) * n_layer
    if arch == "glm-dsa":
        if (as_int(md.get(key("context_length"))) or 0) >= _GLM_52_CTX:
            full = tuple(il < 2 or (il % 4 == 2 and il < 78) for il in range(n_layer))
        listed = md.get(key("attention.indexer.types"))
        if isinstance(listed, GgufArray):
            full = tuple(bool(x) for x in listed.values())[:n_layer]
            full += (full[-1] if full else False,) * (n_layer - len(full))
        elif as_int(listed) is not None:
            full = (bool(as_int(listed)),) * n_layer
    return {
        "indexer_head_size": as_int(md.get(key("attention.indexer.key_length"))) or 0,
        "indexer_n_head": as_int(md.get(key("attention.indexer.head_count"))) or 0,
        "indexer_top_k": as_int(md.get(key("attention.indexer.top_k"))) or 0,
        "indexer_layers": full,
    }


def _mrope(v: Any) -> bool:
    """llama_hparams::use_mrope: the first two RoPE sections set."""
    if not isinstance(v, GgufArray):
        return False
    items = [int(x) for x in v.values()][:2]
    return len(items) == 2 and all(x > 0 for x in items)


def _meta_float(v: Any, default: float = 0.0) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else default


_Key = Callable[[str], str]


def _head_sizes(
    md: Mapping[str, Any], key: _Key, n_embd: int, n_head: tuple[int, ...]
) -> tuple[int, int, int, int]:
    """K and V head sizes, then their sliding-window variants."""
    h0 = n_head[0] if n_head else 0
    default_head = n_embd // h0 if h0 else 0
    head_k = as_int(md.get(key("attention.key_length"))) or default_head
    head_v = as_int(md.get(key("attention.value_length"))) or default_head
    if h0 == 0:
        head_k = head_v = 0
    head_k_swa = as_int(md.get(key("attention.key_length_swa"))) or head_k
    head_v_swa = as_int(md.get(key("attention.value_length_swa"))) or head_v
    return head_k, head_v, head_k_swa, head_v_swa


def _swa_layers(
    md: Mapping[str, Any], key: _Key, arch: str, n_layer: int, n_layer_all: int
) -> tuple[tuple[bool, ...], int]:
    """Which layers use the sliding window, and the window."""
    is_swa = (False,) * n_layer_all
    n_swa = as_int(md.get(key("attention.sliding_window"))) or 0
    rule = _SWA.get(arch)
    enabled = rule is not None
    if arch == "llama4":
        found = md.get(key("attention.sliding_window")) is not None
        enabled = not (found and n_swa == 0)
    elif arch == "exaone4":
        enabled = n_layer == 64
        rule = (4, False, False)
    if rule is None or not enabled:
        return is_swa, n_swa
    period, dense_first, needs_window = rule
    if needs_window and n_swa <= 0:
        return is_swa, n_swa
    n_swa = n_swa or _SWA_DEFAULT_WINDOW.get(arch, 0)
    if arch == "llama4":
        n_swa = _SWA_DEFAULT_WINDOW[
            arch
        ]  # chunked attention: llama.cpp sets it whatever the file says
    explicit = _bool_array(md, key("attention.sliding_window_pattern"), n_layer_all)
    if explicit is not None:
        return explicit, n_swa
    p = as_int(md.get(key("attention.sliding_window_pattern")))
    if p is None:
        p = period
    if dense_first:
        is_swa = tuple(p == 0 or il % p != 0 for il in range(n_layer))
    else:
        is_swa = tuple(p == 0 or il % p < p - 1 for il in range(n_layer))
    return is_swa + (False,) * (n_layer_all - n_layer), n_swa


def _recurrent_layers(
    md: Mapping[str, Any],
    key: _Key,
    arch: str,
    n_layer: int,
    n_layer_all: int,
    n_head_kv: tuple[int, ...],
) -> tuple[bool, ...]:
    """Recurrent layers: whole architectures, or hybrid layers without KV heads."""
    if arch in _RECURRENT:
        return (True,) * n_layer_all
    hybrid_marker = (
        md.get(key("ssm.state_size")) is not None
        or md.get(key("shortconv.l_cache")) is not None
        or md.get(key("full_attention_interval")) is not None
    )
    if not hybrid_marker:
        return (False,) * n_layer_all
    if md.get(key("full_attention_interval")) is not None:
        interval = as_int(md.get(key("full_attention_interval"))) or 1
        return tuple(il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all))
    return tuple(il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all))


def _recurrent_state_sizes(md: Mapping[str, Any], key: _Key, n_embd: int) -> tuple[int, int]:
    """Floats per sequence per recurrent layer: the conv (r) and SSM/WKV (s) states."""
    d_conv = as_int(md.get(key("ssm.conv_kernel"))) or 0
    d_inner = as_int(md.get(key("ssm.inner_size"))) or 0
    d_state = as_int(md.get(key("ssm.state_size"))) or 0
    n_group = as_int(md.get(key("ssm.group_count"))) or 0
    wkv = as_int(md.get(key("wkv.head_size"))) or 0
    l_cache = as_int(md.get(key("shortconv.l_cache"))) or 0
    if wkv:
        shift = as_int(md.get(key("token_shift_count"))) or 2
        return shift * n_embd, n_embd * wkv
    if l_cache:
        return n_embd * (l_cache - 1), 0
    n_embd_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
    return n_embd_r, d_state * d_inner


def _kv_from_start(md: Mapping[str, Any], key: _Key, arch: str, n_layer_all: int) -> int:
    """Layers from the start that own a KV cache (the rest share it); -1: all of them."""
    if arch == "gemma3n":
        return 20
    if arch == "gemma4":
        shared = as_int(md.get(key("attention.shared_kv_layers"))) or 0
        return n_layer_all - shared
    return -1


def _experts(md: Mapping[str, Any], key: _Key) -> tuple[int, int, int]:
    """Expert count, experts used per token and expert FFN width (max over layers)."""
    n_expert = as_int(md.get(key("expert_count"))) or 0
    used = md.get(key("expert_used_count"))
    n_expert_used = (
        max(int(x) for x in used.values()) if isinstance(used, GgufArray) else (as_int(used) or 0)
    )
    n_ff_exp_v = md.get(key("expert_feed_forward_length"))
    n_ff_exp = (
        max(int(x) for x in n_ff_exp_v.values())
        if isinstance(n_ff_exp_v, GgufArray)
        else (as_int(n_ff_exp_v) or 0)
    )
    return n_expert, n_expert_used, n_ff_exp


def _n_vocab(model: GgufModel) -> int:
    """llama.cpp sizes logits by the tokenizer's token count."""
    tokens = model.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, GgufArray):
        return tokens.count
    v = model.vocab_size
    return v or 0

"""What the decoder graph of each architecture does that its GGUF does not say.

The compute graph (:mod:`.graph_decoder`) is derived from the file: which tensors each layer
has (norms and their biases, fused or separate Q/K/V, Q/K norms and their width, biases,
sinks, gated or plain FFN, merged gate/up, experts, shared experts and their gate, router
bias and selection bias), their shapes, and the hyperparameters (heads per layer, sliding
windows, MLA ranks, expert counts and routing, embedding/residual/logit scales). What is left
is a choice llama.cpp's graph code makes per architecture (src/models/*.cpp), kept here as a
:class:`Recipe`: the norm kind, the residual layout, the order of the Q/K norms and RoPE, a
scaled Q, an embedding or logit scale not in the file, the router's defaults.

Every architecture llama.cpp lists (src/llama-arch.cpp) is in :data:`RECIPES` with a recipe,
or in :data:`APPROXIMATE` with the reason its graph is not modelled (the estimate then falls
back to the calibrated formula and says so).
"""

from __future__ import annotations

from dataclasses import dataclass

# norm kinds (llm_norm_type)
RMS, LAYER = "rms", "layer"


@dataclass(frozen=True, slots=True)
class Recipe:
    """The choices one architecture's graph code makes that its file does not record."""

    norm: str = RMS  # attention, FFN and output norms: RMS or LayerNorm
    qk_norm: str = RMS  # the per-head (or full-width) Q/K norms
    # Q/K norms and RoPE: "qrope" (Q norm, Q rope, K norm, K rope: qwen3), "norms"
    # (both norms, then both ropes: glm4moe, stablelm), "full" (norms over the whole Q/K rows
    # before the heads are split: olmoe, olmo2), "after" (both ropes, then both norms)
    qk_order: str = "qrope"
    # the layer's residual layout: "seq" (norm, attention, add, norm, FFN, add), "parallel"
    # (command-r: attention and FFN on one norm; FFN + input, then + attention), "phi2"
    # (one norm; attention + FFN, then + input), "neox" (its own FFN norm of the input;
    # FFN + input, then + attention), "falcon" (one norm; FFN + attention, then + input),
    # "post" (olmo2: no pre-norms; norms after attention and FFN)
    layout: str = "seq"
    par_res_flag: bool = False  # the layout above only where use_parallel_residual says so
    q_scale: bool = False  # Q scaled after RoPE (kq_scale 1 in the attention)
    embd_scale: str = ""  # "" | "scale" (ggml_scale after the input) | "rows" (scale_rows input)
    logit_scale: bool = False  # the logits scaled by the file's logit_scale when it has one
    # the file's embedding_scale (after the input) and residual_scale (each branch before
    # its residual add) are applied (granite and its kin)
    scales: bool = False
    scales_always: bool = False  # minicpm: the three scales have defaults the file may override
    softcap: bool = False  # the logits soft-capped (scale, tanh, scale) by final_logit_softcapping
    attn_softcap: bool = False  # the KQ scores soft-capped the same way (no flash attention)
    clamp: bool = False  # Q/K/V clamped by the file's clamp_kqv when it has one
    # "all" | "none" (ALiBi or learned positions) | "swa" (SWA layers only) | "n32" (only a
    # 32-layer model: baichuan's 7B) | "step4" (all but every 4th layer: smollm3) | "llama4"
    # (every 4th layer without with sliding windows, else all but the last) | "swa_or_all"
    # (the SWA layers when there are any, else all: exaone4)
    rope: str = "all"
    # Q/K RMS-normed without a weight after RoPE (llama4's use_kq_norm)
    kq_rms_after_rope: bool = False
    act: str = "silu"  # the FFN's activation where it shapes the graph: "relu_sqr" adds an op
    # MoE routing defaults: gating (1 softmax, 2 sigmoid, 3 softmax over the chosen
    # experts' logits), whether the file's expert_gating_func overrides it, whether the chosen
    # weights are normalised (None: the file's expert_weights_norm)
    gating: int = 1
    gating_from_file: bool = False
    norm_w: bool | None = True
    # llama4: experts chosen by the router's logits, their weights applied to the input
    weight_before_ffn: bool = False
    # the shared expert: "add" (experts + shared), "gated" (qwen2moe: shared scaled by the
    # sigmoid of its own gate); "" where the file has none
    shexp: str = "add"
    post_ffw_pinned: bool = False  # post_ffw_norm built with the layer's index (glm4)
    # positions per token: 1, 4 (multi-section RoPE), or "sections" (4 where the file has
    # rope.dimension_sections: glm4, glm4moe)
    n_pos: int | str = 1
    out_rows: str = "layer"  # "layer": the last layer keeps the output rows; "after": after it
    add_res_first: bool = False  # the FFN's residual add takes the residual first (phi3)
    attn_scale_input: bool = False  # a per-token attention temperature input (llama4, mistral3)
    mla: bool = False  # deepseek2's multi-head latent attention
    dsa: bool = False  # DeepSeek sparse attention: a lightning indexer picks each token's cells


# Recipes per architecture name (general.architecture). Keep entries to facts read from
# llama.cpp's graph code; anything a file can say is read from the file instead.
RECIPES: dict[str, Recipe] = {
    "llama": Recipe(),
    "mistral3": Recipe(attn_scale_input=True),
    "qwen2": Recipe(),
    "qwen3": Recipe(),
    "qwen3moe": Recipe(norm_w=True),
    "qwen2moe": Recipe(norm_w=False, shexp="gated"),
    "gemma3": Recipe(q_scale=True, embd_scale="rows", softcap=True),
    "phi3": Recipe(q_scale=True, add_res_first=True),
    "gpt2": Recipe(norm=LAYER, rope="none"),
    "starcoder": Recipe(norm=LAYER, rope="none"),
    "gpt-oss": Recipe(gating=3, norm_w=False, out_rows="after"),
    "glm4moe": Recipe(
        qk_order="norms", gating=2, gating_from_file=True, norm_w=None, n_pos="sections"
    ),
    "deepseek2": Recipe(mla=True, gating_from_file=True, norm_w=None, attn_scale_input=True),
    "olmoe": Recipe(qk_order="full", norm_w=False),
    "olmo2": Recipe(layout="post", qk_order="full"),
    "starcoder2": Recipe(norm=LAYER),
    "granite": Recipe(scales=True, logit_scale=True),
    "granitemoe": Recipe(scales=True, logit_scale=True),
    "cohere2": Recipe(norm=LAYER, layout="parallel", rope="swa", logit_scale=True),
    "command-r": Recipe(norm=LAYER, qk_norm=LAYER, layout="parallel", logit_scale=True),
    "exaone": Recipe(),
    "ernie4_5": Recipe(),
    "ernie4_5-moe": Recipe(),
    "bailingmoe": Recipe(norm_w=None),
    "seed_oss": Recipe(),
    "gemma": Recipe(embd_scale="scale", q_scale=True),
    "gemma2": Recipe(embd_scale="scale", q_scale=True, softcap=True, attn_softcap=True),
    "olmo": Recipe(norm=LAYER, clamp=True),
    "qwen": Recipe(),
    "internlm2": Recipe(),
    "orion": Recipe(norm=LAYER),
    "xverse": Recipe(),
    "codeshell": Recipe(norm=LAYER),
    "refact": Recipe(rope="none"),
    "baichuan": Recipe(rope="n32"),
    "stablelm": Recipe(norm=LAYER, qk_norm=LAYER, qk_order="norms"),
    "phi2": Recipe(norm=LAYER, layout="phi2", q_scale=True),
    "gptneox": Recipe(norm=LAYER, layout="neox", par_res_flag=True),
    "falcon": Recipe(norm=LAYER, layout="falcon"),
    "bloom": Recipe(norm=LAYER, rope="none"),
    "mpt": Recipe(norm=LAYER, rope="none", clamp=True),
    "arcee": Recipe(act="relu_sqr"),
    "dbrx": Recipe(norm=LAYER, clamp=True),
    "deepseek": Recipe(norm_w=False),
    "jais": Recipe(norm=LAYER, rope="none"),
    "nemotron": Recipe(norm=LAYER, act="relu_sqr"),
    "exaone4": Recipe(layout="post", qk_order="norms", rope="swa_or_all"),
    "glm4": Recipe(post_ffw_pinned=True, n_pos="sections"),
    "chatglm": Recipe(),
    "qwen2vl": Recipe(n_pos=4),
    "phimoe": Recipe(q_scale=True, add_res_first=True),
    "hunyuan-moe": Recipe(qk_order="after"),
    "minimax-m2": Recipe(qk_order="full", gating_from_file=True),
    "dots1": Recipe(gating_from_file=True, norm_w=None),
    "glm-dsa": Recipe(mla=True, dsa=True, gating=2, gating_from_file=True, norm_w=None),
    "minicpm": Recipe(scales=True, scales_always=True, logit_scale=True),
    "apertus": Recipe(qk_order="norms"),
    "exaone-moe": Recipe(qk_order="norms", rope="swa", gating_from_file=True, norm_w=None),
    "bailingmoe2": Recipe(gating_from_file=True, norm_w=None),
    "mistral4": Recipe(mla=True, gating_from_file=True, norm_w=None, attn_scale_input=True),
    "hunyuan-dense": Recipe(qk_order="after", n_pos="sections"),
    "hunyuan_vl": Recipe(qk_order="after", n_pos="sections"),
    "deepseek32": Recipe(mla=True, dsa=True, gating_from_file=True, norm_w=None),
    "smollm3": Recipe(rope="step4"),
    "maincoder": Recipe(qk_order="after"),
    "llama4": Recipe(
        rope="llama4",
        kq_rms_after_rope=True,
        attn_scale_input=True,
        gating=2,
        norm_w=False,
        weight_before_ffn=True,
    ),
}

_RECURRENT = "recurrent (state-space or linear-attention) layers are not modelled"
_HYBRID = "hybrid attention and recurrent layers are not modelled"
_ENCODER = "an encoder without a KV cache (non-causal attention) is not modelled"
_DIFFUSION = "a diffusion model (non-causal, no KV cache) is not modelled"
_NOT_YET = "its graph is not modelled yet"

# Architectures whose graph is not modelled, and why (the estimate says so).
APPROXIMATE: dict[str, str] = {
    "clip": "a vision encoder, not a model llama-server runs alone",
    "gptj": "llama.cpp lists it but has no graph for it",
    # recurrent and hybrid
    "mamba": _RECURRENT,
    "mamba2": _RECURRENT,
    "rwkv6": _RECURRENT,
    "rwkv6qwen2": _RECURRENT,
    "rwkv7": _RECURRENT,
    "arwkv7": _RECURRENT,
    "jamba": _HYBRID,
    "falcon-h1": _HYBRID,
    "granitehybrid": _HYBRID,
    "nemotron_h": _HYBRID,
    "nemotron_h_moe": _HYBRID,
    "plamo2": _HYBRID,
    "lfm2": "short-convolution layers (a recurrent state) are not modelled",
    "lfm2moe": "short-convolution layers (a recurrent state) are not modelled",
    "qwen3next": "gated delta-net (linear attention) layers are not modelled",
    "qwen35": "gated delta-net (linear attention) layers are not modelled",
    "qwen35moe": "gated delta-net (linear attention) layers are not modelled",
    "qwen4exp": "gated delta-net layers and hyper-connections are not modelled",
    "kimi-linear": "Kimi delta attention (linear attention) layers are not modelled",
    "kimi-k3": "linear-attention layers and hyper-connections are not modelled",
    "minimax-01": "lightning (linear) attention layers are not modelled",
    "glm5-next": "linear attention, sparse attention and hyper-connections are not modelled",
    "bailingmoe3": "linear-attention layers are not modelled",
    "plm": _NOT_YET,
    "clef": _NOT_YET,
    "maple": _NOT_YET,
    # encoders and diffusion models: no KV cache
    "bert": _ENCODER,
    "modern-bert": _ENCODER,
    "nomic-bert": _ENCODER,
    "nomic-bert-moe": _ENCODER,
    "neo-bert": _ENCODER,
    "jina-bert-v2": _ENCODER,
    "jina-bert-v3": _ENCODER,
    "eurobert": _ENCODER,
    "t5": "an encoder-decoder (cross-attention) is not modelled",
    "t5encoder": _ENCODER,
    "gemma-embedding": _ENCODER,
    "llama-embed": _ENCODER,
    "pangu-embedded": _NOT_YET,
    "dream": _DIFFUSION,
    "llada": _DIFFUSION,
    "llada-moe": _DIFFUSION,
    "rnd1": _DIFFUSION,
    # sparse attention and other blocks of their own
    "dots3note": "sparse attention is not modelled",
    "minimax-m3": "sparse (MSA) attention with an indexer cache is not modelled",
    "deepseek4": "compressed sparse attention and hyper-connections are not modelled",
    "hy_v4": "sparse attention and hyper-connections are not modelled",
    "gemma3n": "per-layer embeddings, AltUp and layers sharing a KV cache are not modelled",
    "gemma4": "per-layer embeddings and layers sharing a KV cache are not modelled",
    "gemma4-assistant": "a draft head over another model's KV cache is not modelled",
    "eagle3": "a draft head over another model's hidden states is not modelled",
    "dflash": "a draft head over another model's hidden states is not modelled",
    "nanbeige": "looped layers are not modelled",
    "deci": "layers without attention or FFN (variable per layer) are not modelled",
    "openelm": "per-layer head counts and FFN widths are not modelled",
    "cogvlm": "vision-expert layers are not modelled",
    "chameleon": _NOT_YET,
    "wavtokenizer-dec": "an audio decoder (convolutions, no KV cache) is not modelled",
    "qwen3tts": "a speech model is not modelled",
    "pockettts": "a speech model is not modelled",
    "deepseek2-ocr": _NOT_YET,
    "minicpm3": _NOT_YET,
    "smallthinker": "experts routed from the layer's input (before its norm) are not modelled",
    "granite_swa": _NOT_YET,
    "graniteswitch": _NOT_YET,
    "qwen3vl": "multi-section RoPE and deepstack inputs are not modelled yet",
    "qwen3vlmoe": "multi-section RoPE and deepstack inputs are not modelled yet",
    "paddleocr": _NOT_YET,
    # the rest
    **dict.fromkeys(
        [
            "grok",
            "plamo",
            "plamo3",
            "cohere2moe",
            "muse-glimmer",
            "arctic",
            "bitnet",
            "jais2",
            "afmoe",
            "laguna",
            "hy_v3",
            "grovemoe",
            "hrm_text",
            "mimo2",
            "step35",
            "spark2_5",
            "talkie",
            "mellum",
        ],
        _NOT_YET,
    ),
}


def recipe_of(arch: str) -> Recipe | None:
    return RECIPES.get(arch)


def known_to_llama_cpp(arch: str) -> bool:
    """Whether the pinned llama.cpp lists ``arch`` (a newer build may know more)."""
    return arch in RECIPES or arch in APPROXIMATE


def approximate_reason(arch: str) -> str:
    """Why ``arch``'s compute buffers come from the formula ("" where the graph is modelled)."""
    if arch in RECIPES:
        return ""
    return f"{arch}: {APPROXIMATE.get(arch, 'an architecture this does not know')}"

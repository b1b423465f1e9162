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
    # before the heads are split: olmoe, olmo2)
    qk_order: str = "qrope"
    # the layer's residual layout: "seq" (norm, attention, add, norm, FFN, add), "parallel"
    # (command-r: attention and FFN on one norm; FFN + input, then + attention), "phi2"
    # (one norm; attention + FFN, then + input), "neox" (its own FFN norm of the input;
    # FFN + input, then + attention), "falcon" (one norm; FFN + attention, then + input),
    # "post" (olmo2: no pre-norms; norms after attention and FFN)
    layout: str = "seq"
    q_scale: bool = False  # Q scaled after RoPE (kq_scale 1 in the attention)
    embd_scale: str = ""  # "" | "scale" (ggml_scale after the input) | "rows" (scale_rows input)
    logit_scale: bool = False  # the logits scaled by the file's logit_scale when it has one
    softcap: bool = False  # the logits soft-capped (scale, tanh, scale) by final_logit_softcapping
    rope: str = "all"  # "all" | "none" (ALiBi or learned positions) | "swa" (SWA layers only)
    act: str = "silu"  # the FFN's activation where it shapes the graph: "relu_sqr" adds an op
    # MoE routing defaults: gating (1 softmax, 2 sigmoid, 3 softmax over the chosen
    # experts' logits), whether the file's expert_gating_func overrides it, whether the chosen
    # weights are normalised (None: the file's expert_weights_norm)
    gating: int = 1
    gating_from_file: bool = False
    norm_w: bool | None = True
    moe_act: str = "silu"  # "swiglu_oai" (gpt-oss): same shapes, another op
    # the shared expert: "add" (experts + shared), "gated" (qwen2moe: shared scaled by the
    # sigmoid of its own gate); "" where the file has none
    shexp: str = "add"
    out_rows: str = "layer"  # "layer": the last layer keeps the output rows; "after": after it
    add_res_first: bool = False  # the FFN's residual add takes the residual first (phi3)
    attn_scale_input: bool = False  # a per-token attention temperature input (llama4, mistral3)
    mla: bool = False  # deepseek2's multi-head latent attention


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
    "gpt-oss": Recipe(gating=3, norm_w=False, moe_act="swiglu_oai", out_rows="after"),
    "glm4moe": Recipe(qk_order="norms", gating=2, gating_from_file=True, norm_w=None),
    "deepseek2": Recipe(mla=True, gating_from_file=True, norm_w=None, attn_scale_input=True),
}

# Architectures whose graph is not modelled, and why (the estimate says so).
APPROXIMATE: dict[str, str] = {}


def recipe_of(arch: str) -> Recipe | None:
    return RECIPES.get(arch)


def approximate_reason(arch: str) -> str:
    """Why ``arch``'s compute buffers come from the formula ("" where the graph is modelled)."""
    if arch in RECIPES:
        return ""
    return APPROXIMATE.get(arch, f"no graph of {arch} is modelled")

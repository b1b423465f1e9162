"""Compute buffers from llama.cpp's own graph and allocator, where the graph is modelled.

``exact_compute_buffers`` builds the worst-case graphs sched_reserve reserves (n_ubatch
tokens against the whole KV cache, then one token per sequence), plans them with
ggml-alloc's rules (:mod:`.ggml_alloc`) and returns the larger peak, the size llama.cpp logs.
Returns None where the graph is not modelled (the architecture, or a device layout whose
scheduler splits are not), so the caller falls back to the calibrated formula.

Plans depend on shapes and settings only, never on weight types, so they are cached.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from functools import lru_cache

from lltui.core.fit.common import CPU_ALIGNMENT
from lltui.core.fit.context import Resolved
from lltui.core.fit.devices_spec import DeviceSpec
from lltui.core.fit.ggml_alloc import BufferType, plan
from lltui.core.fit.ggml_types import type_from_name
from lltui.core.fit.graph_llama import (
    LLAMA_FAMILY,
    LayerShape,
    LlamaShape,
    Ubatch,
    build_llama_graph,
)
from lltui.core.fit.hparams import Hparams
from lltui.core.llama.flags import LlamaArgs

_CPU_BUFT = BufferType(alignment=CPU_ALIGNMENT)


def graph_covered(hp: Hparams) -> bool:
    """Whether the graph of this model is modelled (else the formula is used)."""
    if hp.arch not in LLAMA_FAMILY or hp.mla or hp.swa_any or any(hp.is_recurrent):
        return False
    if hp.n_layer != hp.n_layer_all or hp.n_layer_kv_from_start >= 0:
        return False
    return hp.n_layer > 0 and all(h > 0 for h in hp.n_head_kv[: hp.n_layer])


def llama_shape(hp: Hparams, r: Resolved, tensor_names: Collection[str]) -> LlamaShape:
    layers = []
    for il in range(hp.n_layer):
        moe = f"blk.{il}.ffn_gate_inp.weight" in tensor_names
        layers.append(LayerShape(hp.n_head[il], hp.n_head_kv[il], 0 if moe else hp.n_ff[il], moe))
    return LlamaShape(
        n_embd=hp.n_embd,
        n_vocab=hp.n_vocab,
        head_k=hp.head_k,
        head_v=hp.head_v,
        layers=tuple(layers),
        n_expert=hp.n_expert,
        n_expert_used=hp.n_expert_used,
        n_ff_exp=hp.n_ff_exp,
        qkv_bias="blk.0.attn_q.bias" in tensor_names,
        wo_bias="blk.0.attn_output.bias" in tensor_names,
        qk_norm="blk.0.attn_q_norm.weight" in tensor_names,
        output_bias="output.bias" in tensor_names,
        flash_attn=r.flash_attn,
        type_k=int(type_from_name(r.type_k)),
        type_v=int(type_from_name(r.type_v)),
        kv_size=r.n_ctx_seq,
        n_stream=r.n_stream,
        kv_unified=r.kv_unified,
    )


def reserve_ubatches(r: Resolved) -> tuple[Ubatch, Ubatch]:
    """sched_reserve's two graphs: the prompt batch and one token per sequence."""
    n_seqs = r.n_seq_max
    n_tokens = min(r.n_ctx, r.n_ubatch)
    n_out = min(n_tokens, r.n_outputs_max)
    if n_tokens % n_seqs:
        n_tokens = (n_tokens + n_seqs - 1) // n_seqs * n_seqs
    return Ubatch(n_tokens, n_seqs, n_out), Ubatch(n_seqs, n_seqs, n_seqs)


# Identical layers leave the allocator in the same state after the first few: a model of
# PERIODIC_FROM + 1 and + 2 such layers (the last one keeps its output rows) that plan the same
# stands for any depth; otherwise every layer is planned.
PERIODIC_FROM = 3


def plan_every_layer(shape: LlamaShape, ub: Ubatch) -> int:
    return plan(build_llama_graph(shape, ub), [_CPU_BUFT])[0]


@lru_cache(maxsize=512)
def planned_peak(shape: LlamaShape, ub: Ubatch) -> int:
    layers = shape.layers
    if len(layers) > PERIODIC_FROM + 2 and len(set(layers)) == 1:
        short = plan_every_layer(replace(shape, layers=layers[: PERIODIC_FROM + 1]), ub)
        longer = plan_every_layer(replace(shape, layers=layers[: PERIODIC_FROM + 2]), ub)
        if short == longer:
            return short
    return plan_every_layer(shape, ub)


def _cpu_plan(shape: LlamaShape, pp: Ubatch, tg: Ubatch) -> int:
    return max(planned_peak(shape, pp), planned_peak(shape, tg))


def exact_compute_buffers(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    tensor_names: Collection[str],
) -> dict[str, int] | None:
    """Compute buffer per backend from the planned graph; None where not modelled."""
    if not graph_covered(hp) or devices or st.embedding:
        return None
    shape = llama_shape(hp, r, tensor_names)
    pp, tg = reserve_ubatches(r)
    return {"CPU": _cpu_plan(shape, pp, tg)}

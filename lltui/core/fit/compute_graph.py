"""Compute buffers from llama.cpp's own graph, scheduler and allocator, where modelled.

``exact_compute_buffers`` builds the worst-case graphs sched_reserve reserves (n_ubatch
tokens against the whole KV cache, then one token per sequence), assigns them to backends
and splits them as ggml's scheduler does (:mod:`.ggml_sched`), plans each backend's buffer
with ggml-alloc's rules (:mod:`.ggml_alloc`) and returns the larger peak per backend, the
sizes llama.cpp logs. Returns None where something is not modelled (the architecture, CUDA
devices, embeddings), so the caller falls back to the calibrated formula.

Plans depend on shapes, placement and settings only, never on weight types, so they are
cached.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from lltui.core.fit.common import CPU, CPU_ALIGNMENT, SCHED_MAX_COPIES, backend_of
from lltui.core.fit.context import Resolved
from lltui.core.fit.devices_spec import DeviceSpec
from lltui.core.fit.ggml_alloc import BufferType, plan
from lltui.core.fit.ggml_graph import HOST
from lltui.core.fit.ggml_sched import Backend, schedule
from lltui.core.fit.ggml_types import type_from_name
from lltui.core.fit.graph_llama import (
    LLAMA_FAMILY,
    LayerShape,
    LlamaShape,
    Ubatch,
    build_llama_graph,
)
from lltui.core.fit.hparams import Hparams
from lltui.core.fit.placement import TensorPlacement
from lltui.core.llama.flags import LlamaArgs

_CPU_BUFT = BufferType(alignment=CPU_ALIGNMENT)


@dataclass(frozen=True, slots=True)
class Backends:
    """The scheduler's backends: ``n_devices`` CPU-like devices (RPC servers running the
    CPU backend), then the CPU; ``n_copies`` > 1 with pipeline parallelism."""

    n_devices: int = 0
    n_copies: int = 1

    def list(self) -> list[Backend]:
        devs = [Backend(i, _CPU_BUFT) for i in range(self.n_devices)]
        return [*devs, Backend(HOST, _CPU_BUFT)]


def graph_covered(hp: Hparams) -> bool:
    """Whether the graph of this model is modelled (else the formula is used)."""
    if hp.arch not in LLAMA_FAMILY or hp.mla or hp.swa_any or any(hp.is_recurrent):
        return False
    if hp.n_layer != hp.n_layer_all or hp.n_layer_kv_from_start >= 0:
        return False
    return hp.n_layer > 0 and all(h > 0 for h in hp.n_head_kv[: hp.n_layer])


def _moved(
    placements: Sequence[TensorPlacement], layer_dev: Sequence[int], index: dict[str, int]
) -> tuple[tuple[str, int], ...]:
    """Weights llama.cpp put elsewhere than their layer (-ot, --cpu-moe)."""
    out = []
    for p in placements:
        if p.layer is None or p.duplicate or p.layer >= len(layer_dev):
            continue
        loc = index.get(p.device, HOST)
        if loc != layer_dev[p.layer]:
            out.append((p.name, loc))
    return tuple(sorted(out))


def llama_shape(
    hp: Hparams,
    r: Resolved,
    tensor_names: Collection[str],
    layer_dev: Sequence[int] = (),
    moved: tuple[tuple[str, int], ...] = (),
    kv_host: bool = False,
) -> LlamaShape:
    layers = []
    for il in range(hp.n_layer):
        moe = f"blk.{il}.ffn_gate_inp.weight" in tensor_names
        layers.append(LayerShape(hp.n_head[il], hp.n_head_kv[il], 0 if moe else hp.n_ff[il], moe))
    devs = tuple(d if d >= 0 else HOST for d in layer_dev)
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
        layer_dev=devs if any(d != HOST for d in devs) else (),
        moved=moved,
        kv_host=kv_host,
        full_offload=r.n_gpu_layers > hp.n_layer_all,
    )


def reserve_ubatches(r: Resolved) -> tuple[Ubatch, Ubatch]:
    """sched_reserve's two graphs: the prompt batch and one token per sequence."""
    n_seqs = r.n_seq_max
    n_tokens = min(r.n_ctx, r.n_ubatch)
    n_out = min(n_tokens, r.n_outputs_max)
    if n_tokens % n_seqs:
        n_tokens = (n_tokens + n_seqs - 1) // n_seqs * n_seqs
    return Ubatch(n_tokens, n_seqs, n_out), Ubatch(n_seqs, n_seqs, n_seqs)


# Identical layers on one backend leave the allocator in the same state after the first few:
# a model of PERIODIC_FROM + 1 and + 2 such layers (the last keeps its output rows) that plan
# the same stands for any depth; otherwise every layer is planned.
PERIODIC_FROM = 3


def plan_every_layer(
    shape: LlamaShape, ub: Ubatch, backends: Backends = Backends()
) -> tuple[int, ...]:
    """Each backend's buffer (devices, then the CPU) for the graph of ``ub``."""
    graph = build_llama_graph(shape, ub)
    bes = backends.list()
    if backends.n_devices == 0:
        return tuple(plan(graph, [_CPU_BUFT]))
    sched = schedule(graph, bes, op_offload=True, n_copies=backends.n_copies)
    return tuple(plan(sched, [b.buft for b in bes]))


@lru_cache(maxsize=512)
def planned_peak(shape: LlamaShape, ub: Ubatch, backends: Backends = Backends()) -> tuple[int, ...]:
    layers = shape.layers
    uniform = not shape.layer_dev and not shape.moved and len(set(layers)) == 1
    if uniform and len(layers) > PERIODIC_FROM + 2:
        short = plan_every_layer(replace(shape, layers=layers[: PERIODIC_FROM + 1]), ub, backends)
        longer = plan_every_layer(replace(shape, layers=layers[: PERIODIC_FROM + 2]), ub, backends)
        if short == longer:
            return short
    return plan_every_layer(shape, ub, backends)


def _cpu_like(dev: DeviceSpec) -> bool:
    return dev.kind == "rpc" and backend_of(dev) == "cpu"


def exact_compute_buffers(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
    placements: Sequence[TensorPlacement],
    pipeline_parallel: bool,
) -> dict[str, int] | None:
    """Compute buffer per backend from the planned graph; None where not modelled."""
    if not graph_covered(hp) or st.embedding or not all(_cpu_like(d) for d in devices):
        return None
    names = {p.name for p in placements}
    index = {d.name: i for i, d in enumerate(devices)}
    shape = llama_shape(
        hp,
        r,
        names,
        layer_dev,
        _moved(placements, layer_dev, index) if devices else (),
        kv_host=bool(devices) and not st.kv_offload,
    )
    backends = Backends(len(devices), SCHED_MAX_COPIES if pipeline_parallel else 1)
    pp, tg = reserve_ubatches(r)
    sizes = [
        max(a, b)
        for a, b in zip(
            planned_peak(shape, pp, backends), planned_peak(shape, tg, backends), strict=True
        )
    ]
    out = {d.name: size for d, size in zip(devices, sizes, strict=False) if size > 1}
    out[CPU] = sizes[-1]
    return out

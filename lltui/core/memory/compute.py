"""Compute buffers: planned from llama.cpp's graph where it is modelled, else the one
calibrated approximation of the estimator (the rest is exact)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from lltui.core.memory.common import (
    CPU,
    CUDA_ALIGNMENT,
    OP_OFFLOAD_MIN_BATCH,
    SCHED_MAX_COPIES,
    buffer_alignment,
    device_alloc_size,
    is_gpu,
    pad,
)
from lltui.core.memory.compute_graph import (
    CUDA_NOTE,
    ROCM_NOTE,
    ComputeLayout,
    Planned,
    planned_compute_buffers,
)
from lltui.core.memory.context import Resolved
from lltui.core.memory.devices import ROCM_PREFIX, DeviceSpec, host_buffer
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.placement import TensorPlacement, derived, is_matmul_name

# ggml-alloc packs the worst-case graph (n_ubatch tokens, every KV cell) into one buffer per
# backend. Measured on llama.cpp's CPU backend (real servers on models from 0.5 to 8B-sized
# shapes, see bench/fit_accuracy.py), that buffer is made of:
#   graph inputs   tokens, positions, KV row indices (~41 B a token), the KQ masks (F16 with
#                  flash attention, F32 without: one per KV cache, n_kv x n_tokens), and two
#                  E-wide embedding inputs (token and mixed-batch paths)
#   embedding      two more E-wide rows per token (the get_rows results)
#   layer peak     the FFN of one layer: E + 3*F floats a token (the residual, gate, up and
#                  the gated product), E + 3*F_active (+ n_used*E routed outputs) for MoE;
#                  without flash attention the KQ scores, n_head*n_kv floats a token, plus
#                  E + Q + 2*K (Q twice with Q/K norms) can be larger.
# On several devices each holds its split inputs (masks, small inputs, the residual from the
# previous device; the first one the three embedding paths) and its own layer peak; pipeline
# parallelism keeps GGML_SCHED_MAX_COPIES copies of every input. Measured error: a few percent
# on one device, under 10 % on several (rpc devices); the bench prints it.

SMALL_INPUT_BYTES = 41  # tokens, positions, mixed-batch rows, KV row indices: per token
_QK_NORM = frozenset({"qwen3", "qwen3moe", "gemma3", "gemma3n", "gemma2", "olmo2", "qwen3next"})
_EMBD_SCALE = frozenset({"gemma", "gemma2", "gemma3", "gemma3n", "gemma4", "gemma-embedding"})


@dataclass(frozen=True, slots=True)
class _Shape:
    """Per-token float counts of one architecture's layer, for the compute model."""

    E: int
    F: int  # dense FFN width (max over layers)
    F_moe: int  # active expert width: n_used * n_ff_exp
    moe_routed: int  # n_used * E when the routed outputs outgrow the expert width
    Q: int
    K: int
    H: int
    qk_norm: bool


def _shape(hp: Hparams) -> _Shape:
    E = hp.n_embd
    F = max(hp.n_ff) if hp.n_ff else 0
    f_moe = hp.n_expert_used * hp.n_ff_exp if hp.n_expert else 0
    routed = hp.n_expert_used * E if hp.n_expert and hp.n_expert_used * E > f_moe else 0
    H = max(hp.n_head) if hp.n_head else 0
    hk = max(hp.head_k, hp.head_k_swa)
    K = max((hp.n_embd_k_gqa(il) for il in range(hp.n_layer_all)), default=0)
    return _Shape(E, F, f_moe, routed, H * hk, K, H, hp.arch in _QK_NORM)


def _layer_peak(sh: _Shape, T: int, n_kv: int, scores: bool) -> int:
    """Bytes of one layer's intermediates at its peak, for T tokens against n_kv cells;
    ``scores``: the KQ scores (attention without flash attention) are computed here."""
    ffn = sh.E + 3 * max(sh.F, sh.F_moe) + (sh.moe_routed if sh.F_moe >= sh.F else 0)
    q = sh.Q * (2 if sh.qk_norm else 1)
    attn = sh.E + q + 2 * sh.K
    if scores:
        attn += sh.H * n_kv
    return 4 * T * max(ffn, attn)


def _attn_peak(sh: _Shape, T: int, n_kv: int, scores: bool) -> int:
    q = sh.Q * (2 if sh.qk_norm else 1)
    attn = sh.E + q + 2 * sh.K + (sh.H * n_kv if scores else 0)
    return 4 * T * attn


@dataclass(frozen=True, slots=True)
class ComputeBuffers:
    """Compute buffer bytes per backend; ``exact`` when planned from llama.cpp's graph on
    backends whose rules are verified (:mod:`.compute_graph`), False when the calibrated
    formula below sized them or CUDA's planning is not verified."""

    sizes: Mapping[str, int]
    exact: bool
    note: str = ""  # why they are approximate ("" when exact)


def compute_buffers(layout: ComputeLayout) -> ComputeBuffers:
    """Compute buffer per backend (devices, then the CPU backend), as sched_reserve sizes
    them: from the modelled graph where it covers the model and layout, else the formula."""
    planned = planned_compute_buffers(layout)
    if isinstance(planned, Planned):
        gpus = {d.backend_name for d in layout.devices if is_gpu(d)}
        note = ROCM_NOTE if gpus == {ROCM_PREFIX} else CUDA_NOTE
        return ComputeBuffers(planned.sizes, planned.exact, "" if planned.exact else note)
    return ComputeBuffers(formula_compute_buffers(layout), False, f"formula: {planned}")


def formula_compute_buffers(layout: ComputeLayout) -> dict[str, int]:
    """The calibrated approximation, per backend."""
    hp, r, st, devices = layout.hp, layout.r, layout.st, layout.devices
    layer_dev, placements, pipeline_parallel = (
        layout.layer_dev,
        layout.placements,
        layout.pipeline_parallel,
    )
    g = _Graph(hp, r, pipeline_parallel, kv_host=bool(devices) and not st.kv_offload)
    # the first local CUDA device takes big-batch ops off host weights (RPC backends never do)
    offload_to = next((d for d in devices if d.kind == "cuda"), None)
    op_offload = bool(offload_to and st.op_offload and g.T >= OP_OFFLOAD_MIN_BATCH)
    out: dict[str, int] = {}
    for di, dev in enumerate(devices):
        size = _device_buffer(g, di, dev, layer_dev)
        if size is not None:
            out[dev.name] = size
    if op_offload:
        # big batches run CPU-resident matmuls on the first GPU, copying one weight at a time
        # each copy sized as the GPU allocates a tensor of the weight's own type and shape
        # (quantized rows padded to 512 elements)
        assert offload_to is not None
        largest = derived(
            placements,
            ("largest_host_copy", offload_to),
            lambda: _largest_copy(offload_to, placements),
        )
        if largest is not None:
            name = offload_to.name
            out[name] = _with_offload_copy(g, out.get(name), largest)
    host_name = host_buffer(devices) or CPU
    out[host_name] = _cpu_buffer(g, layer_dev, placements, op_offload)
    return out


def _largest_copy(to: DeviceSpec, placements: Sequence[TensorPlacement]) -> int | None:
    """The largest host matmul weight as ``to`` allocates a copy of it; None if none."""
    cpu_weights = [
        device_alloc_size(to, p.type_id, p.dims, p.nbytes)
        for p in placements
        if p.device == CPU and p.layer is not None and is_matmul_name(p.name)
    ]
    return max(cpu_weights) if cpu_weights else None


class _Graph:
    """The worst-case graph's sizes that every backend's buffer is made of."""

    def __init__(self, hp: Hparams, r: Resolved, pipeline_parallel: bool, kv_host: bool) -> None:
        self.hp = hp
        self.r = r
        # without flash attention llama.cpp runs everything between the KV store and the
        # attention output on the CPU when the cache is in host memory (-nkvo): the KQ
        # scores are the host's, not the layer's device's
        self.host_scores = kv_host and not r.flash_attn
        self.T = min(r.n_ctx, r.n_ubatch)
        self.n_out = min(self.T, r.n_outputs_max)
        self.sh = _shape(hp)
        self.copies = SCHED_MAX_COPIES if pipeline_parallel else 1
        # the KV caches the graph reads: full (n_ctx_seq cells) and, for SWA models, the window
        self.full_kv = self.swa_kv = 0
        if hp.has_memory and any(hp.has_kv(il) for il in range(hp.n_layer_all)):
            self.full_kv = r.n_ctx_seq
            if hp.swa_any:
                self.swa_kv = r.swa_cells
        self.mask_elem = 2 if r.flash_attn else 4
        self.ET = 4 * hp.n_embd * self.T
        self.head = 4 * self.n_out * (hp.n_vocab + 2 * hp.n_embd)
        self.last = hp.n_layer - 1
        self.scale_rows = 4 * self.T if hp.arch in _EMBD_SCALE else 0
        # DeepSeek sparse attention: the lightning indexer scores every cached key for every
        # token (F32, n_kv x n_ubatch), then each layer's mask is rebuilt from its top-k
        # (a filled copy of the mask); the indexer has a mask input of its own (F16)
        self.dsa = hp.indexer_head_size > 0 and any(hp.indexer_layers)

    def inputs_for(self, ls: Iterable[int], on_device: bool = False) -> tuple[int, int]:
        """Masks and small inputs the given layers read, and the widest KV they attend
        (a device whose attention runs on the host copies no masks)."""
        hp, T = self.hp, self.T
        kinds = {hp.swa_any and hp.is_swa[il] for il in ls if hp.has_kv(il)}
        cells = [self.swa_kv if k else self.full_kv for k in kinds]
        masks = 0 if on_device and self.host_scores else sum(self.mask_elem * c * T for c in cells)
        small = T * (SMALL_INPUT_BYTES + 16 * max(0, len(cells) - 1))
        if self.dsa and cells:
            masks += 2 * max(cells) * T
        return masks + small, max(cells, default=0)

    def peak(self, ls: Sequence[int], n_kv: int, on_host: bool = False) -> int:
        """The peak of these layers' intermediates on one backend (``on_host``: the CPU's)."""
        scores = not self.r.flash_attn and (on_host or not self.host_scores)
        # the scores; without flash attention the rebuilt F32 mask lives beside the KQ
        indexer = (4 if self.r.flash_attn else 8) * n_kv * self.T if self.dsa and ls else 0
        full = [il for il in ls if il != self.last]
        if full:
            return _layer_peak(self.sh, self.T, n_kv, scores) + indexer
        return _attn_peak(self.sh, self.T, n_kv, scores) + indexer if ls else 0


def _device_buffer(g: _Graph, di: int, dev: DeviceSpec, layer_dev: Sequence[int]) -> int | None:
    """One device's buffer: its split inputs and its layers' (or the head's) peak; None
    when the device runs no part of the graph."""
    hp = g.hp
    ls = [il for il in range(hp.n_layer) if layer_dev[il] == di]
    has_out = layer_dev[hp.n_layer_all] == di
    if not ls and not has_out:
        return None
    inputs = inter = 0
    if ls:
        io, n_kv = g.inputs_for(ls, on_device=True)
        inputs = io + (3 * g.ET + g.scale_rows if 0 in ls else g.ET)
        inter = g.peak(ls, n_kv)
    elif has_out:
        inputs = 4 * g.n_out * hp.n_embd
    if has_out:
        inter = max(inter, g.head)
    size = g.copies * inputs + inter
    if dev.kind == "cuda" and g.r.flash_attn and ls:
        size += _cuda_fa_staging(hp, g.r, g.full_kv or g.swa_kv)
    return pad(size, buffer_alignment(dev))


def _with_offload_copy(g: _Graph, base: int | None, copy: int) -> int:
    """The first GPU's buffer under op offload (as ggml's scheduler does it): each copied
    weight is a split input freed after its matmul, so it sits in memory the attention
    freed, beside the FFN's activations, not on top of the attention peak; with no layers
    of its own (-ngl 0) the offloaded ops' activations are there as well."""
    io, n_kv = g.inputs_for(range(g.hp.n_layer))
    if base is None:
        base = io + g.ET + g.peak(range(g.hp.n_layer), n_kv)
    ffn_live = 4 * g.T * (2 * g.hp.n_embd + 3 * max(g.sh.F, g.sh.F_moe))
    return pad(max(base, io + ffn_live + copy), CUDA_ALIGNMENT)


def _cpu_buffer(
    g: _Graph,
    layer_dev: Sequence[int],
    placements: Sequence[TensorPlacement],
    op_offload: bool,
) -> int:
    """The CPU backend: every graph input, the embedding rows, and any layers left on the CPU."""
    hp = g.hp
    # repeating-layer weights kept on the CPU by -ot/--cpu-moe run their matmuls there
    # (where a weight sits is its route's: the same for every quant of the model)
    overridden = derived(
        placements,
        ("overridden", tuple(layer_dev), hp.n_layer),
        lambda: any(
            p.device == CPU
            and p.layer is not None
            and p.layer < hp.n_layer
            and layer_dev[p.layer] >= 0
            and is_matmul_name(p.name)
            for p in placements
        ),
        per_plan=True,
    )
    io, _ = g.inputs_for(range(hp.n_layer))
    inputs = io + 2 * g.ET + g.scale_rows
    inter = 2 * g.ET
    cpu_layers = [il for il in range(hp.n_layer) if layer_dev[il] < 0]
    if cpu_layers:
        inter += g.peak(cpu_layers, g.inputs_for(cpu_layers)[1], on_host=True)
    elif overridden and not op_offload:
        inter += 4 * g.T * 2 * max(g.sh.F, g.sh.F_moe)
    if g.host_scores and len(cpu_layers) < hp.n_layer:
        # the offloaded layers' attention runs here: their KQ scores and the output rows
        _, n_kv = g.inputs_for(il for il in range(hp.n_layer) if layer_dev[il] >= 0)
        inter = max(inter, 2 * g.ET + 4 * g.T * (g.sh.H * n_kv + g.sh.Q))
    if layer_dev[hp.n_layer_all] < 0:
        inter = max(inter, 2 * g.ET + g.head)
    return g.copies * inputs + inter


def _cuda_fa_staging(hp: Hparams, r: Resolved, n_kv: int) -> int:
    """CUDA's flash attention converts quantized (or F32) K/V of one layer to F16 first."""
    f16_ok = ("f16", "bf16")
    if r.type_k in f16_ok and r.type_v in f16_ok:
        return 0
    nk = max((hp.n_embd_k_gqa(il) for il in range(hp.n_layer_all)), default=0)
    nv = max((hp.n_embd_v_gqa(il) for il in range(hp.n_layer_all)), default=0)
    return 2 * n_kv * r.n_stream * (nk + nv)

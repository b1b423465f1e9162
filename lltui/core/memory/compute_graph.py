"""Compute buffers from llama.cpp's own graph, scheduler and allocator, where modelled.

``planned_compute_buffers`` builds the worst-case graphs sched_reserve reserves (n_ubatch
tokens against the whole KV cache, then one token per sequence), assigns them to backends
and splits them as ggml's scheduler does (:mod:`.ggml_sched`), plans each backend's buffer
with ggml-alloc's rules (:mod:`.ggml_alloc`) and returns the larger peak per backend, the
sizes llama.cpp logs. Returns None where something is not modelled (the architecture,
embeddings, -sm tensor), so the caller falls back to the calibrated formula. CPU and RPC
(CPU backend) results are exact; CUDA ones follow ggml-cuda's allocation rules but are not
checked against a GPU, so they are marked approximate.

Plans depend on shapes, placement and settings only (weight types only for host weights a
GPU copies under op offload), so they are cached, and runs of identical layers are planned
once they repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.ggml.alloc import plan
from lltui.core.ggml.bufts import CPU_BUFT, CUDA_BUFT
from lltui.core.ggml.graph import HOST, REPACK
from lltui.core.ggml.sched import Backend, schedule
from lltui.core.gguf.types import type_from_name
from lltui.core.memory.arch_table import Recipe, approximate_reason, recipe_of
from lltui.core.memory.common import CPU, KV_PAD, SCHED_MAX_COPIES, backend_of, is_gpu
from lltui.core.memory.context import Resolved
from lltui.core.memory.devices import DeviceSpec, host_buffer
from lltui.core.memory.graph_decoder import (
    DecoderShape,
    LayerShape,
    Ubatch,
    build_decoder_graph,
    used_weights,
)
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.placement import TensorPlacement, derived, tracked


@dataclass(frozen=True, slots=True)
class Backends:
    """The scheduler's backends: the devices, then the CPU; ``n_copies`` > 1 with pipeline
    parallelism. Each device allocates by ggml-cuda's rules (``cuda``) or the CPU's, and
    takes big-batch ops off host weights (``offload``) only where it is a local CUDA device:
    an RPC backend has no offload_op, whatever runs behind it (ggml-rpc.cpp)."""

    cuda: tuple[bool, ...] = ()
    n_copies: int = 1
    op_offload: bool = True
    offload: tuple[bool, ...] | None = None  # None: every CUDA-rules device offloads

    @property
    def n_devices(self) -> int:
        return len(self.cuda)

    def list(self) -> list[Backend]:
        offload = self.offload if self.offload is not None else self.cuda
        devs = [
            Backend(i, CUDA_BUFT if c else CPU_BUFT, offload_op=o)
            for i, (c, o) in enumerate(zip(self.cuda, offload, strict=True))
        ]
        return [*devs, Backend(HOST, CPU_BUFT)]


def graph_reason(hp: Hparams) -> str:
    """Why the graph of this model is not modelled ("" where it is: the formula answers
    otherwise)."""
    why = approximate_reason(hp.arch)
    if why:
        return why
    if any(hp.is_recurrent):
        return f"{hp.arch} with recurrent layers is not modelled"
    if hp.mla and not hp.kv_lora_rank:
        return "MLA without a KV rank is not modelled"
    if (hp.head_k_swa, hp.head_v_swa) != (hp.head_k, hp.head_v) and hp.swa_any:
        return "sliding-window layers with their own head size are not modelled"
    if hp.n_layer_kv_from_start >= 0:
        return "layers sharing another layer's KV cache are not modelled"
    if hp.n_layer <= 0 or any(h <= 0 for h in hp.n_head_kv[: hp.n_layer]):
        return "layers without attention heads are not modelled"
    return ""


def _moved(
    placements: Sequence[TensorPlacement],
    layer_dev: Sequence[int],
    index: dict[str, int],
    repack_apart: bool = False,
) -> tuple[tuple[str, int], ...]:
    """Weights llama.cpp put elsewhere than their layer (-ot, --cpu-moe); with
    ``repack_apart``, repacked host weights too (no GPU takes their ops)."""

    def moved(p: TensorPlacement) -> tuple[str, int] | None:
        if p.layer is None or p.duplicate or p.layer >= len(layer_dev):
            return None
        loc = index.get(p.device, HOST)
        if repack_apart and p.buffer == "CPU_REPACK":
            loc = REPACK
        return (p.name, loc) if loc != layer_dev[p.layer] else None

    # (the moved weights of the last quant of the model, brought up to date)
    key = ("moved", tuple(layer_dev), tuple(index.items()), repack_apart)
    return tuple(sorted(tracked(placements, key, moved)))


@lru_cache(maxsize=64)  # the same for every quant of a model with these settings
def decoder_shape(
    hp: Hparams,
    r: Resolved,
    tensors: frozenset[tuple[str, tuple[int, ...]]],
    layer_dev: tuple[int, ...] = (),
    moved: tuple[tuple[str, int], ...] = (),
    kv_host: bool = False,
) -> DecoderShape:
    """The graph's shape: each layer's weights (as the file has them), heads and windows;
    the architecture's recipe; routing and scales from the hyperparameters; the settings."""
    recipe = recipe_of(hp.arch)
    if recipe is None:
        raise ValueError(f"no recipe for {hp.arch}")
    if recipe.par_res_flag and not hp.parallel_residual:
        recipe = replace(recipe, layout="seq")
    top, per_layer = _split_weights(tensors)
    layers = []
    for il in range(hp.n_layer):
        swa = hp.swa_any and hp.is_swa[il]
        indexer = recipe.dsa and il < len(hp.indexer_layers) and hp.indexer_layers[il]
        weights = per_layer.get(il, ())
        if recipe.dsa and not indexer:
            # a layer sharing an earlier indexer's choice never reads its own indexer
            weights = tuple(w for w in weights if not w[0].startswith("indexer."))
        layers.append(
            LayerShape(
                n_head=hp.n_head[il],
                n_head_kv=hp.n_head_kv[il],
                head_k=hp.head_k_of(il),
                head_v=hp.head_v_of(il),
                weights=weights,
                swa=swa,
                rope=_rope(recipe, hp, il, swa),
                indexer=indexer,
            )
        )
    # the repeating layers' devices, then the output's (MTP layers are not in the graph)
    used = (*layer_dev[: hp.n_layer], layer_dev[-1]) if layer_dev else ()
    devs = tuple(d if d >= 0 else HOST for d in used)
    gating = recipe.gating
    if recipe.gating_from_file and hp.expert_gating:
        gating = hp.expert_gating
    return DecoderShape(
        recipe=recipe,
        n_embd=hp.n_embd,
        n_vocab=hp.n_vocab,
        layers=tuple(layers),
        top=top,
        flash_attn=r.flash_attn,
        type_k=int(type_from_name(r.type_k)),
        type_v=int(type_from_name(r.type_v)),
        kv_size=r.n_ctx_seq,
        n_stream=r.n_stream,
        kv_unified=r.kv_unified,
        kv_size_swa=r.swa_cells if hp.swa_any else 0,
        layer_dev=devs if any(d != HOST for d in devs) else (),
        moved=moved,
        kv_host=kv_host,
        full_offload=r.n_gpu_layers > hp.n_layer_all,
        n_expert_used=hp.n_expert_used,
        gating=gating,
        norm_w=hp.expert_weights_norm if recipe.norm_w is None else recipe.norm_w,
        w_scale=hp.expert_weights_scale not in (0.0, 1.0),
        groups=(hp.n_expert_groups, hp.n_group_used) if hp.n_expert_groups > 1 else (0, 0),
        embd_scale=recipe.scales and (recipe.scales_always or hp.embedding_scale != 0.0),
        residual_scale=recipe.scales and (recipe.scales_always or hp.residual_scale != 0.0),
        logit_scale=recipe.logit_scale and (recipe.scales_always or hp.logit_scale != 0.0),
        softcap=recipe.softcap and hp.final_logit_softcapping != 0.0,
        clamp=recipe.clamp and hp.clamp_kqv > 0.0,
        n_pos=4 if recipe.n_pos == 4 or (recipe.n_pos == "sections" and hp.mrope) else 1,
        attn_scale=recipe.attn_scale_input
        and (hp.attn_temp_scale != 0.0 or recipe.rope == "llama4"),
        mla=_mla(hp) if recipe.mla and hp.mla else (),  # a legacy MHA GGUF: not MLA
        dsa=(hp.indexer_head_size, hp.indexer_n_head, hp.indexer_top_k) if recipe.dsa else (),
    )


@lru_cache(maxsize=16)  # every quant and setting of a model has the same names and shapes
def _split_weights(
    tensors: frozenset[tuple[str, tuple[int, ...]]],
) -> tuple[
    tuple[tuple[str, tuple[int, ...]], ...], dict[int, tuple[tuple[str, tuple[int, ...]], ...]]
]:
    """The weights outside the layers, and each layer's (named without ``blk.N.``)."""
    top = []
    per: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for name, dims in tensors:
        parts = name.split(".", 2)
        if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
            per.setdefault(int(parts[1]), []).append((parts[2], dims))
        else:
            top.append((name, dims))
    return tuple(sorted(top)), {il: tuple(sorted(ws)) for il, ws in per.items()}


def _rope(recipe: Recipe, hp: Hparams, il: int, swa: bool) -> bool:
    """Whether layer ``il`` rotates Q and K."""
    if recipe.rope == "none":
        return False
    if recipe.rope == "swa":
        return swa
    if recipe.rope == "swa_or_all":
        return swa or not hp.swa_any
    if recipe.rope == "n32":
        return hp.n_layer == 32
    if recipe.rope == "step4":
        return (il + 1) % 4 != 0
    if recipe.rope == "llama4":
        step = 4 if hp.swa_any else hp.n_layer
        return (il + 1) % step != 0
    return True


def _mla(hp: Hparams) -> tuple[int, ...]:
    k_mla, v_mla = hp.head_k_mla or hp.head_k, hp.head_v_mla or hp.head_v
    return (hp.kv_lora_rank, hp.q_lora_rank, k_mla, v_mla, hp.n_rot)


def reserve_ubatches(r: Resolved) -> tuple[Ubatch, Ubatch]:
    """sched_reserve's two graphs: the prompt batch and one token per sequence."""
    n_seqs = r.n_seq_max
    n_tokens = min(r.n_ctx, r.n_ubatch)
    n_out = min(n_tokens, r.n_outputs_max)
    if n_tokens % n_seqs:
        n_tokens = (n_tokens + n_seqs - 1) // n_seqs * n_seqs
    return Ubatch(n_tokens, n_seqs, n_out), Ubatch(n_seqs, n_seqs, n_seqs)


# Runs of identical layers (same shape, device and weight placement) leave each allocator in
# the same state after the first few: a model whose runs are cut to PERIODIC_FROM + 1 and to
# PERIODIC_FROM + 2 layers (the last layer, which keeps only the output rows, stays) that
# plans the same stands for any depth. Some come back to a state every second layer (a
# token's graph with host experts: its KiB-sized blocks are reused in turn): cut each run to
# a length of its own parity, two apart, that plan the same stand for it. Otherwise every
# layer is planned.
PERIODIC_FROM = 2


_BY_LAYER: dict[int, tuple[Sequence[tuple[str, int]], dict[int, frozenset[tuple[str, int]]]]] = {}


def _by_layer(entries: Sequence[tuple[str, int]]) -> dict[int, frozenset[tuple[str, int]]]:
    """(name, value) entries of blk.N weights, per layer N, the name without its prefix.
    Remembered by the entries themselves (a shape's moved weights and host weight types,
    the same tuple in every shape of a placement, read for each run cut and renumbered):
    held, so their id names them; not to be changed by the caller."""
    got = _BY_LAYER.get(id(entries))
    if got is not None and got[0] is entries:
        return got[1]
    per: dict[int, set[tuple[str, int]]] = {}
    for name, value in entries:
        parts = name.split(".", 2)
        if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
            per.setdefault(int(parts[1]), set()).add((parts[2], value))
    out = {il: frozenset(v) for il, v in per.items()}
    if len(_BY_LAYER) >= 256:
        _BY_LAYER.clear()
    _BY_LAYER[id(entries)] = (entries, out)
    return out


def _renumbered(
    entries: Sequence[tuple[str, int]], kept: Sequence[int]
) -> tuple[tuple[str, int], ...]:
    per = _by_layer(entries)
    out = [(name, v) for name, v in entries if not name.startswith("blk.")]
    for new, old in enumerate(kept):
        out.extend((f"blk.{new}.{suffix}", v) for suffix, v in per.get(old, ()))
    return tuple(sorted(out))


def shortened(shape: DecoderShape, keep: int, parity: bool = False) -> DecoderShape | None:
    """``shape`` with every run of identical layers cut to ``keep`` layers (``parity``: to
    ``keep`` or ``keep + 1``, as many as the run's length is odd or even); None when no run
    is longer."""
    n = len(shape.layers)
    moves = _by_layer(shape.moved)
    types = _by_layer(shape.weight_types)
    dev = shape.layer_dev or (HOST,) * (n + 1)

    def sig(il: int) -> tuple[object, ...]:
        empty: frozenset[tuple[str, int]] = frozenset()
        return (shape.layers[il], dev[il], moves.get(il, empty), types.get(il, empty))

    sigs = [sig(il) for il in range(n)]  # (each once: a layer is compared with both neighbours)
    starts = [il for il in range(n) if not il or il == n - 1 or sigs[il] != sigs[il - 1]]
    kept: list[int] = []
    for start, end in zip(starts, [*starts[1:], n], strict=True):
        length = end - start
        cut = keep + (length - keep) % 2 if parity and length > keep else keep
        kept.extend(range(start, min(end, start + cut)))
    if len(kept) == n:
        return None
    return replace(
        shape,
        layers=tuple(shape.layers[il] for il in kept),
        layer_dev=(*(dev[il] for il in kept), dev[n]) if shape.layer_dev else (),
        moved=_renumbered(shape.moved, kept),
        weight_types=_renumbered(shape.weight_types, kept),
    )


def plan_every_layer(
    shape: DecoderShape, ub: Ubatch, backends: Backends = Backends()
) -> tuple[int, ...]:
    """Each backend's buffer (devices, then the CPU) for the graph of ``ub``."""
    graph = build_decoder_graph(shape, ub)
    bes = backends.list()
    if backends.n_devices == 0:
        return tuple(plan(graph, [CPU_BUFT]))
    sched = schedule(graph, bes, op_offload=backends.op_offload, n_copies=backends.n_copies)
    return tuple(plan(sched, [b.buft for b in bes]))


@dataclass(frozen=True, slots=True)
class _Fewer:
    """A layer split planned with fewer devices: ``shape`` and ``backends`` keep one
    device of each run of alike middle devices (two, the first beside a different one);
    ``source[i]`` is the kept device whose buffer device ``i`` has."""

    shape: DecoderShape
    backends: Backends
    source: tuple[int, ...]


def fewer_devices(shape: DecoderShape, backends: Backends) -> _Fewer | None:
    """Devices in a row that hold alike layers (same shapes, weights and placement), none of
    them the first or the output's, allocate alike: each backend's buffer holds its own
    nodes and the copies of its split inputs (the previous device's rows, the masks). Such a
    run keeps its first two devices; None where nothing is dropped, where the split is not
    one ggml's scheduler runs device after device (layers back and forth), or where the host
    runs part of each layer (weights moved off their layer's device, -nkvo)."""
    n_dev = backends.n_devices
    dev = shape.layer_dev
    n = len(shape.layers)
    if n_dev < 4 or not dev or shape.moved or shape.kv_host:
        return None  # (the host runs part of every layer: its buffer grows with them)
    order = [d for d in dev[:n] if d != HOST]
    if order != sorted(order) or len(set(order)) < 4:
        return None
    types = _by_layer(shape.weight_types)
    empty: frozenset[tuple[str, int]] = frozenset()
    sigs: dict[int, list[object]] = {}
    for il in range(n):
        sigs.setdefault(dev[il], []).append((shape.layers[il], types.get(il, empty)))
    held = sorted(sigs.keys() - {HOST})
    keep: list[int] = []
    source = list(range(n_dev))
    for i, d in enumerate(held):
        # a middle device (not the first, not the one with the last layer or the output)
        # after two alike ones, the first of which is itself a middle device
        middle = i >= 3 and d not in (dev[n - 1], dev[n])
        if middle and sigs[d] == sigs[held[i - 1]] == sigs[held[i - 2]]:
            source[d] = source[held[i - 1]]
            continue
        keep.append(d)
    if len(keep) == len(held):
        return None
    # devices holding no layer (an empty -ts share) stay, in their place: the scheduler
    # gives the first backends what no weight decides
    dropped = {d for d in held if d not in keep}
    new_index = {d: k for k, d in enumerate(d for d in range(n_dev) if d not in dropped)}
    kept_layers = [il for il in range(n) if dev[il] == HOST or dev[il] in new_index]
    remap = {HOST: HOST, REPACK: REPACK} | new_index
    old_of = sorted(new_index, key=new_index.__getitem__)
    fewer = replace(
        shape,
        layers=tuple(shape.layers[il] for il in kept_layers),
        layer_dev=(*(remap[dev[il]] for il in kept_layers), remap[dev[n]]),
        moved=_renumbered(shape.moved, kept_layers),
        weight_types=_renumbered(shape.weight_types, kept_layers),
    )
    offload = backends.offload if backends.offload is not None else backends.cuda
    fb = replace(
        backends,
        cuda=tuple(backends.cuda[d] for d in old_of),
        offload=tuple(offload[d] for d in old_of),
    )
    src = tuple(new_index[source[d]] for d in range(n_dev))
    return _Fewer(fewer, fb, src)


@lru_cache(maxsize=512)
def plan_layers(shape: DecoderShape, ub: Ubatch, backends: Backends) -> tuple[int, ...]:
    """:func:`plan_every_layer`, with runs of alike middle devices planned once each
    (cached: the shortened graphs of a search's layouts repeat, e.g. one more layer's experts
    on the host leaves a shortened run as it was)."""
    few = fewer_devices(shape, backends)
    if few is None:
        return plan_every_layer(shape, ub, backends)
    sizes = plan_every_layer(few.shape, ub, few.backends)
    return (*(sizes[k] for k in few.source), sizes[-1])


@lru_cache(maxsize=512)
def planned_peak(
    shape: DecoderShape, ub: Ubatch, backends: Backends = Backends()
) -> tuple[int, ...]:
    """Each backend's peak for the graph of ``ub`` (cached; identical layers shortened,
    alike devices planned once)."""
    for step, parity in ((1, False), (2, True)):
        short = shortened(shape, PERIODIC_FROM + 1, parity)
        longer = shortened(shape, PERIODIC_FROM + 1 + step, parity)
        if short is None or longer is None:
            break
        a = plan_layers(short, ub, backends)
        if a == plan_layers(longer, ub, backends):
            return a
    return plan_layers(shape, ub, backends)


def clear_plans() -> None:
    """Forget every cached plan (tests that time or compare a fresh one)."""
    planned_peak.cache_clear()
    plan_layers.cache_clear()


def _host_weight_types(
    placements: Sequence[TensorPlacement], n_layer_all: int
) -> tuple[tuple[str, int], ...]:
    """Types of the layer and output weights in host memory, which op offload copies."""

    def host(p: TensorPlacement) -> tuple[str, int] | None:
        if p.device != CPU or p.layer is None:
            return None
        name = "output.weight" if p.layer == n_layer_all and p.duplicate else p.name
        return name, p.type_id

    return tuple(sorted(tracked(placements, ("host_types", n_layer_all), host)))


# weights the graph reads without allocating anything for them (RoPE frequency factors)
_NO_NODES = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


_UNMODELLED: dict[int, tuple[DecoderShape, tuple[str, ...]]] = {}


def _unmodelled_of(shape: DecoderShape) -> tuple[str, ...]:
    """unmodelled_weights of ``shape`` whatever its placement and context (the cache's size
    shapes tensors, never which weights are read), remembered by the shape itself
    (decoder_shape's, shared by every quant of a model): a shape holding a million weights
    is not hashed again each time. The shape is held, so its id names it."""
    got = _UNMODELLED.get(id(shape))
    if got is not None and got[0] is shape:
        return got[1]
    swa = KV_PAD if shape.kv_size_swa else 0
    missing = unmodelled_weights(
        replace(shape, layer_dev=(), moved=(), kv_size=KV_PAD, kv_size_swa=swa)
    )
    if len(_UNMODELLED) >= 64:
        _UNMODELLED.clear()
    _UNMODELLED[id(shape)] = (shape, missing)
    return missing


@lru_cache(maxsize=64)
def unmodelled_weights(shape: DecoderShape) -> tuple[str, ...]:
    """The weights the modelled graph never reads: a block of the file's the builder does
    not know (its compute then comes from the formula, which says so)."""
    short = shortened(shape, 1) or shape
    used = used_weights(short, Ubatch(1, 1, 1))
    have = {n for n, _ in short.top}
    for il, lay in enumerate(short.layers):
        have.update(f"blk.{il}.{n}" for n, _ in lay.weights)
    missing = {n for n in have - used if not n.endswith(_NO_NODES)}
    if "token_embd.weight" in used:
        missing.discard("output.weight")
    return tuple(sorted({n.split(".", 2)[-1] if n.startswith("blk.") else n for n in missing}))


def _cpu_like(dev: DeviceSpec) -> bool:
    return dev.kind == "rpc" and backend_of(dev) == "cpu"


@dataclass(frozen=True, slots=True)
class ComputeLayout:
    """What sizes the compute buffers: the model's hyperparameters and resolved context, the
    settings, the devices, each layer's device, where every weight went, and whether
    pipeline parallelism is on."""

    hp: Hparams
    r: Resolved
    st: LlamaArgs
    devices: Sequence[DeviceSpec]
    layer_dev: Sequence[int]
    placements: Sequence[TensorPlacement]
    pipeline_parallel: bool
    # the prompt batch's graph alone (a floor of the buffers: each is the larger of two)
    prompt_only: bool = False


@dataclass(frozen=True, slots=True)
class Planned:
    """Compute buffer bytes per backend from the graph; ``exact`` where every backend is
    one whose allocation rules are verified against llama.cpp (the CPU backend, locally or
    behind RPC). CUDA devices are planned with ggml-cuda's rules but its graph optimiser's
    extra lifetimes (fused MoE) are not modelled, so they are not called exact."""

    sizes: dict[str, int]
    exact: bool


CUDA_NOTE = "CUDA's allocation rules are planned, not checked on a GPU"
# an AMD rig's devices: HIP is the CUDA backend's code, its allocation rules the same
ROCM_NOTE = (
    "ROCm's HIP build shares the CUDA backend's allocation rules; they are planned, "
    "not checked on a GPU"
)


def planned_compute_buffers(layout: ComputeLayout) -> Planned | str:
    """Compute buffer per backend from the planned graph; else why not (a line): the
    architecture or a block of the file not modelled, or a file whose shapes make no graph
    llama.cpp could build (the formula answers then)."""
    try:
        return _planned(layout)
    except (ArithmeticError, LookupError, ValueError):
        return f"the file's shapes do not make a graph of {layout.hp.arch} this models"


def _planned(layout: ComputeLayout) -> Planned | str:
    hp, r, st, devices = layout.hp, layout.r, layout.st, layout.devices
    layer_dev, placements, pipeline_parallel = (
        layout.layer_dev,
        layout.placements,
        layout.pipeline_parallel,
    )
    why = graph_reason(hp)
    if why:
        return why
    if st.embedding:
        return "embedding outputs (--embedding) are not modelled"
    if st.split_mode == "tensor":
        return "-sm tensor (each op split over the devices) is not modelled"
    if not all(_cpu_like(d) or is_gpu(d) for d in devices):
        return "a device whose backend is neither CPU, CUDA nor Vulkan"
    # the weights' names and shapes, and where they sit, are the routes' (not the types'):
    # worked out once for every quant of a model; what the types decide, once per estimate
    tensors = derived(
        placements,
        "names_shapes",
        lambda: frozenset((p.name, p.dims) for p in placements if not p.duplicate),
        per_plan=True,
    )
    index = {d.name: i for i, d in enumerate(devices)}
    copies_weights = st.op_offload and any(d.kind == "cuda" for d in devices)
    ldev = tuple(layer_dev)
    moved: tuple[tuple[str, int], ...] = ()
    if devices:
        moved = derived(
            placements,
            ("moved", ldev, tuple(index.items()), copies_weights),
            lambda: _moved(placements, ldev, index, copies_weights),
            per_plan=not copies_weights,  # repacking is the types' choice
        )
    shape = decoder_shape(hp, r, tensors, ldev, moved, kv_host=bool(devices) and not st.kv_offload)
    missing = _unmodelled_of(shape)
    if missing:
        return f"{hp.arch}: {', '.join(missing[:3])} not in the modelled graph"
    if copies_weights:
        host_types = derived(
            placements,
            ("host_types", hp.n_layer_all),
            lambda: _host_weight_types(placements, hp.n_layer_all),
        )
        shape = replace(shape, weight_types=host_types)
    backends = Backends(
        tuple(is_gpu(d) for d in devices),
        SCHED_MAX_COPIES if pipeline_parallel else 1,
        st.op_offload,
        tuple(d.kind == "cuda" for d in devices),
    )
    pp, tg = reserve_ubatches(r)
    pp_sizes = planned_peak(shape, pp, backends)
    tg_sizes = pp_sizes if layout.prompt_only else planned_peak(shape, tg, backends)
    sizes = [max(a, b) for a, b in zip(pp_sizes, tg_sizes, strict=True)]
    out = {d.name: size for d, size in zip(devices, sizes, strict=False) if size > 1}
    # the CPU backend allocates in the first device's host buffer type (CUDA_Host for CUDA)
    host = host_buffer(devices) or CPU
    out[host] = sizes[-1]
    return Planned(out, all(_cpu_like(d) for d in devices))

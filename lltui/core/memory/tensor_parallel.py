"""-sm tensor: llama.cpp's tensor parallelism. One "Meta()" device stands for the devices it
splits over; each weight and KV cache tensor on it is cut along one axis into a slice per
device, or mirrored whole on each (src/llama-model.cpp llama_meta_device_get_split_state).
A Meta buffer's logged size is the largest of its devices' buffers
(ggml-backend-meta.cpp ggml_backend_meta_buffer_type_alloc_buffer_n)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.gguf.model import GgufModel
from lltui.core.gguf.types import GGML_TYPES, tensor_nbytes, type_from_name
from lltui.core.llama.builds import NEWEST, BuildRules
from lltui.core.memory.common import CPU, backend_of, device_alloc_size, f32, tensor_kv_refused
from lltui.core.memory.context import Resolved
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.kv import KvCache
from lltui.core.memory.placement import TensorPlacement

META = "Meta()"  # the Meta device's name (and its buffers') in llama.cpp's log

# llm_arch_supports_sm_tensor (src/llama-arch.cpp): llama_model_create refuses these
UNSUPPORTED_ARCHS = frozenset(
    {
        "grok",
        "mpt",
        "plamo2",
        "minicpm3",
        "gemma3n",
        "mamba",
        "mamba2",
        "jamba",
        "falcon-h1",
        "olmo2",
        "olmoe",
        "deepseek2",
        "deepseek32",
        "hy_v4",
        "dots3note",
        "glm-dsa",
        "bitnet",
        "t5",
        "nemotron_h",
        "nemotron_h_moe",
        "granitehybrid",
        "minimax-01",
        "minimax-m2",
        "minimax-m3",
        "mistral4",
        "kimi-linear",
        "bailingmoe3",
        "kimi-k3",
        "glm5-next",
        "qwen3tts",
    }
)
# architectures with rules of their own (fused Q gates, DeepSeek-V4's grouped output) that
# are not ported: estimated as a layer split
_OWN_RULES = frozenset(
    {"qwen3next", "qwen35", "qwen35moe", "clef", "qwen4exp", "deepseek4", "dflash"}
)

MIRRORED = -1  # every device holds the whole tensor (also ggml's PARTIAL: whole, summed)


def supports_sm_tensor(arch: str) -> bool:
    return arch not in UNSUPPORTED_ARCHS


def sm_tensor_refused(hp: Hparams, args: LlamaArgs, rules: BuildRules = NEWEST) -> str:
    """Why llama.cpp refuses to load this model with -sm tensor and these settings ("": it
    loads): an architecture it does not split, a quantized K/V cache (builds before
    b9455, llama_init_from_model), flash attention turned off."""
    if not supports_sm_tensor(hp.arch):
        return f"llama.cpp does not implement -sm tensor for {hp.arch}"
    refused = tensor_kv_refused(args.type_k, args.type_v, rules)
    if refused:
        return refused
    if args.flash_attn == "off" and "flash_attn" in args.given:
        return "llama.cpp refuses -sm tensor with -fa off"
    return ""


def not_modelled(hp: Hparams) -> str | None:
    """Why the split of this model's tensors is not ported (None: it is)."""
    if hp.arch in _OWN_RULES:
        return f"{hp.arch} splits its fused attention tensors by rules of its own"
    if any(hp.is_recurrent[: hp.n_layer]):
        return "recurrent layers split by rules not ported"
    return None


def _re(p: str) -> re.Pattern[str]:
    return re.compile(p)


# the patterns as llama.cpp writes them (an unescaped dot matches any character)
_Q_W = _re(r"blk\.\d*\.attn_q.weight")
_KV_W = _re(r"blk\.\d*\.attn_(k|v).weight")
_QKV_W = _re(r"blk\.\d*\.attn_qkv.weight")
_Q_B = _re(r"blk\.\d*\.attn_q\.bias")
_KV_B = _re(r"blk\.\d*\.attn_(k|v)\.bias")
_QKV_B = _re(r"blk\.\d*\.attn_qkv.bias")
_QK_NORM = _re(r"blk\.\d*\.attn_(q|k)_norm\.weight")
_KV_CACHE = _re(r"cache_(k|v)_l\d*")
_IDX_CACHE = _re(r"cache_idx_(k|v)_l\d*")
_SINKS = _re(r"blk\.\d*\.attn_sinks.weight")
_OUT_W = _re(r"blk\.\d*\.attn_output.weight")
_OUT_B = _re(r"blk\.\d*\.attn_output.bias")
_GATE_W = _re(r"blk\.\d*\.attn_gate.weight")
_FFN_UP_W = _re(r"blk\.\d*\.ffn_up(_exps)?.weight")
_FFN_UP_B = _re(r"blk\.\d*\.ffn_up(_exps)?.bias")
_FFN_GATE_W = _re(r"blk\.\d*\.ffn_gate(_exps)?.weight")
_FFN_GATE_B = _re(r"blk\.\d*\.ffn_gate(_exps)?.bias")
_FFN_GATE_UP_W = _re(r"blk\.\d*\.ffn_gate_up(_exps)?.weight")
_FFN_DOWN_W = _re(r"blk\.\d*\.ffn_down(_exps)?.weight")
_OUTPUT_W = _re(r"output\.weight")
_OUTPUT_B = _re(r"output\.bias")
_ATTN_OUT = ("attn_output.weight", "ssm_out.weight")
_FFN_DOWN = ("ffn_down.weight", "ffn_down_exps.weight")


def _m(p: re.Pattern[str], name: str) -> bool:
    return p.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class SplitState:
    """How one tensor is cut: along ``axis`` (MIRRORED: whole on every device), segment by
    segment (fused tensors), ``ne[segment][device]`` elements of each, ``nr`` times over."""

    axis: int
    ne: tuple[tuple[int, ...], ...] = ()
    nr: tuple[int, ...] = ()

    def elements(self, device: int) -> int:
        """The length of the split axis on ``device``."""
        return sum(ne[device] * nr for ne, nr in zip(self.ne, self.nr, strict=True))


def _config(name: str, dims: Sequence[int]) -> tuple[int, str | tuple[str, ...]]:
    """(axis, the tensor whose type sets the block size: "" for itself, else the layer's
    tensor names to try); get_tensor_config's generic part."""
    if _m(_IDX_CACHE, name) or name.startswith("cache_ple_r_l"):
        return MIRRORED, ""
    if _m(_Q_W, name) or _m(_KV_W, name) or _m(_QKV_W, name) or _m(_GATE_W, name):
        return 1, _ATTN_OUT
    if _m(_Q_B, name) or _m(_KV_B, name) or _m(_QKV_B, name):
        return 0, _ATTN_OUT
    if _m(_QK_NORM, name):
        ne1 = dims[1] if len(dims) > 1 else 1
        return (MIRRORED if ne1 == 1 else 1), ("attn_output.weight",)
    if _m(_KV_CACHE, name) or _m(_SINKS, name):
        return 0, ("attn_output.weight",)
    if _m(_OUT_W, name):
        return 0, ""
    if _m(_OUT_B, name):
        return MIRRORED, ""
    if _m(_FFN_UP_W, name) or _m(_FFN_GATE_W, name) or _m(_FFN_GATE_UP_W, name):
        return 1, _FFN_DOWN
    if _m(_FFN_UP_B, name) or _m(_FFN_GATE_B, name):
        return 0, _FFN_DOWN
    if _m(_FFN_DOWN_W, name):
        return 0, _FFN_DOWN
    if _m(_OUTPUT_W, name):
        return 1, ""
    if _m(_OUTPUT_B, name):
        return 0, ""
    return MIRRORED, ""  # norms, routers, shared experts, embeddings, ffn_down_exps.bias ...


def _layer(name: str) -> int | None:
    if name.startswith("blk."):
        return int(name[4 : name.index(".", 4)])
    if name.startswith("cache_"):
        return int(name[name.index("_l", 6) + 2 :])
    return None


def _segments(name: str, ne_axis: int, hp: Hparams, il: int) -> list[tuple[int, int]]:
    """get_split_segments: fused QKV and up+gate tensors are cut part by part."""
    if _m(_QKV_W, name) or _m(_QKV_B, name):
        n_q = hp.n_head[il] * hp.head_k_of(il)
        n_k, n_v = hp.n_embd_k_gqa(il), hp.n_embd_v_gqa(il)
        if ne_axis != n_q + n_k + n_v:
            raise ValueError(f"{name}: fused QKV of an unexpected width")
        return [(n_q, 1), (n_k, 2)] if n_k == n_v else [(n_q, 1), (n_k, 1), (n_v, 1)]
    if _m(_FFN_UP_W, name) or _m(_FFN_UP_B, name):
        n_ff = hp.n_ff[il]
        return [(n_ff, 2)] if ne_axis == 2 * n_ff else [(ne_axis, 1)]
    if _m(_FFN_GATE_UP_W, name):
        return [(hp.n_ff_exp, 2)]
    return [(ne_axis, 1)]


def _granularity(
    name: str, dims: Sequence[int], blck: int, hp: Hparams, il: int, n_dev: int, n_seg: int
) -> list[int]:
    """get_split_granularity for attention layers: whole Q groups per device, quant blocks
    of the FFN rounded up to 128."""
    n_head_kv = hp.n_head_kv[il] if il < len(hp.n_head_kv) else 0
    n_gqa = hp.n_head[il] // n_head_kv if n_head_kv else 0
    head_k, head_v = hp.head_k_of(il), hp.head_v_of(il)
    n_embd_q = n_gqa * head_k
    perf = blck
    while perf < 128 and perf * n_dev < n_embd_q:
        perf *= 2
    g_q = math.lcm(n_embd_q, perf)
    g_head = g_q // head_k if head_k else 0
    if _m(_SINKS, name):
        return [g_head]
    if _m(_Q_W, name) or _m(_Q_B, name):
        return [g_q]
    if _m(_OUT_W, name):
        return [g_head * head_v]
    if _m(_GATE_W, name):
        ne1 = dims[1] if len(dims) > 1 else 1
        return [g_head if ne1 == hp.n_head[il] else g_q]
    g_kv = g_q // n_gqa if n_gqa else 0
    g_v = (g_kv // head_k) * head_v if head_k else 0
    if _m(_KV_W, name) or _m(_KV_B, name) or _m(_KV_CACHE, name):
        is_v = "attn_v" in name or "cache_v" in name
        return [g_v if is_v else g_kv]
    if _m(_QKV_W, name) or _m(_QKV_B, name):
        return [g_q, g_kv, g_v] if n_seg == 3 else [g_q, g_kv]
    if (
        _m(_FFN_UP_W, name)
        or _m(_FFN_UP_B, name)
        or _m(_FFN_GATE_W, name)
        or _m(_FFN_GATE_B, name)
        or _m(_FFN_GATE_UP_W, name)
        or _m(_FFN_DOWN_W, name)
    ):
        return [math.lcm(blck, 128)]
    return [1] * n_seg


def _rotation(hp: Hparams, il: int | None, n_dev: int) -> int:
    """Which device takes the rounding first: layers of the same kind (recurrent, SWA) take
    turns; tensors outside the layers go by the layer count."""
    if il is None:
        return hp.n_layer % n_dev
    kind = (hp.is_recurrent[il], hp.is_swa[il])
    return sum((hp.is_recurrent[i], hp.is_swa[i]) == kind for i in range(il)) % n_dev


def split_state(
    name: str,
    dims: Sequence[int],
    hp: Hparams,
    types: Mapping[str, int],
    n_dev: int,
    tensor_split: Sequence[float] = (),
) -> SplitState:
    """llama_meta_device_get_split_state for one tensor (weights by their GGUF name, KV
    caches as ``cache_k_l{il}``/``cache_v_l{il}`` with ggml dims); ``types``: the model's
    tensor types by name (the block size of the tensor a split follows)."""
    if hp.arch == "hrm_text":
        return SplitState(MIRRORED)
    axis, follow = _config(name, dims)
    if axis == MIRRORED:
        return SplitState(MIRRORED)
    il = _layer(name)
    if isinstance(follow, str):
        t_type = types[name] if not follow else types[follow]
    else:
        prefix = f"blk.{il}."
        found = next((types[prefix + f] for f in follow if prefix + f in types), None)
        if found is None:
            raise ValueError(f"{name}: no {follow[0]} to split along")
        t_type = found
    blck = GGML_TYPES[t_type].block_size
    ts = [f32(x) for x in tensor_split[:n_dev]] + [0.0] * max(0, n_dev - len(tensor_split))
    rot = _rotation(hp, il, n_dev)
    scan: list[float] = []
    for j in range(n_dev):
        v = ts[(j + rot) % n_dev]
        scan.append(f32(scan[-1] + v) if scan else v)
    il_g = il if il is not None else 0
    segments = _segments(name, dims[axis], hp, il_g)
    gran = _granularity(name, dims, blck, hp, il_g, n_dev, len(segments))
    nes: list[tuple[int, ...]] = []
    for (ne_s, _nr), g in zip(segments, gran, strict=True):
        per = [0] * n_dev
        low = 0
        for j in range(n_dev - 1):
            if scan[-1] == 0.0:
                high = ne_s * (j + 1) // n_dev
            else:
                high = int(f32(f32(f32(float(ne_s)) * scan[j]) / scan[-1]))
            if g and high % g:
                high -= high % g
            per[(j + rot) % n_dev] = high - low
            low = high
        per[(n_dev - 1 + rot) % n_dev] = ne_s - low
        nes.append(tuple(per))
    return SplitState(axis, tuple(nes), tuple(nr for _, nr in segments))


def slice_dims(dims: Sequence[int], state: SplitState, device: int) -> tuple[int, ...]:
    """The dims of ``device``'s slice (the whole tensor where mirrored)."""
    if state.axis == MIRRORED:
        return tuple(dims)
    out = list(dims)
    out[state.axis] = state.elements(device)
    return tuple(out)


def fold_meta(
    buffers: Sequence[tuple[str, str, int]], meta_devices: Sequence[str]
) -> list[tuple[str, str, int]]:
    """The buffers as llama.cpp logs them: the Meta device's per-device buffers of a kind
    become one ``Meta()`` buffer, the largest of them."""
    if not meta_devices:
        return list(buffers)
    inside = set(meta_devices)
    out: list[tuple[str, str, int]] = []
    meta: dict[str, int] = {}
    per: dict[tuple[str, str], int] = {}
    for name, kind, nbytes in buffers:
        if name in inside:
            per[(name, kind)] = per.get((name, kind), 0) + nbytes
        else:
            out.append((name, kind, nbytes))
    for (_name, kind), nbytes in per.items():
        meta[kind] = max(meta.get(kind, 0), nbytes)
    return [*((META, k, b) for k, b in meta.items()), *out]


# ggml_backend_meta_graph_compute allocates buffers of its own on each device (the slices
# exchanged by the all-reduces) at the first decode; sched_reserve does not log them
META_SCRATCH_NOTE = (
    "the meta backend's scratch buffers for its all-reduces (allocated at the first decode, "
    "not logged) are not counted"
)


def tensor_parallel_why_not(hp: Hparams, devices: Sequence[DeviceSpec]) -> str | None:
    """Why -sm tensor is not estimated per device here (None: it is)."""
    if not supports_sm_tensor(hp.arch):
        return f"llama.cpp does not implement it for {hp.arch} and refuses to load the model"
    if not devices:
        return "no device to split over"
    return not_modelled(hp)


def tensor_parallel_devices(
    hp: Hparams, st: LlamaArgs, devices: Sequence[DeviceSpec]
) -> tuple[DeviceSpec, ...]:
    """The devices behind the Meta device when -sm tensor is estimated per device."""
    if st.split_mode != "tensor" or tensor_parallel_why_not(hp, devices):
        return ()
    return tuple(devices)


@dataclass(slots=True)
class _Memo:
    """What split_over_meta works out once per model: its tensor types by name, and each
    weight's slices per split (n devices, -ts, their backends)."""

    model: GgufModel
    hp: Hparams
    types: dict[str, int]
    slices: dict[tuple[object, ...], dict[tuple[object, ...], tuple[int, ...]]]


_MEMO: list[_Memo] = []  # the last model's (held: its identity names it)


def _memo_of(model: GgufModel, hp: Hparams) -> _Memo:
    if _MEMO and _MEMO[0].model is model and _MEMO[0].hp is hp:
        return _MEMO[0]
    memo = _Memo(model, hp, {t.name: t.type for t in model.tensors}, {})
    _MEMO[:] = [memo]
    return memo


def split_over_meta(
    model: GgufModel,
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    meta: Sequence[DeviceSpec],
    buffers: Sequence[tuple[str, str, int]],
    kv: Sequence[KvCache],
    placements: Sequence[TensorPlacement],
    layer_dev: Sequence[int],
) -> tuple[list[tuple[str, str, int]], tuple[KvCache, ...]]:
    """The buffers of an estimate made on ``meta[0]`` alone, cut per device: each weight and
    KV cache tensor by its split state, padded as each device's buffer pads it; the compute
    buffer whole on every device (the meta buffer type allocates the size on each)."""
    first = meta[0].name
    n = len(meta)
    ts = tuple(st.tensor_split)
    memo = _memo_of(model, hp)
    types = memo.types
    # each weight's slices hang on its name, shape, type and bytes, the split and the
    # devices' backends alone: worked out once for every estimate of the model
    slices = memo.slices.setdefault((n, ts, tuple(backend_of(d) for d in meta)), {})
    weights = [0] * n
    for p in placements:
        if p.device != first:
            continue
        key = (p.name, p.dims, p.type_id, p.nbytes)
        sizes = slices.get(key)
        if sizes is None:
            state = split_state(p.name, p.dims, hp, types, n, ts)
            made = []
            for j, d in enumerate(meta):
                sd = slice_dims(p.dims, state, j)
                nb = p.nbytes if state.axis == MIRRORED else tensor_nbytes(p.type_id, sd)
                made.append(device_alloc_size(d, p.type_id, sd, nb))
            sizes = slices[key] = tuple(made)
        for j, size in enumerate(sizes):
            weights[j] += size
    new_kv = tuple(_split_cache(c, hp, r, st, meta, types, ts, layer_dev, slices) for c in kv)
    out: list[tuple[str, str, int]] = []
    for name, kind, nbytes in buffers:
        if kind == "KV":
            continue
        if name != first:
            out.append((name, kind, nbytes))
        elif kind == "model":
            out.extend((d.name, kind, weights[j]) for j, d in enumerate(meta))
        else:  # compute (and anything else): whole on each device
            out.extend((d.name, kind, nbytes) for d in meta)
    for cache in new_kv:
        out.extend((name, "KV", nbytes) for name, nbytes in cache.buffers)
    return out, new_kv


def _split_cache(
    cache: KvCache,
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    meta: Sequence[DeviceSpec],
    types: Mapping[str, int],
    ts: Sequence[float],
    layer_dev: Sequence[int],
    memo: dict[tuple[object, ...], tuple[int, ...]] | None = None,
) -> KvCache:
    """One KV cache's buffers per device: ``cache_k_l{il}`` and ``cache_v_l{il}`` are cut
    along the heads (axis 0), whole Q groups per device."""
    n = len(meta)
    per = [0] * n
    cell = [0] * n  # bytes one cell takes on each device
    host = host_cell = 0
    tk, tv = type_from_name(r.type_k), type_from_name(r.type_v)
    for il in cache.layers:
        on_meta = st.kv_offload and layer_dev[il] >= 0
        if cache.indexer:
            parts = [("cache_idx_k", tk, hp.indexer_head_size)]
        else:
            parts = [("cache_k", tk, hp.n_embd_k_gqa(il))]
            if not hp.mla or r.mla_v_cache:
                parts.append(("cache_v", tv, hp.n_embd_v_gqa(il)))
        for prefix, t, ne0 in parts:
            dims = (ne0, cache.cells, r.n_stream)
            if not on_meta:
                host += device_alloc_size(None, t, dims, tensor_nbytes(t, dims))
                host_cell += tensor_nbytes(t, (ne0, 1, 1))
                continue
            # (each device's bytes, then its bytes per cell; ``memo``: split_over_meta's)
            key = (prefix, il, t, dims)
            sizes = memo.get(key) if memo is not None else None
            if sizes is None:
                state = split_state(f"{prefix}_l{il}", dims, hp, types, n, ts)
                made = [0] * (2 * n)
                for j, d in enumerate(meta):
                    sd = slice_dims(dims, state, j)
                    made[j] = device_alloc_size(d, t, sd, tensor_nbytes(t, sd))
                    made[n + j] = tensor_nbytes(t, (sd[0], 1, 1))
                sizes = tuple(made)
                if memo is not None:
                    memo[key] = sizes
            for j in range(n):
                per[j] += sizes[j]
                cell[j] += sizes[n + j]
    bufs = [(d.name, per[j]) for j, d in enumerate(meta) if any(per)]
    cells = [(d.name, cell[j]) for j, d in enumerate(meta) if any(per)]
    if host:
        bufs.append((CPU, host))
        cells.append((CPU, host_cell))
    return replace(cache, buffers=tuple(bufs), cell_bytes=tuple(cells))

"""What each device does for one token (decode) and one ubatch (prompt processing), summed
from where the placement put every weight and KV cell: bytes read, matmul work by weight
kind, attention work, and the layers and hops it takes part in. Pure bookkeeping; the
costs are in :mod:`.model`.

Rules from llama.cpp (the pinned tree):
- decode reads every weight of a layer once per token, of an expert stack only the
  ``n_expert_used / n_expert`` share, of the input embeddings one row;
- a prompt's ubatch streams each weight once; an expert stack only the experts its tokens
  picked (:func:`experts_touched`), and each expert's matmul sees only ``ub x used / n``
  tokens, too few to fill the tiles;
- only the last token of a prompt needs logits: the output matrix is no prompt work;
- a token's attention reads the KV cells up to the depth: with flash attention once, without
  it once per query head (the KQ and KQV products broadcast each K/V head);
- attention runs on the layer's device. With ``-nkvo`` the KV cache is in host memory:
  without flash attention llama.cpp pins the attention output to the CPU backend, so the
  whole attention runs there; with flash attention nothing is pinned, the scheduler gives
  the attention op to the layer's GPU and copies the K and V views it reads (every cell up
  to the depth) from host memory over the link, every token and every ubatch;
- weights kept on the host for a layer that runs on a GPU (``--n-cpu-moe``, ``-ot``) are
  worked on by the CPU for a token; for a ubatch of 32 or more tokens they are copied to
  the first GPU and worked on there (ggml's op offload), only the experts used.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import compress
from operator import is_not
from typing import TYPE_CHECKING

from lltui.core.gguf.types import type_info
from lltui.core.memory.common import CPU
from lltui.core.memory.placement import Placements, TensorPlacement

if TYPE_CHECKING:
    from lltui.core.gguf.model import GgufModel
    from lltui.core.memory.results import FitResult

OFFLOAD_MIN_BATCH = 32  # llama.cpp copies host weights to the GPU for batches this big
ACT_BYTES = 4  # f32 activations
CPU_FA_TILE_Q = 64  # GGML_FA_TILE_Q: the fewest tokens ggml's CPU flash attention tiles


def weight_class(type_id: int) -> str:
    """How the CPU backend treats a weight type: 4-bit simple blocks, 8-bit, k- and i-quants,
    or floats (F16/BF16/F32, run on the float units)."""
    info = type_info(type_id)
    if not info.quantized:
        return "float"
    name = info.name.lower()
    if name.startswith(("q4_0", "q4_1", "iq4_nl", "mxfp4", "q5_0", "q5_1")):
        return "q4"
    if name.startswith("q8"):
        return "q8"
    return "k"


@dataclass
class Part:
    """One device's share of a token and of a ubatch (a scratch total, filled in place)."""

    decode_bytes: float = 0.0  # weights and KV read per token
    decode_read_s_bytes: float = 0.0  # weights over the quant's read factor (GPU decode)
    decode_flops: float = 0.0  # matmul work per token
    decode_kv_bytes: float = 0.0  # the KV cells a GPU reads (per query head without -fa)
    decode_elems: dict[str, float] = field(default_factory=dict)  # by weight class
    prefill_bytes: float = 0.0  # weights streamed once per ubatch
    # of prefill_bytes, those in page-locked host memory (the rest a GPU copies at the
    # pageable rate: mapped files, plain host buffers)
    prefill_pinned_bytes: float = 0.0
    prefill_flops: dict[str, float] = field(default_factory=dict)  # by class, raw
    # GPU: tile- and quant-adjusted flops on MMQ (int8) and on cuBLAS (f16)
    prefill_mmq_flops: float = 0.0
    prefill_int8_flops: float = 0.0  # tile-adjusted, quant factor not applied (Volta)
    prefill_f16_flops: float = 0.0
    attn_decode_flops: float = 0.0
    # cells times query heads a token's attention visits (the CPU's work per cell is more
    # than its flops: see host_times), and a ubatch's: on ggml's tiled path, or on its
    # cell-by-cell one (a quantized K/V cache, a ubatch under a tile); the K and V elements
    # of a cell and head
    attn_decode_cells: float = 0.0
    attn_cells: float = 0.0
    attn_cells_by_cell: float = 0.0
    attn_cell_elems: int = 0
    attn_flops: float = 0.0  # prompt attention, per ubatch
    attn_kv_bytes: float = 0.0  # the KV one pass over the cells reads, per ubatch
    attn_score_bytes: float = 0.0  # without flash attention: KQ scores written and read
    act_bytes: float = 0.0
    layers: int = 0  # layers it runs (their small kernels, barriers)
    moe_layers: int = 0
    split_layers: int = 0  # layers it runs whose weights are partly on the host
    # -nkvo with flash attention: the KV cells its attention copies from host memory, per
    # token and per ubatch, and the layers that copy (each a graph split)
    kv_host_bytes: float = 0.0
    kv_host_prefill_bytes: float = 0.0
    kv_host_layers: int = 0

    def add_flops(self, kind: str, flops: float) -> None:
        self.prefill_flops[kind] = self.prefill_flops.get(kind, 0.0) + flops


@lru_cache(maxsize=16384)  # keyed by shape, not name: a million names share a few shapes
def _tensor_facts(
    type_id: int, dims: tuple[int, ...], is_input: bool, experts: bool
) -> tuple[int, int, int]:
    """(elements, rows read per token, kind) of one weight. Kind: 0 an input table (one row
    read per token), 1 a matrix, 2 an expert stack, 3 a vector; plus 4 when quantized."""
    n = 1
    for d in dims:
        n *= d
    if is_input:
        return n, max(1, dims[1]) if len(dims) > 1 else 1, 0
    base = 3 if len(dims) < 2 else 2 if experts else 1
    return n, 1, base | (4 if type_info(type_id).quantized else 0)


@dataclass(frozen=True, slots=True)
class Tiles:
    """How full MMQ's tiles run for a ubatch: tokens / (tokens + tile_tokens) per matrix."""

    ub: int
    tile_tokens: float
    mmvq_max: int

    def fill(self, tokens: float) -> float:
        if self.ub <= self.mmvq_max:
            return 1.0  # MMVQ: no tiles, the weights read once (costed as memory)
        return tokens / (tokens + self.tile_tokens)


def _quant_factors(
    type_id: int, slowdown: tuple[tuple[str, float, float], ...]
) -> tuple[float, float]:
    """(decode, MMQ) speed of a weight type relative to the simple block types."""
    tag = type_info(type_id).name.lower()
    return next(((d, p) for part, d, p in slowdown if part in tag), (1.0, 1.0))


# (device, kind, type, output layer, in pinned host memory)
WeightKey = tuple[str, int, int, bool, bool]
PINNED_SUFFIX = "_Host"  # CUDA_Host: page-locked host memory a GPU copies from at full rate


def _weight_fact(
    p: TensorPlacement, layer_dev: Sequence[str], names: Container[str]
) -> tuple[WeightKey, int, int, int, int | None] | None:
    """A placed weight's key, bytes, rows and elements, and the GPU layer it leaves a part
    of on the host; None for a copy or a weight of no tensor of the model."""
    if p.duplicate or p.name not in names:
        return None
    n_el, rows, wkind = _tensor_facts(p.type_id, p.dims, p.layer is None, "_exps" in p.name)
    layer = p.layer
    out_layer = len(layer_dev) - 1
    gpu_layer = layer is not None and 0 <= layer < out_layer and layer_dev[layer] != CPU
    split = layer if p.device == CPU and gpu_layer else None
    pinned = p.buffer.endswith(PINNED_SUFFIX)
    key = (p.device, wkind, p.type_id, p.layer == out_layer, pinned)
    return key, p.nbytes, rows, n_el, split


def _weight_sums(
    placements: Sequence[TensorPlacement], layer_dev: Sequence[str], names: Container[str]
) -> tuple[dict[WeightKey, list[float]], set[int]]:
    """Bytes per row read and elements, summed by (device, kind, type, output) in the order
    the keys first come; the GPU layers with weights on the host."""
    split_layers: set[int] = set()
    sums: dict[WeightKey, list[float]] = {}
    for p in placements:
        fact = _weight_fact(p, layer_dev, names)
        if fact is None:
            continue
        key, nbytes, rows, n_el, split = fact
        if split is not None:
            split_layers.add(split)
        got = sums.get(key)
        if got is None:
            sums[key] = [nbytes / rows, float(n_el)]
        else:
            got[0] += nbytes / rows
            got[1] += n_el
    return sums, split_layers


_EXACT = 2**53  # integers up to here add up exactly as floats


class _WeightSums:
    """_weight_sums kept up to date from one set of placements of a model's routes to the
    next: the weights whose placement changed (another type) are taken out and put in again.
    Sums of whole numbers below 2**53 are the same in any order, so the floats come out as
    one pass makes them; placements with a fraction of a byte per row are summed afresh."""

    def __init__(self, layer_dev: Sequence[str], names: Container[str]) -> None:
        self.layer_dev = layer_dev
        self.names = names
        self._reset(())

    def _reset(self, placements: tuple[TensorPlacement, ...]) -> None:
        self.last = placements
        self.facts: list[tuple[WeightKey, int, int, int, int | None] | None] = []
        self.bytes: dict[WeightKey, int] = {}
        self.elems: dict[WeightKey, int] = {}
        self.splits: dict[int, int] = {}
        self.exact = True

    def _add(self, fact: tuple[WeightKey, int, int, int, int | None] | None, sign: int) -> None:
        if fact is None:
            return
        key, nbytes, rows, n_el, split = fact
        if nbytes % rows:
            self.exact = False
        self.bytes[key] = self.bytes.get(key, 0) + sign * (nbytes // rows)
        self.elems[key] = self.elems.get(key, 0) + sign * n_el
        if split is not None:
            self.splits[split] = self.splits.get(split, 0) + sign

    def sums(
        self, placements: tuple[TensorPlacement, ...]
    ) -> tuple[dict[WeightKey, list[float]], set[int]] | None:
        changed: Iterable[int]
        if len(placements) != len(self.last):
            self._reset(())
            changed = range(len(placements))
            self.facts = [None] * len(placements)
        else:
            changed = list(compress(range(len(placements)), map(is_not, placements, self.last)))
        for i in changed:
            self._add(self.facts[i], -1)
            fact = self.facts[i] = _weight_fact(placements[i], self.layer_dev, self.names)
            self._add(fact, 1)
        self.last = tuple(placements)  # (its weights alone: see placement.tracked)
        total = sum(self.bytes.values()) + sum(self.elems.values())
        if not self.exact or total >= _EXACT:
            return None
        order = dict.fromkeys(f[0] for f in self.facts if f is not None)
        sums = {k: [float(self.bytes[k]), float(self.elems[k])] for k in order}
        return sums, {layer for layer, n in self.splits.items() if n}


def experts_touched(n_expert: int, n_used: int, tokens: int, skew: float) -> float:
    """The share of a layer's experts a ubatch of ``tokens`` routes to. Real text does not
    spread evenly: a long batch reaches about ``skew`` of them (llama.cpp's own log of
    gpt-oss-120b at 512 tokens: 72 to 95 of 128 per layer), as if the layer had that share
    of experts, each picked evenly."""
    if not n_expert or not n_used:
        return 1.0
    reach = max(float(n_used), n_expert * skew)
    return reach / n_expert * (1.0 - (1.0 - n_used / reach) ** tokens)


def add_weights(
    model: GgufModel,
    result: FitResult,
    tiles: Tiles,
    slowdown: tuple[tuple[str, float, float], ...],
    parts: dict[str, Part],
    skew: float = 1.0,
) -> set[int]:
    """Add every placed weight to its device's part; the GPU layers with weights on the host.
    ``skew``: the share of its experts a long batch reaches (:func:`experts_touched`)."""
    m = result.model
    ub = tiles.ub
    tensors = model.tensors_by_name
    moe = bool(m.n_expert and m.n_expert_used)
    expert_frac = m.n_expert_used / m.n_expert if moe else 1.0
    touched = experts_touched(m.n_expert, m.n_expert_used, ub, skew) if moe else 1.0
    expert_fill = tiles.fill(ub * expert_frac)
    dense_fill = tiles.fill(ub)
    layer_dev = result.layer_devices
    placements = result.placements
    summed = None
    if isinstance(placements, Placements):
        # the quants of a model place most weights alike: from the second placement of the
        # same routes on, only the weights placed otherwise than the last time are redone
        memo, key = placements.plan.memo, ("weight_sums", layer_dev, model.shapes)
        state = memo.get(key)
        if isinstance(state, _WeightSums):
            summed = state.sums(placements)
        else:
            memo[key] = _WeightSums(layer_dev, tensors.keys()) if state else True
    if summed is None:
        summed = _weight_sums(placements, layer_dev, tensors.keys())
    sums, split_layers = summed
    for (dev, wkind, type_id, is_output, pinned), (nbytes, elements) in sums.items():
        acc = parts.get(dev) or parts.setdefault(dev, Part())
        dec, mmq = _quant_factors(type_id, slowdown)
        base = wkind & 3
        frac = expert_frac if base == 2 else 1.0
        acc.decode_bytes += nbytes * frac
        acc.decode_read_s_bytes += nbytes * frac / dec
        if base in (0, 3):  # input rows and vectors: read, no matmul
            continue
        kind = weight_class(type_id)
        acc.decode_flops += 2.0 * elements * frac
        acc.decode_elems[kind] = acc.decode_elems.get(kind, 0.0) + elements * frac
        if is_output:
            continue  # a prompt needs the logits of its last token only
        streamed = nbytes * (touched if base == 2 else 1.0)
        acc.prefill_bytes += streamed
        acc.prefill_pinned_bytes += streamed if pinned else 0.0
        flops = 2.0 * elements * frac * ub
        acc.add_flops(kind, flops)
        fill = expert_fill if base == 2 else dense_fill
        if wkind & 4:
            acc.prefill_int8_flops += flops / fill
            acc.prefill_mmq_flops += flops / fill / mmq
        else:
            acc.prefill_f16_flops += flops / fill
    return split_layers


def add_layers_and_attention(
    result: FitResult,
    depth: int,
    prompt_tokens: int,
    ub: int,
    act_passes: float,
    parts: dict[str, Part],
    split_layers: set[int],
) -> None:
    """Add each layer's small kernels and its attention (decode at ``depth``; a ubatch of the
    prompt at its average depth) to the device that runs it."""
    m = result.model
    st = result.settings
    moe = bool(m.n_expert and m.n_expert_used)
    layer_dev = result.layer_devices
    n_layer = max(1, m.n_layer)
    # a prompt's ubatches attend to those before them: on average half the prompt deeper
    n_ub = -(-prompt_tokens // ub)
    prompt_kv = depth + (n_ub - 1) * ub / 2 + ub / 2
    act = act_passes * ACT_BYTES * m.n_embd * ub
    for il in range(min(n_layer, len(layer_dev) - 1)):
        dev = layer_dev[il]
        acc = parts.get(dev) or parts.setdefault(dev, Part())
        acc.layers += 1
        acc.moe_layers += moe
        acc.act_bytes += act
        acc.split_layers += il in split_layers
    flash = result.resolved.flash_attn
    heads = max(1, m.n_head)
    per_cell = 4.0 * heads * max(1, m.head_dim)  # QK^T and PV, per query and cell
    # a GPU's decode without flash attention: the KQ and KQV products broadcast each K/V
    # head to its query heads and read it once per query head
    kv_reads = 1.0 if flash else max(1.0, heads / max(1, m.n_head_kv))
    streams = max(1, result.resolved.n_stream)
    r = result.resolved
    # ggml's CPU flash attention tiles a ubatch only over an F16 or F32 cache (K and V
    # alike) and a tile's worth of tokens; else it visits each query's cells one by one
    tiled = not flash or (
        ub >= CPU_FA_TILE_Q and r.type_k == r.type_v and r.type_k in ("f16", "f32")
    )
    for cache in result.kv:
        if not cache.cells or not cache.layers:
            continue
        # a cell of one sequence's stream (the cache holds n_stream of them, -np without
        # -kvu; a sequence reads its own)
        cell_bytes = (cache.k_bytes + cache.v_bytes) / (cache.cells * streams) / len(cache.layers)
        read = min(max(depth, 1), cache.cells)  # a sliding window reads at most its own cells
        pre_kv = min(prompt_kv, cache.cells)
        for il in cache.layers:
            dev = layer_dev[il] if il < len(layer_dev) else CPU
            fetch = not st.kv_offload and flash and dev != CPU
            if not st.kv_offload and not flash:
                dev = CPU  # -nkvo without -fa: llama.cpp pins attention to the CPU backend
            acc = parts.get(dev) or parts.setdefault(dev, Part())
            if fetch:  # -nkvo with -fa: the GPU copies the cells it reads from the host
                acc.kv_host_bytes += cell_bytes * read
                acc.kv_host_prefill_bytes += cell_bytes * pre_kv
                acc.kv_host_layers += 1
            acc.decode_bytes += cell_bytes * read
            acc.decode_kv_bytes += cell_bytes * read * kv_reads
            acc.attn_decode_flops += per_cell * read
            acc.attn_decode_cells += heads * read
            if tiled:
                acc.attn_cells += heads * ub * pre_kv
            else:
                acc.attn_cells_by_cell += heads * ub * pre_kv
            acc.attn_cell_elems = 2 * max(1, m.head_dim)
            acc.attn_flops += per_cell * ub * pre_kv
            acc.attn_kv_bytes += cell_bytes * pre_kv
            if not flash:
                acc.attn_score_bytes += ub * pre_kv * heads * ACT_BYTES

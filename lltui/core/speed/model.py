"""How fast a placement runs: predicted decode and prompt-processing tokens/s, per device and
for the whole split, from where :mod:`.placement` put every weight and KV cell.

Decode (one sequence, batch 1, at a given depth) reads, per token, every weight of the
layers a device holds (of expert tensors only ``n_expert_used / n_expert``; of the input
embeddings one row) and the KV cells up to the depth: ``bytes / (bandwidth x efficiency)``
plus a fixed cost per layer (kernel launches and the synchronisation between them; more for
an MoE layer, which routes, sorts and gathers its experts). Layers run one device after
another (layer split), so the per-device times add, plus a hop on the link between devices
(PCIe, NVLink, the network to an RPC server, or the host for weights kept on the CPU).

Prompt processing (``-ub`` tokens at a time) is compute-bound on a GPU: ``2 x active params
x tokens`` plus attention, against the tensor throughput of the path llama.cpp takes (MMQ on
INT8 tensor cores, or DP4A on Pascal, for quantized weights; cuBLAS FP16 for F16/BF16, and
for quantized weights on Volta, which has FP16 tensor cores but no INT8 ones) times an
efficiency per architecture. An expert sees only ``ub x used / n_expert`` tokens of a
ubatch, too few to fill the matrix tiles, so expert matmuls run below the dense rate. Each
device also streams its weights once per ubatch; the larger of the two times applies. With a
single ubatch (pp512 at -ub 512) the devices of a layer split take turns: no overlap. Weights
left on the host are copied to the GPU for each ubatch of 32 tokens or more (llama.cpp
offloads large batches), so those are link-bound.

The efficiencies are fitted to published llama-bench results
(tests/fixtures/llama_bench_published.json, checked by tests/test_speed_published.py); the
GPU facts come from the one GPU table, :mod:`lltui.core.hardware.gpus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise
from typing import TYPE_CHECKING

from lltui.core.gguf.types import type_info
from lltui.core.hardware.gpus import GpuSpec, find_gpu
from lltui.core.hardware.links import NVLINK_BY_CC, NVLINK_UNKNOWN, PCIE_GBS_PER_LANE
from lltui.core.memory.common import CPU
from lltui.core.memory.results import DeviceSpeed, FitResult, SpeedEstimate
from lltui.core.units import compact_names

if TYPE_CHECKING:
    from lltui.core.gguf.model import GgufModel

MEMORY, COMPUTE, LINK = "memory", "compute", "link"


@dataclass(frozen=True, slots=True)
class ArchSpeed:
    """What llama.cpp's CUDA kernels reach on one GPU architecture, as fractions of the
    table's datasheet numbers."""

    decode: float  # of the memory bandwidth, batch-1 matrix-vector products (MMVQ)
    mmq: float  # of the INT8 tensor (DP4A) rate, quantized matmuls at -ub 512 (MMQ)
    f16: float  # of the FP16 tensor rate, cuBLAS GEMM (F16/BF16 weights)
    mmq_path: bool = True  # False: quantized weights are dequantized to FP16 for cuBLAS


# By compute capability. HBM parts reach less of their bandwidth than GDDR ones: one token's
# matrix-vector products keep too few loads in flight for HBM's latency. Hopper and
# Blackwell datacenter parts run MMQ's mma.sync tiles, not their wider instructions, hence
# their low MMQ fractions (no published point; kept conservative).
ARCH_SPEED: dict[tuple[int, int], ArchSpeed] = {
    (6, 0): ArchSpeed(0.6, 0.3, 0.5),
    (6, 1): ArchSpeed(0.6, 0.3, 0.5),
    (7, 0): ArchSpeed(0.59, 0.2, 0.4, mmq_path=False),
    (7, 5): ArchSpeed(0.64, 0.15, 0.4),
    (8, 0): ArchSpeed(0.5, 0.12, 0.43),
    (8, 6): ArchSpeed(0.75, 0.25, 0.53),
    (8, 9): ArchSpeed(0.85, 0.27, 0.5),
    (9, 0): ArchSpeed(0.42, 0.07, 0.4),
    (10, 0): ArchSpeed(0.42, 0.05, 0.4),
    (12, 0): ArchSpeed(0.8, 0.25, 0.5),
}
ARCH_DEFAULT = ArchSpeed(0.6, 0.22, 0.4)
# k-quants and i-quants run a little below the simple block types, in decode (their
# unpacking costs instructions the memory pipe waits on) and in MMQ (more work per tile):
# (name part, decode factor, prefill factor).
QUANT_SLOWDOWN = (("iq", 0.85, 0.8), ("_k", 0.9, 0.85))
LAYER_OVERHEAD_S = 26e-6  # per layer and token on a GPU: launches, syncs
PREFILL_LAYER_OVERHEAD_S = 95e-6  # per layer and ubatch: more kernels, short GEMM tails
MOE_LAYER_OVERHEAD_S = 27e-6  # more per MoE layer: routing, top-k, gathers, more launches
MOE_TILE_TOKENS = 132.0  # tokens per expert at which MMQ tiles are half full (prefill)
# Prefill's element-wise kernels (norms, RoPE, activations, adds, copies) stream the
# ubatch's activations: this many f32 vectors of n_embd per token and layer, read or written.
ACT_PASSES = 12.0

# The host: weights kept on the CPU are read at its memory bandwidth (decode). Not
# measured here (core has no psutil): a dual-channel DDR5 desktop, as llama.cpp's CPU
# backend reaches it.
HOST_BANDWIDTH_GBS = 60.0
HOST_EFFICIENCY = 0.7
HOST_GFLOPS = 1000.0  # what the CPU backend does for the batches it keeps (< 32 tokens)

# Links: per-hop latency (a copy and a sync between devices) and bandwidth where no better
# is known.
PCIE_HOP_S = 120e-6
NVLINK_HOP_S = 50e-6
HOST_HOP_S = 20e-6  # activations to the host and back for layers or experts it runs
RPC_HOP_S = 500e-6  # a graph computed on an RPC server: round trips over TCP
RPC_GBS = 1.25  # 10 Gb/s Ethernet
PCIE_DEFAULT = (4, 16)
OFFLOAD_MIN_BATCH = 32  # llama.cpp copies host weights to the GPU for batches this big
ACT_BYTES = 4  # f32 activations cross each hop
ASSUMED_GPU = "NVIDIA GeForce RTX 3090"  # for a GPU given only by its memory size


class _Part:
    """What one device does per token and per ubatch (a scratch total, filled in place)."""

    __slots__ = (
        "decode_bytes",
        "decode_flops",
        "decode_read_s_bytes",
        "layers",
        "moe_layers",
        "prefill_act_bytes",
        "prefill_bytes",
        "prefill_f16_flops",
        "prefill_int8_flops",
        "prefill_mmq_flops",
    )

    def __init__(self) -> None:
        self.decode_bytes = 0.0
        self.decode_read_s_bytes = 0.0  # decode bytes over the quant's read factor
        self.decode_flops = 0.0
        self.prefill_bytes = 0.0  # weights streamed once per ubatch
        self.prefill_act_bytes = 0.0  # activations the element-wise kernels stream
        self.prefill_int8_flops = 0.0
        self.prefill_mmq_flops = 0.0  # int8 flops over the quant's MMQ factor
        self.prefill_f16_flops = 0.0
        self.layers = 0
        self.moe_layers = 0


@lru_cache(maxsize=16384)  # the same tensors come back for every quant of a model
def _tensor_facts(
    name: str, type_id: int, dims: tuple[int, ...], is_input: bool
) -> tuple[int, int, int]:
    """(elements, rows read per token, kind) of one weight. Kind: 0 an input table (one row
    read per token), 1 a matrix, 2 an expert stack, 3 a vector; plus 4 when quantized."""
    n = 1
    for d in dims:
        n *= d
    if is_input:
        return n, max(1, dims[1]) if len(dims) > 1 else 1, 0
    base = 3 if len(dims) < 2 else 2 if "_exps" in name else 1
    return n, 1, base | (4 if type_info(type_id).quantized else 0)


@lru_cache(maxsize=64)
def _quant_factors(type_id: int) -> tuple[float, float]:
    """(decode, MMQ) speed of a weight type relative to the simple block types."""
    tag = type_info(type_id).name.lower()
    return next(((d, p) for part, d, p in QUANT_SLOWDOWN if part in tag), (1.0, 1.0))


def _gpu(description: str) -> tuple[GpuSpec, bool]:
    hit = find_gpu(description) if description else None
    if hit is not None:
        return hit, False
    fallback = find_gpu(ASSUMED_GPU)
    assert fallback is not None
    return fallback, True


def _arch(g: GpuSpec) -> ArchSpeed:
    return ARCH_SPEED.get(g.cc, ARCH_DEFAULT)


def _link(a: GpuSpec, b: GpuSpec) -> tuple[float, float, str]:
    """(latency s, GB/s, kind) of the hop between two local GPUs. NVLink only where it is on
    the board (SXM/HGX: 6 or more links); a bridge is optional and not assumed."""
    if a.nvlink_links >= 6 and b.nvlink_links >= 6:
        nvl = NVLINK_BY_CC.get(min(a.cc, b.cc), NVLINK_UNKNOWN)
        return NVLINK_HOP_S, nvl.gbs_per_link * min(a.nvlink_links, b.nvlink_links), "NVLink"
    gen = min(a.pcie_gen, b.pcie_gen)
    width = min(a.pcie_width, b.pcie_width)
    lane = PCIE_GBS_PER_LANE.get(gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]])
    return PCIE_HOP_S, lane * width, f"PCIe {gen}.0 x{width}"


def _pcie_gbs(g: GpuSpec) -> float:
    return PCIE_GBS_PER_LANE.get(g.pcie_gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]]) * g.pcie_width


def _expert_flop_scale(ub: int, n_expert: int, n_used: int) -> float:
    """How much slower an expert's prefill matmul runs than a dense one of the ubatch: it
    sees ``ub x used / n_expert`` tokens, and MMQ's tiles fill as tokens / (tokens + h)."""
    per_expert = max(1.0, ub * n_used / n_expert)
    return (ub / (ub + MOE_TILE_TOKENS)) / (per_expert / (per_expert + MOE_TILE_TOKENS))


def _weights(model: GgufModel, result: FitResult, ub: int, parts: dict[str, _Part]) -> set[int]:
    """Add every placed weight to its device's part; the layers split with the host."""
    m = result.model
    tensors = {t.name: t for t in model.tensors}
    moe = bool(m.n_expert and m.n_expert_used)
    expert_frac = m.n_expert_used / m.n_expert if moe else 1.0
    # experts touched by a ubatch: 1 - (1 - used/n)^ub of them
    expert_frac_ub = 1.0 - (1.0 - expert_frac) ** ub if moe else 1.0
    expert_scale = _expert_flop_scale(ub, m.n_expert, m.n_expert_used) if moe else 1.0
    layer_dev = result.layer_devices
    split_layers: set[int] = set()
    # summed by (device, kind, type) first: one pass that only adds
    # kind: 0 input rows, 1 dense matrix, 2 expert stack, 3 vector; +4 when quantized
    sums: dict[tuple[str, int, int], list[float]] = {}
    n_layer_dev = len(layer_dev)
    for p in result.placements:
        if p.duplicate:
            continue
        t = tensors.get(p.name)
        if t is None:
            continue
        n_el, rows, wkind = _tensor_facts(p.name, t.type, t.dims, p.layer is None)
        if (
            p.device == CPU
            and p.layer is not None
            and 0 <= p.layer < n_layer_dev
            and layer_dev[p.layer] != CPU
        ):
            split_layers.add(p.layer)
        got = sums.get((p.device, wkind, t.type))
        if got is None:
            sums[(p.device, wkind, t.type)] = [p.nbytes / rows, float(n_el)]
        else:
            got[0] += p.nbytes / rows
            got[1] += n_el
    for (dev, wkind, type_id), (nbytes, elements) in sums.items():
        acc = parts.get(dev) or parts.setdefault(dev, _Part())
        dec, mmq = _quant_factors(type_id)
        base = wkind & 3
        frac = expert_frac if base == 2 else 1.0
        acc.decode_bytes += nbytes * frac
        acc.decode_read_s_bytes += nbytes * frac / dec
        if base == 0:  # input embeddings: one row per token (nbytes already per row)
            continue
        flops = 2.0 * elements * frac if base != 3 else 0.0
        acc.decode_flops += flops
        acc.prefill_bytes += nbytes * (expert_frac_ub if base == 2 else 1.0)
        ub_flops = flops * ub * (expert_scale if base == 2 else 1.0)
        if wkind & 4:
            acc.prefill_int8_flops += ub_flops
            acc.prefill_mmq_flops += ub_flops / mmq
        else:
            acc.prefill_f16_flops += ub_flops
    return split_layers


def _kv_and_attention(
    result: FitResult, depth: int, ub: int, prompt_tokens: int, parts: dict[str, _Part]
) -> dict[str, float]:
    """Add KV reads and attention FLOPs to the parts; the KV bytes a full context adds. A
    prompt's ubatches attend to the ones before: on average half the prompt deeper."""
    m = result.model
    moe = bool(m.n_expert and m.n_expert_used)
    kv_full: dict[str, float] = {}
    for cache in result.kv:
        if not cache.cells:
            continue
        # cells up to the depth (a sliding window reads at most its own cells)
        read_cells = min(max(depth, 1), cache.cells)
        rest = min(result.resolved.n_ctx_seq, cache.cells) - read_cells
        for buf, nbytes in cache.buffers:
            dev = CPU if buf.startswith("CPU") else buf
            acc = parts.get(dev) or parts.setdefault(dev, _Part())
            acc.decode_bytes += nbytes * read_cells / cache.cells
            acc.decode_read_s_bytes += nbytes * read_cells / cache.cells
            kv_full[dev] = kv_full.get(dev, 0.0) + nbytes * max(0, rest) / cache.cells
    # attention FLOPs per token: QK^T and PV over the cells, per layer
    attn_per_cell = 4.0 * m.n_head * m.head_dim
    prompt_depth = depth + (-(-prompt_tokens // ub) - 1) * ub / 2
    act = ACT_PASSES * 4.0 * m.n_embd * ub
    for dev in result.layer_devices[: max(1, m.n_layer)]:
        acc = parts.get(dev) or parts.setdefault(dev, _Part())
        acc.decode_flops += attn_per_cell * max(depth, 1)
        acc.prefill_f16_flops += attn_per_cell * ub * (prompt_depth + ub / 2)
        acc.prefill_act_bytes += act
        acc.layers += 1
        acc.moe_layers += moe
    return kv_full


def _host_speed(name: str, tot: _Part, host_bandwidth_gbs: float) -> DeviceSpeed:
    bw = host_bandwidth_gbs * 1e9 * HOST_EFFICIENCY
    pre_compute = (tot.prefill_int8_flops + tot.prefill_f16_flops) / (HOST_GFLOPS * 1e9)
    return DeviceSpeed(
        name,
        f"host memory, {host_bandwidth_gbs:g} GB/s assumed",
        tot.decode_bytes / bw * 1e3,
        pre_compute * 1e3,
        MEMORY,
        COMPUTE,
        int(tot.decode_bytes),
    )


def _prefill_compute_s(g: GpuSpec, tot: _Part) -> float:
    """Seconds of tensor-core work for a ubatch: quantized weights on MMQ (or, on Volta, on
    cuBLAS after dequantizing), F16/BF16 weights and attention on cuBLAS."""
    arch = _arch(g)
    f16 = g.fp16_tflops * 1e12 * arch.f16
    if not arch.mmq_path:
        return (tot.prefill_int8_flops + tot.prefill_f16_flops) / f16
    return tot.prefill_mmq_flops / (g.int8_tops * 1e12 * arch.mmq) + tot.prefill_f16_flops / f16


def _gpu_speed(name: str, tot: _Part, g: GpuSpec, assumed: bool) -> DeviceSpeed:
    arch = _arch(g)
    bw = g.bandwidth_gbs * 1e9 * arch.decode
    dec_mem = tot.decode_read_s_bytes / bw
    dec_cmp = tot.decode_flops / (g.fp16_tflops * 1e12 * arch.f16)
    overhead = tot.layers * LAYER_OVERHEAD_S + tot.moe_layers * MOE_LAYER_OVERHEAD_S
    dec = max(dec_mem, dec_cmp) + overhead
    pre_mem = tot.prefill_bytes / bw
    pre_cmp = _prefill_compute_s(g, tot)
    pre_fixed = overhead + tot.layers * PREFILL_LAYER_OVERHEAD_S
    pre = max(pre_mem, pre_cmp) + pre_fixed + tot.prefill_act_bytes / bw
    return DeviceSpeed(
        name,
        g.name,
        dec * 1e3,
        pre * 1e3,
        MEMORY if dec_mem >= dec_cmp else COMPUTE,
        COMPUTE if pre_cmp >= pre_mem else MEMORY,
        int(tot.decode_bytes),
        assumed,
    )


def _offloaded_prefill(host: DeviceSpeed, tot: _Part, g: GpuSpec) -> DeviceSpeed:
    """Host weights in a prompt's ubatch: copied to the GPU over PCIe (ub >= 32)."""
    copy_s = tot.prefill_bytes / (_pcie_gbs(g) * 1e9)
    cmp_s = _prefill_compute_s(g, tot)
    return replace(
        host,
        prefill_ms=max(copy_s, cmp_s) * 1e3,
        prefill_bound=LINK if copy_s >= cmp_s and copy_s > 0 else COMPUTE,
    )


def estimate_speed(
    model: GgufModel,
    result: FitResult,
    *,
    depth: int = 0,
    prompt_tokens: int = 512,
    host_bandwidth_gbs: float = HOST_BANDWIDTH_GBS,
    backends: Mapping[str, str] | None = None,
    pcie: Mapping[str, tuple[int | None, int | None]] | None = None,
    bandwidth: Mapping[str, float] | None = None,
) -> SpeedEstimate:
    """Tokens/s of ``result``'s placement. ``depth``: KV cells already filled when decoding
    (llama-bench's tg128 is depth 0); ``prompt_tokens``: the prompt pp is timed on (pp512).
    ``backends``: device name -> "cuda" or "cpu" for RPC servers (default cuda); ``pcie``:
    device name -> (generation, width) of the link a present GPU reports (else the table's);
    ``bandwidth``: device name -> GB/s a present GPU's memory clock and bus give."""
    ub = max(1, min(result.resolved.n_ubatch, prompt_tokens))
    parts: dict[str, _Part] = {}
    split_layers = _weights(model, result, ub, parts)
    kv_full = _kv_and_attention(result, depth, ub, prompt_tokens, parts)

    by_name = {d.name: d for d in result.devices}
    order = [d.name for d in result.devices if d.name in parts] + [
        n for n in parts if n not in by_name
    ]
    speeds: list[DeviceSpeed] = []
    notes: list[str] = []
    gpus: dict[str, GpuSpec] = {}
    extra_full_s = 0.0
    for name in order:
        tot = parts[name]
        est = by_name.get(name)
        kind = est.kind if est else ("cpu" if name == CPU else "cuda")
        if kind == "cpu" or (kind == "rpc" and (backends or {}).get(name, "cuda") == "cpu"):
            speeds.append(_host_speed(name, tot, host_bandwidth_gbs))
            extra_full_s += kv_full.get(name, 0.0) / (host_bandwidth_gbs * 1e9 * HOST_EFFICIENCY)
            continue
        g, assumed = _gpu(est.description if est and kind == "cuda" else "")
        gen, width = (pcie or {}).get(name, (None, None))
        if gen or width:
            g = replace(g, pcie_gen=gen or g.pcie_gen, pcie_width=width or g.pcie_width)
        measured = (bandwidth or {}).get(name)
        # the card's own clocks and bus (a variant, a memory overclock), unless far from
        # its model's: a driver's odd answer must not halve or double a known card
        if measured and (assumed or 0.5 <= measured / g.bandwidth_gbs <= 2.0):
            g = replace(g, bandwidth_gbs=measured)
        else:
            measured = None
        gpus[name] = g
        if assumed:
            what = "compute" if measured else "numbers"
            notes.append(f"{name}: GPU model not known; {g.name}'s {what} assumed")
        speeds.append(_gpu_speed(name, tot, g, assumed))
        extra_full_s += kv_full.get(name, 0.0) / (g.bandwidth_gbs * 1e9 * _arch(g).decode)

    offload_gpu = next(iter(gpus.values()), None)
    host = parts.get(CPU)
    if ub >= OFFLOAD_MIN_BATCH and offload_gpu is not None and host and host.prefill_bytes:
        speeds = [_offloaded_prefill(s, host, offload_gpu) if s.name == CPU else s for s in speeds]
    link_dec, link_pre = _links(result, ub, gpus, by_name)
    link_dec += len(split_layers) * 2 * HOST_HOP_S
    return _total(speeds, link_dec, link_pre, result, depth, ub, prompt_tokens, extra_full_s, notes)


def _links(
    result: FitResult, ub: int, gpus: Mapping[str, GpuSpec], by_name: Mapping[str, object]
) -> tuple[float, float]:
    """Seconds per token and per ubatch on the hops between consecutive layer homes."""
    link_dec = link_pre = 0.0
    homes = [d for d in result.layer_devices if d]
    act = ACT_BYTES * max(1, result.model.n_embd)
    for a, b in pairwise(homes):
        if a == b:
            continue
        lat, gbs = _hop(a, b, gpus, by_name)
        link_dec += lat + act / (gbs * 1e9)
        link_pre += lat + act * ub / (gbs * 1e9)
    return link_dec, link_pre


def _total(
    speeds: list[DeviceSpeed],
    link_dec: float,
    link_pre: float,
    result: FitResult,
    depth: int,
    ub: int,
    prompt_tokens: int,
    extra_full_s: float,
    notes: list[str],
) -> SpeedEstimate:
    """Devices take turns on a token (and on a ubatch); pipeline parallelism overlaps the
    ubatches of a long prompt, never those of one ubatch."""
    total_dec_s = sum(s.decode_ms for s in speeds) / 1e3 + link_dec
    per_ub = [s.prefill_ms / 1e3 for s in speeds]
    n_ub = -(-prompt_tokens // ub)
    ub_s = sum(per_ub) + link_pre
    if result.pipeline_parallel and n_ub > 1 and per_ub:
        pre_total = ub_s + (n_ub - 1) * max(*per_ub, link_pre)
    else:
        pre_total = n_ub * ub_s
    slowest = max(speeds, key=lambda s: s.decode_ms, default=None)
    bound = slowest.bound if slowest else MEMORY
    if slowest is not None and link_dec * 1e3 > slowest.decode_ms:
        bound = LINK
    slowest_pre = max(speeds, key=lambda s: s.prefill_ms, default=None)
    pre_bound = slowest_pre.prefill_bound if slowest_pre else COMPUTE
    if slowest_pre is not None and link_pre * 1e3 > slowest_pre.prefill_ms:
        pre_bound = LINK
    return SpeedEstimate(
        decode_tps=1.0 / total_dec_s if total_dec_s > 0 else 0.0,
        prefill_tps=prompt_tokens / pre_total if pre_total > 0 else 0.0,
        bound=bound,
        prefill_bound=pre_bound,
        devices=tuple(speeds),
        link_decode_ms=link_dec * 1e3,
        link_prefill_ms=link_pre * 1e3,
        depth=depth,
        n_ubatch=ub,
        prompt_tokens=prompt_tokens,
        decode_tps_full=1.0 / (total_dec_s + extra_full_s) if total_dec_s > 0 else 0.0,
        notes=tuple(dict.fromkeys(notes)),
    )


def _hop(
    a: str, b: str, gpus: Mapping[str, GpuSpec], by_name: Mapping[str, object]
) -> tuple[float, float]:
    """(latency s, GB/s) from device ``a`` to ``b``."""
    kinds = {getattr(by_name.get(n), "kind", "cuda") for n in (a, b)}
    if "rpc" in kinds:
        return RPC_HOP_S, RPC_GBS
    if CPU in (a, b):
        g = gpus.get(b) or gpus.get(a)
        return HOST_HOP_S, _pcie_gbs(g) if g else 16.0
    ga, gb = gpus.get(a), gpus.get(b)
    if ga is None or gb is None:
        return PCIE_HOP_S, 16.0
    lat, gbs, _kind = _link(ga, gb)
    return lat, gbs


def speed_to_json(s: SpeedEstimate) -> dict[str, object]:
    """The ``speed`` object of ``fit --json`` and of each ``quant --json`` row."""
    return {
        "decode_tps": round(s.decode_tps, 1),
        "prefill_tps": round(s.prefill_tps, 1),
        "bound": s.bound,
        "prefill_bound": s.prefill_bound,
        "depth": s.depth,
        "decode_tps_full_ctx": round(s.decode_tps_full, 1),
        "prompt_tokens": s.prompt_tokens,
        "n_ubatch": s.n_ubatch,
        "link_decode_ms": round(s.link_decode_ms, 4),
        "link_prefill_ms": round(s.link_prefill_ms, 4),
        "devices": [
            {
                "name": d.name,
                "description": d.description,
                "decode_ms": round(d.decode_ms, 4),
                "prefill_ms": round(d.prefill_ms, 4),
                "bound": d.bound,
                "prefill_bound": d.prefill_bound,
                "decode_bytes": d.decode_bytes,
                "assumed": d.assumed,
            }
            for d in s.devices
        ],
        "notes": list(s.notes),
    }


def speed_line(s: SpeedEstimate) -> str:
    """One line for the text report and the fit view: devices that take the same time per
    token said together (``CUDA1-6 0.49 ms``), a device's bound only where it is not the
    whole's."""
    groups: list[tuple[str, str, list[str]]] = []  # (ms, bound, names), in device order
    for d in s.devices:
        if d.decode_ms < 0.005:
            continue
        ms = f"{d.decode_ms:.2f}"
        if groups and groups[-1][:2] == (ms, d.bound):
            groups[-1][2].append(d.name)
        else:
            groups.append((ms, d.bound, [d.name]))
    parts = ", ".join(
        f"{compact_names(names)} {ms} ms" + ("" if bound == s.bound else f" ({bound})")
        for ms, bound, names in groups
    )
    link = f", links {s.link_decode_ms:.2f} ms" if s.link_decode_ms >= 0.005 else ""
    return (
        f"speed: decode ~{s.decode_tps:.0f} t/s ({s.bound}-bound; {parts}{link}), "
        f"~{s.decode_tps_full:.0f} t/s at a full context; prompt ~{s.prefill_tps:.0f} t/s "
        f"({s.prefill_bound}-bound, -ub {s.n_ubatch})"
    )
    link = f", links {s.link_decode_ms:.2f} ms" if s.link_decode_ms >= 0.005 else ""
    return (
        f"speed: decode ~{s.decode_tps:.0f} t/s ({s.bound}-bound; {parts}{link}), "
        f"~{s.decode_tps_full:.0f} t/s at a full context; prompt ~{s.prefill_tps:.0f} t/s "
        f"({s.prefill_bound}-bound, -ub {s.n_ubatch})"
    )

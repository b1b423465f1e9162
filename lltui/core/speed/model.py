"""How fast a placement runs: predicted decode and prompt-processing tokens/s, per device and
for the whole split, from where :mod:`lltui.core.memory.placement` put every weight and KV
cell (:mod:`.parts` sums the work; this module costs it).

A GPU decodes a token in ``bytes / (bandwidth x efficiency)`` (every weight of its layers,
the experts used, the KV cells up to the depth) plus fixed costs per layer (kernels and
syncs; more for an MoE layer; more again where CUDA graphs are off, before Volta). A ubatch
of a prompt is compute-bound: matmul FLOPs on the path llama.cpp takes (MMQ on INT8 tensor
cores or DP4A for quantized weights, cuBLAS FP16 for F16/BF16, and for quantized weights on
Volta), below full rate when a matrix sees few tokens (experts; small ``-ub``), plus
attention at its depth (flash attention on the tensor cores, or without ``-fa`` the KQ
scores streamed through memory).

The host CPU (:class:`~lltui.core.hardware.host.HostSpec`: cores, vector unit, clock, memory
bandwidth) runs the layers and experts left on it: for a token at the lesser of its memory
bandwidth, what its cores stream and what their dot products compute; for a ubatch of 32
tokens or more llama.cpp copies the host weights over PCIe to the first GPU instead (the
copy and the GPU's work add up; on a unified-memory device nothing moves), for smaller ones
the CPU computes. ``-nkvo`` puts every layer's attention on the CPU, with its activations
crossing the link. Layers run one device after another (a layer split) with a hop between
devices; ``-sm tensor`` splits every layer across the GPUs with two all-reduces per layer.

The numbers are in :mod:`.params`; a rig's own measurements (:mod:`.calibration`) scale
them. The GPU facts come from the one GPU table, :mod:`lltui.core.hardware.gpus`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from itertools import pairwise
from typing import TYPE_CHECKING

from lltui.core.hardware.gpus import GpuSpec, find_gpu, nearest_gpus
from lltui.core.hardware.host import HostSpec, default_host
from lltui.core.hardware.links import NVLINK_BY_CC, NVLINK_UNKNOWN, PCIE_GBS_PER_LANE
from lltui.core.memory.common import CPU
from lltui.core.memory.results import DeviceSpeed, FitResult, SpeedEstimate
from lltui.core.speed.calibration import Calibration, apply_calibration
from lltui.core.speed.params import ARCH_DEFAULT, PARAMS, ArchSpeed, SpeedParams
from lltui.core.speed.parts import (
    ACT_BYTES,
    OFFLOAD_MIN_BATCH,
    Part,
    Tiles,
    add_layers_and_attention,
    add_weights,
)
from lltui.core.units import compact_names

if TYPE_CHECKING:
    from lltui.core.gguf.model import GgufModel

MEMORY, COMPUTE, LINK = "memory", "compute", "link"
PCIE_DEFAULT = (4, 16)
ASSUMED_GPU = "NVIDIA GeForce RTX 3090"  # for a GPU given only by its memory size


@dataclass(frozen=True, slots=True)
class _Times:
    """One device's seconds per token and per ubatch, and what bounds each."""

    decode_s: float
    prefill_s: float
    bound: str
    prefill_bound: str
    decode_fixed_s: float = 0.0  # of decode_s, what does not grow with the work (launches, syncs)
    prefill_fixed_s: float = 0.0  # of prefill_s, likewise per ubatch


# --- a GPU -----------------------------------------------------------------------------------


def _arch(g: GpuSpec, p: SpeedParams) -> ArchSpeed:
    return p.arch.get(g.cc, ARCH_DEFAULT)


def _pcie_gbs(g: GpuSpec) -> float:
    """What the link between the host and the GPU moves; a unified-memory device has no
    link: its memory."""
    if g.unified or not g.pcie_width:
        return g.bandwidth_gbs
    return PCIE_GBS_PER_LANE.get(g.pcie_gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]]) * g.pcie_width


def _matmul_s(g: GpuSpec, tot: Part, p: SpeedParams) -> float:
    """Seconds of tensor-core work for a ubatch's matmuls: quantized weights on MMQ (or, on
    Volta, on cuBLAS after dequantizing), F16/BF16 weights on cuBLAS."""
    arch = _arch(g, p)
    f16 = g.fp16_tflops * 1e12 * arch.f16
    if not arch.mmq_path:
        return (tot.prefill_int8_flops + tot.prefill_f16_flops) / f16
    return tot.prefill_mmq_flops / (g.int8_tops * 1e12 * arch.mmq) + tot.prefill_f16_flops / f16


def _attention_s(g: GpuSpec, tot: Part, flash: bool, ub: int, bw: float, p: SpeedParams) -> float:
    """A ubatch's attention over its cells: flash attention reads K/V once per tile of
    queries and runs on the tensor cores below their GEMM rate; without it the KQ scores
    (f32, per head, query and cell) go through memory several times."""
    if not tot.attn_flops:
        return 0.0
    f16 = g.fp16_tflops * 1e12
    kv_s = tot.attn_kv_bytes * -(-ub // p.fa_q_tile) / bw
    if flash:
        return max(tot.attn_flops / (f16 * p.fa_eff), kv_s)
    arch = _arch(g, p)
    return tot.attn_flops / (f16 * arch.f16) + tot.attn_score_bytes * p.score_passes / bw


def _overhead_s(g: GpuSpec, tot: Part, p: SpeedParams) -> float:
    """Fixed costs per token: kernels and syncs per layer, more for MoE routing, more again
    before Volta, where llama.cpp runs without CUDA graphs."""
    per_layer = p.layer_s + (p.no_graph_layer_s if g.cc < (7, 0) else 0.0)
    return tot.layers * per_layer + tot.moe_layers * p.moe_layer_s


def _gpu_times(g: GpuSpec, tot: Part, flash: bool, ub: int, p: SpeedParams) -> _Times:
    arch = _arch(g, p)
    bw = g.bandwidth_gbs * 1e9 * arch.decode
    dec_mem = (tot.decode_read_s_bytes + tot.decode_kv_bytes) / bw
    dec_cmp = (tot.decode_flops + tot.attn_decode_flops) / (g.fp16_tflops * 1e12 * arch.f16)
    overhead = _overhead_s(g, tot, p)
    pre_mem = tot.prefill_bytes / bw
    mmvq = ub <= p.mmvq_max_batch  # a few tokens: matrix-vector kernels, as in decode
    pre_cmp = 0.0 if mmvq else _matmul_s(g, tot, p)
    tails = 0.0 if mmvq else tot.layers * p.prefill_layer_s  # GEMM launches and tails
    pre_fixed = overhead + tails + tot.act_bytes / bw
    pre = max(pre_mem, pre_cmp) + pre_fixed + _attention_s(g, tot, flash, ub, bw, p)
    return _Times(
        max(dec_mem, dec_cmp) + overhead,
        pre,
        MEMORY if dec_mem >= dec_cmp else COMPUTE,
        COMPUTE if pre_cmp >= pre_mem else MEMORY,
        overhead,
        overhead + tails,
    )


# --- the host ----------------------------------------------------------------------------------


def _host_rate(host: HostSpec, kind: str, eff: Mapping[str, float]) -> float:
    """Operations per second all its threads reach on one kind of weight."""
    f32, int8 = host.rates
    per_cycle = f32 if kind == "float" else int8
    return host.workers * host.ghz * 1e9 * per_cycle * eff.get(kind, 0.2)


def _host_stream_gbs(host: HostSpec, p: SpeedParams) -> float:
    """GB/s its threads stream: the memory's share, or what so many cores pull at most."""
    cores = host.workers * p.host_core_gbs * host.ghz / 3.0
    return min(host.mem_gbs * p.host_bw_eff, cores)


def _host_times(
    host: HostSpec, tot: Part, ub: int, threads_batch: int | None, p: SpeedParams
) -> _Times:
    """The CPU's seconds for its share of a token and (computing it itself) of a ubatch."""
    stream = _host_stream_gbs(host, p) * 1e9
    dec_mem = tot.decode_bytes / stream
    dec_cmp = sum(
        2.0 * n / _host_rate(host, kind, p.host_decode_eff) for kind, n in tot.decode_elems.items()
    )
    f32 = host.rates[0] * host.workers * host.ghz * 1e9
    attn_dec = tot.attn_decode_flops / (f32 * p.host_attn_eff)
    # per layer: dispatching its ops, and with several threads the barriers between them
    sync = p.host_layer_s * (1.0 - 1.0 / host.workers)
    fixed = (tot.layers + tot.split_layers) * (p.host_op_layer_s + sync)
    batch_host = host.with_threads(threads_batch)
    fill = ub / (ub + 8.0)  # the batched kernels' tiles: full from a few dozen tokens
    pre_cmp = sum(
        flops / (_host_rate(batch_host, kind, p.host_prefill_eff) * fill)
        for kind, flops in tot.prefill_flops.items()
    )
    pre_mem = tot.prefill_bytes / stream
    bf32 = batch_host.rates[0] * batch_host.workers * batch_host.ghz * 1e9
    attn_pre = tot.attn_flops / (bf32 * p.host_attn_eff) + tot.attn_kv_bytes / stream
    return _Times(
        max(dec_mem, dec_cmp) + attn_dec + fixed,
        max(pre_cmp, pre_mem) + attn_pre + fixed,
        MEMORY if dec_mem >= dec_cmp else COMPUTE,
        COMPUTE if pre_cmp >= pre_mem else MEMORY,
        fixed,
        fixed,
    )


def _offloaded_prefill_s(
    host: HostSpec, tot: Part, g: GpuSpec, ub: int, flash: bool, threads: int | None, p: SpeedParams
) -> tuple[float, str]:
    """A ubatch with the host's weights copied to GPU ``g`` (ub >= 32): the copy, then the
    GPU's matmuls; the attention of layers whose KV is on the host stays on the CPU."""
    # one memory (GB10, Jetson): the GPU reads the host's weights where they are
    copy_s = 0.0 if g.unified else tot.prefill_bytes / (_pcie_gbs(g) * 1e9 * p.pcie_eff)
    arch = _arch(g, p)
    bw = g.bandwidth_gbs * 1e9 * arch.decode
    gpu_s = max(_matmul_s(g, tot, p), tot.prefill_bytes / bw if g.unified else 0.0)
    cpu_only = replace(tot, prefill_flops={}, prefill_bytes=0.0)
    cpu_s = _host_times(host, cpu_only, ub, threads, p).prefill_s
    bound = LINK if copy_s >= gpu_s and copy_s > 0 else COMPUTE
    return copy_s + gpu_s + cpu_s, bound


# --- links ---------------------------------------------------------------------------------------


def _link(a: GpuSpec, b: GpuSpec, p: SpeedParams) -> tuple[float, float, str]:
    """(latency s, GB/s, kind) of the hop between two local GPUs. NVLink only where it is on
    the board (SXM/HGX: 6 or more links); a bridge is optional and not assumed."""
    if a.nvlink_links >= 6 and b.nvlink_links >= 6:
        nvl = NVLINK_BY_CC.get(min(a.cc, b.cc), NVLINK_UNKNOWN)
        return p.nvlink_hop_s, nvl.gbs_per_link * min(a.nvlink_links, b.nvlink_links), "NVLink"
    gen = min(a.pcie_gen, b.pcie_gen)
    width = min(a.pcie_width, b.pcie_width)
    lane = PCIE_GBS_PER_LANE.get(gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]])
    return p.pcie_hop_s, lane * width, f"PCIe {gen}.0 x{width}"


def _hop(
    a: str, b: str, gpus: Mapping[str, GpuSpec], kinds: Mapping[str, str], p: SpeedParams
) -> tuple[float, float]:
    """(latency s, GB/s) from device ``a`` to ``b``."""
    if "rpc" in (kinds.get(a), kinds.get(b)):
        return p.rpc_hop_s, p.rpc_gbs
    if CPU in (a, b):
        g = gpus.get(b) or gpus.get(a)
        return p.host_hop_s, _pcie_gbs(g) if g else 16.0
    ga, gb = gpus.get(a), gpus.get(b)
    if ga is None or gb is None:
        return p.pcie_hop_s, 16.0
    lat, gbs, _kind = _link(ga, gb, p)
    return lat, gbs


def _links(
    result: FitResult,
    ub: int,
    gpus: Mapping[str, GpuSpec],
    kinds: Mapping[str, str],
    p: SpeedParams,
) -> tuple[float, float]:
    """Seconds per token and per ubatch on the hops between consecutive layer homes."""
    link_dec = link_pre = 0.0
    homes = [d for d in result.layer_devices if d]
    act = ACT_BYTES * max(1, result.model.n_embd)
    for a, b in pairwise(homes):
        if a == b:
            continue
        lat, gbs = _hop(a, b, gpus, kinds, p)
        link_dec += lat + act / (gbs * 1e9)
        link_pre += lat + act * ub / (gbs * 1e9)
    return link_dec, link_pre


def _nkvo_links(
    result: FitResult, parts: Mapping[str, Part], ub: int, g: GpuSpec | None, p: SpeedParams
) -> tuple[float, float]:
    """-nkvo: each GPU layer's Q, K and V cross to the host and its attention output back."""
    host = parts.get(CPU)
    if result.settings.kv_offload or host is None or g is None:
        return 0.0, 0.0
    gpu_layers = sum(1 for d in result.layer_devices[:-1] if d != CPU)
    m = result.model
    width = (m.n_head + 2 * m.n_head_kv) * m.head_dim + m.n_head * m.head_dim
    per_token = width * ACT_BYTES / (_pcie_gbs(g) * 1e9 * p.pcie_eff)
    return (
        gpu_layers * (2 * p.host_hop_s + per_token),
        gpu_layers * (2 * p.host_hop_s + per_token * ub),
    )


# --- the whole split -----------------------------------------------------------------------------


def _gpu(description: str) -> tuple[GpuSpec, bool, str]:
    """The catalog row of a GPU; for one it does not know, the nearest row of the same model
    number (a laptop 4070: the 4070), else ASSUMED_GPU, and the line that says so."""
    hit = find_gpu(description) if description else None
    if hit is not None:
        return hit, False, ""
    near = nearest_gpus(description) if description else []
    number = re.search(r"\d{3,5}", description)
    same = [n for n in near if number and number.group(0) in n]
    fallback = find_gpu(same[0] if same else ASSUMED_GPU)
    assert fallback is not None
    if not description:
        return fallback, True, f"GPU model not known; {fallback.name}'s numbers assumed"
    said = f" (nearest known: {', '.join(near)})" if near else ""
    return fallback, True, f"{description!r} is not in the GPU catalog{said}; {fallback.name}'s"


def _device_gpu(
    name: str,
    description: str,
    pcie: Mapping[str, tuple[int | None, int | None]],
    bandwidth: Mapping[str, float],
    notes: list[str],
) -> tuple[GpuSpec, bool]:
    """The catalog row of a GPU, with the link and memory bandwidth the card itself reports."""
    g, assumed, why = _gpu(description)
    gen, width = pcie.get(name, (None, None))
    if gen or width:
        g = replace(g, pcie_gen=gen or g.pcie_gen, pcie_width=width or g.pcie_width)
    measured = bandwidth.get(name)
    # the card's own clocks and bus (a variant, a memory overclock), unless far from its
    # model's: a driver's odd answer must not halve or double a known card
    if measured and (assumed or 0.5 <= measured / g.bandwidth_gbs <= 2.0):
        g = replace(g, bandwidth_gbs=measured)
    else:
        measured = None
    if assumed:
        what = "compute" if measured else "numbers"
        if why.endswith("'s"):
            notes.append(f"{name}: {why} {what} assumed")
        else:
            notes.append(f"{name}: {why.replace('numbers', what)}")
    return g, assumed


def estimate_speed(
    model: GgufModel,
    result: FitResult,
    *,
    depth: int = 0,
    prompt_tokens: int = 512,
    host: HostSpec | None = None,
    calibration: Calibration | None = None,
    backends: Mapping[str, str] | None = None,
    pcie: Mapping[str, tuple[int | None, int | None]] | None = None,
    bandwidth: Mapping[str, float] | None = None,
    params: SpeedParams = PARAMS,
) -> SpeedEstimate:
    """Tokens/s of ``result``'s placement. ``depth``: KV cells already filled (llama-bench's
    ``-d``; decode and the prompt both start there); ``prompt_tokens``: the prompt pp is
    timed on (pp512). ``host``: the CPU side (None: :func:`default_host`, and said so);
    ``calibration``: what this rig measured. ``backends``: device name -> "cuda" or "cpu" for
    RPC servers (default cuda); ``pcie``: device name -> (generation, width) of the link a
    present GPU reports (else the table's); ``bandwidth``: device name -> GB/s a present
    GPU's memory clock and bus give."""
    p = params
    st = result.settings
    host = (host or default_host()).with_threads(st.n_threads if st.n_threads > 0 else None)
    threads_batch = st.n_threads_batch if st.n_threads_batch > 0 else None
    ub = max(1, min(result.resolved.n_ubatch, result.resolved.n_batch, prompt_tokens))
    tiles = Tiles(ub, p.tile_tokens, p.mmvq_max_batch)
    parts: dict[str, Part] = {}
    split_layers = add_weights(model, result, tiles, p.quant_slowdown, parts)
    kv_full = add_layers_and_attention(
        result, depth, prompt_tokens, ub, p.act_passes, parts, split_layers
    )
    if len(result.meta_devices) > 1 and result.meta_devices[0] in parts:
        # -sm tensor: the estimate places the Meta device's layers on its first device;
        # every device runs an even share of them
        whole = parts.pop(result.meta_devices[0])
        for name in result.meta_devices:
            parts[name] = _share(whole, len(result.meta_devices))
    flash = result.resolved.flash_attn
    by_name = {d.name: d for d in result.devices}
    kinds = {d.name: d.kind for d in result.devices}
    order = [d.name for d in result.devices if d.name in parts] + [
        n for n in parts if n not in by_name
    ]
    notes: list[str] = []
    gpus: dict[str, GpuSpec] = {}
    times: dict[str, _Times] = {}
    described: dict[str, tuple[str, bool]] = {}
    extra_full_s = 0.0
    host_dev = False
    for name in order:
        tot = parts[name]
        est = by_name.get(name)
        kind = est.kind if est else ("cpu" if name == CPU else "cuda")
        if kind == "cpu" or (kind == "rpc" and (backends or {}).get(name, "cuda") == "cpu"):
            times[name] = _host_times(host, tot, ub, threads_batch, p)
            described[name] = (f"host CPU, {host.mem_gbs:g} GB/s ({host.mem_source})", False)
            extra_full_s += kv_full.get(name, 0.0) / (_host_stream_gbs(host, p) * 1e9)
            host_dev = host_dev or name == CPU
            continue
        g, assumed = _device_gpu(
            name,
            est.description if est and kind == "cuda" else "",
            pcie or {},
            bandwidth or {},
            notes,
        )
        gpus[name] = g
        times[name] = _gpu_times(g, tot, flash, ub, p)
        described[name] = (g.name, assumed)
        extra_full_s += kv_full.get(name, 0.0) / (g.bandwidth_gbs * 1e9 * _arch(g, p).decode)

    first_gpu = next((g for n, g in gpus.items() if kinds.get(n, "cuda") == "cuda"), None)
    host_part = parts.get(CPU)
    if (
        ub >= OFFLOAD_MIN_BATCH
        and st.op_offload
        and first_gpu is not None
        and host_part is not None
        and host_part.prefill_bytes
    ):
        pre_s, pre_bound = _offloaded_prefill_s(
            host, host_part, first_gpu, ub, flash, threads_batch, p
        )
        times[CPU] = replace(times[CPU], prefill_s=pre_s, prefill_bound=pre_bound)
    if host_dev and host.assumed:
        notes.append(
            f"host: {host.mem_gbs:g} GB/s memory assumed (not read here); --host mem=... sets it"
        )
    link_dec, link_pre = _links(result, ub, gpus, kinds, p)
    link_dec += len(split_layers) * 2 * p.host_hop_s
    nkvo_dec, nkvo_pre = _nkvo_links(result, parts, ub, first_gpu, p)
    link_dec += nkvo_dec
    link_pre += nkvo_pre
    if st.split_mode == "tensor" and len(gpus) > 1:
        times, link_dec, link_pre = _tensor_split(result, times, gpus, ub, p)
    calibrated = None
    if calibration is not None:
        times_s = {n: (t.decode_s, t.prefill_s) for n, t in times.items()}
        scaled, calibrated = apply_calibration(calibration, times_s, set(gpus))
        times = {n: _scaled(t, *scaled[n]) for n, t in times.items()}
    speeds = [
        DeviceSpeed(
            n,
            described[n][0],
            t.decode_s * 1e3,
            t.prefill_s * 1e3,
            t.bound,
            t.prefill_bound,
            int(parts[n].decode_bytes),
            described[n][1],
            t.decode_fixed_s * 1e3,
            t.prefill_fixed_s * 1e3,
        )
        for n, t in times.items()
    ]
    out = _total(
        speeds, link_dec, link_pre, result, depth, ub, prompt_tokens, extra_full_s, notes, host
    )
    return replace(out, calibrated=calibrated) if calibrated else out


def _scaled(t: _Times, decode_s: float, prefill_s: float) -> _Times:
    """A device's times set to calibrated ones, its fixed parts scaled alike."""
    dec = decode_s / t.decode_s if t.decode_s > 0 else 1.0
    pre = prefill_s / t.prefill_s if t.prefill_s > 0 else 1.0
    return replace(
        t,
        decode_s=decode_s,
        prefill_s=prefill_s,
        decode_fixed_s=t.decode_fixed_s * dec,
        prefill_fixed_s=t.prefill_fixed_s * pre,
    )


def fixed_share(s: SpeedEstimate, decode: bool) -> float:
    """What share of a token's (decode) or a ubatch's (prompt) predicted time is fixed
    costs: kernel launches and syncs per layer on a GPU, op dispatch and thread barriers per
    layer on the host, the hops between devices. Near 1 for a tiny model, where what is
    measured says little of the work a calibration scales (1.0 where nothing is predicted)."""
    if decode:
        fixed = sum(d.decode_fixed_ms for d in s.devices) + s.link_decode_ms
        total = sum(d.decode_ms for d in s.devices) + s.link_decode_ms
    else:
        fixed = sum(d.prefill_fixed_ms for d in s.devices) + s.link_prefill_ms
        total = sum(d.prefill_ms for d in s.devices) + s.link_prefill_ms
    return min(1.0, fixed / total) if total > 0 else 1.0


def _share(part: Part, n: int) -> Part:
    """One of ``n`` even shares of a device's work (its layer counts kept)."""
    out = Part()
    for f in fields(Part):
        v = getattr(part, f.name)
        if isinstance(v, float):
            v = v / n
        elif isinstance(v, dict):
            v = {k: x / n for k, x in v.items()}
        setattr(out, f.name, v)
    return out


def _tensor_split(
    result: FitResult,
    times: dict[str, _Times],
    gpus: Mapping[str, GpuSpec],
    ub: int,
    p: SpeedParams,
) -> tuple[dict[str, _Times], float, float]:
    """-sm tensor: every GPU holds its share of every layer and works on it at once; after
    attention and after the FFN the GPUs all-reduce the layer's activations."""
    names = [n for n in times if n in gpus]
    dec = max(times[n].decode_s for n in names)
    pre = max(times[n].prefill_s for n in names)
    # the same total work spread evenly: each GPU's share of the slowest whole
    total_dec = sum(times[n].decode_s for n in names)
    total_pre = sum(times[n].prefill_s for n in names)
    share_dec, share_pre = max(dec, total_dec / len(names)), max(pre, total_pre / len(names))
    out = dict(times)
    for n in names:
        out[n] = replace(
            times[n], decode_s=share_dec / len(names), prefill_s=share_pre / len(names)
        )
    n_layer = max(1, result.model.n_layer)
    g0 = gpus[names[0]]
    _lat, gbs, _kind = _link(g0, gpus[names[-1]], p)
    act = ACT_BYTES * result.model.n_embd * 2 * (len(names) - 1) / len(names)
    link_dec = 2 * n_layer * (p.allreduce_s + act / (gbs * 1e9))
    link_pre = 2 * n_layer * (p.allreduce_s + act * ub / (gbs * 1e9))
    return out, link_dec, link_pre


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
    host: HostSpec,
) -> SpeedEstimate:
    """Devices take turns on a token (and on a ubatch); pipeline parallelism overlaps the
    ubatches of a long prompt, never those of one ubatch."""
    if result.settings.split_mode == "tensor" and len(speeds) > 1:
        total_dec_s = max(s.decode_ms for s in speeds) / 1e3 + link_dec
        per_ub = [max(s.prefill_ms for s in speeds) / 1e3]
    else:
        total_dec_s = sum(s.decode_ms for s in speeds) / 1e3 + link_dec
        per_ub = [s.prefill_ms / 1e3 for s in speeds]
    n_ub = -(-prompt_tokens // ub)
    ub_s = sum(per_ub) + link_pre
    if result.pipeline_parallel and n_ub > 1 and len(per_ub) > 1:
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
        host=host.describe(),
    )


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
        "host": s.host,
        "calibrated": s.calibrated,
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
    depth = f" at depth {s.depth}" if s.depth else ""
    cal = f"; {s.calibrated}" if s.calibrated else ""
    return (
        f"speed: decode ~{s.decode_tps:.0f} t/s{depth} ({s.bound}-bound; {parts}{link}), "
        f"~{s.decode_tps_full:.0f} t/s at a full context; prompt ~{s.prefill_tps:.0f} t/s "
        f"({s.prefill_bound}-bound, -ub {s.n_ubatch}){cal}"
    )

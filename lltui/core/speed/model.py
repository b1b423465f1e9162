"""How fast a placement runs: predicted decode and prompt-processing tokens/s, per device and
for the whole split, from where :mod:`lltui.core.memory.placement` put every weight and KV
cell (:mod:`.parts` sums the work; :mod:`.gpu`, :mod:`.host` and :mod:`.split` cost it).

A GPU decodes a token in ``bytes / (bandwidth x efficiency)`` (every weight of its layers,
the experts used, the KV cells up to the depth) plus fixed costs per layer (kernels and
syncs; more for an MoE layer; more again where CUDA graphs are off, before Volta). A ubatch
of a prompt is compute-bound: matmul FLOPs on the path llama.cpp takes (MMQ on INT8 tensor
cores or DP4A for quantized weights, cuBLAS FP16 for F16/BF16, and for quantized weights on
Volta), below full rate when a matrix sees few tokens (experts; small ``-ub``), plus
attention at its depth (flash attention on the tensor cores, or without ``-fa`` the KQ
scores streamed through memory). A GPU held under what the work draws (a power limit, a
clock cap) runs at the clock that leaves it.

The host CPU runs the layers and experts left on it for a token; for a ubatch of 32 tokens
or more llama.cpp copies the host's weights to the first GPU (only the experts the ubatch
routes to) and works there. ``-nkvo`` keeps the KV cache in host memory: with flash
attention the GPUs copy the cells they read across the link every token and ubatch,
without it the attention runs on the CPU. Layers run one device after another (a layer
split) with a hop between devices and a long prompt pipelined across them; ``-sm tensor``
splits every layer across the GPUs with two all-reduces per layer.

Not modelled: NUMA placement of the host's threads and memory, the pinned (``--no-mmap``)
or pageable source of a host copy (one efficiency covers both), thermal throttling, MoE
routing skew in decode (every expert read is taken as equally likely), speculative
decoding, several sequences at once, and llama.cpp builds older than the CUDA kernels the
constants were fitted to.

The numbers are in :mod:`.params`; a rig's own measurements (:mod:`.calibration`) scale
them. The GPU facts come from the one GPU table, :mod:`lltui.core.hardware.gpus`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from lltui.core.hardware.gpus import GpuSpec, find_gpu, nearest_gpus
from lltui.core.hardware.host import HostSpec, default_host
from lltui.core.hardware.links import RigLinks
from lltui.core.jsonout import fields_of
from lltui.core.memory.common import CPU
from lltui.core.memory.results import DeviceSpeed, FitResult, SpeedEstimate
from lltui.core.speed.calibration import Calibration
from lltui.core.speed.gpu import (
    COMPUTE,
    LINK,
    MEMORY,
    Clocks,
    Times,
    gpu_times,
    pcie_gbs,
)
from lltui.core.speed.host_offload import host_times, offloaded_prefill_s
from lltui.core.speed.params import PARAMS, SpeedParams
from lltui.core.speed.parts import (
    ACT_BYTES,
    OFFLOAD_MIN_BATCH,
    Part,
    Tiles,
    add_layers_and_attention,
    add_weights,
)
from lltui.core.speed.split import layer_links, prompt_s, tensor_links
from lltui.core.units import compact_names

if TYPE_CHECKING:
    from lltui.core.gguf.model import GgufModel

__all__ = [
    "ASSUMED_GPU",
    "COMPUTE",
    "LINK",
    "MEMORY",
    "Clocks",
    "RigLinks",
    "estimate_speed",
    "fixed_share",
    "speed_line",
    "speed_to_json",
]

ASSUMED_GPU = "NVIDIA GeForce RTX 3090"  # for a GPU given only by its memory size


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
    clocks: Mapping[str, Clocks] | None = None,
    links: RigLinks | None = None,
    params: SpeedParams = PARAMS,
) -> SpeedEstimate:
    """Tokens/s of ``result``'s placement. ``depth``: KV cells already filled (llama-bench's
    ``-d``; decode and the prompt both start there); ``prompt_tokens``: the prompt pp is
    timed on (pp512). ``host``: the CPU side (None: :func:`default_host`, and said so);
    ``calibration``: what this rig measured. ``backends``: device name -> "cuda" or "cpu" for
    RPC servers (default cuda); ``pcie``: device name -> (generation, width) of the link a
    present GPU reports (else the table's); ``bandwidth``: device name -> GB/s a present
    GPU's memory clock and bus give; ``clocks``: device name -> the power limit and clock
    cap a present GPU reports; ``links``: how the GPUs reach each other (NVLink, peer
    access, a measured all-reduce), for ``-sm tensor`` and the hops of a layer split.
    ``decode_tps_full``: decode at a full context, the same estimate at that depth (its
    attention, -nkvo's copies and a tensor split's shares priced as at any depth)."""
    st = result.settings
    host = (host or default_host()).with_threads(st.n_threads if st.n_threads > 0 else None)
    threads_batch = st.n_threads_batch if st.n_threads_batch > 0 else None
    rig = _Rig(host, threads_batch, backends or {}, pcie or {}, bandwidth or {}, clocks or {})
    out = _estimate(model, result, depth, prompt_tokens, rig, calibration, links, params)
    full = out
    full_depth = _full_depth(result)
    if full_depth > depth:  # (one more estimate: this one's cost again)
        full = _estimate(
            model, result, full_depth, prompt_tokens, rig, calibration, links, params
        )  # fmt: skip
    return replace(out, decode_tps_full=full.decode_tps)


def _full_depth(result: FitResult) -> int:
    """The KV cells a token reads at a full context: the cache's per sequence, but no more
    than llama-server's slots reach, each capped at the trained context (n_ctx_slot; a
    unified cache the slots' sum), unless RoPE scaling was asked for."""
    r = result.resolved
    trained = result.model.n_ctx_train
    if trained <= 0 or result.settings.rope_scaling:
        return r.n_ctx_seq
    return min(r.n_ctx_seq, r.slots_ctx(trained) if r.kv_unified else trained)


def _estimate(
    model: GgufModel,
    result: FitResult,
    depth: int,
    prompt_tokens: int,
    rig: _Rig,
    calibration: Calibration | None,
    links: RigLinks | None,
    p: SpeedParams,
) -> SpeedEstimate:
    st = result.settings
    host = rig.host
    ub = max(1, min(result.resolved.n_ubatch, result.resolved.n_batch, prompt_tokens))
    parts, split_layers = _parts(model, result, depth, prompt_tokens, ub, p)
    notes: list[str] = []
    devs = _device_times(result, parts, ub, rig, notes, p)
    times, gpus = devs.times, devs.gpus
    kinds = {d.name: d.kind for d in result.devices}
    first_gpu = next((g for n, g in gpus.items() if kinds.get(n, "cuda") == "cuda"), None)
    if first_gpu is None:  # -ngl 0: no GPU holds a layer, the first still takes big ubatches
        cuda = next((d for d in result.devices if d.kind == "cuda"), None)
        if cuda is not None:
            first_gpu, _ = _device_gpu(cuda.name, cuda.description, rig.pcie, rig.bandwidth, [])
    if first_gpu is not None and CPU in times and ub >= OFFLOAD_MIN_BATCH and st.op_offload:
        times[CPU] = _offloaded(times[CPU], parts[CPU], first_gpu, ub, rig, p)
    if CPU in parts and host.assumed and CPU in times:
        notes.append(
            f"host: {host.mem_gbs:g} GB/s memory assumed (not read here); --host mem=... sets it"
        )
    hop_dec, hop_pre, reduce_dec, reduce_pre = _link_times(
        result, parts, split_layers, gpus, ub, first_gpu, links, p
    )
    calibrated = None
    if calibration is not None:
        times = {n: _calibrated(calibration, t, n in gpus) for n, t in times.items()}
        reduce_dec *= calibration.reduce
        reduce_pre *= calibration.reduce
        calibrated = calibration.note()
    speeds = [
        DeviceSpeed(
            n,
            devs.described[n][0],
            t.decode_s * 1e3,
            t.prefill_s * 1e3,
            t.bound,
            t.prefill_bound,
            int(parts[n].decode_bytes),
            devs.described[n][1],
            t.decode_fixed_s * 1e3,
            t.prefill_fixed_s * 1e3,
            t.copy_decode_s * 1e3,
            t.copy_prefill_s * 1e3,
        )
        for n, t in times.items()
    ]
    out = _total(
        speeds,
        (hop_dec, hop_pre, reduce_dec, reduce_pre),
        result,
        (depth, ub, prompt_tokens),
        notes,
        host,
    )
    return replace(out, calibrated=calibrated) if calibrated else out


def _offloaded(t: Times, host_part: Part, g: GpuSpec, ub: int, rig: _Rig, p: SpeedParams) -> Times:
    """The host's ubatch when llama.cpp copies its weights to the first GPU (op offload)."""
    if not host_part.prefill_bytes:
        return t
    pre_s, copy_s, bound = offloaded_prefill_s(rig.host, host_part, g, ub, rig.threads_batch, p)
    return replace(t, prefill_s=pre_s, prefill_bound=bound, copy_prefill_s=copy_s)


def _link_times(
    result: FitResult,
    parts: Mapping[str, Part],
    split_layers: set[int],
    gpus: Mapping[str, GpuSpec],
    ub: int,
    first_gpu: GpuSpec | None,
    links: RigLinks | None,
    p: SpeedParams,
) -> tuple[float, float, float, float]:
    """(hops per token, per ubatch, all-reduces per token, per ubatch): a layer split's
    device boundaries, the host's round trips for its experts and (-nkvo without flash
    attention) its attention; a tensor split's all-reduces instead of hops between GPUs."""
    kinds = {d.name: d.kind for d in result.devices}
    hop_dec, hop_pre = layer_links(result, ub, gpus, kinds, p, links)
    hop_dec += len(split_layers) * 2 * p.host_hop_s
    nkvo_dec, nkvo_pre = _nkvo_hops(result, parts, ub, first_gpu, p)
    meta = result.meta_devices or tuple(gpus)
    if result.settings.split_mode == "tensor" and len(meta) > 1:
        # one meta device: no hops between layers, two all-reduces in each; a device
        # behind an RPC server takes part in each over TCP
        local = [gpus[n] for n in meta if n in gpus and kinds.get(n) != "rpc"]
        rpc = sum(1 for n in meta if kinds.get(n) == "rpc")
        reduce_dec, reduce_pre = tensor_links(result, local, ub, p, links, rpc=rpc)
        return nkvo_dec, nkvo_pre, reduce_dec, reduce_pre
    return hop_dec + nkvo_dec, hop_pre + nkvo_pre, 0.0, 0.0


@dataclass(frozen=True, slots=True)
class _Rig:
    """What a prediction knows of the rig beyond the placement."""

    host: HostSpec
    threads_batch: int | None
    backends: Mapping[str, str]
    pcie: Mapping[str, tuple[int | None, int | None]]
    bandwidth: Mapping[str, float]
    clocks: Mapping[str, Clocks]


@dataclass(frozen=True, slots=True)
class _Devices:
    times: dict[str, Times]
    gpus: dict[str, GpuSpec]
    described: dict[str, tuple[str, bool]]  # name -> (what it is, assumed)


def _parts(
    model: GgufModel, result: FitResult, depth: int, prompt_tokens: int, ub: int, p: SpeedParams
) -> tuple[dict[str, Part], set[int]]:
    """Each device's work, and the GPU layers with weights on the host. -sm tensor: the
    estimate places the meta device's layers on its first GPU; each GPU of it runs its share
    of them, the share of the weights -ts gave it (even by default)."""
    tiles = Tiles(ub, p.tile_tokens, p.mmvq_max_batch)
    parts: dict[str, Part] = {}
    split_layers = add_weights(model, result, tiles, p.quant_slowdown, parts, p.expert_skew)
    add_layers_and_attention(result, depth, prompt_tokens, ub, p.act_passes, parts, split_layers)
    meta = result.meta_devices
    if len(meta) > 1 and meta[0] in parts:
        whole = parts.pop(meta[0])
        held = {d.name: d.weights_bytes for d in result.devices if d.name in meta}
        total = sum(held.values())
        for name in meta:
            parts[name] = _share(whole, held.get(name, 0) / total if total else 1 / len(meta))
    return parts, split_layers


def _device_times(
    result: FitResult,
    parts: Mapping[str, Part],
    ub: int,
    rig: _Rig,
    notes: list[str],
    p: SpeedParams,
) -> _Devices:
    """Every device's own times, in llama.cpp's device order (the host last)."""
    by_name = {d.name: d for d in result.devices}
    order = [d.name for d in result.devices if d.name in parts]
    order += [n for n in parts if n not in by_name]
    flash = result.resolved.flash_attn
    gpus: dict[str, GpuSpec] = {}
    times: dict[str, Times] = {}
    described: dict[str, tuple[str, bool]] = {}
    host = rig.host
    for name in order:
        tot = parts[name]
        est = by_name.get(name)
        kind = est.kind if est else ("cpu" if name == CPU else "cuda")
        if kind == "cpu" or (kind == "rpc" and rig.backends.get(name, "cuda") == "cpu"):
            times[name] = host_times(host, tot, ub, rig.threads_batch, p)
            described[name] = (f"host CPU, {host.mem_gbs:g} GB/s ({host.mem_source})", False)
            continue
        desc = est.description if est and kind == "cuda" else ""
        g, assumed = _device_gpu(name, desc, rig.pcie, rig.bandwidth, notes)
        if host.unified and not g.unified:  # --host unified: the GPUs read the host's memory
            g = replace(g, unified=True)
        gpus[name] = g
        times[name] = gpu_times(g, tot, flash, ub, p, rig.clocks.get(name))
        described[name] = (g.name, assumed)
    return _Devices(times, gpus, described)


def _nkvo_hops(
    result: FitResult, parts: Mapping[str, Part], ub: int, g: GpuSpec | None, p: SpeedParams
) -> tuple[float, float]:
    """-nkvo without flash attention: each GPU layer's Q, K and V cross to the host, where
    its attention runs, and the attention's output comes back."""
    host = parts.get(CPU)
    if result.settings.kv_offload or result.resolved.flash_attn or host is None or g is None:
        return 0.0, 0.0
    gpu_layers = sum(1 for d in result.layer_devices[:-1] if d != CPU)
    m = result.model
    width = (m.n_head + 2 * m.n_head_kv) * m.head_dim + m.n_head * m.head_dim
    per_token = width * ACT_BYTES / (pcie_gbs(g) * 1e9 * p.pcie_eff)
    return (
        gpu_layers * (2 * p.host_hop_s + per_token),
        gpu_layers * (2 * p.host_hop_s + per_token * ub),
    )


def _calibrated(cal: Calibration, t: Times, gpu: bool) -> Times:
    """A device's times scaled by the rig's measurements: its own work by the GPU's or
    the host's scales, its copies across the link by the copies' scale; its fixed parts
    alike."""
    work_dec, work_pre = cal.scales(gpu)
    dec = (t.decode_s - t.copy_decode_s) * work_dec + t.copy_decode_s * cal.copy
    pre = (t.prefill_s - t.copy_prefill_s) * work_pre + t.copy_prefill_s * cal.copy
    return replace(
        t,
        decode_s=dec,
        prefill_s=pre,
        decode_fixed_s=t.decode_fixed_s * work_dec,
        prefill_fixed_s=t.prefill_fixed_s * work_pre,
        copy_decode_s=t.copy_decode_s * cal.copy,
        copy_prefill_s=t.copy_prefill_s * cal.copy,
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


def _share(part: Part, fraction: float) -> Part:
    """A ``fraction`` of a device's work (its layer counts kept)."""
    out = Part()
    for f in fields(Part):
        v = getattr(part, f.name)
        if isinstance(v, float):
            v = v * fraction
        elif isinstance(v, dict):
            v = {k: x * fraction for k, x in v.items()}
        setattr(out, f.name, v)
    return out


def _total(
    speeds: list[DeviceSpeed],
    links: tuple[float, float, float, float],
    result: FitResult,
    sizes: tuple[int, int, int],
    notes: list[str],
    host: HostSpec,
) -> SpeedEstimate:
    """Devices take turns on a token (and on a ubatch) in a layer split, pipelining the
    ubatches of each ``-b`` batch of a long prompt; in a tensor split they work on a token at
    once (the slowest bounds) and take turns on a ubatch. ``links``: (hops per token, per
    ubatch, all-reduces per token, per ubatch); ``sizes``: (depth, ubatch, prompt tokens)."""
    hop_dec, hop_pre, reduce_dec, reduce_pre = links
    depth, ub, prompt_tokens = sizes
    link_dec, link_pre = hop_dec + reduce_dec, hop_pre + reduce_pre
    gpu_speeds = [s for s in speeds if s.name != CPU]
    n_ub = -(-prompt_tokens // ub)
    if result.settings.split_mode == "tensor" and len(gpu_speeds) > 1:
        host_ms = [s for s in speeds if s.name == CPU]
        total_dec_s = (
            max(s.decode_ms for s in gpu_speeds) + sum(s.decode_ms for s in host_ms)
        ) / 1e3 + link_dec
        # a prompt's ubatch gains nothing from the split in llama.cpp's own tables (the
        # GPUs' shares do not overlap): they are priced one after another
        per_ub = [s.prefill_ms / 1e3 for s in (*gpu_speeds, *host_ms)]
        pre_total = n_ub * (sum(per_ub) + link_pre)
    else:
        total_dec_s = sum(s.decode_ms for s in speeds) / 1e3 + link_dec
        per_ub = [s.prefill_ms / 1e3 for s in speeds]
        per_batch = max(1, result.resolved.n_batch // ub)
        pre_total = prompt_s(per_ub, link_pre, n_ub, per_batch, result.pipeline_parallel)
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
        decode_tps_full=1.0 / total_dec_s if total_dec_s > 0 else 0.0,  # (at depth)
        notes=tuple(dict.fromkeys(notes)),
        host=host.describe(),
        reduce_decode_ms=reduce_dec * 1e3,
        reduce_prefill_ms=reduce_pre * 1e3,
    )


def speed_to_json(s: SpeedEstimate) -> dict[str, object]:
    """The ``speed`` object of ``fit --json`` and of each ``quant --json`` row."""
    return {
        "decode_tps": round(s.decode_tps, 1),
        "prefill_tps": round(s.prefill_tps, 1),
        **fields_of(s, "bound prefill_bound depth"),
        "decode_tps_full_ctx": round(s.decode_tps_full, 1),
        **fields_of(s, "prompt_tokens n_ubatch"),
        "link_decode_ms": round(s.link_decode_ms, 4),
        "link_prefill_ms": round(s.link_prefill_ms, 4),
        "reduce_decode_ms": round(s.reduce_decode_ms, 4),
        "reduce_prefill_ms": round(s.reduce_prefill_ms, 4),
        **fields_of(s, "host calibrated"),
        "devices": [
            {
                **fields_of(d, "name description"),
                "decode_ms": round(d.decode_ms, 4),
                "prefill_ms": round(d.prefill_ms, 4),
                **fields_of(d, "bound prefill_bound decode_bytes"),
                "copy_decode_ms": round(d.copy_decode_ms, 4),
                "copy_prefill_ms": round(d.copy_prefill_ms, 4),
                "assumed": d.assumed,
            }
            for d in s.devices
        ],
        "notes": list(s.notes),
    }


def speed_line(s: SpeedEstimate, *, fits: bool = True) -> str:
    """One line for the text report and the fit view: devices that take the same time per
    token said together (``CUDA1-6 0.49 ms``), a device's bound only where it is not the
    whole's; "(if it fit)" for settings that do not fit."""
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
        f"speed{'' if fits else ' (if it fit)'}: decode ~{s.decode_tps:.0f} t/s{depth} "
        f"({s.bound}-bound; {parts}{link}), "
        f"~{s.decode_tps_full:.0f} t/s at a full context; prompt ~{s.prefill_tps:.0f} t/s "
        f"({s.prompt_tokens} tokens, {s.prefill_bound}-bound, -ub {s.n_ubatch}){cal}"
    )

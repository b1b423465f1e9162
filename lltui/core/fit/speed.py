"""How fast a placement runs: predicted decode and prompt-processing tokens/s, per device and
for the whole split, from where :mod:`.placement` put every weight and KV cell.

Decode (one sequence, batch 1, at a given depth) reads, per token, every weight of the
layers a device holds (of expert tensors only ``n_expert_used / n_expert``; of the input
embeddings one row) and the KV cells up to the depth: ``bytes / (bandwidth x efficiency)``
plus a fixed cost per layer (kernel launches and the synchronisation between them). Layers
run one device after another (layer split), so the per-device times add, plus a hop on the
link between devices (PCIe, NVLink, the network to an RPC server, or the host for weights
kept on the CPU).

Prompt processing (``-ub`` tokens at a time) is compute-bound on a GPU: ``2 x active params
x tokens`` plus attention, against the tensor throughput of the path llama.cpp takes (MMQ on
INT8 tensor cores for quantized weights, cuBLAS FP16 for F16/BF16) times an efficiency;
each device also streams its weights once per ubatch, and the larger of the two times
applies. Weights left on the host are copied to the GPU for each ubatch of 32 tokens or more
(llama.cpp offloads large batches), so those are link-bound.

The efficiencies are calibrated on published llama-bench numbers (:data:`CALIBRATION`); the
GPU facts come from the one GPU table, :data:`lltui.core.fit.devices_spec.GPU_TABLE`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from itertools import pairwise
from typing import TYPE_CHECKING

from lltui.core.fit.common import CPU
from lltui.core.fit.devices_spec import GpuModel, gpu_specs
from lltui.core.fit.ggml_types import type_info
from lltui.core.fit.results import DeviceSpeed, FitResult, SpeedEstimate
from lltui.core.topo.links import NVLINK_BY_CC, NVLINK_UNKNOWN, PCIE_GBS_PER_LANE

if TYPE_CHECKING:
    from lltui.core.fit.gguf_model import GgufModel

MEMORY, COMPUTE, LINK = "memory", "compute", "link"

# Fraction of the datasheet bandwidth batch-1 decode reaches (llama.cpp's MMVQ kernels),
# by compute capability. HBM parts reach far less of theirs: one token's matrix-vector
# products do not keep enough loads in flight to fill HBM (see CALIBRATION).
DECODE_EFFICIENCY: dict[tuple[int, int], float] = {
    (6, 0): 0.6,
    (6, 1): 0.65,
    (7, 0): 0.55,
    (7, 5): 0.7,
    (8, 0): 0.35,
    (8, 6): 0.75,
    (8, 9): 0.85,
    (9, 0): 0.33,
    (10, 0): 0.3,
    (12, 0): 0.8,
}
DECODE_EFFICIENCY_DEFAULT = 0.6
# Fraction of the INT8 tensor (or DP4A) rate MMQ reaches at -ub 512; MMQ uses mma.sync
# tiles, not Hopper's or Blackwell's wider instructions, hence the low datacenter numbers.
MMQ_EFFICIENCY: dict[tuple[int, int], float] = {
    (8, 0): 0.12,
    (9, 0): 0.07,
    (10, 0): 0.05,
}
MMQ_EFFICIENCY_DEFAULT = 0.22
F16_EFFICIENCY = 0.4  # cuBLAS GEMM on FP16 tensor cores, of the FP16-accumulate rate
LAYER_OVERHEAD_S = 30e-6  # per layer and token on a GPU: launches, syncs (fit on 6000 Ada)

# The host: weights kept on the CPU are read at its memory bandwidth (decode). Not
# measured here (core has no psutil): a dual-channel DDR5 desktop, as llama.cpp's CPU
# backend reaches it.
HOST_BANDWIDTH_GBS = 60.0
HOST_EFFICIENCY = 0.7
HOST_GFLOPS = 1000.0  # what the CPU backend does for the batches it keeps (< 32 tokens)

# Links: per-hop latency (a copy and a sync) and bandwidth where no better is known.
PCIE_HOP_S = 15e-6
NVLINK_HOP_S = 8e-6
HOST_HOP_S = 20e-6  # activations to the host and back for layers or experts it runs
RPC_HOP_S = 500e-6  # a graph computed on an RPC server: round trips over TCP
RPC_GBS = 1.25  # 10 Gb/s Ethernet
PCIE_DEFAULT = (4, 16)
OFFLOAD_MIN_BATCH = 32  # llama.cpp copies host weights to the GPU for batches this big
ACT_BYTES = 4  # f32 activations cross each hop
ASSUMED_GPU = "NVIDIA GeForce RTX 3090"  # for a GPU given only by its memory size

# Published llama-bench results the efficiencies were fitted to: (GPU as NVML names it,
# model, file GiB, test, tokens/s, where). Llama-2-7B Q4_0 is 3.56 GiB, 6.74 B params.
CALIBRATION: tuple[tuple[str, str, float, str, float, str], ...] = (
    (
        "NVIDIA RTX 6000 Ada Generation",
        "llama 8B Q4_0",
        4.33,
        "tg128",
        168.9,
        "github.com/ggml-org/llama.cpp/pull/19053",
    ),
    (
        "NVIDIA RTX 6000 Ada Generation",
        "llama 3B Q4_K_M",
        1.87,
        "tg128",
        315.5,
        "github.com/ggml-org/llama.cpp/pull/19053",
    ),
    (
        "NVIDIA RTX 6000 Ada Generation",
        "llama 8B Q4_0",
        4.33,
        "pp8096",
        8008.0,
        "github.com/ggml-org/llama.cpp/pull/19053",
    ),
    (
        "NVIDIA GeForce RTX 4090",
        "llama 8B Q4_0",
        4.33,
        "pp512",
        10358.0,
        "github.com/ggml-org/llama.cpp/pull/7676",
    ),
    (
        "NVIDIA GeForce RTX 4090",
        "llama 7B F16",
        12.55,
        "pp512",
        11048.0,
        "github.com/ggml-org/llama.cpp/pull/4766",
    ),
    (
        "NVIDIA GeForce RTX 4090",
        "llama 7B Q8_0",
        6.67,
        "tg128",
        98.1,
        "github.com/ggml-org/llama.cpp/pull/4766",
    ),
    ("Tesla P40", "llama 7B Q4_0", 3.56, "tg128", 56.8, "github.com/ggml-org/llama.cpp/pull/4766"),
    ("Tesla P40", "llama 7B Q4_0", 3.56, "pp512", 912.0, "github.com/ggml-org/llama.cpp/pull/4766"),
    # the CUDA scoreboard (llama.cpp discussion 15013), llama 7B Q4_0 tg128, as ranges
    ("NVIDIA GeForce RTX 4090", "llama 7B Q4_0", 3.56, "tg128", 170.0, "discussion 15013"),
    ("NVIDIA GeForce RTX 3090", "llama 7B Q4_0", 3.56, "tg128", 150.0, "discussion 15013"),
    ("NVIDIA A100-SXM4-80GB", "llama 7B Q4_0", 3.56, "tg128", 160.0, "discussion 15013"),
    ("NVIDIA H100 80GB HBM3", "llama 7B Q4_0", 3.56, "tg128", 220.0, "discussion 15013"),
)


class _Part:
    """What one device does per token and per ubatch (a scratch total, filled in place)."""

    __slots__ = (
        "decode_bytes",
        "decode_flops",
        "layers",
        "prefill_bytes",
        "prefill_f16_flops",
        "prefill_int8_flops",
    )

    def __init__(self) -> None:
        self.decode_bytes = 0.0
        self.decode_flops = 0.0
        self.prefill_bytes = 0.0  # weights streamed once per ubatch
        self.prefill_int8_flops = 0.0
        self.prefill_f16_flops = 0.0
        self.layers = 0


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


def _gpu(description: str) -> tuple[GpuModel, bool]:
    hit = gpu_specs(description) if description else None
    if hit is not None:
        return hit, False
    fallback = gpu_specs(ASSUMED_GPU)
    assert fallback is not None
    return fallback, True


def _link(a: GpuModel, b: GpuModel) -> tuple[float, float, str]:
    """(latency s, GB/s, kind) of the hop between two local GPUs. NVLink only where it is on
    the board (SXM/HGX: 6 or more links); a bridge is optional and not assumed."""
    if a.nvlink_links >= 6 and b.nvlink_links >= 6:
        nvl = NVLINK_BY_CC.get(min(a.cc, b.cc), NVLINK_UNKNOWN)
        return NVLINK_HOP_S, nvl.gbs_per_link * min(a.nvlink_links, b.nvlink_links), "NVLink"
    gen = min(a.pcie_gen, b.pcie_gen)
    width = min(a.pcie_width, b.pcie_width)
    lane = PCIE_GBS_PER_LANE.get(gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]])
    return PCIE_HOP_S, lane * width, f"PCIe {gen}.0 x{width}"


def _pcie_gbs(g: GpuModel) -> float:
    return PCIE_GBS_PER_LANE.get(g.pcie_gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]]) * g.pcie_width


def estimate_speed(
    model: GgufModel,
    result: FitResult,
    *,
    depth: int = 0,
    prompt_tokens: int = 512,
    host_bandwidth_gbs: float = HOST_BANDWIDTH_GBS,
    backends: Mapping[str, str] | None = None,
    pcie: Mapping[str, tuple[int | None, int | None]] | None = None,
) -> SpeedEstimate:
    """Tokens/s of ``result``'s placement. ``depth``: KV cells already filled when decoding
    (llama-bench's tg128 is depth 0); ``prompt_tokens``: the prompt pp is timed on (pp512).
    ``backends``: device name -> "cuda" or "cpu" for RPC servers (default cuda); ``pcie``:
    device name -> (generation, width) of the link a present GPU reports (else the table's)."""
    m = result.model
    r = result.resolved
    ub = max(1, min(r.n_ubatch, prompt_tokens))
    tensors = {t.name: t for t in model.tensors}
    expert_frac = m.n_expert_used / m.n_expert if m.n_expert and m.n_expert_used else 1.0
    # experts touched by a ubatch: 1 - (1 - used/n)^ub of them
    expert_frac_ub = 1.0 - (1.0 - expert_frac) ** ub if expert_frac < 1.0 else 1.0
    n_layer = max(1, m.n_layer)
    parts: dict[str, _Part] = {}
    layer_dev = result.layer_devices
    # each layer's home: where its attention runs; hops where its tensors leave it
    split_layers: set[int] = set()

    def part(dev: str) -> _Part:
        got = parts.get(dev)
        if got is None:
            got = parts[dev] = _Part()
        return got

    # weights summed by (device, kind) first: one pass that only adds
    # kind: 0 input rows, 1 dense matrix, 2 expert stack, 3 vector; +4 when quantized
    sums: dict[tuple[str, int], list[float]] = {}
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
        got = sums.get((p.device, wkind))
        if got is None:
            sums[(p.device, wkind)] = [p.nbytes / rows, float(n_el)]
        else:
            got[0] += p.nbytes / rows
            got[1] += n_el
    for (dev, wkind), (nbytes, elements) in sums.items():
        acc = part(dev)
        base = wkind & 3
        if base == 0:  # input embeddings: one row per token (nbytes already per row)
            acc.decode_bytes += nbytes
            continue
        frac = expert_frac if base == 2 else 1.0
        frac_ub = expert_frac_ub if base == 2 else 1.0
        flops = 2.0 * elements * frac if base != 3 else 0.0
        acc.decode_bytes += nbytes * frac
        acc.decode_flops += flops
        acc.prefill_bytes += nbytes * frac_ub
        if wkind & 4:
            acc.prefill_int8_flops += flops * ub
        else:
            acc.prefill_f16_flops += flops * ub
    # KV: cells up to the depth (a sliding window reads at most its own cells)
    for cache in result.kv:
        if not cache.cells:
            continue
        read_cells = min(max(depth, 1), cache.cells)
        for buf, nbytes in cache.buffers:
            dev = CPU if buf.startswith("CPU") else buf
            part(dev).decode_bytes += nbytes * read_cells / cache.cells
    # attention FLOPs per token: QK^T and PV over the cells, per layer
    attn_per_cell = 4.0 * m.n_head * m.head_dim
    for dev in layer_dev[:n_layer]:
        acc = part(dev)
        acc.decode_flops += attn_per_cell * max(depth, 1)
        acc.prefill_f16_flops += attn_per_cell * ub * (depth + ub / 2)
        acc.layers += 1

    kv_full: dict[str, float] = {}
    for cache in result.kv:
        if not cache.cells:
            continue
        cells = min(r.n_ctx_seq, cache.cells) - min(max(depth, 1), cache.cells)
        for buf, nbytes in cache.buffers:
            dev = CPU if buf.startswith("CPU") else buf
            kv_full[dev] = kv_full.get(dev, 0.0) + nbytes * max(0, cells) / cache.cells

    by_name = {d.name: d for d in result.devices}
    order = [d.name for d in result.devices if d.name in parts] + [
        n for n in parts if n not in by_name
    ]
    speeds: list[DeviceSpeed] = []
    notes: list[str] = []
    gpus: dict[str, GpuModel] = {}
    extra_full_s = 0.0
    offload_gpu: GpuModel | None = None
    for name in order:
        tot = parts[name]
        est = by_name.get(name)
        kind = est.kind if est else ("cpu" if name == CPU else "cuda")
        backend = (backends or {}).get(name, "cuda")
        if kind == "cpu" or (kind == "rpc" and backend == "cpu"):
            bw = host_bandwidth_gbs * 1e9 * HOST_EFFICIENCY
            dec = tot.decode_bytes / bw
            pre_compute = (tot.prefill_int8_flops + tot.prefill_f16_flops) / (HOST_GFLOPS * 1e9)
            speeds.append(
                DeviceSpeed(
                    name,
                    f"host memory, {host_bandwidth_gbs:g} GB/s assumed",
                    dec * 1e3,
                    pre_compute * 1e3,
                    MEMORY,
                    COMPUTE,
                    int(tot.decode_bytes),
                )
            )
            extra_full_s += kv_full.get(name, 0.0) / bw
            continue
        g, assumed = _gpu(est.description if est and kind == "cuda" else "")
        gen, width = (pcie or {}).get(name, (None, None))
        if gen or width:
            g = replace(g, pcie_gen=gen or g.pcie_gen, pcie_width=width or g.pcie_width)
        gpus[name] = g
        offload_gpu = offload_gpu or g
        if assumed:
            notes.append(f"{name}: GPU model not known; {g.name}'s numbers assumed")
        bw = g.bandwidth_gbs * 1e9 * DECODE_EFFICIENCY.get(g.cc, DECODE_EFFICIENCY_DEFAULT)
        mmq = g.int8_tops * 1e12 * MMQ_EFFICIENCY.get(g.cc, MMQ_EFFICIENCY_DEFAULT)
        f16 = g.fp16_tflops * 1e12 * F16_EFFICIENCY
        dec_mem = tot.decode_bytes / bw
        dec_cmp = tot.decode_flops / f16
        overhead = tot.layers * LAYER_OVERHEAD_S
        dec = max(dec_mem, dec_cmp) + overhead
        pre_mem = tot.prefill_bytes / bw
        pre_cmp = tot.prefill_int8_flops / mmq + tot.prefill_f16_flops / f16
        pre = max(pre_mem, pre_cmp) + overhead
        extra_full_s += kv_full.get(name, 0.0) / bw
        speeds.append(
            DeviceSpeed(
                name,
                g.name,
                dec * 1e3,
                pre * 1e3,
                MEMORY if dec_mem >= dec_cmp else COMPUTE,
                COMPUTE if pre_cmp >= pre_mem else MEMORY,
                int(tot.decode_bytes),
                assumed,
            )
        )

    # host weights in a prompt's ubatch: copied to the GPU over PCIe (ub >= 32)
    host = next((s for s in speeds if s.name == CPU), None)
    if (
        host is not None
        and ub >= OFFLOAD_MIN_BATCH
        and offload_gpu is not None
        and parts[CPU].prefill_bytes > 0
    ):
        copy_s = parts[CPU].prefill_bytes / (_pcie_gbs(offload_gpu) * 1e9)
        g = offload_gpu
        mmq = g.int8_tops * 1e12 * MMQ_EFFICIENCY.get(g.cc, MMQ_EFFICIENCY_DEFAULT)
        f16 = g.fp16_tflops * 1e12 * F16_EFFICIENCY
        cmp_s = parts[CPU].prefill_int8_flops / mmq + parts[CPU].prefill_f16_flops / f16
        pre = max(copy_s, cmp_s)
        speeds = [
            DeviceSpeed(
                s.name,
                s.description,
                s.decode_ms,
                pre * 1e3,
                s.bound,
                LINK if copy_s >= cmp_s and copy_s > 0 else COMPUTE,
                s.decode_bytes,
            )
            if s is host
            else s
            for s in speeds
        ]

    # hops: between consecutive layer homes, and out to the host and back for split layers
    link_dec = link_pre = 0.0
    homes = [d for d in layer_dev if d]
    act = ACT_BYTES * max(1, m.n_embd)
    for a, b in pairwise(homes):
        if a == b:
            continue
        lat, gbs = _hop(a, b, gpus, by_name)
        link_dec += lat + act / (gbs * 1e9)
        link_pre += lat + act * ub / (gbs * 1e9)
    link_dec += len(split_layers) * 2 * HOST_HOP_S

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
    a: str, b: str, gpus: Mapping[str, GpuModel], by_name: Mapping[str, object]
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
    """One line for the text report and the fit view."""
    parts = ", ".join(
        f"{d.name} {d.decode_ms:.2f} ms ({d.bound})" for d in s.devices if d.decode_ms >= 0.005
    )
    link = f", links {s.link_decode_ms:.2f} ms" if s.link_decode_ms >= 0.005 else ""
    return (
        f"speed: decode ~{s.decode_tps:.0f} t/s ({s.bound}-bound; {parts}{link}), "
        f"~{s.decode_tps_full:.0f} t/s at a full context; prompt ~{s.prefill_tps:.0f} t/s "
        f"({s.prefill_bound}-bound, -ub {s.n_ubatch})"
    )

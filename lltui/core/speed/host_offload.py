"""What the host CPU's share costs (:class:`~lltui.core.hardware.host.HostSpec`: cores,
vector unit, clock, memory bandwidth): the layers and experts left on it, and for a ubatch
of 32 tokens or more the copy of its weights to the first GPU (ggml's op offload).

For a token the CPU works on its weights itself: at the lesser of its memory bandwidth,
what its cores stream and what their dot products compute, plus dispatching each layer's
ops and the barriers between its threads. For a ubatch of ``OFFLOAD_MIN_BATCH`` tokens or
more llama.cpp hands the matmuls of host weights to the first GPU and copies the weights
there first, every ubatch (of an expert stack only the experts the ubatch routes to): the
copy crosses PCIe (nothing moves on one memory: GB10, Jetson), then the GPU works; the
attention of layers whose KV is on the host stays on the CPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from lltui.core.hardware.gpus import GpuSpec
from lltui.core.hardware.host import HostSpec
from lltui.core.speed.gpu import COMPUTE, LINK, MEMORY, Times, arch, matmul_s, pcie_gbs
from lltui.core.speed.params import SpeedParams
from lltui.core.speed.parts import Part


def host_rate(host: HostSpec, kind: str, eff: Mapping[str, float]) -> float:
    """Operations per second all its threads reach on one kind of weight."""
    f32, int8 = host.rates
    per_cycle = f32 if kind == "float" else int8
    return host.workers * host.ghz * 1e9 * per_cycle * eff.get(kind, 0.2)


def host_stream_gbs(host: HostSpec, p: SpeedParams) -> float:
    """GB/s its threads stream: the memory's share, or what so many cores pull at most."""
    cores = host.workers * p.host_core_gbs * host.ghz / 3.0
    eff = p.host_lpddr_eff if host.lpddr else p.host_bw_eff
    return min(host.mem_gbs * eff, cores)


def host_times(
    host: HostSpec, tot: Part, ub: int, threads_batch: int | None, p: SpeedParams
) -> Times:
    """The CPU's seconds for its share of a token and (computing it itself) of a ubatch."""
    stream = host_stream_gbs(host, p) * 1e9
    dec_mem = tot.decode_bytes / stream
    dec_cmp = sum(
        2.0 * n / host_rate(host, kind, p.host_decode_eff) for kind, n in tot.decode_elems.items()
    )
    f32 = host.rates[0] * host.workers * host.ghz * 1e9
    attn_dec = tot.attn_decode_flops / (f32 * p.host_attn_eff)
    attn_dec += _cells_s(tot.attn_decode_cells, tot.attn_cell_elems, host, p.host_attn_dec_cycles)
    # per layer: dispatching its ops, and with several threads the barriers between them
    sync = p.host_layer_s * (1.0 - 1.0 / host.workers)
    fixed = (tot.layers + tot.split_layers) * (p.host_op_layer_s + sync)
    batch_host = host.with_threads(threads_batch)
    fill = ub / (ub + 8.0)  # the batched kernels' tiles: full from a few dozen tokens
    pre_cmp = sum(
        flops / (host_rate(batch_host, kind, p.host_prefill_eff) * fill)
        for kind, flops in tot.prefill_flops.items()
    )
    pre_mem = tot.prefill_bytes / stream
    bf32 = batch_host.rates[0] * batch_host.workers * batch_host.ghz * 1e9
    attn_pre = tot.attn_flops / (bf32 * p.host_attn_eff) + tot.attn_kv_bytes / stream
    attn_pre += _cells_s(tot.attn_cells, tot.attn_cell_elems, batch_host, p.host_attn_pre_cycles)
    attn_pre += _cells_s(
        tot.attn_cells_by_cell, tot.attn_cell_elems, batch_host, p.host_attn_dec_cycles
    )
    return Times(
        max(dec_mem, dec_cmp) + attn_dec + fixed,
        max(pre_cmp, pre_mem) + attn_pre + fixed,
        MEMORY if dec_mem >= dec_cmp else COMPUTE,
        COMPUTE if pre_cmp >= pre_mem else MEMORY,
        fixed,
        fixed,
    )


def _cells_s(cells: float, elems: int, host: HostSpec, cycles: tuple[float, float]) -> float:
    """Seconds the CPU's attention spends on ``cells`` (cells times query heads) besides its
    flops at the f32 rate: ``cycles`` each, and each per SIMD vector of its ``elems`` K and V
    elements. ggml's flash attention on the CPU visits a token's cells one by one: an expf,
    the online softmax's bookkeeping and three calls a cell, K and V read from F16 (or
    dequantized) and the accumulator converted back and forth a vector; a ubatch's tiled
    path pays its softmax's share a cell."""
    if not cells:
        return 0.0
    lanes = host.rates[0] / 4.0  # f32 lanes of its vector unit (two FMA pipes)
    per_cell = cycles[0] + elems / lanes * cycles[1]
    return cells * per_cell / (host.workers * host.ghz * 1e9)


def copy_seconds(g: GpuSpec, nbytes: float, pinned: float, p: SpeedParams) -> float:
    """Seconds to copy ``nbytes`` of host memory to GPU ``g`` (``pinned`` of them
    page-locked, the rest staged by the driver through a pinned bounce buffer)."""
    rate = pcie_gbs(g) * 1e9 * p.pcie_eff
    return pinned / rate + (nbytes - pinned) / (rate * p.pageable_eff)


def offloaded_prefill_s(
    host: HostSpec, tot: Part, g: GpuSpec, ub: int, threads: int | None, p: SpeedParams
) -> tuple[float, float, str]:
    """A ubatch with the host's weights copied to GPU ``g``: (seconds, of them the copy,
    bound). The copy, then the GPU's matmuls; the attention of layers whose KV is on the
    host stays on the CPU."""
    # one memory (GB10, Jetson): the GPU reads the host's weights where they are
    copy_s = 0.0 if g.unified else copy_seconds(g, tot.prefill_bytes, tot.prefill_pinned_bytes, p)
    bw = g.bandwidth_gbs * 1e9 * arch(g, p).decode
    gpu_s = max(matmul_s(g, tot, p), tot.prefill_bytes / bw if g.unified else 0.0)
    cpu_only = replace(tot, prefill_flops={}, prefill_bytes=0.0)
    cpu_s = host_times(host, cpu_only, ub, threads, p).prefill_s
    bound = LINK if copy_s >= gpu_s and copy_s > 0 else COMPUTE
    return copy_s + gpu_s + cpu_s, copy_s, bound

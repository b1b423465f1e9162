"""What one GPU's share of a token (decode) and of a ubatch (prompt) costs, from what
:mod:`.parts` summed for it: bytes at its memory bandwidth, matmuls on llama.cpp's kernel
path at its tensor rate, attention at its depth, fixed costs per layer; all slowed where
the GPU is held below its full clocks (a power limit under what the work draws, a clock
cap).

A power cap binds only when it is below what the work draws at full clocks: a prompt's
matmuls draw about the card's default limit, a decode (memory-bound) well under it. Under
a binding cap the clock falls until the dynamic power, which grows about as the cube of
the clock (the voltage rises with it), fits what the cap leaves over the static power.
"""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.hardware.gpus import GpuSpec
from lltui.core.hardware.links import PCIE_GBS_PER_LANE
from lltui.core.speed.params import ARCH_DEFAULT, ArchSpeed, SpeedParams
from lltui.core.speed.parts import Part

MEMORY, COMPUTE, LINK = "memory", "compute", "link"
PCIE_DEFAULT = (4, 16)
MIN_CLOCK_SHARE = 0.2  # a cap that would leave less is taken as this (the GPU's floor)
# MMQ's tile widths in tokens, from ggml-cuda's mmq-config tables: a ubatch runs the narrowest
# tile that spans it (the widest where none does), and a tile's work, so a GEMM's partial last
# wave, grows with its width. By ISA prefix for AMD (its rows have no CUDA cc).
MMQ_TILES_MMA = (8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128)  # Volta on ("ampere")
MMQ_TILES_DP4A = (8, 16, 24, 32, 40, 48, 64)  # before Volta; AMD's GCN and RDNA2 alike
MMQ_TILES_AMD: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("gfx115", (16, 32, 48, 64, 80, 96, 112, 128)),  # RDNA3.5
    ("gfx11", (16, 32, 48, 64, 96, 128)),  # RDNA3
    ("gfx12", (16, 32, 48, 64, 80, 96, 112, 128)),  # RDNA4
    ("gfx908", (16, 32, 48, 64)),  # CDNA
    ("gfx90a", (16, 32, 48, 64)),
    ("gfx94", (16, 32, 48, 64)),
    ("gfx95", (16, 32, 48, 64)),
)
VOLTA_MMQ_MAX = 64  # Volta runs MMQ below this many tokens, cuBLAS (full tails) from it


@dataclass(frozen=True, slots=True)
class Times:
    """One device's seconds per token and per ubatch, and what bounds each."""

    decode_s: float
    prefill_s: float
    bound: str
    prefill_bound: str
    decode_fixed_s: float = 0.0  # of decode_s, what does not grow with the work (launches, syncs)
    prefill_fixed_s: float = 0.0  # of prefill_s, likewise per ubatch
    copy_decode_s: float = 0.0  # of decode_s, copies from host memory across the link
    copy_prefill_s: float = 0.0  # of prefill_s, likewise


@dataclass(frozen=True, slots=True)
class Clocks:
    """What a present GPU reports of its limits: the power limit it enforces now and the
    one it defaults to (W), and the highest SM clock it may run (MHz). None: not known
    (the catalog's default limit and boost clock are then taken)."""

    power_limit_w: float | None = None
    power_default_w: float | None = None
    max_sm_mhz: int | None = None


def arch(g: GpuSpec, p: SpeedParams) -> ArchSpeed:
    return p.arch.get(g.cc, ARCH_DEFAULT)


def pcie_gbs(g: GpuSpec) -> float:
    """What the link between the host and the GPU moves; a unified-memory device has no
    link: its memory."""
    if g.unified or not g.pcie_width:
        return g.bandwidth_gbs
    return PCIE_GBS_PER_LANE.get(g.pcie_gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]]) * g.pcie_width


def clock_share(g: GpuSpec, clocks: Clocks | None, draw: float, p: SpeedParams) -> float:
    """The share of its full clocks a GPU keeps for work that draws ``draw`` of its default
    power limit at full clocks (1.0: not held back)."""
    if clocks is None:
        return 1.0
    share = 1.0
    default = clocks.power_default_w or g.tdp_w
    limit = clocks.power_limit_w
    if limit and default and limit < draw * default:
        static = p.static_power * default
        spare = (limit - static) / (draw * default - static)
        share = spare ** (1 / 3) if spare > 0 else 0.0
    if clocks.max_sm_mhz and g.boost_sm_mhz and clocks.max_sm_mhz < g.boost_sm_mhz:
        share = min(share, clocks.max_sm_mhz / g.boost_sm_mhz)
    return max(MIN_CLOCK_SHARE, share)


def matmul_s(g: GpuSpec, tot: Part, p: SpeedParams) -> float:
    """Seconds of tensor-core work for a ubatch's matmuls: quantized weights on MMQ (or, on
    Volta, on cuBLAS after dequantizing), F16/BF16 weights on cuBLAS."""
    a = arch(g, p)
    f16 = g.fp16_tflops * 1e12 * a.f16
    if not a.mmq_path:
        return (tot.prefill_int8_flops + tot.prefill_f16_flops) / f16
    return tot.prefill_mmq_flops / (g.int8_tops * 1e12 * a.mmq) + tot.prefill_f16_flops / f16


def tensor_cores(g: GpuSpec) -> bool:
    """Whether a GPU has tensor cores: their FP16 rate is several times the FP32 one (a GTX
    16 or a Pascal card's FP16 is at most twice it)."""
    return not g.fp32_tflops or g.fp16_tflops > 3 * g.fp32_tflops


def attention_s(g: GpuSpec, tot: Part, flash: bool, ub: int, bw: float, p: SpeedParams) -> float:
    """A ubatch's attention over its cells: flash attention reads K/V once per tile of
    queries and runs on the tensor cores below their GEMM rate (without tensor cores, on the
    FP32 units its tiles accumulate on); without it the KQ scores (f32, per head, query and
    cell) go through memory several times."""
    if not tot.attn_flops:
        return 0.0
    f16 = (g.fp16_tflops if tensor_cores(g) else g.fp32_tflops or g.fp16_tflops) * 1e12
    kv_s = tot.attn_kv_bytes * -(-ub // p.fa_q_tile) / bw
    if flash:
        return max(tot.attn_flops / (f16 * p.fa_eff), kv_s)
    return tot.attn_flops / (f16 * arch(g, p).f16) + tot.attn_score_bytes * p.score_passes / bw


def tile_share(g: GpuSpec, ub: int) -> float:
    """A ubatch's GEMM tails (the launches' partial last waves) against a ubatch that fills
    MMQ's widest tile: a few dozen tokens leave short tails, not a full tile's."""
    if g.cc == (7, 0) and ub >= VOLTA_MMQ_MAX:
        return 1.0
    tiles: tuple[int, ...] = MMQ_TILES_MMA if g.cc >= (7, 0) else MMQ_TILES_DP4A
    if g.gfx:
        tiles = next((t for prefix, t in MMQ_TILES_AMD if g.gfx.startswith(prefix)), tiles)
    return next((w for w in tiles if w >= ub), tiles[-1]) / tiles[-1]


def overhead_s(g: GpuSpec, tot: Part, p: SpeedParams) -> float:
    """Fixed costs per token: kernels and syncs per layer, more for MoE routing, more again
    before Volta, where llama.cpp runs without CUDA graphs (its HIP build runs HIP graphs on
    every AMD GPU: GGML_HIP_GRAPHS is on by default)."""
    no_graphs = g.cc < (7, 0) and not g.gfx  # an AMD row's cc is (0, 0)
    per_layer = p.layer_s + (p.no_graph_layer_s if no_graphs else 0.0)
    return tot.layers * per_layer + tot.moe_layers * p.moe_layer_s


def kv_fetch_s(g: GpuSpec, tot: Part, p: SpeedParams) -> tuple[float, float]:
    """-nkvo with flash attention: (s per token, s per ubatch) of copying the K/V cells the
    attention reads from host memory, and the two graph splits each such layer adds."""
    if not tot.kv_host_layers:
        return 0.0, 0.0
    link = pcie_gbs(g) * 1e9 * p.pcie_eff * p.pageable_eff  # a plain host buffer
    syncs = tot.kv_host_layers * 2 * p.host_hop_s
    return tot.kv_host_bytes / link + syncs, tot.kv_host_prefill_bytes / link + syncs


def gpu_times(
    g: GpuSpec, tot: Part, flash: bool, ub: int, p: SpeedParams, clocks: Clocks | None = None
) -> Times:
    """One GPU's seconds for its share of a token and of a ubatch."""
    a = arch(g, p)
    dec_clock = clock_share(g, clocks, p.decode_power, p)
    pre_clock = clock_share(g, clocks, p.prefill_power, p)
    bw = g.bandwidth_gbs * 1e9 * a.decode
    dec_mem = (tot.decode_read_s_bytes + tot.decode_kv_bytes) / bw
    dec_cmp = (tot.decode_flops + tot.attn_decode_flops) / (g.fp16_tflops * 1e12 * a.f16)
    overhead = overhead_s(g, tot, p)
    fetch_dec, fetch_pre = kv_fetch_s(g, tot, p)
    pre_mem = tot.prefill_bytes / bw
    mmvq = ub <= p.mmvq_max_batch  # a few tokens: matrix-vector kernels, as in decode
    pre_cmp = 0.0 if mmvq else matmul_s(g, tot, p) / pre_clock
    tails = 0.0 if mmvq else tot.layers * p.prefill_layer_s * tile_share(g, ub)
    pre_fixed = overhead + tails + tot.act_bytes / bw
    attn = attention_s(g, tot, flash, ub, bw, p) / pre_clock
    pre_work = max(pre_mem, pre_cmp)
    dec_work = max(dec_mem, dec_cmp) / dec_clock
    bound = MEMORY if dec_mem >= dec_cmp else COMPUTE
    pre_bound = COMPUTE if pre_cmp >= pre_mem else MEMORY
    return Times(
        dec_work + overhead + fetch_dec,
        pre_work + pre_fixed + attn + fetch_pre,
        LINK if fetch_dec > dec_work else bound,
        LINK if fetch_pre > pre_work else pre_bound,
        overhead,
        overhead + tails,
        fetch_dec,
        fetch_pre,
    )

"""The speed model's numbers: what llama.cpp's kernels reach of each GPU architecture's
datasheet rates, and the few fixed costs (per layer, per hop, per copy) no datasheet gives.

Every value here is either physics (a datasheet fraction, a latency) or fitted by
``bench/speed_calibrate.py --fit`` to the 131 published llama-bench points marked "fit" in
tests/fixtures/llama_bench_published.json and to this project's own 13 CPU measurements
(tests/fixtures/cpu_bench_measured.json); the 441 "holdout" points (whole sources) only
check them. Fractions stay at or below 1; flash attention's is held at 0.2 or more (the
tensor cores do its work), the host's per-layer costs at what ~20 ops take.

Not fitted (no fit point measures them, or one rig cannot tell them apart from the rig):
the copies from host memory (page-locked at 0.8 of the PCIe rate, pageable at 0.85 of
that: what bare-metal rigs reach; ``lltui bench`` calibrates a rig's own), the tensor
split's all-reduce latencies (NCCL's and llama.cpp's published per-step costs), the
experts a batch reaches (llama.cpp's own log of gpt-oss-120b), the power model's shares
(a GPU's static power and what a decode and a prompt draw), and datacenter Blackwell (taken
as Hopper).
One :class:`SpeedParams` travels through a prediction, so the fitter changes a copy, never
a module global.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ArchSpeed:
    """What llama.cpp's CUDA kernels reach on one GPU architecture, as fractions of the
    catalog's datasheet numbers."""

    decode: float  # of the memory bandwidth, batch-1 matrix-vector products (MMVQ)
    mmq: float  # of the INT8 tensor (DP4A) rate, quantized matmuls with full tiles (MMQ)
    f16: float  # of the FP16 tensor rate, cuBLAS GEMM (F16/BF16 weights)
    mmq_path: bool = True  # False: quantized weights are dequantized to FP16 for cuBLAS


# By compute capability. HBM parts reach less of their bandwidth than GDDR ones: one token's
# matrix-vector products keep too few loads in flight for HBM's latency. Hopper and
# Blackwell datacenter parts run MMQ's mma.sync tiles, not their wider instructions, hence
# their low MMQ fractions. Unified LPDDR parts (Orin, GB10) are taken as GDDR ones.
ARCH_SPEED: dict[tuple[int, int], ArchSpeed] = {
    (6, 0): ArchSpeed(0.69, 0.343, 0.5),
    (6, 1): ArchSpeed(0.69, 0.343, 0.5),
    (6, 2): ArchSpeed(0.69, 0.343, 0.5),
    (7, 0): ArchSpeed(0.623, 0.2, 0.45, mmq_path=False),
    (7, 5): ArchSpeed(0.782, 0.18, 0.4),
    (8, 0): ArchSpeed(0.567, 0.137, 0.553),
    (8, 6): ArchSpeed(0.796, 0.307, 0.592),
    (8, 7): ArchSpeed(0.796, 0.307, 0.592),
    (8, 9): ArchSpeed(0.906, 0.3, 0.688),
    (9, 0): ArchSpeed(0.547, 0.147, 0.338),
    (10, 0): ArchSpeed(0.547, 0.147, 0.338),
    (10, 3): ArchSpeed(0.547, 0.147, 0.338),
    (11, 0): ArchSpeed(0.707, 0.321, 0.6),
    (12, 0): ArchSpeed(0.707, 0.321, 0.6),
    (12, 1): ArchSpeed(0.707, 0.321, 0.6),
}
ARCH_DEFAULT = ArchSpeed(0.6, 0.22, 0.4)
# k-quants and i-quants run a little below the simple block types, in decode (their
# unpacking costs instructions the memory pipe waits on) and in MMQ (more work per tile):
# (name part, decode factor, prefill factor).
QUANT_SLOWDOWN = (("iq", 0.85, 0.8), ("_k", 0.955, 0.726), ("mxfp4", 1.0, 0.545))

# What one CPU core's kernels reach, by weight kind, as a fraction of its vector unit's
# nominal int8 (quantized weights) or f32 (F16/BF16/F32 weights) rate: decode's dot products
# unpack every block for one token, the batched ones (-ub tokens, llamafile's tinyBLAS and
# the repacked Q4_0/IQ4_NL/Q8_0 kernels) reuse each unpacked block across many.
HOST_DECODE_EFF = {"q4": 0.16, "q8": 0.2, "k": 0.12, "float": 0.3}
HOST_PREFILL_EFF = {"q4": 0.14, "q8": 0.128, "k": 0.12, "float": 0.79}


@dataclass(frozen=True, slots=True)
class SpeedParams:
    """The fixed costs and efficiencies one prediction uses (see the module docstring)."""

    arch: dict[tuple[int, int], ArchSpeed] = field(default_factory=lambda: dict(ARCH_SPEED))
    quant_slowdown: tuple[tuple[str, float, float], ...] = QUANT_SLOWDOWN
    # --- a GPU ---
    layer_s: float = 36e-6  # per layer and token: kernel launches and syncs (CUDA graphs)
    moe_layer_s: float = 10e-6  # more per MoE layer: routing, top-k, gathers, more kernels
    no_graph_layer_s: float = 44e-6  # more per layer where CUDA graphs are off (before Volta)
    prefill_layer_s: float = 229e-6  # per layer and ubatch filling MMQ's widest tile: GEMM tails
    tile_tokens: float = 57.0  # tokens of a matrix at which MMQ tiles run half full
    mmvq_max_batch: int = 8  # up to this many tokens a matmul reads its weights once (MMVQ)
    act_passes: float = 24.3  # f32 vectors of n_embd per token a layer's small kernels stream
    fa_eff: float = 0.2  # flash attention, of the FP16 tensor rate (prompt at depth)
    fa_q_tile: int = 64  # queries per flash-attention tile: K/V read once per tile
    score_passes: float = 4.0  # without -fa: KQ scores written, softmaxed, read (f32)
    # --- links ---
    pcie_hop_s: float = 192e-6  # a copy and a sync between two GPUs
    nvlink_hop_s: float = 50e-6
    host_hop_s: float = 9.6e-6  # activations to the host and back, per layer it runs
    rpc_hop_s: float = 500e-6  # a graph computed on an RPC server: round trips over TCP
    rpc_gbs: float = 1.25  # 10 Gb/s Ethernet
    pcie_eff: float = 0.8  # of the nominal PCIe rate, a copy from page-locked host memory
    pageable_eff: float = 0.85  # of that, from pageable memory (mapped weights, a host KV)
    # --- -sm tensor: two all-reduces per layer (llama.cpp's meta backend) ---
    nccl_step_s: float = 6e-6  # NCCL: each of a ring's 2(D-1) steps, a small message
    nccl_launch_s: float = 12e-6  # NCCL: a collective's launch and completion
    internal_allreduce_s: float = 8e-6  # llama.cpp's own CUDA kernel (2 GPUs with P2P)
    fallback_step_s: float = 25e-6  # no comm library: a peer copy and an add, each step
    tensor_sync_s: float = 10e-6  # each sub-graph the reduce cuts, per GPU (launch, events)
    expert_skew: float = 0.65  # of a layer's experts, what a long batch of real text reaches
    # --- power: a GPU held under what its work draws at full clocks runs slower ---
    static_power: float = 0.2  # of the default limit, drawn whatever the clock
    decode_power: float = 0.6  # of the default limit, what a decode draws at full clocks
    prefill_power: float = 0.95  # likewise a prompt's matmuls
    # --- the host CPU ---
    host_bw_eff: float = 0.72  # of the peak memory bandwidth, streaming weights
    host_lpddr_eff: float = 0.30  # likewise of an LPDDR memory's peak (HostSpec.lpddr)
    host_core_gbs: float = 19.9  # GB/s one core streams at 3 GHz at most
    host_layer_s: float = 100e-6  # per layer and token: the barriers of its ~20 ops (threads)
    host_op_layer_s: float = 30e-6  # per layer and token with one thread: dispatching its ops
    host_attn_eff: float = 0.48  # attention on the CPU, of the f32 rate
    # and its cycles per cell and query head, and per SIMD vector of K and V it reads:
    # a token's (ggml's split-KV path, a cell at a time) and a ubatch's (the tiled path),
    # measured on this project's machine (bench/cpu_speed.py's deep points)
    host_attn_dec_cycles: tuple[float, float] = (69.0, 2.9)
    host_attn_pre_cycles: tuple[float, float] = (9.0, 0.0)
    host_decode_eff: dict[str, float] = field(default_factory=lambda: dict(HOST_DECODE_EFF))
    host_prefill_eff: dict[str, float] = field(default_factory=lambda: dict(HOST_PREFILL_EFF))


PARAMS = SpeedParams()


# raised when a rule of the model (not one of its constants) changes what it predicts: the
# stored calibrations fitted against the old predictions are then set aside too
MODEL_REVISION = 3


def params_mark(params: SpeedParams = PARAMS) -> str:
    """A short mark of the model's rules and constants: a calibration fitted against other
    ones (an older lltui's) scales predictions these no longer make."""
    import hashlib

    return hashlib.sha256(f"{MODEL_REVISION} {params!r}".encode()).hexdigest()[:12]

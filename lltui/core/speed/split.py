"""What splitting a model over devices costs beyond each device's own work.

A layer split (``-sm layer``) runs the layers one device after another: each boundary
between devices moves one activation row per token (a ubatch of them per ubatch) and
synchronises, over NVLink where the board has it, else PCIe, else an RPC server's TCP. A
long prompt's ubatches overlap across the devices (pipeline parallelism) within one
``-b`` batch, at most ``SCHED_COPIES`` in flight.

``-sm tensor`` (llama.cpp's meta backend) gives every GPU its share of every layer (by
attention head and FFN column) and all-reduces the layer's output twice (after attention,
after the FFN; an MoE's experts once, after their sum), ``n_embd`` values per token in
BF16. The reduce goes through NCCL, llama.cpp's own kernel (two GPUs with peer access) or,
with neither, a butterfly of peer copies and adds; without peer access every transfer is
staged through host memory, crossing PCIe twice. Each reduce cuts the graph, so every GPU
also pays a launch and a sync per cut. The slowest GPU's share bounds every layer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise

from lltui.core.hardware.gpus import GpuSpec
from lltui.core.hardware.links import NVLINK_BY_CC, NVLINK_UNKNOWN, PCIE_GBS_PER_LANE, RigLinks
from lltui.core.memory.common import CPU
from lltui.core.memory.results import FitResult
from lltui.core.speed.gpu import PCIE_DEFAULT, pcie_gbs
from lltui.core.speed.params import SpeedParams
from lltui.core.speed.parts import ACT_BYTES

SCHED_COPIES = 4  # GGML_SCHED_MAX_COPIES: ubatches a pipelined prompt keeps in flight
REDUCE_BYTES = 2  # the meta backend all-reduces in BF16
PEER_SEGMENTS = ("Workstation", "Datacenter")  # PCIe peer access is enabled on these


def nvlinked(a: GpuSpec, b: GpuSpec, links: RigLinks | None) -> bool:
    """Whether two GPUs talk over NVLink: as the rig says, else where the board has it
    (SXM/HGX: 6 or more links; a bridge is optional and not assumed)."""
    if links is not None and links.nvlink is not None:
        return links.nvlink
    return a.nvlink_links >= 6 and b.nvlink_links >= 6


def peer_access(gpus: Sequence[GpuSpec], links: RigLinks | None) -> bool:
    """Whether the GPUs copy to each other directly (CUDA peer access): as the rig says,
    else over NVLink, else on PCIe for workstation and datacenter cards (GeForce drivers
    refuse it)."""
    if links is not None and links.p2p is not None:
        return links.p2p
    if all(nvlinked(a, b, links) for a, b in pairwise(gpus)):
        return True
    return all(g.segment in PEER_SEGMENTS for g in gpus)


def link(
    a: GpuSpec, b: GpuSpec, p: SpeedParams, links: RigLinks | None = None
) -> tuple[float, float, str]:
    """(latency s, GB/s, kind) of the hop between two local GPUs."""
    if nvlinked(a, b, links):
        nvl = NVLINK_BY_CC.get(min(a.cc, b.cc), NVLINK_UNKNOWN)
        n = min(a.nvlink_links, b.nvlink_links) or 1
        return p.nvlink_hop_s, nvl.gbs_per_link * n, "NVLink"
    # a unified-memory device (an APU, GB10) has no PCIe link: the hop is the other's link
    wired = [g for g in (a, b) if g.pcie_width]
    if not wired:
        return p.pcie_hop_s, min(a.bandwidth_gbs, b.bandwidth_gbs), "unified memory"
    gen = min(g.pcie_gen for g in wired)
    width = min(g.pcie_width for g in wired)
    lane = PCIE_GBS_PER_LANE.get(gen, PCIE_GBS_PER_LANE[PCIE_DEFAULT[0]])
    return p.pcie_hop_s, lane * width, f"PCIe {gen}.0 x{width}"


def _hop(
    a: str,
    b: str,
    gpus: Mapping[str, GpuSpec],
    kinds: Mapping[str, str],
    p: SpeedParams,
    links: RigLinks | None,
) -> tuple[float, float]:
    """(latency s, GB/s) from device ``a`` to ``b``."""
    if "rpc" in (kinds.get(a), kinds.get(b)):
        return p.rpc_hop_s, p.rpc_gbs
    if CPU in (a, b):
        g = gpus.get(b) or gpus.get(a)
        return p.host_hop_s, pcie_gbs(g) if g else 16.0
    ga, gb = gpus.get(a), gpus.get(b)
    if ga is None or gb is None:
        return p.pcie_hop_s, 16.0
    lat, gbs, _kind = link(ga, gb, p, links)
    return lat, gbs


def layer_links(
    result: FitResult,
    ub: int,
    gpus: Mapping[str, GpuSpec],
    kinds: Mapping[str, str],
    p: SpeedParams,
    links: RigLinks | None = None,
) -> tuple[float, float]:
    """Seconds per token and per ubatch on the hops between consecutive layer homes."""
    link_dec = link_pre = 0.0
    homes = [d for d in result.layer_devices if d]
    act = ACT_BYTES * max(1, result.model.n_embd)
    for a, b in pairwise(homes):
        if a == b:
            continue
        lat, gbs = _hop(a, b, gpus, kinds, p, links)
        link_dec += lat + act / (gbs * 1e9)
        link_pre += lat + act * ub / (gbs * 1e9)
    return link_dec, link_pre


def allreduce_path(gpus: Sequence[GpuSpec], links: RigLinks | None) -> str:
    """Which way llama.cpp reduces: the rig's choice (GGML_CUDA_ALLREDUCE), else its own
    kernel for two GPUs with peer access, NCCL otherwise (a CUDA build's default)."""
    chosen = links.allreduce if links is not None else "auto"
    if chosen != "auto":
        return chosen
    return "internal" if len(gpus) == 2 and peer_access(gpus, links) else "nccl"


def allreduce_s(
    nbytes: float, gpus: Sequence[GpuSpec], p: SpeedParams, links: RigLinks | None = None
) -> float:
    """Seconds of one all-reduce of ``nbytes`` per GPU over ``gpus``."""
    n = len(gpus)
    if n < 2:
        return 0.0
    _lat, gbs, _kind = min((link(a, b, p, links) for a, b in pairwise(gpus)), key=lambda x: x[1])
    if not peer_access(gpus, links):
        gbs /= 2  # staged through host memory: each transfer crosses PCIe twice
    path = allreduce_path(gpus, links)
    if path == "nccl":
        if links is not None and links.allreduce_gbs:
            gbs = links.allreduce_gbs  # measured bus bandwidth
        fixed = p.nccl_launch_s + 2 * (n - 1) * p.nccl_step_s
        if links is not None and links.allreduce_us:
            fixed = links.allreduce_us * 1e-6
        return fixed + 2 * (n - 1) / n * nbytes / (gbs * 1e9)
    if path == "internal":
        return p.internal_allreduce_s + nbytes / (gbs * 1e9)
    steps = math.ceil(math.log2(n)) + (0 if n & (n - 1) == 0 else 2)
    return steps * (p.fallback_step_s + nbytes / (gbs * 1e9))


def tensor_links(
    result: FitResult,
    specs: Sequence[GpuSpec],
    ub: int,
    p: SpeedParams,
    links: RigLinks | None = None,
    *,
    rpc: int = 0,
) -> tuple[float, float]:
    """-sm tensor: the seconds per token and per ubatch the all-reduces and the graph cuts
    add to the slowest GPU's share. ``specs``: the local GPUs of the split; ``rpc``: its
    devices behind RPC servers, whose partial sums each cross TCP once per all-reduce (a
    round trip: measured on two loopback rpc-servers, 8 layers of 1024, decode took twice
    -sm layer's time, the prompt 1.3-1.5x less; bench/rpc_split.py)."""
    cuts = 2 * max(1, result.model.n_layer)
    row = REDUCE_BYTES * max(1, result.model.n_embd)
    sync = cuts * p.tensor_sync_s

    def over_rpc(nbytes: float) -> float:
        return rpc * (p.rpc_hop_s + 2 * nbytes / (p.rpc_gbs * 1e9))

    return (
        cuts * (allreduce_s(row, specs, p, links) + over_rpc(row)) + sync,
        cuts * (allreduce_s(row * ub, specs, p, links) + over_rpc(row * ub)) + sync,
    )


def prompt_s(
    per_ub: Sequence[float],
    link_pre: float,
    n_ub: int,
    ub_per_batch: int,
    pipelined: bool,
) -> float:
    """Seconds for a prompt of ``n_ub`` ubatches taking ``per_ub`` seconds on each device in
    turn: one after another, or pipelined within each ``-b`` batch (the slowest stage, or a
    ubatch's whole time over the copies in flight, per further ubatch)."""
    ub_s = sum(per_ub) + link_pre
    if not pipelined or len(per_ub) < 2 or n_ub < 2:
        return n_ub * ub_s
    step = max(*per_ub, link_pre, ub_s / SCHED_COPIES)
    total = 0.0
    left = n_ub
    while left > 0:
        k = min(left, max(1, ub_per_batch))
        total += ub_s + (k - 1) * step
        left -= k
    return total

"""Nominal link bandwidths: NVLink per link by GPU generation, PCIe per lane by generation.
The topology advice and the fit speed model both read these; kept apart from the advice so
the speed model does not load the topology parser to know them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NvlinkGeneration:
    name: str
    gbs_per_link: float  # GB/s per link and direction


# Nominal NVLink bandwidth per link and direction, by the GPU's compute capability.
NVLINK_BY_CC: dict[tuple[int, int], NvlinkGeneration] = {
    (6, 0): NvlinkGeneration("NVLink 1 (Pascal P100)", 20.0),
    (7, 0): NvlinkGeneration("NVLink 2 (Volta V100)", 25.0),
    (7, 5): NvlinkGeneration("NVLink 2 (Turing bridge)", 25.0),
    (8, 0): NvlinkGeneration("NVLink 3 (A100)", 25.0),
    (8, 6): NvlinkGeneration("NVLink 3 bridge (GA102: RTX 3090, A6000, A40)", 14.0625),
    (9, 0): NvlinkGeneration("NVLink 4 (Hopper)", 25.0),
    (10, 0): NvlinkGeneration("NVLink 5 (Blackwell)", 50.0),
    (10, 3): NvlinkGeneration("NVLink 5 (Blackwell Ultra)", 50.0),
}
NVLINK_UNKNOWN = NvlinkGeneration("NVLink of unknown generation, 25 GB/s per link assumed", 25.0)

# Nominal PCIe bandwidth per lane and direction after line encoding, GB/s, by generation.
PCIE_GBS_PER_LANE: dict[int, float] = {
    1: 0.25,
    2: 0.5,
    3: 0.985,
    4: 1.969,
    5: 3.938,
    6: 7.563,
}


@dataclass(frozen=True, slots=True)
class RigLinks:
    """How a rig's GPUs reach each other, as far as it is known: what ``nvidia-smi topo``
    said (NVLink between all of them or not; peer access), and what ``lltui nccl bench``
    measured of an all-reduce. None: not known (the GPU catalog's board and segment then
    decide: NVLink on SXM boards, peer access on PCIe for workstation and datacenter
    cards, not for GeForce)."""

    nvlink: bool | None = None
    p2p: bool | None = None
    allreduce_gbs: float | None = None  # measured bus bandwidth of a large all-reduce
    allreduce_us: float | None = None  # measured time of a small one (latency)
    # What -sm tensor reduces over (GGML_CUDA_ALLREDUCE): nccl, internal (llama.cpp's own
    # kernel) or none (peer copies and adds); auto picks by the rig (lltui.core.speed.split).
    allreduce: str = "auto"

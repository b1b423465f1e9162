"""``nvidia-smi topo -m`` as a frozen model: the devices, the cell between each pair, the
affinity columns, and what each cell code means. The parser of pasted text is in
:mod:`lltui.core.topo.parse`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from lltui.core.monitor.models import GpuStatic
from lltui.core.text import counted

CPU_AFFINITY = "cpu_affinity"
NUMA_AFFINITY = "numa_affinity"
GPU_NUMA_ID = "gpu_numa_id"
AFFINITY_COLUMNS = (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)
COLUMN_TITLES = {
    CPU_AFFINITY: "CPU Affinity",
    NUMA_AFFINITY: "NUMA Affinity",
    GPU_NUMA_ID: "GPU NUMA ID",
}

# What each cell means, in the legend's own terms.
LINK_MEANINGS: dict[str, str] = {
    "X": "the device itself",
    "NV#": "a bonded set of # NVLinks",
    "PIX": "PCIe through at most one PCIe bridge (switch)",
    "PXB": "PCIe through several PCIe bridges, not the host bridge",
    "PHB": "PCIe through a PCIe host bridge, typically the CPU",
    "NODE": "PCIe and the interconnect between host bridges within a NUMA node",
    "SYS": "PCIe and the interconnect between NUMA nodes, such as QPI, UPI or Infinity Fabric",
    "SOC": "PCIe and the link between CPU sockets; old drivers' name for SYS",
    "XGMI": "AMD Infinity Fabric (XGMI) between the GPUs, as amd-smi and rocm-smi name it",
}
# Nearest first; NVLink is nearer than any PCIe path.
LINK_DISTANCE = {
    "X": 0, "NV": 1, "XGMI": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6, "SOC": 6,
}  # fmt: skip

# ``nvidia-smi topo -p2p r`` status codes.
P2P_MEANINGS: dict[str, str] = {
    "OK": "peer-to-peer works",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DBR": "disabled by a driver registry key",
    "U": "unknown",
}


# Numbers in a paste are read only up to a length any rig has: int() of thousands of digits
# (a mangled paste) raises instead of answering.
_CPULIST = re.compile(r"\d{1,7}(?:-\d{1,7})?(?:,\d{1,7}(?:-\d{1,7})?)*\Z")
_GPU_LABEL = re.compile(r"GPU(\d{1,6})\Z")

Pair = tuple[str, str, str]  # (device a, device b, cell as printed)
Named = tuple[str, str]  # (device, value as printed)


@dataclass(frozen=True, slots=True)
class Topology:
    """One rig's topology. Values are the strings as printed; an absent column is ``None``.

    ``links`` holds GPU pairs (a before b in GPU order), ``gpu_nic_links`` (GPU, NIC) pairs;
    ``nics`` are NIC labels as columns or rows name them (``NIC0`` or ``mlx5_2``) and
    ``nic_names`` maps a label to its device name where known. ``unreliable`` names fields a
    mangled paste may have cut (their values are kept as printed).
    """

    gpus: tuple[str, ...] = ()
    nics: tuple[str, ...] = ()
    links: tuple[Pair, ...] = ()
    gpu_nic_links: tuple[Pair, ...] = ()
    nic_names: tuple[Named, ...] = ()
    cpu_affinity: tuple[Named, ...] | None = None
    numa_affinity: tuple[Named, ...] | None = None
    gpu_numa_id: tuple[Named, ...] | None = None
    p2p: tuple[Pair, ...] = ()  # P2P read status per GPU pair, where it was read (OK, TNS, ...)
    legend_complete: bool | None = None  # None: no legend in the text
    unreliable: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    source: str = "text"  # "text", "nvidia-smi", "nvml", "sim:PROFILE"
    _index: dict[frozenset[str], str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def found(self) -> bool:
        """Whether there was a matrix at all."""
        return bool(self.gpus)

    def __post_init__(self) -> None:
        # pair -> cell, so a matrix of n devices renders in n^2 lookups, not n^4 scans
        index = {frozenset((x, y)): cell for x, y, cell in (*self.links, *self.gpu_nic_links)}
        object.__setattr__(self, "_index", index)

    def link(self, a: str, b: str) -> str | None:
        """The cell between two devices (GPU or NIC), either order; ``X`` for one device."""
        if a == b:
            return "X"
        return self._index.get(frozenset((a, b)))

    def link_map(self) -> dict[str, str]:
        return {f"{a}-{b}": cell for a, b, cell in self.links}

    def gpu_nic_map(self) -> dict[str, str]:
        return {f"{a}-{b}": cell for a, b, cell in self.gpu_nic_links}

    def nic_map(self) -> dict[str, str]:
        return dict(self.nic_names)

    def affinity(self, column: str) -> dict[str, str] | None:
        values = getattr(self, column)
        return None if values is None else dict(values)

    def p2p_map(self) -> dict[str, str]:
        return {f"{a}-{b}": status for a, b, status in self.p2p}


def gpu_index(label: str) -> int | None:
    """``"GPU3"`` -> 3."""
    m = _GPU_LABEL.match(label)
    return int(m.group(1)) if m else None


def nvlink_count(cell: str | None) -> int | None:
    """``"NV12"`` -> 12; None for a cell that is not NVLink."""
    if cell and cell.startswith("NV") and cell[2:].isdigit() and len(cell) <= 8:
        return int(cell[2:])
    return None


def link_distance(cell: str | None) -> int:
    """How far apart a cell says two devices are: 0 self, 1 NVLink, 2..6 PCIe paths."""
    if cell is None:
        return 99
    if nvlink_count(cell) is not None:
        return LINK_DISTANCE["NV"]
    return LINK_DISTANCE.get(cell, 99)


def link_meaning(cell: str) -> str:
    n = nvlink_count(cell)
    if n is not None:
        return counted(n, "bonded NVLink")
    return LINK_MEANINGS.get(cell, "not a code nvidia-smi documents")


def is_cpu_list(text: str) -> bool:
    """``0-23,48-71`` style, every range ascending."""
    if not _CPULIST.match(text):
        return False
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            return False
    return True


def compact_labels(labels: Iterable[str]) -> str:
    """GPU0, GPU1, GPU2, GPU5 -> "GPU0-GPU2, GPU5" (runs of one prefix collapsed)."""
    items = list(labels)
    out: list[str] = []
    i = 0
    while i < len(items):
        j = i
        m = re.match(r"([A-Za-z_]+?)(\d{1,9})$", items[i])
        while m and j + 1 < len(items):
            n = re.match(r"([A-Za-z_]+?)(\d{1,9})$", items[j + 1])
            if not n or n.group(1) != m.group(1) or int(n.group(2)) != int(m.group(2)) + j + 1 - i:
                break
            j += 1
        out.append(items[i] if j - i < 2 else f"{items[i]}-{items[j]}")
        if j - i == 1:
            out.append(items[j])
        i = j + 1
    return ", ".join(out)


@dataclass(frozen=True, slots=True)
class LiveTopology:
    """A topology read from a rig, with what it told of its GPUs (for advice)."""

    topology: Topology
    gpus: tuple[GpuStatic, ...] = ()
    where: str = ""  # how it was read, in words


@dataclass(frozen=True, slots=True)
class TopologyReport:
    """A rig's topology with what advice needs: GPU models and the environment llama-server
    would run with (None when unknown)."""

    live: LiveTopology
    env: dict[str, str] | None = None

"""A generator of ``nvidia-smi topo -m`` text written from the format, rigs made with it,
and the real pastes in ``tests/fixtures/real`` with their truth entries."""

from __future__ import annotations

import json
from pathlib import Path

from lltui.core.topo.matrix import COLUMN_TITLES, CPU_AFFINITY, GPU_NUMA_ID, NUMA_AFFINITY

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "real"  # see its README.md
TOPO_FILES = sorted((FIXTURES / "topo").glob("*.txt"))

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501


def truth_entries() -> dict[str, dict]:
    data = json.loads((FIXTURES / "truth.json").read_text())
    return {e["file"]: e for e in data["entries"] if e["kind"] == "topo"}


# --- a generator of topo -m text, written from the format ------------------------------------


def render(
    gpu_links: dict[tuple[int, int], str],
    n_gpus: int,
    *,
    nics: tuple[str, ...] = (),
    nic_links: dict[tuple[int, int], str] | None = None,
    affinity: dict[str, list[str]] | None = None,
    legend: bool = True,
    nic_column_names: bool = False,
) -> str:
    """Tab-separated ``nvidia-smi topo -m`` as a driver prints it. ``affinity`` maps column
    keys (in print order) to one value per GPU; NIC columns are NICn plus a NIC Legend, or
    the device names themselves (old drivers) with ``nic_column_names``."""
    nic_links = nic_links or {}
    affinity = affinity if affinity is not None else {}
    nic_labels = list(nics) if nic_column_names else [f"NIC{i}" for i in range(len(nics))]
    names = [f"GPU{i}" for i in range(n_gpus)] + nic_labels
    header = ["", *names, *(COLUMN_TITLES[k] for k in affinity)]
    lines = ["\t".join(header)]

    def cell(a: int, b: int) -> str:
        if a == b:
            return " X "
        if a < n_gpus and b < n_gpus:
            return gpu_links[(min(a, b), max(a, b))]
        if a < n_gpus:
            return nic_links[(a, b - n_gpus)]
        if b < n_gpus:
            return nic_links[(b, a - n_gpus)]
        return "SYS"

    for a, label in enumerate(names):
        cells = [cell(a, b) for b in range(len(names))]
        if a < n_gpus:
            values = [affinity[k][a] for k in affinity]
            if GPU_NUMA_ID in affinity and len(values) >= 2:
                # Current drivers print an empty cell before GPU NUMA ID.
                values = [*values[:-1], "", values[-1]]
            cells += values
        else:
            cells += [""] * len(affinity)
        lines.append("\t".join([label, *cells]))
    text = "\n".join(lines) + "\n"
    if legend:
        text += LEGEND
    if nics and not nic_column_names:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: {n}\n" for i, n in enumerate(nics))
    return text


def two_socket(n: int, same: str = "NODE", cross: str = "SYS") -> dict[tuple[int, int], str]:
    half = n // 2
    return {
        (i, j): same if (i < half) == (j < half) else cross
        for i in range(n)
        for j in range(i + 1, n)
    }


def expect_links(links: dict[tuple[int, int], str]) -> dict[str, str]:
    return {f"GPU{i}-GPU{j}": c for (i, j), c in sorted(links.items())}


RIG16 = {
    (i, j): ("NV4" if j == i + 1 and i % 2 == 0 else ("NODE" if i // 8 == j // 8 else "SYS"))
    for i in range(16)
    for j in range(i + 1, 16)
}
AFF16 = {
    CPU_AFFINITY: ["0-23,48-71"] * 8 + ["24-47,72-95"] * 8,
    NUMA_AFFINITY: ["0"] * 8 + ["1"] * 8,
    GPU_NUMA_ID: ["N/A"] * 16,
}
NICS4 = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
NIC_LINKS8 = {
    (g, n): ("PIX" if g // 2 == n else ("NODE" if g // 4 == n // 2 else "SYS"))
    for g in range(8)
    for n in range(4)
}

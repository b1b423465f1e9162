"""AMD GPU topology as the one :class:`Topology` model: ``amd-smi topology`` (its text
tables and both shapes of its ``--json``) and ``rocm-smi --showtopo``, and the advice that
differs on ROCm.

A pair's cell is ``XGMI`` where the tools say the GPUs are on Infinity Fabric (XGMI), else
the PCIe path their hop count tells, in nvidia-smi's words: ``PHB`` for two hops (through
the CPU of one socket), ``SYS`` for three (across sockets). AMD documents hops and weights
this way (1 XGMI, 2 same socket, 3 two sockets; XGMI weighs 15 a hop, PCIe 20 a segment);
a hop count the tool does not print is read from the weight.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from lltui.core.monitor.models import GpuStatic
from lltui.core.topo.matrix import NUMA_AFFINITY, Pair, Topology

XGMI = "XGMI"
NO_AMD_MATRIX = "no AMD GPU topology table in the text"
# section titles of amd-smi topology (text) and rocm-smi --showtopo, -> what they hold
_SECTIONS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^\s*(?:LINK TYPE TABLE|=+ Link Type between two GPUs)", re.I), "type"),
    (re.compile(r"^\s*(?:HOPS TABLE|=+ Hops between two GPUs)", re.I), "hops"),
    (re.compile(r"^\s*(?:WEIGHT TABLE|=+ Weight between two GPUs)", re.I), "weight"),
    (re.compile(r"^\s*(?:NUMA BW TABLE|=+ Numa Nodes)", re.I), "numa"),
    (re.compile(r"^\s*(?:[A-Z\- ]+ TABLE:|=+ [A-Za-z].*=+\s*$)"), "other"),
)
_BDF = re.compile(r"^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_GPU = re.compile(r"^GPU(\d{1,4})$")
_NUMA_NODE = re.compile(r"GPU\[(\d{1,4})\]\s*:\s*\(Topology\) Numa Node:\s*(-?\d+)")
MAX_GPUS = 256
TEXT_SOURCE, JSON_SOURCE = "amd-smi/rocm-smi text", "amd-smi json"
SOURCES = (TEXT_SOURCE, JSON_SOURCE, "amd-smi", "rocm-smi")


def looks_amd(text: str) -> bool:
    """Whether ``text`` is AMD's topology output rather than ``nvidia-smi topo -m``."""
    head = text[:200_000]
    if re.search(r"LINK TYPE TABLE|Link Type between two GPUs|WEIGHT TABLE|Hops between", head):
        return True
    return head.lstrip()[:1] in "[{" and '"link_type"' in head


def cell_of(link_type: str | None, hops: int | None, weight: int | None) -> str | None:
    kind = (link_type or "").strip().upper()
    if kind in ("SELF", "0"):
        return None
    if not kind and hops is None and weight is None:
        return None
    if kind == XGMI:
        return XGMI
    return _pcie(hops, weight)


def _pcie(hops: int | None, weight: int | None) -> str:
    """A PCIe path's cell: through one socket's CPU unless the hops or the weight say two
    sockets (``amd-smi topology -t`` prints the type alone: one socket is assumed)."""
    if hops is None and weight is not None:
        hops = 3 if weight > 40 else 2  # two PCIe segments weigh 40; across sockets more
    return "SYS" if hops is not None and hops >= 3 else "PHB"


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


# --- text tables ------------------------------------------------------------------------------


def _tables(lines: Sequence[str]) -> dict[str, list[list[str]]]:
    """Each known section's rows (a header row first), as whitespace-split words."""
    out: dict[str, list[list[str]]] = {}
    current: str | None = None
    for line in lines:
        kind = next((k for pattern, k in _SECTIONS if pattern.match(line)), None)
        if kind is not None:
            current = kind if kind != "other" else None
            if current is not None:
                out.setdefault(current, [])
            continue
        words = line.split()
        if current is None or not words or words[0].startswith(("Legend", "=")):
            continue
        out[current].append(words)
    return out


def _matrix(rows: list[list[str]]) -> tuple[list[str], dict[tuple[int, int], str]]:
    """(column labels, (row, column) -> cell) of one table: a header of labels, then one
    row per device (label first)."""
    header = next((r for r in rows if all(_BDF.match(w) or _GPU.match(w) for w in r)), None)
    if not header:
        return [], {}
    cells: dict[tuple[int, int], str] = {}
    labels = header[:MAX_GPUS]
    for row in rows:
        if row is header or row[0] not in labels:
            continue
        i = labels.index(row[0])
        for j, cell in enumerate(row[1 : len(labels) + 1]):
            cells[(i, j)] = cell
    return labels, cells


def _numa_nodes(lines: Sequence[str]) -> dict[int, str]:
    out: dict[int, str] = {}
    for line in lines:
        m = _NUMA_NODE.search(line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def _from_text(text: str) -> Topology:
    lines = text.splitlines()
    tables = _tables(lines)
    types, hops, weights = (_matrix(tables.get(k, [])) for k in ("type", "hops", "weight"))
    labels = types[0] or hops[0] or weights[0]
    if not labels:
        return Topology(warnings=(NO_AMD_MATRIX,))
    warnings = []
    n = len(labels)
    links: list[Pair] = []
    for i in range(n):
        for j in range(i + 1, n):
            cell = cell_of(
                types[1].get((i, j)), _int(hops[1].get((i, j))), _int(weights[1].get((i, j)))
            )
            if cell is None:
                warnings.append(f"GPU{i}-GPU{j}: no link type, hops or weight in the text")
                continue
            links.append((f"GPU{i}", f"GPU{j}", cell))
    for name, (cols, cells) in (("link type", types), ("hops", hops), ("weight", weights)):
        rows = {i for i, _ in cells}
        if cols and len(rows) < len(cols):
            warnings.append(f"the {name} table has {len(rows)} of {len(cols)} rows (cut?)")
    if "numa" in tables and not tables["numa"] and not _numa_nodes(lines):
        warnings.append("the text ends where the NUMA section begins")
    return _topology(n, links, _numa_nodes(lines), warnings, TEXT_SOURCE)


# --- JSON ---------------------------------------------------------------------------------------


def _json_links(entries: list[Any]) -> tuple[int, list[Pair], list[str]]:
    """Pairs from ``amd-smi topology --json``: per GPU a ``links`` list (6.1.1 on), or per
    GPU maps ``link_type``/``hops``/``weight`` keyed ``gpu_N`` (6.1.0)."""
    found: dict[tuple[int, int], str] = {}
    warnings = []
    gpus: set[int] = set()
    for entry in entries:
        i = _int(entry.get("gpu")) if isinstance(entry, dict) else None
        if i is None or not 0 <= i < MAX_GPUS:
            continue
        gpus.add(i)
        if isinstance(entry.get("links"), list):
            peers = [
                (
                    _int(p.get("gpu")),
                    p.get("link_type"),
                    _int(p.get("num_hops")),
                    _int(p.get("weight")),
                )
                for p in entry["links"]
                if isinstance(p, dict)
            ]
        else:
            kinds = entry.get("link_type") if isinstance(entry.get("link_type"), dict) else {}
            hops = entry.get("hops") if isinstance(entry.get("hops"), dict) else {}
            weights = entry.get("weight") if isinstance(entry.get("weight"), dict) else {}
            peers = [
                (_int(key.removeprefix("gpu_")), kind, _int(hops.get(key)), _int(weights.get(key)))
                for key, kind in kinds.items()
            ]
        for j, kind, hop, weight in peers:
            if j is None or j == i or not 0 <= j < MAX_GPUS:
                continue
            gpus.add(j)
            cell = cell_of(str(kind) if kind is not None else None, hop, weight)
            if cell is not None:
                found.setdefault((min(i, j), max(i, j)), cell)
    n = max(gpus) + 1 if gpus else 0
    links = [(f"GPU{a}", f"GPU{b}", c) for (a, b), c in sorted(found.items())]
    missing = n * (n - 1) // 2 - len(links)
    if missing > 0:
        warnings.append(f"{missing} GPU pair(s) without a link in the JSON")
    return n, links, warnings


def _from_json(text: str) -> Topology:
    try:
        doc = json.loads(text[text.index(text.lstrip()[0]) :])
    except (ValueError, RecursionError) as exc:
        return Topology(warnings=(f"{NO_AMD_MATRIX}: the JSON does not parse ({exc})",))
    if isinstance(doc, dict):
        doc = doc.get("gpu_data", [doc])
    if not isinstance(doc, list):
        return Topology(warnings=(NO_AMD_MATRIX,))
    n, links, warnings = _json_links(doc)
    if n == 0:
        return Topology(warnings=(NO_AMD_MATRIX,))
    return _topology(n, links, {}, warnings, JSON_SOURCE)


def _topology(
    n: int, links: list[Pair], numa: Mapping[int, str], warnings: list[str], source: str
) -> Topology:
    gpus = tuple(f"GPU{i}" for i in range(n))
    return Topology(
        gpus=gpus,
        links=tuple(links),
        numa_affinity=tuple((f"GPU{i}", node) for i, node in sorted(numa.items())) or None,
        warnings=tuple(warnings),
        source=source,
    )


def parse_amd_topology(text: str) -> Topology:
    """``amd-smi topology`` (text or ``--json``) or ``rocm-smi --showtopo``; never raises: a
    text without a matrix is a Topology without GPUs and a warning saying so."""
    if text.lstrip()[:1] in "[{":
        return _from_json(text)
    return _from_text(text)


def render_amd_topology(n: int, buses: Sequence[str], links: Mapping[tuple[int, int], str]) -> str:
    """``amd-smi topology`` text for ``n`` GPUs (the link type, hops and weight tables), as
    a rig of them prints it; ``links`` holds each pair's cell (XGMI, PHB, SYS)."""
    short = [b[4:].lower() if len(b) == 16 else b.lower() for b in buses]
    width = max(13, *(len(s) + 1 for s in short))

    def table(title: str, value: Any) -> list[str]:
        rows = [f"{title}:", (" " * width + "".join(f"{s:<{width}}" for s in short)).rstrip()]
        for i in range(n):
            cells = [str(value(i, j)) for j in range(n)]
            rows.append(f"{short[i]:<{width}}" + "".join(f"{c:<{width}}" for c in cells).rstrip())
        return [*rows, ""]

    def cell(i: int, j: int) -> str | None:
        return None if i == j else links[(min(i, j), max(i, j))]

    def kind(i: int, j: int) -> str:
        c = cell(i, j)
        return "SELF" if c is None else (XGMI if c == XGMI else "PCIE")

    def hops(i: int, j: int) -> int:
        c = cell(i, j)
        return 0 if c is None else {XGMI: 1, "SYS": 3}.get(c, 2)

    def weight(i: int, j: int) -> int:
        c = cell(i, j)
        return 0 if c is None else {XGMI: 15, "SYS": 52}.get(c, 40)

    lines = [*table("WEIGHT TABLE", weight), *table("HOPS TABLE", hops)]
    lines += table("LINK TYPE TABLE", kind)
    return "\n".join(lines)


# --- advice -------------------------------------------------------------------------------------


def is_amd_rig(gpus: Sequence[GpuStatic], topo: Topology) -> bool:
    """AMD's tools printed it, or every GPU is AMD, or AMD's link joins a pair."""
    if topo.source.startswith(SOURCES) or any(c == XGMI for _, _, c in topo.links):
        return True
    return bool(gpus) and all(g.vendor == "amd" for g in gpus)


__all__ = [
    "NO_AMD_MATRIX",
    "NUMA_AFFINITY",
    "XGMI",
    "cell_of",
    "is_amd_rig",
    "looks_amd",
    "parse_amd_topology",
    "render_amd_topology",
]

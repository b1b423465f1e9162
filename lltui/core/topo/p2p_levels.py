"""NCCL's P2P path levels, as NCCL_P2P_LEVEL, NCCL_NET_GDR_LEVEL and NCCL_P2P_DISABLE read
them (src/graph/paths.cc ncclGetLevel), and the topo -m cells they are compared with: one
table that the NCCL report and the topology's advice both read (topology cannot import the
NCCL package, which imports it)."""

from __future__ import annotations

import re
from collections.abc import Mapping

# NCCL reads an integer variable with strtoll(value, NULL, 0): its leading number (0x hex,
# 0 octal), the rest ignored; no number at all reads as 0; only an overflow keeps the default
_LEADING_INT = re.compile(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")
_INT64 = 2**63


def nccl_int(value: str) -> tuple[int | None, str]:
    """NCCL's reading of an integer variable (None: out of range, the default kept), and
    what it left unread (all of it where no number leads)."""
    m = _LEADING_INT.match(value)
    if m is None:
        return 0, value.strip()
    sign, digits = m.groups()
    base = 16 if digits[:2] in ("0x", "0X") else 8 if digits.startswith("0") else 10
    n = int(digits, base) * (-1 if sign == "-" else 1)
    return (n if -_INT64 <= n < _INT64 else None), value[m.end() :].strip()


# NCCL's path types, nearest first, as src/include/graph.h numbers them (PATH_LOC 0 ...
# PATH_SYS 9) and topoPathTypeStr spells them, with what each does as NCCL_P2P_LEVEL: P2P for
# GPU pairs whose path is this near or nearer. C2C, P2C and PXN are paths to a CPU or a NIC,
# never between two GPUs, so as levels they reach as far as the GPU path before them.
P2P_LEVELS: tuple[tuple[str, str], ...] = (
    ("LOC", "never use P2P (same as NCCL_P2P_DISABLE=1)"),
    ("NVL", "P2P only between GPUs joined by NVLink"),
    ("NVB", "P2P over NVLink, also through one intermediate GPU"),
    ("C2C", "P2P over NVLink, also through one intermediate GPU (as NVB)"),
    ("PIX", "P2P up to GPUs behind the same PCIe switch"),
    ("PXB", "P2P across PCIe switches, not through the CPU"),
    ("P2C", "P2P across PCIe switches, not through the CPU (as PXB)"),
    ("PXN", "P2P across PCIe switches, not through the CPU (as PXB)"),
    ("PHB", "P2P through the CPU's PCIe host bridge, within a NUMA node"),
    ("SYS", "P2P even across CPU sockets (QPI/UPI/Infinity Fabric)"),
)
P2P_LEVEL_NAMES = tuple(name for name, _ in P2P_LEVELS)
# What NCCL reads an old numeric level as (paths.cc levelsOldToNew; past the end: the last)
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")


def nccl_path_level(value: str) -> str | None:
    """NCCL's reading of NCCL_P2P_LEVEL or NCCL_NET_GDR_LEVEL (src/graph/paths.cc
    ncclGetLevel): a path name exactly as spelled (case matters), else a value starting with a
    digit is an old number; anything else is ignored (None) and NCCL keeps its default."""
    if value in P2P_LEVEL_NAMES:
        return value
    if not value[:1].isdigit():
        return None
    # (past an int it may go negative, and NCCL then reads outside its table)
    number = nccl_c_int(value)
    return _OLD_LEVELS[min(number, len(_OLD_LEVELS) - 1)] if number >= 0 else None


def nccl_c_int(value: str) -> int:
    """What NCCL keeps of ``value`` read with strtol into an int: the long (LONG_MAX past
    its range) wrapped to 32 bits (4294967297 is 1)."""
    read = nccl_int(value)[0]
    return ((_INT64 - 1 if read is None else read) + 2**31) % 2**32 - 2**31


def link_kind(cell: str) -> str:
    """A topo -m cell reduced to its kind: ``NV4`` -> ``NV``; ``PIX``, ``SYS``, ... as is."""
    c = cell.strip().upper()
    if re.fullmatch(r"NV\d+", c):
        return "NV"
    return c


# topo -m cells as NCCL's path types: NODE (host bridges within one NUMA node) goes through
# the CPU, PHB to NCCL; SOC is older nvidia-smi's SYS
_CELL_PATHS = {"NV": "NVL", "NODE": "PHB", "SOC": "SYS"}


def p2p_level_allows(level: str, cell: str) -> bool | None:
    """Whether NCCL_P2P_LEVEL=``level`` lets a pair joined by ``cell`` use P2P (None: NCCL
    ignores the level, or the cell is no path lltui knows)."""
    lv = nccl_path_level(level)
    kind = link_kind(cell)
    kind = _CELL_PATHS.get(kind, kind)
    if lv is None or kind not in P2P_LEVEL_NAMES:
        return None
    return P2P_LEVEL_NAMES.index(kind) <= P2P_LEVEL_NAMES.index(lv)


def p2p_disabled(env: Mapping[str, str | None]) -> bool:
    """Whether NCCL_P2P_DISABLE turns P2P off. NCCL's ncclGetLevel (src/graph/paths.cc) reads
    it with strtol and turns P2P off for 1 only; then it does not read NCCL_P2P_LEVEL."""
    value = env.get("NCCL_P2P_DISABLE")
    return bool(value) and nccl_c_int(value or "") == 1  # (kept in an int, as NCCL keeps it)

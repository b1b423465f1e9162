"""The fields of ``nvidia-smi --query-gpu`` / ``--query-compute-apps``: their names (and the
other spellings nvidia-smi accepts), the kind of value each holds, and how one cell reads.

Any ``[N/A]``-style marker is ``None``; values come with or without units (``15360 MiB`` or
``15360``).
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from lltui.core.monitor.throttle import SMI_FIELDS
from lltui.core.units import GIB, KIB, MIB

# Canonical field name -> kind of value. Kinds decide validation and conversion.
FIELD_KINDS: dict[str, str] = {
    "timestamp": "timestamp",
    "index": "int",
    "count": "int",
    "uuid": "uuid",
    "name": "text",
    "serial": "text",
    "vbios_version": "text",
    "driver_version": "text",
    "pci.bus_id": "busid",
    "memory.total": "bytes",
    "memory.used": "bytes",
    "memory.free": "bytes",
    "memory.reserved": "bytes",
    "utilization.gpu": "float",
    "utilization.memory": "float",
    "power.draw": "float",
    "power.draw.instant": "float",
    "power.draw.average": "float",
    "power.limit": "float",
    "enforced.power.limit": "float",
    "power.default_limit": "float",
    "power.max_limit": "float",
    "temperature.gpu": "float",
    "temperature.memory": "float",
    "clocks.sm": "int",
    "clocks.mem": "int",
    "clocks.gr": "int",
    "clocks.max.sm": "int",
    "clocks.max.mem": "int",
    "clocks.max.gr": "int",
    "fan.speed": "float",
    "pstate": "pstate",
    "pcie.link.gen.current": "int",
    "pcie.link.gen.max": "int",
    "pcie.link.width.current": "int",
    "pcie.link.width.max": "int",
    "persistence_mode": "bool",
    "compute_cap": "cc",
    "ecc.errors.corrected.volatile.total": "int",
    "ecc.errors.uncorrected.volatile.total": "int",
    "clocks_event_reasons.active": "mask",
    "pid": "int",
    "process_name": "text",
    "used_gpu_memory": "bytes",
}
for _suffix in SMI_FIELDS:
    FIELD_KINDS[f"clocks_event_reasons.{_suffix}"] = "reason"

# Other spellings nvidia-smi accepts for the same field.
FIELD_ALIASES: dict[str, str] = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.memory": "clocks.mem",
    "clocks.current.graphics": "clocks.gr",
    "clocks.max.memory": "clocks.max.mem",
    "clocks.max.graphics": "clocks.max.gr",
    "clocks.max.sm": "clocks.max.sm",
    "used_memory": "used_gpu_memory",
}

# Cells that may legitimately hold commas (a product or process name); extra cells in a row
# are folded back into such a column when it is the only one.
FREE_TEXT_FIELDS = frozenset({"name", "process_name"})

EVENT_REASON_PREFIX = "clocks_event_reasons."
THROTTLE_REASON_PREFIX = "clocks_throttle_reasons."  # the name before driver 535
EVENT_REASON_FIELDS: tuple[str, ...] = tuple(EVENT_REASON_PREFIX + s for s in SMI_FIELDS)

# What SmiSource asks for; every field maps onto GpuStatic, GpuSample or RigInfo.
GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "memory.reserved",
    "utilization.gpu",
    "utilization.memory",
    "power.draw",
    "power.limit",
    "power.default_limit",
    "power.max_limit",
    "temperature.gpu",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "fan.speed",
    "pstate",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
    "persistence_mode",
    "compute_cap",
    "serial",
    "vbios_version",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    *EVENT_REASON_FIELDS,
)

APP_QUERY_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_gpu_memory")

_UNIT_BYTES = {"b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "kb": 1000, "mb": 10**6, "gb": 10**9}

_NA_WORDS = frozenset(
    {"", "n/a", "na", "not supported", "unknown error", "not available", "insufficient permissions"}
)
# Markers that say the GPU itself is gone, not just one field.
LOST_MARKERS = ("gpu requires reset", "gpu is lost")

_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z%/]+)?$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_UUID = re.compile(r"^(GPU|MIG)-\S+$")
_PSTATE = re.compile(r"^P(\d{1,2})$")
_CC = re.compile(r"^(\d+)\.(\d+)$")
MASK = re.compile(r"^0x[0-9A-Fa-f]+$")
_TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?$")
HEADER_CELL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:\s*\[([^\]]*)\])?$")
_UNKNOWN_FIELD = re.compile(
    r"Field\s+[\"'“”]([^\"'“”]+)[\"'“”]\s+is not a valid field to query", re.IGNORECASE
)
BOOL_WORDS = {"enabled": True, "disabled": False, "yes": True, "no": False}
REASON_WORDS = {"active": True, "not active": False}


def canonical_field(column: str) -> tuple[str, str | None]:
    """``"memory.used [MiB]"`` -> ``("memory.used", "MiB")``; aliases and the old
    ``clocks_throttle_reasons.*`` spelling map to one name."""
    text = column.strip()
    unit: str | None = None
    m = HEADER_CELL.match(text)
    if m:
        text, unit = m.group(1), m.group(2)
    name = text.lower()
    if name.startswith(THROTTLE_REASON_PREFIX):
        name = EVENT_REASON_PREFIX + name[len(THROTTLE_REASON_PREFIX) :]
    return FIELD_ALIASES.get(name, name), unit


def unknown_field(output: str) -> str | None:
    """The field named in nvidia-smi's ``Field "x" is not a valid field to query``, if any."""
    m = _UNKNOWN_FIELD.search(output)
    return m.group(1) if m else None


def is_na(cell: str) -> bool:
    """``[N/A]``, ``N/A``, ``[Not Supported]``, ``[Unknown Error]`` and any other bracketed
    marker nvidia-smi prints instead of a value."""
    s = cell.strip()
    return s.lower() in _NA_WORDS or (s.startswith("[") and s.endswith("]"))


def valid_cell(kind: str, cell: str) -> bool:
    s = cell.strip()
    if is_na(s):
        return True
    if kind in ("int", "float", "bytes"):
        return _NUMBER.match(s) is not None
    if kind == "busid":
        return _BUS_ID.match(s) is not None
    if kind == "uuid":
        return _UUID.match(s) is not None
    if kind == "pstate":
        return _PSTATE.match(s) is not None
    if kind == "cc":
        return _CC.match(s) is not None
    if kind == "mask":
        return MASK.match(s) is not None
    if kind == "timestamp":
        return _TIMESTAMP.match(s) is not None
    if kind == "bool":
        return s.lower() in BOOL_WORDS
    if kind == "reason":
        return s.lower() in REASON_WORDS
    return True


MAX_READING = 1e18  # bytes, MiB, W, MHz: far past any real value


def _number(cell: str) -> tuple[float, str | None] | None:
    s = cell.strip()
    if is_na(s):
        return None
    m = _NUMBER.match(s)
    if not m:
        return None
    value = float(m.group(1))
    # a reading past any a GPU gives (a mangled cell of a thousand digits) is no reading
    if not math.isfinite(value) or abs(value) > MAX_READING:
        return None
    return value, m.group(2)


def to_float(cell: str) -> float | None:
    """``"70.00 W"`` or ``"70.00"`` -> 70.0; markers -> None."""
    n = _number(cell)
    return None if n is None else n[0]


def to_int(cell: str) -> int | None:
    n = _number(cell)
    return None if n is None else round(n[0])


def to_bytes(cell: str, unit: str | None = None) -> int | None:
    """A memory cell in bytes: the cell's own unit first, then the header's, else MiB (what
    nvidia-smi prints with ``nounits``)."""
    n = _number(cell)
    if n is None:
        return None
    value, cell_unit = n
    factor = _UNIT_BYTES.get((cell_unit or unit or "MiB").lower())
    if factor is None:
        return None
    return round(value * factor)


def cell_text(cell: str) -> str | None:
    s = cell.strip()
    return None if is_na(s) else s


def timestamp_wall(cell: str) -> float | None:
    """nvidia-smi prints local time without a zone; read it as this machine's local time."""
    s = cell.strip()
    if not _TIMESTAMP.match(s):
        return None
    fmt = "%Y/%m/%d %H:%M:%S.%f" if "." in s else "%Y/%m/%d %H:%M:%S"
    try:
        return datetime.strptime(s, fmt).timestamp()
    except ValueError:
        return None


def to_pstate(cell: str | None) -> int | None:
    m = _PSTATE.match(cell.strip()) if cell else None
    return int(m.group(1)) if m else None


def to_compute_cap(cell: str | None) -> tuple[int, int] | None:
    m = _CC.match(cell.strip()) if cell else None
    return (int(m.group(1)), int(m.group(2))) if m else None

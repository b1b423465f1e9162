"""``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV output, parsed into core models.

The parser is written from the format, not from one driver's output: it takes the field list
that was asked for (``--format=csv,noheader``) or reads a header when one is printed, accepts
values with or without units (``15360 MiB`` or ``15360``), every ``[N/A]``-style marker,
blank lines, CRLF, and lines of other text around the CSV (a script's log). A row whose cells
do not fit the columns is skipped with a note rather than guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from lltui.core.monitor.models import GpuProcess, GpuSample, GpuStatic
from lltui.core.monitor.throttle import SMI_FIELDS, reasons_from_mask
from lltui.core.units import GIB, KIB, MIB


class SmiParseError(ValueError):
    """The text holds no CSV this parser can use; ``str()`` is one line."""


# Canonical field name -> kind of value. Kinds decide validation and conversion.
_KINDS: dict[str, str] = {
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
    _KINDS[f"clocks_event_reasons.{_suffix}"] = "reason"

# Other spellings nvidia-smi accepts for the same field.
_ALIASES: dict[str, str] = {
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
_FREE_TEXT = frozenset({"name", "process_name"})

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
_LOST_MARKERS = ("gpu requires reset", "gpu is lost")

_NUMBER = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z%/]+)?$")
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_UUID = re.compile(r"^(GPU|MIG)-\S+$")
_PSTATE = re.compile(r"^P(\d{1,2})$")
_CC = re.compile(r"^(\d+)\.(\d+)$")
_MASK = re.compile(r"^0x[0-9A-Fa-f]+$")
_TIMESTAMP = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?$")
_HEADER_CELL = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?:\s*\[([^\]]*)\])?$")
_UNKNOWN_FIELD = re.compile(
    r"Field\s+[\"'“”]([^\"'“”]+)[\"'“”]\s+is not a valid field to query", re.IGNORECASE
)
_BOOL_WORDS = {"enabled": True, "disabled": False, "yes": True, "no": False}
_REASON_WORDS = {"active": True, "not active": False}


def canonical_field(column: str) -> tuple[str, str | None]:
    """``"memory.used [MiB]"`` -> ``("memory.used", "MiB")``; aliases and the old
    ``clocks_throttle_reasons.*`` spelling map to one name."""
    text = column.strip()
    unit: str | None = None
    m = _HEADER_CELL.match(text)
    if m:
        text, unit = m.group(1), m.group(2)
    name = text.lower()
    if name.startswith(THROTTLE_REASON_PREFIX):
        name = EVENT_REASON_PREFIX + name[len(THROTTLE_REASON_PREFIX) :]
    return _ALIASES.get(name, name), unit


def unknown_field(output: str) -> str | None:
    """The field named in nvidia-smi's ``Field "x" is not a valid field to query``, if any."""
    m = _UNKNOWN_FIELD.search(output)
    return m.group(1) if m else None


def is_na(cell: str) -> bool:
    """``[N/A]``, ``N/A``, ``[Not Supported]``, ``[Unknown Error]`` and any other bracketed
    marker nvidia-smi prints instead of a value."""
    s = cell.strip()
    return s.lower() in _NA_WORDS or (s.startswith("[") and s.endswith("]"))


def _valid(kind: str, cell: str) -> bool:
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
        return _MASK.match(s) is not None
    if kind == "timestamp":
        return _TIMESTAMP.match(s) is not None
    if kind == "bool":
        return s.lower() in _BOOL_WORDS
    if kind == "reason":
        return s.lower() in _REASON_WORDS
    return True


@dataclass(frozen=True, slots=True)
class CsvTable:
    """One CSV block: its columns as printed (or as asked), and the rows that fit them."""

    columns: tuple[str, ...]  # as printed in the header, or the field list asked for
    fields: tuple[str, ...]  # canonical names, one per column
    units: tuple[str | None, ...]  # from the header (``[MiB]``), None when not printed
    header: str | None  # the header line as printed; None for ``noheader`` output
    rows: tuple[tuple[str, ...], ...]  # stripped cells, one tuple per row
    row_lines: tuple[int, ...]  # 1-based line number of each row
    notes: tuple[str, ...] = ()  # rows skipped, and why

    def column(self, field: str) -> int | None:
        """Position of a canonical field, or None when the table lacks it."""
        try:
            return self.fields.index(field)
        except ValueError:
            return None


def _lines(text: str) -> list[str]:
    return text.lstrip("\ufeff").splitlines()


def _header_of(line: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str | None, ...]] | None:
    """Columns, fields and units when ``line`` is a CSV header with at least one field we
    know; None for data rows and other text."""
    cells = [c.strip() for c in line.split(",")]
    if not cells or any(not c or not _HEADER_CELL.match(c) for c in cells):
        return None
    parsed = [canonical_field(c) for c in cells]
    if not any(f in _KINDS for f, _ in parsed):
        return None
    return tuple(cells), tuple(f for f, _ in parsed), tuple(u for _, u in parsed)


def _fit(line: str, fields: Sequence[str]) -> tuple[str, ...] | str:
    """The row's cells, or why the line does not fit the columns."""
    cells = [c.strip() for c in line.split(",")]
    n = len(fields)
    if len(cells) > n:
        free = [i for i, f in enumerate(fields) if f in _FREE_TEXT]
        if len(free) != 1:
            return f"{len(cells)} cells where {n} were expected"
        i, extra = free[0], len(cells) - n
        cells[i : i + extra + 1] = [", ".join(cells[i : i + extra + 1])]
    if len(cells) < n:
        return f"{len(cells)} cells where {n} were expected"
    for field, cell in zip(fields, cells, strict=True):
        kind = _KINDS.get(field, "text")
        if not _valid(kind, cell):
            return f"{field} = {cell[:40]!r} is not a {kind} value"
    return tuple(cells)


def _table(
    lines: Sequence[str],
    start: int,
    stop: int,
    columns: tuple[str, ...],
    fields: tuple[str, ...],
    units: tuple[str | None, ...],
    header: str | None,
) -> CsvTable:
    rows: list[tuple[str, ...]] = []
    row_lines: list[int] = []
    notes: list[str] = []
    for i in range(start, stop):
        line = lines[i]
        if not line.strip():
            continue
        fitted = _fit(line, fields)
        if isinstance(fitted, str):
            # A line with the right shape but bad cells is worth a note; prose around the
            # CSV (one cell, no commas) is not.
            if "," in line:
                notes.append(f"line {i + 1}: skipped, {fitted}")
            continue
        rows.append(fitted)
        row_lines.append(i + 1)
    return CsvTable(columns, fields, units, header, tuple(rows), tuple(row_lines), tuple(notes))


def find_tables(text: str) -> tuple[CsvTable, ...]:
    """Every header-led CSV block in ``text``, each with the rows up to the next header."""
    lines = _lines(text)
    headers = [(i, h) for i, line in enumerate(lines) if (h := _header_of(line)) is not None]
    out = []
    for k, (i, (columns, fields, units)) in enumerate(headers):
        stop = headers[k + 1][0] if k + 1 < len(headers) else len(lines)
        out.append(_table(lines, i + 1, stop, columns, fields, units, lines[i].strip()))
    return tuple(out)


def parse_csv(text: str, fields: Sequence[str] | None = None) -> CsvTable:
    """The CSV of one query in ``text``.

    A printed header wins (the first whose fields include one of ``fields``, or the first
    at all); without one, lines are read as rows of ``fields`` (the list given to
    ``--query-gpu``, with or without ``[unit]`` suffixes). Raises SmiParseError when there
    is neither a header nor a field list, or when nothing in the text fits.
    """
    tables = find_tables(text)
    wanted = {canonical_field(f)[0] for f in fields} if fields else set()
    for table in tables:
        if not wanted or wanted & set(table.fields):
            return table
    if fields is None:
        if not text.strip():
            raise SmiParseError("the text is empty")
        raise SmiParseError("no nvidia-smi CSV header found, and no field list was given")
    if not fields:
        raise SmiParseError("an empty field list was given")
    parsed = [canonical_field(f) for f in fields]
    columns = tuple(f.strip() for f in fields)
    table = _table(
        _lines(text),
        0,
        len(_lines(text)),
        columns,
        tuple(f for f, _ in parsed),
        tuple(u for _, u in parsed),
        None,
    )
    if not table.rows:
        raise SmiParseError(_no_rows_reason(text, len(fields)))
    return table


def _no_rows_reason(text: str, n: int) -> str:
    first = next((line.strip() for line in _lines(text) if line.strip()), "")
    if not first:
        return "nvidia-smi printed nothing"
    if not first.isprintable():
        return f"no CSV rows of {n} fields: the text is not nvidia-smi output (binary data?)"
    return f"no CSV rows of {n} fields; the output starts with: {first[:120]}"


# -- values --------------------------------------------------------------------------------


def _number(cell: str) -> tuple[float, str | None] | None:
    s = cell.strip()
    if is_na(s):
        return None
    m = _NUMBER.match(s)
    if not m:
        return None
    return float(m.group(1)), m.group(2)


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


def _text(cell: str) -> str | None:
    s = cell.strip()
    return None if is_na(s) else s


def _timestamp_wall(cell: str) -> float | None:
    """nvidia-smi prints local time without a zone; read it as this machine's local time."""
    s = cell.strip()
    if not _TIMESTAMP.match(s):
        return None
    fmt = "%Y/%m/%d %H:%M:%S.%f" if "." in s else "%Y/%m/%d %H:%M:%S"
    try:
        return datetime.strptime(s, fmt).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class SmiGpuRow:
    """One GPU row of ``--query-gpu``: the static facts and the sample it holds."""

    line: int
    static: GpuStatic
    sample: GpuSample
    driver_version: str | None = None
    timestamp: str | None = None  # as printed
    wall: float | None = None  # the timestamp as epoch seconds (local time)


@dataclass(frozen=True, slots=True)
class SmiAppRow:
    """One row of ``--query-compute-apps``."""

    line: int
    pid: int
    gpu_uuid: str | None
    gpu_bus_id: str | None
    process_name: str | None
    used_memory: int | None


class _Row:
    """Typed access to one row's cells by canonical field."""

    def __init__(self, table: CsvTable, cells: tuple[str, ...]) -> None:
        self._table = table
        self._cells = cells

    def raw(self, field: str) -> str | None:
        i = self._table.column(field)
        return None if i is None else self._cells[i]

    def has(self, field: str) -> bool:
        return self._table.column(field) is not None

    def text(self, field: str) -> str | None:
        raw = self.raw(field)
        return None if raw is None else _text(raw)

    def integer(self, field: str) -> int | None:
        raw = self.raw(field)
        return None if raw is None else to_int(raw)

    def number(self, field: str) -> float | None:
        raw = self.raw(field)
        return None if raw is None else to_float(raw)

    def first_number(self, *fields: str) -> float | None:
        for field in fields:
            value = self.number(field)
            if value is not None:
                return value
        return None

    def size(self, field: str) -> int | None:
        i = self._table.column(field)
        return None if i is None else to_bytes(self._cells[i], self._table.units[i])

    def lost_marker(self) -> str | None:
        for cell in self._cells:
            s = cell.strip().strip("[]")
            if s.lower() in _LOST_MARKERS:
                return s
        return None


def _pstate(cell: str | None) -> int | None:
    m = _PSTATE.match(cell.strip()) if cell else None
    return int(m.group(1)) if m else None


def _compute_cap(cell: str | None) -> tuple[int, int] | None:
    m = _CC.match(cell.strip()) if cell else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def _throttle(row: _Row) -> tuple[str, ...] | None:
    """Words of the active clock-event reasons; None when the GPU reports none of them."""
    mask = row.text("clocks_event_reasons.active")
    if mask is not None and _MASK.match(mask):
        return reasons_from_mask(int(mask, 16))
    states: list[tuple[str, bool]] = []
    for suffix, word in SMI_FIELDS.items():
        cell = row.text(EVENT_REASON_PREFIX + suffix)
        if cell is not None and cell.lower() in _REASON_WORDS:
            states.append((word, _REASON_WORDS[cell.lower()]))
    if not states:
        return None
    return tuple(word for word, active in states if active)


def _identity(row: _Row) -> str:
    return row.text("uuid") or row.text("pci.bus_id") or ""


def gpu_rows(table: CsvTable) -> tuple[SmiGpuRow, ...]:
    """Every row of a ``--query-gpu`` table as GpuStatic + GpuSample.

    Fields the table lacks are None (``uuid``/``pci_bus_id`` empty, ``memory_total`` 0).
    Without an ``index`` column a GPU's index is its place among the distinct GPUs of the
    table in PCI bus order, the order nvidia-smi numbers them.
    """
    typed = [_Row(table, cells) for cells in table.rows]
    order: dict[str, int] = {}
    if table.column("index") is None:
        for key in sorted({_identity(r) for r in typed}):
            order[key] = len(order)
    out = []
    for line, row in zip(table.row_lines, typed, strict=True):
        index = row.integer("index")
        if index is None:
            index = order.get(_identity(row), 0)
        static = GpuStatic(
            index=index,
            uuid=row.text("uuid") or "",
            name=row.text("name") or "",
            pci_bus_id=row.text("pci.bus_id") or "",
            memory_total=row.size("memory.total") or 0,
            power_limit_default_w=row.number("power.default_limit"),
            power_limit_max_w=row.number("power.max_limit"),
            max_sm_clock_mhz=row.integer("clocks.max.sm"),
            max_mem_clock_mhz=row.integer("clocks.max.mem"),
            compute_capability=_compute_cap(row.text("compute_cap")),
            pcie_gen_max=row.integer("pcie.link.gen.max"),
            pcie_width_max=row.integer("pcie.link.width.max"),
            serial=row.text("serial"),
            vbios=row.text("vbios_version"),
            persistence_mode=_BOOL_WORDS.get((row.text("persistence_mode") or "").lower()),
        )
        lost = row.lost_marker()
        sample = GpuSample(
            info=static,
            lost=lost is not None,
            memory_used=row.size("memory.used"),
            memory_free=row.size("memory.free"),
            memory_reserved=row.size("memory.reserved"),
            util_gpu=row.number("utilization.gpu"),
            util_mem=row.number("utilization.memory"),
            power_w=row.first_number("power.draw", "power.draw.instant", "power.draw.average"),
            power_limit_w=row.first_number("enforced.power.limit", "power.limit"),
            temp_c=row.number("temperature.gpu"),
            sm_clock_mhz=row.integer("clocks.sm"),
            mem_clock_mhz=row.integer("clocks.mem"),
            fan_pct=row.number("fan.speed"),
            pstate=_pstate(row.text("pstate")),
            throttle_reasons=_throttle(row),
            pcie_gen=row.integer("pcie.link.gen.current"),
            pcie_width=row.integer("pcie.link.width.current"),
            ecc_uncorrected=row.integer("ecc.errors.uncorrected.volatile.total"),
            ecc_corrected=row.integer("ecc.errors.corrected.volatile.total"),
            error=lost,
        )
        stamp = row.text("timestamp")
        out.append(
            SmiGpuRow(
                line=line,
                static=static,
                sample=sample,
                driver_version=row.text("driver_version"),
                timestamp=stamp,
                wall=_timestamp_wall(stamp) if stamp else None,
            )
        )
    return tuple(out)


def group_samples(rows: Iterable[SmiGpuRow]) -> tuple[tuple[SmiGpuRow, ...], ...]:
    """Split the rows of a looped (``-l``) output into samples: a sample ends where a GPU
    it already holds appears again. GPUs are identified by UUID, else bus id, else index,
    because looped output does not keep the GPUs in one order."""
    groups: list[tuple[SmiGpuRow, ...]] = []
    current: list[SmiGpuRow] = []
    seen: set[str] = set()
    for row in rows:
        key = row.static.uuid or row.static.pci_bus_id or f"#{row.static.index}"
        if key in seen:
            groups.append(tuple(current))
            current, seen = [], set()
        current.append(row)
        seen.add(key)
    if current:
        groups.append(tuple(current))
    return tuple(groups)


def parse_gpu_samples(
    text: str, fields: Sequence[str] | None = None
) -> tuple[tuple[SmiGpuRow, ...], ...]:
    """All GPU rows of a ``--query-gpu`` output (one poll or a looped log), per sample,
    each sample's rows in index order. Raises SmiParseError when there are none."""
    table = parse_csv(text, fields)
    rows = gpu_rows(table)
    if not rows:
        raise SmiParseError(
            "the nvidia-smi CSV has a header but no GPU rows"
            + (f" ({table.notes[0]})" if table.notes else "")
        )
    return tuple(tuple(sorted(g, key=lambda r: r.static.index)) for g in group_samples(rows))


def app_rows(table: CsvTable) -> tuple[SmiAppRow, ...]:
    """Rows of a ``--query-compute-apps`` table; rows without a pid are skipped."""
    out = []
    for line, cells in zip(table.row_lines, table.rows, strict=True):
        row = _Row(table, cells)
        pid = row.integer("pid")
        if pid is None:
            continue
        out.append(
            SmiAppRow(
                line=line,
                pid=pid,
                gpu_uuid=row.text("uuid"),
                gpu_bus_id=row.text("pci.bus_id"),
                process_name=row.text("process_name"),
                used_memory=row.size("used_gpu_memory"),
            )
        )
    return tuple(out)


def parse_apps(text: str, fields: Sequence[str] = APP_QUERY_FIELDS) -> tuple[SmiAppRow, ...]:
    """Processes from ``--query-compute-apps`` output. No processes prints nothing (or only
    a header), which is an empty tuple, not an error."""
    if not text.strip():
        return ()
    try:
        table = parse_csv(text, fields)
    except SmiParseError:
        if "no running" in text.lower():
            return ()
        raise
    return app_rows(table)


def processes_by_gpu(
    apps: Iterable[SmiAppRow], statics: Sequence[GpuStatic]
) -> dict[int, tuple[GpuProcess, ...]]:
    """Attach each process to the GPU whose UUID (or bus id) it names, as GpuProcess."""
    by_uuid = {s.uuid: s.index for s in statics if s.uuid}
    by_bus = {s.pci_bus_id.lower(): s.index for s in statics if s.pci_bus_id}
    out: dict[int, list[GpuProcess]] = {}
    for app in apps:
        index = by_uuid.get(app.gpu_uuid or "")
        if index is None and app.gpu_bus_id:
            index = by_bus.get(app.gpu_bus_id.lower())
        if index is None:
            continue
        name = app.process_name
        out.setdefault(index, []).append(
            GpuProcess(
                pid=app.pid,
                gpu_index=index,
                used_memory=app.used_memory,
                kind="C",
                name=name.rsplit("/", 1)[-1] if name else None,
                command=name,
            )
        )
    return {k: tuple(v) for k, v in out.items()}

"""``nvidia-smi --query-gpu`` / ``--query-compute-apps`` CSV output, parsed into core models.

The parser is written from the format, not from one driver's output. :mod:`.smi_fields` holds
the field table and how one cell reads, :mod:`.smi_table` finds the CSV in the text; this
module turns its rows into GpuStatic, GpuSample and GpuProcess, and keeps the names callers
import from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lltui.core.monitor.models import GpuProcess, GpuSample, GpuStatic, gpu_key
from lltui.core.monitor.smi_fields import (
    APP_QUERY_FIELDS,
    BOOL_WORDS,
    EVENT_REASON_FIELDS,
    EVENT_REASON_PREFIX,
    GPU_QUERY_FIELDS,
    LOST_MARKERS,
    MASK,
    REASON_WORDS,
    THROTTLE_REASON_PREFIX,
    canonical_field,
    cell_text,
    is_na,
    timestamp_wall,
    to_bytes,
    to_compute_cap,
    to_float,
    to_int,
    to_pstate,
    unknown_field,
)
from lltui.core.monitor.smi_table import CsvTable, SmiParseError, find_tables, parse_csv
from lltui.core.monitor.throttle import SMI_FIELDS, reasons_from_mask

# The names callers know this module by, wherever they now live.
__all__ = [
    "APP_QUERY_FIELDS",
    "EVENT_REASON_FIELDS",
    "EVENT_REASON_PREFIX",
    "GPU_QUERY_FIELDS",
    "THROTTLE_REASON_PREFIX",
    "CsvTable",
    "SmiAppRow",
    "SmiGpuRow",
    "SmiParseError",
    "app_rows",
    "canonical_field",
    "find_tables",
    "gpu_rows",
    "is_na",
    "parse_apps",
    "parse_csv",
    "processes_by_gpu",
    "to_bytes",
    "to_float",
    "to_int",
    "unknown_field",
]


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
        return None if raw is None else cell_text(raw)

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
            if s.lower() in LOST_MARKERS:
                return s
        return None


def _throttle(row: _Row) -> tuple[str, ...] | None:
    """Words of the active clock-event reasons; None when the GPU reports none of them."""
    mask = row.text("clocks_event_reasons.active")
    if mask is not None and MASK.match(mask):
        return reasons_from_mask(int(mask, 16))
    states: list[tuple[str, bool]] = []
    for suffix, word in SMI_FIELDS.items():
        cell = row.text(EVENT_REASON_PREFIX + suffix)
        if cell is not None and cell.lower() in REASON_WORDS:
            states.append((word, REASON_WORDS[cell.lower()]))
    if not states:
        return None
    return tuple(word for word, active in states if active)


def _identity(row: _Row) -> str:
    return row.text("uuid") or row.text("pci.bus_id") or ""


def gpu_rows(table: CsvTable) -> tuple[SmiGpuRow, ...]:
    """Every row of a ``--query-gpu`` table as GpuStatic + GpuSample.

    Fields the table lacks are None (``uuid``/``pci_bus_id`` empty, ``memory_total`` None).
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
        static = _static(row, index)
        stamp = row.text("timestamp")
        out.append(
            SmiGpuRow(
                line=line,
                static=static,
                sample=_sample(row, static),
                driver_version=row.text("driver_version"),
                timestamp=stamp,
                wall=timestamp_wall(stamp) if stamp else None,
            )
        )
    return tuple(out)


def _static(row: _Row, index: int) -> GpuStatic:
    return GpuStatic(
        index=index,
        uuid=gpu_key(row.text("uuid"), index),
        name=row.text("name") or "",
        pci_bus_id=row.text("pci.bus_id") or "",
        memory_total=row.size("memory.total"),
        power_limit_default_w=row.number("power.default_limit"),
        power_limit_max_w=row.number("power.max_limit"),
        max_sm_clock_mhz=row.integer("clocks.max.sm"),
        max_mem_clock_mhz=row.integer("clocks.max.mem"),
        compute_capability=to_compute_cap(row.text("compute_cap")),
        pcie_gen_max=row.integer("pcie.link.gen.max"),
        pcie_width_max=row.integer("pcie.link.width.max"),
        serial=row.text("serial"),
        vbios=row.text("vbios_version"),
        persistence_mode=BOOL_WORDS.get((row.text("persistence_mode") or "").lower()),
        vendor="nvidia",
    )


def _sample(row: _Row, static: GpuStatic) -> GpuSample:
    lost = row.lost_marker()
    return GpuSample(
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
        pstate=to_pstate(row.text("pstate")),
        throttle_reasons=_throttle(row),
        pcie_gen=row.integer("pcie.link.gen.current"),
        pcie_width=row.integer("pcie.link.width.current"),
        ecc_uncorrected=row.integer("ecc.errors.uncorrected.volatile.total"),
        ecc_corrected=row.integer("ecc.errors.corrected.volatile.total"),
        error=lost,
    )


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

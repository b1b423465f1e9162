"""Processes on the GPUs, one row per pid, updated in place by row key."""

from __future__ import annotations

from dataclasses import dataclass

from textual.markup import escape
from textual.widgets import DataTable

from lltui.core.monitor.models import RigSample
from lltui.core.units import MIB, compact_indexes, fmt_bytes

COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("pid", "PID", 8),
    ("user", "USER", 10),
    ("gpu", "GPU", 7),
    ("gpu_mem", "GPU MEM", 10),
    ("cpu", "CPU%", 6),
    ("rss", "RSS", 9),
    ("command", "COMMAND", None),
)


@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int
    user: str
    gpus: tuple[int, ...]
    gpu_mem: int | None
    kinds: str
    cpu: float | None
    rss: int | None
    command: str

    def cells(self, command_width: int = 200) -> tuple[str, ...]:
        mem = "-" if self.gpu_mem is None else f"{self.gpu_mem / MIB:.0f} MiB"
        return (
            str(self.pid),
            escape(self.user[:10]),
            compact_indexes(self.gpus),
            mem,
            "-" if self.cpu is None else f"{self.cpu:.0f}",
            fmt_bytes(self.rss, precision=1),
            escape(
                self.command
                if len(self.command) <= command_width
                else self.command[: command_width - 1] + "…"
            ),
        )

    def sort_value(self, key: str) -> tuple[float, int]:
        value: float
        if key == "gpu_mem":
            value = float(self.gpu_mem or 0)
        elif key == "cpu":
            value = self.cpu or 0.0
        elif key == "rss":
            value = float(self.rss or 0)
        elif key == "gpu":
            value = float(self.gpus[0]) if self.gpus else 0.0
        else:
            value = float(self.pid)
        return (value, self.pid)


def process_rows(sample: RigSample) -> dict[int, ProcessRow]:
    """Merge the per-GPU process lists into one row per pid."""
    merged: dict[int, dict[str, object]] = {}
    for g in sample.gpus:
        for p in g.processes:
            row = merged.setdefault(
                p.pid,
                {
                    "gpus": [],
                    "mem": None,
                    "kinds": set(),
                    "user": p.user or "-",
                    "cpu": p.cpu_pct,
                    "rss": p.host_rss,
                    "command": p.command or p.name or "?",
                },
            )
            gpus = row["gpus"]
            assert isinstance(gpus, list)
            gpus.append(g.info.index)
            if p.used_memory is not None:
                prev = row["mem"]
                row["mem"] = (prev if isinstance(prev, int) else 0) + p.used_memory
            kinds = row["kinds"]
            assert isinstance(kinds, set)
            kinds.add(p.kind)
    out = {}
    for pid, r in merged.items():
        gpus = r["gpus"]
        kinds = r["kinds"]
        assert isinstance(gpus, list) and isinstance(kinds, set)
        mem = r["mem"]
        cpu = r["cpu"]
        rss = r["rss"]
        out[pid] = ProcessRow(
            pid=pid,
            user=str(r["user"]),
            gpus=tuple(sorted(gpus)),
            gpu_mem=mem if isinstance(mem, int) else None,
            kinds="+".join(sorted(kinds)),
            cpu=cpu if isinstance(cpu, float | int) else None,
            rss=rss if isinstance(rss, int) else None,
            command=str(r["command"]),
        )
    return out


class ProcessTable(DataTable[str]):
    """Rows keyed by pid: changed cells are updated, gone pids removed, new ones added;
    the table is never cleared, so the cursor and scroll position survive each tick."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)  # type: ignore[arg-type]
        self._rows: dict[int, ProcessRow] = {}
        self._order: list[int] = []
        self._width = 0

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, key=key, width=width)

    def _command_width(self) -> int:
        # what is left of the table's width after the fixed columns (each has 2 cells padding)
        fixed = sum((w or 0) + 2 for _k, _l, w in COLUMNS if w is not None)
        return max(16, self.size.width - fixed - 3)

    def show(self, sample: RigSample, sort_key: str, reverse: bool) -> None:
        rows = process_rows(sample)
        width = self._command_width()
        if width != self._width:
            self._width = width
            self._rows = {}  # re-render every cell at the new width (a resize, not a tick)
            self._order = []
            for key in list(self.rows):
                self.remove_row(key)
        for pid in [p for p in self._rows if p not in rows]:
            self.remove_row(str(pid))
            del self._rows[pid]
        for pid, row in rows.items():
            old = self._rows.get(pid)
            if old is None:
                self.add_row(*row.cells(width), key=str(pid))
            elif old != row:
                for (col, _label, _w), new_cell, old_cell in zip(
                    COLUMNS, row.cells(width), old.cells(width), strict=True
                ):
                    if new_cell != old_cell:
                        self.update_cell(str(pid), col, new_cell)
            self._rows[pid] = row
        # biggest first by default: "reverse" flips to ascending
        order = sorted(rows, key=lambda p: rows[p].sort_value(sort_key), reverse=not reverse)
        if order != self._order:
            self.sort(
                key=lambda row: self._rows[int(row[0])].sort_value(sort_key),
                reverse=not reverse,
            )
            self._order = order

    @property
    def pids(self) -> list[int]:
        return list(self._order)

"""Processes on the GPUs, one row per pid, updated in place by row key; a filter over them,
tags, a signal to the selected (or tagged) ones, and each one's own history.

Keys on the table (its own bindings; the app's ``s``/``r`` choose the sort column and order,
and a click on a sortable header sorts by it, again reverses): ``/`` filter by command, user,
pid or container, ``c`` filter by the selected process's container, ``escape`` clear the
filter, ``enter`` the selected process's history, ``t`` tag or untag it, ``T`` untag all,
``K`` or ``F9`` signal the tagged processes or else the selected one (``k`` is the app's
previous-GPU key, so the table does not take it). In read-only mode (``--readonly``) there
is no tagging and no signal.

The CONTAINER column is there while a process listed runs in a container, pod, slurm job or
systemd service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.coordinate import Coordinate
from textual.markup import escape
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from lltui.app.app_protocol import host_of
from lltui.app.state.monitor import SORT_KEYS
from lltui.core.monitor.commands import command_label
from lltui.core.monitor.models import RigSample
from lltui.core.units import GIB, MIB, compact_indexes, fmt_bytes

COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    # as narrow as their widest value and sorted header, so 80 columns need no side scroll
    ("pid", "PID", 7),
    ("user", "USER", 8),
    ("gpu", "GPU", 6),
    ("gpu_mem", "GPU MEM", 9),
    ("sm", "SM%", 4),
    ("cpu", "CPU%", 5),
    ("rss", "RSS", 8),
    ("command", "COMMAND", None),
)
TIME_COLUMN = ("time", "TIME", 6)
CONTAINER_COLUMN = ("container", "CONTAINER", 18)
TIME_MIN_WIDTH = 90  # 80 columns keep the command in view: no elapsed time there
CONTAINER_MIN_WIDTH = 110  # narrower tables put the container before the command instead
LABELS = {key: label for key, label, _w in (*COLUMNS, TIME_COLUMN, CONTAINER_COLUMN)}
TAG = "*"  # before a tagged process's pid
DESCENDING, ASCENDING = "▼", "▲"


def cell_text(cell: str) -> Text:
    """A cell (markup, its data escaped) as the table draws a ``str`` cell, but without
    emoji codes: a command's ``:fire:`` stays as it is written, and rich's emoji table (most
    of a megabyte) is not loaded."""
    text = Text.from_markup(cell, emoji=False, end="")
    text.no_wrap = True  # as the table sets a str cell's in its one-line rows
    return text


def header_label(key: str, sort_key: str, reverse: bool) -> str:
    """A column's header, with the sort direction on the sorted column (biggest first
    unless reversed)."""
    label = LABELS[key]
    if key != sort_key:
        return label
    return f"{label}{ASCENDING if reverse else DESCENDING}"


@dataclass(frozen=True, slots=True)
class ProcessRow:
    pid: int
    user: str
    gpus: tuple[int, ...]
    gpu_mem: int | None
    sm: float | None  # mean over its GPUs of those that report it
    kinds: str
    cpu: float | None
    rss: int | None
    command: str
    model: str | None = None  # the model a llama-server serves
    started: float | None = None  # seconds since the epoch
    container: str = ""  # the container's label; "" for a process of the host
    mig: str = ""  # the MIG instance it runs in ("GI 1"), where its GPU is in MIG mode
    mem_partial: bool = False  # gpu_mem leaves out a GPU that does not report its share

    @property
    def shown_command(self) -> str:
        """The command, with the model a llama-server serves in front: which model holds
        which memory when several servers (or a router's) share the GPUs."""
        label = command_label(self.command)
        # an --alias (a router's model name) is said too where the file name does not say it
        if self.model and not label.startswith(self.model):
            return f"[{self.model}] {label}"
        return label

    def elapsed(self, now: float) -> str:
        """How long the process has run: ``42s``, ``12m``, ``3h05m``, ``2d04h`` (changing at
        most once a minute past the first)."""
        if self.started is None:
            return "-"
        s = max(0, int(now - self.started))
        if s < 60:
            return f"{s}s"
        if s < 3600:
            return f"{s // 60}m"
        if s < 86400:
            return f"{s // 3600}h{s % 3600 // 60:02d}"
        return f"{s // 86400}d{s % 86400 // 3600:02d}h"

    def cells(
        self,
        command_width: int = 200,
        *,
        now: float = 0.0,
        tagged: bool = False,
        container: bool = False,
        elapsed: bool = True,
    ) -> tuple[str, ...]:
        if self.gpu_mem is None:
            mem = "-"
        elif self.gpu_mem < 10_000 * MIB:
            mem = f"{self.gpu_mem / MIB:.0f} MiB"
        else:  # a server across GPUs: "320.8 GiB" fits the column where "328508 MiB" did not
            mem = fmt_bytes(self.gpu_mem, precision=1)
        if self.mem_partial and self.gpu_mem is not None:  # at least this much
            mem = "≥" + (mem if len(mem) < 9 else fmt_bytes(self.gpu_mem, precision=0))
        gpu = compact_indexes(self.gpus) + (f"/{self.mig}" if self.mig else "")
        cells: tuple[str, ...] = (
            f"{TAG}{self.pid}" if tagged else str(self.pid),
            escape(self.user[:8]),
            gpu,
            mem,
            "-" if self.sm is None else f"{self.sm:.0f}",
            "-" if self.cpu is None else f"{self.cpu:.0f}",
            rss_cell(self.rss),
        )
        if elapsed:
            cells += (self.elapsed(now),)
        whole = self.shown_command
        if container:
            box = self.container or "-"
            cells += (escape(box if len(box) <= 18 else box[:17] + "…"),)
        elif self.container:  # no room for a column: the container leads the command
            whole = f"[{self.container}] {whole}"
        return (*cells, escape(_cut(whole, command_width)))

    def sort_value(self, key: str) -> tuple[float, int]:
        value: float
        if key == "gpu_mem":
            value = float(self.gpu_mem or 0)
        elif key == "sm":
            value = -1.0 if self.sm is None else self.sm  # unknown below an idle 0 %
        elif key == "cpu":
            value = self.cpu or 0.0
        elif key == "rss":
            value = float(self.rss or 0)
        elif key == "gpu":
            value = float(self.gpus[0]) if self.gpus else 0.0
        elif key == "time":  # the longest-running first
            value = -(self.started or 0.0)
        else:
            value = float(self.pid)
        return (value, self.pid)

    def matches(self, needle: str) -> bool:
        """Whether a filter (already case-folded) finds this row's command, user or pid."""
        return (
            not needle
            or needle in self.command.casefold()
            or needle in (self.model or "").casefold()
            or needle in self.user.casefold()
            or needle in str(self.pid)
            or needle in self.container.casefold()
        )


def rss_cell(n: int | None) -> str:
    """A host memory size that fits the 8 columns of RSS whole: ``310 MiB``, ``9.8 GiB``,
    ``12.3 GiB``, ``123 GiB`` (``fmt_bytes``' ``310.0 MiB`` was cut to ``310.0 Mi``)."""
    if n is None:
        return "-"
    if n < 1000 * MIB:
        return fmt_bytes(n, precision=0)
    gib = n / GIB
    return f"{gib:.1f} GiB" if gib < 99.95 else f"{gib:.0f} GiB"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


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
                    "sm": [],
                    "kinds": set(),
                    "user": p.user or "-",
                    "cpu": p.cpu_pct,
                    "rss": p.host_rss,
                    "command": p.command or p.name or "?",
                    "model": p.served,
                    "started": p.started,
                    "container": p.container.label if p.container else "",
                    "mig": f"GI{p.gpu_instance_id}" if p.gpu_instance_id is not None else "",
                },
            )
            gpus = row["gpus"]
            assert isinstance(gpus, list)
            gpus.append(g.info.index)
            if p.used_memory is not None:
                prev = row["mem"]
                row["mem"] = (prev if isinstance(prev, int) else 0) + p.used_memory
            else:
                row["partial"] = True
            kinds = row["kinds"]
            assert isinstance(kinds, set)
            kinds.add(p.kind)
            sms = row["sm"]
            assert isinstance(sms, list)
            if p.sm_util is not None:
                sms.append(p.sm_util)
    out = {}
    for pid, r in merged.items():
        gpus = r["gpus"]
        kinds = r["kinds"]
        sms = r["sm"]
        assert isinstance(gpus, list) and isinstance(kinds, set) and isinstance(sms, list)
        mem = r["mem"]
        cpu = r["cpu"]
        rss = r["rss"]
        out[pid] = ProcessRow(
            pid=pid,
            user=str(r["user"]),
            gpus=tuple(sorted(gpus)),
            gpu_mem=mem if isinstance(mem, int) else None,
            sm=sum(sms) / len(sms) if sms else None,
            kinds="+".join(sorted(kinds)),
            cpu=cpu if isinstance(cpu, float | int) else None,
            rss=rss if isinstance(rss, int) else None,
            command=str(r["command"]),
            model=r["model"] if isinstance(r["model"], str) else None,
            started=r["started"] if isinstance(r["started"], float | int) else None,
            container=str(r["container"]),
            mig=str(r["mig"]),
            mem_partial=bool(r.get("partial")),
        )
    return out


class ProcessTable(DataTable[Text]):
    """Rows keyed by pid: changed cells are updated, gone pids removed, new ones added;
    the table is never cleared, so the cursor and scroll position survive each tick. The
    filter hides the rows it does not find, tick after tick, until cleared."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "open_filter", "Filter", id="process-filter"),
        Binding("c", "filter_container", "Container", id="process-container", show=False),
        Binding("escape", "clear_filter", "Clear filter", id="process-filter-clear", show=False),
        Binding("enter", "history", "History", id="process-history", show=False),
        Binding("t", "tag", "Tag", id="process-tag", show=False),
        Binding("T", "untag_all", "Untag all", id="process-untag", show=False),
        Binding("K,f9", "signal", "Signal", id="process-signal"),
    ]

    @dataclass
    class FilterWanted(Message):
        """The user asked for the filter field (``/``)."""

    @dataclass
    class FilterCleared(Message):
        """The user cleared the filter from the table (``escape``)."""

    class SortClicked(Message):
        """A sortable column's header was clicked: the screen sorts by it (or reverses)."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    @dataclass
    class SignalWanted(Message):
        """The user asked to signal the selected process (or the tagged ones)."""

        row: ProcessRow
        tagged: tuple[ProcessRow, ...] = ()

    @dataclass
    class HistoryWanted(Message):
        """The user asked for the selected process's own history (``enter``)."""

        row: ProcessRow

    @dataclass
    class FilterSet(Message):
        """The user asked to filter by this text (the selected process's container)."""

        text: str

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)  # type: ignore[arg-type]
        self._rows: dict[int, ProcessRow] = {}
        self._order: list[int] = []
        self._width = 0
        self._filter = ""
        self._sorted_by: tuple[str, bool] | None = None
        self._last: tuple[RigSample, str, bool] | None = None
        self._columns: tuple[tuple[str, str, int | None], ...] = COLUMNS
        self._shown: dict[int, tuple[str, ...]] = {}  # the cells on screen, by pid
        self.tagged: set[int] = set()

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        # labels as Text: a str is parsed as markup with emoji codes, whose table (most of a
        # megabyte) an idle monitor has no use for
        for key, label, width in self._columns:
            self.add_column(Text(label), key=key, width=width)

    def _set_columns(self, with_time: bool, with_container: bool) -> None:
        """TIME where the table is wide enough; CONTAINER (before COMMAND) while a process
        runs in one, and room: the columns are laid anew (rare), the rows re-added."""
        extra: tuple[tuple[str, str, int | None], ...] = (TIME_COLUMN,) if with_time else ()
        extra += (CONTAINER_COLUMN,) if with_container else ()
        columns = (*COLUMNS[:-1], *extra, COLUMNS[-1])
        if columns == self._columns:
            return
        self._columns = columns
        self.clear(columns=True)
        self._rows = {}
        self._shown = {}
        self._order = []
        self._sorted_by = None
        self._add_columns()

    def _command_width(self) -> int:
        # what is left of the table's width after the fixed columns (each has 2 cells padding)
        fixed = sum((w or 0) + 2 for _k, _l, w in self._columns if w is not None)
        return max(12, self.size.width - fixed - 3)

    def _cells(self, row: ProcessRow, width: int, now: float) -> tuple[str, ...]:
        return row.cells(
            width,
            now=now,
            tagged=row.pid in self.tagged,
            container=CONTAINER_COLUMN in self._columns,
            elapsed=TIME_COLUMN in self._columns,
        )

    @property
    def sort_keys(self) -> tuple[str, ...]:
        """The sort keys of the columns shown at the table's width (TIME from 90 columns)."""
        timed = self.size.width >= TIME_MIN_WIDTH
        return tuple(k for k in SORT_KEYS if timed or k != "time")

    @property
    def filter_text(self) -> str:
        return self._filter

    def set_filter(self, text: str) -> None:
        """Show only rows whose command, user or pid contain ``text`` (any case)."""
        needle = text.strip().casefold()
        if needle == self._filter:
            return
        self._filter = needle
        if self._last is not None:
            self.show(*self._last)

    def show(self, sample: RigSample, sort_key: str, reverse: bool) -> None:
        self._last = (sample, sort_key, reverse)
        had_row = self.selected_row() is not None
        every = process_rows(sample)
        width_now = self.size.width
        boxed = width_now >= CONTAINER_MIN_WIDTH and any(r.container for r in every.values())
        self._set_columns(width_now >= TIME_MIN_WIDTH, boxed)
        rows = {pid: r for pid, r in every.items() if r.matches(self._filter)}
        self.tagged &= set(every)  # a process gone is untagged
        now = sample.wall
        width = self._command_width()
        if width != self._width or not self._rows:
            self._width = width
            self._rows = {}  # re-render every cell at the new width (a resize, not a tick)
            self._shown = {}
            self._order = []
            for key in list(self.rows):
                self.remove_row(key)
        for pid in [p for p in self._rows if p not in rows]:
            self.remove_row(str(pid))
            del self._rows[pid]
            self._shown.pop(pid, None)
        shown = self._shown
        for pid, row in rows.items():
            cells = self._cells(row, width, now)
            old = shown.get(pid)
            if old is None:
                self.add_row(*map(cell_text, cells), key=str(pid))
            elif old != cells:
                for (col, _label, _w), new_cell, old_cell in zip(
                    self._columns, cells, old, strict=True
                ):
                    if new_cell != old_cell:
                        self.update_cell(str(pid), col, cell_text(new_cell))
            self._rows[pid] = row
            shown[pid] = cells
        # biggest first by default: "reverse" flips to ascending
        order = sorted(rows, key=lambda p: rows[p].sort_value(sort_key), reverse=not reverse)
        if order != self._order:
            self.sort(
                key=lambda row: self._rows[int(str(row[0]).lstrip(TAG))].sort_value(sort_key),
                reverse=not reverse,
            )
            self._order = order
        self._mark_sorted(sort_key, reverse)
        if (self.selected_row() is not None) != had_row:
            self.refresh_bindings()  # enter: the process's history, or (none) the GPU's detail

    def _mark_sorted(self, sort_key: str, reverse: bool) -> None:
        """The sort direction on the sorted column's header (relabelled only on a change)."""
        if self._sorted_by == (sort_key, reverse):
            return
        self._sorted_by = (sort_key, reverse)
        for key, column in self.columns.items():
            column.label = Text(header_label(str(key.value), sort_key, reverse))
        self._clear_caches()  # the header row is cached with its labels
        self.refresh()

    @property
    def pids(self) -> list[int]:
        return list(self._order)

    def header_text(self) -> list[str]:
        """The column headers as shown."""
        return [c.label.plain for c in self.ordered_columns]

    def selected_row(self) -> ProcessRow | None:
        if not self._rows or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        return self._rows.get(int(key)) if key is not None else None

    def action_open_filter(self) -> None:
        self.post_message(self.FilterWanted())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "clear_filter":
            return bool(self._filter)  # escape means nothing here without a filter
        if action in ("signal", "tag", "untag_all"):
            return not host_of(self).readonly  # read-only: no signal, shown nowhere
        if action == "history":
            return self.selected_row() is not None  # else enter is the GPU's detail
        return action != "select_cursor"

    def action_history(self) -> None:
        row = self.selected_row()
        if row is not None:
            self.post_message(self.HistoryWanted(row))

    def action_filter_container(self) -> None:
        row = self.selected_row()
        if row is None or not row.container:
            self.app.notify("the selected process runs in no container", severity="warning")
            return
        self.post_message(self.FilterSet(row.container))

    def action_tag(self) -> None:
        row = self.selected_row()
        if row is None:
            return
        self.tagged ^= {row.pid}
        self._refresh_row(row.pid)
        if self.cursor_row < self.row_count - 1:
            self.move_cursor(row=self.cursor_row + 1)

    def action_untag_all(self) -> None:
        tagged, self.tagged = self.tagged, set()
        for pid in tagged:
            self._refresh_row(pid)

    def _refresh_row(self, pid: int) -> None:
        row = self._rows.get(pid)
        if row is None or self._last is None:
            return
        cells = self._cells(row, self._width, self._last[0].wall)
        self.update_cell(str(pid), "pid", cell_text(cells[0]))
        self._shown[pid] = cells

    def action_clear_filter(self) -> None:
        self.post_message(self.FilterCleared())

    def action_signal(self) -> None:
        tagged = tuple(self._rows[p] for p in sorted(self.tagged) if p in self._rows)
        row = self.selected_row()
        if row is None and not tagged:
            self.app.notify("no process selected", severity="warning")
            return
        self.post_message(self.SignalWanted(row or tagged[0], tagged))

    @on(DataTable.HeaderSelected)
    def _sort_by_header(self, event: DataTable.HeaderSelected) -> None:
        key = str(event.column_key.value)
        if key not in SORT_KEYS:
            return  # user and command are not sort keys
        event.stop()
        self.post_message(self.SortClicked(key))


class ProcessFilter(Input):
    """The filter field under the table: typing filters, enter keeps the filter and goes
    back to the table, escape clears and closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Clear filter", id="process-filter-close"),
    ]

    @dataclass
    class Closed(Message):
        """Escape in the field: clear the filter and close the field."""

    def action_close(self) -> None:
        self.post_message(self.Closed())


class ProcessPane(Vertical):
    """The process table with its filter field (hidden until ``/``), and the signal dialog."""

    DEFAULT_CSS = """
    ProcessPane > ProcessTable {
        height: 1fr;
    }
    ProcessPane > #process-filter-row {
        display: none;
        height: 1;
        background: $boost;
    }
    ProcessPane > #process-filter-row.-open {
        display: block;
    }
    ProcessPane #process-filter-label {
        width: auto;
        padding: 0 1;
        color: $text-muted;
    }
    ProcessPane ProcessFilter, ProcessPane ProcessFilter:focus {
        width: 1fr;
        height: 1;
        border: none;
        padding: 0;
        background: $boost;
    }
    """

    def compose(self) -> ComposeResult:
        # the filter row is mounted on the first ``/``: most runs never filter, and a text
        # field and its styles cost the first frame a few milliseconds
        yield ProcessTable()

    def _filter_row(self) -> Horizontal | None:
        return next(iter(self.query_children("#process-filter-row").results(Horizontal)), None)

    def _filter_field(self) -> ProcessFilter | None:
        row = self._filter_row()
        return None if row is None else row.query_one(ProcessFilter)

    @property
    def filter_open(self) -> bool:
        """Whether the filter field is shown (while typing, or holding a kept filter)."""
        row = self._filter_row()
        return row is not None and row.has_class("-open")

    def _open(self, shown: bool) -> None:
        row = self._filter_row()
        if row is not None:
            row.set_class(shown, "-open")

    @property
    def table(self) -> ProcessTable:
        return self.query_one(ProcessTable)

    @on(ProcessTable.FilterWanted)
    async def _open_filter(self, event: ProcessTable.FilterWanted) -> None:
        event.stop()
        field = self._filter_field()
        if field is None:
            field = ProcessFilter(placeholder="command, user or pid", id="process-filter")
            label = Static("filter", id="process-filter-label")
            await self.mount(Horizontal(label, field, id="process-filter-row", classes="-open"))
        self._open(True)
        field.focus()

    @on(Input.Changed, "#process-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.table.set_filter(event.value)

    @on(Input.Submitted, "#process-filter")
    def _filter_kept(self, event: Input.Submitted) -> None:
        event.stop()
        if not event.value.strip():
            self._open(False)
        self.table.focus()

    @on(ProcessFilter.Closed)
    @on(ProcessTable.FilterCleared)
    def _clear_filter(self, event: Message) -> None:
        event.stop()
        field = self._filter_field()
        if field is not None:
            field.value = ""
        self._open(False)
        self.table.set_filter("")
        self.table.focus()

    @on(ProcessTable.FilterSet)
    async def _filter_set(self, event: ProcessTable.FilterSet) -> None:
        event.stop()
        await self._open_filter(ProcessTable.FilterWanted())
        field = self._filter_field()
        if field is not None:
            field.value = event.text
        self.table.set_filter(event.text)
        self.table.focus()

    @on(ProcessTable.SignalWanted)
    def _offer_signal(self, event: ProcessTable.SignalWanted) -> None:
        """A dialog for a process this user may signal; one line where it may not."""
        # the dialog and psutil are loaded on first use, not at startup
        from lltui.app.screens.signal_dialog import SignalDialog
        from lltui.services.signals import check_signal, signal_refusal

        event.stop()
        row = event.row
        refusal = signal_refusal(host_of(self).model.info)
        if refusal is not None:
            self.app.push_screen(SignalDialog(row.pid, row.user, row.command, None, refusal))
            return
        if event.tagged:
            self._offer_group_signal(event.tagged)
            return
        check = check_signal(row.pid)
        if check.target is None or not check.allowed:
            self.app.notify(check.message or f"pid {row.pid} cannot be signalled", severity="error")
            return
        target = check.target
        self.app.push_screen(SignalDialog(target.pid, target.user, target.command, target))

    def _offer_group_signal(self, rows: tuple[ProcessRow, ...]) -> None:
        """One dialog for every tagged process this user may signal; those it may not are
        named in one line and left out."""
        from lltui.app.screens.signal_dialog import SignalDialog
        from lltui.services.signals import check_signal

        checks = [check_signal(r.pid) for r in rows]
        targets = tuple(c.target for c in checks if c.allowed and c.target is not None)
        refused = [c.message or "" for c in checks if not c.allowed]
        if refused:
            self.app.notify("; ".join(refused), severity="warning")
        if not targets:
            return
        first = targets[0]
        self.app.push_screen(
            SignalDialog(first.pid, first.user, first.command, first, group=targets)
        )

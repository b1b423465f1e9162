"""The fleet view: one row per host (GPUs, VRAM, power, util, hottest GPU, llama.cpp
processes, up/down, age); Enter opens that host in the monitor.

Rows are keyed by host and cells updated in place, so a tick of 32 hosts repaints cells,
not the table. A host that is down stays listed, marked down, while the others update.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.markup import escape
from textual.widgets import DataTable, Static

from lltui.app.rig_model import RigModel
from lltui.app.screens.base import ViewScreen
from lltui.app.widgets.gpu_card import num
from lltui.app.widgets.hanging import HangingList
from lltui.app.widgets.status import Banner, StatusBar
from lltui.core.monitor.fleet import FleetSample, HostRow, host_row
from lltui.core.monitor.models import RigInfo
from lltui.core.text import counted
from lltui.core.units import GIB, fmt_duration

if TYPE_CHECKING:
    from lltui.services.rig import Fleet


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    heading: str
    wide: int  # cells at wide terminals (0: the host column, as wide as its names)
    narrow: int  # cells where the wide table would not fit (80 columns)
    short: str = ""  # the heading where the narrow cells are too narrow for it


# Fixed widths, so a cell that changes never reflows the table; the note, last, takes what
# is left of the screen (at 80 columns nothing is: the notes go under the table, whole).
COLUMNS: tuple[Column, ...] = (
    Column("host", "Host", 0, 0),
    Column("status", "State", 12, 7),
    Column("gpus", "GPUs", 10, 4),
    Column("vram", "VRAM GiB", 11, 11),
    Column("power", "Power", 7, 6),
    Column("util", "Util", 4, 4),
    Column("hottest", "Hottest", 10, 4, "Hot"),
    Column("llama", "llama", 5, 5),
    Column("age", "Age", 5, 5),
)
VRAM_COLUMN = next(c for c in COLUMNS if c.key == "vram")
NOTE = Column("error", "Note", 0, 0)
NOTE_MIN = 16  # a note column narrower than this is no help: the notes go under the table
HOST_MAX = 32
CELL_PAD = 2  # the table's padding around each cell (one each side)
SCROLLBAR = 1  # kept free for the table's scrollbar when its rows overflow
STATUS_TEXT = {"up": "● up", "stale": "◐ stale", "down": "✖ down", "connecting": "… connecting"}
STATUS_SHORT = {"connecting": "… conn"}
# the theme variable each state is drawn in, and whether bold
STATUS_STYLE = {
    "up": ("gpu-ok", False),
    "stale": ("warning", True),
    "down": ("error", True),
    "connecting": ("text-muted", False),
}


@dataclass(frozen=True, slots=True)
class FleetLayout:
    """The table's columns for a terminal width: the wide cells where they fit, else the
    narrow ones; a note column when there is room for one."""

    narrow: bool
    widths: tuple[int, ...]  # of COLUMNS, the host's included
    note_width: int  # 0: no note column

    @property
    def columns(self) -> tuple[Column, ...]:
        return (*COLUMNS, NOTE) if self.note_width else COLUMNS


def fleet_layout(width: int, host_width: int) -> FleetLayout:
    """Columns for a table ``width`` cells wide whose longest host name is ``host_width``."""
    room = width - SCROLLBAR
    for narrow in (False, True):
        sizes = [c.narrow if narrow else c.wide for c in COLUMNS[1:]]
        fixed = sum(sizes) + CELL_PAD * len(COLUMNS)
        host = max(4, min(HOST_MAX, host_width, room - fixed))
        left = room - fixed - host - CELL_PAD
        if host >= min(host_width, 12) or narrow:
            note = left if left >= NOTE_MIN else 0
            return FleetLayout(narrow, (host, *sizes), note)
    raise AssertionError("unreachable")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def _cut_label(label: str, width: int) -> str:
    """A host's label in ``width`` cells, cut in the middle: its end (the port, ``#N``)
    tells hosts of one machine apart, where a cut end showed them alike."""
    if len(label) <= width or width < 5:
        return _cut(label, width)
    end = len(label) - max(label.rfind(":"), label.rfind("#"))
    half = (width - 1) // 2
    tail = end if half < end <= width - 4 else half
    return label[: width - 1 - tail] + "…" + label[len(label) - tail :]


def _power(watts: float | None, narrow: bool) -> str:
    if watts is None:
        return "-"
    if narrow and watts >= 10000:
        return f"{watts / 1000:.1f}kW"
    return f"{watts:.0f} W"


def _vram(row: HostRow, width: int) -> str:
    """``used/total`` GiB, in whole GiB where tenths do not fit the column (a host of 8
    MI300X has 1535.7: the table cut it to ``567.3/1535.``)."""
    if row.memory_total is None:
        return "-"
    used, total = (row.memory_used or 0) / GIB, row.memory_total / GIB
    text = f"{used:.1f}/{total:.1f}"
    return text if len(text) <= width else f"{used:.0f}/{total:.0f}"


def row_cells(row: HostRow, layout: FleetLayout | None = None) -> tuple[str, ...]:
    """The cells of one host's row, as plain text, in the layout's column order (the wide
    one by default), the host name and the note cut to their columns."""
    narrow = layout is not None and layout.narrow

    vram = _vram(row, VRAM_COLUMN.narrow if narrow else VRAM_COLUMN.wide)
    gpus = "-" if row.gpus is None else str(row.gpus)
    if row.lost and not narrow:  # narrow: the note says it
        gpus += f" ({row.lost} lost)"
    if row.hottest_c is None:
        hottest = "-"
    else:
        hottest = f"{row.hottest_c:.0f}°C" + ("" if narrow else f" GPU{row.hottest_index}")
    status = STATUS_TEXT.get(row.status, row.status)
    if narrow:
        status = STATUS_SHORT.get(row.status, status)
    cells = [
        row.label if layout is None else _cut_label(row.label, layout.widths[0]),
        status,
        gpus,
        vram,
        _power(row.power_w, narrow),
        num(row.util_gpu, "{:.0f}%"),
        hottest,
        "-" if row.llama_servers is None else str(row.llama_servers),
        fmt_duration(row.age_s) if row.age_s is not None else "-",
    ]
    if layout is None or layout.note_width:
        note = host_note(row)
        cells.append(note if layout is None else _cut(note, layout.note_width))
    return tuple(cells)


def host_note(row: HostRow) -> str:
    """Why a host is not up (or what is wrong on it), in one line; empty when all is well."""
    notes = []
    if row.lost:
        notes.append(f"{counted(row.lost, 'GPU')} lost")
    if row.error:
        notes.append(row.error)
    elif row.status in ("stale", "down"):
        notes.append("no answer for a while; still trying")
    return "; ".join(notes)[:400]


# ssh's words for a host name the address it tried: without it, hosts down for one reason
# have one note
_ADDRESSED = (
    (re.compile(r"^ssh: connect to host \S+ port \d+: "), "ssh: "),
    (
        re.compile(r"^ssh: Could not resolve hostname [^:\s]+: "),
        "ssh: Could not resolve hostname: ",
    ),
)


def _unnamed(note: str, label: str) -> str:
    """A host's note with its own name (``gpu1`` of label ``alice@gpu1:2222#2``, with the
    port ssh may add) said as ``HOST``: hosts down for one reason (a jump host, a key) have
    one note."""
    name = re.sub(r"(?::\d+)?(?:#\d+)?$", "", label.rsplit("@", 1)[-1])
    if not name:
        return note
    return re.sub(rf"(?<![\w.-]){re.escape(name)}(?::\d+)?(?![\w-]|\.\w)", "HOST", note)


def note_groups(rows: list[HostRow], fits: int = 0) -> list[tuple[list[HostRow], str]]:
    """The notes of hosts not up that a note column ``fits`` cells wide cannot show whole,
    one per reason: its hosts, and its note whole (one host) or without the address ssh
    tried and with HOST for each host's name (several, whose labels name them)."""
    groups: dict[str, tuple[list[HostRow], str]] = {}
    for row in rows:
        note = host_note(row)
        if not note or len(note) <= fits:
            continue
        reason = note
        for pattern, said in _ADDRESSED:
            reason = pattern.sub(said, reason)
        reason = _unnamed(reason, row.label)
        groups.setdefault(reason, ([], note))[0].append(row)
    return [
        (members, note if len(members) == 1 else reason)
        for reason, (members, note) in groups.items()
    ]


def fleet_summary(rows: list[HostRow]) -> str:
    """``4 hosts: 2 up, 1 down, 1 stale``: how many are in each state, in words."""
    counts = {state: sum(1 for r in rows if r.status == state) for state in STATUS_TEXT}
    said = [f"{n} {state}" for state, n in counts.items() if n]
    return f"{counted(len(rows), 'host')}: {', '.join(said)}"


class FleetScreen(ViewScreen):
    """Every host of the fleet, one row each; under the table, why each host that is not up
    is not, in full where its note column cannot hold it."""

    CSS_PATH = "fleet.tcss"

    def __init__(self) -> None:
        super().__init__()
        self._cells: dict[str, tuple[str, ...]] = {}  # what each row shows, by host
        self._status_text = ""
        self._styles: dict[str, str] = {}
        self._layout: FleetLayout | None = None  # the columns the table has now
        self._held: FleetSample | None = None  # the states shown while paused

    def compose_body(self) -> ComposeResult:
        yield Static("", id="fleet-summary")
        yield DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        yield HangingList(id="fleet-notes")

    def on_mount(self) -> None:
        variables = self.app.get_css_variables()
        self._styles = {
            state: f"{'bold ' if bold else ''}{variables.get(name, '')}".strip()
            for state, (name, bold) in STATUS_STYLE.items()
        }
        self.show_fleet()

    def on_resize(self) -> None:
        self.show_fleet()

    def on_unmount(self) -> None:
        self._layout = None

    def show_view(self) -> None:
        self.show_fleet()

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        if not self.is_mounted:
            return
        if self.lltui.fleet is None:
            super().refresh_status(model, busy_for)
        self.show_fleet()  # ages grow and hosts go stale between their samples

    def _set_columns(self, table: DataTable[Text]) -> FleetLayout:
        """The columns for the screen's width now (added again when the width asks for
        other ones: every row is then added again too)."""
        fleet = self.lltui.fleet
        names = [h.label for h in fleet.hosts] if fleet is not None else []
        layout = fleet_layout(self.size.width, max([4, *map(len, names)]))
        if layout != self._layout:
            table.clear(columns=True)
            self._cells.clear()
            widths = (*layout.widths, layout.note_width)
            for column, width in zip(layout.columns, widths, strict=False):
                heading = column.short if layout.narrow and column.short else column.heading
                table.add_column(heading, key=column.key, width=width)
            self._layout = layout
        return layout

    def show_fleet(self) -> None:
        """Update the rows from the fleet's latest states (cells that changed only)."""
        if not self.is_mounted or not self.is_attached:
            return
        fleet = self.lltui.fleet
        summary = self.query_one("#fleet-summary", Static)
        if fleet is None:
            summary.update(
                "One source. Watch several hosts with [b]--source smi:h1,smi:h2,nvml[/b] "
                "or [b]--hosts FILE[/b]."
            )
            return
        snap = self._snapshot(fleet)
        self._header(snap, fleet.interval)
        table: DataTable[Text] = self.query_one(DataTable)
        rows = [host_row(state, snap.t, fleet.interval) for state in snap.hosts]
        with self.app.batch_update():
            layout = self._set_columns(table)
            for row in rows:
                self._show_row(table, layout, row)
            # as tall as its rows where they fit; shorter (it scrolls) where the notes need it
            table.styles.max_height = len(rows) + 2
            summary.update(
                f"[b]{escape(fleet_summary(rows))}[/b]  "
                f"{sum(r.gpus or 0 for r in rows if r.status != 'down')} GPUs  "
                f"{sum(r.power_w or 0.0 for r in rows if r.status != 'down'):.0f} W   "
                "[$text-muted]Enter: open a host in the monitor[/]"
            )
            self.query_one("#fleet-notes", HangingList).set_entries(self._notes(rows, layout))

    def _snapshot(self, fleet: Fleet) -> FleetSample:
        """The fleet's states now; while sampling is paused, as they were when this view
        first showed them paused: the rows hold still, as the monitor does (they went on
        changing under PAUSED)."""
        if not self.lltui.model.paused:
            self._held = None
            return fleet.snapshot()
        if self._held is None:
            self._held = fleet.snapshot()
        return self._held

    def _show_row(self, table: DataTable[Text], layout: FleetLayout, row: HostRow) -> None:
        cells = row_cells(row, layout)
        old = self._cells.get(row.label)
        shown = [
            self._styled(row.status, c) if column.key == "status" else Text(c)
            for column, c in zip(layout.columns, cells, strict=True)
        ]
        if old is None:
            table.add_row(*shown, key=row.label)
        else:
            for column, new, was, text in zip(layout.columns, cells, old, shown, strict=True):
                if new != was:
                    table.update_cell(row.label, column.key, text)
        self._cells[row.label] = cells

    def _notes(self, rows: list[HostRow], layout: FleetLayout) -> list[tuple[str, str]]:
        """Each note the table cannot show whole (all of them without a note column), under
        the table, one per reason: the host (or how many), then why and which, wrapped
        under itself (a note a host each showed 2 of 14 down hosts at 80x24)."""
        out = []
        for members, note in note_groups(rows, layout.note_width):
            style = STATUS_STYLE.get(members[0].status, ("text", False))[0]
            if len(members) == 1:
                out.append((f"[${style}]{escape(members[0].label)}[/]", escape(note)))
                continue
            hosts = ", ".join(r.label for r in members)
            label = counted(len(members), "host")
            out.append((f"[${style}]{label}[/]", escape(f"{note} ({hosts})")))
        return out

    def _header(self, snap: FleetSample, interval: float) -> None:
        """The status line and banner speak of the fleet, not of the host in the monitor."""
        paused = " [b $warning]PAUSED[/]" if self.lltui.model.paused else ""
        text = f"[b]lltui[/b] fleet of {len(snap.hosts)} hosts  every {interval:g}s{paused}"
        if text != self._status_text:
            self._status_text = text
            self.query_one(StatusBar).update(text)
        simulated = [h.label for h in snap.hosts if h.sample is not None and h.sample.simulated]
        self.query_one(Banner).show(
            RigInfo(
                source=", ".join(simulated),
                simulated=bool(simulated),
                simulated_reason="simulated hosts, not real GPUs",
            )
        )

    def _styled(self, status: str, text: str) -> Text:
        return Text(text, style=self._styles.get(status, ""))

    @on(DataTable.RowSelected)
    def _open_host(self, event: DataTable.RowSelected) -> None:
        fleet = self.lltui.fleet
        if fleet is None or event.row_key.value is None:
            return
        labels = [h.label for h in fleet.hosts]
        if event.row_key.value in labels:
            self.lltui.focus_host(labels.index(event.row_key.value))

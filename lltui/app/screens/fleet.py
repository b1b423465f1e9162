"""The fleet view: one row per host (GPUs, VRAM, power, util, hottest GPU, llama.cpp
processes, up/down, age); Enter opens that host in the monitor.

Rows are keyed by host and cells updated in place, so a tick of 32 hosts repaints cells,
not the table. A host that is down stays listed, marked down, while the others update.
"""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.widgets import DataTable, Static

from lltui.app.model import RigModel
from lltui.app.screens.base import ViewScreen
from lltui.app.widgets.status import Banner, StatusBar
from lltui.core.monitor.fleet import FleetSample, HostRow, host_row
from lltui.core.monitor.models import RigInfo
from lltui.core.units import GIB, fmt_duration

# key, heading, width (fixed, so a cell that changes never reflows the table; the host
# column is as wide as the longest name, up to HOST_MAX; the note, last, as wide as its text,
# so an up host's empty note does not push the table past the screen)
COLUMNS: tuple[tuple[str, str, int | None], ...] = (
    ("host", "Host", 0),
    ("status", "State", 12),
    ("gpus", "GPUs", 4),
    ("vram", "VRAM GiB", 11),
    ("power", "Power", 7),
    ("util", "Util", 4),
    ("hottest", "Hottest", 10),
    ("llama", "llama", 5),
    ("age", "Age", 5),
    ("error", "Note", None),
)
HOST_MAX = 32
STATUS_TEXT = {"up": "● up", "stale": "◐ stale", "down": "✖ down", "connecting": "… connecting"}
# the theme variable each state is drawn in, and whether bold
STATUS_STYLE = {
    "up": ("gpu-ok", False),
    "stale": ("warning", True),
    "down": ("error", True),
    "connecting": ("text-muted", False),
}


def row_cells(row: HostRow) -> tuple[str, ...]:
    """The cells of one host's row, as plain text, in COLUMNS order."""

    def num(value: float | None, fmt: str) -> str:
        return "-" if value is None else fmt.format(value)

    vram = (
        "-"
        if row.memory_total is None
        else f"{(row.memory_used or 0) / GIB:.1f}/{row.memory_total / GIB:.1f}"
    )
    gpus = "-" if row.gpus is None else str(row.gpus) + (f" ({row.lost} lost)" if row.lost else "")
    hottest = "-" if row.hottest_c is None else f"{row.hottest_c:.0f}°C GPU{row.hottest_index}"
    return (
        row.label,
        STATUS_TEXT.get(row.status, row.status),
        gpus,
        vram,
        num(row.power_w, "{:.0f} W"),
        num(row.util_gpu, "{:.0f}%"),
        hottest,
        "-" if row.llama_servers is None else str(row.llama_servers),
        fmt_duration(row.age_s) if row.age_s is not None else "-",
        (row.error or "")[:120],
    )


class FleetScreen(ViewScreen):
    """Every host of the fleet, one row each."""

    def __init__(self) -> None:
        super().__init__()
        self._cells: dict[str, tuple[str, ...]] = {}  # what each row shows, by host
        self._status_text = ""
        self._styles: dict[str, str] = {}
        self._ready = False  # columns added

    def compose_body(self) -> ComposeResult:
        yield Static("", id="fleet-summary")
        yield DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        fleet = self.lltui.fleet
        names = [h.label for h in fleet.hosts] if fleet is not None else []
        host_width = min(HOST_MAX, max([4, *map(len, names)]))
        for key, label, width in COLUMNS:
            table.add_column(label, key=key, width=host_width if width == 0 else width)
        variables = self.app.get_css_variables()
        self._styles = {
            state: f"{'bold ' if bold else ''}{variables.get(name, '')}".strip()
            for state, (name, bold) in STATUS_STYLE.items()
        }
        self._ready = True
        self.show_fleet()

    def on_unmount(self) -> None:
        self._ready = False

    def show_view(self) -> None:
        self.show_fleet()

    def show(self, model: RigModel) -> None:
        self.refresh_status(model, None)

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        if not self.is_mounted:
            return
        if self.lltui.fleet is None:
            super().refresh_status(model, busy_for)
        self.show_fleet()  # ages grow and hosts go stale between their samples

    def show_fleet(self, snapshot: FleetSample | None = None) -> None:
        """Update the rows from the fleet's latest states (cells that changed only)."""
        if not self._ready or not self.is_attached:
            return
        fleet = self.lltui.fleet
        summary = self.query_one("#fleet-summary", Static)
        if fleet is None:
            summary.update(
                "One source. Watch several hosts with [b]--source smi:h1,smi:h2,nvml[/b] "
                "or [b]--hosts FILE[/b]."
            )
            return
        snap = snapshot or fleet.snapshot()
        self._header(snap, fleet.interval)
        table = self.query_one(DataTable)
        rows = [host_row(state, snap.t, fleet.interval) for state in snap.hosts]
        with self.app.batch_update():
            for row in rows:
                cells = row_cells(row)
                old = self._cells.get(row.label)
                shown = [
                    self._styled(row.status, c) if k == "status" else Text(c)
                    for (k, _, _), c in zip(COLUMNS, cells, strict=True)
                ]
                if old is None:
                    table.add_row(*shown, key=row.label)
                else:
                    changes = zip(COLUMNS, cells, old, shown, strict=True)
                    for (column, _, _), new, was, text in changes:
                        if new != was:
                            table.update_cell(row.label, column, text)
                self._cells[row.label] = cells
            up = sum(1 for r in rows if r.status == "up")
            gpus = sum(r.gpus or 0 for r in rows if r.status != "down")
            power = sum(r.power_w or 0.0 for r in rows if r.status != "down")
            summary.update(
                f"[b]{len(rows)} hosts[/b]  {up} up  {len(rows) - up} not  "
                f"{gpus} GPUs  {power:.0f} W   [$text-muted]Enter: open a host in the monitor[/]"
            )

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

"""A router's models in the launch view, one row per model keyed by its name and updated in
place: its state, pin and priority, its pod (the devices the plan gives it), when the
on-demand proxy last served it and how many requests, tokens/s, and for a model not loaded
what a request for it would do now (load, or unload which models first). ``l`` loads the
selected model (if the plan says it fits), ``u`` unloads it, ``k`` keeps it loaded or lets
it go. The table only says what was asked (a message); the screen asks the launch
controller. Its columns are chosen by its own width (router_columns), so it never scrolls
sideways; the selected model's facts in the columns left out are its detail line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual.binding import Binding, BindingType
from textual.coordinate import Coordinate
from textual.message import Message

from lltui.app.widgets.fitted_table import FittedTable, columns_that_fit
from lltui.core.fit.evict import Decision
from lltui.core.units import fmt_duration
from lltui.services.launch.state import ModelRow

COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("model", "MODEL", 16),
    ("state", "STATE", 9),
    ("kept", "KEPT", 4),
    ("prio", "PRIO", 4),
    ("pod", "POD", 12),
    ("last", "LAST USE", 8),
    ("reqs", "REQS", 4),
    ("tps", "TOK/S", 7),
    ("request", "ON REQUEST", 20),
    ("ctx", "CTX", 7),
    ("plan", "PLAN MiB", 9),
    ("log", "LOG MiB", 9),
    ("held", "HELD MiB", 9),
    ("kv", "KV TOKENS", 11),
    ("busy", "BUSY", 4),
    ("devices", "DEVICES (from its log)", 36),
)
# kept in this order while the table has room for them, so the last goes first: what its
# log says it allocated (the plan's figure and the memory its process holds come earlier),
# then the plan's context and size, then the server's own polls; at 80 columns the model,
# its state and pin, what a request would do and its pod
KEPT = ("model", "state", "kept", "request", "pod", "tps", "last", "reqs", "prio", "held",
        "busy", "kv", "ctx", "plan", "log", "devices")  # fmt: skip
# each state's theme variable (resolved to a colour when the table is mounted)
STATE_STYLE = {
    "loaded": "gpu-ok",
    "loading": "gpu-warn",
    "failed": "error",
    "unloaded": "text-muted",
    "sleeping": "primary",
}


def _mib(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}"


def on_request(decision: Decision | None) -> str:
    """What a request for a model not loaded would do now, in a few words."""
    if decision is None or decision.action == "loaded":
        return "-"
    if decision.action == "load":
        return "loads"
    if decision.action == "evict":
        return f"unloads {', '.join(decision.evict)}"
    return f"refused: {decision.reason}"


def _ago(row: ModelRow, now: float | None) -> str:
    last = row.use.last_used if row.use is not None else None
    if last is None or now is None:
        return "-"
    return fmt_duration(max(0.0, now - last))


def row_cells(
    row: ModelRow, styles: dict[str, str] | None = None, now: float | None = None
) -> tuple[Text, ...]:
    """The row's cells in COLUMNS' order; ``now`` (time.monotonic()) ages its last use."""
    styles = styles or {}
    devices = ", ".join(f"{p.name} {_mib(p.total_mib)}" for p in row.placement) or (
        row.problem or "-"
    )
    refused = row.on_request is not None and not row.on_request.can_load
    return (
        Text(row.name),
        Text(row.state, style=styles.get(row.state, "")),
        Text("yes" if row.kept else "-"),
        Text(str(row.priority) if row.priority else "-"),
        Text(", ".join(row.pod) or "-"),
        Text(_ago(row, now)),
        Text(str(row.use.requests) if row.use is not None else "-"),
        Text("-" if row.gen_tps is None else f"{row.gen_tps:.1f}"),
        Text(on_request(row.on_request), style=styles.get("failed", "") if refused else ""),
        Text(str(row.n_ctx) if row.n_ctx else "-"),
        Text(_mib(row.planned_bytes / (1024 * 1024)) if row.planned_bytes is not None else "-"),
        Text(_mib(row.memory_mib)),
        Text(_mib(row.held_bytes / (1024 * 1024)) if row.held_bytes is not None else "-"),
        Text(f"{row.kv.used_tokens}/{row.kv.capacity_tokens}" if row.kv is not None else "-"),
        Text("-" if row.busy is None else str(row.busy)),
        Text(devices, style=styles.get("failed", "") if row.problem else ""),
    )


def router_columns(width: int, padding: int = 1) -> tuple[str, ...]:
    """The keys of the most useful columns a table ``width`` cells wide shows whole (each
    cell with ``padding`` either side), in their order on screen; the model's is always
    there."""
    return columns_that_fit({key: w for key, _label, w in COLUMNS}, KEPT, width, padding)


def row_detail(row: ModelRow, shown: Sequence[str], now: float | None = None) -> str:
    """The model's whole name and what its row does not show whole: its cells in the
    columns left out or cut short (none unknown)."""
    facts = [
        f"{label} {cell}"
        for (key, label, width), cell in zip(COLUMNS[1:], row_cells(row, now=now)[1:], strict=True)
        if (key not in shown or len(cell) > width) and str(cell) != "-"
    ]
    return f"{row.name}: {', '.join(facts)}" if facts else row.name


class RouterTable(FittedTable[Text]):
    """The models of the router the launch view started."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "ask('load')", "Load", id="router-load"),
        Binding("u", "ask('unload')", "Unload", id="router-unload"),
        Binding("k", "ask('keep')", "Keep", id="router-keep"),
    ]

    @dataclass
    class DetailChanged(Message):
        """The selected model's detail line (row_detail) changed."""

        text: str

    @dataclass
    class ActionWanted(Message):
        """Load, unload, keep or unkeep (``what``) the model ``name``."""

        what: str
        name: str

    COLUMNS = COLUMNS

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(cursor_type="row", id=id)
        self._rows: dict[str, ModelRow] = {}
        self._now: float | None = None
        self._detail = ""
        self._styles: dict[str, str] = {}

    def on_mount(self) -> None:
        # (Textual runs FittedTable's on_mount after this one: it lays out the columns)
        variables = self.app.get_css_variables()
        self._styles = {state: variables.get(name, "") for state, name in STATE_STYLE.items()}

    def columns_for(self, width: int) -> tuple[str, ...]:
        return router_columns(width, self.cell_padding)

    def _set_columns(self, shown: tuple[str, ...]) -> None:
        cursor = self.cursor_row
        super()._set_columns(shown)
        if self._rows:
            self.move_cursor(row=min(max(cursor, 0), len(self._rows) - 1))
        self._tell_detail()

    def show_rows(self, rows: Sequence[ModelRow], now: float | None = None) -> None:
        """Update the rows in place: changed cells only, gone models removed."""
        self._now = now
        self._rows = {row.name: row for row in rows}
        self.show_cells({row.name: self._row_cells(row) for row in rows})
        self._tell_detail()

    def _row_cells(self, row: ModelRow) -> dict[str, Text]:
        cells = row_cells(row, self._styles, self._now)
        return {key: cell for (key, _l, _w), cell in zip(COLUMNS, cells, strict=True)}

    @property
    def selected(self) -> ModelRow | None:
        """The model under the cursor."""
        if not self._rows or self.cursor_row < 0 or self.cursor_row >= len(self._rows):
            return None
        name = str(self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value)
        return self._rows.get(name)

    def on_data_table_row_highlighted(self) -> None:
        self._tell_detail()

    def _tell_detail(self) -> None:
        row = self.selected
        text = "" if row is None else row_detail(row, self._shown, self._now)
        if text != self._detail:
            self._detail = text
            self.post_message(self.DetailChanged(text))

    def action_ask(self, what: str) -> None:
        row = self.selected
        if row is None:
            return
        if what == "keep" and row.kept:
            what = "unkeep"
        self.post_message(self.ActionWanted(what, row.name))

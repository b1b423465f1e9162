"""How the monitor lays out its GPUs for a terminal size: cards (with or without sparklines)
in as many columns as the width takes, or one compact line per GPU, always leaving room
for the process table. Pure arithmetic on cell counts, so it is tested without a screen."""

from __future__ import annotations

from dataclasses import dataclass

LAYOUT_MODES: tuple[str, ...] = ("auto", "compact", "cards")

CARD_MIN_WIDTH = 78  # a card's lines (clocks and PCIe) need about this much
CARD_LINES = 5  # title, VRAM, power, clocks, one line of extras (kept even when empty)
GRAPH_LINES = 3  # power, utilisation and VRAM sparklines
CARD_GUTTER = (1, 2)  # rows, columns between cards
COMPACT_GUTTER = (0, 1)
COMPACT_MIN_WIDTH = 36  # a compact line below this loses its name and bar
COMPACT_COLUMN_WIDTH = 80  # wide terminals put compact lines side by side at this width
PROCESS_RESERVE = 7  # the table's border and header, and five rows of processes


@dataclass(frozen=True, slots=True)
class MonitorLayout:
    """Where the GPUs go: ``mode`` is "cards" or "compact"; ``height`` is the number of
    lines the GPU area takes (it scrolls when ``fits`` is False)."""

    mode: str
    columns: int
    graphs: bool
    item_width: int  # columns of one card or compact line, borders included
    height: int
    fits: bool
    lines: int = 1  # lines per GPU in compact mode: a second one for clocks and links,
    # then up to GRAPH_LINES sparklines (``sparklines``)

    @property
    def sparklines(self) -> int:
        """Sparklines under each compact GPU (utilisation first, then VRAM and power)."""
        return max(0, self.lines - 2) if self.compact else 0

    @property
    def compact(self) -> bool:
        return self.mode == "compact"


def _rows(n: int, columns: int) -> int:
    return -(-n // columns) if n else 0


def cards_height(n: int, columns: int, graphs: bool) -> int:
    rows = _rows(n, columns)
    per_card = CARD_LINES + (GRAPH_LINES if graphs else 0)
    return rows * per_card + max(0, rows - 1) * CARD_GUTTER[0]


def item_width(width: int, columns: int, gutter: int) -> int:
    return max(1, (width - gutter * (columns - 1)) // columns)


def _cards(n: int, width: int, room: int, graphs: bool) -> MonitorLayout:
    columns = max(1, min(n, width // CARD_MIN_WIDTH))
    need = cards_height(n, columns, graphs)
    return MonitorLayout(
        "cards",
        columns,
        graphs,
        item_width(width, columns, CARD_GUTTER[1]),
        min(need, room),
        need <= room,
    )


def _compact(n: int, width: int, room: int, graphs: bool | None = None) -> MonitorLayout:
    most = max(1, min(n, width // COMPACT_MIN_WIDTH))
    # side by side only where the width is there anyway, or where the lines need it
    wanted = max(1, min(most, width // COMPACT_COLUMN_WIDTH, n))
    needed = -(-n // max(room, 1)) if n else 1
    columns = max(wanted, min(most, needed))
    rows = _rows(n, columns)
    # the second line where there is room for it, then up to three sparklines below it
    # (utilisation, VRAM, power), so a tall terminal is not left blank under 16 GPUs
    most_lines = 2 + (GRAPH_LINES if graphs is not False else 0)
    lines = next((k for k in range(most_lines, 1, -1) if k * rows <= room), 1)
    need = rows * lines
    return MonitorLayout(
        "compact",
        columns,
        False,
        item_width(width, columns, COMPACT_GUTTER[1]),
        min(need, room),
        need <= room,
        lines,
    )


def plan_layout(
    n: int,
    width: int,
    height: int,
    *,
    mode: str = "auto",
    graphs: bool | None = None,
    reserve: int = PROCESS_RESERVE,
) -> MonitorLayout:
    """The layout of ``n`` GPUs in ``width`` x ``height`` cells (the screen less the status
    lines, rig summary and footer). The process table keeps ``reserve`` lines.

    ``mode`` "auto" takes the richest that fits: cards with sparklines, cards, then compact
    lines. ``graphs`` True asks for cards with sparklines (scrolled where they do not fit),
    False for none; None decides by the room.
    """
    room = max(3, height - reserve)
    if mode == "compact":
        return _compact(n, width, room, graphs)
    if graphs is True:
        return _cards(n, width, room, True)
    for with_graphs in (True, False) if graphs is None else (False,):
        plan = _cards(n, width, room, with_graphs)
        if plan.fits or (mode == "cards" and not with_graphs):
            return plan
    return _compact(n, width, room, graphs)

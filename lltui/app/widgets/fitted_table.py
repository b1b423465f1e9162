"""A table that never scrolls sideways: its columns are the most useful ones its own width
shows whole, chosen again whenever that width changes, and its rows are keyed and updated in
place (the launch view's placement and router tables)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from textual.widgets import DataTable

_Cell = TypeVar("_Cell")


def columns_that_fit(
    widths: Mapping[str, int], useful: Sequence[str], width: int, padding: int = 1
) -> tuple[str, ...]:
    """The keys of the most useful columns (``useful``, most first) a table ``width`` cells
    wide shows whole (each cell ``widths[key]`` wide with ``padding`` either side), in the
    order of ``widths``; the first of ``useful`` is always there."""
    kept: set[str] = set()
    used = 0
    for key in useful:
        need = widths[key] + 2 * padding
        if not kept or used + need <= width:
            kept.add(key)
            used += need
    return tuple(key for key in widths if key in kept)


class FittedTable(DataTable[_Cell]):
    """A DataTable of ``COLUMNS`` (key, label, width, in their order on screen) whose subclass
    says which a width shows (``columns_for``); its rows' cells come by column key, each row
    by its own key (``show_cells``)."""

    COLUMNS: ClassVar[tuple[tuple[str, str, int], ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._cells: dict[str, dict[str, _Cell]] = {}  # each row's cells by column key
        self._shown: tuple[str, ...] = ()

    def on_mount(self) -> None:
        # every column until the table is laid out: a header from the first frame (the
        # table's height, fixed by then, stayed 0 where its first columns came later)
        self._set_columns(tuple(key for key, _label, _w in self.COLUMNS))

    def columns_for(self, width: int) -> tuple[str, ...]:
        raise NotImplementedError

    def _set_columns(self, shown: tuple[str, ...]) -> None:
        self.clear(columns=True)
        for key, label, width in self.COLUMNS:
            if key in shown:
                self.add_column(label, key=key, width=width)
        self._shown = shown
        for key, cells in self._cells.items():
            self.add_row(*(cells[column] for column in shown), key=key)

    def show_cells(self, rows: dict[str, dict[str, _Cell]]) -> None:
        """Each row's cells by column key, keyed by the row: changed cells updated in
        place, gone rows removed."""
        if self._shown:
            for key in self._cells.keys() - rows.keys():
                self.remove_row(key)
            for key, cells in rows.items():
                if key not in self._cells:
                    self.add_row(*(cells[column] for column in self._shown), key=key)
                    continue
                for column in self._shown:
                    if cells[column] != self._cells[key][column]:
                        self.update_cell(key, column, cells[column])
        self._cells = dict(rows)

    def on_resize(self) -> None:
        self._fit_columns()

    def watch_show_vertical_scrollbar(self) -> None:
        # the rows' scroll bar takes its cells from the columns' width
        self.call_after_refresh(self._fit_columns)

    def _fit_columns(self) -> None:
        width = self.scrollable_content_region.width
        shown = self.columns_for(width) if width else self._shown
        if shown != self._shown:
            self._set_columns(shown)

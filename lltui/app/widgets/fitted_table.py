"""A table that never scrolls sideways: its columns are the most useful ones its own width
shows whole, chosen again whenever that width changes (the launch view's placement and
router tables)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

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
    """A DataTable whose subclass says which columns a width shows (``columns_for``) and
    lays them out (``_set_columns``, which records them in ``_shown``)."""

    _shown: tuple[str, ...] = ()

    def columns_for(self, width: int) -> tuple[str, ...]:
        raise NotImplementedError

    def _set_columns(self, shown: tuple[str, ...]) -> None:
        raise NotImplementedError

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

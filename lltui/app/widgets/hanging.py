"""Lines of a label and a text that wraps under itself, not under the label: advice,
findings and notes stay readable at 80 columns (a hanging indent, as ``man`` pages set
them)."""

from __future__ import annotations

from collections.abc import Sequence

from textual.containers import Grid
from textual.widgets import Static

# (label, text), both Textual markup
Entry = tuple[str, str]


class HangingList(Grid):
    """Two columns: the labels as wide as the widest, the texts in the rest of the width,
    each wrapped within it."""

    DEFAULT_CSS = """
    HangingList {
        grid-size: 2;
        grid-columns: auto 1fr;
        grid-gutter: 0 1;
        height: auto;
    }
    HangingList > Static {
        height: auto;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._entries: tuple[Entry, ...] = ()

    @property
    def entries(self) -> tuple[Entry, ...]:
        return self._entries

    def set_entries(self, entries: Sequence[Entry]) -> None:
        """Show these lines (nothing is done when they are the ones shown)."""
        wanted = tuple(entries)
        if wanted == self._entries:
            return
        self._entries = wanted
        self.remove_children()
        self.mount_all(
            [
                Static(markup, classes=f"hanging-{part}")
                for label, text in wanted
                for part, markup in (("label", label), ("text", text))
            ]
        )

    def plain_lines(self) -> list[str]:
        """The entries as plain ``label text`` lines (tests, screen readers of the SVG)."""
        from textual.content import Content

        return [
            f"{Content.from_markup(label).plain} {Content.from_markup(text).plain}"
            for label, text in self._entries
        ]

"""The keys, on `?`: lltui's own first (views, sampling, the monitor), then the shown view's,
then those of the focused table or field; one list that scrolls, readable at 80x24."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import ActiveBinding, Binding, BindingType
from textual.containers import VerticalScroll
from textual.dom import DOMNode
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from lltui.app.keys import view_bindings

KeyDisplay = Callable[[Binding], str]


def key_sections(
    bindings: Iterable[ActiveBinding], app: DOMNode, screen: DOMNode
) -> list[tuple[str, list[tuple[str, str]]]]:
    """(title, [(keys, what they do)]) in the order help shows them: the app's keys, the
    view's, then the focused widget's; keys of one action on one line, disabled ones left out."""
    groups: dict[str, dict[str, tuple[list[Binding], str]]] = {
        "lltui": {},
        "this view": {},
        "the focused field or table": {},
    }
    for active in bindings:
        binding = active.binding
        if binding.system or not active.enabled or not binding.description:
            continue
        if active.node is app:
            title = "lltui"
        elif active.node is screen:
            title = "this view"
        else:
            title = "the focused field or table"
        keys, _ = groups[title].setdefault(binding.action, ([], binding.description))
        keys.append(binding)
    return [
        (title, [(" ".join(_keys_of(b)), what) for b, what in actions.values()])
        for title, actions in groups.items()
        if actions
    ]


def _keys_of(bindings: list[Binding]) -> list[str]:
    return list(dict.fromkeys(b.key for b in bindings))


def render_keys(
    sections: list[tuple[str, list[tuple[str, str]]]], key_display: Callable[[str], str]
) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="right", style="bold", no_wrap=True)
    table.add_column()
    for n, (title, rows) in enumerate(sections):
        if n:
            table.add_row("", "")
        table.add_row("", Text(title, style="bold underline"))
        for keys, what in rows:
            table.add_row(" ".join(key_display(k) for k in keys.split(" ")), what)
    return table


class HelpScreen(ModalScreen[None]):
    """The keys of the screen below, as they work there now."""

    CSS_PATH = "help.tcss"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "close", "Close", id="help-close"),
        # views switch from here too (the app closes this first)
        *view_bindings("app."),
    ]

    def __init__(self, below: Screen[object]) -> None:
        super().__init__()
        self._below = below
        self.sections: list[tuple[str, list[tuple[str, str]]]] = []  # as shown

    def compose(self) -> ComposeResult:
        app: App[object] = self.app
        below = self._below
        sections = key_sections(below.active_bindings.values(), app, below)
        self.sections = sections

        def display(key: str) -> str:
            return app.get_key_display(Binding(key, ""))

        with VerticalScroll(id="help-box"):
            yield Static(render_keys(sections, display), id="help-keys")
            yield Static(
                "[$text-muted]ctrl+p: every command by name.  escape or ?: close.[/]",
                id="help-foot",
            )

    def action_close(self) -> None:
        self.dismiss()

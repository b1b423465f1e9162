"""The keys, on `?`: lltui's own first (views, sampling), then the shown view's, then those
of the focused table or field (lltui's keys only: Textual's generic ones, tab and the arrows,
are left out), and under the monitor a legend of what its lines, columns and colours mean;
one list that scrolls, readable at 80x24."""

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
from textual.widgets import Input, Static

from lltui.app.app_protocol import host_of
from lltui.app.keys import view_bindings
from lltui.app.patches.key_names import TYPED_KEYS


def lltui_actions(node: DOMNode) -> frozenset[str]:
    """The actions lltui's own classes bind on ``node`` (not those its Textual bases add:
    focus moves, cursor keys, copy, the palette)."""
    actions = set()
    for cls in type(node).__mro__:
        if not cls.__module__.startswith("lltui."):
            continue
        for item in cls.__dict__.get("BINDINGS", ()):
            actions.add(item.action if isinstance(item, Binding) else item[1])
    return frozenset(actions)


def key_sections(
    bindings: Iterable[ActiveBinding],
    app: DOMNode,
    screen: DOMNode,
    describe: Callable[[Binding], str] | None = None,
    *,
    typing: bool = False,
) -> list[tuple[str, list[tuple[str, str]]]]:
    """(title, [(keys, what they do)]) in the order help shows them: the app's keys, the
    view's, then the focused widget's; lltui's own keys only, keys of one action on one
    line, disabled ones left out, and (``typing``: a text field has the focus) the keys it
    would type, as the footer leaves them out. ``describe``: what a key does now (Pause or
    Resume)."""
    groups: dict[str, dict[str, tuple[list[Binding], str]]] = {
        "lltui": {},
        "this view": {},
        "the focused field or table": {},
    }
    own: dict[int, frozenset[str]] = {}
    for active in bindings:
        binding, node = active.binding, active.node
        if binding.system or not active.enabled or not binding.description:
            continue
        if typing and binding.key in TYPED_KEYS:
            continue
        if binding.action not in own.setdefault(id(node), lltui_actions(node)):
            continue
        if node is app:
            title = "lltui"
        elif node is screen:
            title = "this view"
        else:
            title = "the focused field or table"
        said = describe(binding) if describe is not None else binding.description
        keys, _ = groups[title].setdefault(binding.action, ([], said))
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
    return _table(
        (title, [(" ".join(map(key_display, keys.split(" "))), what) for keys, what in rows])
        for title, rows in sections
    )


def _table(sections: Iterable[tuple[str, Iterable[tuple[Text | str, str]]]]) -> Table:
    """Titled sections of (term, meaning) rows, the terms right-aligned in bold."""
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="right", style="bold", no_wrap=True)
    table.add_column()
    for n, (title, rows) in enumerate(sections):
        if n:
            table.add_row("", "")
        table.add_row("", Text(title, style="bold underline"))
        for term, meaning in rows:
            table.add_row(term, meaning)
    return table


# What the monitor shows, line by line and column by column (help's legend under the keys).
MONITOR_LINES: tuple[tuple[str, str], ...] = (
    ("GPUn", "the GPU as nvidia-smi numbers it; CUDAn: as CUDA and llama.cpp number it"),
    ("VRAM", "memory used of the GPU's total, all processes together"),
    ("PWR", "power drawn of the GPU's power limit"),
    ("util", "share of the last interval the GPU ran a kernel; mem: its memory busy"),
    ("SM MEM", "clocks now of their maximum, in MHz"),
    ("PCIe", "link generation x width in use, ↓ to the GPU ↑ from it"),
    ("clocks", "why the GPU runs slower than it could (power cap, thermal ...)"),
    ("pwr util vram", "history over the window (w), lowest..highest"),
    ("balance", "how evenly a process spread over several GPUs fills and uses them"),
)
PROCESS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("PID USER", "the process and whose it is"),
    ("GPU", "the GPUs it holds memory on"),
    ("GPU MEM", "its memory on those GPUs, together"),
    ("SM%", "its share of the GPUs' compute over the last interval (mean of its GPUs)"),
    ("CPU% RSS", "its CPU use and host memory"),
    ("COMMAND", "its command line; for llama.cpp's programs the model first"),
)


def colour_rows(variables: dict[str, str]) -> list[tuple[Text, str]]:
    """The monitor's colours, each drawn in the theme's colour, and what it means."""
    from lltui.app.widgets.gpu_card import (
        TEMP_HOT_C,
        TEMP_WARN_C,
        VRAM_HOT_PCT,
        VRAM_WARN_PCT,
        theme_style,
    )

    def swatch(name: str, word: str, bold: bool = False) -> Text:
        return Text(word, style=theme_style(variables, name, bold=bold))

    return [
        (swatch("gpu-ok", "green"), "fine"),
        (
            swatch("gpu-warn", "yellow"),
            f"warm: {TEMP_WARN_C}°C and over, VRAM {VRAM_WARN_PCT}% full and over",
        ),
        (
            swatch("gpu-hot", "red"),
            f"hot: {TEMP_HOT_C}°C and over, VRAM {VRAM_HOT_PCT}% full and over",
        ),
        (swatch("text-muted", "grey"), "no reading: the GPU or driver does not report it"),
        (swatch("accent", "▎"), "the selected GPU ([ and ] move, d opens it)"),
        (swatch("error", "▎", bold=True), "a GPU lost: it fell off the bus or stopped answering"),
        (Text("faded"), "stale: no fresh sample for several intervals"),
        (swatch("bar-vram", "█"), "the VRAM bar"),
        (swatch("bar-power", "█"), "the power bar"),
    ]


def render_legend(variables: dict[str, str]) -> Table:
    return _table(
        (
            ("the monitor's lines", MONITOR_LINES),
            ("the process table", PROCESS_COLUMNS),
            ("colours", colour_rows(variables)),
        )
    )


class HelpScreen(ModalScreen[None]):
    """The keys of the screen below, as they work there now."""

    CSS_PATH = "help.tcss"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q,f1", "close", "Close", id="help-close"),
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
        sections = key_sections(
            below.active_bindings.values(),
            app,
            below,
            host_of(self).key_description,
            typing=isinstance(below.focused, Input),
        )
        self.sections = sections

        def display(key: str) -> str:
            return app.get_key_display(Binding(key, ""))

        with VerticalScroll(id="help-box"):
            yield Static(render_keys(sections, display), id="help-keys")
            if shows_monitor(below):
                yield Static(render_legend(app.get_css_variables()), id="help-legend")
            yield Static(
                "[$text-muted]ctrl+p: every command by name.  escape or ?: close.[/]",
                id="help-foot",
            )

    def action_close(self) -> None:
        self.dismiss()


def shows_monitor(screen: Screen[object]) -> bool:
    """Whether ``screen`` is the monitor or the GPU page opened from it."""
    from lltui.app.screens.gpu_detail import GpuDetailScreen
    from lltui.app.screens.monitor import MonitorScreen

    return isinstance(screen, MonitorScreen | GpuDetailScreen)

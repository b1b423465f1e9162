"""The footer: the keys that do something where the focus is, drawn as one line.

Textual's Footer is a container of one widget per key (about seventeen on the monitor): each
is composed, styled three times (itself and its two parts), measured and drawn, and all of
them again whenever the screen's bindings change: some 20 ms of lltui's time to its first
frame, where a bare Textual app takes about 250 ms to draw one screen. Each rebuild in
Textual 8.x also kept the old keys alive through their ``compact`` watchers. This footer is
one widget that draws the same line with the same styles, and does what a key does: a press
presses it, a hover shows its tooltip, the wheel scrolls to keys that do not fit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import ActiveBinding, Binding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input

from lltui.app.app_protocol import host_of
from lltui.app.patches.key_names import TYPED_KEYS


def footer_bindings(
    active: Iterable[ActiveBinding], app: object, typing: bool, screen: object = None
) -> list[tuple[Binding, bool, str]]:
    """The shown bindings in footer order: the app's own first, then the view's (its
    ``screen``), then the focused widget's; keys a focused text field would type are left
    out (``typing``)."""
    groups: tuple[list[tuple[Binding, bool, str]], ...] = ([], [], [])
    for node, binding, enabled, tooltip in active:
        if not binding.show or (typing and binding.key in TYPED_KEYS):
            continue
        rank = 0 if node is app else 1 if node is screen else 2
        groups[rank].append((binding, enabled, tooltip))
    return [*groups[0], *groups[1], *groups[2]]


@dataclass(frozen=True)
class ShownKey:
    """One key as shown: what it presses, how it reads, where it is on the line."""

    key: str
    display: str
    description: str
    enabled: bool
    tooltip: str
    start: int = 0
    end: int = 0

    @property
    def width(self) -> int:
        return self.end - self.start


class LltuiFooter(Widget, can_focus=False):
    """lltui's own keys first, and only keys that do something where the focus is (Textual's
    footer misses a few a text field types, such as ``-``); the command palette's key on the
    right. Keys that do not fit are scrolled to with the mouse wheel, as in Textual's."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "footer-key--key",
        "footer-key--description",
        "footer-key--hover",
        "footer-key--palette-border",
    }
    # the styles of Textual's Footer and FooterKey
    DEFAULT_CSS = """
    LltuiFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        .footer-key--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .footer-key--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
        .footer-key--hover {
            background: $block-hover-background;
        }
        .footer-key--palette-border {
            color: $foreground 20%;
        }
    }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._keys: tuple[ShownKey, ...] = ()
        self._palette: ShownKey | None = None
        self._shown: object = None  # the bindings the keys were last worked out from
        self._hover: ShownKey | None = None
        self._scroll = 0  # columns of keys scrolled off to the left

    # -- which keys ----------------------------------------------------------------------
    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _active(
        self,
    ) -> tuple[tuple[tuple[Binding, bool, str, str], ...], ActiveBinding | None]:
        active = self.screen.active_bindings
        typing = isinstance(self.screen.focused, Input)
        by_action: dict[str, tuple[Binding, bool, str, str]] = {}
        shown = footer_bindings(active.values(), self.app, typing, self.screen)
        for binding, enabled, tooltip in shown:
            described = host_of(self).key_description(binding)
            by_action.setdefault(binding.action, (binding, enabled, tooltip, described))
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        if not self.app.ENABLE_COMMAND_PALETTE:
            palette = None
        return tuple(by_action.values()), palette

    def bindings_changed(self, screen: Screen[Any]) -> None:
        """Redrawn when the keys shown change (not when the app has lost the focus)."""
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return
        shown = self._active()
        if shown == self._shown:
            return  # focus landing on a widget whose keys are shown already
        self._shown = shown
        bindings, palette = shown
        keys = []
        at = 0
        for binding, enabled, tooltip, described in bindings:
            key = self._key(binding, enabled, tooltip, at, described)
            keys.append(key)
            at = key.end
        self._keys = tuple(keys)
        self._palette = None
        if palette is not None:
            binding = palette.binding
            tooltip = binding.tooltip or binding.description
            self._palette = self._key(binding, palette.enabled, tooltip, 0, palette=True)
        self._hover = None
        self._scroll = 0
        self.refresh()

    def _key(
        self,
        binding: Binding,
        enabled: bool,
        tooltip: str,
        at: int,
        described: str | None = None,
        palette: bool = False,
    ) -> ShownKey:
        display = self.app.get_key_display(binding)
        description = binding.description if described is None else described
        if palette:  # its border, the key, a space, its description and its padding
            width = 1 + cell_len(display) + 1 + cell_len(description) + 1
        elif description:  # the key padded, the description and a space
            width = cell_len(display) + 2 + cell_len(description) + 1
        else:
            width = cell_len(display)
        return ShownKey(binding.key, display, description, enabled, tooltip, at, at + width)

    # -- drawing -------------------------------------------------------------------------
    def _key_text(self, key: ShownKey, base: Style, palette: bool = False) -> Text:
        """A key as Textual's FooterKey draws it."""
        key_style = self.get_component_rich_style("footer-key--key")
        description_style = self.get_component_rich_style("footer-key--description")
        if not key.enabled:
            base += Style(dim=True)
        if palette:  # compact: no padding around the key, one space before the description
            text = Text.assemble(
                (key.display, key_style), (" " + key.description, description_style)
            )
        elif key.description:
            text = Text.assemble(
                (f" {key.display} ", key_style), (key.description + " ", description_style)
            )
        else:
            text = Text.assemble((key.display, key_style))
        text.stylize_before(base)
        if key is self._hover:
            # as a hovered FooterKey, whose parts have no background of their own
            hover = self.get_component_rich_style("footer-key--hover")
            text.stylize(Style(bgcolor=hover.bgcolor))
        return text

    def render(self) -> Text:
        base = self.rich_style
        line = Text(no_wrap=True, overflow="crop", end="")
        for key in self._keys:
            line.append_text(self._key_text(key, base))
        palette = self._palette
        if palette is None:
            return line[self._scroll :]
        room = max(0, self.size.width - palette.width)
        line = line[self._scroll : self._scroll + self._whole_keys(room)]
        line.append(" " * (room - line.cell_len), base)
        # docked on the right, as Textual's: a border on its left, a space of padding after
        border = self.get_component_rich_style("footer-key--palette-border")
        line.append("▏", base + border)
        line.append_text(self._key_text(palette, base, palette=True))
        line.append(" ", base)
        return line

    def _whole_keys(self, room: int) -> int:
        """The columns of the keys that fit whole in ``room`` from the scroll position: a
        key cut in two (``w▏``) reads as a key that does nothing."""
        ends = [k.end - self._scroll for k in self._keys if k.start >= self._scroll]
        return max((end for end in ends if end <= room), default=0)

    # -- the mouse -----------------------------------------------------------------------
    def _key_at(self, x: int) -> ShownKey | None:
        palette = self._palette
        if palette is not None and x >= self.size.width - palette.width:
            return palette
        x += self._scroll
        return next((key for key in self._keys if key.start <= x < key.end), None)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        key = self._key_at(event.x)
        if key is not self._hover:
            self._hover = key
            self.tooltip = (key.tooltip or None) if key is not None else None
            self.refresh()

    def on_leave(self, event: events.Leave) -> None:
        if self._hover is not None:
            self._hover = None
            self.tooltip = None
            self.refresh()

    def on_mouse_down(self, event: events.MouseDown) -> None:
        key = self._key_at(event.x)
        if key is None:
            return
        if key.enabled:
            self.app.simulate_key(key.key)
        else:
            self.app.bell()

    def _scroll_by(self, columns: int) -> bool:
        keys_width = self._keys[-1].end if self._keys else 0
        room = self.size.width - (self._palette.width if self._palette else 0)
        scroll = max(0, min(self._scroll + columns, keys_width - room))
        if scroll == self._scroll:
            return False
        self._scroll = scroll
        self.refresh()
        return True

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        if self._scroll_by(4):
            event.stop()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if self._scroll_by(-4):
            event.stop()

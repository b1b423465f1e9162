"""The footer, without the leak of Textual's own in 8.x.

Textual's Footer recomposes whenever the screen's bindings change (every view switch) and
binds each new key to its ``compact`` reactive. Watchers of removed keys are dropped only
when that reactive changes, which it never does here, so each recompose kept its ~16 keys
alive: about 330 KiB per switch to a view and back. This footer drops them after each
recompose. The minimal case, for Textual's tracker: an App with three shown bindings and a
Footer; call ``footer.bindings_changed(app.screen)`` a hundred times; the number of
``FooterKey`` objects alive (``gc.get_objects()``) grows by the bindings shown each time.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

from textual.app import ComposeResult
from textual.binding import ActiveBinding, Binding
from textual.keys import KEY_NAME_REPLACEMENTS
from textual.screen import Screen
from textual.widgets import Footer, Input
from textual.widgets._footer import FooterKey


def _typed_key_names() -> frozenset[str]:
    """Textual's names of the keys that type a printable ASCII character ("minus", "a")."""
    names = set()
    for code in range(32, 127):
        char = chr(code)
        name = unicodedata.name(char).lower().replace("-", "_").replace(" ", "_")
        names.add(char)
        names.add(KEY_NAME_REPLACEMENTS.get(name, name))
    return frozenset(names)


TYPED_KEYS = _typed_key_names()


def footer_bindings(
    active: Iterable[ActiveBinding], app: object, typing: bool
) -> list[tuple[Binding, bool, str]]:
    """The shown bindings in footer order: the app's own first, then the view's and the
    focused widget's; keys a focused text field would type are left out (``typing``)."""
    ours: list[tuple[Binding, bool, str]] = []
    theirs: list[tuple[Binding, bool, str]] = []
    for node, binding, enabled, tooltip in active:
        if not binding.show or (typing and binding.key in TYPED_KEYS):
            continue
        (ours if node is app else theirs).append((binding, enabled, tooltip))
    return ours + theirs


# where Textual's reactive module keeps an object's watchers (reactive._watch)
_WATCHERS_ATTRIBUTE = "__watchers"


class _Key(FooterKey):
    """A footer key that is never compact (lltui's footer is not), set without a restyle."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_reactive(FooterKey.compact, False)

    def _watch_compact(self, compact: bool) -> None:
        # Textual's sets the class even when it is already so, and each set restyles the
        # key: about 1 ms a key, ten keys a footer, several footers before the first frame
        if compact != self.has_class("-compact"):
            super()._watch_compact(compact)


class LltuiFooter(Footer):
    """The footer with lltui's own keys first, and only keys that do something where the
    focus is (Textual's misses a few a text field types, such as ``-``)."""

    def _shown(self) -> tuple[tuple[tuple[Binding, bool, str], ...], ActiveBinding | None]:
        """The keys to show, one per action, and the command palette's key (None: not shown)."""
        active = self.screen.active_bindings
        typing = isinstance(self.screen.focused, Input)
        by_action: dict[str, tuple[Binding, bool, str]] = {}
        for binding, enabled, tooltip in footer_bindings(active.values(), self.app, typing):
            by_action.setdefault(binding.action, (binding, enabled, tooltip))
        palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        if not (self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE):
            palette = None
        return tuple(by_action.values()), palette

    _composed: object = None  # what _shown() gave when the keys were last composed

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        self._composed = shown = self._shown()
        keys, palette = shown
        self.styles.grid_size_columns = len(keys)
        for binding, enabled, tooltip in keys:
            yield _Key(
                binding.key,
                self.app.get_key_display(binding),
                binding.description,
                binding.action,
                disabled=not enabled,
                tooltip=tooltip,
            )  # compact is not bound: lltui's footer is never compact
        if palette is not None:
            yield FooterKey(  # compact, as in Textual's footer
                palette.binding.key,
                self.app.get_key_display(palette.binding),
                palette.binding.description,
                palette.binding.action,
                classes="-command-palette",
                disabled=not palette.enabled,
                tooltip=palette.binding.tooltip or palette.binding.description,
            )

    _recompose_pending = False

    def bindings_changed(self, screen: Screen[Any]) -> None:
        """One recompose for a burst of binding changes (a screen mounting, focus moving):
        Textual's queues one per change, eight before the first frame."""
        self._bindings_ready = True
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return
        if not self._recompose_pending:
            self._recompose_pending = True
            self.call_after_refresh(self._recompose_once)

    async def _recompose_once(self) -> None:
        self._recompose_pending = False
        # focus landing on a widget whose keys are all shown already (the process table as
        # the monitor opens) changes nothing here: the keys are not built again
        if self._shown() != self._composed:
            await self.recompose()

    async def recompose(self) -> None:
        await super().recompose()
        self.drop_detached_watchers()

    def drop_detached_watchers(self) -> int:
        """Forget watchers registered by widgets no longer in the DOM; how many went."""
        watchers = getattr(self, _WATCHERS_ATTRIBUTE, None)
        if not isinstance(watchers, dict):
            return 0
        dropped = 0
        for entries in watchers.values():
            kept = [(node, callback) for node, callback in entries if node.is_attached]
            dropped += len(entries) - len(kept)
            entries[:] = kept
        return dropped

"""Command-palette entries for the same actions the keys do."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from lltui.app.host import host_of
from lltui.app.keys import all_views
from lltui.app.model import SORT_KEYS, WINDOWS_S


class LltuiCommands(Provider):
    def _commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        app = host_of(self)
        cmds: list[tuple[str, str, Callable[[], object]]] = [
            (
                "Pause / resume sampling",
                "Stop or restart polling the source",
                app.action_toggle_pause,
            ),
            ("Sample faster", "Shorter interval between samples", partial(app.action_interval, -1)),
            ("Sample slower", "Longer interval between samples", partial(app.action_interval, 1)),
            (
                "Toggle sparklines",
                "Show or hide history graphs on the cards",
                app.action_toggle_graphs,
            ),
            (
                "Cycle layout",
                "GPUs as cards, compact lines, or whichever fits (auto)",
                app.action_cycle_layout,
            ),
            ("GPU detail", "Everything about the selected GPU", app.action_gpu_detail),
        ]
        for i, w in enumerate(WINDOWS_S):
            cmds.append(
                (
                    f"History window {int(w // 60)} min",
                    "Sparkline window",
                    partial(app.action_set_window, i),
                )
            )
        for key in SORT_KEYS:
            cmds.append(
                (
                    f"Sort processes by {key.replace('_', ' ')}",
                    "Process table order",
                    partial(app.action_sort_by, key),
                )
            )
        for n, (mode, label) in enumerate(all_views(), start=1):
            if mode not in self.app.MODES:
                continue
            cmds.append(
                (
                    f"View: {mode}",
                    f"{label} view (keys {n}, F{n})",
                    partial(app.action_view, mode),
                )
            )
        cmds.append(("Keys", "Every key of this view", app.action_help))
        return cmds

    async def discover(self) -> Hits:
        for name, help_text, callback in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, help_text, callback in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)

"""Command-palette entries for the same actions the keys do: the app's everywhere, the
monitor's where the monitor (or its detail page) is shown."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

from lltui.app.app_protocol import host_of
from lltui.app.keys import view_keys
from lltui.app.state.monitor import WINDOWS_S
from lltui.app.views import VIEWS

Command = tuple[str, str, Callable[[], object]]


def keys_said(keys: tuple[str, ...]) -> str:
    """``keys`` as the palette names them: "key 1", "keys 2, F2"."""
    return f"key{'s' if len(keys) > 1 else ''} {', '.join(keys).upper()}"


class LltuiCommands(Provider):
    def _commands(self) -> list[Command]:
        app = host_of(self)
        paused = app.model.paused
        cmds: list[Command] = [
            (
                "Resume sampling" if paused else "Pause sampling",
                "Restart polling the source" if paused else "Stop polling the source",
                app.action_toggle_pause,
            ),
            ("Sample faster", "Shorter interval between samples", partial(app.action_interval, -1)),
            ("Sample slower", "Longer interval between samples", partial(app.action_interval, 1)),
        ]
        cmds += self._monitor_commands()
        for n, view in enumerate(VIEWS, start=1):
            if view.mode not in self.app.MODES:
                continue
            cmds.append(
                (
                    f"View: {view.mode}",
                    f"{view.label} view ({keys_said(view_keys(n))})",
                    partial(app.action_view, view.mode),
                )
            )
        cmds.append(("Keys", "Every key of this view", app.action_help))
        return cmds

    def _monitor_commands(self) -> list[Command]:
        from lltui.app.screens.monitor import MonitorScreen
        from lltui.app.widgets.process_table import ProcessTable

        stack = self.app.screen_stack
        monitor = stack[0] if stack else None
        if not isinstance(monitor, MonitorScreen):
            return []  # the monitor's commands where it is shown (or its detail above it)
        cmds: list[Command] = [
            (
                "Toggle sparklines",
                "Show or hide history graphs on the cards",
                monitor.action_toggle_graphs,
            ),
            (
                "Cycle layout",
                "GPUs as cards, compact lines, or whichever fits (auto)",
                monitor.action_cycle_layout,
            ),
            ("GPU detail", "Everything about the selected GPU", monitor.action_gpu_detail),
        ]
        for i, w in enumerate(WINDOWS_S):
            cmds.append(
                (
                    f"History window {int(w // 60)} min",
                    "Sparkline window",
                    partial(monitor.action_set_window, i),
                )
            )
        for key in monitor.query_one(ProcessTable).sort_keys:  # the columns shown
            cmds.append(
                (
                    f"Sort processes by {key.replace('_', ' ')}",
                    "Process table order",
                    partial(monitor.action_sort_by, key),
                )
            )
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

"""The app's views, in one table: each one's mode name, label, number key and screen.

The order is that of the keys 1-6 and of ``v``. Views other than the monitor are imported
when first opened, so startup stays light. The fleet view is there only when several hosts
are watched."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from textual.screen import Screen


@dataclass(frozen=True, slots=True)
class View:
    mode: str
    label: str
    screen: str  # "module:Class" in lltui.app.screens, imported when the view first opens

    def make(self) -> Screen[Any]:
        module, name = self.screen.split(":")
        screen: type[Screen[Any]] = getattr(import_module(f"lltui.app.screens.{module}"), name)
        return screen()


VIEWS: tuple[View, ...] = (
    View("monitor", "Monitor", "monitor:MonitorScreen"),
    View("topology", "Topology", "topology:TopologyScreen"),
    View("nccl", "NCCL", "nccl:NcclScreen"),
    View("fit", "Fit", "fit:FitScreen"),
    View("launch", "Launch", "launch:LaunchScreen"),
    View("fleet", "Fleet", "fleet:FleetScreen"),
)
MODES: dict[str, str | Callable[[], Screen[Any]]] = {v.mode: v.make for v in VIEWS}


def next_view(modes: Sequence[str], current: str) -> str:
    """The view after ``current`` (the first when ``current`` is none of them)."""
    position = modes.index(current) if current in modes else -1
    return modes[(position + 1) % len(modes)]

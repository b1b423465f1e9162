"""The app's views, as Textual modes, in the order the keys 1-5 and ``v`` go through them.

Views other than the monitor are imported when first opened, so startup stays light."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from textual.screen import Screen

from lltui.app.screens.monitor import MonitorScreen


def _topology_screen() -> Screen[Any]:
    from lltui.app.screens.topology import TopologyScreen

    return TopologyScreen()


def _nccl_screen() -> Screen[Any]:
    from lltui.app.screens.nccl import NcclScreen

    return NcclScreen()


def _fit_screen() -> Screen[Any]:
    from lltui.app.screens.fit import FitScreen

    return FitScreen()


def _launch_screen() -> Screen[Any]:
    from lltui.app.screens.launch import LaunchScreen

    return LaunchScreen()


def _fleet_screen() -> Screen[Any]:
    from lltui.app.screens.fleet import FleetScreen

    return FleetScreen()


MODES: dict[str, str | Callable[[], Screen[Any]]] = {
    "monitor": MonitorScreen,
    "topology": _topology_screen,
    "nccl": _nccl_screen,
    "fit": _fit_screen,
    "launch": _launch_screen,
    "fleet": _fleet_screen,
}


def next_view(modes: Sequence[str], current: str) -> str:
    """The view after ``current`` (the first when ``current`` is none of them)."""
    position = modes.index(current) if current in modes else -1
    return modes[(position + 1) % len(modes)]

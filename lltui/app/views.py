"""The app's views, in one table: each one's mode name, label, number key and screen.

The order is that of the keys 1-6 and of ``v``. Views other than the monitor are imported
when first opened, so startup stays light. The fleet view is there only when several hosts
are watched."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from textual.screen import Screen


def _monitor() -> Screen[Any]:
    from lltui.app.screens.monitor import MonitorScreen

    return MonitorScreen()


def _topology() -> Screen[Any]:
    from lltui.app.screens.topology import TopologyScreen

    return TopologyScreen()


def _nccl() -> Screen[Any]:
    from lltui.app.screens.nccl import NcclScreen

    return NcclScreen()


def _fit() -> Screen[Any]:
    from lltui.app.screens.fit import FitScreen

    return FitScreen()


def _launch() -> Screen[Any]:
    from lltui.app.screens.launch import LaunchScreen

    return LaunchScreen()


def _fleet() -> Screen[Any]:
    from lltui.app.screens.fleet import FleetScreen

    return FleetScreen()


@dataclass(frozen=True, slots=True)
class View:
    mode: str
    label: str
    make: Callable[[], Screen[Any]]


VIEWS: tuple[View, ...] = (
    View("monitor", "Monitor", _monitor),
    View("topology", "Topology", _topology),
    View("nccl", "NCCL", _nccl),
    View("fit", "Fit", _fit),
    View("launch", "Launch", _launch),
    View("fleet", "Fleet", _fleet),
)
MODES: dict[str, str | Callable[[], Screen[Any]]] = {v.mode: v.make for v in VIEWS}


def next_view(modes: Sequence[str], current: str) -> str:
    """The view after ``current`` (the first when ``current`` is none of them)."""
    position = modes.index(current) if current in modes else -1
    return modes[(position + 1) % len(modes)]

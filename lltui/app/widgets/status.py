"""The status line (source, driver, poll health) and the SIMULATED banner."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from textual.content import Content
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import Static

from lltui.app.model import RigModel
from lltui.core.monitor.models import RigInfo
from lltui.core.units import fmt_duration


def fmt_window(seconds: float) -> str:
    return f"{seconds / 3600:g}h" if seconds >= 3600 else f"{seconds / 60:g}m"


def render_banner(info: RigInfo) -> str:
    """The always-visible line that says a rig is simulated, and why."""
    if not info.simulated:
        return ""
    reason = info.simulated_reason or "simulated rig"
    return f"[b]SIMULATED[/b] {escape(info.source)}: {escape(reason)}"


def fmt_history(held_s: float, window_s: float, *, short: bool = False) -> str:
    """How much of the graphs' window the history fills: ``graphs 39s of 1m``, or
    ``graphs 1m`` once it is full; ``39s/1m`` where the line is short of room."""
    window = fmt_window(window_s)
    if held_s >= window_s:
        return window if short else f"graphs {window}"
    held = fmt_duration(held_s).replace("m00s", "m")
    return f"{held}/{window}" if short else f"graphs {held} of {window}"


@lru_cache(maxsize=64)  # twice a second, mostly the same few lines
def _cells(markup: str) -> int:
    return Content.from_markup(markup).cell_length


def render_status(
    model: RigModel, busy_for: float | None, width: int = 0, *, history: bool = True
) -> str:
    """The status line (and any error or hint lines below it). With ``history`` it says how
    much history the graphs have, and with ``width`` the first line is fitted to it: shorter
    wording first, then the driver and CUDA go."""
    first = _status_line(model, busy_for, width if history else 0, history)
    return first + _status_notes(model)


def _status_line(model: RigModel, busy_for: float | None, width: int, history: bool) -> str:
    info = model.info
    source = f"[b]lltui[/b] {escape(info.source)}"
    versions = []
    if info.driver_version:
        versions.append(f"driver {escape(info.driver_version)}")
    if info.cuda_version:
        versions.append(f"CUDA {escape(info.cuda_version)}")
    state = _state(model, busy_for)
    kept = model.history
    held = min(kept.seconds(), kept.max_age_s or float("inf"))
    every = f"{state} every {model.interval:g}s"
    terse = f"{state} {model.interval:g}s"
    if model.latest is None or not history:  # no history to speak of (yet)
        graphs = short = f"graphs {fmt_window(model.window_s)}"
    else:
        graphs = fmt_history(held, model.window_s)
        short = fmt_history(held, model.window_s, short=True)
    variants = [
        [source, *versions, every, graphs],
        [source, *versions, every, short],
        [source, *versions, terse, short],
        [source, terse, short],
    ]
    lines = ["  ".join(parts) for parts in variants]
    if width <= 0:
        return lines[0]
    for line in lines:
        if _cells(line) <= width:
            return line
    return lines[-1]


def _state(model: RigModel, busy_for: float | None) -> str:
    ended = model.latest is not None and model.latest.ended
    if ended:
        state = "[b $warning]■[/] end of recording"
    elif model.paused:
        state = "[b $warning]PAUSED[/]"
    elif model.stale(busy_for):
        age = model.age()
        waited = busy_for if busy_for is not None else age
        state = f"[b $error]STALE[/] no data for {fmt_duration(waited)}"
    elif model.latest is None:
        state = "[$text-muted]starting…[/]"
    else:
        state = "[$gpu-ok]●[/] live"
    return state


def _status_notes(model: RigModel) -> str:
    info = model.info
    ended = model.latest is not None and model.latest.ended
    line = ""
    if model.error and not (
        ended and model.latest is not None and model.error == model.latest.error
    ):
        line += f"\n[b $error]source error:[/] {escape(model.error)}"
    for hint in info.hints:
        line += f"\n[$warning]hint:[/] {escape(hint)}"
    return line


def show_header(screen: Screen[Any], model: RigModel, busy_for: float | None) -> None:
    """Update a screen's status line and SIMULATED banner."""
    screen.query_one(StatusBar).show(model, busy_for)
    screen.query_one(Banner).show(model.info)


class StatusBar(Static):
    """``history``: say how much of the graph window the history fills and fit the line to
    the width (the monitor); without it, the window alone on a line that may wrap."""

    def __init__(self, *, id: str | None = None, history: bool = False) -> None:
        super().__init__("", id=id)
        self._text: str | None = None
        self._history = history

    def show(self, model: RigModel, busy_for: float | None) -> None:
        # the padding takes a column on each side
        width = max(0, self.size.width - 2)
        text = render_status(model, busy_for, width, history=self._history)
        if text != self._text:  # twice a second between samples: skip repeats
            # the history's age changes the first line each tick: a relayout only when the
            # height may change (the first line wraps to other than the height it has, or
            # there are lines below it: errors and hints, rare)
            first, _, below = text.partition("\n")
            rows = -(-_cells(first) // width) if width else 0
            self._text = text
            self.update(text, layout=not rows or bool(below) or rows != self.size.height)


class Banner(Static):
    """The SIMULATED banner; hidden for a real rig."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._text: str | None = None

    def show(self, info: RigInfo) -> None:
        text = render_banner(info)
        if text != self._text:  # a relayout only when it changes
            self._text = text
            self.display = bool(text)
            self.update(text)

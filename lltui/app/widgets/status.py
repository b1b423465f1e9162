"""The status line (source, driver, poll health) and the SIMULATED banner."""

from __future__ import annotations

from typing import Any

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


def render_status(model: RigModel, busy_for: float | None) -> str:
    info = model.info
    parts = [f"[b]lltui[/b] {escape(info.source)}"]
    if info.driver_version:
        parts.append(f"driver {escape(info.driver_version)}")
    if info.cuda_version:
        parts.append(f"CUDA {escape(info.cuda_version)}")
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
    parts.append(f"{state} every {model.interval:g}s")
    parts.append(f"graphs {fmt_window(model.window_s)}")
    line = "  ".join(parts)
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
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self._text: str | None = None

    def show(self, model: RigModel, busy_for: float | None) -> None:
        text = render_status(model, busy_for)
        if text != self._text:  # twice a second between samples: skip repeats
            self._text = text
            self.update(text)


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

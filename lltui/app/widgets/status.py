"""The status line (source, driver, poll health) and the SIMULATED banner."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from lltui.app.model import RigModel
from lltui.core.models import RigInfo
from lltui.core.units import fmt_duration


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
    if model.paused:
        state = "[b $warning]PAUSED[/]"
    elif model.stale(busy_for):
        age = model.age()
        waited = busy_for if busy_for is not None else age
        state = f"[b $error]STALE[/] no data for {fmt_duration(waited)}"
    elif model.latest is None:
        state = "[$text-muted]starting…[/]"
    else:
        state = "[$gpu-ok]●[/] live"
    parts.append(state)
    parts.append(f"every {model.interval:g}s")
    parts.append(f"window {fmt_duration(model.window_s)}")
    line = "  ".join(parts)
    if model.error:
        line += f"\n[b $error]source error:[/] {escape(model.error)}"
    for hint in info.hints:
        line += f"\n[$warning]hint:[/] {escape(hint)}"
    return line


class StatusBar(Static):
    def show(self, model: RigModel, busy_for: float | None) -> None:
        text = render_status(model, busy_for)
        self.update(text, layout=text.count("\n") != getattr(self, "_n", -1))
        self._n = text.count("\n")

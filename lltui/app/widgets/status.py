"""The status line (source, driver, poll health) and the SIMULATED banner."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.geometry import Size
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import Static

from lltui.app.rig_model import RigModel
from lltui.app.state.monitor import WINDOWS_S
from lltui.app.widgets.gpu_card import theme_style
from lltui.app.widgets.text_lines import TextLines
from lltui.core.monitor.models import RigInfo
from lltui.core.units import fmt_clock, fmt_duration


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


@dataclass(frozen=True, slots=True)
class StatusStyles:
    """The status line's colours as rich styles, worked out once per theme: the line is
    built as ``Text`` each tick, never parsed from markup."""

    theme: str
    bold: Style
    muted: Style
    ok: Style
    warn: Style
    warn_bold: Style
    error_bold: Style

    @classmethod
    def from_variables(cls, theme: str, variables: dict[str, str]) -> StatusStyles:
        return cls(
            theme=theme,
            bold=Style(bold=True),
            muted=theme_style(variables, "text-muted"),
            ok=theme_style(variables, "gpu-ok"),
            warn=theme_style(variables, "warning"),
            warn_bold=theme_style(variables, "warning", bold=True),
            error_bold=theme_style(variables, "error", bold=True),
        )


# without an app (tests, plain text): the words and their weight, no colours
PLAIN = StatusStyles(
    "", Style(bold=True), Style(), Style(), Style(), Style(bold=True), Style(bold=True)
)


def render_status(
    model: RigModel,
    busy_for: float | None,
    width: int = 0,
    *,
    history: bool = True,
    styles: StatusStyles = PLAIN,
    window_s: float = WINDOWS_S[0],
) -> Text:
    """The status line (and any error or hint lines below it). With ``history`` it says how
    much of the graphs' window (``window_s``) the history fills, and with ``width`` the first
    line is fitted to it: shorter wording first, then the driver and CUDA go."""
    first = _status_line(model, busy_for, width, history, styles, window_s)
    return first + _status_notes(model, styles)


def _status_line(
    model: RigModel,
    busy_for: float | None,
    width: int,
    history: bool,
    styles: StatusStyles,
    window_s: float,
) -> Text:
    info = model.info
    source = Text.assemble(("lltui", styles.bold), " ", info.source)
    versions: list[Text | str] = []
    if info.driver_version:
        versions.append(f"driver {info.driver_version}")
    if info.cuda_version:
        versions.append(f"CUDA {info.cuda_version}")
    if info.rocm_version:
        versions.append(f"ROCm {info.rocm_version}")
    state = _state(model, busy_for, styles)
    kept = model.history
    held = min(kept.seconds(), kept.max_age_s or float("inf"))
    every = Text.assemble(state, f" every {model.interval:g}s")
    terse = Text.assemble(state, f" {model.interval:g}s")
    if model.latest is None or not history:  # no history to speak of (yet)
        graphs = short = f"graphs {fmt_window(window_s)}"
    else:
        graphs = fmt_history(held, window_s)
        short = fmt_history(held, window_s, short=True)
    variants: list[list[Text | str]] = [
        [source, *versions, every, graphs],
        [source, *versions, every, short],
        [source, *versions, terse, short],
        [source, terse, short],
    ]
    if width <= 0:
        variants = variants[:1]
    for parts in variants:
        line = Text("  ").join(Text(p) if isinstance(p, str) else p for p in parts)
        if width <= 0 or line.cell_len <= width:
            return line
    # still too long: a long source (a profile or host name) ends in an ellipsis, as one
    # line, rather than wrapping the status onto a second
    rest = Text("  ").join(Text(p) if isinstance(p, str) else p for p in (terse, short))
    source.truncate(max(1, width - rest.cell_len - 2), overflow="ellipsis")
    line = Text("  ").join((source, rest))
    line.truncate(width, overflow="ellipsis")
    return line


def _state(model: RigModel, busy_for: float | None, styles: StatusStyles) -> Text:
    latest = model.latest
    ended = latest is not None and latest.ended
    playback = latest.playback if latest is not None else None
    if playback is not None:  # a recording: where it is, as a player says it
        place = f"replay {fmt_clock(playback.position_s)} of {fmt_clock(playback.length_s)}"
        if playback.loop:
            place += f" (loop {playback.loop + 1})"
        if ended:
            return Text.assemble(("■", styles.warn_bold), f" replay ended at {place[7:]}")
        if model.paused:
            return Text.assemble(("PAUSED", styles.warn_bold), f" {place}")
        return Text.assemble(("▶", styles.ok), f" {place}")
    if ended:
        return Text.assemble(("■", styles.warn_bold), " end of recording")
    if model.paused:
        return Text("PAUSED", styles.warn_bold)
    if model.stale(busy_for):
        age = model.age()
        waited = busy_for if busy_for is not None else age
        return Text.assemble(("STALE", styles.error_bold), f" no data for {fmt_duration(waited)}")
    if model.latest is None:
        if model.error:  # a host that refuses or hangs: not starting, failing
            return Text.assemble(("✖", styles.error_bold), " no data")
        return Text("starting…", styles.muted)
    return Text.assemble(("●", styles.ok), " live")


def _status_notes(model: RigModel, styles: StatusStyles) -> Text:
    info = model.info
    ended = model.latest is not None and model.latest.ended
    notes = Text()
    if model.error and not (
        ended and model.latest is not None and model.error == model.latest.error
    ):
        notes.append_text(
            Text.assemble("\n", ("source error:", styles.error_bold), " ", model.error)
        )
    for hint in info.hints:
        notes.append_text(Text.assemble("\n", ("hint:", styles.warn), " ", hint))
    return notes


def show_header(
    screen: Screen[Any], model: RigModel, busy_for: float | None, window_s: float
) -> None:
    """Update a screen's status line (``window_s``: the monitor's graph window) and
    SIMULATED banner."""
    screen.query_one(StatusBar).show(model, busy_for, window_s)
    screen.query_one(Banner).show(model.info)


class StatusBar(TextLines):
    """``history``: say how much of the graph window the history fills (the monitor);
    without it, the window alone. Either is fitted to the width: shorter wording first (a
    wrapped status took a row of 24). Drawn
    line by line: the history's age changes a few cells of it each second at first."""

    def __init__(self, *, id: str | None = None, history: bool = False) -> None:
        super().__init__(id=id)
        self._history = history
        self._style_cache: StatusStyles | None = None
        self._shown: tuple[Text | str, int] | None = None  # the text and the width it fits

    def show(self, model: RigModel, busy_for: float | None, window_s: float) -> None:
        text = render_status(
            model,
            busy_for,
            self._width(),
            history=self._history,
            styles=self._styles(),
            window_s=window_s,
        )
        self.update(text)

    @property
    def text(self) -> Text | str:
        """What is shown, before it is wrapped to the width."""
        return "" if self._shown is None else self._shown[0]

    def update(self, text: Text | str) -> None:
        """Show ``text`` with its long lines wrapped to the width (``Text``; markup as it
        is): the lines are drawn one per row."""
        width = self._width()
        if (text, width) == self._shown:  # each second between samples: skip repeats
            return
        self._shown = (text, width)
        if isinstance(text, str):
            super().update(text)
        else:
            self.update_lines(self._wrapped(text, width))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # the layout asks for the height at a width: the lines are wrapped to it here, in
        # the same pass (a relayout asked for from a resize handler would be one too late)
        shown = self._shown
        if shown is not None and shown[1] != width and isinstance(shown[0], Text):
            self._shown = (shown[0], width)
            self.replace_lines(self._wrapped(shown[0], width))
        return super().get_content_height(container, viewport, width)

    def _wrapped(self, text: Text, width: int) -> list[Text]:
        lines: list[Text] = []
        for line in text.split("\n", allow_blank=True):
            if not width or line.cell_len <= width:
                lines.append(line)
            else:
                lines.extend(line.wrap(self.app.console, width))
        return lines

    def _width(self) -> int:
        return self._content_size().width  # the padding is outside it

    def _styles(self) -> StatusStyles:
        theme = self.app.theme
        if self._style_cache is None or self._style_cache.theme != theme:
            self._style_cache = StatusStyles.from_variables(theme, self.app.get_css_variables())
        return self._style_cache


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

"""TextLines: rich ``Text`` drawn line by line, the widget of the GPU cards and the rig summary.

A live monitor changes a few numbers on a few lines every tick. Textual would re-render the
whole widget's text, then pass each changed line through its styles cache (border, padding,
background, worked out again on every line). Here each line is kept as a strip, a change
re-renders only its line and repaints only its columns, and a widget whose box is plain
(borders and padding at the sides only, no tint, opacity or hatch) puts its border and
padding around a line from a frame worked out once per style change, by Textual's own
styles cache (:class:`Frame`). Anything else goes through Textual unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual.color import Color
from textual.dom import NoScreen
from textual.filter import ANSIToTruecolor, LineFilter
from textual.geometry import Region, Size
from textual.messages import Update
from textual.screen import Screen
from textual.strip import Strip
from textual.style import Style as VisualStyle
from textual.visual import Visual, visualize
from textual.widget import Widget

PLACED_MAX = 4096  # styles at places a widget keeps (a few hundred in use)
# stands for a line's content when the frame around it is worked out: a private-use
# character no styles or filters touch
_MARK = "\ue000"


class TextBuilder:
    """One line of rich ``Text`` built from pieces: the pieces joined and their spans placed
    in one go, where ``Text.append`` checks and measures each piece as it comes (a card's
    line is a dozen pieces, built again every tick). What it builds equals the ``Text`` the
    same appends make."""

    __slots__ = ("_end", "_pieces", "_spans")

    def __init__(self, start: str = "") -> None:
        self._pieces: list[str] = []
        self._spans: list[Span] = []
        self._end = 0
        if start:
            self.append(start)

    def __len__(self) -> int:
        return self._end

    def append(self, text: str, style: Style | None = None) -> None:
        """Add ``text`` in ``style`` (a null style adds no span, as ``Text.append``)."""
        if not text:
            return
        end = self._end + len(text)
        if style:
            self._spans.append(Span(self._end, end, style))
        self._pieces.append(text)
        self._end = end

    def build(self) -> Text:
        plain = "".join(self._pieces)
        text = Text(plain, no_wrap=True, spans=self._spans)
        if len(text) == len(plain):
            return text
        # control codes the Text drops move the spans: built as Text builds it
        text = Text(no_wrap=True)
        at = 0
        for piece in self._pieces:
            style = next((s.style for s in self._spans if s.start == at), None)
            text.append(piece, style)
            at += len(piece)
        return text


@dataclass(frozen=True, slots=True)
class Frame:
    """What Textual's styles put around each content line of a plain box: the segments
    before and after it (left border and padding, right padding and border), the style
    that pads a short line to the content's width, and the background the line filters
    are given. Worked out by Textual's own styles cache, once per style change."""

    key: tuple[object, ...]
    left: tuple[Segment, ...]
    right: tuple[Segment, ...]
    pad_style: Style | None
    content_width: int
    width: int
    background: Color


class TextLines(Widget):
    """Rich ``Text`` drawn line by line (Textual's line API) from strips kept per line:
    new text re-renders only the lines that changed and repaints only the columns that
    did, so a live number that moves costs a few cells, not the widget's every line. What
    it draws is what a ``Static`` with ``text-wrap: nowrap`` would."""

    DEFAULT_CSS = """
    TextLines { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._text: Text | str | None = None
        self._lines: list[Text | str] = []
        # strips per line, for one base style and width; None: not rendered yet
        self._strips: list[Strip | None] = []
        self._strip_key: tuple[VisualStyle, int] | None = None
        self._span_styles: dict[object, VisualStyle] = {}
        # the rich style of a span at a place: Textual marks each with its offset
        self._placed: dict[tuple[object, int, int], Style] = {}
        # the frame around the lines (None: not worked out, or the box is not plain) and
        # each line framed, with the content strip it was framed from
        self._frame: Frame | None = None
        self._frame_key: tuple[object, ...] | None = None
        self._framed: list[tuple[Text | str, Strip] | None] = []
        self._framed_filters: tuple[LineFilter, ...] = ()
        # styles at places with the line filters applied, and the frame's segments so
        self._placed_filtered: dict[tuple[object, int, int], Style] = {}
        self._frame_filtered: tuple[Frame, list[Segment], list[Segment], Style | None] | None
        self._frame_filtered = None
        self._screen_found: Screen[Any] | None = None  # found once: a card does not change screens

    def render(self) -> Text | str:
        if self._text is None:  # given as lines: joined only when asked
            self._text = Text("\n", no_wrap=True).join(
                line if isinstance(line, Text) else Text(line) for line in self._lines
            )
        return self._text

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return max(1, len(self._lines))

    def update(self, text: Text | str) -> None:
        """Show ``text`` (a ``str`` is Textual markup), if it differs from what is shown."""
        if self._text is not None and text == self._text:
            return
        lines: list[Text | str] = []
        lines += text.split("\n") if isinstance(text, str) else text.split("\n", allow_blank=True)
        self._take(lines)
        self._text = text

    def update_lines(self, lines: list[Text]) -> None:
        """Show these lines, if they differ from what is shown."""
        if lines != self._lines:
            self._take(list(lines))

    def replace_lines(self, lines: list[Text]) -> None:
        """Show these lines without asking for a relayout: for the layout itself, which asks
        a widget's height at a width and may find its lines change with it."""
        self._text = None
        self._lines = list(lines)
        self._strips = [None] * len(lines)
        self.refresh()

    def _take(self, lines: list[Text | str]) -> None:
        """Show ``lines``: repaint the columns of the lines that changed; a relayout only
        when the number of lines changed."""
        old = self._lines
        self._text = None
        self._lines = lines
        width, height = self._content_size()
        if len(lines) != len(old) or height == 0:
            self._strips = [None] * len(lines)
            if self._layout_required:
                # a relayout asked for earlier is still pending, and a layout since may have
                # cached this widget's height (keyed by this count): count this one too
                self._layout_updates += 1
            self.refresh(layout=True)
            return
        regions = []
        for y, (was, now) in enumerate(zip(old, lines, strict=True)):
            if was == now:
                lines[y] = was  # the line drawn from it stays (kept by the line)
                continue
            self._strips[y] = None
            if isinstance(was, str) or isinstance(now, str) or _wide(was.plain) or _wide(now.plain):
                start, end = 0, width  # markup, or cells that are not one per character
            else:
                start, end = _changed_columns(was, now)
            if end > width or max(len(was), len(now)) > width:
                start, end = 0, width  # an ellipsis moves with the length
            if end > start:
                regions.append(Region(start, y, end - start, 1))
        if regions:
            self._repaint(regions)

    def _repaint(self, regions: list[Region]) -> None:
        """Repaint ``regions``: what ``refresh(*regions)`` does for a repaint, with the
        screen told here, where ``refresh`` wakes this widget's message loop to tell it (a
        hop for each widget each tick)."""
        if not (self.is_mounted and self.display and self._parent is not None) or self._closing:
            self.refresh(*regions)
            return
        screen = self._screen_found
        if screen is None:
            try:
                screen = self._screen_found = self.screen
            except NoScreen:
                self.refresh(*regions)
                return
        self._set_dirty(*regions)
        self.clear_cached_dimensions()
        screen.post_message(Update(self))

    def on_unmount(self) -> None:
        self._screen_found = None

    def _content_size(self) -> Size:
        """What ``size`` gives (the content's size), from the size the layout gave this
        widget less its gutter: ``size`` finds the widget's region on its screen, a walk up
        the tree and a map lookup, on every line of every tick."""
        width, height = self.outer_size
        gutter = self.styles.gutter
        return Size(max(0, width - gutter.width), max(0, height - gutter.height))

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._frame_key = None

    def selection_updated(self, selection: Any) -> None:
        # a selection is drawn into the content: the kept strips go
        self._strips = [None] * len(self._lines)
        self._framed = []
        super().selection_updated(selection)

    def render_lines(self, crop: Region) -> list[Strip]:
        """What Textual's ``Widget.render_lines`` gives; a plain box's lines are framed here."""
        frame = self._plain_frame()
        if frame is None or self._hovered_link():
            return super().render_lines(crop)
        self._check_strips()
        filters = tuple(self.get_line_filters())
        if filters != self._framed_filters:
            self._framed_filters = filters
            self._framed = []
            self._placed_filtered = {}
        # where every filter only maps styles, a line is filtered as it is built
        fused = all(type(f) is ANSIToTruecolor for f in filters)
        lines = self._lines
        framed = self._framed
        if len(framed) != len(lines):
            framed = self._framed = [None] * len(lines)
        strips: list[Strip] = []
        for y in crop.line_range:
            line = lines[y] if 0 <= y < len(lines) else None
            kept = framed[y] if line is not None else None
            if kept is not None and kept[0] is line:
                strips.append(kept[1])
                continue
            strip = self._fused_line(frame, line, y, filters) if fused and line else None
            if strip is None:
                strip = self._frame_line(frame, self.render_line(y))
                for line_filter in filters:
                    strip = strip.apply_filter(line_filter, frame.background)
            if line is not None:
                framed[y] = (line, strip)
            strips.append(strip)
        if crop.column_span != (0, frame.width):
            x1, x2 = crop.column_span
            strips = [strip.crop(x1, x2) for strip in strips]
        return strips

    def _fused_line(
        self, frame: Frame, line: Text | str, y: int, filters: tuple[LineFilter, ...]
    ) -> Strip | None:
        """A line framed and filtered in one pass: each segment made once, in its filtered
        style (None: the line is not one this builds)."""
        if isinstance(line, str):
            return None
        background = frame.background

        def filtered(style: Style | None) -> Style | None:
            for line_filter in filters:
                style = line_filter.apply([Segment(" ", style)], background)[0].style
            return style

        def placed(rich: object, x: int) -> Style:
            key = (rich, x, y)
            style = self._placed_filtered.get(key)
            if style is None:
                if len(self._placed_filtered) > PLACED_MAX:
                    self._placed_filtered.clear()
                mapped = filtered(self._placed_style(rich, x, y))
                style = self._placed_filtered[key] = mapped if mapped is not None else Style()
            return style

        content = self._segments(line, frame.content_width, placed)
        if content is None:
            return None
        if self._frame_filtered is None or self._frame_filtered[0] is not frame:
            self._frame_filtered = (
                frame,
                [Segment(s.text, filtered(s.style)) for s in frame.left],
                [Segment(s.text, filtered(s.style)) for s in frame.right],
                filtered(frame.pad_style),
            )
        _frame, left, right, pad_style = self._frame_filtered
        pad = frame.content_width - len(line)
        if pad:
            content.append(Segment(" " * pad, pad_style))
        return Strip([*left, *content, *right], frame.width)

    @staticmethod
    def _frame_line(frame: Frame, content: Strip) -> Strip:
        if content.cell_length != frame.content_width:
            content = content.adjust_cell_length(frame.content_width, frame.pad_style)
        return Strip([*frame.left, *content, *frame.right], frame.width)

    def _hovered_link(self) -> bool:
        """Whether the pointer is over a link Textual would highlight (its own path does)."""
        hover = self.hover_style
        return bool(self.auto_links and hover._link_id and hover._meta)

    def _plain_frame(self) -> Frame | None:
        """The frame of this box, if it is plain; worked out again when a style of this
        widget or one above it changed, or its size did."""
        size, content = self.outer_size, self._content_size()
        key = (size, content, *[node.styles._cache_key for node in self.ancestors_with_self])
        if key != self._frame_key:
            self._frame_key = key
            self._frame = self._make_frame(key, size, content)
            self._framed = []
        return self._frame

    def _make_frame(self, key: tuple[object, ...], size: Size, content: Size) -> Frame | None:
        # the sizes Textual's styles cache is given (StylesCache.render_widget)
        styles = self.styles
        gutter = styles.gutter
        width, content_width = size.width, content.width
        plain = (
            not self.BLANK
            and gutter.top == 0
            and gutter.bottom == 0
            and styles.border_top[0] == ""
            and styles.border_bottom[0] == ""
            and all(edge[0] == "" for edge in styles.outline)
            and styles.tint.a == 0
            and styles.text_opacity == 1.0
            and not (styles.has_rule("hatch") and styles.hatch != "none")
            and self.opacity == 1.0
            and content_width >= 2
        )
        if not plain:
            return None
        base_background, background = self.background_colors
        # the content stands one cell short, so the padding of a short line shows too
        mark = Strip([Segment(_MARK * (content_width - 1))], content_width - 1)
        try:
            line = self._styles_cache.render_line(
                styles,
                0,
                size,
                content,
                styles.padding,
                base_background,
                background,
                lambda _y: mark,
                None,
                None,
                1.0,
                self.app.ansi_theme,
                self.app.native_ansi_color,
            )
        except (TypeError, AttributeError, ValueError):  # Textual's private call changed
            return None
        segments = list(line)
        at = next((i for i, s in enumerate(segments) if s.text == _MARK * (content_width - 1)), -1)
        if at < 0 or at + 1 >= len(segments) or segments[at + 1].text != " ":
            return None
        return Frame(
            key=key,
            left=tuple(segments[:at]),
            right=tuple(segments[at + 2 :]),
            pad_style=segments[at + 1].style,
            content_width=content_width,
            width=width,
            background=background,
        )

    def _check_strips(self) -> None:
        """Drop the kept strips and styles when the base style or the width changed."""
        width = self._content_size().width
        base = self.visual_style
        if self._strip_key != (base, width) or len(self._strips) != len(self._lines):
            self._strip_key = (base, width)
            self._strips = [None] * len(self._lines)
            self._span_styles = {}
            self._placed = {}
            self._placed_filtered = {}
            self._framed = []

    def render_line(self, y: int) -> Strip:
        # what Widget.render_line would re-render from; these lines are kept here instead,
        # so the regions marked by refresh(region) are only dropped, not gathered forever
        self._dirty_regions.clear()
        self._check_strips()
        base = self.visual_style
        width = self._content_size().width
        if not 0 <= y < len(self._lines):
            return Strip.blank(width, base.rich_style)
        strip = self._strips[y]
        if strip is None:
            strip = self._strips[y] = self._line_strip(self._lines[y], y, width, base)
        return strip

    def _line_strip(self, line: Text | str, y: int, width: int, base: VisualStyle) -> Strip:
        """One line as Textual would draw it (``Content.to_strip``), built straight from
        the line's spans; lines this does not cover go through Textual itself."""
        if not isinstance(line, str):
            segments = self._segments(line, width, lambda rich, x: self._placed_style(rich, x, y))
            if segments is not None:
                return Strip(segments, len(line))
        if self.text_selection is not None:  # its offsets are the whole text's: drawn whole
            height = len(self._lines)
            strips = Visual.to_strips(self, visualize(self, self.render()), width, height, base)
            return strips[y] if y < len(strips) else Strip.blank(width)
        strips = Visual.to_strips(self, visualize(self, line), width, 1, base)
        return strips[0] if strips else Strip.blank(0)

    def _segments(
        self, line: Text, width: int, style_at: Callable[[object, int], Style]
    ) -> list[Segment] | None:
        """The segments of a line of single-width cells that fits ``width``, each span in
        ``style_at(its rich style, its column)``; None for a line Textual must draw."""
        plain = line.plain
        spans = line.spans
        if any(a.start > b.start for a, b in pairwise(spans)):
            spans = sorted(spans, key=lambda s: s.start)
        fast = (
            not line.style
            and len(plain) <= width
            and not _wide(plain)
            and self.text_selection is None
            and all(a.end <= b.start for a, b in pairwise(spans))
            and all(s.start < s.end and not isinstance(s.style, str) for s in spans)
        )
        if not fast:
            return None
        segments = []
        pos = 0
        for span in spans:
            if span.start > pos:  # unstyled text up to this span
                segments.append(Segment(plain[pos : span.start], style_at(None, pos)))
            segments.append(Segment(plain[span.start : span.end], style_at(span.style, span.start)))
            pos = span.end
        if pos < len(plain):
            segments.append(Segment(plain[pos:], style_at(None, pos)))
        return segments

    def _placed_style(self, rich: object, x: int, y: int) -> Style:
        """The rich style of a span (None: no span) at ``x, y``: Textual marks each with
        its offset; kept, as the same spans come back at the same places tick after tick."""
        key = (rich, x, y)
        placed = self._placed.get(key)
        if placed is None:
            if len(self._placed) > PLACED_MAX:
                self._placed.clear()
            base = self.visual_style
            placed = self._placed[key] = self._span_style(rich, base).rich_style_with_offset(x, y)
        return placed

    def _span_style(self, rich: object, base: VisualStyle) -> VisualStyle:
        """What Textual draws a span of this rich style (None: no span) in, on ``base``."""
        style = self._span_styles.get(rich)
        if style is None:
            own = [] if rich is None else [VisualStyle.from_rich_style(rich, self.app.ansi_theme)]  # type: ignore[arg-type]
            style = self._span_styles[rich] = base + VisualStyle.combine([base, *own])
        return style


def _wide(plain: str) -> bool:
    """Whether a line has characters that take other than one cell. The characters the
    monitor draws (box elements, bars, arrows, degrees) are known to take one; only others
    are measured (rich keeps every string it measures: a monitor's lines, new every tick,
    would fill its cache)."""
    if plain.isascii() or _ONE_CELL.issuperset(plain):
        return False
    return cell_len(plain) != len(plain)


# the characters lltui draws besides ASCII and Latin-1 (bars, sparks, arrows, marks): each
# takes one cell (a test asks rich); the monitor's lines are measured only past these
DRAWN_MARKS = "“”•…↑↓≈▁▂▃▄▅▆▇█▉▊▋▌▍▎▏░■▲▶▼●◐★☆✓✔✖✗"


def _one_cell_chars() -> frozenset[str]:
    latin = [chr(c) for c in (*range(0x20, 0x7F), *range(0xA0, 0x100)) if c != 0xAD]
    return frozenset([*latin, *DRAWN_MARKS])


_ONE_CELL = _one_cell_chars()


def _changed_columns(old: Text, new: Text) -> tuple[int, int]:
    """The columns ``[start, end)`` in which two one-line texts of single-width cells
    differ, in characters or in styles."""
    a, b = old.plain, new.plain
    start = _common_prefix(a, b)
    if len(a) == len(b):
        end = len(a) - _common_prefix(a[start:][::-1], b[start:][::-1])
    else:  # what follows a change of length moves: all of it
        end = max(len(a), len(b))
    if old.style != new.style:
        return 0, max(len(a), len(b))
    for span in set(old.spans) ^ set(new.spans):
        if span.end > span.start:
            start = min(start, span.start)
            end = max(end, span.end)
    return start, end


def _common_prefix(a: str, b: str) -> int:
    """How many leading characters two strings share: halving by slices compared in C, not
    a character at a time (a card's line is a hundred characters, compared every tick)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo

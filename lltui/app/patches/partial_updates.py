"""Partial screen updates that write only what changed.

Textual repaints a changed cell by writing its line from the left edge of the widget it is in
to the end of the change (``ChopsUpdate.render_segments`` crops a chop's end, not its start).
A monitor whose numbers sit to the right of bars and names rewrites most of each line every
tick: 4.3 KiB/s to the terminal for 8 GPUs, most of it cells that did not change. This
crops the start as well, as Textual's own ``__rich_console__`` path already does: each
changed span is written from where it begins. Applied once, when the app module loads; left
alone (and said so by :data:`APPLIED`) should Textual's update class change shape.

Building such an update, Textual also renders every line of every widget that meets the box
around all the changed cells: a status line at the top and a number further down have each
widget in between, and the screen behind them all, render its every line (cached strips, but
each passed through the line filters and cut again), to keep only the changed lines. Here each
widget renders only its lines from the first changed one to the last it has, and a widget with
no changed line, or hidden on them by the widgets in front, none (:data:`LINES_APPLIED`).
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

APPLIED = False
ORIGINAL: Any = None  # Textual's own render_segments, kept (the tests compare the two)
LINES_APPLIED = False


def render_segments(self: Any, console: Any) -> str:
    """``ChopsUpdate.render_segments``, each chop cropped to the changed span at both ends."""
    from rich.control import Control
    from textual.strip import Strip

    move_to = Control.move_to
    sequences: list[str] = []
    append = sequences.append
    chops = self.chops
    chop_ends = self.chop_ends
    last_y = self.spans[-1][0]
    for y, x1, x2 in self.spans:
        line = chops[y]
        ends = chop_ends[y]
        for end, (x, strip) in zip(ends, line.items(), strict=False):
            if strip is None or x > x2 or end <= x1:
                continue
            start = max(x, x1)
            stop = min(end, x2)
            if start > x or stop < end:
                cropped: Strip = strip.crop(start - x, stop - x)
            else:
                cropped = strip
            append(move_to(start, y).segment.text)
            append(cropped.render(console))
        if y != last_y:
            append("\n")
    return "".join(sequences)


def render_partial_update(self: Any) -> Any:
    """``Compositor.render_partial_update``, rendering only the lines it keeps."""
    from textual._compositor import ChopsUpdate
    from textual.geometry import Region

    update_regions = self._dirty_regions.copy()
    self._dirty_regions.clear()
    if not update_regions:
        return None
    crop = Region.from_union(update_regions).intersection(self.size.region)
    spans = list(self._regions_to_spans(update_regions))
    chops = render_lines(self, crop, sorted({y for y, _, _ in spans}))
    chop_ends = [cut_set[1:] for cut_set in self.cuts]
    return ChopsUpdate(chops, spans, chop_ends)


def render_lines(compositor: Any, crop: Any, lines: list[int]) -> list[dict[int, Any]]:
    """The chops of ``lines`` (sorted) as ``Compositor._render_chops`` makes them (the other
    lines' chops left empty): each widget meeting ``crop`` renders its rows from the first
    of ``lines`` it has to the last, front to back, the first strip of a cut winning."""
    from textual.dom import NoScreen
    from textual.geometry import Region

    cuts = compositor.cuts
    chops: list[dict[int, Any]] = [dict.fromkeys(cut_set[:-1]) for cut_set in cuts]
    rendered = set(lines)
    overlaps = crop.overlaps
    intersection = Region.intersection
    for widget, (region, clip) in compositor.visible_widgets.items():
        if not overlaps(clip):
            continue
        x, y, width, height = intersection(region, clip)
        if not (width and height):
            continue
        first = bisect_left(lines, y)
        last = bisect_left(lines, y + height)
        # its changed rows where a widget in front has not already given every cell
        # (the containers behind the cards give none)
        wanted = [
            line_y
            for line_y in lines[first:last]
            if any(chops[line_y][cut] is None for cut in cuts[line_y] if x <= cut < x + width)
        ]
        if not wanted:
            continue
        top, bottom = wanted[0], wanted[-1] + 1
        try:
            strips = widget.render_lines(Region(x - region.x, top - region.y, width, bottom - top))
        except NoScreen:  # removed since the last layout, which the next one redraws without it
            continue
        for line_y, strip in zip(range(top, bottom), strips, strict=False):
            if line_y not in rendered:
                continue
            chops_line = chops[line_y]
            final_cuts = [cut for cut in cuts[line_y] if x + width >= cut >= x]
            get = chops_line.get
            for cut, part in zip(
                final_cuts, strip.divide([cut - x for cut in final_cuts[1:]]), strict=False
            ):
                if get(cut) is None:
                    chops_line[cut] = part
    return chops


def apply() -> bool:
    """Crop partial updates at both ends; False (and nothing changed) where Textual's update
    class is not the one this was written for."""
    global APPLIED, ORIGINAL
    if APPLIED:
        return True
    try:
        from textual._compositor import ChopsUpdate
    except ImportError:
        return False
    original = getattr(ChopsUpdate, "render_segments", None)
    init = getattr(ChopsUpdate, "__init__", None)
    names = getattr(getattr(init, "__code__", None), "co_varnames", ())
    if original is None or tuple(names[1:4]) != ("chops", "spans", "chop_ends"):
        return False
    ORIGINAL = original
    setattr(ChopsUpdate, "render_segments", render_segments)  # noqa: B010 (a class's method)
    APPLIED = True
    apply_lines()
    return True


def apply_lines() -> bool:
    """Render only the changed lines in partial updates; False (and nothing changed) where
    Textual's compositor is not the one this was written for."""
    global LINES_APPLIED
    if LINES_APPLIED:
        return True
    try:
        from textual._compositor import Compositor
    except ImportError:
        return False
    needed = "render_partial_update _regions_to_spans _render_chops cuts visible_widgets"
    if not all(hasattr(Compositor, name) for name in needed.split()):
        return False
    setattr(Compositor, "render_partial_update", render_partial_update)  # noqa: B010
    LINES_APPLIED = True
    return True

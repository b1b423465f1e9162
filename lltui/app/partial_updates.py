"""Partial screen updates that write only what changed.

Textual repaints a changed cell by writing its line from the left edge of the widget it is in
to the end of the change (``ChopsUpdate.render_segments`` crops a chop's end, not its start).
A monitor whose numbers sit to the right of bars and names rewrites most of each line every
tick: 4.3 KiB/s to the terminal for 8 GPUs, most of it cells that did not change. This
crops the start as well, as Textual's own ``__rich_console__`` path already does: each
changed span is written from where it begins. Applied once, when the app module loads; left
alone (and said so by :data:`APPLIED`) should Textual's update class change shape.
"""

from __future__ import annotations

from typing import Any

APPLIED = False
ORIGINAL: Any = None  # Textual's own render_segments, kept (the tests compare the two)


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
    return True

"""Partial screen updates write only the changed cells (lltui.app.patches.partial_updates), and the
screen they leave is the one Textual's own update leaves."""

from __future__ import annotations

import re

from rich.console import Console
from rich.segment import Segment
from textual._compositor import ChopsUpdate, Compositor
from textual.strip import Strip

from lltui.app.patches import partial_updates
from lltui.app.widgets.gpu_card import GpuCard
from lltui.app.widgets.text_lines import TextLines

MOVE = re.compile(r"\x1b\[(\d+);(\d+)H")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def apply(screen: list[list[str]], data: str) -> int:
    """Play ``data`` (cursor moves, text, colours) on a screen of characters; the characters
    written."""
    y = x = written = 0
    pos = 0
    data = SGR.sub("", data)
    while pos < len(data):
        m = MOVE.match(data, pos)
        if m:
            y, x = int(m.group(1)) - 1, int(m.group(2)) - 1
            pos = m.end()
            continue
        ch = data[pos]
        pos += 1
        if ch == "\n":
            continue
        screen[y][x] = ch
        x += 1
        written += 1
    return written


def update() -> ChopsUpdate:
    """Two lines, each of two widgets' chops (a border and a card), a few cells changed."""
    border = Strip([Segment("|")], 1)
    card = Strip([Segment("GPU0 "), Segment("#####", None), Segment("  61 W  40 C ")], 23)
    card2 = Strip([Segment("SM "), Segment("1415"), Segment(" MHz" + " " * 12)], 23)
    chops = [{0: border, 1: card}, {0: border, 1: card2}]
    chop_ends = [[1, 24], [1, 24]]
    spans = [(0, 13, 15), (1, 4, 8)]  # "61" changed; "1415" changed
    return ChopsUpdate(chops, spans, chop_ends)


def test_only_the_changed_cells_are_written_and_the_screen_is_the_same():
    console = Console(width=24, color_system="truecolor", force_terminal=True)
    textuals = partial_updates.ORIGINAL or ChopsUpdate.render_segments
    original = textuals(update(), console)
    cropped = partial_updates.render_segments(update(), console)
    before = [list("?" * 24) for _ in range(2)]
    screen_a = [row[:] for row in before]
    screen_b = [row[:] for row in before]
    wrote_a = apply(screen_a, original)
    wrote_b = apply(screen_b, cropped)
    assert wrote_b == 2 + 4  # the two changed spans, nothing else
    assert wrote_a > 20  # Textual's own writes from the widget's left edge
    for a, b, old in zip(screen_a, screen_b, before, strict=True):
        for x, (ca, cb) in enumerate(zip(a, b, strict=True)):
            # every cell the crop wrote matches; every other is as it was
            assert cb == ca or cb == old[x]
    assert "".join(screen_b[0][13:15]) == "61" and "".join(screen_b[1][4:8]) == "1415"


def test_applied_once_by_the_app():
    from support.app_helpers import sim_app

    sim_app()
    assert partial_updates.APPLIED
    assert ChopsUpdate.render_segments is partial_updates.render_segments
    assert partial_updates.LINES_APPLIED
    assert Compositor.render_partial_update is partial_updates.render_partial_update
    assert partial_updates.apply() is True  # again: nothing more


async def test_partial_updates_render_only_the_changed_lines():
    """The status line at the top and the footer at the bottom changed: each widget renders
    only its rows from the first changed line to the last (the cards between, none), and
    the chops of those lines are Textual's own."""
    from support.app_helpers import sim_app
    from textual.geometry import Region
    from textual.widget import Widget

    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(3)
        await pilot.pause()
        assert partial_updates.LINES_APPLIED
        compositor = app.screen._compositor
        lines = [0, 39]  # the status line and the footer
        crop = Region(0, 0, 120, 40)
        rendered: list[tuple[str, int]] = []
        real = Widget.render_lines

        def counting(self: Widget, region: Region) -> list[Strip]:
            rendered.append((type(self).__name__, region.height))
            return real(self, region)

        real_lines = TextLines.render_lines

        def counting_lines(self: TextLines, region: Region) -> list[Strip]:
            rendered.append((type(self).__name__, region.height))
            return real_lines(self, region)

        Widget.render_lines = counting  # type: ignore[method-assign]
        TextLines.render_lines = counting_lines  # type: ignore[method-assign]
        try:
            ours = partial_updates.render_lines(compositor, crop, lines)
            ours_rendered = list(rendered)
            rendered.clear()
            textuals = compositor._render_chops(crop, set(lines).__contains__)
            textuals_rendered = list(rendered)
            # a line of a card: the containers behind it give none of its cells
            card = app.screen.query(GpuCard).first()
            card_y = card.region.y
            rendered.clear()
            ours_card = partial_updates.render_lines(compositor, crop, [card_y])
            ours_card_rendered = {name for name, _h in rendered}
            textuals_card = compositor._render_chops(crop, {card_y}.__contains__)
        finally:
            Widget.render_lines = real  # type: ignore[method-assign]
            TextLines.render_lines = real_lines  # type: ignore[method-assign]
        for y in lines:
            assert ours[y] == textuals[y]
            assert any(strip is not None for strip in ours[y].values())
        assert "GpuCard" in {name for name, _h in textuals_rendered}
        assert "GpuCard" not in {name for name, _h in ours_rendered}
        assert sum(h for _n, h in ours_rendered) < sum(h for _n, h in textuals_rendered)
        assert ours_card[card_y] == textuals_card[card_y]
        assert ours_card_rendered == {"GpuCard"}


async def test_a_widget_removed_before_the_next_layout_is_passed_over():
    """A widget being removed (its parent link cut) can still be in the compositor's map
    until the next layout: a partial update passes over it rather than ask it to draw with
    no screen (NoScreen ended a fleet test on a loaded machine, as a host's cards went)."""
    from support.app_helpers import sim_app
    from textual.geometry import Region

    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(3)
        await pilot.pause()
        compositor = app.screen._compositor
        card = app.screen.query(GpuCard).first()
        y, parent = card.region.y, card._parent
        assert card in compositor.visible_widgets
        card._detach()  # what a removal does to it before the layout drops it
        try:
            chops = partial_updates.render_lines(compositor, Region(0, 0, 120, 40), [y])
        finally:
            card._attach(parent)
        assert any(strip is not None for strip in chops[y].values())  # the rest still drew

"""TextLines, the line-by-line widget of the GPU cards and the rig summary: it draws what a
nowrap Static draws, and a change repaints only the columns that changed."""

from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import Static

from lltui.app.widgets.text_lines import TextLines, _changed_columns

CSS = """
Static, TextLines { height: auto; padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
.-selected { background: $boost; }
"""


def _card(power: int, temp: int, *, name: str = "GPU0 RTX 3090") -> Text:
    text = Text(no_wrap=True)
    text.append(name, Style(bold=True, reverse=True))
    text.append(" ██▌", Style(color="#5fafff"))
    text.append("       ", Style(bgcolor="#3a3a3a"))
    text.append(f" {power:>4}/350W ")
    text.append(f"{temp:>3}°C", Style(color="#87d787"))
    text.append("\n")
    text.append("SM 1400 MHz", Style(color="#9e9e9e"))
    text.append("\n")
    return text


class Pair(App[None]):
    CSS = CSS

    def compose(self) -> ComposeResult:
        yield Static(id="static")
        yield TextLines(id="lines")

    def show(self, text: Text) -> None:
        self.query_one(Static).update(text)
        self.query_one(TextLines).update(text)


def _cells(widget: Static | TextLines) -> list[list[tuple[str, object]]]:
    """Each line as (character, rich style without Textual's offsets)."""
    strips = widget.render_lines(Region(0, 0, *widget.size))
    return [[(char, _plain(seg.style)) for seg in strip for char in seg.text] for strip in strips]


def _plain(style: Style | None) -> object:
    if style is None:
        return None
    return (style.color, style.bgcolor, style.bold, style.reverse, style.dim, style.italic)


async def test_it_draws_what_a_static_draws_and_after_changes_too():
    app = Pair()
    async with app.run_test(size=(60, 8)) as pilot:
        app.show(_card(62, 41))
        await pilot.pause()
        static, lines = app.query_one(Static), app.query_one(TextLines)
        assert lines.size == static.size
        assert _cells(lines) == _cells(static)
        app.show(_card(1063, 40))  # longer: what follows it moves
        await pilot.pause()
        assert _cells(lines) == _cells(static)
        lines.add_class("-selected")
        static.add_class("-selected")
        await pilot.pause()
        assert _cells(lines) == _cells(static)
        # too long for the width: cut as Static cuts it
        app.show(_card(63, 41, name="GPU0 " + "X" * 80))
        await pilot.pause()
        assert _cells(lines) == _cells(static)


async def test_a_change_repaints_only_its_columns():
    app = Pair()
    async with app.run_test(size=(60, 8)) as pilot:
        app.show(_card(62, 41))
        await pilot.pause()
        lines = app.query_one(TextLines)
        lines.update(_card(63, 41))
        regions = set(lines._repaint_regions)
        # the third digit of the power, on the first line, inside the padding
        assert regions == {Region(1 + 28, 0, 1, 1)}
        await pilot.pause()
        lines.update(_card(63, 41))  # the same text: nothing
        assert not lines._repaint_regions


def test_changed_columns_cover_characters_and_styles():
    a, b = Text("power 62 W"), Text("power 63 W")
    assert _changed_columns(a, b) == (7, 8)
    assert _changed_columns(Text("62 W"), Text("162 W")) == (0, 5)  # moved: all after
    red, green = Text(), Text()
    red.append("hot", Style(color="red"))
    green.append("hot", Style(color="green"))
    assert _changed_columns(red, green) == (0, 3)


FRAMES_CSS = """
TextLines { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }
.card { padding: 0 1; border-left: wide $panel; }
.compact { padding: 0 0 0 1; border-left: wide $accent; }
.compact.-selected { background: $boost; }
.both { padding: 0 2; border-left: tall $warning; border-right: vkey $error; }
.faded { opacity: 60%; border-left: wide $panel; }
.boxed { border: round $accent; }
.tinted { tint: $error 20%; }
"""


class Framed(App[None]):
    CSS = FRAMES_CSS

    def compose(self) -> ComposeResult:
        yield TextLines(id="lines")


def _textual_lines(widget: TextLines) -> list[list[tuple[str, Style | None]]]:
    """What Textual's own path (its styles cache) draws for the widget."""
    from textual.widget import Widget

    widget._styles_cache.clear()
    strips = Widget.render_lines(widget, Region(0, 0, *widget.outer_size))
    return [[(seg.text, seg.style) for seg in strip] for strip in strips]


def _own_lines(widget: TextLines, crop: Region | None = None) -> list[list[tuple[str, object]]]:
    strips = widget.render_lines(crop or Region(0, 0, *widget.outer_size))
    return [[(seg.text, seg.style) for seg in strip] for strip in strips]


async def test_a_framed_box_draws_exactly_what_textuals_styles_draw():
    """Borders and padding at the sides are put around each line from a frame; every other
    box (a top border, opacity, tint) goes through Textual. Either way: Textual's segments."""
    app = Framed()
    async with app.run_test(size=(60, 8)) as pilot:
        lines = app.query_one(TextLines)
        for classes in ("card", "compact", "compact -selected", "both", "faded", "boxed", "tinted"):
            lines.set_classes(classes)
            for power in (62, 1063):  # a line that grows, then a short one padded
                lines.update(_card(power, 41))
                await pilot.pause()
                assert _own_lines(lines) == _textual_lines(lines), classes
            # the content size worked out without the screen's map is Textual's
            assert lines._content_size() == lines.size, classes
            framed = lines._frame is not None
            assert framed == (classes.split()[0] in ("card", "compact", "both")), classes
            # a framed line is filtered as it is built (Textual's ANSI filter maps styles)
            assert bool(lines._placed_filtered) == framed, classes
        # a crop (a part of the line scrolled off) is cut as Textual cuts it
        lines.set_classes("card")
        await pilot.pause()
        crop = Region(3, 1, 20, 1)
        from textual.widget import Widget

        lines._styles_cache.clear()
        want = [[(s.text, s.style) for s in strip] for strip in Widget.render_lines(lines, crop)]
        assert _own_lines(lines, crop) == want


async def test_a_frame_follows_a_theme_change():
    app = Framed()
    async with app.run_test(size=(60, 8)) as pilot:
        lines = app.query_one(TextLines)
        lines.set_classes("compact -selected")
        lines.update(_card(62, 41))
        await pilot.pause()
        before = _own_lines(lines)
        app.theme = "textual-light"
        await pilot.pause()
        after = _own_lines(lines)
        assert after == _textual_lines(lines)
        assert after != before


def test_common_prefix_agrees_with_a_character_walk():
    import random

    from lltui.app.widgets.text_lines import _common_prefix

    rng = random.Random(7)
    for _ in range(3000):
        a = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        b = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        want = 0
        while want < min(len(a), len(b)) and a[want] == b[want]:
            want += 1
        assert _common_prefix(a, b) == want, (a, b)


def test_a_built_line_equals_the_appended_text():
    from lltui.app.widgets.text_lines import TextBuilder

    pieces = [
        ("GPU0 ", Style(bold=True)),
        ("RTX\x073090 ", None),  # a control code Text drops: the spans after it move
        ("", Style(color="red")),
        ("██▌", Style(color="#5fafff")),
        (" 62/350W", Style()),  # a null style: no span, as Text.append
        (" 41°C", Style(color="#87d787")),
    ]
    for start in ("", "  "):
        want = Text(start, no_wrap=True)
        built = TextBuilder(start)
        for piece, style in pieces:
            want.append(piece, style)
            built.append(piece, style)
        got = built.build()
        assert got == want and got.spans == want.spans and len(built) >= len(got)


def test_the_characters_taken_for_one_cell_take_one():
    """Lines of these are not measured (rich would keep each in its cache): each must be
    one cell as rich measures it, and anything else is measured."""
    from rich.cells import cell_len

    from lltui.app.widgets.text_lines import _ONE_CELL, _wide

    assert all(cell_len(c) == 1 for c in _ONE_CELL)
    assert not _wide("GPU0 ██▌ 41°C ↓3.2 MiB/s ↑1 ● live …")
    assert _wide("GPU0 日本")  # two cells each
    assert _wide("Tesla V100 e\u0301")  # a combining accent: none


async def test_a_text_selection_is_drawn_and_cleared():
    """Selecting text with the mouse highlights it in the lines (they are kept per line: a
    selection drops them) and clearing it draws them as before."""
    from textual.geometry import Offset
    from textual.selection import Selection

    app = Pair()
    async with app.run_test(size=(60, 8)) as pilot:
        app.show(_card(62, 41))
        await pilot.pause()
        lines, static = app.query_one(TextLines), app.query_one(Static)
        plain = _cells(lines)
        selection = Selection(Offset(0, 0), Offset(4, 1))
        app.screen.selections = {lines: selection, static: selection}
        await pilot.pause()
        selected = _cells(lines)
        assert selected != plain
        assert selected == _cells(static)  # as Textual draws it
        app.screen.selections = {}
        await pilot.pause()
        assert _cells(lines) == plain

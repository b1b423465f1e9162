"""TextLines, the line-by-line widget of the GPU cards and the rig summary: it draws what a
nowrap Static draws, and a change repaints only the columns that changed."""

from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.widgets import Static

from lltui.app.widgets.gpu_card import TextLines, _changed_columns

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

"""The footer is one widget that draws every key: what it shows, and the mouse on it."""

from support.app_helpers import feed, sim_app
from textual import events

from lltui.app.screens.help import HelpScreen
from lltui.app.widgets.footer import LltuiFooter


def footer_line(app) -> str:
    return app.screen.query_one(LltuiFooter).render().plain


async def test_one_widget_draws_the_apps_keys_then_the_views_and_the_palette_on_the_right():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(140, 30)) as pilot:
        feed(app, 1)
        await pilot.pause()
        footer = app.screen.query_one(LltuiFooter)
        assert not footer.children  # no widget per key
        line = footer_line(app)
        assert line.startswith(" ^q Quit  v View ")
        assert line.index("? Help") < line.index("/ Filter") < line.index("K Signal")
        assert line.endswith("▏^p palette ") and len(line) == 140


async def test_a_narrow_footer_shows_whole_keys_only():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 1)
        await pilot.pause()
        line = footer_line(app)
        assert len(line) == 80 and line.endswith("▏^p palette ")
        keys = line[: line.index("▏")].rstrip()
        assert keys.endswith(" s Sort")  # not a "w" without its label
        assert "? Help" in keys


async def test_a_click_presses_the_key_and_a_hover_shows_its_tooltip():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(140, 30)) as pilot:
        feed(app, 1)
        await pilot.pause()
        line = footer_line(app)
        footer = app.screen.query_one(LltuiFooter)
        help_at = line.index("? Help")

        def background(x: int) -> object:
            return footer.render().get_style_at_offset(app.console, x).bgcolor

        plain = background(help_at)
        await pilot.hover(LltuiFooter, offset=(help_at + 3, 0))
        assert background(help_at) != plain and background(help_at + 5) != plain
        assert background(0) == plain
        await pilot.hover(LltuiFooter, offset=(len(line) - 4, 0))
        assert footer.tooltip  # the palette's
        assert background(help_at) == plain
        await pilot.click(LltuiFooter, offset=(line.index("? Help") + 1, 0))
        assert isinstance(app.screen, HelpScreen)


async def test_keys_under_the_palette_are_scrolled_to_with_the_wheel():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 1)
        await pilot.pause()
        before = footer_line(app)
        assert "K Signal" not in before and len(before) == 80
        footer = app.screen.query_one(LltuiFooter)
        for _ in range(20):  # as the terminal sends the wheel over the footer
            footer.post_message(events.MouseScrollDown(footer, 10, 0, 0, 1, 0, False, False, False))
        await pilot.pause()
        after = footer_line(app)
        assert "K Signal" in after and after.endswith("▏^p palette ")


async def test_the_footer_follows_what_enter_does_once_the_table_has_processes():
    # the table is empty when the monitor is first drawn, and enter opens the GPU's detail;
    # once processes are listed enter opens the selected one's history: the footer said
    # "⏎ Detail" still
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.pause()
        assert "⏎ Detail" in footer_line(app)
        feed(app, 3)
        await pilot.pause()
        assert app.screen.query_one("ProcessTable").row_count
        line = footer_line(app)
        assert "⏎ Detail" not in line and "d Detail" in line
        await pilot.press("enter")
        assert type(app.screen).__name__ == "ProcessDetailScreen"

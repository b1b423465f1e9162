"""Every view by keyboard alone: Escape leaves a text field, the views switch from any focus,
key bursts as a slow SSH link delivers them raise nothing, the key help and the footer."""

import pytest
from support.app_helpers import sim_app, wait_for
from textual.widgets import Input

from lltui.app.screens.help import HelpScreen
from lltui.app.widgets.footer import LltuiFooter, footer_bindings

VIEW_KEYS = {"monitor": "1", "topology": "2", "nccl": "3", "fit": "4", "launch": "5"}
FORM_VIEWS = ["fit", "launch"]


def inputs_of(app) -> list[Input]:
    return [i for i in app.screen.query(Input) if i.display]


@pytest.mark.parametrize("view", FORM_VIEWS)
async def test_escape_leaves_every_input_and_digits_work_again(view):
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press(VIEW_KEYS[view])
        await wait_for(lambda: app.current_mode == view and inputs_of(app))
        fields = inputs_of(app)
        assert len(fields) >= 3
        for field in fields:
            field.focus()
            await pilot.pause()
            assert app.focused is field
            await pilot.press("escape")
            assert not isinstance(app.focused, Input), field.id
            assert app.current_mode == view  # Escape does not leave the view
        await pilot.press("1")  # with no field focused, a digit switches the view
        await wait_for(lambda: app.current_mode == "monitor")


@pytest.mark.parametrize("view", FORM_VIEWS)
@pytest.mark.parametrize("key", ["f2", "f3", "f5"])
async def test_views_switch_from_inside_a_text_field(view, key):
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press(VIEW_KEYS[view])
        await wait_for(lambda: app.current_mode == view and inputs_of(app))
        field = inputs_of(app)[0]
        field.focus()
        before = field.value
        await pilot.press("2")  # a digit in a field is typed, not a view key
        assert app.current_mode == view and field.value == before + "2"
        await pilot.press(key)
        target = list(VIEW_KEYS)[int(key[-1]) - 1]
        await wait_for(lambda: app.current_mode == target)


async def test_typed_keys_in_a_field_do_not_change_sampling():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await wait_for(lambda: app.current_mode == "fit" and inputs_of(app))
        app.screen.query_one("#fit-ctx", Input).focus()
        await pilot.press("minus", "plus", "equals_sign", "space", "p", "q", "v")
        assert app.model.interval == 1.0 and not app.model.paused
        assert app.is_running and app.current_mode == "fit"
        assert app.screen.query_one("#fit-ctx", Input).value == "-+= pqv"


async def test_plus_samples_faster_and_minus_slower():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("plus")
        assert app.model.interval == 0.5  # more often: a shorter interval
        await pilot.press("equals_sign")  # + without shift, on most keyboards
        assert app.model.interval == 0.25
        await pilot.press("minus", "minus", "minus")
        assert app.model.interval == 2.0


@pytest.mark.parametrize("view", FORM_VIEWS)
async def test_f1_opens_the_help_even_from_inside_a_text_field(view):
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(VIEW_KEYS[view])
        await wait_for(lambda: app.current_mode == view and inputs_of(app))
        inputs_of(app)[0].focus()
        await pilot.press("f1")
        await wait_for(lambda: isinstance(app.screen, HelpScreen))
        assert app.current_mode == view  # help for the view it was in, not the monitor
        # the keys the field would type are not offered, as the footer leaves them out
        said = [what for _title, rows in app.screen.sections for _keys, what in rows]
        assert "Faster" not in said and "Slower" not in said
        await pilot.press("f1")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen))


BURST = (
    "1", "2", "3", "4", "5", "enter", "escape", "question_mark", "escape", "tab", "tab",
    "a", "s", "d", "1", "enter", "question_mark", "3", "tab", "escape", "v", "g", "w",
    "f4", "tab", "9", "escape", "f5", "tab", "tab", "x", "escape", "question_mark", "2",
    "shift+tab", "enter", "escape", "f1", "enter", "]", "enter", "escape", "r", "s",
    "6", "tab", "enter", "escape", "f6", "question_mark", "f4", "tab", "l", "escape",
)  # fmt: skip


@pytest.mark.parametrize("view", list(VIEW_KEYS))
async def test_key_bursts_in_every_view_raise_nothing(view):
    # a slow SSH link delivers what was typed in one write: the keys arrive without a frame
    # between them, while samples keep coming
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press(VIEW_KEYS[view])
        await wait_for(lambda: app.current_mode == view)
        for start in range(0, len(BURST), 11):
            app.poll_sync(1)
            await pilot.press(*BURST[start : start + 11])
        await pilot.pause()
        app.render_model()
        await pilot.pause()
        assert app.is_running
        assert app._exception is None
    assert app.return_value is None and app._exception is None


async def test_help_lists_the_apps_keys_first_and_fits_80x24():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_for(lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        box = app.screen.query_one("#help-box")
        assert box.region.width <= 80 and box.region.height <= 24
        sections = app.screen.sections
        assert sections[0][0] == "lltui"
        assert ("1 f7", "Monitor") in sections[0][1][:4]
        await pilot.press("question_mark")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen))
        await pilot.press("question_mark")
        await wait_for(lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("3")  # a view key closes the help and switches
        await wait_for(lambda: app.current_mode == "nccl")
        assert not isinstance(app.screen, HelpScreen)


async def test_footer_shows_the_apps_keys_first_and_none_a_field_would_type():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(100, 24)) as pilot:
        await pilot.press("4")
        await wait_for(lambda: app.current_mode == "fit" and inputs_of(app))
        screen = app.screen
        shown = footer_bindings(screen.active_bindings.values(), app, typing=False, screen=screen)
        assert shown[0][0].description == "Quit"
        app.screen.query_one("#fit-ctx", Input).focus()
        await pilot.pause()
        typing = footer_bindings(screen.active_bindings.values(), app, typing=True, screen=screen)
        keys = {binding.key for binding, _e, _t in typing}
        assert not keys & {"minus", "plus", "space", "v", "question_mark"}
        assert app.screen.query_one(LltuiFooter)


async def test_the_palette_offers_every_view_and_the_keys():
    from lltui.app.palette import LltuiCommands

    app = sim_app()
    async with app.run_test(size=(100, 30)) as pilot:
        commands = {name: cb for name, _h, cb in LltuiCommands(app.screen)._commands()}
        for view in VIEW_KEYS:
            assert f"View: {view}" in commands
        commands["View: launch"]()
        await wait_for(lambda: app.current_mode == "launch")
        commands["Keys"]()
        await wait_for(lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen))


async def test_every_key_the_palette_names_for_a_view_opens_it():
    from lltui.app.palette import LltuiCommands

    app = sim_app()
    async with app.run_test(size=(100, 30)) as pilot:
        said = {name: text for name, text, _cb in LltuiCommands(app.screen)._commands()}
        for view in VIEW_KEYS:
            keys = said[f"View: {view}"].split("(key", 1)[1].lstrip("s ").rstrip(")")
            for key in keys.split(", "):
                app.switch_mode("topology" if view == "monitor" else "monitor")
                await pilot.pause()
                await pilot.press(key.lower())
                await wait_for(lambda v=view: app.current_mode == v and app.screen.is_mounted)


@pytest.mark.parametrize("view", FORM_VIEWS)
async def test_the_monitor_has_a_key_a_text_field_does_not_type(view):
    """The form views focus a field, which types the monitor's digit; F1 is help: its key
    there is F7, which the help lists."""
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press(VIEW_KEYS[view])
        await wait_for(lambda: app.current_mode == view and isinstance(app.focused, Input))
        await pilot.press("f1")
        await wait_for(lambda: isinstance(app.screen, HelpScreen))
        assert ("f7", "Monitor") in app.screen.sections[0][1]  # a field types the digit
        await pilot.press("escape")
        await wait_for(lambda: not isinstance(app.screen, HelpScreen))
        field = app.focused
        assert isinstance(field, Input)
        before = field.value
        await pilot.press("f7")
        await wait_for(lambda: app.current_mode == "monitor")
        assert field.value == before

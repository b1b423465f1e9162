"""The monitor driven by Pilot: keys, pause, interval, sort, detail, stale and failing sources."""

import asyncio

import pytest
from support.app_helpers import HangingSource, RaisingSource, StepClock, feed, sim_app, wait_for
from textual.widgets import Input

from lltui.app.screens.gpu_detail import GpuDetailScreen
from lltui.app.widgets.gpu_card import GpuCard
from lltui.app.widgets.process_table import ProcessTable


def text_of(app, selector: str) -> str:
    return str(app.screen.query_one(selector).render())


async def test_banner_names_and_cards_on_a_simulated_rig():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 20)
        await pilot.pause()
        assert "SIMULATED" in text_of(app, "#banner")
        cards = list(app.screen.query(GpuCard))
        assert len(cards) == 2
        assert all("T4" in str(c.render()) for c in cards)  # compact lines at 80x24
        assert "balance" in text_of(app, "#rig")


async def test_real_poller_updates_the_screen():
    app = sim_app("4xl4", interval=0.25, start_polling=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(lambda: app.samples_applied >= 3)
        await pilot.pause()
        assert len(app.screen.query(GpuCard)) == 4
        seqs = [app.model.latest.seq]
        await wait_for(lambda: app.model.latest.seq > seqs[0])


async def test_pause_and_resume_stop_and_restart_sampling():
    app = sim_app("kaggle-2xt4", interval=0.25, start_polling=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: app.samples_applied >= 1)
        await pilot.press("space")
        assert app.model.paused and app.poller.paused
        assert "PAUSED" in text_of(app, "#status")
        # a poll already running finishes, then the thread parks instead of polling
        await wait_for(lambda: app.poller.parks >= 1)
        count, polls, parks = app.samples_applied, app.poller.polls, app.poller.parks
        app.poller.set_interval(0.25)  # wakes the thread: paused, it parks again unpolled
        await wait_for(lambda: app.poller.parks > parks)
        assert app.poller.polls == polls and app.samples_applied == count
        await pilot.press("space")
        assert not app.model.paused
        await wait_for(lambda: app.samples_applied > count)


async def test_interval_keys_step_through_the_allowed_intervals():
    app = sim_app(interval=1.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("minus")  # less often
        assert app.model.interval == 2.0 and app.poller.interval == 2.0
        await pilot.press("plus", "plus", "plus", "plus", "plus")
        assert app.model.interval == 0.25  # never below the floor
        assert "0.25s" in text_of(app, "#status")


async def test_sort_key_orders_the_process_table():
    app = sim_app("2x3090-nvlink")  # llama-server on both GPUs, Xorg on GPU0
    async with app.run_test(size=(100, 30)) as pilot:
        feed(app, 20)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        assert app.monitor_prefs.sort_key == "gpu_mem"
        # llama-server holds far more GPU memory than Xorg: first by GPU memory
        assert table.pids == [41234, 1873]
        await pilot.press("s", "s", "s", "s")  # sm, cpu, rss, pid
        assert app.monitor_prefs.sort_key == "pid"
        assert table.pids == sorted(table.pids, reverse=True)
        await pilot.press("r")
        assert table.pids == sorted(table.pids)


async def test_process_rows_update_in_place_by_key():
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(100, 30)) as pilot:
        feed(app, 20)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        table.move_cursor(row=1)
        await pilot.pause()
        assert table.cursor_row == 1
        keys_before = list(table.rows)
        feed(app, 3)
        await pilot.pause()
        assert list(table.rows) == keys_before
        assert table.cursor_row == 1  # the table was not cleared


async def test_select_gpu_and_open_detail():
    app = sim_app("4xl4")
    async with app.run_test(size=(120, 40)) as pilot:
        feed(app, 20)
        await pilot.pause()
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert app.monitor_prefs.selected == 2
        assert app.screen.query(GpuCard)[2].has_class("-selected")
        await pilot.press("d")  # enter on the process table is a process's history
        assert isinstance(app.screen, GpuDetailScreen)
        detail = str(app.screen.query_one("#detail").render())
        assert "GPU2" in detail and "power" in detail and "min" in detail
        feed(app, 2)  # the detail follows the live model
        await pilot.pause()
        await pilot.press("escape")
        assert not isinstance(app.screen, GpuDetailScreen)


async def test_window_and_graph_toggles():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 20)
        await pilot.pause()
        first = str(app.screen.query(GpuCard)[0].render())
        assert "pwr" not in first  # no room for sparklines at 80x24
        await pilot.press("g")
        await pilot.pause()
        assert "pwr" in str(app.screen.query(GpuCard)[0].render())
        await pilot.press("w")
        assert app.monitor_prefs.window_s == 300.0
        # 19 s of samples in the 5 minute window, in the short form 80 columns leave room for
        assert "19s/5m" in text_of(app, "#status")


async def test_graphs_in_compact_lines_toggle_what_is_shown_or_say_why_not():
    """``g`` in the compact layout: sparklines shown go at the first press; where 16
    lines leave no room for them (80x24), a notification says so."""
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(160, 50)) as pilot:
        feed(app, 3)
        await pilot.press("l")  # auto -> compact
        await pilot.pause()
        assert "util " in str(app.screen.query(GpuCard)[0].render()).splitlines()[2]
        await pilot.press("g")
        await pilot.pause()
        assert len(str(app.screen.query(GpuCard)[0].render()).splitlines()) == 2
        await pilot.press("g")
        await pilot.pause()
        assert len(str(app.screen.query(GpuCard)[0].render()).splitlines()) > 2
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 3)
        await pilot.press("l")
        await pilot.pause()
        assert app.monitor_prefs.layout_mode == "compact"
        await pilot.press("g")
        await pilot.pause()
        said = [n.message for n in app._notifications]
        assert any("no room for graphs under 16 compact lines" in m for m in said)


async def test_hanging_source_keeps_ui_responsive_and_marks_data_stale():
    clock = StepClock(1000.0, step=0.0)
    source = HangingSource()
    app = sim_app(source=source, clock=clock, interval=0.25, start_polling=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: app.samples_applied >= 1)
        await wait_for(source.hanging.is_set)
        clock.advance(10.0)
        app._refresh_status()
        await pilot.pause()
        assert "STALE" in text_of(app, "#status")
        assert app.screen.query(GpuCard)[0].has_class("-stale")
        await pilot.press("w")  # keys still work while the poll hangs
        assert app.monitor_prefs.window_s == 300.0
        source.release.set()
        await wait_for(lambda: app.samples_applied >= 2)
        app._refresh_status()
        await pilot.pause()
        assert "STALE" not in text_of(app, "#status")


async def test_raising_source_shows_the_error_and_keeps_running():
    app = sim_app(source=RaisingSource(), interval=0.25, start_polling=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: app.model.error is not None)
        await pilot.pause()
        status = text_of(app, "#status")
        assert "source error" in status and "Connection refused" in status
        await pilot.press("space")  # still alive
        assert app.model.paused
        assert app.is_running


async def test_lost_gpu_is_shown_as_lost_while_others_update():
    from dataclasses import replace

    app = sim_app("4xl4")
    async with app.run_test(size=(100, 40)) as pilot:
        samples = feed(app, 20)
        last = samples[-1]
        gpus = list(last.gpus)
        gpus[1] = replace(gpus[1], lost=True, error="GPU is lost", processes=())
        app.ingest(replace(last, seq=last.seq + 1, gpus=tuple(gpus)))
        await pilot.pause()
        cards = app.screen.query(GpuCard)
        assert cards[1].has_class("-lost") and "LOST" in str(cards[1].render())
        assert "LOST" not in str(cards[0].render())
        assert "1 lost" in text_of(app, "#rig")


async def test_out_of_order_samples_are_dropped():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)):
        samples = feed(app, 3)
        app.ingest(samples[0])
        assert app.model.latest is samples[-1]
        assert app.model.dropped == 1


async def test_quit_on_q_and_ctrl_q():
    for key in ("q", "ctrl+q"):
        app = sim_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press(key)
            await pilot.pause()
        assert app.return_code == 0  # set only by quitting; a key that did nothing leaves None


async def test_keymap_from_config_remaps_a_binding():
    from lltui.app.app import create_app
    from lltui.config import Settings
    from lltui.sources.gpu.sim import SimSource

    settings = Settings(interval=1.0, source="sim:kaggle-2xt4", keymap={"pause": "x"})
    app = create_app(settings, source=SimSource(), start_polling=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("x")
        assert app.model.paused


async def test_a_keymap_naming_no_binding_or_one_key_twice_is_said():
    """A typo in a [keymap] id, or one key given to two bindings, was silently ignored: the
    key did something else, or nothing, and nothing said why."""
    from lltui.app.app import create_app
    from lltui.config import Settings
    from lltui.sources.gpu.sim import SimSource

    keymap = {"pasue": "x", "sort": "y", "quit-q": "z", "layout": "z"}
    settings = Settings(interval=1.0, source="sim:kaggle-2xt4", keymap=keymap)
    app = create_app(settings, source=SimSource(), start_polling=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        said = "\n".join(n.message for n in app._notifications)
        assert "'pasue' is no binding id; it was ignored (did you mean 'pause'?)" in said
        assert "z is given to layout and quit-q, which apply together" in said
        assert "sort" not in said  # a remap that is fine is not mentioned


def test_ids_of_different_views_may_share_a_key_as_lltuis_own_do():
    """One new key for each view's window (or previous GPU) was said to clash at every start."""
    from lltui.app.keys import binding_owners, keymap_problems

    owners = binding_owners()
    same = {"window": "W", "detail-window": "W", "process-window": "W"}
    assert keymap_problems(same | {"gpu-prev": "h", "detail-prev": "h"}, owners) == []
    said = keymap_problems({"quit-q": "z", "pause": "z", "view-next": "z"}, owners)
    assert said == [
        "[keymap] z is given to pause, quit-q and view-next, which apply together: "
        "only one of them works"
    ]


async def test_command_palette_lists_lltui_actions():
    from lltui.app.palette import LltuiCommands

    app = sim_app()
    async with app.run_test(size=(100, 30)):
        provider = LltuiCommands(app.screen)
        names = [name for name, _help, _cb in provider._commands()]
        assert "Pause sampling" in names
        assert any(n.startswith("Sort processes by") for n in names)
        assert "View: monitor" in names


async def test_v_cycles_through_the_views():
    app = sim_app()
    async with app.run_test(size=(100, 30)) as pilot:
        seen = [app.current_mode]
        for _ in range(len(app.MODES)):
            if isinstance(app.focused, Input):  # a form's field takes typing: escape leaves it
                await pilot.press("escape")
            await pilot.press("v")
            seen.append(app.current_mode)
        assert seen[0] == seen[-1] == "monitor"
        assert set(seen) == set(app.MODES)


async def test_clicking_a_card_selects_it_and_a_second_click_opens_its_detail():
    app = sim_app("4xl4")
    async with app.run_test(size=(120, 50)) as pilot:
        feed(app, 5)
        await pilot.pause()
        card = app.screen.query(GpuCard)[3]
        await pilot.click(card)
        assert app.monitor_prefs.selected == 3
        await pilot.click(card)
        await pilot.pause()
        assert isinstance(app.screen, GpuDetailScreen)


async def test_process_commands_are_shown_as_text_not_markup():
    from dataclasses import replace

    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(140, 30)) as pilot:
        last = feed(app, 20)[-1]
        gpus = list(last.gpus)
        proc = replace(
            gpus[0].processes[0], pid=999, command="python x.py --note [/oops] [b]bold[/b]"
        )
        gpus[0] = replace(gpus[0], processes=(*gpus[0].processes, proc))
        app.ingest(replace(last, seq=last.seq + 1, gpus=tuple(gpus)))
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        cell = table.get_cell("999", "command")
        assert "[/oops]" in str(cell) or "[/oops]" in table.get_row("999")[-1]
        assert app.is_running


async def test_emoji_codes_in_a_command_are_shown_as_written():
    """A command's ``:fire:`` is text, not an emoji (the cells are Text without emoji
    codes, as the headers are)."""
    from dataclasses import replace

    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(140, 30)) as pilot:
        last = feed(app, 3)[-1]
        gpus = list(last.gpus)
        proc = replace(gpus[0].processes[0], pid=998, command="python x.py --tag :fire: :smile:")
        gpus[0] = replace(gpus[0], processes=(*gpus[0].processes, proc))
        app.ingest(replace(last, seq=last.seq + 1, gpus=tuple(gpus)))
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        assert str(table.get_cell("998", "command")).endswith("--tag :fire: :smile:")


# -- the app is typed: no attribute of it is reached by name --------------------------------
def _untyped_app_lookups(source: str) -> list[str]:
    """``getattr(app, "x")``, ``getattr(self.app, "x")`` (and hasattr/setattr) in ``source``:
    lookups mypy cannot check."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            continue
        target = node.args[0]
        if (isinstance(target, ast.Name) and target.id == "app") or (
            isinstance(target, ast.Attribute) and target.attr == "app"
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_app_is_reached_through_typed_accessors_only():
    from pathlib import Path

    import lltui.app

    package = Path(lltui.app.__file__).parent
    files = sorted(package.rglob("*.py"))
    assert len(files) > 10, "the app's modules were found"
    bad = {
        str(path.relative_to(package)): hits
        for path in files
        if (hits := _untyped_app_lookups(path.read_text(encoding="utf-8")))
    }
    assert bad == {}


def test_the_lookup_check_can_fail():
    code = (
        'x = getattr(self.app, "model", None)\n'
        'getattr(app, "MODES", {})\n'
        'hasattr(self.screen.app, "launch")\n'
        'getattr(banner, "_text", None)\n'  # not the app: allowed
        "getattr(self.app, name)\n"  # not a literal: allowed
    )
    assert len(_untyped_app_lookups(code)) == 3


async def test_screens_and_the_palette_reach_the_app_through_its_protocol():
    from lltui.app.app_protocol import host_of
    from lltui.app.palette import LltuiCommands

    app = sim_app("4xl4")
    async with app.run_test(size=(120, 50)) as pilot:
        feed(app, 2)
        await pilot.pause()
        assert host_of(app.screen) is app
        assert app.screen.lltui is app
        assert host_of(LltuiCommands(app.screen)) is app


# -- blocking work off the UI thread ---------------------------------------------------------
async def test_off_thread_returns_or_raises_what_the_work_does_on_a_daemon_thread():
    import threading

    import pytest

    from lltui.app.background import off_thread

    def where() -> tuple[str, bool]:
        me = threading.current_thread()
        return me.name, me.daemon

    assert await off_thread(where, "probe") == ("lltui-probe", True)

    def broken() -> None:
        raise ValueError("no such file")

    with pytest.raises(ValueError, match="no such file"):
        await off_thread(broken, "broken")


async def test_a_hung_loader_does_not_hold_up_its_screen_or_quitting(monkeypatch):
    import threading

    from lltui.app.screens import topology

    release = threading.Event()
    started = threading.Event()

    def hung(source: str):
        started.set()
        release.wait(30)  # nvidia-smi that never answers
        raise OSError("released")

    monkeypatch.setattr(topology, "read_topology", hung)
    app = sim_app("kaggle-2xt4")
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("2")
            await wait_for(started.is_set)
            assert app.view_loading()
            await pilot.press("1", "s")  # the UI still answers
            assert app.monitor_prefs.sort_index == 1
            await pilot.press("ctrl+q")
        # the app has quit while the loader still hangs, on a daemon thread
        hung_threads = [t for t in threading.enumerate() if t.name == "lltui-topology"]
        assert hung_threads and all(t.daemon and t.is_alive() for t in hung_threads)
    finally:
        release.set()


async def test_a_cancelled_wait_drops_the_late_result_quietly():
    import threading

    import pytest

    from lltui.app.background import off_thread

    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    release, settled = threading.Event(), threading.Event()

    def slow() -> int:
        release.wait(10)
        loop.call_soon_threadsafe(settled.set)  # runs after off_thread's own callback
        return 1

    task = asyncio.ensure_future(off_thread(slow, "slow"))
    await wait_for(lambda: any(t.name == "lltui-slow" for t in threading.enumerate()))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await wait_for(settled.is_set)
    assert errors == []


async def test_switching_views_keeps_no_dead_footer_keys():
    import gc

    from textual.widgets._footer import FooterKey

    def footer_keys() -> int:
        gc.collect()
        return sum(isinstance(o, FooterKey) for o in gc.get_objects())

    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(100, 30)) as pilot:
        for _ in range(3):  # every view built once
            await pilot.press("2", "1")
            await pilot.pause()
        before = footer_keys()
        for _ in range(15):
            await pilot.press("2", "1")
            await pilot.pause()
        # Textual's own footer kept ~16 keys alive per switch: 480 here
        assert footer_keys() - before < 20


async def test_a_render_before_a_pushed_screen_is_composed_does_not_crash():
    # a slow SSH link delivers "1", Enter and a sample in one burst: the detail screen is on
    # the stack before its widgets exist, and the app renders the model on it at once
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(100, 30)) as pilot:
        app.poll_sync(2)
        await pilot.pause()
        uuid = app.model.latest.gpus[0].info.uuid
        app.push_screen(GpuDetailScreen(uuid))
        app.render_model()  # must skip the screen until it is mounted, not raise NoMatches
        await pilot.pause()
        assert isinstance(app.screen, GpuDetailScreen)
        await wait_for(lambda: "GPU" in str(app.screen.query_one("#detail").render()))


@pytest.mark.parametrize("view", ["1", "2", "3", "4", "5"])
async def test_key_bursts_from_every_view_raise_nothing(view):
    # keys arriving in one write over a slow link: switching, opening and closing at once
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press(view)
        await pilot.press("1", "enter", "2", "1", "enter", "escape", "3", "4", "5", "1")
        await pilot.press("enter", "]", "enter", "escape", "g", "w", "s", "r", "?", "escape")
        await pilot.pause()
        app.render_model()
        await pilot.pause()
        assert app.is_running  # an exception in a handler would have ended the app


def test_the_status_line_tells_the_end_of_a_recording_from_live():
    from dataclasses import replace

    from lltui.app.widgets.status import render_status

    app = sim_app("kaggle-2xt4")
    app.poll_sync(1)
    model = app.model
    assert "live" in render_status(model, None)
    end = replace(model.latest, seq=model.latest.seq + 1, error="end of recording", ended=True)
    model.apply(end)
    text = render_status(model, None)
    assert "end of recording" in text and "live" not in text
    assert "source error" not in text  # the end is a state, not an error


def test_the_monitor_owns_its_keys_and_the_views_are_one_table():
    from lltui.app import keys, views
    from lltui.app.app import LltuiApp
    from lltui.app.screens.monitor import MONITOR_BINDINGS, MonitorScreen

    monitor_actions = {b.action.split("(")[0] for b in MONITOR_BINDINGS}
    assert monitor_actions <= {a[len("action_") :] for a in dir(MonitorScreen)}
    assert not {a for a in monitor_actions if hasattr(LltuiApp, f"action_{a}")}
    app_actions = {b.action for b in keys.BINDINGS}
    assert not app_actions & monitor_actions
    # every view's key and the app's modes come from the one table
    assert list(LltuiApp.MODES) == [v.mode for v in views.VIEWS]
    view_keys = [b for b in keys.view_bindings() if b.action.startswith("view(")]
    assert [b.key.split(",")[0] for b in view_keys] == [str(n) for n in range(1, 7)]


async def test_the_status_line_goes_stale_by_itself_when_samples_stop():
    """No timer wakes the app each second to redraw the status line: each sample arms one
    redraw for when its data would be stale. A poll that hangs past it shows STALE with no
    help; the next sample clears it."""
    clock = StepClock(1000.0, step=0.0)
    source = HangingSource()
    app = sim_app(source=source, clock=clock, interval=0.25, start_polling=True)
    async with app.run_test(size=(80, 24)):
        await wait_for(lambda: app.samples_applied >= 1)
        await wait_for(source.hanging.is_set)
        assert app.model.stale_after() == 3.0  # STALE_MIN_S: more than 3 intervals of 0.25
        clock.advance(10.0)  # the model's clock; the redraw comes 3 s after the sample
        assert "STALE" not in text_of(app, "#status")
        await wait_for(lambda: "STALE" in text_of(app, "#status"), timeout=10)
        source.release.set()
        await wait_for(lambda: app.samples_applied >= 2)
        await wait_for(lambda: "STALE" not in text_of(app, "#status"))


@pytest.mark.parametrize(("key", "field"), [("4", "#fit-model"), ("5", "#launch-model")])
async def test_a_form_takes_typing_as_soon_as_it_opens(key, field):
    """Its model field has the focus: a path typed at once is the field's, not the app's
    keys (space pauses, minus speeds sampling up, slash opens the filter)."""
    app = sim_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(key)
        await pilot.press(*"/m -1.gguf")
        typed = app.screen.query_one(field, Input)
        assert typed.value == "/m -1.gguf"
        assert not app.model.paused and app.model.interval == 1.0


def test_a_long_source_name_ends_in_an_ellipsis_not_a_second_status_line():
    from dataclasses import replace

    from lltui.app.widgets.status import render_status

    app = sim_app("kaggle-2xt4")
    app.poll_sync(1)
    model = app.model
    long_name = "replay:" + "/very/long/path/to/a/recording" * 4 + ".jsonl"
    model.apply(
        replace(model.latest, seq=model.latest.seq + 1, info=replace(model.info, source=long_name))
    )
    assert model.info.source == long_name
    for width in (80, 60):
        for history in (True, False):  # the monitor's line and the other views' (it wrapped)
            line = render_status(model, None, width, history=history).plain
            assert "\n" not in line and len(line) <= width, line
            assert line.startswith("lltui replay:/very") and "…" in line and "live" in line


def test_gpu_detail_says_dash_for_clock_events_a_source_does_not_report():
    """nvidia-smi's [N/A] throttle reasons were shown as "clock events: none"."""
    from dataclasses import replace

    from lltui.app.rig_model import RigModel
    from lltui.app.screens.gpu_detail import render_detail
    from lltui.core.monitor.history import RigHistory
    from lltui.sources.gpu.sim import SimSource

    src = SimSource("kaggle-2xt4", seed=0)
    src.open()
    sample = src.poll()
    model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
    model.apply(sample)
    g = sample.gpus[0]
    assert "clock events: -" in render_detail(replace(g, throttle_reasons=None), model, 80, 60)
    assert "clock events: none" in render_detail(replace(g, throttle_reasons=()), model, 80, 60)


def test_the_view_option_names_every_view():
    """--view's help said "monitor, ..."."""
    from lltui.app.views import VIEWS
    from lltui.cli import VIEW_NAMES

    assert tuple(v.mode for v in VIEWS) == VIEW_NAMES


@pytest.mark.parametrize(("keys", "label"), [(("enter",), "GPU mem"), (("d",), "power")])
async def test_a_detail_opened_on_a_wide_paused_screen_draws_each_sparkline_on_one_line(
    keys, label
):
    # its first frame was laid out at the screen's width, wider than its box: every
    # sparkline wrapped, and stayed so until the next sample (never, while paused)
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(200, 50)) as pilot:
        feed(app, 30)
        await pilot.pause()
        await pilot.press("space", *keys)  # paused: no sample draws it again
        await pilot.pause()
        lines = [s.text for s in app.screen._compositor.render_strips()]
        at = next(i for i, line in enumerate(lines) if f"│ {label:<9}" in line)
        assert "now " in lines[at + 1]  # the range under it, not the sparkline's tail

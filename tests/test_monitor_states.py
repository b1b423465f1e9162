"""The monitor says what state it is in, as a player or nvitop would: a replay's place in
its recording, Pause that reads Resume while paused, one pause command in the palette, key
help with lltui's own keys and a legend of the monitor, and a GPU page with its readings now
and the span its graphs really cover."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.app_helpers import sim_app, wait_for
from textual.widgets import Static

from lltui.app.app import create_app
from lltui.app.screens.gpu_detail import GpuDetailScreen
from lltui.app.screens.help import HelpScreen
from lltui.app.screens.process_detail import ProcessDetailScreen
from lltui.app.widgets.footer import LltuiFooter
from lltui.app.widgets.status import StatusBar
from lltui.config import Settings
from lltui.core.units import fmt_clock
from lltui.sources.gpu.replay import (
    Recorder,
    ReplaySource,
)
from lltui.sources.gpu.sim import SimSource, StepClock


def status_text(app) -> str:
    return str(app.screen.query_one(StatusBar).text)


def footer_text(app) -> str:
    return str(app.screen.query_one(LltuiFooter).render())


def _recording(path: Path, n: int, step: float) -> Path:
    src = SimSource("kaggle-2xt4", seed=1, clock=StepClock(step=step), start=0.0)
    info = src.open()
    with Recorder(path, wall=lambda: 1_767_225_600.0) as rec:
        rec.start(info)
        for _ in range(n):
            rec.write(src.poll())
    return path


def test_fmt_clock():
    assert [fmt_clock(s) for s in (0, 42, 600, 3723, -1)] == [
        "00:00",
        "00:42",
        "10:00",
        "1:02:03",
        "00:00",
    ]


async def test_a_replay_shows_its_place_paused_and_ended(tmp_path):
    path = _recording(tmp_path / "rec.jsonl", 31, step=20.0)  # 30 gaps of 20 s: 10:00
    source = ReplaySource(path, stepped=True)
    app = create_app(
        Settings(source=f"replay:{path}"), source=source, start_polling=False, clock=StepClock()
    )
    async with app.run_test(size=(100, 30)) as pilot:
        app.poll_sync(3)  # the third sample: 40 s in
        await pilot.pause()
        assert "▶ replay 00:40 of 10:00" in status_text(app)
        assert "live" not in status_text(app)
        await pilot.press("space")
        await pilot.pause()
        assert "PAUSED replay 00:40 of 10:00" in status_text(app)
        await pilot.press("space")
        app.poll_sync(30)  # past the last sample
        await pilot.pause()
        assert "replay ended at 10:00 of 10:00" in status_text(app)


async def test_the_pause_key_reads_resume_while_paused_and_the_palette_has_one_pause():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 30)) as pilot:
        app.poll_sync(2)
        await pilot.pause()
        assert "Pause" in footer_text(app) and "Resume" not in footer_text(app)
        await pilot.press("space")
        await pilot.pause()
        assert "Resume" in footer_text(app) and " Pause " not in footer_text(app)
        assert "PAUSED" in status_text(app)
        from textual.command import CommandPalette

        await pilot.press("ctrl+p")
        await wait_for(lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"sampling")
        palette = app.screen
        options = palette.query_one("CommandList")

        def option_names() -> list[str]:
            return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]

        # the palette searches in a worker of its own: wait for its answer, however slow
        await wait_for(lambda: any("esume" in n for n in option_names()))
        names = option_names()
        pauses = [n for n in names if "ause" in n or "esume" in n]
        assert len(pauses) == 1 and "Resume sampling" in pauses[0], names
        await pilot.press("escape")
        await pilot.press("space")
        await pilot.pause()
        assert "Pause" in footer_text(app) and "Resume" not in footer_text(app)


async def test_the_palettes_gpu_detail_over_an_open_one_opens_no_second():
    from textual.command import CommandPalette

    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(2)
        await pilot.pause()
        await pilot.press("right_square_bracket", "d")
        assert isinstance(app.screen, GpuDetailScreen)
        await pilot.press("ctrl+p")
        await wait_for(lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"GPU detail")
        options = app.screen.query_one("CommandList")

        def first() -> str:
            return str(options.get_option_at_index(0).prompt) if options.option_count else ""

        await wait_for(lambda: first().startswith("GPU detail"))
        await pilot.press("enter")
        await wait_for(lambda: not isinstance(app.screen, CommandPalette))
        await pilot.pause()
        assert [type(s).__name__ for s in app.screen_stack] == ["MonitorScreen", "GpuDetailScreen"]
        assert "GPU1 " in str(app.screen.query_one("#detail").render())
        await pilot.press("escape")
        assert [type(s).__name__ for s in app.screen_stack] == ["MonitorScreen"]


def screen_text(app) -> str:
    return "\n".join(
        "".join(seg.text for seg in strip).rstrip()
        for strip in app.screen._compositor.render_strips()
    )


async def test_key_help_shows_lltuis_keys_then_a_legend_of_the_monitor():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 90)) as pilot:
        app.poll_sync(2)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        said = [what for _title, rows in app.screen.sections for _keys, what in rows]
        assert "Pause" in said and "Filter" in said and "Detail" in said
        for generic in ("Focus Next", "Focus Previous", "Cursor up", "Copy selected text"):
            assert generic not in said  # Textual's own keys are not lltui's to explain
        legend = screen_text(app)
        assert "Focus Next" not in legend and "Cursor up" not in legend
        for term in ("VRAM", "SM%", "GPU MEM", "COMMAND", "yellow", "85% full", "stale"):
            assert term in legend, term
        await pilot.press("escape")
        await pilot.press("4")  # the fit view: keys, no monitor legend
        await pilot.press("escape", "question_mark")  # its model field had the focus
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert not app.screen.query("#help-legend")


async def test_the_gpu_page_shows_readings_now_and_the_span_its_graphs_cover():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(100, 50)) as pilot:
        app.poll_sync(8)  # 7 s of history at 1 s a sample
        await pilot.pause()
        await pilot.press("d")  # (enter on a process is its own history)
        await pilot.pause()
        assert isinstance(app.screen, GpuDetailScreen)
        text = str(app.screen.query_one("#detail", Static).render())
        g = app.model.latest.gpus[0]
        assert f"power {g.power_w:.0f}/{g.power_limit_w:.0f} W" in text
        assert f"temp {g.temp_c:.0f}°C" in text
        assert "over the last 7s" in text and "1m00s" not in text
        app.poll_sync(60)
        await pilot.pause()
        text = str(app.screen.query_one("#detail", Static).render())
        assert "over the 1m window" in text


@pytest.mark.parametrize("opens", ["d", "enter"])
async def test_question_mark_on_a_detail_page_opens_the_keys_of_that_page(opens):
    # the GPU page and a process's page are modal: the app's ? and F1 did nothing there
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 90)) as pilot:
        app.poll_sync(3)
        await pilot.pause()
        await pilot.press(opens)
        detail = app.screen
        assert isinstance(detail, GpuDetailScreen | ProcessDetailScreen)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        said = [what for _title, rows in app.screen.sections for _keys, what in rows]
        assert "Window" in said and "Help" in said
        assert ("Prev GPU" in said) == (opens == "d")
        await pilot.press("f1")
        await pilot.pause()
        assert app.screen is detail


@pytest.mark.parametrize("opens", ["d", "enter"])
async def test_a_detail_page_has_the_monitors_sampling_keys_and_q_goes_back(opens):
    # the GPU page and a process's page are modal: space, p, + and - did nothing there, and
    # q (which leaves nvitop's process page) did nothing either
    app = sim_app("16xv100-dgx2", interval=1.0)
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(3)
        await pilot.pause()
        await pilot.press(opens)
        await pilot.pause()
        detail = app.screen
        assert isinstance(detail, GpuDetailScreen | ProcessDetailScreen)
        assert "space Pause" in footer_text(app) and "esc Close" in footer_text(app)
        await pilot.press("space")
        await wait_for(lambda: "space Resume" in footer_text(app))
        assert app.model.paused and app.poller.paused
        await pilot.press("p")
        assert not app.model.paused
        await pilot.press("plus")
        assert app.model.interval == 0.5 and app.poller.interval == 0.5
        await pilot.press("minus", "minus")
        assert app.model.interval == 2.0
        await pilot.press("q")
        await pilot.pause()
        assert app.is_running and not isinstance(app.screen, type(detail))
        assert "every 2s" in status_text(app)


@pytest.mark.parametrize("view", ["2", "3", "4", "5", "6"])
async def test_a_views_status_line_is_fitted_to_the_width_again_after_a_resize(view):
    # its wording is fitted to the width when drawn; only the monitor drew it again on a
    # resize: shrunk while paused (no sample came) the wide wording wrapped onto two rows
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(200, 50)) as pilot:
        app.poll_sync(3)
        await pilot.press(view)
        await wait_for(lambda: "every 1s" in status_text(app))
        await pilot.resize_terminal(80, 24)
        await wait_for(lambda: "● live 1s" in status_text(app))
        assert app.screen.query_one(StatusBar).size.height == 1
        await pilot.resize_terminal(200, 50)
        await wait_for(lambda: "every 1s" in status_text(app))

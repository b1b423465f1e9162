"""The launch view's log and rates after a request: llama-server's timing lines are read
whole at 80 columns (wrapped, not cut), and the rates show what the last request got (from
those lines) where the counters' rate has fallen back to 0."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from support.app_helpers import sim_app, wait_for
from support.llama_fixture import free_port, llama_bins, tiny_model

from lltui.app.screens.launch import LaunchScreen, render_rates
from lltui.core.llama.timings import RequestTimings, TimingReader
from lltui.services.launch.state import LaunchState, Rates, Speed

__all__ = ["llama_bins", "tiny_model"]  # session fixtures used by name

FIXTURES = Path(__file__).parent / "fixtures" / "llama-server"
READY_TIMEOUT_S = 90.0


@pytest.mark.parametrize("name", ["server_default_verbosity_full.log", "server_jsonl_lv4_full.log"])
def test_timing_lines_of_real_server_logs_are_read(name):
    reader = TimingReader()
    found = [t for line in (FIXTURES / name).read_text().splitlines() if (t := reader.feed(line))]
    assert len(found) == 1
    t = found[0]
    assert t.prompt_tokens == 22 and t.gen_tokens == 6
    assert t.prompt_tps is not None and t.prompt_tps > 1000 and t.gen_tps is not None


def test_an_eval_line_without_its_prompt_line_is_no_request():
    reader = TimingReader()
    line = "slot print_timing: id  0 | task 7 |        eval time =  1.00 ms /  2 tokens (0.50 ms per token,  2000.00 tokens per second)"  # noqa: E501
    assert reader.feed(line) is None


def test_idle_rates_show_the_last_request_not_a_rate_decayed_to_zero():
    rates = Rates(gen_tps=(35.0, 12.0, 0.0), prompt_tps=(900.0, 0.0), slots_busy=0)
    st = LaunchState(phase="ready", rates=rates)
    assert "0.00 tok/s" in render_rates(st, 80)  # no timing lines yet: the counters' rate
    last = RequestTimings(22, 7.38, 2979.01, 24, 700.0, 34.29)
    st = replace(st, speed=Speed(last_request=last, last_request_at=100.0))
    text = render_rates(st, 80, now=112.0)
    assert "34.29 tok/s" in text and "2979.01 tok/s" in text and "0.00 tok/s" not in text
    assert "last request (12s ago): prompt 22 tokens at 2979 tok/s" in text
    # a request running: its live rate
    st = replace(st, rates=replace(rates, slots_busy=1, gen_tps=(*rates.gen_tps, 40.0)))
    assert "40.00 tok/s" in render_rates(st, 80, now=113.0)


@pytest.fixture
def server_env(llama_bins, monkeypatch):
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)


@pytest.mark.slow
async def test_a_real_request_timing_lines_whole_at_80_columns(server_env, tiny_model):
    port = free_port()
    app = sim_app("kaggle-2xt4")
    pid = None
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("5")
            screen = app.screen
            assert isinstance(screen, LaunchScreen)
            app.launch_action("start", str(tiny_model), "-c 256 -np 1 -t 1", f"127.0.0.1:{port}")
            await wait_for(lambda: app.launch.state.phase in ("ready", "error"), READY_TIMEOUT_S)
            assert app.launch.state.phase == "ready", app.launch.state.message
            pid = app.launch.state.pid
            with httpx.Client(timeout=30, trust_env=False) as client:
                r = client.post(
                    f"http://127.0.0.1:{port}/completion",
                    json={"prompt": "hello", "n_predict": 16, "temperature": 0},
                )
                assert r.status_code == 200
            await wait_for(lambda: app.launch.state.speed.last_request is not None, 20)

            def timing_lines() -> list[str]:
                return [line for line in app.launch.state.log.items if "eval time =" in line]

            await wait_for(lambda: len(timing_lines()) >= 2, 20)
            await pilot.pause()
            timings = timing_lines()
            assert len(timings) == 2
            log = screen.query_one("#launch-log")
            shown = "".join("".join(seg.text for seg in strip) for strip in log.lines)
            for line in timings:  # every character of the line is in the pane, in order
                assert line.replace(" ", "") in shown.replace(" ", ""), line
            assert app.launch.state.speed.last_request.gen_tokens == 16
            rates = str(screen.query_one("#launch-rates").render())
            assert "last request" in rates and "generated 16 tokens" in rates
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


async def test_the_placement_table_fits_80_columns():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#launch-placement")
        width = sum(c.get_render_width(table) for c in table.columns.values())
        assert width <= 80 - 3  # the page's padding and scrollbar


def fits(table) -> bool:
    """The table's columns fit the width it has beside its rows' scroll bar."""
    return (
        not table.show_horizontal_scrollbar
        and table.virtual_size.width <= table.scrollable_content_region.width
    )


def test_the_placement_keeps_its_most_useful_columns_that_fit():
    from lltui.app.screens.launch import placement_columns

    every = ("device", "model MiB", "KV MiB", "compute MiB", "out MiB", "layers")
    assert placement_columns(95) == (*every, "predicted MiB")
    assert placement_columns(94) == (*every[:4], "layers", "predicted MiB")  # out MiB first
    assert placement_columns(77) == every
    assert placement_columns(70) == (*every[:4], "layers")  # then lltui's prediction
    assert placement_columns(10) == ("device",)


WIDTHS = (80, 100, 120, 140, 160, 200)


@pytest.mark.parametrize("width", WIDTHS)
async def test_the_placement_table_opens_with_columns_that_fit_its_width(width):
    """At 120-160 columns the table is 3/5 of the screen: the prediction's column went by
    the screen's width, and the table opened scrolled sideways."""
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(width, 40)) as pilot:
        await pilot.press("5")
        table = app.screen.query_one("#launch-placement")
        await wait_for(lambda: table.columns and fits(table))
        await pilot.pause()
        assert fits(table)
        assert {"device", "model MiB", "KV MiB", "compute MiB"} <= set(table.columns)
        assert table.size.height == 1  # its header, shown


async def test_the_placement_columns_follow_the_tables_width_over_its_rows():
    """A twelfth row brings the rows' scroll bar (two cells) and leaves the table's size as
    it was; then a resize through the widths: every width fits, each row keeps its cells."""
    from lltui.app.screens.launch import PlacementTable

    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(97, 60)) as pilot:
        await pilot.press("5")
        table = app.screen.query_one("#launch-placement", PlacementTable)
        cells = {"model MiB": "1000.50", "KV MiB": "20.00", "compute MiB": "300.00",
                 "out MiB": "0.00", "layers": "0-1", "predicted MiB": "-"}  # fmt: skip

        def show(n: int) -> None:
            table.show_cells({f"CUDA{i}": {"device": f"CUDA{i}", **cells} for i in range(n)})

        show(11)
        await wait_for(lambda: len(table.columns) == 7 and table.size.height == 12)
        show(17)
        await wait_for(lambda: table.show_vertical_scrollbar and fits(table))
        for width in (*WIDTHS[-2::-1], *WIDTHS[1:]):
            before = table.size.width
            await pilot.resize_terminal(width, 40)
            await wait_for(lambda b=before: table.size.width != b and fits(table))
            await pilot.pause()
            assert fits(table), width
            assert table.row_count == 17
            row = dict(zip(table.columns, table.get_row("CUDA16"), strict=True))
            assert row == {"device": "CUDA16", **{k: cells[k] for k in table.columns if k in cells}}


async def test_the_placement_table_keeps_no_blank_row_after_the_terminal_shrinks():
    """200x50 -> 80x24: the prediction's column goes after the table has narrowed; the
    sideways scroll bar its width asked for goes with it (it was a blank row under the
    header that pushed the last balance line off the screen)."""
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(200, 50)) as pilot:
        app.poll_sync(2)
        await pilot.press("5")
        await pilot.pause()
        table = app.screen.query_one("#launch-placement")
        await pilot.resize_terminal(80, 24)
        await wait_for(lambda: table.size.width == 77 and len(table.columns) == 6)
        await pilot.pause()
        assert not table.show_horizontal_scrollbar
        assert table.size.height == 1 + table.row_count

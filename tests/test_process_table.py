"""The process table driven by Pilot: the SM% column, the sort indicator, sorting from the
header, and the filter that outlives ticks."""

from __future__ import annotations

from dataclasses import replace

from support.app_helpers import feed, sim_app, wait_for
from support.fake_pynvml import MIB, FakeNvml, make_gpus
from support.nvml_helpers import close_nvml_sources  # noqa: F401 (an autouse fixture)

from lltui.app.app import create_app
from lltui.app.palette import LltuiCommands
from lltui.app.widgets.process_table import (
    ProcessFilter,
    ProcessPane,
    ProcessTable,
    header_label,
    process_rows,
)
from lltui.config import Settings
from lltui.core.monitor.models import GpuProcess, RigSample
from lltui.sources.gpu.nvml import NvmlSource
from lltui.sources.gpu.sim import StepClock

SERVER, XORG = 41234, 1873


def table_of(app) -> ProcessTable:
    return app.screen.query_one(ProcessTable)


def sorted_headers(table: ProcessTable) -> list[str]:
    return [h for h in table.header_text() if h.endswith(("▲", "▼"))]


def test_header_label_marks_only_the_sorted_column():
    assert header_label("gpu_mem", "gpu_mem", False) == "GPU MEM▼"
    assert header_label("gpu_mem", "gpu_mem", True) == "GPU MEM▲"
    assert header_label("cpu", "gpu_mem", False) == "CPU%"


def _with(sample: RigSample, gpu: int, *procs: GpuProcess) -> RigSample:
    gpus = list(sample.gpus)
    gpus[gpu] = replace(gpus[gpu], processes=procs)
    return replace(sample, gpus=tuple(gpus))


def test_sm_is_the_mean_over_the_gpus_that_report_it_and_none_when_none_do():
    app = sim_app("2x3090-nvlink")
    (sample,) = feed(app, 1)
    a = GpuProcess(pid=7, gpu_index=0, used_memory=1, sm_util=60.0)
    b = GpuProcess(pid=7, gpu_index=1, used_memory=1, sm_util=None)
    c = GpuProcess(pid=8, gpu_index=1, used_memory=1)
    s = _with(_with(sample, 0, a), 1, replace(b, sm_util=20.0), c)
    rows = process_rows(s)
    assert rows[7].sm == 40.0 and rows[8].sm is None
    assert rows[8].cells()[4] == "-"  # unknown is a dash, never 0
    rows = process_rows(_with(_with(sample, 0, a), 1, b))
    assert rows[7].sm == 60.0


def test_gpu_mem_of_a_split_says_when_a_gpu_does_not_report_its_share():
    """nvidia-smi's [N/A] share on one GPU: the sum of the others was shown as the whole."""
    app = sim_app("2x3090-nvlink")
    (sample,) = feed(app, 1)
    a = GpuProcess(pid=7, gpu_index=0, used_memory=19 << 30)
    b = GpuProcess(pid=7, gpu_index=1, used_memory=None)
    row = process_rows(_with(_with(sample, 0, a), 1, b))[7]
    assert row.mem_partial and row.cells()[3] == "≥19.0 GiB"
    big = process_rows(_with(_with(sample, 0, replace(a, used_memory=321 << 30)), 1, b))[7]
    assert big.cells()[3] == "≥321 GiB"
    whole = process_rows(_with(_with(sample, 0, a), 1, replace(b, used_memory=1 << 30)))[7]
    assert not whole.mem_partial and whole.cells()[3] == "20.0 GiB"


async def test_sm_column_and_sort_indicator_follow_the_sort_keys():
    app = sim_app("2x3090-nvlink")  # llama-server on both GPUs, Xorg on GPU0
    async with app.run_test(size=(110, 30)) as pilot:
        feed(app, 20)  # serving and decoding: the server keeps the GPUs busy
        await pilot.pause()
        table = table_of(app)
        assert "SM%" in " ".join(table.header_text())
        server_sm = str(table.get_cell(str(SERVER), "sm"))
        assert server_sm != "-" and int(server_sm) > 0
        assert str(table.get_cell(str(XORG), "sm")) == "0"
        assert sorted_headers(table) == ["GPU MEM▼"]
        await pilot.press("r")
        assert sorted_headers(table) == ["GPU MEM▲"]
        assert table.pids == [XORG, SERVER]
        await pilot.press("r", "s")
        assert app.monitor_prefs.sort_key == "sm"
        assert sorted_headers(table) == ["SM%▼"]
        assert table.pids == [SERVER, XORG]  # busiest first
        feed(app, 2)  # a tick keeps the indicator
        await pilot.pause()
        assert sorted_headers(table) == ["SM%▼"]


async def test_a_click_on_a_header_sorts_by_it_and_a_second_click_reverses():
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(110, 30)) as pilot:
        feed(app, 20)
        await pilot.pause()
        table = table_of(app)
        pid_x = 2  # PID is the first column
        assert await pilot.click(ProcessTable, offset=(pid_x, 0))
        await wait_for(lambda: app.monitor_prefs.sort_key == "pid")
        assert sorted_headers(table) == ["PID▼"] and table.pids == [SERVER, XORG]
        assert await pilot.click(ProcessTable, offset=(pid_x, 0))
        await wait_for(lambda: app.monitor_prefs.sort_reverse)
        assert sorted_headers(table) == ["PID▲"] and table.pids == [XORG, SERVER]
        user_x = 12  # USER is not a sort key: nothing changes
        assert await pilot.click(ProcessTable, offset=(user_x, 0))
        await pilot.pause()
        assert app.monitor_prefs.sort_key == "pid" and sorted_headers(table) == ["PID▲"]


async def test_filter_hides_rows_it_does_not_find_and_stays_while_the_table_updates():
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(110, 30)) as pilot:
        feed(app, 20)
        await pilot.pause()
        table = table_of(app)
        pane = app.screen.query_one(ProcessPane)
        assert app.focused is table and not pane.filter_open
        assert not pane.query(ProcessFilter)  # mounted when first asked for
        await pilot.press("slash")
        field = app.screen.query_one(ProcessFilter)
        assert pane.filter_open and app.focused is field
        await pilot.press(*"XORG")  # any case, in the command
        assert table.pids == [XORG]
        feed(app, 3)
        await pilot.pause()
        assert table.pids == [XORG]  # new samples, same filter
        await pilot.press("escape")  # clears and closes
        assert not pane.filter_open and field.value == "" and app.focused is table
        assert sorted(table.pids) == [XORG, SERVER]


async def test_filter_by_user_or_pid_kept_with_enter_and_cleared_from_the_table():
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(110, 30)) as pilot:
        feed(app, 20)
        await pilot.pause()
        table = table_of(app)
        pane = app.screen.query_one(ProcessPane)
        await pilot.press("slash", *"llama")  # the server's user
        assert table.pids == [SERVER]
        await pilot.press("enter")  # back to the table, the filter kept and shown
        assert app.focused is table and pane.filter_open and table.filter_text == "llama"
        feed(app, 2)
        await pilot.pause()
        assert table.pids == [SERVER]
        await pilot.press("s")  # the app's keys work again on the table
        assert app.monitor_prefs.sort_key == "sm" and table.pids == [SERVER]
        await pilot.press("escape")
        assert not pane.filter_open and sorted(table.pids) == [XORG, SERVER]
        await pilot.press("slash", *"187")  # part of a pid
        assert table.pids == [XORG]
        await pilot.press(*"99")
        assert table.pids == []
        await pilot.press("escape")
        assert sorted(table.pids) == [XORG, SERVER]


async def test_sm_from_nvml_and_a_dash_where_the_gpu_will_not_say(monkeypatch):
    gpus = make_gpus(2)
    gpus[0].compute_procs = [(101, 900 * MIB)]
    gpus[0].util_samples = [(101, 10, 77)]
    gpus[1].compute_procs = [(202, 800 * MIB)]
    gpus[1].util_samples = None  # MIG, say
    FakeNvml(gpus).install(monkeypatch)
    clock = StepClock(1000.0, step=0.0)
    source = NvmlSource(clock=clock, env={}, event_wait_s=0.002)
    app = create_app(Settings(source="nvml"), source=source, clock=clock, start_polling=False)
    async with app.run_test(size=(110, 30)) as pilot:
        feed(app, 1)
        await pilot.pause()
        table = table_of(app)
        assert str(table.get_cell("101", "sm")) == "77"
        assert str(table.get_cell("202", "sm")) == "-"
        await pilot.press("s")  # by SM%: the unknown goes below
        assert table.pids == [101, 202]
        await pilot.press("r")
        assert table.pids == [202, 101]


def test_rss_fits_its_column_whole():
    from lltui.app.widgets.process_table import COLUMNS, rss_cell

    width = next(w for key, _label, w in COLUMNS if key == "rss")
    for n, shown in (
        (310 * MIB, "310 MiB"),
        (512 * 1024, "512 KiB"),
        (9.8 * 1024 * MIB, "9.8 GiB"),
        (12.3 * 1024 * MIB, "12.3 GiB"),
        (1536 * 1024 * MIB, "1536 GiB"),
    ):
        assert rss_cell(int(n)) == shown and len(shown) <= width
    assert rss_cell(None) == "-"


async def test_s_cycles_only_through_the_columns_shown_and_a_narrower_table_falls_back():
    """TIME is shown from 90 columns: at 80, ``s`` sorted by it with no arrow on any header."""
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 3)
        await pilot.pause()
        table = table_of(app)
        assert "TIME" not in table.header_text()
        seen = []
        for _ in range(7):
            await pilot.press("s")
            seen.append(app.monitor_prefs.sort_key)
            assert len(sorted_headers(table)) == 1
        assert "time" not in seen and seen[-1] == "sm"  # six keys, then round again
        names = [name for name, _h, _cb in LltuiCommands(app.screen)._commands()]
        assert "Sort processes by pid" in names and "Sort processes by time" not in names
        await pilot.resize_terminal(100, 24)
        await wait_for(lambda: "TIME" in table.header_text())
        await pilot.press("s", "s", "s", "s", "s")  # sm to time
        assert sorted_headers(table) == ["TIME▼"]
        await pilot.resize_terminal(80, 24)  # no TIME now: the first key, with its arrow
        await wait_for(lambda: sorted_headers(table) == ["GPU MEM▼"])
        assert app.monitor_prefs.sort_key == "gpu_mem"

"""The monitor on a shared rig: the alerts line and the GPUs it marks, the CONTAINER and TIME
columns and the container filter, tags and one signal for the tagged, a process's own
history, read-only mode, energy with a price."""

from __future__ import annotations

import signal
from pathlib import Path

from support.alert_rig import write_alert_recording
from support.app_helpers import feed, sim_app, wait_for
from support.nvml_helpers import close_nvml_sources  # noqa: F401 (an autouse fixture)
from test_process_signals import children, nvml_app, spawn  # noqa: F401 (fixture)

from lltui.app.app import create_app
from lltui.app.screens.process_detail import ProcessDetailScreen
from lltui.app.screens.signal_dialog import SignalDialog
from lltui.app.widgets.footer import LltuiFooter
from lltui.app.widgets.gpu_card import GpuCard
from lltui.app.widgets.process_table import ProcessTable
from lltui.app.widgets.text_lines import TextLines
from lltui.config import Settings
from lltui.core.monitor.alert_settings import AlertConfig, AlertThresholds
from lltui.sources.gpu.replay import ReplaySource
from lltui.sources.gpu.sim import SimSource, StepClock


def _replay_app(path: Path, **settings: object):
    source = ReplaySource(path, stepped=True)
    config = AlertConfig(AlertThresholds(event_hold_s=3, power_cap_for_s=2, throttle_for_s=2))
    return create_app(
        Settings(source=f"replay:{path}", alerts=config, **settings),  # type: ignore[arg-type]
        source=source,
        clock=StepClock(1000.0, step=0.0),
        start_polling=False,
    )


async def test_the_alerts_line_says_what_and_since_when_and_marks_the_gpu(tmp_path):
    path = tmp_path / "alerts.jsonl"
    write_alert_recording(path)
    app = _replay_app(path)
    async with app.run_test(size=(120, 40)) as pilot:
        feed(app, 1)
        await pilot.pause()
        bar = app.screen.query_one("#alerts", TextLines)
        assert not bar.display  # no alert: no line
        feed(app, 1)  # tick 1: GPU0 at 92 °C, GPU1's memory at 96 °C
        await pilot.pause()
        line = str(bar.render())
        assert bar.display and line.startswith("▲ 2 alerts")
        assert "CRIT GPU0 temperature 92°C (critical at 90) since " in line
        cards = list(app.screen.query(GpuCard))
        assert cards[0].has_class("-alert-critical") and cards[1].has_class("-alert-critical")
        feed(app, 3)  # tick 4: cooled down
        await pilot.pause()
        assert not bar.display
        assert not any(c.has_class("-alert-critical") for c in app.screen.query(GpuCard))
        feed(app, 3)  # tick 7: GPU1 has held its power limit for 2 s
        await pilot.pause()
        assert "WARN GPU1 power" in str(bar.render())
        assert list(app.screen.query(GpuCard))[1].has_class("-alert-warning")


async def test_energy_is_priced_when_a_price_is_set():
    src = SimSource("kaggle-2xt4", seed=0, clock=StepClock(step=1.0), start=20.0)
    settings = Settings(source="sim:kaggle-2xt4", energy_price=0.30, currency="EUR")
    app = create_app(settings, source=src, clock=StepClock(1000.0, step=0.0), start_polling=False)
    async with app.run_test(size=(120, 40)) as pilot:
        feed(app, 30)
        await pilot.pause()
        rig = str(app.screen.query_one("#rig").render())
        energy = app.model.history.energy_since_start_mj()
        assert energy and f"≈ {energy / 3.6e9 * 0.30:.2f} EUR" in rig


async def test_container_and_time_columns_and_the_container_filter():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(160, 50)) as pilot:
        feed(app, 40)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        headers = table.header_text()
        assert headers.index("CONTAINER") == headers.index("COMMAND") - 1
        assert "TIME" in headers
        rows = {str(r[0]): [str(c) for c in r] for r in (table.get_row(k) for k in table.rows)}
        assert rows["52310"][headers.index("CONTAINER")] == "slurm:48213 llama…"  # cut at 18
        assert rows["52977"][headers.index("CONTAINER")] == "docker:eval-gsm8k"
        assert rows["41234"][headers.index("CONTAINER")] == "-"
        assert rows["41234"][headers.index("TIME")] == "3h12"
        table.move_cursor(row=table.get_row_index("52977"))
        await pilot.press("c")  # only this process's container
        await pilot.pause()
        assert table.pids == [52977]
        await pilot.press("escape")
        await pilot.pause()
        assert len(table.pids) == 3


async def test_no_container_no_column():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        feed(app, 40)
        await pilot.pause()
        assert "CONTAINER" not in app.screen.query_one(ProcessTable).header_text()


async def test_enter_on_a_process_opens_its_own_history():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(160, 50)) as pilot:
        feed(app, 40)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        table.move_cursor(row=table.get_row_index("52310"))
        await pilot.press("enter")
        screen = app.screen
        assert isinstance(screen, ProcessDetailScreen) and screen.pid == 52310
        text = str(screen.query_one("#detail").render())
        assert "pid 52310" in text and "slurm:48213 llama-ft" in text
        assert "GPU mem" in text and "RSS" in text and "running 9h" in text
        feed(app, 2)  # it follows the live model
        await pilot.pause()
        await pilot.press("escape")
        assert not isinstance(app.screen, ProcessDetailScreen)


async def test_tagged_processes_are_signalled_together(monkeypatch, children):  # noqa: F811
    a, b, c = (spawn(children) for _ in range(3))
    app = nvml_app(monkeypatch, a.pid, b.pid, c.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        feed(app, 1)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        for child in (a, c):
            table.move_cursor(row=table.get_row_index(str(child.pid)))
            await pilot.press("t")
        assert table.tagged == {a.pid, c.pid}
        assert str(table.get_row(str(a.pid))[0]) == f"*{a.pid}"
        await pilot.press("K")
        dialog = app.screen
        assert isinstance(dialog, SignalDialog)
        text = str(dialog.query_one("#signal-text").render())
        assert "2 tagged processes" in text and str(a.pid) in text and str(c.pid) in text
        await pilot.press("t")
        await wait_for(lambda: a.poll() is not None and c.poll() is not None)
        assert a.returncode == c.returncode == -signal.SIGTERM
        assert b.poll() is None  # not tagged: left alone
        await pilot.press("escape")
        await pilot.press("T")
        assert table.tagged == set()


async def test_readonly_hides_signalling(monkeypatch, children):  # noqa: F811
    from lltui.core.monitor.models import GpuProcess  # noqa: F401

    child = spawn(children)
    app = nvml_app(monkeypatch, child.pid)
    app.settings = Settings(source="nvml", readonly=True)
    async with app.run_test(size=(120, 30)) as pilot:
        feed(app, 1)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        await pilot.press("t", "K", "f9")
        await pilot.pause()
        assert not isinstance(app.screen, SignalDialog) and table.tagged == set()
        footer = " ".join(str(w.render()) for w in app.screen.query(LltuiFooter))
        assert "Signal" not in footer
        assert child.poll() is None

"""The topology view: loads off the UI thread, colours the matrix, shows advice."""

import pytest
from support.app_helpers import sim_app, sim_fleet_app, wait_for

from lltui.app.screens.topology import TopologyScreen, cell_style
from lltui.sources.gpu.sim import PROFILES


def loaded(app) -> bool:
    assert isinstance(app.screen, TopologyScreen)
    state = app.screen.state
    return state.report is not None or state.error is not None


async def test_key_2_shows_the_topology_of_the_simulated_rig():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(120, 50)) as pilot:
        app.poll_sync(2)
        await pilot.press("2")
        assert isinstance(app.screen, TopologyScreen)
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        matrix = str(app.screen.query_one("#topo-matrix").render())
        assert matrix.count("NV18") == 8 * 7
        assert "mlx5_0" in str(app.screen.query_one("#topo-devices").render())
        advice = " ".join(app.screen.query_one("#topo-advice").plain_lines())
        assert "NVLink" in advice
        await pilot.press("1")
        assert app.current_mode == "monitor"


async def test_monitor_keys_are_disabled_in_the_topology_view():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await pilot.press("s", "w")
        assert app.monitor_prefs.sort_index == 0 and app.monitor_prefs.window_index == 0
        # the monitor's keys are its screen's: the topology view has none of them
        assert "cycle_sort" not in {b.binding.action for b in app.screen.active_bindings.values()}
        await pilot.press("1", "s")
        assert app.monitor_prefs.sort_index == 1


async def test_a_replay_has_no_topology_and_says_so(tmp_path):
    from lltui.app.app import create_app
    from lltui.config import Settings
    from lltui.sources.gpu.replay import ReplaySource, record
    from lltui.sources.gpu.sim import SimSource

    path = tmp_path / "r.jsonl"
    record(SimSource("kaggle-2xt4"), path, 3)
    app = create_app(
        Settings(source=f"replay:{path}"),
        source=ReplaySource(path, stepped=True),
        start_polling=False,
    )
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        title = str(app.screen.query_one("#topo-title").render())
        assert "topology unavailable" in title and "replay" in title


async def test_the_topology_comes_back_in_a_message_that_carries_it():
    from lltui.app.messages import TopologyReady

    app = sim_app("8xh100-sxm")
    messages = []
    async with app.run_test(size=(120, 50), message_hook=messages.append) as pilot:
        await pilot.press("2")
        await wait_for(lambda: any(isinstance(m, TopologyReady) for m in messages))
        await pilot.pause()
        ready = [m for m in messages if isinstance(m, TopologyReady)]
        assert len(ready) == 1  # read once
        message = ready[0].state
        assert message.error is None and message.report is not None
        assert len(message.report.live.topology.gpus) == 8
        assert any("NVLink" in a.message for a in message.advice)
        # the screen keeps what the message brought, on the UI thread
        assert app.screen.state.report is message.report
        assert app.screen.state.advice == message.advice
        assert not app.view_loading()
        await pilot.press("1", "2")  # back again: not read a second time
        await pilot.pause()
        assert len([m for m in messages if isinstance(m, TopologyReady)]) == 1


async def test_the_devices_list_keeps_its_columns_past_gpu9():
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(120, 50)) as pilot:
        app.poll_sync(2)
        await pilot.press("2")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        lines = str(app.screen.query_one("#topo-devices").render()).splitlines()
        gpu9, gpu10 = (next(ln for ln in lines if ln.startswith(f"GPU{i} ")) for i in (9, 10))
        assert gpu9.index("Tesla") == gpu10.index("Tesla")
        assert gpu9.index("00000000:") == gpu10.index("00000000:")


def test_link_kinds_have_distinct_styles():
    styles = {cell_style(c) for c in ("NV12", "PIX", "PHB", "NODE", "SYS", "X")}
    assert len(styles) == 6


@pytest.mark.parametrize("profile", list(PROFILES))
def test_topology_snapshot(snap_compare, profile):
    app = sim_app(profile)

    async def run_before(pilot):
        app.poll_sync(2)
        await pilot.press("2")
        await wait_for(lambda: loaded(app))
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 50), run_before=run_before)


def _screen_lines(app) -> list[str]:
    return [
        "".join(seg.text for seg in strip).rstrip()
        for strip in app.screen._compositor.render_strips()
    ]


async def test_advice_wraps_under_its_message_at_80_columns():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 200)) as pilot:
        app.poll_sync(2)
        await pilot.press("2")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        lines = _screen_lines(app)
        start = lines.index(" advice")
        body = [line for line in lines[start + 1 :] if line.strip()][:12]
        first = body[0]
        assert first.startswith(" info ")
        indent = len(" info ")
        for line in body[1:]:
            # a line goes on the message (indented under it) or starts the next advice
            assert line.startswith(" info ") or line.startswith(" " * indent), line
        assert any(line.startswith(" " * indent) for line in body[1:])  # it did wrap


async def test_a_host_whose_topology_cannot_be_read_shows_none_of_the_last_hosts(monkeypatch):
    """Open a fleet host, see its topology, then open one whose topology cannot be read: its
    error, with the first host's matrix, legend, devices and advice gone."""
    from lltui.app.screens import topology
    from lltui.app.state.topology import TopologyState

    read = topology.read_topology

    def read_or_fail(source: str) -> TopologyState:
        if source == "sim:kaggle-2xt4":  # as an unreachable host's nvidia-smi would
            return TopologyState(error="nvidia-smi topo -m on gpu9.invalid failed")
        return read(source)

    monkeypatch.setattr(topology, "read_topology", read_or_fail)
    specs = ["sim:16xv100-dgx2", "sim:kaggle-2xt4"]
    app = sim_fleet_app(specs)
    async with app.run_test(size=(120, 50)) as pilot:
        app.focus_host(0)
        await pilot.press("2")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        assert "NV6" in "\n".join(_screen_lines(app))
        app.focus_host(1)
        await pilot.press("2")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        text = "\n".join(_screen_lines(app))
        assert "topology unavailable" in text and "gpu9.invalid failed" in text
        for old in ("NV6", "legend", "Tesla", "advice"):
            assert old not in text, old
        app.focus_host(0)
        await pilot.press("2")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        assert "NV6" in "\n".join(_screen_lines(app))  # the first host's, read again

"""Snapshot tests of the monitor at 80x24 and 160x50 (plain def tests, as the plugin wants)."""

import pytest
from support.app_helpers import feed, sim_app

SAMPLES = 40


def _warm(app):
    async def run_before(pilot):
        feed(app, SAMPLES)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize(
    ("profile", "size"),
    [
        pytest.param("kaggle-2xt4", (80, 24), id="2gpu-80x24"),
        pytest.param("kaggle-2xt4", (160, 50), id="2gpu-160x50"),
        pytest.param("8xh100-sxm", (80, 24), id="8gpu-80x24"),
        pytest.param("8xh100-sxm", (160, 50), id="8gpu-160x50"),
        pytest.param("16xv100-dgx2", (80, 24), id="16gpu-80x24"),
        pytest.param("16xv100-dgx2", (160, 50), id="16gpu-160x50"),
        pytest.param("mixed-4090-3090", (120, 40), id="mixed-120x40"),
        pytest.param("8xmi300x", (80, 24), id="8xmi300x-80x24"),
        pytest.param("2x4090-2x7900xtx", (80, 24), id="nvidia-amd-80x24"),
    ],
)
def test_monitor_snapshot(snap_compare, profile, size):
    app = sim_app(profile)
    assert snap_compare(app, terminal_size=size, run_before=_warm(app))


@pytest.mark.parametrize("theme", ["light", "high-contrast"])
def test_monitor_snapshot_themes(snap_compare, theme):
    app = sim_app("2x3090-nvlink", theme=theme)
    assert snap_compare(app, terminal_size=(120, 40), run_before=_warm(app))


def test_gpu_detail_snapshot(snap_compare):
    app = sim_app("2x3090-nvlink")

    async def run_before(pilot):
        feed(app, SAMPLES)
        await pilot.pause()
        await pilot.press("d")  # enter on the process table opens the process's history
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_process_history_snapshot(snap_compare):
    app = sim_app("8xh100-sxm")

    async def run_before(pilot):
        feed(app, SAMPLES)
        await pilot.pause()
        await pilot.press("down", "enter")  # the slurm job's own history
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)

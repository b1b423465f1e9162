"""Snapshots of the fit, launch, topology and NCCL views at 80x24 and 160x50 (plain def tests,
as the plugin wants): every form value readable at 80 columns, the results below it."""

import pytest
from support import gguf_factory as gf
from support.app_helpers import sim_app, wait_for

from lltui.app.screens.fit import FitScreen
from lltui.app.screens.nccl import NcclScreen
from lltui.app.screens.topology import TopologyScreen

SIZES = [(80, 24), (160, 50)]
EIGHT = "8xh100-sxm"


@pytest.fixture
def tiny_model(tmp_path, monkeypatch):
    """A small llama GGUF named by a relative path, so the snapshot shows no temporary dir."""
    gf.write_model(tmp_path / "tiny-llama.gguf", gf.SPECS["llama"](n_ctx_train=32768), "F16")
    monkeypatch.chdir(tmp_path)
    return "tiny-llama.gguf"


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x50"])
def test_fit_view_filled_snapshot(snap_compare, tiny_model, size):
    app = sim_app(EIGHT)

    async def run_before(pilot):
        app.poll_sync(2)
        await pilot.press("4")
        screen = app.screen
        assert isinstance(screen, FitScreen)
        screen.query_one("#fit-model").value = tiny_model
        screen.query_one("#fit-ctx").value = "32768"
        screen.query_one("#fit-np").value = "4"
        screen.query_one("#fit-ts").value = "1,1,1,1,1,1,1,1"
        screen._changed()  # the path is estimated on submit; the fields above already asked
        await wait_for(lambda: screen.settled and screen.outcome.result is not None)
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=["80x24", "160x50"])
def test_launch_view_filled_snapshot(snap_compare, size):
    app = sim_app(EIGHT)

    async def run_before(pilot):
        app.poll_sync(2)
        await pilot.press("5")
        screen = app.screen
        screen.query_one("#launch-flags").value = "-c 32768 -ngl all -ts 1,1,1,1,1,1,1,1"
        screen.query_one("#launch-hostport").value = "127.0.0.1:18080"
        argv = screen.query_one("#launch-argv")
        await wait_for(lambda: "no model" in str(argv.render()))
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)


def _loaded(app) -> bool:
    screen = app.screen
    if isinstance(screen, TopologyScreen | NcclScreen):
        state = screen.state
        return state.report is not None or state.error is not None
    return False


@pytest.mark.parametrize(
    ("key", "profile", "size"),
    [
        ("2", EIGHT, (80, 24)),
        ("2", EIGHT, (160, 50)),
        ("2", "kaggle-2xt4", (80, 24)),
        ("2", "16xv100-dgx2", (80, 24)),
        ("3", EIGHT, (80, 24)),
        ("3", EIGHT, (160, 50)),
        ("2", "8xmi300x", (80, 24)),
        ("2", "2x4090-2x7900xtx", (80, 24)),
        ("3", "8xmi300x", (80, 24)),
    ],
    ids=["topology-8-80x24", "topology-8-160x50", "topology-2-80x24", "topology-16-80x24",
         "nccl-8-80x24", "nccl-8-160x50", "topology-mi300x-80x24", "topology-mixed-80x24",
         "rccl-mi300x-80x24"],
)  # fmt: skip
def test_read_once_view_snapshot(snap_compare, key, profile, size):
    app = sim_app(profile)

    async def run_before(pilot):
        app.poll_sync(2)
        await pilot.press(key)
        await wait_for(lambda: _loaded(app))
        await pilot.pause()

    assert snap_compare(app, terminal_size=size, run_before=run_before)

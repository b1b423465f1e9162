"""The NCCL view: facts off the UI thread, findings, the bench button, a loaded file."""

from pathlib import Path

import pytest
from support.app_helpers import sim_app, sim_fleet_app, wait_for

from lltui.app.screens.nccl import NcclScreen
from lltui.sources.gpu.sim import PROFILES

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real" / "nccl"  # see its README.md


def state(app):
    assert isinstance(app.screen, NcclScreen)
    return app.screen.state


def loaded(app) -> bool:
    return state(app).report is not None or state(app).error is not None


def text(app, selector: str) -> str:
    widget = app.screen.query_one(selector)
    if hasattr(widget, "plain_lines"):
        return "\n".join(widget.plain_lines())
    return str(widget.render())


async def test_key_3_shows_the_simulated_nccl_facts_and_findings():
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(1)
        await pilot.press("3")
        assert isinstance(app.screen, NcclScreen)
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        assert "2.27.7" in text(app, "#nccl-library")
        assert "SIMULATED" in text(app, "#nccl-library")
        assert "NCCL_P2P_LEVEL" in text(app, "#nccl-env")
        assert "NVLink" in text(app, "#nccl-findings")


async def test_bench_on_a_simulated_rig_says_why_it_cannot_run():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        await pilot.click("#nccl-bench")
        await wait_for(lambda: bool(state(app).bench_text))
        await pilot.pause()
        assert "simulated rig has no GPUs" in text(app, "#nccl-bench-result")


async def test_loading_an_nccl_tests_file_and_a_log():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(140, 60)) as pilot:
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        field = app.screen.query_one("#nccl-file")
        tests_file = next(FIXTURES.glob("T01-*.txt"))
        field.value = str(tests_file)
        await pilot.click("#nccl-file")
        await wait_for(lambda: app.focused is app.screen.query_one("#nccl-file"))
        await pilot.press("enter")
        await wait_for(lambda: "nccl-tests" in state(app).file_text)
        await pilot.pause()
        assert "busbw" in text(app, "#nccl-file-result") or "GB/s" in text(app, "#nccl-file-result")
        log_file = next(FIXTURES.glob("N11-*.txt"))
        field.value = str(log_file)
        await pilot.press("enter")
        await wait_for(lambda: "NCCL log" in state(app).file_text)
        field.value = "/no/such/file"
        await pilot.press("enter")
        await wait_for(lambda: "/no/such/file" in state(app).file_text)
        assert app.is_running


async def test_nccl_results_come_back_in_messages_that_carry_them(tmp_path):
    from lltui.app.messages import NcclBenchDone, NcclFileLoaded, NcclReady

    app = sim_app("2x3090-nvlink")
    messages = []

    def first(kind):
        return next((m for m in messages if isinstance(m, kind)), None)

    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await pilot.press("3")
        await wait_for(lambda: first(NcclReady) is not None)
        await pilot.pause()
        ready = first(NcclReady)
        assert ready.error is None and ready.report.info.version == "2.27.7"
        assert ready.report.findings
        assert state(app).report is ready.report
        await pilot.click("#nccl-bench")
        await wait_for(lambda: first(NcclBenchDone) is not None)
        await pilot.pause()
        assert "simulated rig has no GPUs" in first(NcclBenchDone).text
        assert state(app).bench_text == first(NcclBenchDone).text
        assert not state(app).bench_running
        missing = tmp_path / "missing.log"
        app.screen.query_one("#nccl-file").value = str(missing)
        await pilot.click("#nccl-file")
        await wait_for(lambda: app.focused is app.screen.query_one("#nccl-file"))
        await pilot.press("enter")
        await wait_for(lambda: first(NcclFileLoaded) is not None)
        await pilot.pause()
        assert str(missing) in first(NcclFileLoaded).text
        assert state(app).file_text == first(NcclFileLoaded).text


async def test_typing_q_in_the_file_field_does_not_quit():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        await pilot.click("#nccl-file")
        await wait_for(lambda: app.focused is app.screen.query_one("#nccl-file"))
        await pilot.press("q", "1", "space")
        await pilot.pause()
        assert app.is_running and app.current_mode == "nccl"
        assert app.screen.query_one("#nccl-file").value == "q1 "


@pytest.mark.parametrize("profile", list(PROFILES))
def test_nccl_snapshot(snap_compare, profile):
    app = sim_app(profile)

    async def run_before(pilot):
        app.poll_sync(2)
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


async def test_a_loaded_file_scrolls_into_view_at_80x24():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        page = app.screen.query_one("#nccl-page")
        assert page.scroll_y == 0
        field = app.screen.query_one("#nccl-file")
        field.value = str(next(FIXTURES.glob("T01-*.txt")))
        field.focus()
        await pilot.press("enter")
        await wait_for(lambda: "nccl-tests" in state(app).file_text)
        await wait_for(lambda: page.scroll_y > 0)  # scrolled to the result once it is drawn
        await pilot.pause()
        result = app.screen.query_one("#nccl-file-result")
        top = result.region.y
        assert page.region.y <= top < page.region.bottom  # its first line is on screen


async def test_a_rig_simulated_for_want_of_a_gpu_shows_this_machines_library(monkeypatch):
    """With no GPU the app shows a simulated rig; its NCCL view showed the profile's made-up
    library where `lltui nccl` (auto) shows the real one: the lookup needs no GPU."""
    from lltui.services import nccl as nccl_service
    from lltui.sources.gpu.sim import SimSource, StepClock

    asked: list[str | None] = []
    real = nccl_service.nccl_report
    monkeypatch.setattr(nccl_service, "nccl_report", lambda s, **kw: asked.append(s) or real(s))
    src = SimSource("kaggle-2xt4", clock=StepClock(step=1.0), reason="no NVIDIA GPU here")
    app = sim_app("kaggle-2xt4", source=src)
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(1)
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        assert asked == ["auto"]
        assert "SIMULATED" not in text(app, "#nccl-library")


async def test_another_fleet_host_shows_none_of_the_last_hosts_test_or_findings(monkeypatch):
    """Run the bandwidth test on a fleet host, then open one whose NCCL facts cannot be read:
    its error, without the first host's test result, findings or environment."""
    from lltui.app.screens import nccl

    read = nccl.read_report

    def read_or_fail(source: str):
        if source == "sim:kaggle-2xt4":  # as an unreachable host's would
            return None, "ldconfig on gpu9.invalid failed"
        return read(source)

    monkeypatch.setattr(nccl, "read_report", read_or_fail)
    specs = ["sim:2x3090-nvlink", "sim:kaggle-2xt4"]
    app = sim_fleet_app(specs)
    async with app.run_test(size=(120, 40)) as pilot:
        app.focus_host(0)
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        await pilot.click("#nccl-bench")
        await wait_for(lambda: bool(state(app).bench_text))
        await pilot.pause()
        assert "NVLink" in text(app, "#nccl-findings") and "NCCL_" in text(app, "#nccl-env")
        app.focus_host(1)
        await pilot.press("3")
        await wait_for(lambda: loaded(app))
        await pilot.pause()
        assert "gpu9.invalid failed" in text(app, "#nccl-library")
        assert text(app, "#nccl-findings") == text(app, "#nccl-env") == ""
        assert text(app, "#nccl-env-unset") == ""
        assert state(app).bench_text == ""
        assert not app.screen.query_one("#nccl-bench-result").display


def test_the_bandwidth_test_of_another_host_says_it_tests_this_machine():
    """The view's button tests this machine's GPUs whatever host is open: a fleet's ssh
    host's result read as that host's."""
    from lltui.app.state.nccl import run_bench_text

    remote = run_bench_text(False, "smi:gpu9.example")
    assert "of this machine's GPUs, not smi:gpu9.example's" in remote
    assert run_bench_text(False, "nvml").startswith("[b]bandwidth test[/b]: ")


def test_a_bandwidth_test_error_is_shown_whole(monkeypatch):
    """The error's own brackets were read as markup: "[dlopen]" was dropped from the line."""
    from textual.content import Content

    import lltui.services.nccl as nccl
    from lltui.app.state.nccl import run_bench_text

    said = "libnccl.so.2: [dlopen] cannot open shared object file [/dlopen] [b]"

    def failed(**_settings):
        raise nccl.BenchFailed(said)

    monkeypatch.setattr(nccl, "allreduce_bench", failed)
    assert Content.from_markup(run_bench_text(False, "nvml")).plain == f"bandwidth test: {said}"

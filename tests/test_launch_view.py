"""The launch view against the real llama-server CPU build and a tiny generated model."""

import asyncio
import contextlib
import os
import signal

import httpx
import pytest
from app_helpers import sim_app, wait_for
from llama_fixture import free_port, llama_bins, tiny_model

from lltui.app.screens.launch import LaunchScreen
from lltui.app.state.launch import make_spec, parse_hostport
from lltui.core.llama.launch_spec import LaunchError

__all__ = ["llama_bins", "tiny_model"]  # session fixtures used by name

READY_TIMEOUT_S = 90.0


@pytest.fixture
def server_env(llama_bins, monkeypatch):
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_form_parsing_rejects_what_cannot_start():
    with pytest.raises(LaunchError, match="host:port"):
        parse_hostport("localhost")
    with pytest.raises(LaunchError, match="no model"):
        make_spec("", "-c 256", "127.0.0.1:8080")
    with pytest.raises(LaunchError, match="api-key-file"):
        make_spec("m.gguf", "--api-key secret", "127.0.0.1:8080")
    spec = make_spec("m.gguf", "-c 512 -np 2 -ts 3,1", "127.0.0.1:9001")
    a = spec.args
    assert (a.n_ctx, a.n_parallel, spec.port, a.tensor_split) == (512, 2, 9001, (3, 1))


async def test_the_command_preview_comes_back_in_a_message_that_carries_it():
    from lltui.app.messages import LaunchPreview

    app = sim_app("kaggle-2xt4")
    messages = []
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        await pilot.press("5")
        screen = app.screen
        screen.query_one("#launch-model").value = "/models/m.gguf"
        screen.query_one("#launch-flags").value = "-c 512 -np 2"

        def shown() -> str:
            return str(screen.query_one("#launch-argv").render())

        await wait_for(lambda: "-np 2" in shown())
        previews = [m for m in messages if isinstance(m, LaunchPreview)]
        newest = max(previews, key=lambda m: m.generation)
        assert "/models/m.gguf" in newest.line and "-np 2" in newest.line
        assert "/models/m.gguf" in shown()  # the view shows what the newest message carried


@pytest.mark.slow
async def test_start_ready_complete_tokens_per_second_and_stop(server_env, tiny_model):
    port = free_port()
    app = sim_app("kaggle-2xt4")
    pid = None
    try:
        async with app.run_test(size=(140, 50)) as pilot:
            app.poll_sync(2)
            await pilot.press("5")
            assert isinstance(app.screen, LaunchScreen)
            screen = app.screen
            screen.query_one("#launch-model").value = str(tiny_model)
            screen.query_one("#launch-flags").value = "-c 256 -np 1 -t 1"
            screen.query_one("#launch-hostport").value = f"127.0.0.1:{port}"
            await wait_for(
                lambda: "llama-server" in str(screen.query_one("#launch-argv").render()), 20
            )
            await pilot.click("#launch-start")
            await wait_for(lambda: app.launch.state.phase == "ready", READY_TIMEOUT_S)
            pid = app.launch.state.pid
            assert pid and alive(pid)
            with httpx.Client(timeout=30, trust_env=False) as client:
                r = client.post(
                    f"http://127.0.0.1:{port}/completion",
                    json={"prompt": "hello", "n_predict": 24, "temperature": 0},
                )
                assert r.status_code == 200
            await wait_for(lambda: bool(app.launch.state.gen_tps), 20)
            await pilot.pause()
            assert max(app.launch.state.gen_tps) > 0
            placement = [d.name for d in app.launch.state.placement]
            assert "CPU" in placement
            rates = str(screen.query_one("#launch-rates").render())
            assert "tok/s" in rates and "simulated" in rates  # no J/token on a simulated rig
            assert app.launch.state.lines_total > 10
            await pilot.click("#launch-stop")
            await wait_for(lambda: app.launch.state.phase == "exited", 30)
            assert not alive(pid)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.slow
async def test_quitting_the_app_stops_its_server(server_env, tiny_model):
    port = free_port()
    app = sim_app("kaggle-2xt4")
    pid = None
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("5")
            app.launch_action("start", str(tiny_model), "-c 256 -np 1 -t 1", f"127.0.0.1:{port}")
            await wait_for(lambda: app.launch.state.phase in ("ready", "error"), READY_TIMEOUT_S)
            assert app.launch.state.phase == "ready", app.launch.state.message
            pid = app.launch.state.pid
            from lltui.app.widgets.quit_dialog import QuitDialog

            # quitting with a server running asks first: "n" stays, the server runs on
            await pilot.press("ctrl+q")
            await wait_for(lambda: isinstance(app.screen, QuitDialog), 5)
            assert f"pid {pid}" in str(app.screen.query_one("#quit-text").render())
            await pilot.press("n")
            await wait_for(lambda: not isinstance(app.screen, QuitDialog), 5)
            assert app.is_running and alive(pid)
            await pilot.press("ctrl+q")
            await wait_for(lambda: isinstance(app.screen, QuitDialog), 5)
            await pilot.press("y")
            await wait_for(lambda: not app.is_running, 20)
        assert pid is not None
        for _ in range(150):
            if not alive(pid):
                break
            await asyncio.sleep(0.1)
        assert not alive(pid)
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.slow
async def test_a_start_fit_refuses_is_refused_with_what_fits_and_can_be_forced(
    server_env, tiny_model
):
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5")
        force = app.screen.query_one("#launch-force")
        assert not force.display  # nothing refused yet
        app.launch_action("start", str(tiny_model), "-c 999999999", "127.0.0.1:1")
        await wait_for(lambda: app.launch.state.phase == "error", 20)
        await pilot.pause()
        st = app.launch.state
        assert st.refused_plan and st.pid is None  # nothing started
        assert "does not fit" in st.message and "try -c" in st.message
        assert force.display  # the view offers to start it anyway


@pytest.mark.slow
async def test_a_missing_model_is_one_line_in_the_view(server_env, tmp_path):
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("5")
        app.launch_action("start", str(tmp_path / "nope.gguf"), "", "127.0.0.1:1")
        await wait_for(lambda: app.launch.state.phase == "error", 20)
        await pilot.pause()
        assert "model not found" in str(app.screen.query_one("#launch-server").render())


@pytest.mark.slow
async def test_following_a_server_started_elsewhere(server_env, tiny_model, llama_bins):
    import subprocess

    port = free_port()
    proc = subprocess.Popen(
        [str(llama_bins.binaries["llama-server"]), "-m", str(tiny_model), "-c", "256",
         "--port", str(port), "--host", "127.0.0.1", "--metrics", "-t", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        app = sim_app("kaggle-2xt4")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("5")
            app.launch_action("follow", f"127.0.0.1:{port}")
            await wait_for(lambda: app.launch.state.health == "ready", READY_TIMEOUT_S)
            assert app.launch.state.phase == "following"
            assert app.launch.state.pid is None  # not ours: nothing to stop on exit
        assert proc.poll() is None  # leaving the app left the followed server alone
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_stop_pressed_while_starting_waits_and_stops_it(monkeypatch):
    """Start, stop and follow are serialised: a Stop during a slow start is not lost."""
    import threading
    import time

    from lltui.services import launch_watch as launch_state

    events: list[str] = []

    class SlowSupervisor:
        def __init__(self, command, **kw):
            self.pid = 4242

        def start(self):
            events.append("start begins")
            time.sleep(0.3)
            events.append("start ends")

        def stop(self):
            events.append("stop")
            return None

        def status(self):  # pragma: no cover - the poller is not started here
            raise AssertionError

    monkeypatch.setattr("lltui.sources.llama.supervisor.Supervisor", SlowSupervisor)
    monkeypatch.setattr(
        "lltui.sources.llama.launch_prep.find_binary",
        lambda required: ("llama-server", None, None, None),
    )
    monkeypatch.setattr("lltui.sources.llama.launch_prep.check_inputs", lambda spec: ())
    # no model file in this test: fit's verdict is not what it is about
    from lltui.services.launch_check import Verdict

    monkeypatch.setattr("lltui.services.launch_check.judge", lambda spec, path=None: Verdict(True))
    monkeypatch.setattr(launch_state.LaunchController, "_start_polling", lambda *a, **k: None)
    ctl = launch_state.LaunchController(lambda: None, lambda: None)
    from lltui.app.state.launch import form_request

    request = form_request("m.gguf", "", "127.0.0.1:8080")
    starter = threading.Thread(target=ctl.start, args=(request,))
    starter.start()
    deadline = time.monotonic() + 5
    while events != ["start begins"] and time.monotonic() < deadline:
        time.sleep(0.01)  # polling: the start is under way before Stop is pressed
    assert events == ["start begins"]
    ctl.stop()
    starter.join(5)
    assert events == ["start begins", "start ends", "stop"]


def test_an_exited_server_shows_no_health(monkeypatch):
    # a server that answered "ready" and then exited (stopped by someone else): the view must
    # not keep its last answer, and a poll that still arrives cannot bring it back
    from lltui.app.screens.launch import render_server
    from lltui.core.llamalog.reader import parse_log
    from lltui.services import launch_watch as launch_state
    from lltui.sources.llama.http import EndpointResult, ServerPoll
    from lltui.sources.llama.supervisor import ServerExit, ServerStatus

    ctl = launch_state.LaunchController(lambda: None, lambda: None)
    ready = ServerPoll(
        url="http://127.0.0.1:1",
        t=0.0,
        wall=0.0,
        state="ready",
        health=EndpointResult("/health", "ok", 200),
    )
    ctl._take_poll(ready)
    assert "/health: ready" in render_server(ctl.state)

    gone = ServerExit(
        returncode=0,
        reason="stopped from outside",
        log_tail=(),
        stopped=False,
        was_ready=True,
        from_outside=True,
    )

    class ExitedSession:
        def status(self) -> ServerStatus:
            return ServerStatus("exited", 1, "http://127.0.0.1:1", None, parse_log(""), gone)

    monkeypatch.setattr(ctl, "_session", ExitedSession())
    ctl._take_poll(ready)  # a last answer racing the exit
    assert ctl.state.phase == "exited"
    assert ctl.state.health is None
    assert "/health" not in render_server(ctl.state)


def test_the_launch_predicts_the_speed_it_will_be_measured_against(tmp_path):
    import gguf_factory as gf

    from lltui.core.llama.launch_spec import LaunchSpec
    from lltui.services.fit import predict_speed
    from lltui.sources.gpu.kinds import one_sample

    path = tmp_path / "tiny-llama.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    sample = one_sample("sim:kaggle-2xt4")
    assert sample is not None
    spec = LaunchSpec.of(str(path), ["-ngl", "all", "-c", "2048"], port=8080)
    predicted = predict_speed(spec.args, sample)
    assert predicted is not None
    decode, prefill = predicted
    assert decode > 0 and prefill > 0
    # no rig sampled, or a model that cannot be read: no prediction rather than an error
    assert predict_speed(spec.args, None) is None
    missing = LaunchSpec.of(str(tmp_path / "missing.gguf"), ["-ngl", "all"])
    assert predict_speed(missing.args, sample) is None


def test_the_rates_show_the_prediction_beside_the_measured_rates():
    from lltui.app.screens.launch import render_rates
    from lltui.services.launch_watch import LaunchState

    st = LaunchState(phase="ready")
    st.gen_tps.append(41.5)
    assert "predicted" not in render_rates(st, 80)  # nothing predicted: nothing said
    st.predicted_decode_tps, st.predicted_prefill_tps = 44.2, 1510.0
    text = render_rates(st, 80)
    assert "41.50 tok/s" in text and "generation ~44 tok/s" in text and "prompt ~1510" in text

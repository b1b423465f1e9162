"""The launch view against the real llama-server CPU build and a tiny generated model."""

import asyncio
import contextlib
import os
import signal
from dataclasses import replace

import httpx
import pytest
from support.app_helpers import sim_app, wait_for
from support.llama_fixture import free_port, llama_bins, tiny_model

from lltui.app.screens.launch import LaunchScreen
from lltui.app.state.launch import form_request, parse_hostport
from lltui.core.cmdline.launch_spec import LaunchError, LaunchSpec
from lltui.services.launch.request import LaunchRequest, read_request

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


def make_spec(model: str, flags: str, hostport: str) -> LaunchSpec:
    """The spec the form asks for (a profile under the form, the flags over it)."""
    request = form_request(model, flags, hostport)
    assert isinstance(request, LaunchRequest)
    return read_request(request).spec


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


async def test_restart_starts_what_the_form_shows_now():
    """Restart ran the last command: the form's new -c 512 was shown as the command while
    the server ran on with -c 256, and with nothing started it did nothing."""
    app = sim_app("kaggle-2xt4")
    asked: list[tuple[str, ...]] = []
    async with app.run_test(size=(140, 50)) as pilot:
        await pilot.press("5")
        app.launch_action = lambda what, *args: asked.append((what, *args))  # type: ignore[method-assign]
        screen = app.screen
        screen.query_one("#launch-model").value = "/models/m.gguf"
        screen.query_one("#launch-flags").value = "-c 512 -t 1"
        await pilot.click("#launch-restart")
        await wait_for(lambda: asked)
    ((what, model, flags, _hostport),) = asked
    assert (what, model, flags) == ("start", "/models/m.gguf", "-c 512 -t 1")


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
            assert app.launch.state.message == f"serving {tiny_model}"  # no "loading" left
            # the rates are the counters' between two polls: one before the request
            await wait_for(lambda: app.launch.state.rates.tokens_total is not None, 20)
            with httpx.Client(timeout=30, trust_env=False) as client:
                r = client.post(
                    f"http://127.0.0.1:{port}/completion",
                    json={"prompt": "hello", "n_predict": 24, "temperature": 0},
                )
                assert r.status_code == 200
            await wait_for(lambda: max(app.launch.state.rates.gen_tps, default=0) > 0, 20)
            await pilot.pause()
            placement = [d.name for d in app.launch.state.placement]
            assert "CPU" in placement
            rates = str(screen.query_one("#launch-rates").render())
            assert "tok/s" in rates and "simulated" in rates  # no J/token on a simulated rig
            assert app.launch.state.log.total > 10
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
            from lltui.app.screens.quit_dialog import QuitDialog

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


async def test_the_quit_question_quits_on_y_or_its_button_never_on_enter_alone():
    """Stay has the focus, so enter stays; with no button focused enter does nothing either:
    only y or the button "Stop it and quit" stops the server and quits."""
    from lltui.app.screens.quit_dialog import QuitDialog

    app = sim_app("kaggle-2xt4")
    answers: list[bool | None] = []
    async with app.run_test(size=(80, 24)) as pilot:

        async def ask() -> QuitDialog:
            dialog = QuitDialog("llama-server (pid 1)")
            app.push_screen(dialog, answers.append)
            await wait_for(lambda: getattr(app.focused, "id", None) == "quit-no")  # Stay
            return dialog

        await ask()
        await pilot.press("enter")  # on Stay
        await wait_for(lambda: answers == [False])
        dialog = await ask()
        dialog.set_focus(None)
        await wait_for(lambda: app.focused is None)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is dialog and answers == [False]
        await pilot.press("escape")
        await wait_for(lambda: answers == [False, False])
        await ask()
        await pilot.press("tab", "enter")  # on "Stop it and quit"
        await wait_for(lambda: answers == [False, False, True])
        await ask()
        await pilot.press("y")
        await wait_for(lambda: answers == [False, False, True, True])


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
            app.launch_action("stop")  # stops following (the server runs on), and says so
            await wait_for(lambda: app.launch.state.phase == "idle", 20)
            assert app.launch.state.message.startswith("stopped following")
            assert app.launch.state.health is None
        assert proc.poll() is None  # leaving the app left the followed server alone
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_stop_pressed_while_starting_waits_and_stops_it(monkeypatch):
    """Start, stop and follow are serialised: a Stop during a slow start is not lost."""
    import threading
    import time

    from support.launch_proc import FakeSupervisor, no_server

    from lltui.app.state.launch import form_request
    from lltui.services.launch.check import Verdict
    from lltui.services.launch.controller import LaunchController

    no_server(monkeypatch, start_s=0.3)
    monkeypatch.setattr(
        "lltui.sources.llama.launch_prep.find_binary",
        lambda required: ("llama-server", None, None, None),
    )
    monkeypatch.setattr("lltui.sources.llama.launch_prep.check_inputs", lambda spec: ())
    # no model file in this test: fit's verdict and the speed watch are not what it is about
    monkeypatch.setattr("lltui.services.launch.check.judge", lambda *_: Verdict(True))
    monkeypatch.setattr("lltui.services.launch.watch._speed_watch", lambda session, rig: None)
    ctl = LaunchController(lambda: None, lambda: None)
    request = form_request("m.gguf", "", "127.0.0.1:8080")
    starter = threading.Thread(target=ctl.start, args=(request,))
    starter.start()
    deadline = time.monotonic() + 5
    while FakeSupervisor.events != ["start begins"] and time.monotonic() < deadline:
        time.sleep(0.01)  # polling: the start is under way before Stop is pressed
    assert FakeSupervisor.events == ["start begins"]
    ctl.stop()
    starter.join(5)
    assert FakeSupervisor.events == ["start begins", "start ends", "stop"]
    assert ctl.state.phase == "exited"


def test_an_exited_server_shows_no_health():
    # a server that answered "ready" and then exited (stopped by someone else): the view must
    # not keep its last answer, and a poll that still arrives cannot bring it back
    from lltui.app.screens.launch import render_server
    from lltui.services.launch.polls import ServerPoll
    from lltui.services.launch.state import LaunchState
    from lltui.sources.llama.http import EndpointResult
    from lltui.sources.llama.http import ServerPoll as Answer
    from lltui.sources.llama.supervisor import ServerExit

    ready = Answer(
        url="http://127.0.0.1:1",
        t=0.0,
        wall=0.0,
        state="ready",
        health=EndpointResult("/health", "ok", 200),
    )
    poll = ServerPoll("http://127.0.0.1:1", None)
    try:
        st = poll.fold(LaunchState(phase="ready", url="http://127.0.0.1:1"), ready)
        assert "/health: ready" in render_server(st)
        outside = ServerExit(0, "stopped from outside", (), False, True, from_outside=True)
        gone = folded(st, "exited", outside)
        assert gone.phase == "exited" and gone.health is None
        assert poll.fold(gone, ready).health is None  # a last answer racing the exit
        assert "/health" not in render_server(poll.fold(gone, ready))
    finally:
        poll.close()


def folded(st, state: str, ended=None):
    """``st`` once the watch has folded what a server's supervisor says: its ``state``, and
    how it ended."""
    from lltui.core.llamalog.reader import parse_log
    from lltui.services.launch.watch import LaunchWatch
    from lltui.sources.llama.supervisor import ServerStatus

    class Supervised:  # the session of a server in that state
        is_ready = state == "ready" or ended is not None

        def status(self):
            return ServerStatus(state, 1, "http://127.0.0.1:1", None, parse_log(""), ended)

        def judged_exit(self, result):
            return result

        def loaded_check(self):
            return None

    watch = LaunchWatch(Supervised(), lambda st: None, state=st)  # type: ignore[arg-type]
    return watch._fold_server(st, 0.0, fresh=True)


def test_loading_gives_way_to_serving_once_ready():
    from lltui.services.launch.state import LaunchState

    st = LaunchState(phase="starting", subject="/m.gguf", notes=("listening on 0.0.0.0",))
    loading = folded(st, "loading")
    assert loading.message == "loading /m.gguf; listening on 0.0.0.0"
    ready = folded(loading, "ready")
    assert ready.phase == "ready" and ready.message == "serving /m.gguf; listening on 0.0.0.0"


def test_the_launch_predicts_the_speed_it_will_be_measured_against(tmp_path):
    from support import gguf_factory as gf

    from lltui.core.cmdline.launch_spec import LaunchSpec
    from lltui.services.launch.speed import SpeedWatch
    from lltui.sources.gpu.kinds import one_sample

    path = tmp_path / "tiny-llama.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    sim = one_sample("sim:kaggle-2xt4")
    assert sim is not None
    real = replace(sim, info=replace(sim.info, simulated=False))  # as if its GPUs were here
    args = LaunchSpec.of(str(path), ["-ngl", "all", "-c", "2048"], port=8080).args
    on_gpus = SpeedWatch.for_rig(args, lambda: real, lambda: None)
    on_host = SpeedWatch.for_rig(args, lambda: sim, lambda: None)  # a simulated rig's are not
    assert on_gpus is not None and on_host is not None
    assert len(on_gpus.basis.devices) == 2 and not on_host.basis.devices
    for watch in (on_gpus, on_host):
        decode, prefill = watch.predict(False, 0, 128), watch.predict(True, 0, 512)
        assert decode and prefill and decode > 0 and prefill > 0
    # a model that cannot be read: no prediction rather than an error
    missing = LaunchSpec.of(str(tmp_path / "missing.gguf"), ["-ngl", "all"])
    assert SpeedWatch.for_rig(missing.args, lambda: real, lambda: None) is None


def test_a_router_predicts_nothing_for_itself_and_says_no_zero():
    """A router's view read "predicted: generation ~0 tok/s, prompt ~0 tok/s"."""
    from lltui.services.launch.speed import RouterSpeed
    from lltui.services.launch.watch import LaunchWatch

    watch = LaunchWatch(None, lambda st: None)
    watch._speed = RouterSpeed.__new__(RouterSpeed)  # (predicts None: one per model)
    speed = watch._predicted()
    assert speed.predicted_decode_tps is None and speed.predicted_prefill_tps is None


def test_the_rates_show_the_prediction_beside_the_measured_rates():
    from lltui.app.screens.launch import render_rates
    from lltui.services.launch.state import LaunchState, Rates, Speed

    st = LaunchState(phase="ready", rates=Rates(gen_tps=(41.5,)))
    assert "predicted" not in render_rates(st, 80)  # nothing predicted: nothing said
    predicted = Speed(predicted_decode_tps=44.2, predicted_prefill_tps=1510.0)
    text = render_rates(replace(st, speed=predicted), 80)
    assert "41.50 tok/s" in text and "generation ~44 tok/s" in text and "prompt ~1510" in text


async def test_the_balance_pane_names_whose_balance_it_shows():
    """Our server spread over no GPU: said so, not another process's balance shown as ours;
    with no server, the rig's first is named by its pid."""
    from lltui.app.screens.launch import render_balance

    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)):
        app.poll_sync(2)
        other = render_balance(app.model, None)
        assert "(pid 41234)" in other, other
        assert "41234" in render_balance(app.model, 41234)
        ours = render_balance(app.model, 999999)
        assert "pid 999999" in ours and "41234" not in ours, ours


async def test_the_balance_lines_keep_their_columns_past_gpu9():
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press("5")
        await pilot.pause()
        lines = str(app.screen.query_one("#launch-balance").render()).splitlines()
        gpu9, gpu10 = (next(ln for ln in lines if f"GPU{i} " in ln) for i in (9, 10))
        assert gpu9.index("its") == gpu10.index("its")
        assert gpu9.index("power") == gpu10.index("power")


def test_a_router_served_on_demand_shows_where_clients_connect():
    """The server line gave the private router's address, where a request for a model not
    loaded fails, not the on-demand address the form asked to listen on."""
    from lltui.app.screens.launch import render_server
    from lltui.services.launch.state import LaunchState, RouterView

    router = RouterView(on_demand_url="http://127.0.0.1:8080")
    st = LaunchState(phase="ready", url="http://127.0.0.1:41234", router=router)
    head = render_server(st).splitlines()[0]
    assert "on demand at http://127.0.0.1:8080 (the router at http://127.0.0.1:41234)" in head
    plain = LaunchState(phase="ready", url="http://127.0.0.1:8080", router=RouterView())
    assert "  http://127.0.0.1:8080" in render_server(plain)


async def test_a_server_change_while_the_view_is_torn_down_is_no_error():
    """The server's last change came while the app closed (its widgets already gone):
    the view looked up '#launch-server' and the app ended on NoMatches."""
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await screen.query_one("#launch-server").remove()  # as the app's close removes it
        screen.show_view()  # nothing to show it in: no error

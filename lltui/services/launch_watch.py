"""The launch view's model: one llama-server started (or followed) by the app, its log, its
HTTP state, tokens/s and joules per token. Blocking work runs on threads; the UI is told by a
coalescing message and reads this state under its lock."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from lltui.core.llama.launch_spec import ANY_LAUNCH, LaunchError, LaunchPolicy
from lltui.core.llama.timings import RequestTimings, TimingReader
from lltui.core.llamalog.models import DevicePlacement
from lltui.core.llamalog.router import RepeatFolder
from lltui.core.monitor.energy import EnergyPoint, JoulesPerToken, rig_energy_mj
from lltui.core.monitor.models import RigSample
from lltui.core.speed.served import SpeedCheck
from lltui.services.fit import predict_speed
from lltui.services.launch import (
    LaunchRequest,
    LaunchSession,
    Note,
    describe_exit,
)
from lltui.services.launch_speed import SpeedWatch, gpu_busy_of_others
from lltui.services.router_prep import RouterRequest
from lltui.services.router_watch import RouterRowView
from lltui.sources.llama.supervisor import ServerExit

if TYPE_CHECKING:  # httpx is imported only once a server is watched
    from lltui.services.launch_compare import LaunchCheck
    from lltui.services.router import RouterSession
    from lltui.services.router_watch import RouterWatch
    from lltui.sources.llama.http import LlamaServerClient, ServerPoll

POLL_INTERVAL_S = 1.0
LOG_LINES = 2000
SERIES_LEN = 300
DEFAULT_HOSTPORT = "127.0.0.1:8080"


@dataclass
class LaunchState:
    phase: str = "idle"  # idle, starting, loading, ready, stopping, exited, following, error
    message: str = ""  # the last thing worth telling, in words
    url: str | None = None
    pid: int | None = None
    health: str | None = None
    argv: list[str] = field(default_factory=list)
    placement: tuple[DevicePlacement, ...] = ()  # from the server's log
    offload: str | None = None  # "offloaded 33/33 layers to GPU"
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    lines_total: int = 0
    gen_tps: deque[float] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    prompt_tps: deque[float] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    jpt: deque[float] = field(default_factory=lambda: deque(maxlen=SERIES_LEN))
    tokens_total: float | None = None
    slots_busy: int | None = None
    jpt_note: str | None = None  # why there is no J/token
    exit_reason: str | None = None
    refused_plan: bool = False  # not started: fit says it will not fit (it can be forced)
    exit_code: int | None = None
    log_tail: tuple[str, ...] = ()
    # what fit predicts for this command on this rig, shown beside the measured rates
    predicted_decode_tps: float | None = None
    predicted_prefill_tps: float | None = None
    # once loaded: the server's buffers beside lltui's prediction for its flags and build
    check: LaunchCheck | None = None
    # a router (llama-server --models-preset): its models, and the last word on a load
    router: tuple[RouterRowView, ...] = ()
    router_note: str | None = None
    # the last request's own speed, from the server's timing lines, and when it ended
    last_request: RequestTimings | None = None
    last_request_at: float | None = None  # time.monotonic()
    # the server's own timing of its last requests beside the prediction at their size
    served_prompt: SpeedCheck | None = None
    served_generation: SpeedCheck | None = None
    speed_kept: str | None = None  # a served request kept as a calibration point of this rig


class LaunchController:
    """Owns at most one supervised llama-server (or a followed URL) and its poller thread."""

    def __init__(
        self,
        notify: Callable[[], object],
        latest_sample: Callable[[], RigSample | None],
        *,
        poll_interval_s: float = POLL_INTERVAL_S,
        policy: LaunchPolicy = ANY_LAUNCH,
    ) -> None:
        self.state = LaunchState()
        self.policy = policy
        self.lock = threading.RLock()
        self._notify = notify
        self._latest_sample = latest_sample
        self._interval = poll_interval_s
        self._session: LaunchSession | RouterSession | None = None
        self._router: RouterWatch | None = None
        self._client: LlamaServerClient | None = None
        self._poll_stop = threading.Event()
        self._poll_thread: threading.Thread | None = None
        self._jpt = JoulesPerToken()
        self._folder = RepeatFolder()  # the log pane shows a run of one message once
        self._timings = TimingReader()
        self._last_command: LaunchRequest | RouterRequest | None = None
        self._op = threading.Lock()
        self._jpt_gpus: frozenset[int] = frozenset()
        self._speed: SpeedWatch | None = None

    # -- starting and stopping (called on worker threads by the app) --------------------------
    # Start, stop, restart and follow run on worker threads; one at a time, so a Stop
    # pressed while a server is starting waits for it and stops it.
    def start(self, request: LaunchRequest | RouterRequest, *, force: bool = False) -> None:
        """Start a server or a router; one server fit says will not fit is refused
        (``state.refused_plan``) unless ``force`` (a router's loads are gated by its plan)."""
        if self._refused():
            return
        with self._op:
            if isinstance(request, RouterRequest):
                self._start_router(request)
            else:
                self._start(request, force=force)

    def fail(self, message: str) -> None:
        """A launch that could not even be asked for (a form that does not read): said."""
        with self._op:
            self._stop()
            with self.lock:
                self.state = LaunchState(phase="error", message=message)
            self._notify()

    def restart(self) -> None:
        if self._refused():
            return
        with self._op:
            last = self._last_command
            if isinstance(last, RouterRequest):
                self._start_router(last)
            elif last is not None:
                self._start(last)

    def force(self) -> None:
        """Start the request fit refused, as asked: it may not fit."""
        if self._refused():
            return
        with self._op:
            if isinstance(self._last_command, LaunchRequest):
                self._start(self._last_command, force=True)

    def follow(self, url: str) -> None:
        """Watch a llama-server started elsewhere: HTTP only, no process of ours."""
        if self._refused():
            return
        with self._op:
            self._follow(url)

    def stop(self) -> None:
        if self._refused():
            return
        with self._op:
            self._stop()

    def _refused(self) -> bool:
        """A read-only app acts on no server: said in the state, and True."""
        if self.policy.allowed:
            return False
        with self.lock:
            self.state = LaunchState(phase="error", message=self.policy.refusal(()) or "")
        self._notify()
        return True

    def _start(self, request: LaunchRequest, *, force: bool = False) -> None:
        self._stop()
        with self.lock:
            self.state = LaunchState(phase="starting", message="starting llama-server…")
            self._jpt = JoulesPerToken()
            self._folder = RepeatFolder()
            self._timings = TimingReader()
        self._notify()
        notes: list[Note] = []
        session: LaunchSession | None = None
        try:
            session = LaunchSession(
                request,
                policy=self.policy,
                on_note=notes.append,
                on_line=self._on_line,
                on_event=self._on_event,
            )
            prepared = session.prepare(plan="force" if force else "refuse")
            session.start()
        except LaunchError as exc:
            if session is not None:
                session.close()
            with self.lock:
                self.state.phase = "error"
                self.state.message = str(exc)
                self.state.refused_plan = str(exc).startswith("does not fit")
                self._last_command = request  # what "start anyway" starts
            self._notify()
            return
        self._last_command = request
        url = prepared.url or prepared.spec.url
        with self.lock:
            self._session = session
            self.state.url = url
            self.state.pid = session.pid
            self.state.argv = prepared.command.display_argv()
            self.state.phase = "loading"
            self.state.message = "; ".join(
                [f"loading {prepared.spec.model}", *(n.text for n in notes if n.level != "note")]
            )
        self._start_polling(url, api_key=prepared.http_key)
        self._notify()
        sample = self._latest_sample()
        # a simulated rig's GPUs are not what the server runs on: it runs on this host
        real = sample if sample is not None and not sample.simulated else None
        self._speed = SpeedWatch.for_sample(
            prepared.spec.args,
            real,
            pid=lambda: session.pid,
            gpu_busy=lambda: gpu_busy_of_others(self._latest_sample(), session.pid),
        )
        predicted = predict_speed(prepared.spec.args, real) if real is not None else None
        if predicted is None and self._speed is not None:
            predicted = (
                self._speed.predict(False, 0, 128) or 0.0,
                self._speed.predict(True, 0, 512) or 0.0,
            )
        if predicted is not None:
            with self.lock:
                self.state.predicted_decode_tps, self.state.predicted_prefill_tps = predicted
            self._notify()

    def _start_router(self, request: RouterRequest) -> None:
        """A router: its models planned, its preset written, started; the kept models and
        the ones asked for load once it is ready (on the poller's thread)."""
        from lltui.services.router import RouterSession
        from lltui.services.router_watch import RouterWatch

        self._stop()
        with self.lock:
            self.state = LaunchState(phase="starting", message="starting the router…")
            self._folder = RepeatFolder()
        self._notify()
        notes: list[Note] = []
        session = RouterSession(
            request,
            policy=self.policy,
            on_note=notes.append,
            on_line=self._on_line,
            on_event=self._on_event,
        )
        try:
            prepared = session.prepare()
            session.start()
        except LaunchError as exc:
            session.close()
            with self.lock:
                self.state.phase = "error"
                self.state.message = "; ".join([str(exc), *(n.text for n in notes)])
            self._notify()
            return
        self._last_command = request
        url = prepared.launch.spec.url
        with self.lock:
            self._session = session
            self._router = RouterWatch(session)
            self.state.url = url
            self.state.pid = session.pid
            self.state.argv = prepared.launch.command.display_argv()
            self.state.phase = "loading"
            self.state.message = "; ".join(
                [f"router for {', '.join(prepared.names)}", *(n.text for n in notes)]
            )
        self._start_polling(url, api_key=prepared.launch.http_key)
        self._notify()

    def router_action(self, what: str, name: str) -> None:
        """Load, unload, keep or unkeep a model of the router (on a worker thread): a load
        the plan refuses is said, with what to unload."""
        from lltui.services.router import RouterRefused, RouterSession

        if self._refused():
            return
        session = self._session
        if not isinstance(session, RouterSession):
            return
        try:
            if what == "load":
                session.load(name)
                said = f"loading {name}"
            elif what == "unload":
                session.unload(name)
                said = f"unloading {name}"
            else:
                session.keep(name, what == "keep")
                said = f"{name} {'kept' if what == 'keep' else 'no longer kept'}"
        except RouterRefused as exc:
            said = f"refused: {exc}"
        with self.lock:
            self.state.router_note = said
            self.state.router = tuple(
                replace(r, kept=r.name in session.kept) for r in self.state.router
            )
        self._notify()

    def _follow(self, url: str) -> None:
        self._stop()
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            url = "http://" + url
        with self.lock:
            self.state = LaunchState(phase="following", url=url, message=f"following {url}")
            self._jpt = JoulesPerToken()
        self._start_polling(url, api_key=None)
        self._notify()

    def _stop(self) -> None:
        self._poll_stop.set()
        thread = self._poll_thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)
        self._poll_thread = None
        if self._router is not None:
            self._router.close()
            self._router = None
        session = self._session
        if session is not None:
            with self.lock:
                self.state.phase = "stopping"
            self._notify()
            try:
                result = session.stop()
            finally:
                session.close()
            with self.lock:
                self._session = None
                self._record_exit(result)
            self._notify()
        client = self._client
        if client is not None:
            client.close()
            self._client = None

    def close(self) -> None:
        """On the way out of lltui: nothing of ours outlives it."""
        with self._op:
            self._stop()

    # -- watching ------------------------------------------------------------------------
    def _on_event(self, _event: str) -> None:
        self._notify()

    def _on_line(self, line: str) -> None:
        watch = self._speed
        check = watch.feed(line) if watch is not None else None
        with self.lock:
            shown = self._folder.feed(line)
            self.state.lines.extend(shown)
            self.state.lines_total += len(shown)
            timings = self._timings.feed(line)
            if timings is not None:
                self.state.last_request = timings
                self.state.last_request_at = time.monotonic()
            if check is not None:
                if check.prompt:
                    self.state.served_prompt = check
                else:
                    self.state.served_generation = check
                if watch is not None and watch.stored:
                    self.state.speed_kept = "; ".join(watch.stored)
        if shown or check is not None or timings is not None:
            self._notify()

    def _record_exit(self, result: ServerExit | None) -> None:
        if result is None:
            return
        closing = self._folder.flush()
        self.state.lines.extend(closing)
        self.state.lines_total += len(closing)
        self.state.phase = "exited"
        self.state.health = None  # a server that exited answers nothing: no last answer stays
        self.state.exit_reason = result.reason
        self.state.exit_code = result.returncode
        self.state.log_tail = tuple(result.log_tail)
        self.state.message = describe_exit(result)

    def _start_polling(self, url: str, api_key: str | None) -> None:
        from lltui.sources.llama.http import LlamaServerClient

        self._client = LlamaServerClient(url, api_key=api_key)
        self._poll_stop = threading.Event()
        self._poll_thread = threading.Thread(
            target=self._poll_loop, args=(self._client, self._poll_stop), daemon=True
        )
        self._poll_thread.start()

    def _poll_loop(self, client: LlamaServerClient, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                # a router's own /metrics and /slots need a model: its models are polled apart
                whole = self._router is None
                poll = client.poll(with_metrics=whole, with_slots=whole, with_props=whole)
            except Exception as exc:  # the poller reports states; anything else is a bug
                with self.lock:
                    self.state.message = f"poll failed: {exc}"
                self._notify()
            else:
                self._take_poll(poll)
                self._poll_router()
            stop.wait(max(0.05, self._interval - (time.monotonic() - started)))

    def _poll_router(self) -> None:
        watch = self._router
        if watch is None:
            return
        try:
            rows, note = watch.poll()
        except Exception as exc:  # the poller reports states; anything else is a bug
            rows, note = self.state.router, f"router poll failed: {exc}"
        with self.lock:
            self.state.router = rows
            if note is not None:
                self.state.router_note = note
        self._notify()

    def _take_poll(self, poll: ServerPoll) -> None:
        session = self._session
        status = session.status() if session is not None else None
        check = None
        # once, as soon as one server has loaded (a router's models are checked by its plan)
        if isinstance(session, LaunchSession) and poll.ready and self.state.check is None:
            check = self._check(session)
        with self.lock:
            if check is not None:
                self.state.check = check
            st = self.state
            if status is not None:
                st.placement = tuple(status.log.placement())
                off = status.log.memory.offloaded
                if off is not None:
                    st.offload = f"offloaded {off[0]}/{off[1]} layers"
                if status.exit is not None and st.phase != "exited":
                    self._record_exit(status.exit)
                elif poll.ready:
                    st.phase = "ready"
                elif st.phase not in ("exited", "stopping"):
                    st.phase = "loading"
            elif poll.ready:
                st.message = f"following {st.url}: ready"
            else:
                st.message = f"following {st.url}: {poll.state}"
            st.health = None if st.phase == "exited" else poll.state
            tp = poll.throughput
            if tp is not None:
                if tp.generation_tps is not None:
                    st.gen_tps.append(tp.generation_tps)
                if tp.prompt_tps is not None:
                    st.prompt_tps.append(tp.prompt_tps)
                st.slots_busy = tp.busy_slots
            if poll.metrics is not None:
                st.tokens_total = poll.metrics.tokens_predicted_total
            self._energy(poll)
        self._notify()

    @staticmethod
    def _check(session: LaunchSession) -> LaunchCheck | None:
        try:
            return session.check()
        except Exception as exc:  # a prediction that fails must not stop the watching
            from lltui.services.launch_compare import LaunchCheck

            return LaunchCheck((), None, "-", 0, 0, 0, note=f"no prediction: {exc}")

    def _energy(self, poll: ServerPoll) -> None:
        """J/token from the energy counters of the GPUs this server uses."""
        st = self.state
        sample = self._latest_sample()
        if sample is None:
            st.jpt_note = "no GPU samples yet"
            return
        if sample.info.simulated:
            st.jpt_note = "the rig is simulated: no real energy counters to charge tokens with"
            return
        if st.tokens_total is None:
            st.jpt_note = "the server's /metrics gives no token counter"
            return
        pid = st.pid
        gpus = {
            g.info.index
            for g in sample.gpus
            for p in g.processes
            if pid is not None and p.pid == pid
        }
        # the set of GPUs summed must stay the same between points, or the sum jumps by
        # the lifetime counters of the GPUs that joined (a server spreading as it loads)
        key = frozenset(gpus)
        if key != self._jpt_gpus:
            self._jpt_gpus, self._jpt = key, JoulesPerToken()
        energy = rig_energy_mj(sample, gpus or None)
        if energy is None:
            st.jpt_note = "these GPUs have no energy counter (Volta and newer do)"
            return
        self._jpt.add(EnergyPoint(time.monotonic(), energy, st.tokens_total))
        value = self._jpt.value()
        st.jpt_note = None if value is not None else "no tokens generated in the last minute"
        if value is not None:
            st.jpt.append(value)

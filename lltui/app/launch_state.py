"""The launch view's model: one llama-server started (or followed) by the app, its log, its
HTTP state, tokens/s and joules per token. Blocking work runs on threads; the UI is told by a
coalescing message and reads this state under its lock."""

from __future__ import annotations

import shlex
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lltui.core.llama.launch_args import parse_llama_args
from lltui.core.llama.launch_spec import (
    LaunchCommand,
    LaunchError,
    LaunchSpec,
    build_command,
)
from lltui.core.monitor.energy import EnergyPoint, JoulesPerToken, rig_energy_mj
from lltui.core.monitor.models import RigSample

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
    placement: tuple[Any, ...] = ()  # DevicePlacement rows from the server's log
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
    exit_code: int | None = None
    log_tail: tuple[str, ...] = ()


def parse_hostport(text: str) -> tuple[str, int]:
    host, _, port = (text.strip() or DEFAULT_HOSTPORT).rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise LaunchError(f"host:port must look like 127.0.0.1:8080, got {text!r}")
    return host, int(port)


def make_spec(model: str, flags: str, hostport: str) -> LaunchSpec:
    """A LaunchSpec from the form: the model path, llama-server flags as typed, host:port."""
    try:
        words = shlex.split(flags)
    except ValueError as exc:
        raise LaunchError(f"flags: {exc}") from None
    given = parse_llama_args(words)
    if "api_key" in given:
        raise LaunchError("pass keys with --api-key-file, not on the form (they show in ps)")
    host, port = parse_hostport(hostport)
    given.setdefault("host", host)
    given.setdefault("port", port)
    if model.strip():
        given["model"] = model.strip()
    if "model" not in given:
        raise LaunchError("no model: give the path of a .gguf file")
    return LaunchSpec(**given)


def preview_command(model: str, flags: str, hostport: str) -> tuple[str, str | None]:
    """The exact command (secrets masked) the form would start, or the reason it cannot."""
    from lltui.sources.llama.launch_prep import find_binary

    try:
        spec = make_spec(model, flags, hostport)
        path, binflags, _origin, why = find_binary(required=False)
        command = build_command(spec, path, binflags)
    except (LaunchError, TypeError) as exc:
        return "", str(exc)
    note = f"flags not checked: {why}" if why else None
    return command.shell_line(), note


class LaunchController:
    """Owns at most one supervised llama-server (or a followed URL) and its poller thread."""

    def __init__(
        self,
        notify: Callable[[], object],
        latest_sample: Callable[[], RigSample | None],
        *,
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        self.state = LaunchState()
        self.lock = threading.RLock()
        self._notify = notify
        self._latest_sample = latest_sample
        self._interval = poll_interval_s
        self._sup: Any = None  # Supervisor
        self._client: Any = None  # LlamaServerClient
        self._poll_stop = threading.Event()
        self._poll_thread: threading.Thread | None = None
        self._jpt = JoulesPerToken()
        self._last_command: tuple[str, str, str] | None = None
        self._op = threading.Lock()
        self._jpt_gpus: frozenset[int] = frozenset()

    # -- starting and stopping (called on worker threads by the app) --------------------------
    # Start, stop, restart and follow run on worker threads; one at a time, so a Stop
    # pressed while a server is starting waits for it and stops it.
    def start(self, model: str, flags: str, hostport: str) -> None:
        with self._op:
            self._start(model, flags, hostport)

    def restart(self) -> None:
        with self._op:
            if self._last_command is not None:
                self._start(*self._last_command)

    def follow(self, url: str) -> None:
        """Watch a llama-server started elsewhere: HTTP only, no process of ours."""
        with self._op:
            self._follow(url)

    def stop(self) -> None:
        with self._op:
            self._stop()

    def _start(self, model: str, flags: str, hostport: str) -> None:
        from lltui.sources.llama.launch_prep import check_inputs, find_binary
        from lltui.sources.llama.supervisor import Supervisor, SupervisorError

        self._stop()
        with self.lock:
            self.state = LaunchState(phase="starting", message="starting llama-server…")
            self._jpt = JoulesPerToken()
        self._notify()
        try:
            spec = make_spec(model, flags, hostport)
            check_inputs(spec)
            path, binflags, _origin, _why = find_binary(required=True)
            command: LaunchCommand = build_command(spec, path, binflags)
            sup = Supervisor(
                command,
                url=spec.url,
                host=spec.host,
                port=spec.port,
                on_line=self._on_line,
                on_event=self._on_event,
            )
            sup.start()
        except (LaunchError, SupervisorError, TypeError, OSError) as exc:
            with self.lock:
                self.state.phase = "error"
                self.state.message = str(exc)
            self._notify()
            return
        self._last_command = (model, flags, hostport)
        with self.lock:
            self._sup = sup
            self.state.url = spec.url
            self.state.pid = sup.pid
            self.state.argv = command.display_argv()
            self.state.phase = "loading"
            self.state.message = f"loading {spec.model}"
        self._start_polling(spec.url, api_key=spec.api_key)
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
        sup = self._sup
        if sup is not None:
            with self.lock:
                self.state.phase = "stopping"
            self._notify()
            result = sup.stop()
            with self.lock:
                self._sup = None
                self._record_exit(result)
            self._notify()
        client = self._client
        if client is not None:
            client.close()
            self._client = None

    def close(self) -> None:
        """On the way out of lltui: nothing of ours outlives it."""
        self.stop()

    # -- watching ------------------------------------------------------------------------
    def _on_event(self, _event: str) -> None:
        self._notify()

    def _on_line(self, line: str) -> None:
        with self.lock:
            self.state.lines.append(line)
            self.state.lines_total += 1
        self._notify()

    def _record_exit(self, result: Any) -> None:
        if result is None:
            return
        self.state.phase = "exited"
        self.state.exit_reason = result.reason
        self.state.exit_code = result.returncode
        self.state.log_tail = tuple(result.log_tail)
        self.state.message = f"llama-server {result.reason} (exit code {result.returncode})"

    def _start_polling(self, url: str, api_key: str | None) -> None:
        from lltui.sources.llama.http import LlamaServerClient

        self._client = LlamaServerClient(url, api_key=api_key)
        self._poll_stop = threading.Event()
        self._poll_thread = threading.Thread(
            target=self._poll_loop, args=(self._client, self._poll_stop), daemon=True
        )
        self._poll_thread.start()

    def _poll_loop(self, client: Any, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                poll = client.poll()
            except Exception as exc:  # the poller reports states; anything else is a bug
                with self.lock:
                    self.state.message = f"poll failed: {exc}"
                self._notify()
            else:
                self._take_poll(poll)
            stop.wait(max(0.05, self._interval - (time.monotonic() - started)))

    def _take_poll(self, poll: Any) -> None:
        sup = self._sup
        with self.lock:
            st = self.state
            st.health = poll.state
            if sup is not None:
                status = sup.status()
                st.placement = tuple(status.log.placement())
                off = status.log.offload
                if off.layers_offloaded is not None and off.layers_total is not None:
                    st.offload = f"offloaded {off.layers_offloaded}/{off.layers_total} layers"
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

    def _energy(self, poll: Any) -> None:
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

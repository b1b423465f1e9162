"""The one watch of a launch, for ``lltui launch`` and the launch view alike: a thread that
folds the supervisor's events, the server's log lines (read once by :mod:`lltui.core.llamalog`,
taken on the reader thread, folded each tick), its HTTP answers and its served speeds into
one frozen :class:`~.state.LaunchState`, handed to a listener on each change. HTTP questions
are :class:`Poll` objects, each folding its own answer: a new one (a proxy's loads, memory
per GPU against the plan, KV fill from ``/slots``) is a new poll and a new field of the
state, not another loop."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from lltui.core.llama.timings import TimingReader
from lltui.core.llamalog.memory import PINNED_REFUSED
from lltui.core.llamalog.models import BufferSizes, LlamaLogSummary
from lltui.core.llamalog.router import RepeatFolder
from lltui.services.launch.state import LaunchState, Speed, describe_exit
from lltui.sources.llama.supervisor import ServerStatus

if TYPE_CHECKING:
    from lltui.core.speed.served import SpeedCheck
    from lltui.services.launch.compare import LaunchCheck
    from lltui.services.launch.session import Session
    from lltui.services.launch.speed import Rig, RouterSpeed, SpeedWatch

TICK_S = 0.1
PROGRESS_EVERY_S = 10.0  # a load that says nothing new is said to go on this often
CLOSE_WAIT_S = 5.0
# the supervisor's events said at once; the others (spawned, loading) wait for the next tick,
# so that a load is sampled as often as it is said to go, however fast its lines come
WAKING_EVENTS = ("ready", "exited")
Change = Callable[[LaunchState], LaunchState]
# what the state says of a phase, with what runs
PHASE_WORDS = {"starting": "loading", "loading": "loading", "ready": "serving"}


class Poll(Protocol):
    """A question the watch asks on its thread every ``interval_s``: :meth:`update` asks and
    folds the answer into the state, or returns None when there is nothing to ask yet."""

    interval_s: float

    def update(self, state: LaunchState, now: float) -> LaunchState | None: ...

    def close(self) -> None: ...


def load_steps(log: LlamaLogSummary) -> dict[str, str]:
    """The steps of a load its log shows so far, each in a line (each said once: the
    context when its compute buffers are reserved, after the KV cache)."""
    bufs = log.buffers
    weights = ", ".join(f"{b.name} {_mib(b.model_mib)} MiB" for b in bufs if b.model_mib)
    reserved = any(b.compute_mib for b in bufs)
    context = ", ".join(_context(b) for b in bufs if b.kv_mib or b.compute_mib) if reserved else ""
    steps = {
        "loading": log.memory.loads > 0 and "loading the model's weights",
        "weights": weights and f"weights placed: {weights}",
        "pinned": PINNED_REFUSED in log.memory.notes and PINNED_REFUSED,
        "context": context and f"context allocated: {context}",
        "loaded": log.model_loaded and "model loaded; warming up",
    }
    return {key: text for key, text in steps.items() if text}


def _context(b: BufferSizes) -> str:
    """A device's KV cache and compute buffer (only what it has: ``CPU KV 192 MiB``)."""
    parts = [f"KV {_mib(b.kv_mib)}"] if b.kv_mib else []
    parts += [f"compute {_mib(b.compute_mib)}"] if b.compute_mib else []
    return f"{b.name} {' + '.join(parts)} MiB"


def _mib(x: float) -> str:
    """Whole MiB, but a buffer under one MiB to two decimals (a 0.5 MiB KV cache read 'KV 0')."""
    return f"{x:.0f}" if x >= 1 else f"{x:.2f}"


class LoadProgress:
    """How loading goes: each step once, and how long it has been at it every so often (a
    big model takes minutes and must not look hung)."""

    def __init__(self, t0: float) -> None:
        self.t0 = self.last = t0
        self.said: set[str] = set()

    def lines(self, log: LlamaLogSummary | None, now: float) -> list[str]:
        steps = load_steps(log) if log is not None else {}
        out = [text for key, text in steps.items() if key not in self.said]
        self.said |= steps.keys()
        if not out and now - self.last >= PROGRESS_EVERY_S:
            out.append(f"still loading ({now - self.t0:.0f} s)")
        if out:
            self.last = now
        return out


class LaunchWatch:
    """Watches one session's server (or, with no session, a server followed over HTTP) and
    calls ``on_change`` with each new state, on its own thread (``on_end`` once it ends:
    the server's exit folded, or :meth:`close`)."""

    def __init__(
        self,
        session: Session | None,
        on_change: Callable[[LaunchState], object],
        *,
        state: LaunchState | None = None,
        polls: Sequence[Poll] = (),
        rig: Rig | None = None,
        tick_s: float = TICK_S,
        on_end: Callable[[], object] | None = None,
    ) -> None:
        self._session = session
        self._on_change = on_change
        self._on_end = on_end
        self._state = state if state is not None else LaunchState()
        self._polls = list(polls)
        self._due = [0.0] * len(self._polls)
        self._rig = rig
        self._tick = tick_s
        self._inbox = threading.Lock()  # guards what the reader thread hands over
        self._lines: list[str] = []
        self._served: list[SpeedCheck] = []
        self._posted: list[Change] = []
        self._fresh = True  # the supervisor said something since the last fold
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._folder = RepeatFolder()  # the log shows a run of one message once
        self._timings = TimingReader()
        self._speed: SpeedWatch | RouterSpeed | None = None
        self._progress = LoadProgress(time.monotonic())

    @property
    def state(self) -> LaunchState:
        return self._state

    def start(self, *, keep_running: bool = False) -> None:
        """Start the session's server with this watch listening, then watch it (no session:
        follow a server started elsewhere, by the polls alone). Raises the session's
        LaunchError when it cannot start (nothing runs then)."""
        session = self._session
        if session is None:
            self._emit(self._state, force=True)
            return self._run()
        self._speed = _speed_watch(session, self._rig)
        session.start(keep_running=keep_running, on_line=self._line, on_event=self._event)
        prepared = session.launch
        self._progress = LoadProgress(time.monotonic())
        self._state = _phase(
            replace(
                self._state,
                url=prepared.url or prepared.spec.url,
                pid=session.pid,
                argv=tuple(prepared.command.display_argv()),
                subject=session.subject,
                notes=tuple(n.text for n in session.notes if n.level != "note"),
                speed=self._predicted(),
            ),
            "loading",
        )
        self._emit(self._state, force=True)
        self._run()

    def _predicted(self) -> Speed:
        """What is predicted for the command at the start of a context, beside which the
        measured rates are shown (each request is held against its own size's)."""
        speed = self._speed
        if speed is None:
            return self._state.speed
        decode, prefill = speed.predict(False, 0, 128), speed.predict(True, 0, 512)
        # (None where nothing is predicted: a router's models each have their own; it read
        # "predicted ~0 tok/s")
        return replace(
            self._state.speed,
            predicted_decode_tps=decode or None,
            predicted_prefill_tps=prefill or None,
            calibrated=speed.calibrated,
        )

    def _run(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="launch watch", daemon=True)
        self._thread.start()

    def _line(self, line: str) -> None:
        """A log line, on the supervisor's reader thread: kept for the next fold, and timed
        against the prediction here, as it is read (the host's load is measured from then)."""
        check = self._speed.feed(line) if self._speed is not None else None
        with self._inbox:
            self._lines.append(line)
            if check is not None:
                self._served.append(check)

    def _event(self, event: str) -> None:
        with self._inbox:
            self._fresh = True
        if event in WAKING_EVENTS:
            self._wake.set()

    def post(self, change: Change) -> None:
        """A change to make on the watch's thread (a front end's action said in the state)."""
        with self._inbox:
            self._posted.append(change)
        self._wake.set()

    def _loop(self) -> None:
        try:
            while True:
                closing = self._closing.is_set()
                self._fold_inbox(time.monotonic())
                if not closing and self._state.exit is None:
                    self._ask_polls()
                if closing or self._state.exit is not None:
                    return
                self._wake.wait(self._tick)
                self._wake.clear()
        finally:
            if self._on_end is not None:
                self._on_end()

    def _fold_inbox(self, now: float) -> None:
        with self._inbox:
            lines, self._lines = self._lines, []
            served, self._served = self._served, []
            posted, self._posted = self._posted, []
            fresh, self._fresh = self._fresh or bool(lines), False
        st = self._state
        if lines:
            st = self._fold_lines(st, lines, now)
        if served:
            kept = "; ".join(self._speed.stored) if self._speed and self._speed.stored else None
            st = replace(st, speed=replace(st.speed, served=st.speed.served.add(served), kept=kept))
        if self._session is not None and st.exit is None:
            st = self._fold_server(st, now, fresh)
        for change in posted:
            st = change(st)
        self._emit(st)

    def _fold_lines(self, st: LaunchState, lines: list[str], now: float) -> LaunchState:
        shown = [out for line in lines for out in self._folder.feed(line)]
        timed = [t for t in map(self._timings.feed, lines) if t is not None]
        if timed:
            st = replace(st, speed=replace(st.speed, last_request=timed[-1], last_request_at=now))
        return replace(st, log=st.log.add(shown)) if shown else st

    def _fold_server(self, st: LaunchState, now: float, fresh: bool) -> LaunchState:
        """The supervisor's word: the phase, where the model went, how loading goes, the
        comparison once ready, how it ended."""
        session = self._session
        assert session is not None
        if not fresh:  # nothing new was said: only a long load's "still loading"
            if st.ready_at is None and st.phase in ("starting", "loading"):
                st = replace(st, progress=st.progress.add(self._progress.lines(None, now)))
            return st
        ready = session.is_ready  # (asked first: the log read next has all it said by then)
        status = session.status()
        if status is None:
            return st
        st = self._fold_log(st, status)
        if st.ready_at is None:  # every step the log shows, however few ticks the load took
            st = replace(st, progress=st.progress.add(self._progress.lines(status.log, now)))
            if ready:
                st = replace(st, ready_at=now, check=_loaded_check(session))
        if status.exit is not None:
            ended = session.judged_exit(status.exit)
            return replace(
                st,
                phase="exited",
                health=None,  # a server that exited answers nothing: no last answer stays
                exit=ended,
                message=describe_exit(ended),
                log=st.log.add(self._folder.flush()),
            )
        return _phase(st, status.state)

    @staticmethod
    def _fold_log(st: LaunchState, status: ServerStatus) -> LaunchState:
        log = status.log
        off = log.memory.offloaded
        return replace(
            st,
            log_summary=log,
            placement=tuple(log.placement()),
            offload=f"offloaded {off[0]}/{off[1]} layers" if off is not None else st.offload,
        )

    def _ask_polls(self) -> None:
        for i, poll in enumerate(self._polls):
            now = time.monotonic()
            if now < self._due[i]:
                continue
            try:
                new = poll.update(self._state, now)
            except Exception as exc:  # a poll reports states; anything else is a bug, said
                new = replace(self._state, message=f"poll failed: {exc}")
            if new is not None:
                self._due[i] = now + poll.interval_s
                self._emit(new)

    def _emit(self, st: LaunchState, *, force: bool = False) -> None:
        if st is self._state and not force:
            return
        self._state = st
        with contextlib.suppress(Exception):  # a listener that fails must not end the watch
            self._on_change(st)

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Stop watching (what was said last is folded first)."""
        self._closing.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        for poll in self._polls:
            with contextlib.suppress(Exception):
                poll.close()


def _phase(st: LaunchState, phase: str) -> LaunchState:
    """The state in ``phase``, its message saying so (and the warnings said at the start)."""
    if phase == st.phase:
        return st
    words = PHASE_WORDS.get(phase, phase)
    return replace(st, phase=phase, message="; ".join([f"{words} {st.subject}", *st.notes]))


def _loaded_check(session: Session) -> LaunchCheck | None:
    try:
        return session.loaded_check()
    except Exception as exc:  # a prediction that fails must not stop the watching
        from lltui.services.launch.compare import LaunchCheck

        return LaunchCheck((), None, "-", 0, 0, 0, note=f"no prediction: {exc}")


def _speed_watch(session: Session, rig: Rig | None) -> SpeedWatch | RouterSpeed | None:
    """Served requests timed against the prediction for one server's command, or for each
    of a router's models, its command as the plan pins it."""
    from lltui.services.launch.router import RouterSession
    from lltui.services.launch.speed import RouterSpeed, SpeedWatch

    if isinstance(session, RouterSession):
        return RouterSpeed(session.prepared.report)
    return SpeedWatch.for_rig(session.launch.spec.args, rig, lambda: session.pid)

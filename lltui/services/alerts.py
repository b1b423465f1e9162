"""Alerts as a use case: watch a rig (one source or a fleet) and the llama-servers followed,
say what changed, and run the hooks a config names.

``lltui watch`` and the monitor both use it: :class:`AlertWatch` does one round at a time
(poll, evaluate, hooks), :class:`HookRunner` queues the hooks of each change and runs each
hook's argv (no shell) with the alert in its environment, in a process group of its own
stopped whole when it outlives its timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from lltui.core.cmdline.address import public_url
from lltui.core.monitor.alert_settings import AlertConfig, AlertHook
from lltui.core.monitor.alerts import (
    Alert,
    AlertChange,
    AlertTracker,
    HostStatus,
    LlamaStatus,
    change_to_json,
)
from lltui.core.monitor.fleet import alert_inputs, simulated_hosts
from lltui.core.monitor.models import RigInfo, RigSample, SourceUnavailable
from lltui.core.text import error_text, printable
from lltui.services.follow import FollowState, FoundServers, ServerFollow
from lltui.services.rig import Rig, RigRequest, kind_of, open_rig, source_statuses
from lltui.sources.proc_group import dies_with_us, group_gone, stop_process

MAX_RUNNING_HOOKS = 4  # a storm of alerts runs at most this many commands at once
MAX_QUEUED_HOOKS = 256  # and keeps at most this many waiting (oldest first)
KILL_GRACE_S = 1.0  # after SIGTERM, before SIGKILL
CANCEL_CHECK_S = 0.25  # how often a running hook looks whether the runner is closing


@dataclass(frozen=True, slots=True)
class HookResult:
    """How one hook run ended: its exit code, or killed after its timeout, or not started."""

    argv: tuple[str, ...]
    code: int | None
    timed_out: bool = False
    error: str | None = None

    @property
    def line(self) -> str:
        """One line to print: the program's name is the config's, so escaped."""
        if not self.argv:  # about the hooks, not one of them
            return f"alert hooks: {self.error}"
        name = os.path.basename(self.argv[0]) or self.argv[0]
        if self.error:
            text = f"alert hook {name}: {self.error}"
        elif self.timed_out:
            text = f"alert hook {name}: killed after its timeout"
        else:
            text = f"alert hook {name}: exit {self.code}"
        return printable(text[:300], one_line=True)


def hook_environment(change: AlertChange) -> dict[str, str]:
    """What a hook is told: ``LLTUI_ALERT_*`` variables and the change as JSON."""
    a = change.alert
    env = {
        "LLTUI_ALERT_EVENT": change.event,
        "LLTUI_ALERT_KIND": a.kind,
        "LLTUI_ALERT_SEVERITY": a.severity,
        "LLTUI_ALERT_SUBJECT": a.subject,
        "LLTUI_ALERT_MESSAGE": a.message,
        "LLTUI_ALERT_SINCE": f"{a.since:.0f}",
        "LLTUI_ALERT_JSON": json.dumps(change_to_json(change)),
    }
    for key, value in (
        ("LLTUI_ALERT_HOST", a.host),
        ("LLTUI_ALERT_GPU", None if a.gpu_index is None else str(a.gpu_index)),
        ("LLTUI_ALERT_UUID", a.gpu_uuid),
        ("LLTUI_ALERT_SERVER", a.server),
    ):
        if value is not None:
            env[key] = value
    return env


def _program(word: str) -> str:
    """The path of the hook's program, as exec would find it; OSError (with its reason)
    where there is none to run."""
    found = shutil.which(word)
    if found is not None:
        return found
    os.stat(word)  # no such file, or no permission to look: its own reason
    raise PermissionError(13, "not an executable program")


def run_hook(
    hook: AlertHook,
    change: AlertChange,
    timeout_s: float,
    coalesced: int = 0,
    cancel: threading.Event | None = None,
) -> HookResult:
    """Run one hook and wait, at most ``timeout_s`` (or until ``cancel`` is set), for it and
    everything it started in its process group (a child left in the background too); then
    the whole group is stopped (SIGTERM, SIGKILL a second later). ``coalesced``: the
    changes folded into this one, told to the hook as ``LLTUI_ALERT_COALESCED``."""
    env = dict(os.environ, **hook_environment(change))
    env["LLTUI_ALERT_COALESCED"] = str(coalesced)
    try:
        program = _program(hook.argv[0])  # the shim execs a path
        proc = subprocess.Popen(
            dies_with_us([program, *hook.argv[1:]], isolated=True),  # gone with lltui, KILL too
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own group: what it starts is stopped with it
        )
    except (OSError, ValueError) as exc:  # ValueError: a NUL in a word
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return HookResult(hook.argv, None, error=f"cannot run: {why}")
    ended = group_gone(proc)
    deadline = time.monotonic() + timeout_s
    while not ended(min(CANCEL_CHECK_S, max(0.0, deadline - time.monotonic()))):
        if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
            break
    else:
        return HookResult(hook.argv, proc.returncode)
    steps = ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S))
    if time.monotonic() < deadline:  # the runner is closing, not this hook's timeout
        return HookResult(hook.argv, stop_process(proc, steps), error="stopped (closing)")
    return HookResult(hook.argv, stop_process(proc, steps), timed_out=True)


@dataclass(slots=True)
class _Job:
    hook: AlertHook
    change: AlertChange
    coalesced: int = 0  # later changes of the same alert folded into this one


def _job_key(hook: AlertHook, change: AlertChange) -> tuple[object, ...]:
    """One alert (kind, subject, where) for one hook: what a newer change replaces."""
    a = change.alert
    return (hook, a.kind, a.subject, a.host, a.gpu_index, a.gpu_uuid, a.server)


class HookRunner:
    """Runs the hooks of each change off the caller's thread: queued oldest first, at most
    ``max_running`` at once, each bounded by the config's timeout (so one that hangs holds
    one slot until then, never the rest). A change of an alert whose hook is still waiting
    replaces it (counted in ``coalesced`` and told to the hook); past ``max_queued`` waiting,
    a hook is dropped (counted, and ``on_result`` hears it). ``on_result`` also hears each
    run that failed or timed out."""

    def __init__(
        self,
        config: AlertConfig,
        on_result: Callable[[HookResult], None] | None = None,
        *,
        max_running: int = MAX_RUNNING_HOOKS,
        max_queued: int = MAX_QUEUED_HOOKS,
    ) -> None:
        self.config = config
        self._on_result = on_result
        self._max_running = max_running
        self._max_queued = max_queued
        self._queue: OrderedDict[tuple[object, ...], _Job] = OrderedDict()
        self._lock = threading.Condition()
        self._workers: list[threading.Thread] = []
        self._running = 0
        self._running_by_hook: Counter[AlertHook] = Counter()
        self._closed = False
        self._closing = threading.Event()  # running hooks are stopped now
        self.started = self.coalesced = self.dropped = 0

    def fire(self, changes: Sequence[AlertChange]) -> None:
        """Queue the hooks of these changes (never blocks on a hook)."""
        refused: list[HookResult] = []
        with self._lock:
            for change in changes:
                for hook in self.config.hooks_for(change.alert.kind):
                    result = self._enqueue(hook, change)
                    if result is not None:
                        refused.append(result)
            self._lock.notify_all()
        for result in refused:
            self._report(result)

    def _enqueue(self, hook: AlertHook, change: AlertChange) -> HookResult | None:
        key = _job_key(hook, change)
        queued = self._queue.get(key)
        if queued is not None:  # keeps its place in line; runs with the newest change
            queued.change, queued.coalesced = change, queued.coalesced + 1
            self.coalesced += 1
            return None
        if self._closed or len(self._queue) >= self._max_queued:
            self.dropped += 1
            why = "closing" if self._closed else f"{len(self._queue)} already waiting"
            return HookResult(hook.argv, None, error=f"dropped ({why})")
        self._queue[key] = _Job(hook, change)
        if len(self._workers) < self._max_running:
            worker = threading.Thread(target=self._work, name="lltui-alert-hook", daemon=True)
            self._workers.append(worker)
            worker.start()
        return None

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    if self._closed:
                        return
                    self._lock.wait()
                job = self._next_job()
                self._running += 1
                self._running_by_hook[job.hook] += 1
                self.started += 1
            try:
                self._report(
                    run_hook(
                        job.hook,
                        job.change,
                        self.config.hook_timeout_s,
                        job.coalesced,
                        self._closing,
                    )
                )
            finally:
                with self._lock:
                    self._running -= 1
                    self._running_by_hook[job.hook] -= 1
                    self._lock.notify_all()

    def _next_job(self) -> _Job:
        """The oldest waiting job of the hook with the fewest runs going: a hook that hangs
        holds a slot per run until its timeout, and the other hooks take the next ones."""
        busy = self._running_by_hook
        key = min(self._queue, key=lambda k: busy[self._queue[k].hook])  # first of equals
        return self._queue.pop(key)

    def _report(self, result: HookResult) -> None:
        if self._on_result is not None and (result.code != 0 or result.timed_out):
            # a listener that fails (a closed stderr) must not end a worker: the queue stalls
            with contextlib.suppress(Exception):
                self._on_result(result)

    @property
    def pending(self) -> int:
        """Hooks waiting or running now."""
        with self._lock:
            return len(self._queue) + self._running

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait until every hook queued has run (each bounded by its timeout); whether they
        all had within ``timeout_s``."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._queue and not self._running, timeout_s)

    def drain(self) -> bool:
        """Wait for the hooks waiting and running, at most one hook's timeout (and the kill's
        grace): quick ones all run, hung ones hold the end no longer; whether they all ran."""
        return self.wait(self.config.hook_timeout_s + 2 * KILL_GRACE_S)

    def close(self, timeout_s: float | None = None) -> None:
        """Drop the hooks still waiting (one line names the alerts they were to announce),
        stop those running (their whole groups) and wait for that: none outlives the
        caller."""
        self._closing.set()
        with self._lock:
            self._closed = True
            dropped = list(self._queue.values())
            self._queue.clear()
            self.dropped += len(dropped)
            self._lock.notify_all()
        if dropped:
            alerts = dict.fromkeys(f"{j.change.alert.kind} {j.change.alert.where}" for j in dropped)
            why = f"{len(dropped)} waiting not run (closing); not announced: {', '.join(alerts)}"
            self._report(HookResult((), None, error=printable(why, one_line=True)))
        self.wait(timeout_s)


@dataclass(frozen=True)
class WatchRequest:
    """What ``lltui watch`` watches: a rig, the llama-servers to follow, thresholds, hooks."""

    rig: RigRequest
    llama: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)
    config: AlertConfig = field(default_factory=AlertConfig)
    once: bool = False
    llama_timeout_s: float = 2.0


@dataclass(frozen=True, slots=True)
class ServerRound:
    """A llama-server watched (named by ``--llama``, or found on the GPUs): its plan beside
    its process and its KV fill, this round."""

    server: str  # its URL without credentials (a found one: the URL its command line gives)
    follow: FollowState


@dataclass(frozen=True, slots=True)
class WatchRound:
    """One round: what changed, the alerts raised now, whether the source ended (a
    recording played to its end) and the source's problem, if any; the servers watched."""

    changes: tuple[AlertChange, ...]
    active: tuple[Alert, ...]
    ended: bool = False
    error: str | None = None
    servers: tuple[ServerRound, ...] = ()


class AlertWatch:
    """Opens what a :class:`WatchRequest` names and evaluates it a round at a time."""

    def __init__(self, request: WatchRequest, *, wall: Callable[[], float] = time.time) -> None:
        self.request = request
        self._wall = wall
        self.tracker = AlertTracker(request.config.thresholds, instant=request.once)
        self._rig: Rig = open_rig(request.rig)  # SourceUnavailable / ValueError: one line
        from lltui.sources.llama.http import LlamaServerClient

        self._clients = [
            LlamaServerClient(url, api_key=request.api_key, timeout_s=request.llama_timeout_s)
            for url in request.llama
        ]
        # a watch that goes on makes plans aside (its rounds keep their pace); --once waits
        aside = not request.once
        self._follows = [ServerFollow(url, background=aside) for url in request.llama]
        self._found = FoundServers(background=aside)  # this user's, that no --llama names

    @property
    def info(self) -> RigInfo:
        """The rig watched (a fleet: its first host), simulated or not and why."""
        return self._rig.info

    @property
    def simulated(self) -> bool:
        return self.simulated_info is not None

    @property
    def simulated_info(self) -> RigInfo | None:
        """The rig where it is simulated (a fleet: its simulated hosts together, once they
        answered: its first host's info was a placeholder, never simulated); else None."""
        fleet = self._rig.fleet
        if fleet is None:
            return self._rig.info if self._rig.info.simulated else None
        return simulated_hosts(fleet.snapshot())

    @property
    def source(self) -> str:
        """What is watched: the rig's source; a fleet's every host, as ``gpus --json`` says
        it (its first host alone read as the one rig watched)."""
        fleet = self._rig.fleet
        if fleet is None:
            return self._rig.info.source
        return ",".join(h.source for h in fleet.snapshot().hosts)

    def round(self) -> WatchRound:
        """Poll the rig (every host of a fleet) and the llama-servers once; evaluate. What
        changed over every sample :meth:`rounds` evaluates, the rest as after the last."""
        *earlier, last = self.rounds()
        return replace(last, changes=tuple(c for r in (*earlier, last) for c in r.changes))

    def rounds(self) -> tuple[WatchRound, ...]:
        """Poll the rig (every host of a fleet) and the llama-servers once; evaluate, one
        round per sample: a replay's every sample due since the last poll (a timed replay
        faster than the polls would pass over some, and the alerts in them), else one. The
        samples passed over are the rig's alone; the last round is the whole poll."""
        rigs: dict[str | None, RigSample] = {}
        hosts: list[HostStatus] | None = None
        ended = False
        error = failed = None
        now = self._wall()
        passed: list[WatchRound] = []
        fleet = self._rig.fleet
        if fleet is not None:
            rigs, hosts = alert_inputs(fleet.poll_once(), self.request.rig.interval_s, once=True)
        else:
            try:
                *skipped, sample = self._poll()
            except SourceUnavailable as exc:
                error = failed = str(exc)
            else:
                for earlier in skipped:  # recorded: its alerts at its own times
                    changes = self.tracker.update(earlier.wall, rigs={None: earlier})
                    passed.append(WatchRound(changes, self.tracker.active, error=earlier.error))
                rigs[None] = sample
                ended = sample.ended
                error = sample.error if not sample.ended else None
                failed = error if not sample.gpus else None  # no GPU at all, and why
                if kind_of(self._rig.source.name).recorded:
                    now = sample.wall  # a recording's alerts happened at its own times
        one = rigs.get(None)
        servers = [self._llama_status(i, one) for i in range(len(self._clients))]
        llama = [status for status, _ in servers] or None
        watched = [r for _, r in servers]
        if one is not None:
            skip = {r.follow.pid for r in watched}
            watched += [ServerRound(n, f) for n, f in self._found.fold(one, skip)]
        plans = [r.follow.plan for r in watched if r.follow.plan is not None]
        # no real GPU where one was expected is critical, a simulated rig asked for is not
        sources = None
        if fleet is None:
            sources = source_statuses(self.request.rig.source, self._rig.info, failed)
        changes = self.tracker.update(
            now, rigs=rigs, llama=llama, hosts=hosts, sources=sources, plans=plans
        )
        return (*passed, WatchRound(changes, self.tracker.active, ended, error, tuple(watched)))

    def _poll(self) -> tuple[RigSample, ...]:
        """The one rig's samples this poll: a replay's every one due since the last."""
        from lltui.sources.gpu.replay import ReplaySource

        source = self._rig.source
        return source.poll_all() if isinstance(source, ReplaySource) else (source.poll(),)

    def _llama_status(self, i: int, sample: RigSample | None) -> tuple[LlamaStatus, ServerRound]:
        """A followed server's health, and its plan and KV fill this round."""
        url, follow = public_url(self.request.llama[i]), self._follows[i]
        try:
            poll = self._clients[i].poll()
        except Exception as exc:  # the client bounds every call; this is a last guard
            status, slots, t = LlamaStatus(url, "down", error_text(exc)), None, time.monotonic()
        else:
            status, slots, t = LlamaStatus(url, poll.state, poll.message), poll.slots, poll.t
        return status, ServerRound(url, follow.fold(sample, slots, t))

    def close(self) -> None:
        for client in self._clients:
            client.close()
        if self._rig.fleet is not None:
            self._rig.fleet.close()
        self._rig.source.close()

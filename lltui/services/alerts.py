"""Alerts as a use case: watch a rig (one source or a fleet) and the llama-servers followed,
say what changed, and run the hooks a config names.

``lltui watch`` and the monitor both use it: :class:`AlertWatch` does one round at a time
(poll, evaluate, hooks), :class:`HookRunner` runs a hook's argv (no shell) with the alert in
its environment, each in its own process group, killed when it outlives its timeout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lltui.core.llama.address import public_url
from lltui.core.monitor.alerts import (
    Alert,
    AlertChange,
    AlertConfig,
    AlertHook,
    AlertTracker,
    HostStatus,
    LlamaStatus,
    SourceStatus,
    change_to_json,
    source_problem,
)
from lltui.core.monitor.fleet import status_of
from lltui.core.monitor.models import RigInfo, RigSample, SourceUnavailable
from lltui.core.text import error_text
from lltui.services.rig import Rig, RigRequest, kind_of, open_rig

MAX_RUNNING_HOOKS = 4  # a storm of alerts starts at most this many commands at once
KILL_GRACE_S = 1.0  # after SIGTERM, before SIGKILL


@dataclass(frozen=True, slots=True)
class HookResult:
    """How one hook run ended: its exit code, or killed after its timeout, or not started."""

    argv: tuple[str, ...]
    code: int | None
    timed_out: bool = False
    error: str | None = None

    @property
    def line(self) -> str:
        name = os.path.basename(self.argv[0]) if self.argv else "?"
        if self.error:
            return f"alert hook {name}: {self.error}"
        if self.timed_out:
            return f"alert hook {name}: killed after its timeout"
        return f"alert hook {name}: exit {self.code}"


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


def run_hook(hook: AlertHook, change: AlertChange, timeout_s: float) -> HookResult:
    """Run one hook and wait for it, at most ``timeout_s``: then its whole process group is
    sent SIGTERM, and SIGKILL a second later."""
    env = dict(os.environ, **hook_environment(change))
    try:
        proc = subprocess.Popen(
            list(hook.argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own group: a timeout kills what it started too
        )
    except OSError as exc:
        return HookResult(hook.argv, None, error=f"cannot run: {exc.strerror or exc}")
    try:
        return HookResult(hook.argv, proc.wait(timeout_s))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return HookResult(hook.argv, proc.returncode, timed_out=True)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(KILL_GRACE_S)
            # the leader is gone; what it started may not be
            if sig == signal.SIGTERM:
                os.killpg(proc.pid, signal.SIGKILL)
            break
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            break
    if proc.poll() is None:
        proc.wait()


class HookRunner:
    """Runs the hooks of each change on threads of their own, at most
    :data:`MAX_RUNNING_HOOKS` at once (more are dropped and said so); ``on_result`` hears
    how each ended (a failure or a timeout worth a line)."""

    def __init__(
        self, config: AlertConfig, on_result: Callable[[HookResult], None] | None = None
    ) -> None:
        self.config = config
        self._on_result = on_result
        self._slots = threading.BoundedSemaphore(MAX_RUNNING_HOOKS)
        self._threads: list[threading.Thread] = []
        self.dropped = 0

    def fire(self, changes: Sequence[AlertChange]) -> None:
        for change in changes:
            for hook in self.config.hooks_for(change.alert.kind):
                if not self._slots.acquire(blocking=False):
                    self.dropped += 1
                    self._report(HookResult(hook.argv, None, error="too many hooks running"))
                    continue
                thread = threading.Thread(
                    target=self._run, args=(hook, change), name="lltui-alert-hook", daemon=True
                )
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
                thread.start()

    def _run(self, hook: AlertHook, change: AlertChange) -> None:
        try:
            self._report(run_hook(hook, change, self.config.hook_timeout_s))
        finally:
            self._slots.release()

    def _report(self, result: HookResult) -> None:
        if self._on_result is not None and (result.code != 0 or result.timed_out):
            self._on_result(result)

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for the hooks running now (each is bounded by its own timeout)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in list(self._threads):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            thread.join(left)


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
class WatchRound:
    """One round: what changed, the alerts raised now, whether the source ended (a
    recording played to its end) and the source's problem, if any."""

    changes: tuple[AlertChange, ...]
    active: tuple[Alert, ...]
    ended: bool = False
    error: str | None = None


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

    @property
    def info(self) -> RigInfo:
        """The rig watched (a fleet: its first host), simulated or not and why."""
        return self._rig.info

    @property
    def simulated(self) -> bool:
        return self._rig.info.simulated

    def round(self) -> WatchRound:
        """Poll the rig (every host of a fleet) and the llama-servers once; evaluate."""
        rigs: dict[str | None, RigSample] = {}
        hosts: list[HostStatus] | None = None
        ended = False
        error = failed = None
        now = self._wall()
        fleet = self._rig.fleet
        if fleet is not None:
            snapshot = fleet.poll_once()
            hosts = []
            for h in snapshot.hosts:
                down = status_of(h, snapshot.t, self.request.rig.interval_s) == "down"
                hosts.append(HostStatus(h.label, down or h.sample is None, h.error))
                if h.sample is not None and not down:
                    rigs[h.label] = h.sample
        else:
            try:
                sample = self._rig.source.poll()
            except SourceUnavailable as exc:
                error = failed = str(exc)
            else:
                rigs[None] = sample
                ended = sample.ended
                error = sample.error if not sample.ended else None
                failed = error if not sample.gpus else None  # no GPU at all, and why
                if kind_of(self._rig.source.name).recorded:
                    now = sample.wall  # a recording's alerts happened at its own times
        llama = [self._llama_status(i) for i in range(len(self._clients))] or None
        # no real GPU where one was expected is critical, a simulated rig asked for is not
        sources = None
        if fleet is None and not kind_of(self._rig.source.name).recorded:
            label = self.request.rig.source or "auto"
            sources = [SourceStatus(label, source_problem(label, self._rig.info, failed))]
        changes = self.tracker.update(now, rigs=rigs, llama=llama, hosts=hosts, sources=sources)
        return WatchRound(changes, self.tracker.active, ended, error)

    def _llama_status(self, i: int) -> LlamaStatus:
        url = self.request.llama[i]
        try:
            poll = self._clients[i].poll()
        except Exception as exc:  # the client bounds every call; this is a last guard
            return LlamaStatus(public_url(url), "down", error_text(exc))
        return LlamaStatus(public_url(url), poll.state, poll.message)

    def close(self) -> None:
        for client in self._clients:
            client.close()
        if self._rig.fleet is not None:
            self._rig.fleet.close()
        self._rig.source.close()

"""The app's model of the rig: latest sample, history, poll health. No widgets here, and no
view preferences (the monitor's are in :mod:`lltui.app.state.monitor`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lltui.core.monitor.alerts import AlertChange, AlertTracker, HostStatus
from lltui.core.monitor.history import RigHistory
from lltui.core.monitor.models import RigInfo, RigSample
from lltui.core.monitor.plan_reality import PlanReality
from lltui.services.follow import FoundServers
from lltui.services.rig import source_statuses

STALE_FACTOR = 3.0  # data older than this many intervals is stale
STALE_MIN_S = 3.0


@dataclass
class RigModel:
    info: RigInfo
    interval: float
    history: RigHistory
    clock: Callable[[], float] = time.monotonic
    latest: RigSample | None = None
    received_at: float | None = None  # clock() when the latest sample was applied
    error: str | None = None
    dropped: int = 0  # samples that arrived out of order and were dropped
    history_ended: bool = False  # the last sample taken ended a replay (none more go in)
    paused: bool = False
    # apply() runs on the poller thread; the UI holds this lock while it renders
    lock: threading.RLock = field(default_factory=threading.RLock)
    alerts: AlertTracker = field(default_factory=AlertTracker)
    # a fleet's hosts as they stand, given with each sample (None: no fleet)
    hosts: Callable[[], list[HostStatus]] | None = None
    # the one rig's --source as given ("auto"), whose stand-in for a missing GPU is the
    # no_gpu alert, as in lltui watch (None: a fleet's, whose hosts are alerts of their own)
    source: str | None = None
    # heard with each sample's alert changes, on the poller thread (hooks)
    on_alerts: Callable[[tuple[AlertChange, ...]], None] | None = None
    energy_price: float | None = None  # per kWh, to show what the energy cost
    currency: str = ""
    # this user's llama-servers found on the GPUs, each held against its plan (None: not
    # looked for); the launched server's plan is the launch's (``launched``)
    found: FoundServers | None = None
    launched: PlanReality | None = None
    plans: tuple[PlanReality, ...] = ()  # the last round's, found and launched

    def plan_alerts(self, launched: PlanReality | None) -> tuple[AlertChange, ...]:
        """The launched server's plan (None: none running) with the found ones, into the
        alerts (under the lock)."""
        with self.lock:
            self.launched = launched
            found = [p for p in self.plans if launched is None or p.pid != launched.pid]
            return self.alerts.update(time.time(), plans=self._keep_plans(found))

    def _keep_plans(self, found: list[PlanReality]) -> tuple[PlanReality, ...]:
        """The found servers' plans with the launched one's, kept as this round's."""
        mine = self.launched
        self.plans = (*found, *([mine] if mine is not None else []))
        return self.plans

    def apply(self, sample: RigSample) -> bool:
        """Take a sample; False (and counted) when it is older than one already taken.

        Every sample reaches the history here, even when the UI coalesces the renders."""
        with self.lock:
            if self.latest is not None and sample.seq <= self.latest.seq:
                # the same seq again is "nothing new" (a replay polled faster than it was
                # recorded); an older one arrived out of order
                if sample.seq < self.latest.seq:
                    self.dropped += 1
                return False
            self.latest = sample
            self.info = sample.info
            self.received_at = self.clock()
            self.error = sample.error
            if not (sample.ended and self.history_ended):  # a replay's end, held: once
                self.history.append(sample)
            self.history_ended = sample.ended
            hosts = self.hosts() if self.hosts is not None else None
            plans = None
            if self.found is not None:
                skip = {self.launched.pid} if self.launched is not None else set()
                found = [f.plan for _, f in self.found.fold(sample, skip) if f.plan is not None]
                plans = self._keep_plans(found)
            sources = None
            if self.source is not None:
                failed = sample.error if not sample.gpus and not sample.ended else None
                sources = source_statuses(self.source, sample.info, failed)
            changes = self.alerts.update(
                sample.wall, rigs={None: sample}, hosts=hosts, sources=sources, plans=plans
            )
            if changes and self.on_alerts is not None:
                self.on_alerts(changes)
            return True

    def fail(self, error: str, *, polled: bool = True) -> None:
        """An error to show; ``polled``: the poll itself failed (no sample), which the one
        rig's source alert (``no_gpu``) takes as ``watch`` does (not a recording that
        stopped, after a sample was taken)."""
        with self.lock:
            self.error = error
            if not polled or self.source is None:
                return
            sources = source_statuses(self.source, self.info, error)
            if sources is None:  # a replay's: its alerts go by its own clock
                return
            changes = self.alerts.update(time.time(), sources=sources)
            if changes and self.on_alerts is not None:
                self.on_alerts(changes)

    def age(self) -> float | None:
        if self.received_at is None:
            return None
        return self.clock() - self.received_at

    def stale_after(self) -> float:
        """Seconds without fresh data after which the data is stale."""
        return max(STALE_MIN_S, STALE_FACTOR * self.interval)

    def stale(self, busy_for: float | None) -> bool:
        """No fresh data for several intervals, or a poll hanging that long."""
        if self.paused:
            return False
        limit = self.stale_after()
        if busy_for is not None and busy_for > limit:
            return True
        age = self.age()
        return age is not None and age > limit

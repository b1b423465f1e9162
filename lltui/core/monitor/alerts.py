"""Alerts: thresholds on what the monitor samples, raised and cleared over time.

The kinds, thresholds and hooks are settings (``alert_settings``). :class:`AlertTracker` takes
what is seen now (a rig's sample, the llama-servers followed, the hosts of a fleet), keeps
when each condition began, and says what changed: an alert raised, cleared, or moved between
warning and critical. Pure: the caller gives the wall clock.

A condition that must last (power at the cap, a throttle reason) is raised only once it has
held for its ``for`` seconds; a temperature clears a few degrees under its threshold, so a GPU
hovering at the line does not flap; an event (an XID, new ECC errors) stays raised for a hold
time after the last one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.monitor.alert_settings import AlertThresholds
from lltui.core.monitor.models import GpuSample, RigSample
from lltui.core.monitor.plan_reality import PlanReality, plan_findings
from lltui.core.monitor.xid import XID_FELL_OFF_THE_BUS, xid_meaning

WARNING = "warning"
CRITICAL = "critical"
RANK = {WARNING: 1, CRITICAL: 2}

# throttle reasons that cost speed and are not the power cap (which has its own kind)
SPEED_THROTTLES = ("hw thermal", "sw thermal", "power brake", "hw slowdown")


@dataclass(frozen=True, slots=True)
class Alert:
    """One alert that is raised now."""

    kind: str
    severity: str
    subject: str  # what it is about, as shown: "GPU1", "host gpu2", "llama 127.0.0.1:8080"
    message: str  # what is wrong, with the number: "temperature 91°C (critical at 90)"
    since: float = 0.0  # when it was raised, seconds since the epoch (0: not yet raised)
    host: str | None = None  # a fleet's host label (None: the one rig watched)
    gpu_index: int | None = None
    gpu_uuid: str | None = None
    server: str | None = None  # a llama-server's URL without credentials

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.host or "", self.gpu_uuid or self.server or self.subject)

    @property
    def where(self) -> str:
        """The subject with its host (``gpu2 GPU1``); a host's own alert names it once."""
        if self.host and self.subject != f"host {self.host}":
            return f"{self.host} {self.subject}"
        return self.subject

    @property
    def line(self) -> str:
        """``critical GPU1: temperature 91°C (critical at 90)``."""
        return f"{self.severity} {self.where}: {self.message}"


@dataclass(frozen=True, slots=True)
class AlertChange:
    """What happened to one alert: ``raised``, ``cleared`` or ``changed`` (its severity)."""

    event: str
    alert: Alert
    at: float  # seconds since the epoch

    @property
    def line(self) -> str:
        return f"{self.event} {self.alert.line}"


@dataclass(frozen=True, slots=True)
class LlamaStatus:
    """A llama-server's state at one poll: down, loading, ready, unauthorized or error."""

    server: str
    state: str
    message: str | None = None


@dataclass(frozen=True, slots=True)
class HostStatus:
    """A fleet host at one moment: ``down`` with why, or not."""

    label: str
    down: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """The one rig's source at one poll (``--source`` as given, ``auto`` when none):
    ``problem`` says why no real GPU is seen where one was expected (None: all is well)."""

    label: str
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class _Finding:
    """A condition that holds now; the tracker decides when it becomes an alert."""

    alert: Alert  # ``since`` unset (0): the tracker fills it
    for_s: float = 0.0  # raised only after it held this long
    hold_s: float = 0.0  # stays raised this long after it was last seen


# -- what is wrong now ------------------------------------------------------------------------


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


def _gpu_alert(g: GpuSample, host: str | None, kind: str, severity: str, message: str) -> Alert:
    return Alert(
        kind=kind,
        severity=severity,
        subject=f"GPU{g.info.index}",
        message=message,
        host=host,
        gpu_index=g.info.index,
        gpu_uuid=g.info.uuid,
    )


def _level(value: float | None, warning: float, critical: float) -> str | None:
    if value is None or not math.isfinite(value):
        return None
    if value >= critical:
        return CRITICAL
    if value >= warning:
        return WARNING
    return None


def _temp_finding(
    g: GpuSample,
    host: str | None,
    kind: str,
    value: float | None,
    warning: float,
    critical: float,
    margin: float,
    raised: bool,
    what: str,
) -> _Finding | None:
    """A temperature over its threshold; once raised, it holds until ``margin`` under."""
    level = _level(value, warning, critical)
    if level is None and raised and value is not None:
        level = _level(value + margin, warning, critical)
        level = WARNING if level is not None else None
    if level is None or value is None:
        return None
    at = critical if level == CRITICAL else warning
    message = f"{what} {_fmt(value)}°C ({level} at {_fmt(at)})"
    return _Finding(_gpu_alert(g, host, kind, level, message))


class AlertTracker:
    """Alerts over time. ``update`` takes what is seen now and returns what changed; groups
    not given keep their findings (a llama-server polled apart from the GPUs)."""

    def __init__(self, thresholds: AlertThresholds | None = None, *, instant: bool = False) -> None:
        self.thresholds = thresholds or AlertThresholds()
        # one look (``gpus``, ``watch --once``): a condition counts without lasting its time
        self.instant = instant
        self._groups: dict[str, dict[tuple[str, str, str], _Finding]] = {}
        self._first_seen: dict[tuple[str, str, str], float] = {}
        self._last_seen: dict[tuple[str, str, str], float] = {}
        self._active: dict[tuple[str, str, str], Alert] = {}
        self._held: dict[tuple[str, str, str], _Finding] = {}
        self._ecc: dict[tuple[str, str], tuple[int | None, int | None]] = {}
        self.version = 0  # bumped on every change, so a view redraws only then

    @property
    def active(self) -> tuple[Alert, ...]:
        """The alerts raised now: critical first, then the oldest first."""
        return tuple(sorted(self._active.values(), key=lambda a: (-RANK[a.severity], a.since)))

    def worst(self) -> str | None:
        """The highest severity raised now (None: no alert)."""
        ranks = [RANK[a.severity] for a in self._active.values()]
        return None if not ranks else (CRITICAL if max(ranks) == RANK[CRITICAL] else WARNING)

    def update(
        self,
        now: float,
        *,
        rigs: Mapping[str | None, RigSample] | None = None,
        llama: Iterable[LlamaStatus] | None = None,
        hosts: Iterable[HostStatus] | None = None,
        sources: Iterable[SourceStatus] | None = None,
        plans: Iterable[PlanReality] | None = None,
    ) -> tuple[AlertChange, ...]:
        """Take what is seen at ``now`` (seconds since the epoch): ``rigs`` by host label
        (None for the one rig watched), the llama-servers followed, a fleet's hosts, the
        one rig's source, the watched servers' plans against their processes."""
        for host, sample in (rigs or {}).items():
            found = (f for g in sample.gpus for f in self._gpu_findings(g, host))
            self._groups[f"rig:{host or ''}"] = self._index(found)
        if llama is not None:
            self._groups["llama"] = self._index(self._llama_findings(llama))
        if hosts is not None:
            self._groups["hosts"] = self._index(self._host_findings(hosts))
        if sources is not None:
            self._groups["sources"] = self._index(self._source_findings(sources))
        if plans is not None:
            self._groups["plans"] = self._index(self._plan_findings(plans))
        return self._settle(now)

    # -- findings ----------------------------------------------------------------------------
    def _index(self, findings: Iterable[_Finding]) -> dict[tuple[str, str, str], _Finding]:
        """The findings by key, less those of a kind the settings turn off."""
        off = self.thresholds.disabled
        return {f.alert.key: f for f in findings if f.alert.kind not in off}

    def _raised(self, kind: str, host: str | None, uuid: str) -> bool:
        return (kind, host or "", uuid) in self._active

    def _gpu_findings(self, g: GpuSample, host: str | None) -> list[_Finding]:
        th = self.thresholds
        uuid = g.info.uuid
        out: list[_Finding] = []
        for event in g.xid_events:
            alert = _gpu_alert(g, host, "xid", CRITICAL, f"XID {event.xid}: {event.meaning}")
            out.append(_Finding(alert, hold_s=th.event_hold_s))
        if g.lost:
            reason = g.error or "the GPU fell off the bus"
            if g.xid == XID_FELL_OFF_THE_BUS and "XID" not in reason:
                reason += f" (XID 79: {xid_meaning(79)})"
            out.append(_Finding(_gpu_alert(g, host, "gpu_lost", CRITICAL, reason)))
            return out
        found = [
            _temp_finding(
                g, host, "gpu_temp", g.temp_c, th.gpu_temp_warning, th.gpu_temp_critical,
                th.temp_clear_margin, self._raised("gpu_temp", host, uuid), "temperature",
            ),
            _temp_finding(
                g, host, "mem_temp", g.mem_temp_c, th.mem_temp_warning, th.mem_temp_critical,
                th.temp_clear_margin, self._raised("mem_temp", host, uuid), "memory temperature",
            ),
        ]  # fmt: skip
        out += [f for f in found if f is not None]
        pct = g.memory_full_pct
        level = _level(pct, th.vram_warning_pct, th.vram_critical_pct)
        if level is not None and pct is not None:
            free = g.free_bytes
            left = "-" if free is None else f"{free / 2**20:.0f}"
            message = f"VRAM {pct:.1f}% full ({left} MiB free)"
            out.append(_Finding(_gpu_alert(g, host, "vram_full", level, message)))
        power = g.power_pct
        if power is not None and power >= th.power_cap_pct:
            watts, limit = round(g.power_w or 0), round(g.power_limit_w or 0)
            message = f"power {watts} W at the {limit} W limit"
            alert = _gpu_alert(g, host, "power_cap", WARNING, message)
            out.append(_Finding(alert, for_s=th.power_cap_for_s))
        slow = [r for r in (g.throttle_reasons or ()) if r in SPEED_THROTTLES]
        if slow:
            severity = CRITICAL if "hw thermal" in slow or "power brake" in slow else WARNING
            alert = _gpu_alert(g, host, "throttle", severity, f"throttled: {', '.join(slow)}")
            out.append(_Finding(alert, for_s=th.throttle_for_s))
        out += self._ecc_findings(g, host)
        return out

    def _ecc_findings(self, g: GpuSample, host: str | None) -> list[_Finding]:
        """New ECC errors since the last sample (counts that went up): uncorrected ones are
        critical, corrected ones a warning; held like an XID."""
        key = (host or "", g.info.uuid)
        now = (g.ecc_uncorrected, g.ecc_corrected)
        before = self._ecc.get(key)
        self._ecc[key] = now
        if before is None:  # the first sample: counts from before lltui watched
            return []
        out = []
        for i, (severity, what) in enumerate(((CRITICAL, "uncorrected"), (WARNING, "corrected"))):
            was, count = before[i], now[i]
            if was is not None and count is not None and count > was:
                message = f"{count - was} new {what} ECC error(s) ({count} since the driver loaded)"
                alert = _gpu_alert(g, host, "ecc", severity, message)
                out.append(_Finding(alert, hold_s=self.thresholds.event_hold_s))
                break
        return out

    def _llama_findings(self, servers: Iterable[LlamaStatus]) -> list[_Finding]:
        out = []
        for s in servers:
            if s.state == "ready":
                continue
            down = s.state == "down"
            kind = "llama_down" if down else "llama_not_ready"
            words = s.message or ("does not answer" if down else f"not ready ({s.state})")
            alert = Alert(
                kind=kind,
                severity=CRITICAL if down else WARNING,
                subject=f"llama {s.server}",
                message=words,
                server=s.server,
            )
            wait = 0.0 if down else self.thresholds.llama_not_ready_for_s
            out.append(_Finding(alert, for_s=wait))
        return out

    def _plan_findings(self, plans: Iterable[PlanReality]) -> list[_Finding]:
        th = self.thresholds
        out = []
        for reality in plans:
            for f in plan_findings(reality, int(th.plan_growth_mib * 1024 * 1024)):
                growth = f.kind == "plan_growth"
                alert = Alert(
                    kind=f.kind,
                    severity=WARNING,
                    subject=f"llama {reality.server} GPU{f.gpu_index}",
                    message=f.message,
                    gpu_index=f.gpu_index,
                    server=reality.server,
                )
                wait = th.plan_growth_for_s if growth else th.plan_placement_for_s
                out.append(_Finding(alert, for_s=wait))
        return out

    def _host_findings(self, hosts: Iterable[HostStatus]) -> list[_Finding]:
        out = []
        for h in hosts:
            if not h.down:
                continue
            alert = Alert(
                kind="host_down",
                severity=CRITICAL,
                subject=f"host {h.label}",
                message=h.error or "does not answer",
                host=h.label,
            )
            out.append(_Finding(alert))
        return out

    def _source_findings(self, sources: Iterable[SourceStatus]) -> list[_Finding]:
        out = []
        for s in sources:
            if s.problem is None:
                continue
            alert = Alert("no_gpu", CRITICAL, f"source {s.label}", s.problem)
            out.append(_Finding(alert))
        return out

    # -- over time ---------------------------------------------------------------------------
    def _settle(self, now: float) -> tuple[AlertChange, ...]:
        current: dict[tuple[str, str, str], _Finding] = {}
        for group in self._groups.values():
            current.update(group)
        for key, finding in current.items():
            self._first_seen.setdefault(key, now)
            self._last_seen[key] = now
            if finding.hold_s > 0:
                self._held[key] = finding
        for key in [k for k in self._first_seen if k not in current]:
            del self._first_seen[key]
        # an event's alert stays while its hold lasts, the latest finding standing for it
        for key, finding in list(self._held.items()):
            if key in current:
                continue
            if now - self._last_seen.get(key, now) < finding.hold_s:
                current[key] = finding
            else:
                del self._held[key]
                self._last_seen.pop(key, None)
        changes: list[AlertChange] = []
        for key, finding in current.items():
            began = self._first_seen.get(key, now)
            wait = 0.0 if self.instant else finding.for_s
            if now - began < wait:
                continue
            new = finding.alert
            old = self._active.get(key)
            if old is None:
                alert = replace(new, since=began)
                self._active[key] = alert
                changes.append(AlertChange("raised", alert, now))
            elif old.severity != new.severity:
                alert = replace(new, since=old.since)
                self._active[key] = alert
                changes.append(AlertChange("changed", alert, now))
            elif old.message != new.message:
                self._active[key] = replace(new, since=old.since)  # a new number, not news
                self.version += 1
        for key in [k for k in self._active if k not in current]:
            changes.append(AlertChange("cleared", self._active.pop(key), now))
        if changes:
            self.version += 1
        return tuple(changes)


def alerts_to_json(alerts: Iterable[Alert]) -> list[dict[str, Any]]:
    """Alerts as ``lltui gpus --json`` and ``lltui watch --json`` print them."""
    return [
        {
            **fields_of(a, "kind severity subject message since host"),
            "gpu": a.gpu_index,
            "uuid": a.gpu_uuid,
            "server": a.server,
        }
        for a in alerts
    ]


def change_to_json(change: AlertChange) -> dict[str, Any]:
    return {"event": change.event, "at": change.at, **alerts_to_json([change.alert])[0]}


def exit_code(alerts: Iterable[Alert], fail_on: str = WARNING) -> int:
    """``lltui watch``'s exit code: 0 when nothing at or above ``fail_on`` is raised, 3 for
    a warning, 4 for a critical alert (1 and 2 are a failure and bad input)."""
    worst = max((RANK[a.severity] for a in alerts), default=0)
    if worst < RANK[fail_on]:
        return 0
    return 4 if worst >= RANK[CRITICAL] else 3

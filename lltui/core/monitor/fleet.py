"""A fleet: several hosts, each with its own source, sampled side by side.

Each host has a :class:`HostState` (its latest sample or None, whether it answers, the
error that says why not, when it last answered); a :class:`FleetSample` is all of them at
one moment. :func:`host_row` boils one host down to the fleet view's row and
:func:`fleet_to_json` gives ``lltui gpus --json`` for several sources.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from lltui.core.monitor.alerts import HostStatus
from lltui.core.monitor.gpus_report import rig_to_json
from lltui.core.monitor.models import RigInfo, RigSample
from lltui.core.monitor.simulated import simulated_json

STALE_FACTOR = 3.0  # a host that has not answered for this many intervals is stale
STALE_MIN_S = 3.0
LLAMA_PROCESS_NAMES = ("llama-server", "llama-cli", "ggml-rpc-server", "rpc-server")


@dataclass(frozen=True, slots=True)
class HostState:
    """One host of a fleet, as its poller last saw it."""

    label: str  # what the user called it: "gpu1", "admin@box:2222", "nvml"
    source: str  # its --source spec
    sample: RigSample | None = None  # the latest good sample (kept while the host is down)
    reachable: bool | None = None  # None: not tried yet
    error: str | None = None  # why the last poll failed, one line
    received_at: float | None = None  # monotonic time the latest sample arrived
    polling_since: float | None = None  # monotonic time the poll in flight began
    polls: int = 0
    failures: int = 0

    def age(self, now: float) -> float | None:
        return None if self.received_at is None else max(0.0, now - self.received_at)


@dataclass(frozen=True, slots=True)
class FleetSample:
    """Every host of a fleet at one moment (monotonic ``t``)."""

    t: float
    hosts: tuple[HostState, ...]

    @property
    def reachable(self) -> int:
        return sum(1 for h in self.hosts if h.reachable)


@dataclass(frozen=True, slots=True)
class HostRow:
    """One line of the fleet view."""

    label: str
    status: str  # "up", "stale", "down", "connecting"
    gpus: int | None
    lost: int
    memory_used: int | None
    memory_total: int | None
    power_w: float | None
    util_gpu: float | None  # mean over the host's GPUs
    hottest_c: float | None
    hottest_index: int | None
    llama_servers: int | None  # llama.cpp processes seen on its GPUs (None: unknown)
    age_s: float | None
    error: str | None


def stale_after(interval: float) -> float:
    return max(STALE_MIN_S, STALE_FACTOR * interval)


def status_of(state: HostState, now: float, interval: float, *, once: bool = False) -> str:
    """``once``: one poll (``lltui gpus``, ``watch``), where a host that answered in it is up
    however long the slowest host took, and one that did not is down."""
    if once:
        return "up" if state.reachable and state.sample is not None else "down"
    limit = stale_after(interval)
    if state.reachable is False:
        return "down"
    if state.polling_since is not None and now - state.polling_since > limit:
        return "down" if state.sample is None else "stale"
    if state.reachable is None or state.sample is None:
        return "connecting"
    age = state.age(now)
    return "stale" if age is not None and age > limit else "up"


def alert_inputs(
    snapshot: FleetSample, interval: float, *, once: bool = False
) -> tuple[dict[str | None, RigSample], list[HostStatus]]:
    """What the alerts take of a fleet: the rigs of the hosts up, by label, and every host's
    status (``once``: one poll, so a host that gave no sample is down)."""
    rigs: dict[str | None, RigSample] = {}
    hosts = []
    for h in snapshot.hosts:
        down = status_of(h, snapshot.t, interval, once=once) == "down"
        hosts.append(HostStatus(h.label, down, h.error))
        if h.sample is not None and not down:
            rigs[h.label] = h.sample
    return rigs, hosts


def llama_process_count(sample: RigSample) -> int:
    """Distinct llama.cpp processes (llama-server, rpc-server) holding memory on the GPUs."""
    pids = {
        p.pid
        for g in sample.gpus
        for p in g.processes
        if p.name and any(n in p.name.rsplit("/", 1)[-1] for n in LLAMA_PROCESS_NAMES)
    }
    return len(pids)


def _sum_known(values: Iterable[int | None]) -> int | None:
    """The sum, or None where any value is unknown (or there is none): a host one of whose
    GPUs does not say its total has an unknown total, not a smaller one."""
    items = list(values)
    if not items or any(v is None for v in items):
        return None
    return sum(v for v in items if v is not None)


def host_row(state: HostState, now: float, interval: float) -> HostRow:
    sample = state.sample
    status = status_of(state, now, interval)
    if sample is None:
        return HostRow(
            state.label, status, None, 0, None, None, None, None, None, None, None,
            state.age(now), state.error,
        )  # fmt: skip
    live = [g for g in sample.gpus if not g.lost]
    used = [g.memory_used for g in live if g.memory_used is not None]
    power = [g.power_w for g in live if g.power_w is not None]
    util = [g.util_gpu for g in live if g.util_gpu is not None]
    temps = [(g.temp_c, g.index) for g in live if g.temp_c is not None]
    hottest = max(temps) if temps else None
    return HostRow(
        label=state.label,
        status=status,
        gpus=len(sample.gpus),
        lost=len(sample.gpus) - len(live),
        memory_used=sum(used) if used else None,
        memory_total=_sum_known(g.info.memory_total for g in live),
        power_w=sum(power) if power else None,
        util_gpu=sum(util) / len(util) if util else None,
        hottest_c=hottest[0] if hottest else None,
        hottest_index=hottest[1] if hottest else None,
        llama_servers=llama_process_count(sample),
        age_s=state.age(now),
        error=state.error if status != "up" else (state.error or sample.error),
    )


# what a host that answered says of itself (rig_to_json), null for one that did not
UNKNOWN_HOST_KEYS = (
    "simulated", "simulated_reason", "driver_version", "cuda_version", "nvml_version",
    "rocm_version", "hostname", "host",
)  # fmt: skip


def simulated_hosts(fleet: FleetSample) -> RigInfo | None:
    """The fleet's simulated hosts as one rig (its source their labels, its reason theirs),
    once they answered; None where no host that answered is simulated."""
    simulated = [
        (h.label, h.sample.info)
        for h in fleet.hosts
        if h.sample is not None and h.sample.info.simulated
    ]
    if not simulated:
        return None
    why = dict.fromkeys(info.simulated_reason or "asked for" for _, info in simulated)
    return RigInfo(
        source=",".join(label for label, _ in simulated),
        simulated=True,
        simulated_reason="; ".join(why),
    )


def fleet_to_json(fleet: FleetSample) -> dict[str, Any]:
    """``lltui gpus --json`` for several sources, each polled once: ``hosts``, one entry per
    host, ``name`` its label, ``status`` up where it answered (else down), with the keys of
    the one-source object (``gpus``, ``host`` CPU/RAM, ...) under it when it answered,
    ``gpus: []`` when not; ``simulated`` (and why) as the one-source object says it, true
    where a host that answered is simulated."""
    hosts = []
    for state in fleet.hosts:
        entry: dict[str, Any] = {
            "name": state.label,
            "source": state.source,
            "reachable": bool(state.reachable),
            "status": status_of(state, fleet.t, 1.0, once=True),
            "error": state.error,
            "age_s": state.age(fleet.t),
        }
        if state.sample is not None:
            rig = rig_to_json(state.sample)
            rig_error = rig.pop("error")
            entry.update({k: v for k, v in rig.items() if k != "source"})
            entry["error"] = state.error or rig_error
        else:  # the same keys as a host that answered, unknown (null), no GPU
            entry.update(dict.fromkeys(UNKNOWN_HOST_KEYS), gpus=[], hints=[])
        hosts.append(entry)
    return {
        "source": ",".join(h.source for h in fleet.hosts),
        **simulated_json(simulated_hosts(fleet)),
        "hosts": hosts,
        "reachable": fleet.reachable,
        "total": len(fleet.hosts),
    }

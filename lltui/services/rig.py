"""Opening the rig a command line names: one source (``--source``) or a fleet of them
(``--source a,b``, ``--hosts FILE``, ``prom:URL#host=*``). The monitor, ``lltui gpus`` and the
exporter all open what they watch here."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lltui.sources.gpu.kinds import ReplayOptions as ReplayOptions  # the front ends' too
from lltui.sources.gpu.kinds import is_fleet, kind_of, open_source, parse_source_spec, split_sources
from lltui.sources.gpu.kinds import one_sample as one_sample  # the API's quick read
from lltui.sources.gpu.kinds import pids_here as pids_here  # whose pids are in /proc
from lltui.sources.gpu.kinds import source_help as source_help  # --source's help

if TYPE_CHECKING:
    from lltui.core.monitor.alerts import SourceStatus
    from lltui.core.monitor.fleet import FleetSample
    from lltui.core.monitor.models import GpuSource, RigInfo, RigSample
    from lltui.core.topo.matrix import TopologyReport
    from lltui.sources.gpu.fleet import Fleet, FleetFocus
    from lltui.sources.gpu.replay import Recorder

MAX_HOST_TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class RigRequest:
    """What to watch: ``source`` as ``--source`` spells it (None: auto), or a fleet from it
    or from a hosts file."""

    source: str | None = None
    hosts_file: str | None = None
    host_timeout_s: float | None = None
    interval_s: float = 1.0
    replay: ReplayOptions | None = None
    seed: int = 0

    @property
    def is_fleet(self) -> bool:
        return bool(self.hosts_file) or is_fleet(self.source)


@dataclass
class Rig:
    """An opened source (for a fleet: the focus on one of its hosts) and its fleet."""

    source: GpuSource
    info: RigInfo
    fleet: Fleet | None = None


def check_source(source: str) -> None:
    """``--source`` checked, each spec of a fleet's too: ValueError with one line for one
    that names no source (a mistyped one is bad input, not a dead source)."""
    for spec in split_sources(source) or [source]:
        parse_source_spec(spec)


def _fleet(request: RigRequest) -> Fleet:
    """The fleet a request names, its every spec checked now (a bad one is one line, not a
    host down later). ValueError with one line."""
    from lltui.sources.gpu.fleet import HOST_TIMEOUT_S, Fleet, fleet_specs

    specs = fleet_specs(request.source, request.hosts_file)
    for spec in specs:
        parse_source_spec(spec)
    timeout = _host_timeout(request)
    return Fleet(specs, interval=request.interval_s, timeout=timeout or HOST_TIMEOUT_S)


def _host_timeout(request: RigRequest) -> float | None:
    """``--host-timeout``, checked (None: not given)."""
    if request.host_timeout_s is not None:
        check_host_timeout(request.host_timeout_s)
    return request.host_timeout_s


def _open(request: RigRequest, *, facts_only: bool = False) -> tuple[GpuSource, RigInfo]:
    """The single source a request names, opened; another host's commands within
    ``--host-timeout`` as a fleet's host's."""
    return open_source(
        request.source,
        seed=request.seed,
        replay=request.replay,
        facts_only=facts_only,
        host_timeout=_host_timeout(request),
    )


def check_host_timeout(seconds: float) -> None:
    """ValueError with one line for a host's timeout out of range."""
    if not 0 < seconds <= MAX_HOST_TIMEOUT_S:
        raise ValueError(f"--host-timeout {seconds:g} is out of range (0-3600 s)")


def check_replay_speed(speed: float) -> None:
    """ValueError with one line for a replay pace that is no positive number."""
    from lltui.sources.gpu.replay import check_speed

    check_speed(speed)


def open_rig(request: RigRequest) -> Rig:
    """The rig opened: one source, or a fleet whose focus is its first host. Raises
    SourceUnavailable or ValueError with one line when it cannot be opened."""
    if request.is_fleet:
        from lltui.sources.gpu.fleet import FleetFocus

        fleet = _fleet(request)
        focus = FleetFocus(fleet)
        return Rig(focus, focus.open(), fleet)
    source, info = _open(request)
    return Rig(source, info)


def check_rig(request: RigRequest) -> None:
    """What :func:`open_rig` would refuse, found now: a single source is opened and closed
    again, a fleet's specs are read (its hosts are not reached). SourceUnavailable or
    ValueError with one line."""
    if request.is_fleet:
        _fleet(request)
        return
    source, _info = _open(request)
    source.close()


def profile_in_use(info: RigInfo) -> str | None:
    """The simulated rig (``sim:PROFILE``) a rig is; None for a real one or a recording."""
    return info.source if info.simulated and kind_of(info.source).simulated else None


def fleet_focus(source: GpuSource) -> FleetFocus | None:
    """``source`` as a fleet's focus on one of its hosts; None for a single rig."""
    from lltui.sources.gpu.fleet import FleetFocus

    return source if isinstance(source, FleetFocus) else None


def topology_in_use(
    source: str | None, host_timeout: float | None = None
) -> tuple[TopologyReport, RigInfo | None]:
    """The topology of the rig ``source`` (``--source``) names: live (nvidia-smi, else NVML;
    a host's commands within ``host_timeout``, ``--host-timeout``); for ``auto`` where
    neither answers, the simulated rig the monitor then shows, as the topology view shows it;
    with the RigInfo of a simulated rig (saying so and why). ValueError for a spec with no
    topology or a bad timeout, SourceUnavailable when it cannot be read."""
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.gpu.topo import topology_for_source

    if host_timeout is not None:
        check_host_timeout(host_timeout)
    spec = parse_source_spec(source)
    if kind_of(spec.kind).simulated:
        return topology_for_source(str(spec)), _info(str(spec))
    try:
        return topology_for_source(str(spec), host_timeout), None
    except SourceUnavailable:
        if spec.kind != "auto":
            raise
        info = _info(None)  # what the monitor opens: NVML, else the simulated rig
        if not info.simulated:
            raise
        return topology_for_source(info.source), info


def _info(source: str | None) -> RigInfo:
    """What ``source`` opens here (auto: NVML, else the simulated rig), closed again."""
    opened, info = open_source(source)
    opened.close()
    return info


def sample_once(
    request: RigRequest, settle_s: float = 0.1, *, facts_only: bool = False
) -> RigSample:
    """One sample of a single source (``settle_s`` after opening a real one, so that host
    CPU% and rate counters have an interval to measure; ``facts_only``: what the GPUs are
    and hold, no rates, process lists or PCIe throughput, and no wait). SourceUnavailable
    or ValueError."""
    source, info = _open(request, facts_only=facts_only)
    settle_s = 0 if facts_only else settle_s
    try:
        if not info.simulated and settle_s > 0:
            time.sleep(settle_s)
        return source.poll()
    finally:
        source.close()


def poll_fleet_once(request: RigRequest) -> FleetSample:
    """Every host of a fleet polled once, side by side, within the per-host timeout."""
    fleet = _fleet(request)
    try:
        return fleet.poll_once()
    finally:
        fleet.close()


def start_recording(path: str, source: str, *, full: bool = False) -> Recorder:
    """A Recorder writing ``path`` (``--record``); ``full`` keeps command lines' secrets.
    ValueError (one line) where it would overwrite the recording being replayed or cannot
    be written."""
    from lltui.sources.gpu.replay import Recorder

    replayed = source.partition(":")[2]
    if kind_of(source).recorded and os.path.exists(path) and os.path.samefile(path, replayed):
        raise ValueError(f"--record {path} would overwrite the recording being replayed")
    try:
        return Recorder(path, full=full)
    except OSError as exc:
        raise ValueError(f"--record {path}: {exc.strerror or exc}") from None


def source_statuses(
    asked: str | None, info: RigInfo, error: str | None = None
) -> list[SourceStatus] | None:
    """The one rig's source as its alerts take it (``no_gpu``), in the monitor, ``watch``,
    ``gpus`` and ``report`` alike: ``asked`` as ``--source`` gives it (None: auto), ``info``
    what it opened, ``error`` why its poll saw no GPU. None for a recording (its GPUs are
    not this machine's)."""
    from lltui.core.monitor.alerts import SourceStatus

    label = asked or "auto"
    if kind_of(label).recorded:
        return None
    return [SourceStatus(label, source_problem(label, info, error))]


def source_problem(asked: str, info: RigInfo, error: str | None = None) -> str | None:
    """Why a rig shows no real GPU though one was expected: the source ``asked`` for
    (``--source``; ``auto``) stands in a simulated rig (a simulated one asked for is no
    problem), or it failed this poll (``error``)."""
    if info.simulated:
        wanted = not asked.strip() or kind_of(asked).simulated
        return None if wanted else info.simulated_reason or "a simulated rig stands in"
    return error

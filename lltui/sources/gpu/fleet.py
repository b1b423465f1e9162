"""A fleet of sources: one thread per host, each with its own pace and timeout.

A host that is down (refused, unreachable, no nvidia-smi) or hangs blocks only its own
thread: its state says down (or its poll's age grows until the view calls it down) while
the others keep updating. Each thread polls, hands the new :class:`HostState` over, waits out
the rest of the interval; a poll never overlaps the last one of the same host. ``ssh`` hosts
keep one persistent connection each (see :mod:`lltui.sources.ssh`), stopped by
:meth:`Fleet.close`.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

from lltui.core.monitor.fleet import FleetSample, HostState
from lltui.core.monitor.models import GpuSource, RigInfo, RigSample, SourceUnavailable
from lltui.core.periodic import Periodic
from lltui.core.text import error_text, printable

HOST_TIMEOUT_S = 10.0  # one poll of one host (an ssh command) may take this long
RETRY_MIN_S = 2.0  # a host that failed is tried again after max(interval, this)

UpdateHook = Callable[[int], object]


@dataclass(frozen=True, slots=True)
class FleetHost:
    label: str
    spec: str


def fleet_hosts(specs: Sequence[str]) -> tuple[FleetHost, ...]:
    """Hosts for source specs, labelled as the user would name them (``smi:gpu1`` is
    ``gpu1``), a repeated label numbered."""
    hosts: list[FleetHost] = []
    seen: dict[str, int] = {}
    from lltui.sources.gpu.kinds import kind_of

    for spec in specs:
        kind, arg = kind_of(spec), spec.partition(":")[2]
        label = arg if kind.host_arg and arg else spec
        if kind.url_arg and arg:
            from lltui.sources.gpu.prom import host_label

            label = host_label(arg)  # a URL's password must not name a host
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}#{seen[label]}"
        hosts.append(FleetHost(label, spec))
    return tuple(hosts)


def make_host_source(spec: str, *, timeout: float, seed: int = 0) -> GpuSource:
    """The source of one host; ``smi:`` and ``amd:`` hosts get ``timeout`` for each poll,
    its ssh commands sharing it (an amd: host kept its tools' 20 s, twice: 42 s a poll of a
    hung host). ValueError for a spec that is not a source."""
    from lltui.sources.gpu.kinds import make_source, parse_source_spec

    parsed = parse_source_spec(spec)
    if parsed.kind == "auto":
        parsed = parse_source_spec("nvml")
    return make_source(parsed, seed=seed, host_timeout=timeout)


class Fleet:
    """Several hosts polled side by side; :meth:`snapshot` is all of them now."""

    def __init__(
        self,
        specs: Sequence[str],
        *,
        interval: float = 1.0,
        timeout: float = HOST_TIMEOUT_S,
        make: Callable[[str, int], GpuSource] | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_update: UpdateHook | None = None,
    ) -> None:
        if not specs:
            raise ValueError("a fleet needs at least one source")
        self.hosts = fleet_hosts(specs)
        self.interval = interval
        self.timeout = timeout
        self._make = make or (lambda spec, i: make_host_source(spec, timeout=timeout, seed=i))
        self._clock = clock
        self.on_update = on_update
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        from lltui.sources.gpu.prom import public_spec

        self._states = [HostState(h.label, public_spec(h.spec)) for h in self.hosts]
        self._once: dict[int, threading.Thread] = {}  # poll_once's last poll of each host
        self._sources: list[GpuSource | None] = [None] * len(self.hosts)
        # hosts whose poll runs now, to its end (polling_since says when one began, for the
        # view: poll_once clears it on a poll it gives up on, which still runs)
        self._busy: set[int] = set()
        self._opened = [False] * len(self.hosts)
        self._stopped = threading.Event()
        self._paused = False
        self._loops: list[Periodic] = []

    def __len__(self) -> int:
        return len(self.hosts)

    # -- reading ----------------------------------------------------------------------------
    def snapshot(self) -> FleetSample:
        with self._lock:
            return FleetSample(self._clock(), tuple(self._states))

    def state(self, index: int) -> HostState:
        with self._lock:
            return self._states[index]

    def wait_sample(self, index: int, after_seq: int, timeout: float) -> HostState:
        """The host's state once it holds a sample newer than ``after_seq``, a failure, or
        ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self._stopped.is_set():
                state = self._states[index]
                newer = state.sample is not None and state.sample.seq > after_seq
                if newer or state.reachable is False:
                    return state
                left = deadline - time.monotonic()
                if left <= 0:
                    return state
                self._changed.wait(left)
            return self._states[index]

    # -- polling ----------------------------------------------------------------------------
    def start(self) -> None:
        if self._loops:
            return
        self._loops = [
            Periodic(
                partial(self._tick, i),
                self.interval,
                name=f"lltui-fleet-{host.label}",
                pace=partial(self._pace, i),
            )
            for i, host in enumerate(self.hosts)
        ]
        for loop in self._loops:
            loop.start()

    def _tick(self, index: int) -> None:
        if not self._paused:  # woken while paused (its interval ran out): nothing to do
            self.poll_host(index)

    def _pace(self, index: int) -> float:
        """The interval; a host that failed is tried again no sooner than RETRY_MIN_S;
        paused, until resumed."""
        if self._paused:
            return math.inf
        reachable = self._states[index].reachable
        return self.interval if reachable else max(self.interval, RETRY_MIN_S)

    def poll_host(self, index: int) -> HostState:
        """Open (if needed) and poll one host once, on the calling thread (none once the
        fleet is closed)."""
        with self._lock:
            if self._stopped.is_set():
                return self._states[index]
            self._busy.add(index)
        try:
            return self._poll_host(index)
        finally:
            with self._lock:
                self._busy.discard(index)
                # the fleet closed while this ran: close what close() left to this thread
                left = self._take(index) if self._stopped.is_set() else None
            _close(left)

    def _poll_host(self, index: int) -> HostState:
        started = self._clock()
        self._set(index, polling_since=started)
        try:
            sample = self._poll(index)
        except Exception as exc:  # a dead host, bad output, a source bug: that host is down
            return self._set(
                index,
                reachable=False,
                error=_one_line(exc),
                polling_since=None,
                failed=True,
            )
        return self._set(
            index, sample=sample, reachable=True, error=sample.error, polling_since=None
        )

    def _poll(self, index: int) -> RigSample:
        source = self._sources[index]
        if source is None:
            source = self._make(self.hosts[index].spec, index)
            self._sources[index] = source
        if not self._opened[index]:
            source.open()
            self._opened[index] = True
        try:
            return source.poll()
        except SourceUnavailable:
            self._opened[index] = False  # open it again next time (a host that rebooted)
            raise

    def _set(
        self,
        index: int,
        *,
        failed: bool = False,
        **changes: object,
    ) -> HostState:
        with self._changed:
            state = self._states[index]
            if "sample" in changes:
                changes["received_at"] = self._clock()
            if "reachable" in changes:
                changes["polls"] = state.polls + 1
            if failed:
                changes["failures"] = state.failures + 1
            state = replace(state, **changes)  # type: ignore[arg-type]
            self._states[index] = state
            self._changed.notify_all()
        hook = self.on_update
        if hook is not None and not self._stopped.is_set():
            hook(index)
        return state

    def poll_once(self, deadline_s: float | None = None) -> FleetSample:
        """Every host polled once, side by side; a host still busy after ``deadline_s``
        (default: the timeout) is reported down. For ``lltui gpus``."""
        limit = self.timeout if deadline_s is None else deadline_s
        threads: dict[int, threading.Thread] = {}
        for i in range(len(self.hosts)):
            # a host's last poll still running (hung past its timeout) gets no second one:
            # `watch` piled a dozen up, and waited for each round's hung host every round
            last = self._once.get(i)
            if last is not None and last.is_alive():
                continue
            threads[i] = self._once[i] = threading.Thread(
                target=self.poll_host, args=(i,), daemon=True
            )
            threads[i].start()
        end = time.monotonic() + limit
        for i, t in threads.items():
            t.join(max(0.0, end - time.monotonic()))
            if t.is_alive():
                self._set(
                    i,
                    reachable=False,
                    error=f"did not answer within {limit:g} s",
                    polling_since=None,
                )
        return self.snapshot()

    def set_interval(self, seconds: float) -> None:
        self.interval = seconds

    def pause(self) -> None:
        """No host is polled until :meth:`resume` (a poll running now finishes)."""
        self._paused = True

    def resume(self) -> None:
        """Every host polled again, at once."""
        self._paused = False
        for loop in self._loops:
            loop.wake()

    def nudge(self) -> None:
        """Wake whoever waits in :meth:`wait_sample` (the host in view changed)."""
        with self._changed:
            self._changed.notify_all()

    def close(self) -> None:
        """Stop the threads and close every source (ssh masters included)."""
        with self._changed:
            self._stopped.set()
            self._changed.notify_all()
            # ssh is safe to close under a running poll (that command ends), a host's smi:
            # or amd: alike; a driver call in flight (NVML, amdsmi) is left to its poll's
            # thread, which closes it once the call returns
            taken = [
                self._take(i)
                for i, source in enumerate(self._sources)
                if i not in self._busy or getattr(source, "host", None) is not None
            ]
        for loop in self._loops:
            loop.stop()
        for source in taken:
            _close(source)

    def _take(self, index: int) -> GpuSource | None:
        """The host's source, to be closed by the caller alone (under the lock)."""
        source, self._sources[index] = self._sources[index], None
        return source


def _close(source: GpuSource | None) -> None:
    if source is not None:
        with contextlib.suppress(Exception):
            source.close()


def _one_line(exc: BaseException) -> str:
    """Why a host failed, in words: the last line of a long message (ssh prints its own
    reason last), never the exception's class name."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    line = error_text(exc) if len(lines) <= 1 else printable(lines[-1].strip(), one_line=True)
    return line[:200]


def fleet_specs(source: str | None, hosts_file: str | None) -> list[str]:
    """The sources of ``--source`` (a list) and ``--hosts FILE`` together; ValueError with
    one line for a file that cannot be read or a line that is not a host."""
    from lltui.core.monitor.hosts_file import parse_hosts
    from lltui.sources.gpu.kinds import split_sources

    specs = split_sources(source) if source else []
    if hosts_file:
        try:
            with open(hosts_file, encoding="utf-8", errors="replace") as f:
                text = f.read(1 << 20)
        except OSError as exc:
            raise ValueError(f"--hosts {hosts_file}: {exc.strerror or exc}") from None
        specs = [s for s in specs if s.lower() != "auto"]  # the default, not a choice
        specs += [h.spec for h in parse_hosts(text, name=hosts_file)]
    return _expand_all_hosts(specs)


def _expand_all_hosts(specs: list[str]) -> list[str]:
    """``prom:URL#host=*`` becomes one spec per host its server names (asked once, now)."""
    from lltui.sources.gpu.prom import expand_all_hosts, wants_all_hosts

    return [x for s in specs for x in (expand_all_hosts(s) if wants_all_hosts(s) else [s])]


class FleetFocus:
    """The fleet's host being looked at, as a :class:`GpuSource` for the monitor: its
    ``poll`` hands on the samples that host's thread takes (it never polls the host itself,
    so a host is never polled twice at once). A host that is down raises
    SourceUnavailable, which the monitor shows as its error."""

    def __init__(self, fleet: Fleet, index: int = 0) -> None:
        self.fleet = fleet
        self._focus = index
        self._last_seq = 0
        self._returned: tuple[int, int] | None = None  # (host, seq) of the last poll
        self.name = fleet.hosts[index].label

    @property
    def focus(self) -> int:
        return self._focus

    def set_focus(self, index: int) -> RigInfo:
        """Look at another host; its info (a placeholder while it has not answered)."""
        self._focus = index
        self._last_seq = 0
        self.name = self.fleet.hosts[index].label
        self.fleet.nudge()
        return self.info()

    def info(self) -> RigInfo:
        state = self.fleet.state(self._focus)
        if state.sample is not None:
            return self._named(state.sample).info
        return RigInfo(source=state.source, hostname=state.label)

    def _named(self, sample: RigSample) -> RigSample:
        """A host whose source repeats another's (``sim:4xl4`` twice) is named by its fleet
        label's number (``sim:4xl4#2``): the monitor's header showed the first's name."""
        number = self.fleet.hosts[self._focus].label.rpartition("#")[2]
        if not number.isdigit() or sample.info.source.endswith(f"#{number}"):
            return sample
        return replace(sample, info=replace(sample.info, source=f"{sample.info.source}#{number}"))

    def open(self) -> RigInfo:
        return self.info()

    def poll(self) -> RigSample:
        wait = max(0.5, 2 * self.fleet.interval)
        for _ in range(4):
            index, after = self._focus, self._last_seq
            state = self.fleet.wait_sample(index, after, wait)
            if index != self._focus:
                continue  # the focus moved while waiting: wait on the new host
            if state.reachable is False:
                raise SourceUnavailable(f"{state.label}: {state.error or 'down'}")
            if state.sample is None:
                raise SourceUnavailable(f"{state.label}: no answer yet")
            self._last_seq = state.sample.seq
            self._returned = (index, state.sample.seq)
            return self._named(state.sample)
        raise SourceUnavailable("the host in view changed")

    def is_current(self, sample: RigSample) -> bool:
        """Whether ``sample`` came from the host in view now (not the one before it)."""
        return self._returned == (self._focus, sample.seq)

    def close(self) -> None:
        self.fleet.close()

"""Bounded per-GPU history of a rig, owned by the app model (never by a widget)."""

from __future__ import annotations

import math
from array import array
from collections import deque
from dataclasses import dataclass

from lltui.core.monitor.models import RigSample, XidEvent

METRICS = ("power_w", "util_gpu", "memory_used", "temp_c", "util_mem")
XID_LOG_LEN = 256  # XID events kept, all GPUs together
# a process's own history: GPU memory over its GPUs, SM % (mean), host CPU % and RSS
PROCESS_METRICS = ("gpu_mem", "sm", "cpu", "rss")
PROCESSES_KEPT = 256  # processes whose history is kept (the newest seen)


class FloatRing:
    """The newest ``maxlen`` floats, oldest first, in 8 bytes each (a missing reading kept as
    NaN): an hour of 8 GPUs' history at 1 s is 1.4 MiB this way, 5 MiB as deques of float
    objects. Taking from the front moves a start index; the array is compacted when half of
    it is taken."""

    __slots__ = ("_buf", "_start", "maxlen")

    def __init__(self, maxlen: int) -> None:
        self._buf = array("d")
        self._start = 0
        self.maxlen = maxlen

    def __len__(self) -> int:
        return len(self._buf) - self._start

    def __bool__(self) -> bool:
        return len(self._buf) > self._start

    def append(self, value: float | None) -> None:
        buf = self._buf
        buf.append(math.nan if value is None else value)
        if len(buf) - self._start > self.maxlen:
            self.popleft()

    def popleft(self) -> None:
        if not len(self):
            raise IndexError("pop from an empty FloatRing")
        self._start += 1
        if self._start >= 64 and self._start * 2 >= len(self._buf):
            del self._buf[: self._start]
            self._start = 0

    def first(self) -> float:
        return self._buf[self._start]

    def last(self) -> float:
        return self._buf[-1]

    def tail(self, n: int) -> array[float]:
        """The newest ``n`` values, oldest first (NaN where a reading was missing)."""
        return self._buf[max(self._start, len(self._buf) - n) :] if n > 0 else array("d")

    def count_since(self, cutoff: float) -> int:
        """How many of the newest values are at least ``cutoff`` (for increasing values:
        the times within a window)."""
        buf, start = self._buf, self._start
        i = len(buf)
        while i > start and buf[i - 1] >= cutoff:
            i -= 1
        return len(buf) - i


@dataclass(frozen=True, slots=True)
class SeriesStats:
    values: tuple[float, ...]
    lo: float | None
    hi: float | None
    last: float | None


class RigHistory:
    """Ring buffers of recent samples' metrics, keyed by GPU UUID.

    Samples older than ``max_age_s`` are dropped, so the history covers the same time
    whatever the interval; ``maxlen`` bounds memory at the fastest interval. A series is
    read for a time window, so the same buffers serve the 1, 5, 15 and 60 minute views.
    """

    def __init__(
        self, maxlen: int = 3600, max_age_s: float | None = None, xid_maxlen: int = XID_LOG_LEN
    ) -> None:
        self.maxlen = maxlen
        self.max_age_s = max_age_s
        # (GPU UUID, event), oldest first; only the newest ``xid_maxlen`` are kept. XID events
        # are kept whatever their age: they are rare, and the reason to look back.
        self._xids: deque[tuple[str, XidEvent]] = deque(maxlen=xid_maxlen)
        self.xid_dropped = 0  # events the sources or this log had no room for
        # GPU UUID -> (times, metric -> values), the metrics in METRICS' order
        self._gpu: dict[str, tuple[FloatRing, dict[str, FloatRing]]] = {}
        self.first: RigSample | None = None
        self.last: RigSample | None = None
        # uuid -> (mJ used since the first sample, the counter's last reading)
        self._energy: dict[str, tuple[int, int]] = {}
        # pid -> (times, metric -> values), for processes seen in the window
        self._proc: dict[int, tuple[FloatRing, dict[str, FloatRing]]] = {}

    def append(self, sample: RigSample) -> None:
        if self.first is None:
            self.first = sample
        self.last = sample
        t = sample.t
        cutoff = None if self.max_age_s is None else t - self.max_age_s
        for g in sample.gpus:
            uuid = g.info.uuid
            rings = self._gpu.get(uuid)
            if rings is None:
                rings = self._gpu[uuid] = (
                    FloatRing(self.maxlen),
                    {m: FloatRing(self.maxlen) for m in METRICS},
                )
            times, series = rings
            times.append(t)
            old = 0
            if cutoff is not None:
                while times and times.first() < cutoff:
                    times.popleft()
                    old += 1
            lost = g.lost
            for metric, buf in series.items():
                value = None if lost else getattr(g, metric)
                buf.append(None if value is None else float(value))
                if old:
                    for _ in range(min(old, len(buf) - len(times))):
                        buf.popleft()
            if g.energy_mj is not None:
                used, last = self._energy.get(uuid, (0, g.energy_mj))
                # a counter that went back (a driver reload, a replay's loop) starts again
                self._energy[uuid] = (used + max(0, g.energy_mj - last), g.energy_mj)
            self._keep_xids(uuid, g.xid_events, g.xid_dropped)
        self._keep_processes(sample)

    def _keep_processes(self, sample: RigSample) -> None:
        """Each process's readings this tick (summed or averaged over its GPUs)."""
        now: dict[int, list[float | None]] = {}
        sms: dict[int, list[float]] = {}
        for g in sample.gpus:
            for p in g.processes:
                row = now.get(p.pid)
                if row is None:
                    rss = float(p.host_rss) if p.host_rss is not None else None
                    row = now[p.pid] = [None, None, p.cpu_pct, rss]
                if p.used_memory is not None:
                    row[0] = (row[0] or 0.0) + p.used_memory
                if p.sm_util is not None:
                    sms.setdefault(p.pid, []).append(p.sm_util)
        for pid, values in sms.items():
            now[pid][1] = sum(values) / len(values)
        for pid, row in now.items():
            self._keep_process(pid, sample.t, row)
        if self.max_age_s is not None:  # a process gone for the whole window is forgotten
            cutoff = sample.t - self.max_age_s
            for pid in [p for p, (t, _s) in self._proc.items() if t.last() < cutoff]:
                del self._proc[pid]

    def _keep_process(self, pid: int, t: float, row: list[float | None]) -> None:
        kept = self._proc.get(pid)
        if kept is None:
            if len(self._proc) >= PROCESSES_KEPT:  # the one seen longest ago makes room
                del self._proc[min(self._proc, key=lambda p: self._proc[p][0].last())]
            kept = self._proc[pid] = (
                FloatRing(self.maxlen),
                {m: FloatRing(self.maxlen) for m in PROCESS_METRICS},
            )
        times, series = kept
        times.append(t)
        for metric, value in zip(PROCESS_METRICS, row, strict=True):
            series[metric].append(value)
        if self.max_age_s is not None:
            while times and times.first() < t - self.max_age_s:
                times.popleft()
                for buf in series.values():
                    buf.popleft()

    def process_series(self, pid: int, metric: str, window_s: float | None = None) -> SeriesStats:
        """A process's ``metric`` (one of :data:`PROCESS_METRICS`) over the last ``window_s``
        seconds it was seen."""
        kept = self._proc.get(pid)
        if kept is None or not kept[0]:
            return SeriesStats((), None, None, None)
        times, series = kept
        return _window(times, series[metric], window_s)

    def process_seen(self, pid: int) -> tuple[float, float] | None:
        """(first, last) time the process was seen in the history, or None."""
        kept = self._proc.get(pid)
        if kept is None or not kept[0]:
            return None
        return kept[0].first(), kept[0].last()

    def _keep_xids(self, uuid: str, events: tuple[XidEvent, ...], dropped: int) -> None:
        log = self._xids
        for event in events:
            if log.maxlen is not None and len(log) == log.maxlen:
                self.xid_dropped += 1  # the oldest makes room
            log.append((uuid, event))
        self.xid_dropped += dropped

    def xid_events(self, uuid: str | None = None) -> tuple[XidEvent, ...]:
        """The XID events kept, oldest first: one GPU's, or every GPU's when ``uuid`` is None."""
        return tuple(e for u, e in self._xids if uuid is None or u == uuid)

    def series(self, uuid: str, metric: str, window_s: float | None = None) -> SeriesStats:
        """Values of ``metric`` for one GPU over the last ``window_s`` seconds (all if None);
        missing readings are dropped."""
        rings = self._gpu.get(uuid)
        if rings is None:
            return SeriesStats((), None, None, None)
        times, buf = rings[0], rings[1].get(metric)
        if not times or buf is None:
            return SeriesStats((), None, None, None)
        return _window(times, buf, window_s)

    def energy_since_start_mj(self) -> int | None:
        """Energy all GPUs used since the first sample, from their energy counters (what
        each counted before it went back kept, and a GPU's that left the sample: lost, or
        another recording's rig joined on)."""
        if not self._energy:
            return None
        return sum(used for used, _last in self._energy.values())

    def seconds(self) -> float:
        if self.first is None or self.last is None:
            return 0.0
        return self.last.t - self.first.t


def _window(times: FloatRing, buf: FloatRing, window_s: float | None) -> SeriesStats:
    """The values of ``buf`` (aligned with ``times``) over the last ``window_s`` seconds (all
    if None); missing readings are dropped."""
    take = len(times)
    if window_s is not None:
        # times are increasing: count back from the newest, never over the whole buffer
        take = times.count_since(times.last() - window_s)
    values = tuple(v for v in buf.tail(min(take, len(buf))) if v == v)  # NaN: missing
    if not values:
        return SeriesStats((), None, None, None)
    return SeriesStats(values, min(values), max(values), values[-1])

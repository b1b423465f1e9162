"""The host's CPU and memory and a process's host-side facts, read from Linux's ``/proc``.

What psutil reads there, the way it works them out (its names, CPU percentages and start
times), without importing it: psutil's modules and named tuples are 0.7 MiB of an idle
monitor's memory, which is measured against a bare Textual app's (bench/idle_cpu.py).
Elsewhere ``host_psutil.py`` asks psutil. tests/test_procfs.py checks both against each other.
"""

from __future__ import annotations

import os
import pwd
import resource
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from lltui.sources.gpu.meminfo import host_memory

COMM_LEN = 15  # the kernel keeps a process's name to 15 bytes


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """What the host knows of one process."""

    name: str
    user: str
    cmdline: tuple[str, ...]
    host_rss: int  # bytes
    cpu_pct: float  # of one core since the last reading (0.0 the first time)
    started: float | None  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class _Stat:
    """The fields of ``/proc/PID/stat`` used here."""

    comm: str
    cpu_ticks: int  # utime + stime
    start_ticks: int  # since boot


def readable(root: str | os.PathLike[str] = "/") -> bool:
    """Whether this host has a Linux ``/proc`` to read."""
    proc = Path(root, "proc")
    return (proc / "self" / "stat").exists() and (proc / "stat").exists()


def parse_stat(data: bytes) -> _Stat:
    """``/proc/PID/stat``: the name sits in parentheses and may hold spaces and parentheses
    itself, so the fields are counted from the last ``)``."""
    open_at, close_at = data.index(b"("), data.rindex(b")")
    comm = data[open_at + 1 : close_at].decode("utf-8", "surrogateescape")
    fields = data[close_at + 2 :].split()  # fields[0] is the state, field 3 of proc(5)
    return _Stat(
        comm=comm,
        cpu_ticks=int(fields[11]) + int(fields[12]),
        start_ticks=int(fields[19]),
    )


def parse_statm(data: bytes) -> int:
    """``/proc/PID/statm``'s resident pages: what ``ps`` and psutil call RSS (the RSS field
    of ``/proc/PID/stat`` can read several percent lower)."""
    return int(data.split()[1])


def parse_cmdline(data: bytes) -> tuple[str, ...]:
    """``/proc/PID/cmdline``: arguments ended by NULs; a process that rewrote its title may
    have put them in one string with spaces (read as psutil reads them)."""
    text = data.decode("utf-8", "surrogateescape")
    if not text:
        return ()
    sep = "\x00" if text.endswith("\x00") else " "
    if text.endswith(sep):
        text = text[:-1]
    args = text.split(sep)
    if sep == "\x00" and len(args) == 1 and " " in text:
        args = text.split(" ")
    return tuple(args)


def full_name(comm: str, cmdline: tuple[str, ...]) -> str:
    """The kernel's name cut at 15 bytes is completed from the program's path where that
    starts with it (as psutil's ``name()`` does)."""
    if len(comm) >= COMM_LEN and cmdline:
        program = os.path.basename(cmdline[0])
        if program.startswith(comm):
            return program
    return comm


def cpu_times(stat: Path) -> list[int] | None:
    """``/proc/stat``'s first line: user nice system idle iowait irq softirq steal, in ticks
    since boot (guest and guest_nice, which user and nice hold already, left out)."""
    try:
        with open(stat, "rb") as f:
            words = f.readline().split()
        fields = [int(v) for v in words[1:9]]
    except (OSError, ValueError):
        return None
    if not words or words[0] != b"cpu" or len(fields) < 4:
        return None
    return fields + [0] * (8 - len(fields))


class CpuMeter:
    """The host's CPU use between two calls, from ``/proc/stat``'s first line: busy time over
    all time, iowait counted idle and guest time not twice (it is in user time already). A
    counter that went backwards (iowait can) counts as no change."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self._stat = Path(root, "proc", "stat")
        self._last: list[int] | None = cpu_times(self._stat)

    def percent(self) -> float | None:
        """Busy share of all CPUs since the last call, 0-100; 0.0 when no time passed."""
        now = cpu_times(self._stat)
        last, self._last = self._last, now
        if now is None or last is None:
            return None
        deltas = [max(0, a - b) for a, b in zip(now, last, strict=True)]
        total = sum(deltas)
        if total <= 0:
            return 0.0
        busy = total - deltas[3] - deltas[4]  # less idle and iowait
        return round(min(100.0, 100.0 * busy / total), 1)


def _word(path: Path, key: bytes) -> bytes:
    """The word after ``key`` on the line of ``path`` that starts with it; OSError if none."""
    with open(path, "rb") as f:
        for line in f:
            if line.startswith(key):
                return line.split()[1]
    raise OSError(f"no {key.decode().strip(' :')} in {path}")


@lru_cache(maxsize=256)
def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid without a passwd entry (a container's): its number
        return str(uid)


class ProcReader:
    """The host's CPU and memory and processes' facts from ``/proc`` under ``root``. Each
    pid's last CPU time is kept so its percentage covers the time since the previous reading,
    and its start time as first worked out (psutil's Process keeps it too: the boot time it
    adds moves when the wall clock is stepped); a pid reused by a new process starts over."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        self._proc = self.root / "proc"
        self._cpu = CpuMeter(root)
        self._ticks_per_s = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        # pid -> (start ticks, start time, last CPU ticks, when read)
        self._seen: dict[int, tuple[int, float | None, int, float]] = {}

    def cpu_percent(self) -> float | None:
        """The host's CPU use since the last call."""
        return self._cpu.percent()

    def memory(self) -> tuple[int, int] | None:
        """(total, available) bytes."""
        return host_memory(self.root)

    def process(self, pid: int) -> ProcessReading | None:
        """One process's facts; None where it is gone or cannot be read (another PID
        namespace, ``hidepid``)."""
        folder = self._proc / str(pid)
        try:
            with open(folder / "stat", "rb") as f:
                stat = parse_stat(f.read())
            with open(folder / "cmdline", "rb") as f:
                cmdline = parse_cmdline(f.read())
            with open(folder / "statm", "rb") as f:
                rss_pages = parse_statm(f.read())
            now = time.monotonic()
            # the real uid, read each time: a uid may change
            user = _user(int(_word(folder / "status", b"Uid:")))
            seen = self._seen.get(pid)
            if seen is not None and seen[0] == stat.start_ticks:
                started = seen[1]
                cpu_pct = self._cpu_pct(stat.cpu_ticks - seen[2], now - seen[3])
            else:
                started, cpu_pct = self._started(stat.start_ticks), 0.0
            self._seen[pid] = (stat.start_ticks, started, stat.cpu_ticks, now)
            return ProcessReading(
                name=full_name(stat.comm, cmdline),
                user=user,
                cmdline=cmdline,
                host_rss=rss_pages * self._page,
                cpu_pct=cpu_pct,
                started=started,
            )
        except (OSError, ValueError, IndexError):
            self._seen.pop(pid, None)
            return None

    def forget(self, keep: set[int]) -> None:
        """Drop what is kept of pids no longer listed."""
        for pid in [pid for pid in self._seen if pid not in keep]:
            del self._seen[pid]

    def _cpu_pct(self, ticks: int, seconds: float) -> float:
        if seconds <= 0:
            return 0.0
        return round(100.0 * ticks / self._ticks_per_s / seconds, 1)

    def _started(self, start_ticks: int) -> float | None:
        """Seconds since the epoch: the boot time now (read anew for each new process, as
        psutil does) and the ticks since boot the process started at."""
        try:
            boot = float(_word(self._proc / "stat", b"btime "))
            return boot + start_ticks / self._ticks_per_s
        except (OSError, ValueError):
            return None


@dataclass(frozen=True, slots=True)
class _Reading:
    at: float  # the caller's clock
    busy: int  # ticks all CPUs were busy since boot
    total: int
    mine: int  # CPU ticks of the processes left out (the server, lltui)


class OthersMeter:
    """What share of the host's CPU time processes other than one (a llama-server, by
    ``pid()``) and lltui itself took between two moments: :meth:`mark` keeps a reading,
    :meth:`share_since` reads again and compares with the newest reading taken by then.
    ``pid`` None: other than lltui and the children it has waited for (a benchmark it ran
    between the two moments: its time counts once it has exited)."""

    MIN_TICKS = 100  # of all CPUs together: one CPU-second (half a second on two)

    def __init__(
        self,
        pid: Callable[[], int | None] | None,
        root: str | os.PathLike[str] = "/",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pid = pid
        self._proc = Path(root, "proc")
        self._clock = clock
        self._readings: deque[_Reading] = deque(maxlen=64)

    def mark(self) -> None:
        reading = self._read()
        if reading is not None:
            self._readings.append(reading)

    def share_since(self, since: float, slack_s: float = 0.25) -> float | None:
        """Other processes' share (0-1) of all CPUs' time from the reading taken about
        ``since`` (up to a second before, ``slack_s`` after) to now; None where no reading
        is that close (a longer window would water a busy moment down), /proc cannot say,
        or too little time passed to tell (fewer than MIN_TICKS: a few ticks are noise)."""
        before = [r for r in self._readings if since - 1.0 <= r.at <= since + slack_s]
        now = self._read()
        if not before or now is None:
            return None
        start = before[-1]
        total = now.total - start.total
        if total < self.MIN_TICKS:
            return None
        others = (now.busy - start.busy) - (now.mine - start.mine)
        return min(1.0, max(0.0, others / total))

    def _read(self) -> _Reading | None:
        times = cpu_times(self._proc / "stat")
        mine = self._mine()
        if times is None or mine is None:
            return None
        total = sum(times)
        return _Reading(self._clock(), total - times[3] - times[4], total, mine)

    def _mine(self) -> int | None:
        """CPU ticks of what is left out: the process ``pid()`` names and lltui, or lltui
        and its waited-for children."""
        if self._pid is None:
            me = resource.getrusage(resource.RUSAGE_SELF)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
            return round(seconds * os.sysconf("SC_CLK_TCK"))
        pid = self._pid()
        if pid is None:
            return None
        try:
            return sum(
                parse_stat((self._proc / name / "stat").read_bytes()).cpu_ticks
                for name in (str(pid), "self")
            )
        except (OSError, ValueError, IndexError):
            return None

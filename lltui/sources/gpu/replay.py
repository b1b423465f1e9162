"""``replay:FILE`` plays a recording back as a source; ``Recorder`` makes recordings.

The replay source indexes the file when opened (where each sample line starts and its time)
and reads one line per poll, so a recording of a whole day does not have to fit in memory.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import re
import statistics
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import replace
from typing import IO, Any

from lltui import __version__, paths
from lltui.core.monitor.models import (
    GpuSource,
    Playback,
    RecordingUnreadable,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.monitor.record import (
    RECORDING_KEY,
    TRUNCATED_HINT,
    Decoder,
    Encoder,
    RecordingError,
    RecordingHeader,
    loads_line,
    parse_header,
    sample_from_dict,
    sample_time,
)
from lltui.core.monitor.redact import redact_sample
from lltui.core.text import counted
from lltui.sources.gpu.base import Clock, wall_clock

END_OF_RECORDING = "end of recording"
JOINED_HEADER = b'{"' + RECORDING_KEY.encode() + b'":'  # how the Recorder starts a header
HEADER_START = re.compile(rb'\s*\{\s*"' + RECORDING_KEY.encode() + rb'"\s*:')  # edited too
CUT_BEFORE_JOIN_HINT = "a line cut short, another recording joined on after it; it was skipped"
MAX_HEADER_BYTES = 64 * 1024 * 1024  # a header for thousands of GPUs is well under this
CATCH_UP = 4096  # samples poll_all plays at most (each checked for alerts: ~0.3 ms)


# a JSON number; a sample line as the Recorder writes it starts with its seq, t and wall
_NUMBER = rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?"
SAMPLE_START = re.compile(
    rb'\{"seq":-?(?:0|[1-9][0-9]*),"t":(' + _NUMBER + rb'),"wall":(' + _NUMBER + rb'),"gpus":\['
)


class _Index:
    """Each sample line's byte offset in the file, 1-based line number, recorded monotonic
    time and the index of the RigInfo in force, in arrays: 28 bytes a sample, where an
    object each took some 200 (a day at 0.25 s, 345600 samples: 9 MiB, not 70)."""

    __slots__ = ("info", "line", "offset", "t")

    def __init__(self) -> None:
        self.offset = array("q")
        self.line = array("q")
        self.t = array("d")
        self.info = array("i")

    def __len__(self) -> int:
        return len(self.offset)

    def append(self, offset: int, line: int, t: float, info: int) -> None:
        self.offset.append(offset)
        self.line.append(line)
        self.t.append(t)
        self.info.append(info)


def check_speed(speed: float) -> None:
    """ValueError for a replay pace that is not a positive number of times the recorded."""
    if not 0 < speed < math.inf:
        raise ValueError(f"replay speed must be above 0, got {speed:g}")


class ReplaySource:
    """Plays a recording: at ``speed`` times the recorded pace (the sample whose recorded
    offset has elapsed on ``clock``), or ``stepped`` (the next sample on every poll).

    Samples keep their recorded values; ``seq`` and ``t`` are renumbered onto the replay's
    own timeline so looping and the end stay increasing; each loop plays later on the wall
    clock too (``wall`` and XID events moved on by the recording's span), so the alerts'
    times go on increasing as well. A poll that finds no new sample due
    returns the previous one again with the same ``seq``. After the last sample it keeps
    returning the last one with the error "end of recording", unless ``loop``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        speed: float = 1.0,
        stepped: bool = False,
        loop: bool = False,
        clock: Clock | None = None,
    ) -> None:
        check_speed(speed)
        self.path = os.fspath(path)
        self.name = f"replay:{self.path}"
        self.speed = speed
        self.stepped = stepped
        self.loop = loop
        self._clock = clock or time.monotonic
        self._file: IO[bytes] | None = None
        self._entries = _Index()
        self._offsets = array("d")  # seconds from the first sample, non-decreasing
        self._infos: list[RigInfo] = []  # recorded infos, as replayed (source renamed)
        self._info: RigInfo | None = None
        self.header: RecordingHeader | None = None
        self.hints: tuple[str, ...] = ()
        self._gap = 1.0
        self._start = 0.0
        self._step = 0
        self._ended = 0
        self._last_pos = -1
        self._last: RigSample | None = None
        self._wall_period = 1.0  # how much later on the wall clock each loop plays

    # -- opening ---------------------------------------------------------------------------
    def _fail(self, exc: RecordingError) -> SourceUnavailable:
        return RecordingUnreadable(exc.where(self.path))

    def open(self) -> RigInfo:
        self.close()
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - held open while replaying
        except FileNotFoundError:
            raise RecordingUnreadable(f"{self.path}: no such recording") from None
        except IsADirectoryError:
            raise RecordingUnreadable(f"{self.path}: is a directory, not a recording") from None
        except OSError as exc:
            raise SourceUnavailable(f"{self.path}: {exc.strerror or exc}") from None
        try:
            self._index(f)
        except RecordingError as exc:
            f.close()
            raise self._fail(exc) from None
        except OSError as exc:
            f.close()
            raise SourceUnavailable(f"{self.path}: {exc.strerror or exc}") from None
        self._file = f
        self._start = self._clock()
        self._step = 0
        self._ended = 0
        self._last_pos = -1
        self._last = None
        self._info = self._infos[self._entries.info[0]]
        return self._info

    def _index(self, f: IO[bytes]) -> None:
        first = f.readline(MAX_HEADER_BYTES)
        if not first.strip():
            raise RecordingError("the file is empty; not an lltui recording", 1)
        if not first.endswith(b"\n") and len(first) >= MAX_HEADER_BYTES:
            raise RecordingError("the first line is far too long; not an lltui recording", 1)
        try:
            obj = loads_line(first.decode("utf-8"), 1)
        except (UnicodeDecodeError, RecordingError) as exc:
            why = " (not UTF-8 text)" if isinstance(exc, UnicodeDecodeError) else f": {exc}"
            if not HEADER_START.match(first):
                raise RecordingError(f"not an lltui recording{why}", 1) from None
            if not first.endswith(b"\n"):  # the recorder stopped while writing its header
                raise RecordingError(
                    "an lltui recording cut short inside its header line; it holds no samples", 1
                ) from None
            raise RecordingError(
                f"an lltui recording whose header line is broken{why}", 1
            ) from None
        self.header = header = parse_header(obj)
        decoder = Decoder(header)
        recorded: list[RigInfo] = [header.info]
        entries = _Index()
        hints: list[str] = []
        pending: RecordingError | None = None
        joined: list[tuple[int, int]] = []  # (first entry, its header's line) of each
        first_wall: float | None = None
        last_wall: float | None = None
        offset = len(first)
        number = 1
        for raw in f:
            number += 1
            start, offset = offset, offset + len(raw)
            # Checked in full when played; here only what the timeline needs, read cheaply
            # from a sample line as the Recorder writes it.
            timed = _timing(raw)
            if timed is None and not raw.strip():
                continue
            if pending is not None:
                raise pending  # a broken line with more after it is corruption, not a cut
            if timed is None:
                try:
                    obj = loads_line(raw.decode("utf-8"), number)
                except (UnicodeDecodeError, RecordingError) as exc:
                    at = raw.find(JOINED_HEADER, 1)
                    if at < 0:
                        if not isinstance(exc, RecordingError):
                            exc = RecordingError("not UTF-8 text", number)
                        pending = exc
                        continue
                    # a recording cut mid-line, another joined on after it (cat a.jsonl b.jsonl)
                    hints.append(f"line {number}: {CUT_BEFORE_JOIN_HINT}")
                    obj = loads_line(raw[at:].decode("utf-8", errors="replace"), number)
                if "seq" not in obj:
                    decoder.feed(obj, number)  # an info line (or a line that is neither: raises)
                    recorded.append(decoder.info)
                    if RECORDING_KEY in obj:  # another recording joined on: cat a.jsonl b.jsonl
                        joined.append((len(entries), number))
                        hints.append(
                            f"line {number}: another recording joined on here,"
                            " played after the one above"
                        )
                    continue
                # wall None: the sample says so when played
                timed = sample_time(obj, number), _number(obj.get("wall"))
            t, wall = timed
            joins = joined and joined[-1][0] == len(entries)  # the first of one joined on
            if joins and wall is not None and last_wall is not None and wall < last_wall:
                raise RecordingError(
                    "a recording made before the one above it is joined on here;"
                    " join them oldest first",
                    joined[-1][1],
                )
            if not entries:
                first_wall = wall
            entries.append(start, number, t, len(recorded) - 1)
            last_wall = wall
        if pending is not None:
            hints.append(f"line {pending.line}: {TRUNCATED_HINT}")
        if not entries:
            raise RecordingError("the recording has a header but no samples")
        self._entries = entries
        starts = {i for i, _ in joined}
        times = entries.t
        pairs = enumerate(itertools.pairwise(times), 1)
        gaps = [b - a for i, (a, b) in pairs if b > a and i not in starts]
        self._gap = statistics.median(gaps) if gaps else 1.0
        # each recording joined on starts one gap after the one before it ends: its clock
        # is another process's, and may be hours on or behind
        offsets = array("d")
        base, last = -times[0], 0.0
        for i, t in enumerate(times):
            if i in starts and offsets:
                base = last + self._gap - t
            last = max(t + base, last)
            offsets.append(last)
        self._offsets = offsets
        walls = last_wall - first_wall if first_wall is not None and last_wall is not None else 0.0
        self._wall_period = max(offsets[-1], walls) + self._gap  # the longer, so never back
        created = f", recorded {header.created}" if header.created else ""
        what = header.source or header.info.source
        note = f"replaying {what}{created}"
        self.hints = tuple(hints)
        self._infos = [
            replace(info, source=self.name, hints=(*info.hints, note, *hints)) for info in recorded
        ]

    # -- playing -----------------------------------------------------------------------------
    def _read(self, pos: int) -> RigSample:
        assert self._file is not None
        index = self._entries
        line = index.line[pos]
        self._file.seek(index.offset[pos])
        raw = self._file.readline()
        try:
            obj = loads_line(raw.decode("utf-8", errors="replace"), line)
            sample = sample_from_dict(obj, self._infos[index.info[pos]], line)
        except RecordingError as exc:  # the file changed under us
            raise self._fail(exc) from None
        return sample

    def _position(self) -> tuple[int, int, float | None]:
        """(entry, loops completed, playback seconds) of the sample due now; entry is
        len(entries) past the end."""
        n = len(self._entries)
        if self.stepped:
            pos = self._step
            self._step += 1
            if self.loop:
                return pos % n, pos // n, None
            return min(pos, n), 0, None
        elapsed = (self._clock() - self._start) * self.speed
        period = self._offsets[-1] + self._gap
        loops = 0
        if self.loop:
            loops = int(elapsed // period)
            elapsed -= loops * period
        elif elapsed >= period:
            return n, 0, elapsed
        idx = max(0, bisect.bisect_right(self._offsets, elapsed) - 1)
        return idx, loops, elapsed

    def poll(self) -> RigSample:
        return self._poll(every=False)[-1]

    def poll_all(self) -> tuple[RigSample, ...]:
        """Every sample that came due since the last poll, oldest first, the last one what
        :meth:`poll` would return: a timed replay faster than the polls skips none (``watch``
        evaluates each for alerts). One that cannot be read is passed over, as ``poll``
        passes over those it skips; the last one raises, as ``poll`` does."""
        return self._poll(every=True)

    def _poll(self, *, every: bool) -> tuple[RigSample, ...]:
        if self._file is None:
            self.open()
        n = len(self._entries)
        idx, loops, elapsed = self._position()
        pos = loops * n + min(idx, n)
        due: list[RigSample] = []
        said: list[str] = []  # for the next sample played: what it could not play before it
        if every:
            # at most CATCH_UP a poll: a looped replay faster than its samples can be checked
            # fell further behind each poll, its memory without bound
            first = max(self._last_pos + 1, pos - CATCH_UP)
            if first > self._last_pos + 1:
                behind = counted(first - self._last_pos - 1, "sample")
                said.append(
                    f"{behind} passed over: the replay runs faster than they can be checked"
                )
            for skipped in range(first, pos):
                try:
                    played = self._play(skipped)
                except SourceUnavailable as exc:  # said as a stepped replay says it
                    self._last_pos, self._last = skipped, None
                    said.append(str(exc))
                    continue
                due.append(_saying(played, said))
                said = []
        if idx < n:
            if pos != self._last_pos or self._last is None:
                self._play(pos)
            assert self._last is not None
            return (*due, _saying(self._last, said))
        self._ended += 1
        base = self._start + self._offsets[-1]
        final = self._last
        if final is None or self._last_pos != n - 1:  # the clock ran past the last one
            final = replace(self._read(n - 1), seq=n, t=base)
            self._last, self._last_pos = final, n - 1
        t = self._start + elapsed if elapsed is not None else base + self._ended * self._gap
        length = self._offsets[-1]
        end = replace(
            final,
            seq=n + self._ended,
            t=max(t, final.t),
            error=END_OF_RECORDING,
            ended=True,
            playback=Playback(length, length),
        )
        return (*due, _saying(end, said))

    def _play(self, pos: int) -> RigSample:
        """The ``pos``-th sample played (counting every loop's), made the last one."""
        loops, idx = divmod(pos, len(self._entries))
        recorded = self._read(idx)
        if loops:
            recorded = _later(recorded, loops * self._wall_period)
        sample = replace(
            recorded,
            seq=pos + 1,
            t=self._start + loops * (self._offsets[-1] + self._gap) + self._offsets[idx],
            playback=Playback(self._offsets[idx], self._offsets[-1], loops),
        )
        self._last_pos = pos
        self._last = sample
        self._info = sample.info
        return sample

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _timing(raw: bytes) -> tuple[float, float | None] | None:
    """(t, wall) of a sample line as the Recorder writes it (seq, t and wall first, whole,
    UTF-8, no other recording joined on inside it), read without parsing the rest, which is
    checked when the sample is played; None for any other line: it is parsed in full."""
    m = SAMPLE_START.match(raw)
    if m is None or not raw.endswith(b"}\n") or raw.find(JOINED_HEADER, 1) >= 0:
        return None
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    t, wall = float(m[1]), float(m[2])
    return (t, wall) if math.isfinite(t) and math.isfinite(wall) else None


def _saying(sample: RigSample, said: list[str]) -> RigSample:
    """``sample`` with what could not be played before it said first in its error."""
    if not said:
        return sample
    return replace(sample, error="; ".join([*said, *([sample.error] if sample.error else [])]))


def _number(value: object) -> float | None:
    return float(value) if type(value) is float or type(value) is int else None


def _later(sample: RigSample, by: float) -> RigSample:
    """``sample`` seen ``by`` seconds later: its wall clock and the XID events it saw, so a
    loop's alerts and events follow the last loop's instead of going back in time. When a
    process started is kept: its age goes on growing."""
    gpus = tuple(
        replace(g, xid_events=tuple(replace(e, t=e.t + by) for e in g.xid_events))
        if g.xid_events
        else g
        for g in sample.gpus
    )
    return replace(sample, wall=sample.wall + by, gpus=gpus)


class Recorder:
    """Writes samples to a JSONL recording: the header first, then one flushed line per
    sample, so a crash loses at most the line being written (which replay then skips).

    A recording holds every process on the GPUs, other users' included: the file is created
    mode 0600, and the secrets in each command line (API keys, tokens, passwords, a URL's
    credentials) are written as ``***`` unless ``full`` (``--record-full``).

    ``write`` may come from the poller thread while ``start``/``close`` come from another;
    a write after ``close`` is dropped. Samples written before ``start`` make the header
    from their own rig info.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lltui_version: str = __version__,
        wall: Clock = wall_clock,
        full: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self._version = lltui_version
        self._wall = wall
        self._full = full
        self._lock = threading.Lock()
        # Opened now so a bad path fails before anything runs (OSError for the caller).
        self._file: IO[str] | None = paths.open_private(self.path, newline="\n")
        self._encoder: Encoder | None = None
        self.samples_written = 0

    @property
    def closed(self) -> bool:
        return self._file is None

    def _put(self, text: str) -> None:
        assert self._file is not None
        self._file.write(text + "\n")
        self._file.flush()

    def _start_locked(self, info: RigInfo) -> None:
        self._encoder = Encoder(info)
        self._put(self._encoder.header(lltui_version=self._version, created=self._wall()))

    def start(self, info: RigInfo) -> None:
        """Write the header for ``info`` (once; later calls do nothing)."""
        with self._lock:
            if self._file is None:
                raise ValueError(f"{self.path}: the recording is closed")
            if self._encoder is None:
                self._start_locked(info)

    def write(self, sample: RigSample) -> None:
        with self._lock:
            if self._file is None:
                return
            if self._encoder is None:
                self._start_locked(sample.info)
            assert self._encoder is not None
            if not self._full:
                sample = redact_sample(sample)
            # One write per line, the line built first: a failure cannot split earlier lines.
            self._put("\n".join(self._encoder.lines(sample)))
            self.samples_written += 1

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                finally:
                    self._file = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordingSource:
    """Any GpuSource with its samples teed into a Recorder."""

    def __init__(self, source: GpuSource, recorder: Recorder) -> None:
        self.source = source
        self.recorder = recorder
        self.name = source.name

    def open(self) -> RigInfo:
        info = self.source.open()
        self.recorder.start(info)
        return info

    def poll(self) -> RigSample:
        sample = self.source.poll()
        self.recorder.write(sample)
        return sample

    def close(self) -> None:
        try:
            self.source.close()
        finally:
            self.recorder.close()


def record(
    source: GpuSource,
    path: str | os.PathLike[str],
    count: int,
    *,
    sleep: Callable[[float], Any] = time.sleep,
    interval: float = 0.0,
) -> int:
    """Open ``source``, record ``count`` polls into ``path``, close both; the number written."""
    with Recorder(path) as recorder:
        tee = RecordingSource(source, recorder)
        tee.open()
        try:
            for i in range(count):
                if i and interval > 0:
                    sleep(interval)
                tee.poll()
        finally:
            tee.close()
        return recorder.samples_written

"""A whole recording read at once, for tests: an oracle beside lltui's replay source (which
reads a recording by index, a sample at a time), so what the recorder wrote is checked by a
reader of its own."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from lltui.core.monitor.models import RigSample
from lltui.core.monitor.record import (
    TRUNCATED_HINT,
    Decoder,
    RecordingError,
    RecordingHeader,
    loads_line,
    parse_header,
)


@dataclass(frozen=True, slots=True)
class Recording:
    header: RecordingHeader
    samples: tuple[RigSample, ...]
    hints: tuple[str, ...] = ()  # what was skipped, for the user


def decode_lines(lines: Iterable[str]) -> Recording:
    """A whole recording from its lines (with or without line endings).

    A broken last line is skipped with a hint: that is what a recording cut mid-write looks
    like. Any other bad line raises RecordingError with its line number.
    """
    header: RecordingHeader | None = None
    decoder: Decoder | None = None
    samples: list[RigSample] = []
    hints: list[str] = []
    pending: RecordingError | None = None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            if number == 1:
                raise RecordingError("the first line is empty; not an lltui recording", 1)
            continue
        if pending is not None:
            raise pending  # a bad line with more after it is not a cut-short end
        try:
            obj = loads_line(text, number)
        except RecordingError as exc:
            if number == 1:
                raise RecordingError(f"not an lltui recording: {exc}", 1) from None
            pending = exc
            continue
        if header is None:
            header = parse_header(obj)
            decoder = Decoder(header)
            continue
        assert decoder is not None
        sample = decoder.feed(obj, number)
        if sample is not None:
            samples.append(sample)
    if header is None:
        raise RecordingError("the file is empty; not an lltui recording")
    if pending is not None:
        hints.append(f"line {pending.line}: {TRUNCATED_HINT}")
    return Recording(header, tuple(samples), tuple(hints))


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """A whole recording in memory (for tests, tools and short files).

    Raises RecordingError; ``exc.where(path)`` is the one line to show."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            return decode_lines(f)
    except UnicodeDecodeError:
        raise RecordingError("not an lltui recording (not UTF-8 text)") from None

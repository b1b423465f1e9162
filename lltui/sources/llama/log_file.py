"""A log file read as lines, in bounded memory and time, whatever it holds.

The file is read in chunks, never whole: a line longer than :data:`MAX_LINE_BYTES` keeps its
start, a file larger than :data:`HEAD_BYTES` + :data:`TAIL_BYTES` is read at its start (the
load) and its end (how it stopped), with a note. A file that is not text (NUL bytes, control
characters) is refused at once. ``-`` reads standard input the same way (its head only).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

HEAD_BYTES = 32 * 1024 * 1024
TAIL_BYTES = 8 * 1024 * 1024
MAX_LINE_BYTES = 4096
CHUNK = 1024 * 1024
SNIFF = 8192


class LogFileError(Exception):
    """The log cannot be read: one line, and the exit code (2 bad input, 1 a failure)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class LogRead:
    """How much of the file was read, filled in as the lines are taken."""

    path: str
    size_bytes: int = 0
    read_bytes: int = 0
    lines: int = 0
    notes: list[str] = field(default_factory=list)


def _binary(sample: bytes) -> bool:
    if b"\0" in sample:
        return True
    control = sum(1 for c in sample if c < 9 or (13 < c < 32 and c != 27))
    return control > len(sample) // 10


def _open(path: str) -> tuple[BinaryIO, int]:
    if path == "-":
        if sys.stdin is None:  # started with its standard input closed (<&-)
            raise LogFileError("standard input is closed")
        return sys.stdin.buffer, 0
    try:
        st = os.stat(path)
    except OSError as exc:
        raise LogFileError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISFIFO(st.st_mode):  # <(cat log), a named pipe: read as standard input is
        try:
            # (a named pipe waits for its writer here, as cat would)
            return open(path, "rb"), 0  # (closed by the generator)
        except OSError as exc:
            raise LogFileError(f"{path}: {exc.strerror or exc}") from None
    if not os.path.isfile(path):
        raise LogFileError(f"{path}: not a file")
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed by the generator)
    except OSError as exc:
        raise LogFileError(f"{path}: {exc.strerror or exc}") from None
    return f, st.st_size


def read_lines(path: str, read: LogRead | None = None) -> Iterator[str]:
    """The file's lines, decoded as UTF-8 (bad bytes replaced), each cut to
    :data:`MAX_LINE_BYTES`. Raises :class:`LogFileError` for a file that is missing, empty
    or not text before yielding anything."""
    info = read if read is not None else LogRead(path)
    f, size = _open(path)
    info.size_bytes = size
    try:
        first = f.read(SNIFF)
        if not first:
            raise LogFileError(f"{path}: empty file" if path != "-" else "standard input is empty")
        if first.startswith(_UTF16_MARKS):  # PowerShell 5.1's ">" writes UTF-16, marked
            utf16 = _Utf16(f, first)
            info.notes.append("read as UTF-16 (its byte-order mark says so)")
            yield from _lines(utf16, utf16.read(SNIFF), 0, info)
            return
        if _binary(first):
            raise LogFileError(f"{path}: not a text file (binary data), not a llama.cpp log")
        yield from _lines(f, first, size, info)
    finally:
        if f is not sys.stdin.buffer:
            f.close()


_UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")  # UTF-16's byte-order marks, little and big end


class _Utf16:
    """A UTF-16 file read as UTF-8 bytes, as the rest of the reader takes them (read only,
    in order: it is read as standard input is, its first HEAD_BYTES)."""

    def __init__(self, f: BinaryIO, first: bytes) -> None:
        import codecs

        self._f = f
        self._decode = codecs.getincrementaldecoder("utf-16")(errors="replace").decode
        self._pending = self._decode(first).encode()

    def read(self, n: int) -> bytes:
        while len(self._pending) < n:
            raw = self._f.read(CHUNK)
            self._pending += self._decode(raw, final=not raw).encode()
            if not raw:
                break
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def seek(self, offset: int) -> int:  # (never: it is read as a stream, size 0)
        raise OSError("a UTF-16 log is read from its start only")


def _lines(f: BinaryIO | _Utf16, first: bytes, size: int, info: LogRead) -> Iterator[str]:
    head_limit = HEAD_BYTES if size == 0 or size > HEAD_BYTES + TAIL_BYTES else size
    yield from _split(_chunks(f, first, head_limit, info), info)
    if size > HEAD_BYTES + TAIL_BYTES:
        skipped = size - HEAD_BYTES - TAIL_BYTES
        info.notes.append(
            f"the file is {size / 2**30:.2f} GiB: read its first {HEAD_BYTES >> 20} MiB and "
            f"last {TAIL_BYTES >> 20} MiB ({skipped / 2**20:.0f} MiB between were skipped)"
        )
        f.seek(size - TAIL_BYTES)
        yield "..."
        # the tail starts inside a line: that line's end is dropped
        yield from _split(_chunks(f, f.read(CHUNK), TAIL_BYTES, info), info, partial=True)
    elif size == 0 and info.read_bytes >= HEAD_BYTES:
        info.notes.append(f"read the first {HEAD_BYTES >> 20} MiB of standard input")


def _chunks(f: BinaryIO | _Utf16, first: bytes, limit: int, info: LogRead) -> Iterator[bytes]:
    taken = 0
    chunk = first
    while chunk and taken < limit:
        chunk = chunk[: limit - taken]
        taken += len(chunk)
        info.read_bytes += len(chunk)
        yield chunk
        chunk = f.read(CHUNK)


def _split(chunks: Iterator[bytes], info: LogRead, partial: bool = False) -> Iterator[str]:
    """Lines out of chunks; an overlong line keeps its first MAX_LINE_BYTES. ``partial``:
    the first line is the end of one cut off, and is skipped."""
    part = b""
    dropping = skipping = partial
    for chunk in chunks:
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl == -1:
                if not dropping:
                    part += chunk[start:]
                    if len(part) > MAX_LINE_BYTES:
                        part = part[:MAX_LINE_BYTES]
                        dropping = True
                break
            if not dropping:
                part += chunk[start:nl]
            if not skipping:
                info.lines += 1
                yield part[:MAX_LINE_BYTES].decode("utf-8", errors="replace")
            part, dropping, skipping = b"", False, False
            start = nl + 1
    if part:
        info.lines += 1
        yield part.decode("utf-8", errors="replace")

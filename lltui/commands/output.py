"""What subcommands print goes to the terminal as text: control characters from files,
servers and process lists show as escapes, and an error is one line."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from lltui.core.text import error_text, printable


class _PrintableStream(io.TextIOBase):
    """A text stream that shows control characters as escapes: what subcommands print comes
    from files, servers and process lists, and must not drive the terminal."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def fileno(self) -> int:
        return self._inner.fileno()

    def isatty(self) -> bool:
        return self._inner.isatty()


@contextmanager
def printable_output() -> Iterator[None]:
    out, err = sys.stdout, sys.stderr
    sys.stdout = _PrintableStream(out)
    sys.stderr = _PrintableStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


MAX_ERROR_CHARS = 400  # a message quoting a megabyte of a file is still one readable line


# user:password@ in a URL a message quotes (anchored on "://": linear in the message)
_CREDENTIALS = re.compile(r"://[^/\s@]+@")


def error_line(message: str) -> str:
    """One line, whatever the message quotes (a value with a newline, an escape sequence,
    a megabyte of a file)."""
    line = _CREDENTIALS.sub("://***@", printable(message, one_line=True))
    if len(line) > MAX_ERROR_CHARS:
        line = f"{line[: MAX_ERROR_CHARS - 30]}... ({len(line)} characters in all)"
    return line if line.startswith("lltui") else f"lltui: {line}"


class ProgressLine:
    """Progress of a long step on standard error, once it has taken a second: one line
    redrawn on a terminal, a line every few seconds otherwise; cleared when done."""

    DELAY_S = 1.0
    TERMINAL_EVERY_S = 0.1
    PLAIN_EVERY_S = 5.0

    def __init__(
        self, label: str, unit: str = "estimates", clock: Callable[[], float] | None = None
    ) -> None:
        import time

        self.label = label
        self.unit = unit
        self._clock = clock or time.monotonic
        self._start = self._clock()
        self._last = -1e9
        self._shown = False
        self._stream: TextIO = sys.__stderr__ or sys.stderr
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())

    def __call__(self, done: int, planned: int) -> None:
        now = self._clock()
        if now - self._start < self.DELAY_S:
            return
        if now - self._last < (self.TERMINAL_EVERY_S if self._tty else self.PLAIN_EVERY_S):
            return
        self._last = now
        pct = min(99, 100 * done // max(1, planned))
        text = f"lltui: {self.label}: {pct}% ({done} {self.unit}, {now - self._start:.0f} s)"
        self._stream.write(f"\r{text}\x1b[K" if self._tty else f"{text}\n")
        self._stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown and self._tty:
            self._stream.write("\r\x1b[K")
            self._stream.flush()


def internal_error_line(exc: BaseException) -> str:
    """A bug of ours, in one line: what went wrong, and how to see the traceback."""
    return error_line(f"internal error: {error_text(exc)} (set LLTUI_DEBUG=1 for details)")

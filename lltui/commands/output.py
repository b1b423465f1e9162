"""What subcommands print goes to the terminal as text: control characters from files,
servers and process lists show as escapes, and an error is one line."""

from __future__ import annotations

import errno
import io
import os
import select
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from lltui.core.cmdline.secrets import redact_urls
from lltui.core.text import error_text, printable


class _PrintableStream(io.TextIOBase):
    """A text stream that shows control characters as escapes: what subcommands print comes
    from files, servers and process lists, and must not drive the terminal."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    @property
    def terminal(self) -> TextIO:
        """The stream underneath, for lltui's own progress line (which draws and erases
        itself with control characters; nothing from data goes there unescaped)."""
        return self._inner

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


def check_reader(stream: TextIO | None = None) -> None:
    """Raise :class:`BrokenPipeError`, as a write would, once the reader of ``stream``
    (stdout) has gone: the read end of its pipe closed (``lltui watch | head -1``), its
    socket's peer shut. A command that streams calls it each round, so one that has nothing
    to write for hours still ends with its reader (the CLI exits 0, quietly); a terminal or a
    file has no reader to lose."""
    try:
        fd = (stream or sys.stdout).fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, ValueError, OSError):
        return
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) or not hasattr(select, "poll"):
        return
    poller = select.poll()
    poller.register(fd, 0)  # errors and hang-ups are reported whatever is asked for
    # (the write end of a pipe whose reader closed reports POLLERR, a socket POLLHUP)
    if any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0)):
        raise BrokenPipeError(errno.EPIPE, "the reader of the output has gone")


MAX_ERROR_CHARS = 400  # a message quoting a megabyte of a file is still one readable line


def error_line(message: str) -> str:
    """One line, whatever the message quotes (a value with a newline, an escape sequence,
    a megabyte of a file)."""
    # (a URL it quotes keeps no user, password or secret query value)
    line = redact_urls(printable(message, one_line=True))
    if len(line) > MAX_ERROR_CHARS:
        line = f"{line[: MAX_ERROR_CHARS - 30]}... ({len(line)} characters in all)"
    return line if line.startswith("lltui") else f"lltui: {line}"


def internal_error_line(exc: BaseException) -> str:
    """A bug of ours, in one line: what went wrong, and how to see the traceback."""
    return error_line(f"internal error: {error_text(exc)} (set LLTUI_DEBUG=1 for details)")

"""What subcommands print goes to the terminal as text: control characters from files,
servers and process lists show as escapes, and an error is one line."""

from __future__ import annotations

import io
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

"""Text from files, servers and process lists, made safe to print on a terminal.

A GGUF's ``general.name``, a llama-server log line or another user's command line can hold
escape sequences that clear the screen, retitle the window or worse. Printed through
:func:`printable`, every control character shows as a visible ``\\u001b``-style escape instead
(the same spelling JSON uses, so a JSON document stays valid); newlines and tabs stay unless
a single line is wanted.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (U+009B is a one-character CSI)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with control characters shown as escapes; ``one_line`` escapes newlines and
    tabs too."""
    pattern = _CONTROL_ONE_LINE if one_line else _CONTROL
    return pattern.sub(_escape, text) if pattern.search(text) else text


# what an exception without a message of its own means, in words (the class name is no
# message for a user); checked in order, so the more specific kinds come first
_NO_MESSAGE_WORDS: tuple[tuple[type[BaseException], str], ...] = (
    (ConnectionRefusedError, "connection refused"),
    (ConnectionResetError, "connection reset"),
    (ConnectionAbortedError, "connection aborted"),
    (BrokenPipeError, "connection closed"),
    (TimeoutError, "timed out"),
    (EOFError, "the connection closed early"),
    (MemoryError, "out of memory"),
    (PermissionError, "permission denied"),
    (FileNotFoundError, "no such file"),
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def error_text(exc: BaseException) -> str:
    """What went wrong, in words on one line, never the exception's class name: an OS error's
    own words (``Connection refused``, not ``[Errno 111] ...``), else the message; with no
    message, the kind of error said in words (``ReadTimeout`` -> ``read timeout``)."""
    if isinstance(exc, OSError) and exc.strerror:
        words = exc.strerror
        if exc.filename is not None:
            words = f"{exc.filename}: {words}"
    else:
        try:
            words = str(exc)
        except Exception:  # a message that cannot be made is no message
            words = ""
    lines = [line.strip() for line in words.strip().splitlines() if line.strip()]
    if lines:
        return printable("; ".join(lines), one_line=True)
    for kind, said in _NO_MESSAGE_WORDS:
        if isinstance(exc, kind):
            return said
    return _CAMEL.sub(" ", type(exc).__name__).lower()

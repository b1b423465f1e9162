"""Text from files, servers and process lists, made safe to print on a terminal.

A GGUF's ``general.name``, a llama-server log line or another user's command line can hold
escape sequences that clear the screen, retitle the window or worse, a line break that prints
a line lltui never wrote (a forged ``verdict: fits``), or a bidirectional override that shows
text in another order than it is. Printed through :func:`printable`, every such character
shows as a visible ``\\u001b``-style escape instead (the same spelling JSON uses, so a JSON
document stays valid):

- C0 controls, DEL and the C1 controls (U+0085 NEL among them; U+009B is a one-character CSI);
- the line and paragraph separators U+2028 and U+2029;
- the bidirectional controls: U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069.

Newlines and tabs stay, unless a single line is wanted: every command's output as a whole
goes through :func:`printable` (lltui's own lines keep their breaks); each value from data
inside a line goes through :func:`one_line` (its breaks are escaped, so it cannot start a
line of its own).
"""

from __future__ import annotations

import re

# never printed raw, wherever they are
_ALWAYS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_ALWAYS}]")
_CONTROL_ONE_LINE = re.compile(f"[\t\n{_ALWAYS}]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with control, line-separator and bidi characters shown as escapes;
    ``one_line`` escapes newlines and tabs too."""
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


def one_line(value: object) -> str:
    """A value from data (a file, a server, another process), as it may appear inside a
    line of text output: ``str(value)`` with every break and control escaped."""
    return printable(value if isinstance(value, str) else str(value), one_line=True)


def is_digits(text: str) -> bool:
    """``text`` is a number in ASCII digits: ``str.isdigit`` takes ``²`` (which ``int`` then
    refuses) and ``٣`` (which ``int`` reads as 3), neither a number anyone typed for a port,
    a pid or a build."""
    return text.isascii() and text.isdigit()


def int_or_none(text: str | None) -> int | None:
    """``int(text)``; None for no text or one that is no whole number."""
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless ``n`` is 1: "1 GPU", "3 GPUs", "0 models"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"

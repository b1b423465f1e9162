"""One line of a llama.cpp log, split into what the reader needs: the colour codes gone, the
``M.SS.mmm.uuu L`` prefix llama-server puts on its lines (time and level), and the function
that printed it, found as the first ``name: `` in the line, so that anything in front of it (a
journald or pid prefix, a server tag, a quote mark) is no obstacle."""

from __future__ import annotations

import re
from dataclasses import dataclass

# What is read of one line: llama.cpp's own lines are far shorter, and a longer one (a prompt
# dump, a mangled file) holds nothing read; the cut also keeps every run of digits below
# what int() converts.
MAX_LINE = 4096
JSON_LEVELS = {"info": "I", "warn": "W", "error": "E", "debug": "D"}

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# colour codes whose ESC was lost on the way into an issue thread: "[34m1.14.608.510[0m"
_BARE_COLOUR = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
_PREFIX = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ([IWED]) (.*)$", re.DOTALL)
# the function: the first identifier followed by ": " that is not part of a path, host or tag
_FUNC = re.compile(r"(?<![\w.\[\]/\\-])([A-Za-z_][A-Za-z0-9_]*(?:\(\))?):(?=\s|$)")
_TAGS = ("srv ", "cmn ", "slot", "spec")


@dataclass(frozen=True, slots=True)
class Line:
    """A line split into its parts. ``text``: the whole line, normalised; ``message``: without
    the prefix; ``body``: ``function: rest`` (the message stripped where no function)."""

    text: str
    message: str
    func: str = ""
    rest: str = ""
    body: str = ""
    level: str | None = None  # I, W, E, D
    t_us: int | None = None  # microseconds since the server started
    prefixed: bool = False  # llama-server's own prefix (or a --log-jsonl record)


def normalise(raw: str) -> str:
    """The line without its end, colour codes and anything past what is read."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "m" in line and "[" in line and _BARE_COLOUR.search(line):
        line = _BARE_COLOUR.sub("", line)
    return line[:MAX_LINE]


def split_line(
    raw: str, level: str | None = None, t_us: int | None = None, prefixed: bool = False
) -> Line:
    """A text line (or a ``--log-jsonl`` message: ``prefixed``, its level and time given)."""
    text = message = normalise(raw)
    if not prefixed and (m := _PREFIX.match(text)):
        minutes, sec, ms, us, level, message = m.groups()
        t_us = ((int(minutes) * 60 + int(sec)) * 1000 + int(ms)) * 1000 + int(us)
        prefixed = True
    f = _FUNC.search(message)
    if f is None:
        stripped = message.strip()
        return Line(text, message, "", stripped, stripped, level, t_us, prefixed)
    rest = message[f.end() :].lstrip()
    body = message[f.start() :].strip()
    return Line(text, message, f.group(1), rest, body, level, t_us, prefixed)


def strip_tag(message: str) -> str:
    """The message without the ``srv``/``cmn``/``slot``/``spec`` tag before its function."""
    if len(message) > 5 and message[:4] in _TAGS and message[4] == " ":
        return message[5:].lstrip()
    return message

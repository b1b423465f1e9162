"""One line of a llama.cpp log to its event: the line split (:mod:`.lines`), a ``--log-jsonl``
record unwrapped, and the shapes of the pattern table (:mod:`.patterns`) tried in order."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from lltui.core.llama.builds import LineFormat
from lltui.core.llamalog.events import KNOWN, BreakdownTable, Event, JsonRecord
from lltui.core.llamalog.lines import JSON_LEVELS, Line, normalise, split_line
from lltui.core.llamalog.models import MemoryBreakdownRow
from lltui.core.llamalog.patterns import (
    ANY_FUNCTION,
    BY_GROUP,
    FUNCTION_FORMATS,
    KNOWN_LINES,
    WHOLE_LINE,
    Shape,
    group,
)


@dataclass(frozen=True, slots=True)
class Classified:
    """A line, what it says (None: nothing read), the line formats it has (each dating the
    log to a range of builds) and its text as a person reads it (a JSON record whole)."""

    line: Line
    event: Event | None
    formats: tuple[LineFormat, ...]
    text: str
    shape: Shape | None = None  # the table's shape that read it

    def said(self) -> str:
        """The line from where its shape's expression read it (or its group ``said``): a
        failure in its own words."""
        m = self.shape.match(self.line) if self.shape is not None else None
        if m is None or self.shape is None:
            return self.line.body
        start = m.start("said") if "said" in m.re.groupindex else m.start()
        return getattr(self.line, self.shape.on)[start:].strip()


def classify(raw: str) -> Classified:
    """Read one line of a log: text (stderr) or a ``--log-jsonl`` record (stdout)."""
    stripped = raw.strip()
    if stripped.startswith("{") and stripped.endswith("}") and '"' in stripped:
        return _json(raw, stripped)
    line = split_line(raw)
    shape, event, formats = read_line(line)
    return Classified(line, event, formats, line.text, shape)


def read_line(line: Line) -> tuple[Shape | None, Event | None, tuple[LineFormat, ...]]:
    """The shape that reads a split line (None: none does), its event and the formats."""
    for shape in WHOLE_LINE:
        m = shape.match(line)
        if m is not None and (event := shape.make(m, line)) is not None:
            return shape, event, tuple(f for g, v, f in shape.formats if _dated(m, line, g, v))
    func = line.func
    dated = FUNCTION_FORMATS.get(func)
    formats: tuple[LineFormat, ...] = (dated,) if dated is not None else ()
    name = group(func) if func else ""
    for shape in BY_GROUP.get(name, ANY_FUNCTION):
        m = shape.match(line)
        if m is None or (event := shape.make(m, line)) is None:
            continue
        dates = (f for g, value, f in shape.formats if _dated(m, line, g, value))
        return shape, event, (*formats, *dates)
    known = KNOWN_LINES.get(name)
    if (known is True or (known and line.rest.startswith(known))) and _BUFFER not in line.rest:
        return None, KNOWN, formats  # (a buffer line no shape read is not read: -nan, cut)
    return None, None, formats


_BUFFER = "buffer size ="


def _dated(m: re.Match[str], line: Line, name: str, value: str | None) -> bool:
    got = line.func if name == "func" else m.group(name)
    return got is not None and (value is None or got.strip() == value)


def _json(raw: str, stripped: str) -> Classified:
    """A ``--log-jsonl`` record (a log line, the memory breakdown table), or a line of the
    JSON log older llama-servers printed; what does not parse is a line of text."""
    try:
        obj = json.loads(stripped)
    except (ValueError, RecursionError):  # not JSON, or nested past the decoder
        obj = None
    text = normalise(raw)
    if not isinstance(obj, dict):
        return Classified(split_line(raw), None, (), text)
    kind, msg = obj.get("type"), obj.get("msg")
    if kind == "log" and isinstance(msg, str):
        t = obj.get("time")
        level = JSON_LEVELS.get(str(obj.get("level")))
        # a message may span lines (a chat template); only its first carries meaning
        line = split_line(msg.split("\n", 1)[0], level, t if isinstance(t, int) else None, True)
        shape, event, formats = read_line(line) if line.message.strip() else (None, None, ())
        return Classified(line, event, formats, text, shape)
    line = Line(text, text, body=stripped, rest=stripped)
    if kind == "fit_memory_breakdown":
        data = obj.get("data")
        rows = data.get("rows") if isinstance(data, dict) else None
        if isinstance(rows, list):
            table = tuple(r for r in map(_breakdown_row, rows) if r is not None)
            return Classified(line, BreakdownTable(table), (), text)
    if kind is not None:
        return Classified(line, KNOWN, (), text)
    build, commit = obj.get("build"), obj.get("commit")
    error = msg if obj.get("level") in ("ERR", "ERROR", "error") and isinstance(msg, str) else None
    record = JsonRecord(_int_or_none(build), commit if isinstance(commit, str) else "?", error)
    return Classified(line, record, (), text)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _breakdown_row(row: object) -> MemoryBreakdownRow | None:
    """One row of the JSON table."""
    if not isinstance(row, dict):
        return None
    name, kind, desc = row.get("name"), row.get("kind"), row.get("description")
    numbers = [_int_or_none(row.get(k)) for k in ("self", "model", "context", "compute")]
    if not isinstance(name, str) or not isinstance(kind, str) or None in numbers:
        return None
    self_, model, context, compute = (int(n or 0) for n in numbers)
    desc = desc if isinstance(desc, str) else None
    total, free, unaccounted = (_int_or_none(row.get(k)) for k in ("total", "free", "unaccounted"))
    return MemoryBreakdownRow(
        kind, name, self_, model, context, compute, desc, total, free, unaccounted
    )

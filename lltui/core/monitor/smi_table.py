"""Finding the CSV of one nvidia-smi query in text: a printed header, or the field list that
was asked for (``--format=csv,noheader``); blank lines, CRLF and lines of other text around
the CSV (a script's log) are passed over. A row whose cells do not fit the columns is skipped
with a note rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.monitor.smi_fields import (
    FIELD_KINDS,
    FREE_TEXT_FIELDS,
    HEADER_CELL,
    canonical_field,
    valid_cell,
)


class SmiParseError(ValueError):
    """The text holds no CSV this parser can use; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class CsvTable:
    """One CSV block: its columns as printed (or as asked), and the rows that fit them."""

    columns: tuple[str, ...]  # as printed in the header, or the field list asked for
    fields: tuple[str, ...]  # canonical names, one per column
    units: tuple[str | None, ...]  # from the header (``[MiB]``), None when not printed
    header: str | None  # the header line as printed; None for ``noheader`` output
    rows: tuple[tuple[str, ...], ...]  # stripped cells, one tuple per row
    row_lines: tuple[int, ...]  # 1-based line number of each row
    notes: tuple[str, ...] = ()  # rows skipped, and why

    def column(self, field: str) -> int | None:
        """Position of a canonical field, or None when the table lacks it."""
        try:
            return self.fields.index(field)
        except ValueError:
            return None


def _lines(text: str) -> list[str]:
    return text.lstrip("\ufeff").splitlines()


def _header_of(line: str) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str | None, ...]] | None:
    """Columns, fields and units when ``line`` is a CSV header with at least one field we
    know; None for data rows and other text."""
    cells = [c.strip() for c in line.split(",")]
    if not cells or any(not c or not HEADER_CELL.match(c) for c in cells):
        return None
    parsed = [canonical_field(c) for c in cells]
    if not any(f in FIELD_KINDS for f, _ in parsed):
        return None
    return tuple(cells), tuple(f for f, _ in parsed), tuple(u for _, u in parsed)


def _fit(line: str, fields: Sequence[str]) -> tuple[str, ...] | str:
    """The row's cells, or why the line does not fit the columns."""
    cells = [c.strip() for c in line.split(",")]
    n = len(fields)
    if len(cells) > n:
        free = [i for i, f in enumerate(fields) if f in FREE_TEXT_FIELDS]
        if len(free) != 1:
            return f"{len(cells)} cells where {n} were expected"
        i, extra = free[0], len(cells) - n
        cells[i : i + extra + 1] = [", ".join(cells[i : i + extra + 1])]
    if len(cells) < n:
        return f"{len(cells)} cells where {n} were expected"
    for field, cell in zip(fields, cells, strict=True):
        kind = FIELD_KINDS.get(field, "text")
        if not valid_cell(kind, cell):
            return f"{field} = {cell[:40]!r} is not a {kind} value"
    return tuple(cells)


def _table(
    lines: Sequence[str],
    start: int,
    stop: int,
    columns: tuple[str, ...],
    fields: tuple[str, ...],
    units: tuple[str | None, ...],
    header: str | None,
) -> CsvTable:
    rows: list[tuple[str, ...]] = []
    row_lines: list[int] = []
    notes: list[str] = []
    for i in range(start, stop):
        line = lines[i]
        if not line.strip():
            continue
        fitted = _fit(line, fields)
        if isinstance(fitted, str):
            # A line with the right shape but bad cells is worth a note; prose around the
            # CSV (one cell, no commas) is not.
            if "," in line:
                notes.append(f"line {i + 1}: skipped, {fitted}")
            continue
        rows.append(fitted)
        row_lines.append(i + 1)
    return CsvTable(columns, fields, units, header, tuple(rows), tuple(row_lines), tuple(notes))


def find_tables(text: str) -> tuple[CsvTable, ...]:
    """Every header-led CSV block in ``text``, each with the rows up to the next header."""
    lines = _lines(text)
    headers = [(i, h) for i, line in enumerate(lines) if (h := _header_of(line)) is not None]
    out = []
    for k, (i, (columns, fields, units)) in enumerate(headers):
        stop = headers[k + 1][0] if k + 1 < len(headers) else len(lines)
        out.append(_table(lines, i + 1, stop, columns, fields, units, lines[i].strip()))
    return tuple(out)


def parse_csv(text: str, fields: Sequence[str] | None = None) -> CsvTable:
    """The CSV of one query in ``text``.

    A printed header wins (the first whose fields include one of ``fields``, or the first
    at all); without one, lines are read as rows of ``fields`` (the list given to
    ``--query-gpu``, with or without ``[unit]`` suffixes). Raises SmiParseError when there
    is neither a header nor a field list, or when nothing in the text fits.
    """
    tables = find_tables(text)
    wanted = {canonical_field(f)[0] for f in fields} if fields else set()
    for table in tables:
        if not wanted or wanted & set(table.fields):
            return table
    if fields is None:
        if not text.strip():
            raise SmiParseError("the text is empty")
        raise SmiParseError("no nvidia-smi CSV header found, and no field list was given")
    if not fields:
        raise SmiParseError("an empty field list was given")
    parsed = [canonical_field(f) for f in fields]
    columns = tuple(f.strip() for f in fields)
    table = _table(
        _lines(text),
        0,
        len(_lines(text)),
        columns,
        tuple(f for f, _ in parsed),
        tuple(u for _, u in parsed),
        None,
    )
    if not table.rows:
        raise SmiParseError(_no_rows_reason(text, len(fields)))
    return table


def _no_rows_reason(text: str, n: int) -> str:
    first = next((line.strip() for line in _lines(text) if line.strip()), "")
    if not first:
        return "nvidia-smi printed nothing"
    if not first.isprintable():
        return f"no CSV rows of {n} fields: the text is not nvidia-smi output (binary data?)"
    return f"no CSV rows of {n} fields; the output starts with: {first[:120]}"

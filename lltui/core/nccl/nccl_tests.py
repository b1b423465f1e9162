"""nccl-tests output (all_reduce_perf, all_gather_perf, ...) parsed into rows and a summary.

A data row is ``size count type [redop [root]] time algbw busbw wrong`` for the out-of-place
run, then the same four for in-place; ``-I 1`` (nccl-tests 2.19.2+) follows each four with
``i_min i_max i_p99 i_cv%``, and ``-S 1`` (2.17.6+) ends the row with a date and time. The
redop and root columns came in later nccl-tests versions and ``#wrong`` replaced an ``error``
column, so rows are read by their shape, not by fixed positions. Launcher prefixes
(``[1,0]<stdout>:``, ``0: ``), indentation, elided rows (``...``), and a missing
``# Avg bus bandwidth`` line are all expected.

The same row model holds what ``lltui nccl bench`` measures, so both print alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.nccl.log import MAX_LINE_CHARS, strip_launcher_prefix
from lltui.core.text import counted

# what is kept of an input of any size (the totals count everything): a real table has tens
# of rows, a run tens of tables
MAX_ROWS = 10_000  # per table
MAX_TABLES = 1_000
MAX_FAILURES = 50  # per table
MAX_RANKS = 65_536  # device lines per table

_INT = re.compile(r"^-?\d+$")
_TYPE = re.compile(r"^[a-z][a-z0-9_]*$")
_REDOPS = frozenset({"sum", "prod", "max", "min", "avg", "none", "premulsum", "mulsum"})
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)", re.IGNORECASE)
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<status>\w+)?", re.IGNORECASE)
_BANNER = re.compile(
    r"^#\s*nThread\s+(?P<threads>\d+)\s+nGpus\s+(?P<gpus>\d+)\s+minBytes\s+(?P<min>\d+)"
    r"\s+maxBytes\s+(?P<max>\d+)"
)
_RANK_LINE = re.compile(
    r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+(?P<pid>\d+)\s+on\s+(?P<host>\S+)"
    r"\s+device\s+(?P<dev>\d+)\s+\[(?P<bus>[^\]]*)\]\s*(?P<name>.*?)\s*$"
)
_BINARY = re.compile(r"\b(?P<name>[a-z][a-z_0-9]*?)_perf(?:_mpi)?\b")
_STARTING = re.compile(r"Collective test starting:\s*(?P<name>[a-z_0-9]+?)(?:_perf)?\b")
_HEADER = re.compile(r"^#\s*size\s+count\s+type\b", re.IGNORECASE)
# -S 1 ends a row with the time it was printed ("%Y-%m-%d %H:%M:%S")
_TIMESTAMP = (re.compile(r"^\d{4}-\d\d-\d\d$"), re.compile(r"^\d\d:\d\d:\d\d$"))
_ELIDED = re.compile(r"^(?:\.{3,}|…)$")
_FAILURE = re.compile(
    r"Test (?:NCCL|CUDA) failure|NCCL failure|CUDA failure|NCCL WARN|Test FAILED|"
    r"Out of bounds values\s*:\s*\d+\s*FAILED",
    re.IGNORECASE,
)


def bus_bandwidth_factor(collective: str | None, nranks: int) -> float | None:
    """busbw / algbw for a collective on ``nranks`` ranks, as nccl-tests computes it."""
    if nranks < 1 or collective is None:
        return None
    n = nranks
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "alltoall"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "sendrecv", "scatter", "gather", "hypercube"):
        return 1.0
    return None


def sweep_sizes(min_bytes: int, max_bytes: int, factor: int, itemsize: int) -> list[int]:
    """Message sizes from ``min_bytes`` to ``max_bytes`` multiplying by ``factor``, each a
    whole number of elements; ``max_bytes`` is always the last size."""
    if factor < 2:
        raise ValueError(f"step factor must be 2 or more, not {factor}")
    if itemsize < 1:
        raise ValueError("itemsize must be positive")
    lo = max(min_bytes, itemsize) // itemsize * itemsize
    hi = max_bytes // itemsize * itemsize
    if hi < lo:
        raise ValueError(f"max size {max_bytes} B is below min size {min_bytes} B")
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    if sizes[-1] != hi:
        sizes.append(hi)
    return sizes


@dataclass(frozen=True, slots=True)
class NcclTestsRow:
    size: int  # bytes
    count: int  # elements
    type: str  # "float", as nccl-tests prints it
    redop: str | None
    root: int | None
    time_us_out: float | None
    algbw_out: float | None  # GB/s (1e9 bytes per second)
    busbw_out: float | None
    wrong_out: float | None  # #wrong (an int) or the old max error column
    time_us_in: float | None = None
    algbw_in: float | None = None
    busbw_in: float | None = None
    wrong_in: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **fields_of(
                self,
                "size count type time_us_out algbw_out busbw_out time_us_in algbw_in busbw_in "
                "redop root",
            ),
            "wrong_out": _int_if_whole(self.wrong_out),
            "wrong_in": _int_if_whole(self.wrong_in),
        }


def _int_if_whole(v: float | None) -> float | int | None:
    if v is None or not math.isfinite(v):
        return None
    return int(v) if v == int(v) else v


@dataclass(frozen=True, slots=True)
class TestDevice:
    rank: int
    pid: int
    host: str
    device: int
    bus: str
    name: str


@dataclass(frozen=True, slots=True)
class VariantPeak:
    type: str
    redop: str | None
    root: int | None
    busbw_out: float | None  # GB/s, the highest of the variant's rows
    size: int | None  # bytes, of that row

    def to_json(self) -> dict[str, Any]:
        return fields_of(self, "type redop root busbw_out size")


@dataclass(frozen=True, slots=True)
class NcclTestsTable:
    collective: str | None  # "all_reduce"
    collective_inferred: bool  # from the columns, not printed
    nranks: int | None  # from the device list of the header
    rows: tuple[NcclTestsRow, ...]
    avg_busbw: float | None
    avg_busbw_text: str | None  # as printed
    devices: tuple[TestDevice, ...] = ()
    threads: int | None = None
    gpus_per_thread: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    out_of_bounds: int | None = None
    elided: bool = False
    failures: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def peak_busbw_out(self) -> float | None:
        vals = [r.busbw_out for r in self.rows if r.busbw_out is not None]
        return max(vals) if vals else None

    @property
    def largest(self) -> NcclTestsRow | None:
        return max(self.rows, key=lambda r: r.size) if self.rows else None

    @property
    def variant_peaks(self) -> tuple[VariantPeak, ...]:
        """The peak out-of-place bus bandwidth of each type, redop and root the table ran
        (``-d all``, ``-o all``, ``-r -1`` run several in one table), in the order run."""
        groups: dict[tuple[str, str | None, int | None], list[NcclTestsRow]] = {}
        for r in self.rows:
            groups.setdefault((r.type, r.redop, r.root), []).append(r)
        out = []
        for (dtype, redop, root), rows in groups.items():
            measured = [r for r in rows if r.busbw_out is not None]
            top = max(measured, key=lambda r: (r.busbw_out or 0.0, r.size), default=None)
            peak, size = (None, None) if top is None else (top.busbw_out, top.size)
            out.append(VariantPeak(dtype, redop, root, peak, size))
        return tuple(out)

    @property
    def wrong_rows(self) -> int:
        return _count_wrong(self.rows)

    @property
    def nranks_from_busbw(self) -> int | None:
        """Ranks implied by busbw/algbw when the table is an all-reduce."""
        if self.collective != "all_reduce":
            return None
        return nranks_from_all_reduce(self.rows)

    def to_json(self) -> dict[str, Any]:
        largest = self.largest
        return {
            **fields_of(self, "collective nranks"),
            "rows": [r.to_json() for r in self.rows],
            **fields_of(
                self,
                "avg_busbw avg_busbw_text collective_inferred nranks_from_busbw peak_busbw_out",
            ),
            "min_size": min((r.size for r in self.rows), default=None),
            "max_size": largest.size if largest else None,
            "largest_busbw_out": largest.busbw_out if largest else None,
            "largest_busbw_in": largest.busbw_in if largest else None,
            "devices": [fields_of(d, "rank pid host device bus name") for d in self.devices],
            **fields_of(
                self, "threads gpus_per_thread min_bytes max_bytes out_of_bounds wrong_rows elided"
            ),
            "peaks": [p.to_json() for p in self.variant_peaks],
            "failures": list(self.failures),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, slots=True)
class NcclTestsResult:
    """Every table in the input; most files hold one."""

    tables: tuple[NcclTestsTable, ...]
    lines: int
    tables_dropped: int = 0  # tables past MAX_TABLES, not kept

    @property
    def first(self) -> NcclTestsTable | None:
        return self.tables[0] if self.tables else None

    def to_json(self) -> dict[str, Any]:
        if not self.tables:
            return {"collective": None, "nranks": None, "rows": [], "avg_busbw": None}
        out = self.tables[0].to_json()
        if len(self.tables) > 1:
            out["more_tables"] = [t.to_json() for t in self.tables[1:]]
        if self.tables_dropped:
            out["tables_not_kept"] = self.tables_dropped
        return out


def _number(tok: str) -> float | None:
    """A measured value; ``N/A`` (validation off) and garbage are None."""
    try:
        v = float(tok)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def parse_row(text: str) -> NcclTestsRow | None:
    """One data row (prefix already stripped), or None when the line is not one."""
    toks = text.split()
    if len(toks) > 2 and _TIMESTAMP[0].match(toks[-2]) and _TIMESTAMP[1].match(toks[-1]):
        toks = toks[:-2]
    if len(toks) < 7 or not (_INT.match(toks[0]) and _INT.match(toks[1])):
        return None
    if not _TYPE.match(toks[2]):
        return None
    size, count, dtype = int(toks[0]), int(toks[1]), toks[2]
    if size < 0 or count < 0:
        return None
    rest = toks[3:]
    redop: str | None = None
    root: int | None = None
    if rest and rest[0].lower() in _REDOPS:
        redop = rest[0]
        rest = rest[1:]
    elif rest and _number(rest[0]) is None:
        return None
    if len(rest) in (5, 9, 17) and _INT.match(rest[0]):
        root = int(rest[0])
        rest = rest[1:]
    if len(rest) == 16:  # -I 1: each run's four columns, then its per-iteration statistics
        rest = rest[0:4] + rest[8:12]
    if len(rest) not in (4, 8):
        return None
    # time, algbw and busbw must be numbers; the fourth column may say N/A.
    groups = [rest[i : i + 4] for i in range(0, len(rest), 4)]
    for g in groups:
        if any(_number(t) is None for t in g[:3]):
            return None
    vals = [[_number(t) for t in g] for g in groups]
    out = vals[0]
    inp = vals[1] if len(vals) > 1 else [None, None, None, None]
    return NcclTestsRow(
        size=size,
        count=count,
        type=dtype,
        redop=redop,
        root=root,
        time_us_out=out[0],
        algbw_out=out[1],
        busbw_out=out[2],
        wrong_out=out[3],
        time_us_in=inp[0],
        algbw_in=inp[1],
        busbw_in=inp[2],
        wrong_in=inp[3],
    )


def _ratio_bounds(row: NcclTestsRow) -> tuple[float, float] | None:
    """busbw/algbw of a row, as the interval its two printed decimals allow."""
    a, b = row.algbw_out, row.busbw_out
    if a is None or b is None or a < 0.1:
        return None
    half = _PRINTED_HALF_UNIT
    return max(b - half, 0.0) / (a + half), (b + half) / (a - half)


_PRINTED_HALF_UNIT = 0.005  # nccl-tests prints bandwidths with two decimals


def _best_row(rows: Sequence[NcclTestsRow]) -> NcclTestsRow | None:
    """The row whose printed bandwidths carry the most digits."""
    usable = [r for r in rows if r.algbw_out and r.busbw_out]
    return max(usable, key=lambda r: r.algbw_out or 0.0, default=None)


def infer_collective(rows: Sequence[NcclTestsRow]) -> str | None:
    """The collective a table measured, from its columns, where only one fits."""
    r = _best_row(rows)
    bounds = _ratio_bounds(r) if r is not None else None
    if r is None or bounds is None:
        return None
    lo, hi = bounds
    reduces = r.redop is None or r.redop.lower() != "none"
    if r.root is not None and r.root >= 0:
        if lo <= 1.0 <= hi:
            return "reduce" if r.redop and r.redop.lower() != "none" else "broadcast"
        return None
    if reduces and lo > 1.0:
        return "all_reduce"  # only all-reduce moves more than the buffer per rank
    if r.redop is not None and reduces and hi < 1.0:
        return "reduce_scatter"
    return None


def nranks_from_all_reduce(rows: Sequence[NcclTestsRow]) -> int | None:
    """Ranks implied by an all-reduce's busbw = algbw * 2(n-1)/n, when the printed digits
    pin it to one integer."""
    r = _best_row(rows)
    bounds = _ratio_bounds(r) if r is not None else None
    if bounds is None:
        return None
    lo, hi = bounds
    if lo < 0.99 or hi >= 2.0:
        return None
    n_lo, n_hi = 2.0 / (2.0 - lo), 2.0 / (2.0 - hi)
    if round(n_lo) != round(n_hi):
        return None
    return max(1, round(n_lo))


class _TableBuilder:
    def __init__(self) -> None:
        self.collective: str | None = None
        self.rows: list[NcclTestsRow] = []
        self.avg: float | None = None
        self.avg_text: str | None = None
        self.devices: dict[int, TestDevice] = {}
        self.threads: int | None = None
        self.gpus: int | None = None
        self.min_bytes: int | None = None
        self.max_bytes: int | None = None
        self.oob: int | None = None
        self.elided = False
        self.failures: list[str] = []
        self.bad_rows = 0
        self.rows_dropped = 0
        self.seen_header = False

    def add_row(self, row: NcclTestsRow) -> None:
        if len(self.rows) < MAX_ROWS:
            self.rows.append(row)
        else:
            self.rows_dropped += 1

    def add_failure(self, text: str) -> None:
        if len(self.failures) < MAX_FAILURES:
            self.failures.append(text)

    @property
    def empty(self) -> bool:
        return not (self.rows or self.avg_text or self.devices or self.threads)

    def build(self) -> NcclTestsTable:
        collective = self.collective
        inferred = False
        if collective is None:
            collective = infer_collective(self.rows)
            inferred = collective is not None
        warnings: list[str] = []
        if self.rows and self.avg_text is None:
            warnings.append("no '# Avg bus bandwidth' line: the output was cut or is partial")
        if self.elided:
            warnings.append("rows were elided ('...'): the average covers rows not shown")
        if self.bad_rows:
            warnings.append(f"{self.bad_rows} line(s) looked like rows but could not be read")
        if self.rows_dropped:
            warnings.append(
                f"{self.rows_dropped} more row(s) not kept: a table keeps its first {MAX_ROWS}"
            )
        wrong = _count_wrong(self.rows)
        if wrong:
            warnings.append(
                f"{wrong} measurement(s) report wrong results (#wrong > 0): "
                "data was corrupted in transit"
            )
        return NcclTestsTable(
            collective=collective,
            collective_inferred=inferred,
            nranks=len(self.devices) or None,
            rows=tuple(self.rows),
            avg_busbw=_number(self.avg_text) if self.avg_text else None,
            avg_busbw_text=self.avg_text,
            devices=tuple(self.devices[k] for k in sorted(self.devices)),
            threads=self.threads,
            gpus_per_thread=self.gpus,
            min_bytes=self.min_bytes,
            max_bytes=self.max_bytes,
            out_of_bounds=self.oob,
            elided=self.elided,
            failures=tuple(self.failures),
            warnings=tuple(warnings),
        )


def _count_wrong(rows: Sequence[NcclTestsRow]) -> int:
    """Measurements whose #wrong column is a positive count (the old float error column,
    such as 5e-07, is a rounding error, not a count)."""
    return sum(
        1
        for r in rows
        for w in (r.wrong_out, r.wrong_in)
        if w is not None and w >= 1 and w == int(w)
    )


class _Parser:
    """The tables read so far, the one being read, and the collective the last binary named."""

    def __init__(self) -> None:
        self.tables: list[NcclTestsTable] = []
        self.tables_dropped = 0
        self.cur = _TableBuilder()
        self.pending_collective: str | None = None

    def _keep(self, table: NcclTestsTable) -> None:
        if len(self.tables) < MAX_TABLES:
            self.tables.append(table)
        else:
            self.tables_dropped += 1

    def _next_table(self) -> bool:
        """Close the current table if it has rows; whether a new one was started."""
        if not self.cur.rows:
            return False
        self._keep(self.cur.build())
        self.cur = _TableBuilder()
        return True

    def feed(self, text: str) -> None:
        if not text.startswith("#") and "_perf" in text:
            m = _BINARY.search(text)
            if m and parse_row(text) is None:  # a command line: all_reduce_perf -b 8 ...
                self.pending_collective = m.group("name")
                self._next_table()
                self.cur.collective = self.cur.collective or self.pending_collective
                return
        m = _STARTING.search(text) if "Collective test starting" in text else None
        if m:
            self._next_table()
            self.cur.collective = m.group("name")
        elif text.startswith("#"):
            self._comment(text)
        else:
            self._body(text)

    def _comment(self, text: str) -> None:
        """A ``#`` line: the banner, a rank's device, the column header, the summary."""
        cur = self.cur
        m = _BANNER.match(text)
        if m:
            if self._next_table():
                self.cur.collective = self.pending_collective
            cur = self.cur
            cur.threads = int(m.group("threads"))
            cur.gpus = int(m.group("gpus"))
            cur.min_bytes = int(m.group("min"))
            cur.max_bytes = int(m.group("max"))
            return
        m = _RANK_LINE.match(text)
        if m:
            rank = int(m.group("rank"))
            if len(cur.devices) >= MAX_RANKS and rank not in cur.devices:
                return
            cur.devices.setdefault(
                rank,
                TestDevice(
                    rank=rank,
                    pid=int(m.group("pid")),
                    host=m.group("host"),
                    device=int(m.group("dev")),
                    bus=m.group("bus"),
                    name=m.group("name"),
                ),
            )
            return
        if _HEADER.match(text):
            if self._next_table():
                self.cur.collective = self.pending_collective
            self.cur.seen_header = True
            return
        m = _AVG.match(text)
        if m:
            cur.avg_text = m.group("v")
            return
        m = _OOB.match(text)
        if m:
            cur.oob = int(m.group("n"))
            if (m.group("status") or "").upper() == "FAILED":
                cur.add_failure(text)

    def _body(self, text: str) -> None:
        """A row, an elision, a failure line, or a row too mangled to read."""
        cur = self.cur
        if _ELIDED.match(text):
            cur.elided = cur.elided or bool(cur.rows or cur.seen_header)
            return
        row = parse_row(text)
        if row is not None:
            cur.add_row(row)
            return
        low = text.lower()
        if ("fail" in low or "warn" in low) and _FAILURE.search(text):
            cur.add_failure(text)
            return
        toks = text.split()
        if cur.seen_header and len(toks) >= 3 and _INT.match(toks[0]) and _INT.match(toks[1]):
            cur.bad_rows += 1

    def result(self, n_lines: int) -> NcclTestsResult:
        if not self.cur.empty or self.cur.failures:
            self._keep(self.cur.build())
        tables = self.tables
        # an nccl-tests run (its device list printed) that failed before any row still tells
        # why: keep its failure lines
        kept = tuple(t for t in tables if t.rows or t.avg_busbw_text or (t.failures and t.devices))
        return NcclTestsResult(tables=kept, lines=n_lines, tables_dropped=self.tables_dropped)


def parse_nccl_tests(lines: Iterable[str]) -> NcclTestsResult:
    """Parse nccl-tests output given as lines."""
    parser = _Parser()
    n = 0
    for raw in lines:
        n += 1
        line = raw.rstrip("\r\n")[:MAX_LINE_CHARS]
        text = strip_launcher_prefix(line).rstrip()
        if text:
            parser.feed(text)
    return parser.result(n)


def parse_nccl_tests_text(text: str) -> NcclTestsResult:
    return parse_nccl_tests(text.splitlines())


def _f(v: float | None, width: int) -> str:
    return ("-" if v is None else f"{v:.2f}").rjust(width)


def _varied(rows: Sequence[NcclTestsRow]) -> tuple[bool, bool]:
    """Whether the rows ran more than one redop, more than one root: those columns are then
    shown (``-o all``, ``-r -1``), else the rows would print alike."""
    return len({r.redop for r in rows}) > 1, len({r.root for r in rows}) > 1


def format_rows(rows: Sequence[NcclTestsRow], *, narrow: bool = False) -> list[str]:
    """Rows as nccl-tests lays them out (size, count, type, time/algbw/busbw both ways), with
    the redop and root where the rows ran several; ``narrow`` (80 columns): size, type (redop,
    root) and the out-of-place time and bandwidths alone."""
    ops, roots = _varied(rows)

    def which(r: NcclTestsRow | None) -> str:
        if r is None:
            return (
                f"{'type':>8}"
                + (f" {'redop':>6}" if ops else "")
                + (f" {'root':>4}" if roots else "")
            )
        return (
            f"{r.type:>8}"
            + (f" {r.redop or '-':>6}" if ops else "")
            + (f" {'-' if r.root is None else r.root:>4}" if roots else "")
        )

    if narrow:
        head = f"{'size':>12} {which(None)}  {'time us':>9} {'algbw':>7} {'busbw':>7}"
        return [head] + [
            f"{r.size:>12} {which(r)}  "
            f"{_f(r.time_us_out, 9)} {_f(r.algbw_out, 7)} {_f(r.busbw_out, 7)}"
            for r in rows
        ]
    out = [
        f"{'size':>12} {'count':>12} {which(None)}  "
        f"{'time us':>9} {'algbw':>7} {'busbw':>7}  {'in-place':>9} {'algbw':>7} {'busbw':>7}"
    ]
    for r in rows:
        out.append(
            f"{r.size:>12} {r.count:>12} {which(r)}  "
            f"{_f(r.time_us_out, 9)} {_f(r.algbw_out, 7)} {_f(r.busbw_out, 7)}  "
            f"{_f(r.time_us_in, 9)} {_f(r.algbw_in, 7)} {_f(r.busbw_in, 7)}"
        )
    return out


def format_table(t: NcclTestsTable, *, narrow: bool = False) -> str:
    name = t.collective or "collective not printed"
    if t.collective and t.collective_inferred:
        name += " (inferred from the columns)"
    head = [name]
    if t.nranks:
        head.append(counted(t.nranks, "rank"))
    elif t.nranks_from_busbw:
        head.append(f"~{t.nranks_from_busbw} ranks (from busbw/algbw)")
    out = [" · ".join(head)]
    out += format_rows(t.rows, narrow=narrow)
    peaks = t.variant_peaks
    if len(peaks) > 1:  # -d all, -o all, -r -1: each one's peak, as a user compares them
        _, roots = _varied(t.rows)
        out.append("peak bus bandwidth")
        for p in peaks:
            name = " ".join(
                [p.type]
                + ([p.redop] if p.redop else [])
                + ([f"root {p.root}"] if roots and p.root is not None else [])
            )
            at = "-" if p.busbw_out is None else f"{p.busbw_out:.2f} GB/s at {p.size} B"
            out.append(f"  {name:<18}{at}")
    elif peaks and peaks[0].busbw_out is not None:
        out.append(f"peak bus bandwidth  {peaks[0].busbw_out:.2f} GB/s at {peaks[0].size} B")
    over = " (over all of them)" if len(peaks) > 1 else ""
    out.append(
        f"avg bus bandwidth   {t.avg_busbw_text} GB/s{over}"
        if t.avg_busbw_text
        else "avg bus bandwidth   not in the output"
    )
    for w in t.warnings:
        out.append(f"warning: {w}")
    for f in t.failures[:10]:
        out.append(f"failure: {f}")
    return "\n".join(out)

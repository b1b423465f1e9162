"""``lltui nccl``: the NCCL library and environment, NCCL logs, nccl-tests output, a bench.

lltui nccl [--json]              library, version, NCCL_*/RCCL_* environment, findings
lltui nccl log FILE [--json]     an NCCL_DEBUG=INFO log summarised (FILE or - for stdin)
lltui nccl tests FILE [--json]   nccl-tests output (all_reduce_perf, ...) summarised
lltui nccl bench [--json]        all-reduce bandwidth across the local GPUs
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
from collections.abc import Iterator
from typing import IO, Any

from lltui.commands import CliError, add_source_option, print_json, source_spec

MAX_LINE_BYTES = 64 * 1024  # longer lines are cut; no NCCL or nccl-tests line comes close
# read at most this much: a summary of the first GiB says what a log says; an endless
# stream (/dev/zero, `yes |`) ends here rather than never
MAX_INPUT_BYTES = 1 << 30


def register(sub: Any) -> None:
    p = sub.add_parser(
        "nccl",
        help="NCCL library, version, NCCL_*/RCCL_* environment, advice; logs, nccl-tests, bench",
        description=(
            "Without a subcommand: which libnccl.so.2 lltui finds, its version, the NCCL_* "
            "environment and findings about it (exit 1 when no libnccl is found). "
            "$LLTUI_NCCL_LIB and $LLTUI_CUDART_LIB name libraries to use instead of searching."
        ),
    )
    p.add_argument("--json", action="store_true", dest="nccl_json", help="print JSON")
    p.add_argument("--lib", metavar="PATH", dest="nccl_lib", help="libnccl.so.2 to load")
    add_source_option(p, sub=True, note="sim:PROFILE shows a simulated rig's NCCL facts")
    p.set_defaults(func=run, nccl_command=None)
    nsub = p.add_subparsers(dest="nccl_command", metavar="SUBCOMMAND")

    pl = nsub.add_parser(
        "log",
        help="summarise an NCCL_DEBUG=INFO log",
        description="Version, ranks, channels, transports, network, WARN and error lines "
        "of an NCCL_DEBUG=INFO log (with MPI/Slurm prefixes, wrapped lines, old formats).",
    )
    pl.add_argument("file", metavar="FILE", help="the log, or - for stdin")
    pl.add_argument("--json", action="store_true", help="print JSON")
    pl.set_defaults(func=run_log)

    pt = nsub.add_parser(
        "tests",
        help="summarise nccl-tests output (all_reduce_perf, all_gather_perf, ...)",
        description="Rows, bandwidths and the average of nccl-tests output, prefixes and "
        "elided rows included.",
    )
    pt.add_argument("file", metavar="FILE", help="the output, or - for stdin")
    pt.add_argument("--json", action="store_true", help="print JSON")
    pt.set_defaults(func=run_tests)

    pb = nsub.add_parser(
        "bench",
        help="measure all-reduce bus bandwidth across the local GPUs",
        description="Float all-reduce from --min-size to --max-size, out-of-place and "
        "in-place, timed like nccl-tests (busbw = algbw * 2(n-1)/n). Needs a GPU; exit 1 "
        "when there is none or when the results are wrong.",
    )
    pb.add_argument("--json", action="store_true", help="print JSON")
    pb.add_argument("--gpus", metavar="LIST", help="CUDA device indices, e.g. 0,1 (default all)")
    pb.add_argument("--min-size", default="8", metavar="SIZE", help="smallest message (8)")
    pb.add_argument("--max-size", default="256MiB", metavar="SIZE", help="largest (256MiB)")
    pb.add_argument("--step", type=int, choices=(2, 4), default=2, help="size factor (2)")
    pb.add_argument("--iters", type=int, default=20, help="timed iterations per size (20)")
    pb.add_argument("--warmup", type=int, default=5, help="untimed iterations first (5)")
    pb.add_argument("--lib", metavar="PATH", help="libnccl.so.2 to load")
    pb.add_argument("--cudart", metavar="PATH", help="libcudart to load")
    pb.add_argument("--no-check", action="store_true", help="skip the correctness check")
    pb.set_defaults(func=run_bench)


def _wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False) or getattr(args, "nccl_json", False))


class InputLines:
    """Lines of a text file (``-`` for stdin), decoded leniently, each cut to MAX_LINE_BYTES
    (a file without newlines cannot fill memory), at most MAX_INPUT_BYTES in all (an endless
    stream, ``/dev/zero`` or ``yes |``, cannot run for ever): ``cut`` says the input was
    longer. ``done`` counts the bytes read, for a progress line."""

    def __init__(
        self, path: str, *, stdin: IO[bytes] | None = None, limit: int | None = None
    ) -> None:
        self.path = path
        self.limit = MAX_INPUT_BYTES if limit is None else limit
        self.done = 0
        self.cut = False
        self.size: int | None = None
        self._stdin = stdin
        self._file: IO[bytes] | None = None
        if path == "-" and stdin is None and sys.stdin is None:  # started with <&-
            raise CliError("standard input is closed", 2)
        if path != "-":
            try:
                self._file = open(path, "rb")  # noqa: SIM115 - closed when read through
            except FileNotFoundError:
                raise CliError(f"{path}: no such file", 2) from None
            except IsADirectoryError:
                raise CliError(f"{path}: is a directory", 2) from None
            except OSError as exc:
                raise CliError(f"{path}: {exc.strerror or exc}", 2) from None
            with contextlib.suppress(OSError):
                st = os.fstat(self._file.fileno())
                self.size = st.st_size if stat.S_ISREG(st.st_mode) else None

    def __iter__(self) -> Iterator[str]:
        if self._file is not None:
            with self._file:
                yield from self._lines(self._file)
            return
        stream = self._stdin or getattr(sys.stdin, "buffer", None)
        if stream is None:  # a text-only stdin (embedded interpreters, tests)
            for line in sys.stdin:
                if self._over(len(line)):
                    return
                yield line[:MAX_LINE_BYTES]
            return
        yield from self._lines(stream)

    def _over(self, n: int) -> bool:
        self.done += n
        if self.done > self.limit:
            self.cut = True
        return self.cut

    def _lines(self, stream: IO[bytes]) -> Iterator[str]:
        while True:
            try:
                line = stream.readline(MAX_LINE_BYTES)
            except OSError as exc:
                raise CliError(f"read error: {exc.strerror or exc}", 1) from None
            if not line or self._over(len(line)):
                return
            if len(line) == MAX_LINE_BYTES and not line.endswith(b"\n"):
                while True:  # drop the rest of an overlong line
                    rest = stream.readline(MAX_LINE_BYTES)
                    if not rest or self._over(len(rest)):
                        break
                    if rest.endswith(b"\n"):
                        break
            yield line.replace(b"\x00", b"").decode("utf-8", errors="replace")

    def note(self) -> str | None:
        """The line to print when the input was cut, else None."""
        if not self.cut:
            return None
        from lltui.core.units import fmt_bytes

        return (
            f"lltui: note: {self.path}: read the first {fmt_bytes(self.limit)} only; "
            "the summary covers that part"
        )


def _parse_with_progress(what: str, args: argparse.Namespace, parse: Any) -> Any:
    """``parse`` over the file's lines, with a progress line past a second and a note on
    stderr when the input was cut at MAX_INPUT_BYTES."""
    from lltui.commands.progress import Progress

    lines = InputLines(args.file)
    shown = "stdin" if args.file == "-" else args.file
    with Progress(f"{what} {shown}", total=lines.size, unit="MiB") as progress:

        def counted() -> Iterator[str]:
            for line in lines:
                progress.done = lines.done
                yield line

        result = parse(counted())
    note = lines.note()
    if note:
        print(note, file=sys.stderr)
    return result


def run_log(args: argparse.Namespace) -> int:
    from lltui.core.nccl.log import format_log_summary, parse_nccl_log

    summary = _parse_with_progress("nccl log: reading", args, parse_nccl_log)
    if not summary.has_nccl:
        raise CliError(
            f"{args.file}: nothing from NCCL in it (no 'NCCL INFO' or 'NCCL WARN' lines, "
            "version or transports); run with NCCL_DEBUG=INFO to get a log",
            2,
        )
    if _wants_json(args):
        print_json(summary.to_json())
    else:
        print(format_log_summary(summary))
    return 0


def run_tests(args: argparse.Namespace) -> int:
    from lltui.core.nccl.nccl_tests import format_table, parse_nccl_tests

    result = _parse_with_progress("nccl tests: reading", args, parse_nccl_tests)
    if not result.tables:
        raise CliError(
            f"{args.file}: no nccl-tests table in it (no rows of size, count, type, time, "
            "algbw, busbw and no '# Avg bus bandwidth' line)",
            2,
        )
    if _wants_json(args):
        print_json(result.to_json())
    else:
        print("\n\n".join(format_table(t) for t in result.tables))
        if result.tables_dropped:
            print(f"\n... {result.tables_dropped} more table(s) not kept")
    failed = [t for t in result.tables if t.failures and not t.rows]
    if failed:
        # the run failed before any row: the table (or JSON) says what happened; one line
        # on stderr says that it failed, whatever the output format
        first = failed[0].failures[0]
        print(f"lltui: nccl tests: the run failed before any result: {first}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    from lltui.core.nccl.conf import CONF_ORDER, ENVIRONMENT, conf_file_line
    from lltui.core.nccl.variables import explain_variable
    from lltui.services.nccl import nccl_report

    source = source_spec(args)
    try:
        report = nccl_report(source, lib_path=args.nccl_lib)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    out = report.to_json()
    env, findings = report.env, report.findings
    if _wants_json(args):
        print_json(out)
    else:
        import shutil
        import textwrap

        from lltui.core.text import counted
        from lltui.core.text import one_line as q  # paths, versions, environment: data

        lines = []
        lib = "RCCL" if out.get("library") == "rccl" else "NCCL"  # ROCm's, the same API
        if out["simulated"]:
            lines.append(f"{lib} {q(out['version'])}  {q(out['path'])}  [{q(out['source'])}]")
        elif out["available"]:
            lines.append(f"{lib} {q(out['version'])}  {q(out['path'])}  ({out['found_by']})")
        else:
            lines.append(f"NCCL not available: {q(out.get('reason') or 'not found')}")
        # every other library found, the ones before the loaded one (that failed to load)
        # too: the first is not always the one loaded
        for c in out.get("candidates", []):
            if c["path"] != out.get("path"):
                lines.append(f"  also: {q(c['path'])} ({c['found_by']})")
        for c in out.get("cudart", [])[:1]:
            lines.append(f"CUDA runtime  {q(c['path'])} ({c['found_by']})")
        if report.links:
            kinds = sorted(set(report.links.values()))
            lines.append(f"GPU links  {q(', '.join(kinds))} ({counted(len(report.links), 'pair')})")
        lines.append("environment")
        width = max(len(k) for k in env)
        env_from = report.env_from or {}
        for k, v in env.items():
            shown = "(unset)" if v is None else f"{q(v)}  - {q(explain_variable(k, v, env))}"
            if env_from.get(k, ENVIRONMENT) != ENVIRONMENT:
                shown += f"  [{q(env_from[k])}]"
            lines.append(f"  {k.ljust(width)}  {shown}")
        if report.env_from is not None:
            lines.append(f"config files  {CONF_ORDER}")
            lines += [f"  {conf_file_line(f)}" for f in report.conf_files]
        lines.append("findings" if findings else "findings: none")
        # wrapped to the terminal, as topo's advice is (lines of 100-140 columns at 80)
        cols = max(60, min(160, shutil.get_terminal_size((80, 24)).columns))
        for f in findings:
            lines += textwrap.wrap(
                f"  [{f.severity}] {f.code}: {q(f.message)}", cols, subsequent_indent=" " * 9
            )
            if f.hint:
                lines += textwrap.wrap(f"         -> {q(f.hint)}", cols, subsequent_indent=" " * 12)
        print("\n".join(lines))
    return 0 if out["available"] else 1


def _parse_gpus(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t]
    except ValueError:
        raise CliError(f"--gpus: not a list of device indices: {text!r}", 2) from None
    if not ids or any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise CliError(f"--gpus: give distinct indices >= 0, e.g. 0,1 (got {text!r})", 2)
    return ids


def run_bench(args: argparse.Namespace) -> int:
    from lltui.core.units import parse_size
    from lltui.services.nccl import BenchFailed, allreduce_bench

    try:
        min_b, max_b = parse_size(args.min_size), parse_size(args.max_size)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    if min_b > max_b:
        raise CliError(f"--min-size {args.min_size} is above --max-size {args.max_size}", 2)
    if args.iters < 1 or args.warmup < 0:
        raise CliError("--iters must be 1 or more and --warmup 0 or more", 2)
    devices = _parse_gpus(args.gpus)
    try:
        result = allreduce_bench(
            devices=devices,
            min_bytes=min_b,
            max_bytes=max_b,
            factor=args.step,
            iters=args.iters,
            warmup=args.warmup,
            validate=not args.no_check,
            nccl_path=args.lib or getattr(args, "nccl_lib", None),
            cudart_path=args.cudart,
        )
    except BenchFailed as exc:
        raise CliError(f"nccl bench: {exc}", exc.code) from None
    if _wants_json(args):
        print_json(result.to_json())
    else:
        print(result.to_text())
    return 1 if result.validated is False else 0

"""The NCCL view's data, read off the UI thread: the report, a bandwidth test, a loaded file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lltui.core.text import error_text

if TYPE_CHECKING:
    from lltui.services.nccl import NcclReport

MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class NcclState:
    """What the view shows; replaced (never changed) on the UI thread as results arrive."""

    report: NcclReport | None = None
    error: str | None = None
    bench_running: bool = False
    bench_text: str = ""
    file_text: str = ""

    @property
    def loading(self) -> bool:
        return self.report is None and self.error is None


def read_report(source: str) -> tuple[NcclReport | None, str | None]:
    """The report, or why there is none in one line, whatever went wrong: the view must not
    wait forever."""
    from lltui.services.nccl import nccl_report

    try:
        return nccl_report(source), None
    except (ValueError, OSError) as exc:
        return None, str(exc)
    except Exception as exc:
        return None, error_text(exc)


def run_bench_text(simulated: bool, source: str | None = None) -> str:
    """A quick all-reduce sweep on the local GPUs, as text; the reason in words when none
    (``source``: the rig shown; another host's is not this machine's to test)."""
    if simulated:
        return (
            "[b]bandwidth test[/b]: a simulated rig has no GPUs to test; "
            "run lltui on the rig (or `lltui nccl bench` there)"
        )
    from textual.markup import escape

    from lltui.services.nccl import BenchFailed, allreduce_bench, on_this_machine

    head = "[b]bandwidth test[/b]"
    if not on_this_machine(source):
        head += escape(f" of this machine's GPUs, not {source}'s (`lltui nccl bench` there)")
    try:
        result = allreduce_bench(max_bytes=64 * 1024 * 1024, factor=4, iters=10, warmup=3)
    except BenchFailed as exc:
        return f"{head}: " + escape(str(exc))
    return f"{head}\n" + escape(result.to_text())


def summarize_file(path: str, *, narrow: bool = False) -> str:
    """An NCCL_DEBUG=INFO log or nccl-tests output, summarised; which one is told by content
    (``narrow``: an nccl-tests table in the columns that fit 80)."""
    from textual.markup import escape

    from lltui.core.nccl.log import format_log_summary, parse_nccl_log_text
    from lltui.core.nccl.nccl_tests import format_table, parse_nccl_tests_text

    p = Path(path).expanduser()
    try:
        with p.open("rb") as f:
            data = f.read(MAX_FILE_BYTES)
    except OSError as exc:
        return f"[b $error]{escape(str(p))}[/]: {escape(exc.strerror or str(exc))}"
    text = data.decode("utf-8", errors="replace")
    tests = parse_nccl_tests_text(text)
    if tests.tables:
        body = "\n\n".join(format_table(t, narrow=narrow) for t in tests.tables)
        return f"[b]nccl-tests[/b] {escape(str(p))}\n{escape(body)}"
    log = parse_nccl_log_text(text)
    if log.has_nccl:
        return f"[b]NCCL log[/b] {escape(str(p))}\n{escape(format_log_summary(log))}"
    return (
        f"[b $error]{escape(str(p))}[/]: nothing from NCCL in it "
        "(neither NCCL_DEBUG=INFO lines nor an nccl-tests table)"
    )

"""Run llama-bench and read its results: one process per configuration, its JSONL output
read as each test finishes (progress), a hard deadline that stops the process group (the
results so far are kept), never a shell.

llama-bench is ``$LLTUI_LLAMA_BENCH`` when set, else looked for beside the llama-server lltui
would use (``$LLTUI_LLAMA_SERVER``, ``PATH``), then in lltui's own builds in the user cache
(``lltui llama install`` builds it).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lltui.sources.llama import build_cache
from lltui.sources.llama.binary import LlamaBinaryError, find_llama_server
from lltui.sources.proc_group import dies_with_us, stop_process

BENCH = "llama-bench"
ENV_VAR = "LLTUI_LLAMA_BENCH"


class BenchError(Exception):
    """llama-bench cannot be run or failed; ``str()`` is one line, ``code`` the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One llama-bench test as it printed it (a ``-o jsonl`` line)."""

    n_prompt: int
    n_gen: int
    n_depth: int
    n_batch: int
    n_ubatch: int
    n_gpu_layers: int
    n_cpu_moe: int
    n_threads: int
    flash_attn: int  # -1 auto, 0 off, 1 on
    avg_ts: float
    stddev_ts: float
    build: str  # "b1234 (abcdef0)" or "unknown"

    @property
    def decode(self) -> bool:
        return self.n_gen > 0 and self.n_prompt == 0

    @property
    def test(self) -> str:
        """As llama-bench names it: pp512, tg128, ``pp512 @ d4096``."""
        name = f"tg{self.n_gen}" if self.decode else f"pp{self.n_prompt}"
        return f"{name} @ d{self.n_depth}" if self.n_depth else name


def parse_row(line: str) -> BenchRow | None:
    """One JSONL line of llama-bench, or None for anything else (a log line, a broken one, a
    count out of llama-bench's int32 range). The speed is kept as printed, NaN or not: the
    caller counts the rows it cannot use; a spread that is not finite reads as none."""
    try:
        raw = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(raw, dict) or "avg_ts" not in raw:
        return None
    try:
        commit = str(raw.get("build_commit", "unknown"))
        number = _count(raw, "build_number", 0)
        stddev = float(raw.get("stddev_ts", 0.0))
        return BenchRow(
            n_prompt=_count(raw, "n_prompt", 0),
            n_gen=_count(raw, "n_gen", 0),
            n_depth=_count(raw, "n_depth", 0),
            n_batch=_count(raw, "n_batch", 2048, low=1),
            n_ubatch=_count(raw, "n_ubatch", 512, low=1),
            n_gpu_layers=_count(raw, "n_gpu_layers", -1, low=-1),
            n_cpu_moe=_count(raw, "n_cpu_moe", 0),
            n_threads=_count(raw, "n_threads", 0),
            flash_attn=_count(raw, "flash_attn", -1, low=-1),
            avg_ts=float(raw["avg_ts"]),
            stddev_ts=stddev if 0 <= stddev < math.inf else 0.0,
            build=f"b{number} ({commit})" if number else commit,
        )
    except (TypeError, ValueError, OverflowError):
        return None


def _count(raw: dict[str, object], key: str, default: int, low: int = 0) -> int:
    """An integer field in ``low``..2**31-1 (ValueError otherwise; 1e999 is OverflowError)."""
    value = raw.get(key, default)
    if value is None:
        value = default
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{key} is not a whole number")
    n = int(value)  # type: ignore[call-overload]
    if not low <= n < 2**31:
        raise ValueError(f"{key} {n} out of range")
    return n


def find_llama_bench(env: Mapping[str, str] | None = None) -> Path:
    """llama-bench beside the llama-server lltui uses, else lltui's own build (BenchError)."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_VAR)
    if explicit:
        path = Path(explicit).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BenchError(f"${ENV_VAR} is {explicit!r}, which is not an executable file", 2)
        return path
    with contextlib.suppress(LlamaBinaryError):
        server = find_llama_server(env)
        tool = server.tool(BENCH)
        if tool is not None:
            return tool
    for cuda in (True, False):
        built = build_cache.installed(cuda=cuda, env=env)
        if built is not None and BENCH in built.binaries:
            return built.binaries[BENCH]
    raise BenchError(
        "no llama-bench found (not beside llama-server, no lltui build); "
        "run `lltui llama install` to build it",
        1,  # a tool this machine lacks, as a missing llama-server is for launch: not bad input
    )


def run_bench(
    binary: Path,
    args: Sequence[str],
    deadline: float,
    on_row: Callable[[BenchRow], None] | None = None,
) -> tuple[list[BenchRow], str | None]:
    """Run ``llama-bench ARGS -o jsonl`` until it ends or ``deadline`` (monotonic) passes;
    the rows it printed, and why it stopped early (None: it finished)."""
    argv = [str(binary), *args, "-o", "jsonl"]
    try:
        proc = subprocess.Popen(
            dies_with_us(argv, isolated=True),  # gone with lltui, a SIGKILL of it too
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,  # its own group: stopped with everything it started
        )
    except OSError as exc:
        raise BenchError(f"{binary} could not be started: {exc}") from None
    rows: list[BenchRow] = []
    err_tail: list[str] = []
    stopped: list[str] = []

    def drain_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_tail.append(line.rstrip())
            del err_tail[:-20]

    reader = threading.Thread(target=drain_stderr, name="llama-bench stderr", daemon=True)
    reader.start()

    def watchdog() -> None:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stopped.append("the time budget ran out")
            stop_process(proc)

    guard = threading.Thread(target=watchdog, name="llama-bench deadline", daemon=True)
    guard.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            row = parse_row(line)
            if row is not None:
                rows.append(row)
                if on_row is not None:
                    on_row(row)
        proc.wait()
    except BaseException:
        stop_process(proc)
        raise
    finally:
        guard.join(5)
        reader.join(5)
    if stopped:
        return rows, stopped[0]
    if proc.returncode != 0:
        last = next((ln for ln in reversed(err_tail) if ln.strip()), "no output")
        if not rows:
            raise BenchError(f"llama-bench failed (exit {proc.returncode}): {last[:300]}")
        return rows, f"llama-bench exited {proc.returncode}: {last[:200]}"
    return rows, None

"""How ``lltui explain`` does on the public logs (tests/fixtures/llama-logs): buffer lines
read, and for the logs whose model is reconstructed (tests/support/public_models.py) how many lines
the prediction matches exactly (as llama.cpp prints them) and within 1 % / 10 %, per kind;
then the time and memory of explaining a 2 GiB log against reading it whole with Python's
own line iterator, in the same run.

    .venv/bin/python bench/explain_logs.py
"""

from __future__ import annotations

import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.public_models import BY_LOG, write  # noqa: E402

from lltui.core.llamalog.reader import scan_lines  # noqa: E402
from lltui.services.explain import ExplainRequest, explain  # noqa: E402

LOGS = ROOT / "tests" / "fixtures" / "llama-logs"


def public(tmp: Path) -> None:
    total: Counter[str] = Counter()
    by_kind: dict[str, Counter[str]] = {}
    print(f"{'log':<52} {'lines':>5} {'compared':>8} {'exact':>6} {'1%':>4} {'10%':>4}")
    for path in sorted(LOGS.glob("*.log")):
        f = scan_lines(path.read_text(encoding="utf-8").splitlines())
        total["logs"] += 1
        total["buffer lines"] += len(f.buffers)
        rec = BY_LOG.get(path.name)
        if rec is None:
            continue
        model = write(rec, tmp)
        r = explain(ExplainRequest(str(path), model=str(model), ask_binary=False))
        compared = r.compared()
        exact = sum(c.exact for c in compared)
        one = sum(c.within(0.01) for c in compared)
        ten = sum(c.within(0.10) for c in compared)
        for c in compared:
            k = by_kind.setdefault(c.line.kind, Counter())
            k["compared"] += 1
            k["exact"] += c.exact
            k["1%"] += c.within(0.01)
        total.update({"compared": len(compared), "exact": exact, "1%": one, "10%": ten})
        counts = f"{len(r.checks):>5} {len(compared):>8} {exact:>6} {one:>4} {ten:>4}"
        print(f"{path.name[:52]:<52} {counts}")
    print(
        f"\n{total['logs']} logs, {total['buffer lines']} buffer lines read; with a "
        f"reconstructed header: {total['compared']} compared, {total['exact']} exact, "
        f"{total['1%']} within 1%, {total['10%']} within 10%"
    )
    for kind, k in sorted(by_kind.items()):
        n, exact, one = k["compared"], k["exact"], k["1%"]
        print(f"  {kind:<8} {n:>3} compared, {exact:>3} exact, {one:>3} within 1%")


def big_file(tmp: Path) -> None:
    head = (ROOT / "tests/fixtures/llama-server/server_lv4_full.log").read_bytes()
    path = tmp / "big.log"
    line = b"0.01.000.000 I srv  log_server_r: request: GET /health 127.0.0.1 200\n"
    with path.open("wb") as f:
        f.write(head)
        chunk = line * (8 * 1024 * 1024 // len(line))
        while f.tell() < 2 * 1024**3:
            f.write(chunk)
    size = path.stat().st_size

    t0 = time.perf_counter()
    with path.open("rb") as f:
        n = sum(1 for _ in f)
    base = time.perf_counter() - t0

    t0 = time.perf_counter()
    r = explain(ExplainRequest(str(path), ask_binary=False))
    took = time.perf_counter() - t0
    tracemalloc.start()  # a second run, for its memory (tracing slows it down)
    explain(ExplainRequest(str(path), ask_binary=False))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    path.unlink()
    print(
        f"\n{size / 2**30:.2f} GiB log of {n} lines: reading every line took {base:.1f} s; "
        f"explain took {took:.1f} s ({took / base:.2f}x), peak traced memory "
        f"{peak / 2**20:.0f} MiB, {len(r.checks)} buffer lines; {'; '.join(r.source.notes)}"
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        public(Path(tmp))
        big_file(Path(tmp))


if __name__ == "__main__":
    main()

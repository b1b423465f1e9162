"""Seeded, bounded fuzzing of lltui's parsers and estimators.

    python bench/fuzz.py --cases 3000 --jobs 2            # every target, 3000 cases each
    python bench/fuzz.py --targets gguf-bytes,flags --cases 20000 --seed 7
    python bench/fuzz.py --target topo --seed 1 --index 42   # one case: what it does, and why
    python bench/fuzz.py --cases 2000 --save-corpus         # keep each new failure, cut down

Every case is (target, seed, index): the same three numbers give the same input. A case
passes when lltui ends in a result or a one-line domain error (exit 0/1/2, no "internal
error", no traceback, strict JSON for --json) within --timeout seconds and --mem-mib of peak
memory growth (see tests/support/fuzz_runner.py). Prints per target: cases, domain errors, crashes,
hangs, memory failures, the slowest case, the peak memory growth of the worker processes
since they started ("peak MiB", over many cases) and the largest rise of that peak in one
case ("largest step", the case's own allocation); then each distinct failure with its seed,
index and a reproduction.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import fuzz_runner as fr  # noqa: E402
from support.fuzz_inputs import TARGETS  # noqa: E402

FAIL_KINDS = (
    "crash",
    "bad-exit",
    "bad-stderr",
    "bad-json",
    "bad-text",
    "bad-record",
    "orphan",
    "generator",
    "worker-died",
)


class Stats:
    def __init__(self) -> None:
        self.n = 0
        self.counts: dict[str, int] = defaultdict(int)
        self.slowest = (0.0, -1)
        self.peak = 0.0
        self.step = (0.0, -1)  # the largest rise of the peak in one case, and that case
        self.secs = 0.0


def _known_signatures() -> set[str]:
    out = set()
    for p in fr.corpus_entries():
        note = json.loads(p.read_text())
        out.add(note.get("signature", ""))
    return out


def run(args: argparse.Namespace) -> int:
    targets = [t for t in args.targets.split(",") if t] if args.targets else list(TARGETS)
    for t in targets:
        if t not in TARGETS:
            sys.exit(f"unknown target {t!r}; known: {', '.join(TARGETS)}")
    stats: dict[str, Stats] = {t: Stats() for t in targets}
    failures: dict[str, list[dict[str, Any]]] = defaultdict(list)
    lock = threading.Lock()
    t_start = time.monotonic()

    def job(j: int) -> None:
        with fr.Worker(args.timeout, args.mem_mib) as w:
            for t in targets:
                for i in range(j, args.cases, args.jobs):
                    res = fr.gen(w, t, args.seed, args.start + i)
                    with lock:
                        s = stats[t]
                        s.n += 1
                        s.counts[res["status"]] += 1
                        secs = float(res.get("secs") or 0.0)
                        s.secs += secs
                        if secs > s.slowest[0]:
                            s.slowest = (secs, args.start + i)
                        s.peak = max(s.peak, float(res.get("rss_growth_mib") or 0.0))
                        step = float(res.get("case_peak_mib", res.get("rss_step_mib")) or 0.0)
                        if step > s.step[0]:
                            s.step = (step, args.start + i)
                        if res["status"] not in fr.OK_STATUSES:
                            res["index"] = args.start + i
                            res["target"] = t
                            sig = fr.signature(t, res)
                            res["signature"] = sig
                            if len(failures[sig]) < 3:
                                failures[sig].append(res)

    threads = [threading.Thread(target=job, args=(j,)) for j in range(args.jobs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.monotonic() - t_start

    print(f"lltui fuzz: seed {args.seed}, cases {args.start}..{args.start + args.cases - 1} "
          f"per target, {args.jobs} jobs, timeout {args.timeout}s, memory {args.mem_mib} MiB, "
          f"{wall:.0f}s")  # fmt: skip
    head = (
        f"{'target':<11} {'cases':>6} {'ok':>6} {'domain':>6} {'crash':>5} {'hang':>4} {'mem':>4}"
    )
    print(head + f" {'mean ms':>7} {'slowest':>16} {'peak MiB':>8} {'largest step':>18}")
    total_fail = 0
    for t in targets:
        s = stats[t]
        c = s.counts
        crashes = sum(c[k] for k in FAIL_KINDS)
        total_fail += crashes + c["hang"] + c["memory"]
        mean = 1000 * s.secs / max(s.n, 1)
        slow = f"{s.slowest[0]:.2f}s #{s.slowest[1]}"
        print(
            f"{t:<11} {s.n:>6} {c['ok']:>6} {c['domain']:>6} {crashes:>5} {c['hang']:>4} "
            f"{c['memory']:>4} {mean:>7.1f} {slow:>16} {s.peak:>8.1f} "
            f"{f'{s.step[0]:.1f} MiB #{s.step[1]}':>18}"
        )

    known = _known_signatures()
    if failures:
        print(f"\n{len(failures)} distinct failures:")
    for sig, group in sorted(failures.items()):
        first = group[0]
        mark = " (in corpus)" if sig in known else ""
        print(f"\n[{sig}]{mark}")
        print(f"  first: --target {first['target']} "
              f"--seed {args.seed} --index {first['index']}  ({len(group)} shown)")  # fmt: skip
        print(f"  {first.get('exc') or first.get('message') or first['status']}")
        if first.get("where"):
            print(f"  at {first['where']}")
        if "case" in first:
            print("  ops: " + "; ".join(first["case"]["ops"])[:400])
    if args.save_corpus and failures:
        saved = 0
        with fr.Worker(args.timeout, args.mem_mib) as w:
            for sig, group in sorted(failures.items()):
                if sig in known:
                    continue
                first = group[0]
                if "case" not in first:  # a hang: ask again for the input
                    t = first["target"]
                    first = fr.gen(w, t, args.seed, first["index"], want_case=True)
                    if "case" not in first:  # it hung again: rebuild it in this process
                        first = _case_here(t, args.seed, group[0]["index"]) | {"status": "hang"}
                data = base64.b64decode(first["data"])
                red = fr.reduce_case(w, first["case"], data, first, budget_s=args.reduce_s)
                r = red.result
                what = r.get("exc") or r.get("message") or r["status"]
                path = fr.save_entry(
                    red.case, red.data, r, seed=args.seed, index=group[0]["index"], xfail=what[:200]
                )
                saved += 1
                print(
                    f"saved {path.name} ({len(data)} -> {len(red.data)} bytes, {red.tries} tries)"
                )
        print(f"{saved} new corpus entries")
    return 1 if total_fail else 0


def _case_here(target: str, seed: int, index: int) -> dict[str, Any]:
    import tempfile

    from support.fuzz_inputs import Seeds, make_case

    seeds = Seeds(Path(tempfile.mkdtemp(prefix="lltui-fuzz-")))
    case = make_case(seeds, target, seed, index)
    return {"case": case.to_json(), "data": base64.b64encode(case.data).decode()}


def one(args: argparse.Namespace) -> int:
    """Run a single case and show everything about it."""
    with fr.Worker(args.timeout, args.mem_mib) as w:
        res = fr.gen(w, args.target, args.seed, args.index, want_case=True)
    if "case" not in res:
        res |= _case_here(args.target, args.seed, args.index)
    case = res.pop("case")
    data = base64.b64decode(res.pop("data"))
    out = Path(args.write or f"/tmp/lltui-fuzz-{args.target}-{args.seed}-{args.index}")
    out = out.with_suffix(fr._EXT.get(args.target, ".txt"))
    out.write_bytes(data)
    tb = res.pop("traceback", None)
    print(json.dumps({"case": case, "result": res}, indent=2))
    if tb:
        print(tb)
    print(f"input written to {out}")
    print(
        "reproduce: "
        + fr.reproduce_line(case, out.name).replace("tests/fuzz_corpus/", str(out.parent) + "/")
    )
    return 0 if res["status"] in fr.OK_STATUSES else 1


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--targets", default="", help=f"comma-separated, of: {', '.join(TARGETS)}")
    p.add_argument("--cases", type=int, default=1000, help="cases per target")
    p.add_argument("--start", type=int, default=0, help="first case index")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=1, help="worker processes")
    p.add_argument("--timeout", type=float, default=fr.DEFAULT_TIMEOUT, help="seconds per case")
    p.add_argument("--mem-mib", type=float, default=fr.DEFAULT_MEM_MIB, help="peak growth per case")
    p.add_argument("--save-corpus", action="store_true", help="cut down and keep new failures")
    p.add_argument("--reduce-s", type=float, default=60.0, help="seconds to cut down one failure")
    p.add_argument("--target", help="with --index: run one case")
    p.add_argument("--index", type=int)
    p.add_argument("--write", help="with --index: where to write the input")
    args = p.parse_args()
    if args.index is not None:
        if not args.target:
            p.error("--index needs --target")
        return one(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())

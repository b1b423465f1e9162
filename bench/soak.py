"""Soak: the app's memory over a long run, sampling and switching views as a user would.

    .venv/bin/python bench/soak.py [--minutes 30] [--interval 0.25] [--history 1]
                                   [--switch 10] [--warmup 5] [--source sim:8xh100-sxm]
                                   [--size 160x50] [--trace]

The app runs headless (Textual's test driver, which lays out and paints every frame as a
terminal would) on a simulated rig, polling every --interval seconds with --history minutes
of history; every --switch seconds it goes to the next view (monitor, topology, NCCL, fit,
launch and back). RSS (VmRSS) is read every 10 s. Printed: RSS over time, and the slope of
RSS against time by least squares, in MiB per minute, over the run after --warmup minutes
(the history filling, Textual's caches), beside the slope during the warm-up in the same
run; and the first and second halves after warm-up apart, to show whether growth slows.
--trace also lists the lines whose allocations grew most after warm-up (tracemalloc;
slower).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lltui.app.app import create_app  # noqa: E402
from lltui.config import Settings  # noqa: E402

VIEWS = ("monitor", "topology", "nccl", "fit", "launch")
EVERY_S = 10.0


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (minutes, MiB): MiB per minute."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx if sxx else float("nan")


async def soak(args: argparse.Namespace) -> list[tuple[float, float, int]]:
    w, h = (int(x) for x in args.size.split("x"))
    settings = Settings(interval=args.interval, source=args.source, history_minutes=args.history)
    app = create_app(settings)
    points: list[tuple[float, float, int]] = []  # (minutes, MiB, samples applied)
    traced: list[tracemalloc.Snapshot] = []
    async with app.run_test(size=(w, h)) as pilot:
        start = time.monotonic()
        end = start + args.minutes * 60
        next_read = start
        next_switch = start + args.switch
        view = 0
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_switch:
                view = (view + 1) % len(VIEWS)
                app.action_view(VIEWS[view])
                next_switch += args.switch
            if now >= next_read:
                gc.collect()
                minutes = (now - start) / 60
                points.append((minutes, rss_mib(), app.samples_applied))
                print(f"{minutes:6.1f} min  {points[-1][1]:7.1f} MiB  "
                      f"{points[-1][2]:>7} samples  view {VIEWS[view]}", flush=True)  # fmt: skip
                if args.trace and not traced and minutes >= args.warmup:
                    traced.append(tracemalloc.take_snapshot())
                next_read += EVERY_S
            await pilot.pause(0.05)
        if args.trace and traced:
            gc.collect()
            after = tracemalloc.take_snapshot().compare_to(traced[0], "lineno")
            print("\nallocations that grew most after warm-up:")
            for stat in after[:15]:
                print(f"  {stat.size_diff / 1024:+9.1f} KiB  {stat.traceback[0]}")
    return points


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=0.25, help="poll interval, seconds")
    ap.add_argument("--history", type=float, default=1.0, help="history kept, minutes")
    ap.add_argument("--switch", type=float, default=10.0, help="seconds between view switches")
    ap.add_argument("--warmup", type=float, default=5.0, help="minutes left out of the slope")
    ap.add_argument("--source", default="sim:8xh100-sxm")
    ap.add_argument("--size", default="160x50")
    ap.add_argument("--trace", action="store_true", help="tracemalloc: where growth comes from")
    args = ap.parse_args()
    if args.trace:
        tracemalloc.start(1)
    print(f"soak: {args.minutes:g} min, {args.source}, interval {args.interval:g} s, history "
          f"{args.history:g} min, a view switch every {args.switch:g} s, {args.size}")  # fmt: skip
    points = asyncio.run(soak(args))
    warm = [(m, r) for m, r, _ in points if m < args.warmup]
    after = [(m, r) for m, r, _ in points if m >= args.warmup]
    print()
    print(f"warm-up   (< {args.warmup:g} min): slope {slope(warm):+.3f} MiB/min")
    if after:
        half = len(after) // 2
        print(f"after it  ({after[0][0]:.1f}-{after[-1][0]:.1f} min): slope "
              f"{slope(after):+.3f} MiB/min, RSS {after[0][1]:.1f} -> {after[-1][1]:.1f} MiB "
              f"({after[-1][1] - after[0][1]:+.1f})")  # fmt: skip
        print(f"  first half {slope(after[:half]):+.3f} MiB/min, "
              f"second half {slope(after[half:]):+.3f} MiB/min")  # fmt: skip
    samples = points[-1][2] if points else 0
    print(f"samples applied: {samples}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

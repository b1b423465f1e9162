"""Opening a long recording: wall time and peak memory of ``ReplaySource.open`` (the index it
builds: where each sample line starts, its time), and of playing it to the end stepped.

    .venv/bin/python bench/replay_open.py [--samples 300000] [--profile kaggle-2xt4] [--keep DIR]

Writes, in a temporary directory, a recording of ``--samples`` samples: a simulated rig's
first 64 samples, recorded by the Recorder, repeated with each line's seq, t and wall moved
on (a day at 0.25 s is 345600 samples). Each measurement runs in its own process; its wall
time and peak RSS (os.wait4's ru_maxrss) are printed beside a baseline run in the same way in
the same run: a process that imports the replay module and reads every line of the file
(the least any index of it costs). "x base" is the ratio of the two.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

BASELINE = """
import sys, time
from lltui.sources.gpu.replay import ReplaySource
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    n = sum(1 for _ in f)
print(time.perf_counter() - t0, n)
"""

OPEN = """
import sys, time
from lltui.sources.gpu.replay import ReplaySource
t0 = time.perf_counter()
src = ReplaySource(sys.argv[1], stepped=True)
src.open()
print(time.perf_counter() - t0, len(src._entries))
"""

PLAY = """
import sys, time
from lltui.sources.gpu.replay import ReplaySource
t0 = time.perf_counter()
src = ReplaySource(sys.argv[1], stepped=True)
src.open()
n = 0
while not src.poll().ended:
    n += 1
print(time.perf_counter() - t0, n)
"""

PREFIX = re.compile(r'^\{"seq":\d+,"t":[^,]+,"wall":[^,]+,')


def run(code: str, path: Path) -> tuple[float, float, str]:
    """(seconds the code says it took, peak RSS MiB, the count it printed), in its own
    process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, env=env, cwd=ROOT
    )
    assert proc.stdout is not None
    out = proc.stdout.read().decode().split()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"measurement failed: exit {os.waitstatus_to_exitcode(status)}")
    return float(out[0]), usage.ru_maxrss / 1024, out[1]


def write_recording(path: Path, samples: int, profile: str) -> None:
    sys.path.insert(0, str(ROOT))
    from lltui.sources.gpu.replay import record
    from lltui.sources.gpu.sim import SimSource, StepClock

    seed = path.with_suffix(".seed.jsonl")
    record(SimSource(profile, seed=0, clock=StepClock(0.0, step=0.25), start=20.0), seed, 64)
    header, *lines = seed.read_text().splitlines()
    seed.unlink()
    bodies = [PREFIX.sub("", line) for line in lines]
    wall0 = 1_767_225_600.0
    with path.open("w") as f:
        f.write(header + "\n")
        for i in range(samples):
            t = i * 0.25
            f.write(f'{{"seq":{i + 1},"t":{t},"wall":{wall0 + t},{bodies[i % len(bodies)]}\n')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=300_000)
    ap.add_argument("--profile", default="kaggle-2xt4")
    ap.add_argument("--keep", type=Path, default=None, help="write the recording here")
    ap.add_argument("--play", action="store_true", help="play it to the end too (slow)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.keep or Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        path = d / "long.jsonl"
        t0 = time.perf_counter()
        write_recording(path, args.samples, args.profile)
        size = path.stat().st_size / 1e6
        took = time.perf_counter() - t0
        print(f"recording: {args.samples} samples, {size:.0f} MB (written in {took:.1f} s)")
        base_s, base_mb, lines = run(BASELINE, path)
        name = "baseline: read every line"
        print(f"{name:32} {base_s:7.2f} s {base_mb:7.0f} MiB  ({lines} lines)")
        rows = [("open (index)", OPEN)]
        if args.play:
            rows.append(("open and play to the end", PLAY))
        for name, code in rows:
            secs, mb, n = run(code, path)
            print(
                f"{name:32} {secs:7.2f} s {mb:7.0f} MiB  ({n} samples)"
                f"  x base {secs / base_s:5.1f} time, {mb / base_mb:4.2f} memory"
            )


if __name__ == "__main__":
    main()

"""Exporter cost: one sampling round (poll + families) against one scrape (exposition text of
the last round), on 2, 8 and 16 simulated GPUs, in the same run; and the import cost of
prometheus_client, which only the exporter and the prom:/scrape: sources load.

    .venv/bin/python bench/exporter.py [--rounds N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from prometheus_client import generate_latest

from lltui.services.exporter import Sampler, make_registry
from lltui.sources.gpu.prom import parse_exposition
from lltui.sources.gpu.sim import SimSource, StepClock

PROFILES = (("kaggle-2xt4", 2), ("8xh100-sxm", 8), ("16xv100-dgx2", 16))


def measure(profile: str, rounds: int) -> tuple[float, float, float, int]:
    source = SimSource(profile, seed=0, clock=StepClock(), start=0.0)
    source.open()
    sampler = Sampler(source, host="bench")
    registry = make_registry(sampler)
    sample_ms, scrape_ms, parse_ms = [], [], []
    size = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        sampler.sample_once()
        t1 = time.perf_counter()
        text = generate_latest(registry)
        t2 = time.perf_counter()
        parse_exposition(text.decode())
        t3 = time.perf_counter()
        sample_ms.append((t1 - t0) * 1e3)
        scrape_ms.append((t2 - t1) * 1e3)
        parse_ms.append((t3 - t2) * 1e3)
        size = len(text)
    return (
        statistics.median(sample_ms),
        statistics.median(scrape_ms),
        statistics.median(parse_ms),
        size,
    )


def import_ms(module: str) -> float:
    """Cumulative import time of ``module`` in a fresh interpreter (-X importtime)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    total = 0.0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == module:
            total = float(parts[1]) / 1000.0
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    print(f"{'rig':<14}{'GPUs':>5}{'sample ms':>11}{'scrape ms':>11}{'parse ms':>10}"
          f"{'scrape/sample':>15}{'bytes':>9}")  # fmt: skip
    for profile, n in PROFILES:
        sample, scrape, parse, size = measure(profile, args.rounds)
        print(f"{profile:<14}{n:>5}{sample:>11.2f}{scrape:>11.2f}{parse:>10.2f}"
              f"{scrape / sample:>15.2f}{size:>9}")  # fmt: skip
    base = import_ms("json")
    for module in ("prometheus_client", "prometheus_client.parser", "lltui.cli"):
        print(f"import {module}: {import_ms(module):.1f} ms (json: {base:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Exporter cost: one sampling round (poll + families) against one scrape (exposition text of
the last round), on 2, 8 and 16 simulated GPUs, in the same run; the import cost of
prometheus_client, which only the exporter and the prom:/scrape: sources load; and a burst
of concurrent scrapers (--scrapers, 200) against lltui's server and, as the baseline in the
same run, prometheus_client's start_http_server (a listen backlog of 5): latency p50, p99,
max, and the scrapes that timed out or failed.

    .venv/bin/python bench/exporter.py [--rounds N] [--scrapers 200] [--seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import generate_latest

from lltui.services.exporter import Sampler, make_registry, serve
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


def _scraper(port: int, until: float, timeout: float, out: list[float], failed: list[str]) -> None:
    """GET /metrics again and again until ``until``, a new connection each time (as
    Prometheus does after an idle gap); seconds per scrape into ``out``."""
    while time.monotonic() < until:
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", "/metrics")
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200 or not body:
                failed.append(f"HTTP {resp.status}")
            else:
                out.append(time.monotonic() - t0)
        except TimeoutError:
            failed.append("timeout")
        except OSError as exc:
            failed.append(type(exc).__name__)
        finally:
            conn.close()


def burst(
    start: Callable[[Any, Sampler], tuple[Any, Any]], n: int, seconds: float
) -> dict[str, float]:
    """``n`` scrapers at once for ``seconds`` against a server ``start(registry)`` makes."""
    source = SimSource("8xh100-sxm", seed=0, clock=StepClock(), start=0.0)
    source.open()
    sampler = Sampler(source, host="bench", interval_s=1.0)
    sampler.start()  # a new round each second, as the exporter samples
    server, _ = start(make_registry(sampler), sampler)
    port = server.server_address[1]
    times: list[float] = []
    failed: list[str] = []
    until = time.monotonic() + seconds
    threads = [
        threading.Thread(target=_scraper, args=(port, until, 10.0, times, failed), daemon=True)
        for _ in range(n)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server.shutdown()
    server.server_close()
    sampler.stop()
    times.sort()
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))] if times else float("nan")  # noqa: E731
    return {
        "scrapes": len(times),
        "p50": pick(0.5),
        "p99": pick(0.99),
        "max": times[-1] if times else float("nan"),
        "timeouts": failed.count("timeout"),
        "failed": len(failed) - failed.count("timeout"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--scrapers", type=int, default=200, help="concurrent scrapers (0: skip)")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long each burst lasts")
    args = ap.parse_args()
    if args.scrapers:
        from prometheus_client import start_http_server

        print(f"{args.scrapers} concurrent scrapers for {args.seconds:g} s each, 8 GPUs:")
        print(f"{'server':<28}{'scrapes':>8}{'p50 ms':>8}{'p99 ms':>8}{'max ms':>8}"
              f"{'timeouts':>9}{'failed':>7}")  # fmt: skip
        rows = {
            "prometheus_client (base)": burst(
                lambda reg, _s: start_http_server(0, addr="127.0.0.1", registry=reg),
                args.scrapers,
                args.seconds,
            ),
            "lltui serve": burst(
                lambda reg, s: serve(reg, "127.0.0.1", 0, version=lambda: s.version),
                args.scrapers,
                args.seconds,
            ),
        }
        for name, r in rows.items():
            print(f"{name:<28}{r['scrapes']:>8.0f}{r['p50'] * 1e3:>8.0f}{r['p99'] * 1e3:>8.0f}"
                  f"{r['max'] * 1e3:>8.0f}{r['timeouts']:>9.0f}{r['failed']:>7.0f}")  # fmt: skip
        base, ours = rows["prometheus_client (base)"], rows["lltui serve"]
        print(f"p99 ratio lltui/base: {ours['p99'] / base['p99']:.2f}; "
              f"max ratio: {ours['max'] / base['max']:.2f}")  # fmt: skip
        print()
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

"""NVML calls per GPU per tick, and the cost of NvmlSource.poll() per GPU, on the FAKE pynvml.

Run from the repository root::

    .venv/bin/python bench/nvml_calls.py

Counts come from tests/support/fake_pynvml.py, which counts every call per GPU and function. A fast
tick must stay at or under FAST_CALL_BUDGET calls per GPU; the script exits 1 when it does not.

Timings compare poll() against a bare loop that calls the same fake functions once each, in
the same run, and print the ratio (the source's own overhead on top of the NVML calls). Real
NVML calls cost far more than the fake's, so on a real GPU the ratio is closer to 1.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from support import fake_pynvml as fp  # noqa: E402

from lltui.core.monitor.models import GpuProcess, HostSample  # noqa: E402
from lltui.sources.gpu.host_facts import HostSampler  # noqa: E402
from lltui.sources.gpu.nvml import (  # noqa: E402
    DEFAULT_LINK_TTL_S,
    DEFAULT_PCIE_TTL_S,
    DEFAULT_PROCESS_TTL_S,
    DEFAULT_SLOW_TTL_S,
    NvmlSource,
)

FAST_CALL_BUDGET = 10
MEAN_TICKS = 600  # ten minutes of 1 s ticks, so each TTL comes round a whole number of times
GPU_COUNTS = (1, 2, 8)
EVERY_TTL = max(DEFAULT_SLOW_TTL_S, DEFAULT_PROCESS_TTL_S, DEFAULT_PCIE_TTL_S, DEFAULT_LINK_TTL_S)

SETUPS = (
    ("R550, field values", fp.DRIVER_R550, fp.BINDING_13),
    ("R535, field values", fp.DRIVER_R535, fp.BINDING_13),
    ("no field values", fp.DRIVER_NO_FIELD_VALUES, fp.BINDING_13),
    ("R450, old binding", fp.DRIVER_R450, fp.BINDING_11),
)


class NoHost:
    """Stands in for HostSampler so timings measure the NVML side only."""

    def sample(self) -> HostSample:
        return HostSample()

    def enrich(self, processes: Iterable[GpuProcess]) -> tuple[GpuProcess, ...]:
        return tuple(processes)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rig(n: int, driver: fp.FakeDriver, binding: fp.FakeBinding) -> fp.FakeNvml:
    gpus = fp.make_gpus(n, nvlinks=4 if n >= 2 else 0)
    for i, g in enumerate(gpus):
        g.compute_procs = [(40_000 + i, 1024 * fp.MIB)]
    fake = fp.FakeNvml(gpus, driver=driver, binding=binding)
    sys.modules["pynvml"] = fake.module
    return fake


def per_gpu(fake: fp.FakeNvml, n: int) -> float:
    return sum(fake.count(i) for i in range(n)) / n


def count_calls(n: int, driver: fp.FakeDriver, binding: fp.FakeBinding) -> dict[str, float]:
    """Calls per GPU at open, on the first poll, on fast ticks (no TTL due), on a tick where
    only the process TTL is due, and on a tick where every TTL is due."""
    fake = rig(n, driver, binding)
    clock = Clock()
    src = NvmlSource(clock=clock, host=NoHost(), env={})  # type: ignore[arg-type]
    src.open()
    out = {"open": per_gpu(fake, n)}
    fake.reset_counts()
    start = clock.now
    src.poll()
    out["first"] = per_gpu(fake, n)
    fast = []
    step = min(DEFAULT_SLOW_TTL_S, DEFAULT_PROCESS_TTL_S, DEFAULT_PCIE_TTL_S) / 4
    for k in (1, 2, 3):
        clock.now = start + k * step
        fake.reset_counts()
        src.poll()
        fast.append(per_gpu(fake, n))
    out["fast"] = max(fast)
    clock.now = start + DEFAULT_PROCESS_TTL_S
    fake.reset_counts()
    src.poll()
    out["procs"] = per_gpu(fake, n)
    clock.now = start + EVERY_TTL + DEFAULT_PROCESS_TTL_S
    fake.reset_counts()
    src.poll()
    out["slow"] = per_gpu(fake, n)
    # the mean over a minute of 1 s ticks: every TTL at its own pace
    clock.now += 100.0
    src.poll()
    fake.reset_counts()
    for _ in range(MEAN_TICKS):
        clock.now += 1.0
        src.poll()
    out["mean"] = per_gpu(fake, n) / MEAN_TICKS
    src.close()
    return out


def fast_tick_functions(fake: fp.FakeNvml, src: NvmlSource, clock: Clock) -> Counter[str]:
    clock.now += 0.001
    fake.reset_counts()
    src.poll()
    return fake.functions_called(0)


def bare_calls(mod: Any, handle: Any) -> list[tuple[str, Callable[[], Any]]]:
    """The calls one batched fast tick makes for one GPU, without the source around them."""
    fields = [
        mod.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        mod.NVML_FI_DEV_POWER_AVERAGE,
        mod.NVML_FI_DEV_POWER_CURRENT_LIMIT,
    ]
    return [
        ("nvmlDeviceGetMemoryInfo", lambda: mod.nvmlDeviceGetMemoryInfo(handle, mod.nvmlMemory_v2)),
        ("nvmlDeviceGetUtilizationRates", lambda: mod.nvmlDeviceGetUtilizationRates(handle)),
        ("nvmlDeviceGetFieldValues", lambda: mod.nvmlDeviceGetFieldValues(handle, fields)),
        ("nvmlDeviceGetTemperature", lambda: mod.nvmlDeviceGetTemperature(handle, 0)),
        ("nvmlDeviceGetClockInfo", lambda: mod.nvmlDeviceGetClockInfo(handle, 1)),
        (
            "nvmlDeviceGetCurrentClocksEventReasons",
            lambda: mod.nvmlDeviceGetCurrentClocksEventReasons(handle),
        ),
    ]


def best_of(repeats: int, fn: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def time_poll(n: int, iterations: int = 1000) -> tuple[float, float, float]:
    """(poll seconds per GPU, bare-call seconds per GPU, HostSampler.sample seconds)."""
    fake = rig(n, fp.DRIVER_R535, fp.BINDING_13)
    clock = Clock()
    src = NvmlSource(clock=clock, host=NoHost(), env={})  # type: ignore[arg-type]
    src.open()
    src.poll()  # the first poll reads everything; time only fast ticks

    calls = [(name, fn) for i in range(n) for name, fn in bare_calls(fake.module, _h(i))]
    expected = fast_tick_functions(fake, src, clock)
    got = Counter(name for name, _ in bare_calls(fake.module, _h(0)))
    if got != expected:
        raise SystemExit(f"baseline calls {dict(got)} differ from a fast tick's {dict(expected)}")

    def polls() -> None:
        for _ in range(iterations):
            clock.now += 0.001  # never reaches a slow TTL
            src.poll()

    def bare() -> None:
        for _ in range(iterations):
            for _, fn in calls:
                fn()

    poll_s = best_of(7, polls) / iterations / n
    bare_s = best_of(7, bare) / iterations / n
    src.close()
    host = HostSampler()
    host_s = best_of(5, lambda: [host.sample() for _ in range(iterations)]) / iterations
    return poll_s, bare_s, host_s


def _h(index: int) -> fp.c_nvmlDevice_t:
    return fp.c_nvmlDevice_t(index)


def main() -> int:
    over_budget = False
    print("NVML calls per GPU (fake nvidia-ml-py; 4 NVLink links from 2 GPUs up)")
    print(
        f"{'setup':<20} {'GPUs':>4} {'open':>6} {'first':>6} {'fast':>6} {'procs':>6} {'slow':>6}"
        f" {'mean':>6}"
    )
    for label, driver, binding in SETUPS:
        for n in GPU_COUNTS:
            c = count_calls(n, driver, binding)
            flag = "" if c["fast"] <= FAST_CALL_BUDGET else f"  OVER {FAST_CALL_BUDGET}"
            over_budget |= bool(flag)
            print(
                f"{label:<20} {n:>4} {c['open']:>6.1f} {c['first']:>6.1f} "
                f"{c['fast']:>6.1f} {c['procs']:>6.1f} {c['slow']:>6.1f} {c['mean']:>6.1f}{flag}"
            )
    print("open: static reads; first: every field; fast: no TTL due; procs: process TTL due;")
    print("slow: every TTL due (ECC, retired pages, PCIe link and throughput, NVLink, processes)")
    print("mean: per 1 s tick over ten minutes, each TTL at its pace (the figure to compare)")
    print(
        f"fast-tick budget: {FAST_CALL_BUDGET} calls per GPU -> {'FAIL' if over_budget else 'ok'}"
    )
    print()
    print("poll() per GPU on fast ticks vs. the same fake calls in a bare loop (same run)")
    print(f"{'GPUs':>4} {'poll us/GPU':>12} {'bare us/GPU':>12} {'ratio':>7}")
    host_s = 0.0
    for n in GPU_COUNTS:
        poll_s, bare_s, host_s = time_poll(n)
        print(f"{n:>4} {poll_s * 1e6:>12.1f} {bare_s * 1e6:>12.1f} {poll_s / bare_s:>7.2f}")
    print(f"(HostSampler.sample(), once per poll, not in the figures above: {host_s * 1e6:.1f} us)")
    return 1 if over_budget else 0


if __name__ == "__main__":
    sys.exit(main())

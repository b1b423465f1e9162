"""Readings no GPU can give, read as unknown.

A sensor that is broken or not wired answers with a number all the same: NVML with an unset
32-bit value (``0xFFFFFFFF``: 4294967295 °C, 4294967 W), ``amd-smi`` and ``rocm-smi`` with
whatever the firmware left in the field (``1e19``). Such a reading is None here, as a field
the GPU does not report is, so it raises no alert and skews no average. The NVML and AMD
readers apply the same table.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypeVar

from lltui.core.monitor.models import GpuSample

N = TypeVar("N", int, float)

# GpuSample field -> (lowest, highest) any GPU reports; outside it the reading is broken
LIMITS: dict[str, tuple[float, float]] = {
    "temp_c": (-50.0, 200.0),
    "hotspot_temp_c": (-50.0, 200.0),
    "mem_temp_c": (-50.0, 200.0),
    "power_w": (0.0, 5000.0),
    "power_limit_w": (0.0, 5000.0),
    "sm_clock_mhz": (0.0, 10_000.0),
    "mem_clock_mhz": (0.0, 40_000.0),  # NVML's memory clocks: 10501 MHz on an RTX 4090
    "util_gpu": (0.0, 100.0),
    "util_mem": (0.0, 100.0),
    "fan_pct": (0.0, 200.0),  # NVML's percentage "may exceed 100% in certain cases"
    "pcie_width": (1.0, 32.0),
}
# memory used (or free) past this many times the GPU's total is a broken reading
MEMORY_PAST_TOTAL = 2.0


def within(field: str, value: N | None) -> N | None:
    """``value``, or None where it is past what any GPU reports for ``field``."""
    lowest, highest = LIMITS[field]
    return value if value is not None and lowest <= value <= highest else None


def plausible(sample: GpuSample) -> GpuSample:
    """The sample with each reading no GPU can give read as None."""
    broken: dict[str, Any] = {
        field: None
        for field in LIMITS
        if getattr(sample, field) is not None and within(field, getattr(sample, field)) is None
    }
    total = sample.info.memory_total
    readings = (sample.memory_used, sample.memory_free)
    if total and any((m or 0) > MEMORY_PAST_TOTAL * total for m in readings):
        broken.update(memory_used=None, memory_free=None)
    return replace(sample, **broken) if broken else sample

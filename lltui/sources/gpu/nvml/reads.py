"""One GPU's fields on each tick: the fast ones every poll, the slow ones (PCIe link, ECC,
retired pages, NVLink, the enforced limit where the batch cannot carry it) and PCIe
throughput on their TTLs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lltui.core.monitor.throttle import reasons_from_mask
from lltui.core.text import error_text
from lltui.sources.gpu.nvml.calls import MISSING, NvmlCalls, Variant
from lltui.sources.gpu.nvml.codes import (
    CLOCK_MEM,
    CLOCK_SM,
    FEATURE_ENABLED,
    PCIE_UTIL_RX_BYTES,
    PCIE_UTIL_TX_BYTES,
    PSTATE_UNKNOWN,
    TEMPERATURE_GPU,
)
from lltui.sources.gpu.nvml.fields import (
    ECC_FIELDS,
    FAST_FIELDS,
    NVLINK_FIELDS,
    POWER_LIMIT_FIELD,
    SLOW_FIELDS,
    fallback,
    read_fields,
)
from lltui.sources.gpu.nvml.state import FastReading, GpuState, SlowReading

REASON_VARIANTS: tuple[Variant, ...] = (
    ("nvmlDeviceGetCurrentClocksEventReasons", (), {}),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", (), {}),
)
_MISSING_ONLY = frozenset({MISSING})


def _util(u: Any) -> tuple[float, float]:
    return float(u.gpu), float(u.memory)


def _pstate(p: Any) -> int | None:
    return None if int(p) == PSTATE_UNKNOWN else int(p)


def _reasons(mask: Any) -> tuple[str, ...]:
    return reasons_from_mask(int(mask))


def read_fast(calls: NvmlCalls, g: GpuState) -> None:
    """Every poll: 6 NVML calls where the field-value batch works, 7 where it does not.
    A memory total NVML could not give at open is taken from here into ``g.static``."""
    used = free = reserved = None
    memory = calls.versioned(g, "memory", calls.memory_variants)
    if memory is not None:
        try:
            used = int(memory.used)
            free = int(memory.free)
            v2_reserved = getattr(memory, "reserved", None)  # memory info v2 only
            reserved = int(v2_reserved) if v2_reserved is not None else None
            if g.static is not None and (g.static.memory_total or 0) <= 0 < int(memory.total):
                g.static = replace(g.static, memory_total=int(memory.total))
        except Exception as exc:
            g.errors.append(f"memory: unreadable answer ({error_text(exc)})")
    util = calls.call(g, "util", "nvmlDeviceGetUtilizationRates", convert=_util)
    util_gpu, util_mem = util if util is not None else (None, None)
    values, pending = read_fields(calls, g, FAST_FIELDS)
    for f in pending:
        if not f.fallback_on_slow_ttl:
            values[f.key] = fallback(calls, g, f)
    # Keyword arguments run in order: the calls below keep the order NVML is asked in.
    g.fast = FastReading(
        memory_used=used,
        memory_free=free,
        memory_reserved=reserved,
        util_gpu=util_gpu,
        util_mem=util_mem,
        energy_mj=values.get("energy"),
        power_w=values.get("power"),
        power_limit_w=values.get("power_limit"),
        power_limit_read="power_limit" in values,
        temp_c=calls.call(g, "temp", "nvmlDeviceGetTemperature", TEMPERATURE_GPU, convert=float),
        sm_clock_mhz=calls.call(g, "sm_clock", "nvmlDeviceGetClockInfo", CLOCK_SM, convert=int),
        throttle_reasons=calls.versioned(
            g, "throttle", REASON_VARIANTS, older_on=_MISSING_ONLY, convert=_reasons
        ),
    )


def read_links(calls: NvmlCalls, g: GpuState) -> None:
    """On the link TTL: the PCIe link's generation and width, and which NVLink links are up
    (they change when a link trains down or fails, rarely)."""
    slow = g.slow
    slow.pcie_gen = calls.call(g, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", convert=int)
    slow.pcie_width = calls.call(g, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", convert=int)
    if g.nvlink_links:
        slow.nvlink_active = _nvlink_active(calls, g)


def read_slow(calls: NvmlCalls, g: GpuState, now: float) -> None:
    """On the slow TTL: fan, memory clock, P-state, the memory's temperature, the enforced
    limit where the batch cannot carry it, ECC (volatile and aggregate), retired pages and
    NVLink throughput."""
    slow = g.slow
    slow.mem_clock_mhz = calls.call(
        g, "mem_clock", "nvmlDeviceGetClockInfo", CLOCK_MEM, convert=int
    )
    slow.fan_pct = calls.call(g, "fan", "nvmlDeviceGetFanSpeed", convert=float)
    slow.pstate = calls.call(g, "pstate", "nvmlDeviceGetPerformanceState", convert=_pstate)
    if not g.batch_ok or POWER_LIMIT_FIELD.key in g.unbatched:
        slow.power_limit_w = fallback(calls, g, POWER_LIMIT_FIELD)
    fields = SLOW_FIELDS + (NVLINK_FIELDS if g.nvlink_links else ())
    values, pending = read_fields(calls, g, fields)
    for f in pending:
        values[f.key] = fallback(calls, g, f)
    _take_ecc(slow, values)
    slow.mem_temp_c = values.get("mem_temp")
    retired = [v for v in (values.get("retired_sbe"), values.get("retired_dbe")) if v is not None]
    slow.retired_pages = sum(retired) if retired else None
    if g.nvlink_links:
        slow.nvlink_tx_kbs, slow.nvlink_rx_kbs = _nvlink_rates(g, now, values)


def read_ecc(calls: NvmlCalls, g: GpuState) -> None:
    """The volatile and aggregate ECC counts on their own: after an ECC event, between two
    slow ticks."""
    values, pending = read_fields(calls, g, ECC_FIELDS)
    for f in pending:
        values[f.key] = fallback(calls, g, f)
    _take_ecc(g.slow, values)


def _take_ecc(slow: SlowReading, values: dict[str, Any]) -> None:
    slow.ecc_corrected = values.get("ecc_corrected")
    slow.ecc_uncorrected = values.get("ecc_uncorrected")
    slow.ecc_agg_corrected = values.get("ecc_agg_corrected")
    slow.ecc_agg_uncorrected = values.get("ecc_agg_uncorrected")


def _nvlink_active(calls: NvmlCalls, g: GpuState) -> int | None:
    """The NVLink links up, of those present."""
    states = []
    for link in range(g.nvlink_links or 0):
        state = calls.call(g, "nvlink_state", "nvmlDeviceGetNvLinkState", link, convert=int)
        if "nvlink_state" in g.skip:
            break
        states.append(state)
    known = [s for s in states if s is not None]
    return sum(1 for s in known if s == FEATURE_ENABLED) if known else None


def _nvlink_rates(
    g: GpuState, now: float, values: dict[str, Any]
) -> tuple[float | None, float | None]:
    """(tx KiB/s, rx KiB/s); the rates need two readings of the counters."""
    tx, rx = values.get("nvlink_tx"), values.get("nvlink_rx")
    if tx is None or rx is None:
        g.nvlink_prev = None
        return None, None
    prev, g.nvlink_prev = g.nvlink_prev, (now, int(tx), int(rx))
    if prev is None or now <= prev[0]:
        return None, None
    dt = now - prev[0]
    d_tx, d_rx = int(tx) - prev[1], int(rx) - prev[2]
    if d_tx < 0 or d_rx < 0:  # a counter that went back was reset: skip one reading
        return None, None
    return d_tx / dt, d_rx / dt


def read_pcie(calls: NvmlCalls, g: GpuState) -> None:
    """On the PCIe TTL only: each counter samples for about 20 ms."""
    g.slow.pcie_tx_kbs = calls.call(
        g, "pcie_tx", "nvmlDeviceGetPcieThroughput", PCIE_UTIL_TX_BYTES, convert=float
    )
    g.slow.pcie_rx_kbs = calls.call(
        g, "pcie_rx", "nvmlDeviceGetPcieThroughput", PCIE_UTIL_RX_BYTES, convert=float
    )

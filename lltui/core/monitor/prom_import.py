"""Prometheus metrics into lltui's snapshots: lltui's own names, dcgm-exporter's
``DCGM_FI_*`` and all-smi's ``all_smi_*``. Pure: no HTTP.

:func:`rigs_from_series` takes the series a ``/metrics`` page or a Prometheus query returned
(as :class:`Series`) and builds one :class:`RigSample` per host. Series are grouped by host,
then by GPU UUID (the label sets of one GPU's series differ between metrics); a field no
series carries stays ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from lltui.core.monitor.models import (
    GpuProcess,
    GpuSample,
    GpuStatic,
    HostSample,
    RigInfo,
    RigSample,
    gpu_key,
)
from lltui.core.monitor.prom import (
    GPU_INFO,
    GPU_LOST,
    GPU_METRICS,
    HOST_CPU,
    HOST_CPUS,
    HOST_LOAD1,
    HOST_MEM_TOTAL,
    HOST_MEM_USED,
    INFO_BOOL_LABELS,
    INFO_TEXT_LABELS,
    KIB,
    MIB,
    PREFIX,
    PROCESS_MEMORY,
    RIG_INFO,
    STATIC_METRICS,
    THROTTLE,
    THROTTLE_COUNT,
    Series,
)
from lltui.core.text import int_or_none

# Values DCGM sends for a field it has no reading of (its "blank" sentinels): int64 blanks
# start at 0x7ffffffffffffff0, float64 blanks at 140737488355328.0, int32 at 0x7ffffff0.
_DCGM_FP64_BLANK = 140737488355328.0
_DCGM_INT32_BLANK = (0x7FFFFFF0, 0x7FFFFFFF)

# dcgm-exporter: field -> (GpuSample attribute, scale to lltui's unit, integer)
DCGM_FIELDS: dict[str, tuple[str, float, bool]] = {
    "DCGM_FI_DEV_FB_USED": ("memory_used", MIB, True),
    "DCGM_FI_DEV_FB_FREE": ("memory_free", MIB, True),
    "DCGM_FI_DEV_FB_RESERVED": ("memory_reserved", MIB, True),
    "DCGM_FI_DEV_GPU_UTIL": ("util_gpu", 1.0, False),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("util_mem", 1.0, False),
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0, False),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0, False),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": ("power_limit_w", 1.0, False),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_mj", 1.0, True),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0, False),
    "DCGM_FI_DEV_MEMORY_TEMP": ("mem_temp_c", 1.0, False),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0, True),
    "DCGM_FI_DEV_MEM_CLOCK": ("mem_clock_mhz", 1.0, True),
    "DCGM_FI_DEV_FAN_SPEED": ("fan_pct", 1.0, False),
    "DCGM_FI_DEV_PSTATE": ("pstate", 1.0, True),
    "DCGM_FI_DEV_PCIE_LINK_GEN": ("pcie_gen", 1.0, True),
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": ("pcie_width", 1.0, True),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", 1.0, True),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("ecc_corrected", 1.0, True),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_uncorrected", 1.0, True),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": ("ecc_aggregate_corrected", 1.0, True),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": ("ecc_aggregate_uncorrected", 1.0, True),
    # profiling (DCP) rates in bytes per second; lltui keeps KiB/s as NVML gives them
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("pcie_rx_kbs", 1 / KIB, False),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("pcie_tx_kbs", 1 / KIB, False),
    "DCGM_FI_PROF_NVLINK_RX_BYTES": ("nvlink_rx_kbs", 1 / KIB, False),
    "DCGM_FI_PROF_NVLINK_TX_BYTES": ("nvlink_tx_kbs", 1 / KIB, False),
}
# DCP ratios stand in for the NVML-style utilisations when those are absent: the share of
# time the graphics engine was busy, and the share of cycles the memory interface was.
DCGM_FALLBACKS: dict[str, tuple[str, float]] = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("util_gpu", 100.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("util_mem", 100.0),
}
DCGM_STATIC: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_FB_TOTAL": ("memory_total", MIB),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF": ("power_limit_default_w", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX": ("power_limit_max_w", 1.0),
    "DCGM_FI_DEV_MAX_SM_CLOCK": ("max_sm_clock_mhz", 1.0),
    "DCGM_FI_DEV_MAX_MEM_CLOCK": ("max_mem_clock_mhz", 1.0),
}
DCGM_RETIRED = ("DCGM_FI_DEV_RETIRED_SBE", "DCGM_FI_DEV_RETIRED_DBE")
# Counters of KB moved (NVML's KiB): a rate needs two readings, see :class:`CounterRates`.
DCGM_COUNTERS: dict[str, str] = {
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT": "pcie_rx_kbs",
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT": "pcie_tx_kbs",
}

ALLSMI_FIELDS: dict[str, tuple[str, float, bool]] = {
    "all_smi_gpu_utilization": ("util_gpu", 1.0, False),
    "all_smi_gpu_memory_used_bytes": ("memory_used", 1.0, True),
    "all_smi_gpu_temperature_celsius": ("temp_c", 1.0, False),
    "all_smi_gpu_power_consumption_watts": ("power_w", 1.0, False),
    "all_smi_gpu_frequency_mhz": ("sm_clock_mhz", 1.0, True),
    "all_smi_gpu_power_limit_current_watts": ("power_limit_w", 1.0, False),
    "all_smi_gpu_pcie_gen_current": ("pcie_gen", 1.0, True),
    "all_smi_gpu_pcie_width_current": ("pcie_width", 1.0, True),
    "all_smi_gpu_performance_state": ("pstate", 1.0, True),
    "all_smi_gpu_pstate": ("pstate", 1.0, True),
}
ALLSMI_HOST: dict[str, tuple[str, float]] = {
    "all_smi_cpu_utilization": ("cpu_pct", 1.0),
    "all_smi_memory_total_bytes": ("mem_total", 1.0),
    "all_smi_memory_used_bytes": ("mem_used", 1.0),
    "all_smi_cpu_core_count": ("cpu_count", 1.0),
}
# labels pid, name, user, device_uuid, gpu_index (device_id before), command; no host
ALLSMI_PROCESS = "all_smi_process_memory_used_bytes"
ALLSMI_STATIC: dict[str, tuple[str, float]] = {
    "all_smi_gpu_memory_total_bytes": ("memory_total", 1.0),
    "all_smi_gpu_power_limit_max_watts": ("power_limit_max_w", 1.0),
    "all_smi_gpu_clock_graphics_max_mhz": ("max_sm_clock_mhz", 1.0),
    "all_smi_gpu_clock_memory_max_mhz": ("max_mem_clock_mhz", 1.0),
}

_LLTUI_BY_NAME = {m.name: m for m in GPU_METRICS}
_LLTUI_STATIC_BY_NAME = {m.name: m for m in STATIC_METRICS}
_INT_STATIC = {"memory_total", "max_sm_clock_mhz", "max_mem_clock_mhz"}

# Labels naming the host, by exporter; Prometheus renames a scraped ``instance`` label to
# ``exported_instance`` and sets ``instance`` to the target's address.
_HOST_KEYS = {
    "lltui": ("host",),
    "dcgm": ("Hostname", "hostname"),
    "allsmi": ("exported_instance", "instance"),
}


# the label that carries a GPU's name, per exporter
_NAME_LABEL = {"lltui": "name", "dcgm": "modelName", "allsmi": "gpu"}


def exporter_of(name: str) -> str | None:
    """Which exporter a metric name comes from: ``lltui``, ``dcgm``, ``allsmi`` or None."""
    if name.startswith(PREFIX):
        return "lltui"
    if name.startswith("DCGM_FI_"):
        return "dcgm"
    if name.startswith("all_smi_"):
        return "allsmi"
    return None


@dataclass(slots=True)
class _Gpu:
    index: int | None = None
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    static: dict[str, float] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    fallbacks: dict[str, float] = field(default_factory=dict)
    retired: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)  # attribute -> counter reading
    lost: bool = False
    throttle: list[str] | None = None  # None: no series says
    processes: list[tuple[int, str | None, float, str | None]] = field(default_factory=list)
    models: dict[int, str] = field(default_factory=dict)  # pid -> the model it serves
    cuda_index: int | None = None
    compute_capability: tuple[int, int] | None = None
    info_text: dict[str, str] = field(default_factory=dict)
    info_bool: dict[str, bool] = field(default_factory=dict)


@dataclass(slots=True)
class _Host:
    gpus: dict[str, _Gpu] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)
    driver_version: str | None = None
    cuda_version: str | None = None
    rocm_version: str | None = None
    simulated: bool = False
    exporters: set[str] = field(default_factory=set)
    error: str | None = None


def _host_of(s: Series, exporter: str, fallback: str) -> str:
    return s.label(*_HOST_KEYS[exporter]) or s.label("instance") or fallback


def _gpu_key(s: Series, exporter: str) -> tuple[str | None, int | None]:
    if exporter == "lltui":
        return s.label("uuid"), int_or_none(s.label("gpu"))
    if exporter == "dcgm":
        return s.label("UUID", "uuid"), int_or_none(s.label("gpu"))
    return s.label("gpu_uuid", "uuid"), int_or_none(s.label("gpu_index", "index"))


def _dcgm_blank(name: str, value: float) -> bool:
    if value >= _DCGM_FP64_BLANK:
        return True
    lo, hi = _DCGM_INT32_BLANK
    return name != "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" and lo <= value <= hi


def rigs_from_series(
    series: Iterable[Series],
    *,
    source: str,
    default_host: str,
    seq: int,
    t: float,
    wall: float,
    rates: CounterRates | None = None,
    down: Mapping[str, str] | None = None,
) -> dict[str, RigSample]:
    """One RigSample per host the series name, in host order. Series of names lltui does not
    know are skipped, and values that are not finite read as unknown; a GPU with neither
    UUID nor index label cannot be told apart from the others and is skipped. ``rates``
    turns counters (dcgm-exporter's PCIe KB) into rates from one call to the next; ``down`` maps a
    Prometheus target (its ``instance`` label) to why its last scrape failed, so that the
    hosts whose series came from it carry that error."""
    hosts: dict[str, _Host] = {}
    # all-smi labels its process series with the GPU's UUID but not the host: matched later
    allsmi_procs: dict[str, list[tuple[int, str | None, str | None, float]]] = {}
    for s in series:
        exporter = exporter_of(s.name)
        if exporter is None:
            continue
        # a value that is not finite is no reading, but its labels still name a GPU (one
        # whose every series is NaN is listed, its readings unknown)
        finite = math.isfinite(s.value)
        if s.name == ALLSMI_PROCESS:
            if not finite:
                continue
            pid, uuid = int_or_none(s.label("pid")), s.label("device_uuid")
            if pid is not None and uuid is not None:
                entry = (pid, s.label("name"), s.label("user"), s.value)
                allsmi_procs.setdefault(uuid, []).append(entry)
            continue
        if exporter != "lltui" and s.name.endswith("_total"):
            # prometheus_client's parser names a counter's sample NAME_total; Prometheus
            # keeps the name as exposed, which is how these exporters name them
            s = replace(s, name=s.name[: -len("_total")])
        host_name = _host_of(s, exporter, default_host)
        h = hosts.setdefault(host_name, _Host())
        h.exporters.add(exporter)
        target = s.label("instance")
        if down and target is not None and target in down and h.error is None:
            h.error = down[target]
        if finite and _take_host_series(h, s, exporter):
            continue
        uuid, index = _gpu_key(s, exporter)
        if uuid is None and index is None:
            continue
        key = uuid if uuid is not None else f"index:{index}"
        g = h.gpus.get(key)
        if g is None:
            g = h.gpus[key] = _Gpu(index=index, uuid=uuid)
        if g.index is None:
            g.index = index
        if finite:
            _take_gpu_series(h, g, s, exporter)
        else:
            g.name = g.name or s.label(_NAME_LABEL[exporter])
    out: dict[str, RigSample] = {}
    for host_name in sorted(hosts):
        h = hosts[host_name]
        if not h.gpus and not h.host:
            continue
        for g in h.gpus.values():
            for pid, name, user, mem in allsmi_procs.get(g.uuid or "", ()):
                g.processes.append((pid, name, mem, user))
        if rates is not None:
            for g in h.gpus.values():
                for attr, reading in g.counters.items():
                    rate = rates.rate((host_name, g.uuid or str(g.index), attr), t, reading)
                    if rate is not None:
                        g.values.setdefault(attr, rate)
        out[host_name] = _rig(host_name, h, source=source, seq=seq, t=t, wall=wall)
    return out


class CounterRates:
    """Rates of counters between successive readings (the one piece of state a reader of
    counters needs). ``None`` on the first reading, after a reset, or with no time between."""

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str, str], tuple[float, float]] = {}

    def rate(self, key: tuple[str, str, str], t: float, value: float) -> float | None:
        prev = self._prev.get(key)
        self._prev[key] = (t, value)
        if prev is None or t <= prev[0] or value < prev[1]:
            return None
        return (value - prev[1]) / (t - prev[0])


def _take_host_series(h: _Host, s: Series, exporter: str) -> bool:
    """Rig-level series; True when ``s`` was one."""
    n = s.name
    if exporter == "lltui":
        if n == RIG_INFO:
            h.driver_version = s.label("driver_version") or h.driver_version
            h.cuda_version = s.label("cuda_version") or h.cuda_version
            h.rocm_version = s.label("rocm_version") or h.rocm_version
            h.simulated = s.label("simulated") == "true"
            return True
        table = {
            HOST_CPU: ("cpu_pct", 100.0),
            HOST_MEM_TOTAL: ("mem_total", 1.0),
            HOST_MEM_USED: ("mem_used", 1.0),
            HOST_LOAD1: ("load_1m", 1.0),
            HOST_CPUS: ("cpu_count", 1.0),
        }
        if n in table:
            attr, scale = table[n]
            h.host[attr] = s.value * scale
            return True
        return n.startswith("lltui_llama_") or n.startswith("lltui_exporter_")
    if exporter == "allsmi":
        if n in ALLSMI_HOST:
            attr, scale = ALLSMI_HOST[n]
            h.host[attr] = s.value * scale
            return True
        return not n.startswith("all_smi_gpu_")
    return False


def _take_gpu_series(h: _Host, g: _Gpu, s: Series, exporter: str) -> None:
    n, v = s.name, s.value
    if exporter == "lltui":
        g.name = g.name or s.label("name")
        if n in _LLTUI_BY_NAME:
            m = _LLTUI_BY_NAME[n]
            g.values[m.attr] = v / m.scale
        elif n in _LLTUI_STATIC_BY_NAME:
            m = _LLTUI_STATIC_BY_NAME[n]
            g.static[m.attr] = v / m.scale
        elif n == GPU_INFO:
            g.pci_bus_id = s.label("pci_bus_id") or g.pci_bus_id
            g.cuda_index = int_or_none(s.label("cuda_index"))
            cc = (s.label("compute_capability") or "").split(".")
            if len(cc) == 2 and all(p.isdigit() for p in cc):
                g.compute_capability = (int(cc[0]), int(cc[1]))
            for key in INFO_TEXT_LABELS:
                if s.label(key):
                    g.info_text[key] = s.label(key) or ""
            for key in INFO_BOOL_LABELS:
                if s.label(key) in ("true", "false"):
                    g.info_bool[key] = s.label(key) == "true"
        elif n == GPU_LOST:
            g.lost = v >= 1
        elif n in (THROTTLE, THROTTLE_COUNT):
            g.throttle = g.throttle if g.throttle is not None else []
            reason = s.label("reason")
            if n == THROTTLE and reason and v >= 1 and reason not in g.throttle:
                g.throttle.append(reason)
        elif n == PROCESS_MEMORY:
            pid = int_or_none(s.label("pid"))
            if pid is not None:
                g.processes.append((pid, s.label("command"), v, None))
                if model := s.label("model"):
                    g.models[pid] = model
        return
    if exporter == "dcgm":
        g.name = g.name or s.label("modelName")
        g.pci_bus_id = g.pci_bus_id or s.label("pci_bus_id")
        h.driver_version = h.driver_version or s.label("DCGM_FI_DRIVER_VERSION")
        if _dcgm_blank(n, v):
            return
        if n == "DCGM_FI_DEV_XID_ERRORS" and v == 0:
            return  # 0: no XID error seen
        if n == "DCGM_FI_DEV_MEMORY_TEMP" and v == 0:
            return  # 0: a GPU without a memory sensor (no running GPU's memory is at 0 °C)
        if n in DCGM_FIELDS:
            attr, scale, _integer = DCGM_FIELDS[n]
            g.values.setdefault(attr, v * scale)
        elif n in DCGM_FALLBACKS:
            attr, scale = DCGM_FALLBACKS[n]
            g.fallbacks.setdefault(attr, v * scale)
        elif n in DCGM_STATIC:
            attr, scale = DCGM_STATIC[n]
            g.static.setdefault(attr, v * scale)
        elif n in DCGM_RETIRED:
            g.retired.setdefault(n, v)
        elif n in DCGM_COUNTERS:
            g.counters.setdefault(DCGM_COUNTERS[n], v)
        return
    # all-smi: its ``gpu`` label is the GPU's name
    g.name = g.name or s.label("gpu", "gpu_name")
    if n == "all_smi_gpu_info":
        h.driver_version = h.driver_version or s.label("driver_version")
        h.cuda_version = h.cuda_version or s.label("cuda_version")
        g.pci_bus_id = g.pci_bus_id or s.label("pci_address")
    elif n in ALLSMI_FIELDS:
        attr, scale, _integer = ALLSMI_FIELDS[n]
        g.values.setdefault(attr, v * scale)
    elif n in ALLSMI_STATIC:
        attr, scale = ALLSMI_STATIC[n]
        g.static.setdefault(attr, v * scale)


_INT_FIELDS = {m.attr for m in GPU_METRICS if m.integer} | {
    attr for attr, _s, integer in (*DCGM_FIELDS.values(), *ALLSMI_FIELDS.values()) if integer
}


def _unscaled(v: float) -> float:
    """A reading brought back from a page's unit without the float noise of the scaling
    (0.28 read as percent is 28.000000000000004): 12 significant digits."""
    return float(f"{v:.12g}")


def _gpu_sample(g: _Gpu, position: int) -> GpuSample:
    values: dict[str, float | int] = {}
    for attr, v in {**g.fallbacks, **g.values}.items():
        values[attr] = round(v) if attr in _INT_FIELDS else _unscaled(v)
    if g.retired:
        values["retired_pages"] = round(sum(g.retired.values()))
    total_f = g.static.get("memory_total")
    if total_f is None and "memory_used" in values and "memory_free" in values:
        # what NVML's memory info reports as total: used + free (+ reserved, v2)
        total_f = float(
            values["memory_used"] + values["memory_free"] + values.get("memory_reserved", 0)
        )
    static_kw: dict[str, float | int | None] = {}
    for attr in ("power_limit_default_w", "power_limit_max_w", "max_sm_clock_mhz",
                 "max_mem_clock_mhz"):  # fmt: skip
        sv = g.static.get(attr)
        if sv is not None:
            static_kw[attr] = round(sv) if attr in _INT_STATIC else sv
    index = g.index if g.index is not None else position
    info = GpuStatic(
        index=index,
        uuid=gpu_key(g.uuid, index),
        name=g.name or "",
        pci_bus_id=g.pci_bus_id or "",
        memory_total=round(total_f) if total_f is not None else None,
        cuda_index=g.cuda_index,
        compute_capability=g.compute_capability,
        **g.info_text,  # type: ignore[arg-type]
        **g.info_bool,  # type: ignore[arg-type]
        **static_kw,  # type: ignore[arg-type]
    )
    processes = tuple(
        GpuProcess(
            pid=pid,
            gpu_index=index,
            used_memory=round(mem),
            name=cmd or None,
            user=user,
            model=g.models.get(pid),
        )
        for pid, cmd, mem, user in g.processes
    )
    sample = GpuSample(info=info, lost=g.lost, processes=processes)
    if g.throttle is not None:
        sample = replace(sample, throttle_reasons=tuple(g.throttle))
    return replace(sample, **values)  # type: ignore[arg-type]


def _rig(host_name: str, h: _Host, *, source: str, seq: int, t: float, wall: float) -> RigSample:
    gpus = sorted(
        h.gpus.values(),
        key=lambda g: (g.index is None, g.index if g.index is not None else 0, g.uuid or ""),
    )
    samples = tuple(_gpu_sample(g, i) for i, g in enumerate(gpus))
    info = RigInfo(
        source=source,
        simulated=h.simulated,
        simulated_reason="the exporter serves a simulated rig" if h.simulated else None,
        driver_version=h.driver_version,
        cuda_version=h.cuda_version,
        rocm_version=h.rocm_version,
        hostname=host_name,
        gpus=tuple(g.info for g in samples),
    )
    host_kw: dict[str, float | int] = {}
    for attr, v in h.host.items():
        host_kw[attr] = round(v) if attr in ("mem_total", "mem_used", "cpu_count") else _unscaled(v)
    host = HostSample(hostname=host_name, **host_kw)  # type: ignore[arg-type]
    return RigSample(seq=seq, t=t, wall=wall, info=info, gpus=samples, host=host, error=h.error)


def series_from_labels(name: str, labels: Mapping[str, str], value: float) -> Series:
    """A Series from a name, a label mapping and a value (labels kept in sorted order)."""
    return Series(name, tuple(sorted(labels.items())), value)


# What a Prometheus query asks for: lltui's GPU, host and rig series, and exactly the
# dcgm-exporter and all-smi names mapped above (not their per-link, per-core, ... series).
QUERY_NAMES: tuple[str, ...] = tuple(
    sorted(
        {
            *DCGM_FIELDS,
            *DCGM_FALLBACKS,
            *DCGM_STATIC,
            *DCGM_RETIRED,
            *DCGM_COUNTERS,
            *ALLSMI_FIELDS,
            *ALLSMI_STATIC,
            *ALLSMI_HOST,
            ALLSMI_PROCESS,
            "all_smi_gpu_info",
        }
    )
)
QUERY = '{__name__=~"lltui_gpu_.+|lltui_host_.+|lltui_rig_info|' + "|".join(QUERY_NAMES) + '"}'
# Whether Prometheus's last scrape of each target worked (0: it failed).
UP_QUERY = "up"

"""Prometheus metrics in and out of lltui's snapshots. Pure: no HTTP, no exposition text.

Out: :func:`rig_families` and :func:`llama_families` turn a :class:`RigSample` and what is
known of llama-servers into :class:`Family` records (Prometheus names and base units: bytes,
watts, celsius, hertz, ratios, joules); the exporter turns those into exposition text.

In: :func:`rigs_from_series` takes the series a ``/metrics`` page or a Prometheus query
returned (as :class:`Series`) and builds one :class:`RigSample` per host. It reads lltui's
own names, dcgm-exporter's ``DCGM_FI_*`` and all-smi's ``all_smi_*``. Series are grouped by
host, then by GPU UUID (the label sets of one GPU's series differ between metrics); a field
no series carries stays ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from lltui.core.llama.metrics import LlamaMetrics, ServerProps, SlotState, Throughput
from lltui.core.llamalog.models import DevicePlacement
from lltui.core.monitor.alerts import Alert
from lltui.core.monitor.models import (
    ContainerRef,
    GpuProcess,
    GpuSample,
    GpuStatic,
    HostSample,
    RigInfo,
    RigSample,
)

PREFIX = "lltui_"
MIB = 1024 * 1024
KIB = 1024
DEFAULT_MAX_PROCESSES = 16  # per GPU: the largest by memory, to bound label cardinality
COMMAND_LABEL_MAX = 64

# --- the records --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family: ``kind`` is ``gauge`` or ``counter`` (a counter's name ends in
    ``_total``); ``unit`` the base unit the name ends with, or ``""``."""

    name: str
    kind: str
    help: str
    unit: str = ""
    samples: tuple[tuple[tuple[tuple[str, str], ...], float], ...] = ()


@dataclass(frozen=True, slots=True)
class Series:
    """One sample of one series, as read from a page or a query: its name and labels."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, *keys: str) -> str | None:
        """The first of ``keys`` this series has with a non-empty value."""
        for key in keys:
            for k, v in self.labels:
                if k == key and v != "":
                    return v
        return None


@dataclass(frozen=True, slots=True)
class LlamaExport:
    """What is known of one llama-server at one poll, for the exporter."""

    server: str  # the URL without credentials
    up: bool
    state: str = "down"
    metrics: LlamaMetrics | None = None
    slots: tuple[SlotState, ...] | None = None
    props: ServerProps | None = None
    throughput: Throughput | None = None
    placement: tuple[DevicePlacement, ...] = ()
    kv: tuple[KvGauge, ...] = ()  # how full each device's KV cache is (from /slots)
    kv_tokens: int | None = None  # the tokens the slots hold


@dataclass(frozen=True, slots=True)
class KvGauge:
    """One device's KV cache as the exporter serves it."""

    device: str
    used_bytes: int
    capacity_bytes: int
    seconds_to_full: float | None = None


# --- lltui's names: one table for the exporter and the reader ------------------------------


@dataclass(frozen=True, slots=True)
class GpuMetric:
    name: str
    attr: str  # GpuSample attribute
    kind: str
    help: str
    unit: str
    scale: float = 1.0  # exported value = attribute * scale
    integer: bool = False


GPU_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("lltui_gpu_memory_used_bytes", "memory_used", "gauge", "GPU memory in use.",
              "bytes", integer=True),
    GpuMetric("lltui_gpu_memory_free_bytes", "memory_free", "gauge", "GPU memory free.",
              "bytes", integer=True),
    GpuMetric("lltui_gpu_memory_reserved_bytes", "memory_reserved", "gauge",
              "GPU memory the driver reserves.", "bytes", integer=True),
    GpuMetric("lltui_gpu_utilization_ratio", "util_gpu", "gauge",
              "Share of the last sample period a kernel ran.", "ratio", 0.01),
    GpuMetric("lltui_gpu_memory_utilization_ratio", "util_mem", "gauge",
              "Share of the last sample period memory was read or written.", "ratio", 0.01),
    GpuMetric("lltui_gpu_power_watts", "power_w", "gauge", "Power draw.", "watts"),
    GpuMetric("lltui_gpu_power_limit_watts", "power_limit_w", "gauge",
              "Enforced power limit.", "watts"),
    GpuMetric("lltui_gpu_energy_joules_total", "energy_mj", "counter",
              "Energy used since the driver loaded.", "joules", 0.001, integer=True),
    GpuMetric("lltui_gpu_temperature_celsius", "temp_c", "gauge", "GPU temperature.",
              "celsius"),
    GpuMetric("lltui_gpu_memory_temperature_celsius", "mem_temp_c", "gauge",
              "Memory (HBM) temperature.", "celsius"),
    GpuMetric("lltui_gpu_sm_clock_hertz", "sm_clock_mhz", "gauge", "SM clock.", "hertz",
              1e6, integer=True),
    GpuMetric("lltui_gpu_memory_clock_hertz", "mem_clock_mhz", "gauge", "Memory clock.",
              "hertz", 1e6, integer=True),
    GpuMetric("lltui_gpu_fan_speed_ratio", "fan_pct", "gauge", "Fan speed, of its maximum.",
              "ratio", 0.01),
    GpuMetric("lltui_gpu_performance_state", "pstate", "gauge",
              "Performance state (0 is P0, the fastest).", "", integer=True),
    GpuMetric("lltui_gpu_pcie_link_generation", "pcie_gen", "gauge",
              "PCIe link generation now.", "", integer=True),
    GpuMetric("lltui_gpu_pcie_link_width", "pcie_width", "gauge", "PCIe link width now.", "",
              integer=True),
    GpuMetric("lltui_gpu_pcie_receive_bytes_per_second", "pcie_rx_kbs", "gauge",
              "PCIe receive throughput.", "", KIB),
    GpuMetric("lltui_gpu_pcie_transmit_bytes_per_second", "pcie_tx_kbs", "gauge",
              "PCIe transmit throughput.", "", KIB),
    GpuMetric("lltui_gpu_nvlink_active_links", "nvlink_active", "gauge", "NVLink links up.",
              "", integer=True),
    GpuMetric("lltui_gpu_nvlink_receive_bytes_per_second", "nvlink_rx_kbs", "gauge",
              "NVLink receive throughput.", "", KIB),
    GpuMetric("lltui_gpu_nvlink_transmit_bytes_per_second", "nvlink_tx_kbs", "gauge",
              "NVLink transmit throughput.", "", KIB),
    GpuMetric("lltui_gpu_ecc_corrected_errors_total", "ecc_corrected", "counter",
              "Corrected ECC errors since the driver loaded.", "", integer=True),
    GpuMetric("lltui_gpu_ecc_uncorrected_errors_total", "ecc_uncorrected", "counter",
              "Uncorrected ECC errors since the driver loaded.", "", integer=True),
    GpuMetric("lltui_gpu_ecc_aggregate_corrected_errors_total", "ecc_aggregate_corrected",
              "counter", "Corrected ECC errors over the GPU's life.", "", integer=True),
    GpuMetric("lltui_gpu_ecc_aggregate_uncorrected_errors_total",
              "ecc_aggregate_uncorrected", "counter",
              "Uncorrected ECC errors over the GPU's life.", "", integer=True),
    GpuMetric("lltui_gpu_retired_pages", "retired_pages", "gauge",
              "Memory pages retired.", "", integer=True),
    GpuMetric("lltui_gpu_last_xid", "xid", "gauge", "The last XID error seen.", "",
              integer=True),
    GpuMetric("lltui_gpu_gtt_used_bytes", "gtt_used", "gauge",
              "Host memory the GPU has mapped (AMD GTT).", "bytes", integer=True),
    GpuMetric("lltui_gpu_gtt_total_bytes", "gtt_total", "gauge",
              "Host memory the GPU may map (AMD GTT).", "bytes", integer=True),
    GpuMetric("lltui_gpu_hotspot_temperature_celsius", "hotspot_temp_c", "gauge",
              "Hottest die sensor (AMD junction).", "celsius"),
    GpuMetric("lltui_gpu_pcie_bytes_per_second", "pcie_bw_kbs", "gauge",
              "PCIe throughput both ways, where only the sum is known.", "", KIB),
    GpuMetric("lltui_gpu_xgmi_active_links", "xgmi_active", "gauge",
              "AMD Infinity Fabric (XGMI) links up.", "", integer=True),
    GpuMetric("lltui_gpu_xgmi_receive_bytes_per_second", "xgmi_rx_kbs", "gauge",
              "XGMI receive throughput.", "", KIB),
    GpuMetric("lltui_gpu_xgmi_transmit_bytes_per_second", "xgmi_tx_kbs", "gauge",
              "XGMI transmit throughput.", "", KIB),
    GpuMetric("lltui_gpu_ecc_deferred_errors_total", "ecc_deferred", "counter",
              "Memory errors deferred (poisoned) rather than corrected (AMD RAS).", "",
              integer=True),
)  # fmt: skip

# Facts read once (GpuStatic), exported as gauges all the same.
STATIC_METRICS: tuple[GpuMetric, ...] = (
    GpuMetric("lltui_gpu_memory_total_bytes", "memory_total", "gauge", "GPU memory in all.",
              "bytes", integer=True),
    GpuMetric("lltui_gpu_power_limit_default_watts", "power_limit_default_w", "gauge",
              "Default power limit.", "watts"),
    GpuMetric("lltui_gpu_power_limit_max_watts", "power_limit_max_w", "gauge",
              "Highest power limit that can be set.", "watts"),
    GpuMetric("lltui_gpu_sm_clock_max_hertz", "max_sm_clock_mhz", "gauge",
              "Highest SM clock.", "hertz", 1e6, integer=True),
    GpuMetric("lltui_gpu_memory_clock_max_hertz", "max_mem_clock_mhz", "gauge",
              "Highest memory clock.", "hertz", 1e6, integer=True),
)  # fmt: skip

GPU_INFO = "lltui_gpu_info"
# GpuStatic text facts that ride on the info series as labels (absent where None)
INFO_TEXT_LABELS = ("vendor", "gfx_target", "compute_partition", "memory_partition")
GPU_LOST = "lltui_gpu_lost"
THROTTLE = "lltui_gpu_throttle_reason_active"
XID_ERRORS = "lltui_gpu_xid_errors_total"
PROCESS_MEMORY = "lltui_gpu_process_memory_bytes"
RIG_INFO = "lltui_rig_info"
HOST_CPU = "lltui_host_cpu_utilization_ratio"
HOST_MEM_TOTAL = "lltui_host_memory_total_bytes"
HOST_MEM_USED = "lltui_host_memory_used_bytes"
HOST_LOAD1 = "lltui_host_load1"
HOST_CPUS = "lltui_host_cpus"

# --- out -------------------------------------------------------------------------------------


def _labels(**kv: str | None) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in kv.items() if v is not None)


def _finite(value: float | int | None) -> bool:
    return value is not None and not isinstance(value, bool) and math.isfinite(value)


def clean_command(name: str | None) -> str:
    """A process name fit for a label: the program's name only (never its arguments, which
    may hold keys), printable, and short."""
    if not name:
        return ""
    first = name.strip().split()[0] if name.strip() else ""
    base = first.rsplit("/", 1)[-1]
    text = "".join(c for c in base if c.isprintable())
    return text[:COMMAND_LABEL_MAX]


def clean_label(text: str) -> str:
    """Any text fit for a label value: printable and short."""
    return "".join(c for c in text if c.isprintable())[:COMMAND_LABEL_MAX]


def rig_families(
    sample: RigSample,
    *,
    host: str,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    xid_counts: Mapping[str, int] | None = None,
) -> tuple[Family, ...]:
    """Every field of ``sample`` lltui knows, as families; a field that is ``None`` has no
    sample. GPUs carry ``gpu`` (NVML index), ``uuid``, ``name`` and ``host`` labels, and
    ``simulated="true"`` on a simulated rig.
    ``xid_counts``: XID errors seen per GPU UUID since the caller began counting."""
    info = sample.info
    out: list[Family] = []
    out.append(
        Family(
            RIG_INFO,
            "gauge",
            "The source lltui samples; always 1.",
            samples=(
                (
                    _labels(
                        host=host,
                        source=info.source,
                        simulated="true" if info.simulated else "false",
                        driver_version=info.driver_version,
                        cuda_version=info.cuda_version,
                    ),
                    1.0,
                ),
            ),
        )
    )
    # a simulated rig's GPUs say so on every series, so a Prometheus that scrapes one
    # cannot take its numbers for a real GPU's
    fake = "true" if info.simulated else None
    gpu_labels = {
        g.info.uuid: _labels(
            gpu=str(g.index), uuid=g.info.uuid, name=g.info.name, host=host, simulated=fake
        )
        for g in sample.gpus
    }
    info_samples = []
    for g in sample.gpus:
        s = g.info
        cc = (
            f"{s.compute_capability[0]}.{s.compute_capability[1]}" if s.compute_capability else None
        )
        extra = _labels(
            pci_bus_id=s.pci_bus_id or None,
            cuda_index=str(s.cuda_index) if s.cuda_index is not None else None,
            compute_capability=cc,
            **{k: getattr(s, k) for k in INFO_TEXT_LABELS},
        )
        info_samples.append((gpu_labels[s.uuid] + extra, 1.0))
    out.append(Family(GPU_INFO, "gauge", "GPU identity; always 1.", samples=tuple(info_samples)))
    out.append(
        Family(
            GPU_LOST,
            "gauge",
            "1 when the GPU fell off the bus or stopped answering.",
            samples=tuple((gpu_labels[g.info.uuid], 1.0 if g.lost else 0.0) for g in sample.gpus),
        )
    )
    for m in STATIC_METRICS:
        rows = []
        for g in sample.gpus:
            v = getattr(g.info, m.attr)
            if _finite(v):
                rows.append((gpu_labels[g.info.uuid], float(v) * m.scale))
        out.append(Family(m.name, m.kind, m.help, m.unit, tuple(rows)))
    for m in GPU_METRICS:
        rows = []
        for g in sample.gpus:
            v = getattr(g, m.attr)
            if _finite(v):
                rows.append((gpu_labels[g.info.uuid], float(v) * m.scale))
        out.append(Family(m.name, m.kind, m.help, m.unit, tuple(rows)))
    if xid_counts is not None:
        rows = [
            (gpu_labels[g.info.uuid], float(xid_counts.get(g.info.uuid, 0))) for g in sample.gpus
        ]
        out.append(
            Family(XID_ERRORS, "counter", "XID errors the driver reported since the exporter "
                   "started.", "", tuple(rows))
        )  # fmt: skip
    throttle = []
    for g in sample.gpus:
        for reason in g.throttle_reasons or ():
            throttle.append((gpu_labels[g.info.uuid] + (("reason", reason),), 1.0))
    out.append(
        Family(THROTTLE, "gauge", "A reason the GPU's clocks are held down now; 1.", "",
               tuple(throttle))
    )  # fmt: skip
    procs = []
    for g in sample.gpus:
        known = [p for p in g.processes if p.used_memory is not None]
        known.sort(key=lambda p: -(p.used_memory or 0))
        for p in known[: max(0, max_processes)]:
            labels = gpu_labels[g.info.uuid] + (
                ("pid", str(p.pid)),
                ("command", clean_command(p.name or p.command)),
            )
            if (model := p.served) is not None:  # which model holds this memory
                labels += (("model", clean_label(model)),)
            labels += container_labels(p.container)
            procs.append((labels, float(p.used_memory or 0)))
    out.append(
        Family(PROCESS_MEMORY, "gauge",
               f"GPU memory a process holds (the {max_processes} largest per GPU).", "bytes",
               tuple(procs))
    )  # fmt: skip
    out.extend(mig_families(sample, gpu_labels))
    h = sample.host
    hl = (("host", host),)
    for name, value, scale, unit, text in (
        (HOST_CPU, h.cpu_pct, 0.01, "ratio", "Host CPU busy share."),
        (HOST_MEM_TOTAL, h.mem_total, 1.0, "bytes", "Host memory in all."),
        (HOST_MEM_USED, h.mem_used, 1.0, "bytes", "Host memory in use."),
        (HOST_LOAD1, h.load_1m, 1.0, "", "Host load average over one minute."),
        (HOST_CPUS, h.cpu_count, 1.0, "", "Host logical CPUs."),
    ):
        rows_h = ((hl, float(value) * scale),) if value is not None and _finite(value) else ()
        out.append(Family(name, "gauge", text, unit, rows_h))
    return tuple(out)


MIG_MEMORY_USED = "lltui_mig_memory_used_bytes"
MIG_MEMORY_TOTAL = "lltui_mig_memory_total_bytes"
MIG_INFO = "lltui_mig_info"
VGPU_MEMORY_USED = "lltui_vgpu_memory_used_bytes"


def container_labels(c: ContainerRef | None) -> tuple[tuple[str, str], ...]:
    """A process's container as labels: ``container`` (its short label, as the monitor shows
    it), ``container_runtime``, and ``pod`` and ``namespace`` for Kubernetes."""
    if c is None:
        return ()
    return _labels(
        container=c.label[:COMMAND_LABEL_MAX],
        container_runtime=c.runtime,
        pod=c.pod,
        namespace=c.namespace,
    )


def mig_families(
    sample: RigSample, gpu_labels: Mapping[str, tuple[tuple[str, str], ...]]
) -> tuple[Family, ...]:
    """MIG instances as devices under their GPU: the GPU's labels plus ``mig_uuid``,
    ``profile``, ``gpu_instance`` and ``compute_instance``."""
    info, used, total = [], [], []
    for g in sample.gpus:
        for m in g.mig:
            labels = gpu_labels[g.info.uuid] + (
                ("mig_uuid", m.uuid),
                ("profile", m.profile),
                ("gpu_instance", str(m.gpu_instance_id)),
                ("compute_instance", str(m.compute_instance_id)),
            )
            info.append((labels, 1.0))
            total.append((labels, float(m.memory_total)))
            if m.memory_used is not None:
                used.append((labels, float(m.memory_used)))
    vgpu_used = []
    for g in sample.gpus:
        for v in g.vgpus:
            if v.memory_used is not None:
                labels = gpu_labels[g.info.uuid] + _labels(
                    vgpu=str(v.instance), vgpu_type=v.type_name, vm=v.vm
                )
                vgpu_used.append((labels, float(v.memory_used)))
    return (
        Family(
            VGPU_MEMORY_USED,
            "gauge",
            "Framebuffer a vGPU (served to a VM) uses.",
            "bytes",
            tuple(vgpu_used),
        ),
        Family(MIG_INFO, "gauge", "A MIG instance of a GPU; always 1.", "", tuple(info)),
        Family(MIG_MEMORY_TOTAL, "gauge", "Memory of a MIG instance.", "bytes", tuple(total)),
        Family(MIG_MEMORY_USED, "gauge", "Memory in use in a MIG instance.", "bytes", tuple(used)),
    )


ALERT_ACTIVE = "lltui_alert_active"
ALERT_SINCE = "lltui_alert_since_timestamp_seconds"


def alert_families(alerts: Sequence[Alert], *, host: str) -> tuple[Family, ...]:
    """The alerts raised now: ``lltui_alert_active`` (1) and when each was raised, labelled
    by ``kind``, ``severity`` and what it is about (``gpu`` and ``uuid``, ``server``, or the
    fleet ``host`` it names)."""
    active, since = [], []
    for a in alerts:
        labels = _labels(
            host=a.host or host,
            kind=a.kind,
            severity=a.severity,
            gpu=None if a.gpu_index is None else str(a.gpu_index),
            uuid=a.gpu_uuid,
            server=a.server,
        )
        active.append((labels, 1.0))
        since.append((labels, float(a.since)))
    return (
        Family(ALERT_ACTIVE, "gauge", "An alert raised now (thresholds as lltui's config "
               "sets them); 1.", "", tuple(active)),
        Family(ALERT_SINCE, "gauge", "When the alert was raised, seconds since the epoch.",
               "seconds", tuple(since)),
    )  # fmt: skip


def llama_families(servers: Sequence[LlamaExport], *, host: str) -> tuple[Family, ...]:
    """Counters, slots and placement of the llama-servers lltui follows."""
    rows: dict[str, list[tuple[tuple[tuple[str, str], ...], float]]] = {}

    def add(name: str, labels: tuple[tuple[str, str], ...], value: float | int | None) -> None:
        if _finite(value):
            rows.setdefault(name, []).append((labels, float(value)))  # type: ignore[arg-type]

    for s in servers:
        lb = (("host", host), ("server", s.server))
        add("lltui_llama_up", lb, 1.0 if s.up else 0.0)
        m = s.metrics
        if m is not None:
            add("lltui_llama_prompt_tokens_total", lb, m.prompt_tokens_total)
            add("lltui_llama_prompt_seconds_total", lb, m.prompt_seconds_total)
            add("lltui_llama_generated_tokens_total", lb, m.tokens_predicted_total)
            add("lltui_llama_generation_seconds_total", lb, m.tokens_predicted_seconds_total)
            add("lltui_llama_decode_calls_total", lb, m.n_decode_total)
            add("lltui_llama_requests_processing", lb, m.requests_processing)
            add("lltui_llama_requests_deferred", lb, m.requests_deferred)
        tp = s.throughput
        if tp is not None:
            add("lltui_llama_generation_tokens_per_second", lb, tp.generation_tps)
            add("lltui_llama_decode_tokens_per_second", lb, tp.decode_tps)
            add("lltui_llama_prompt_tokens_per_second", lb, tp.prompt_tps)
        if s.slots is not None:
            add("lltui_llama_slots", lb, len(s.slots))
            add("lltui_llama_slots_busy", lb, sum(1 for x in s.slots if x.is_processing))
        elif s.props is not None:
            add("lltui_llama_slots", lb, s.props.total_slots)
        if s.props is not None:
            add("lltui_llama_slot_context_tokens", lb, s.props.n_ctx)
            model = s.props.model_alias or (
                s.props.model_path.rsplit("/", 1)[-1] if s.props.model_path else None
            )
            if model:
                add("lltui_llama_model_info", (*lb, ("model", model)), 1.0)
        for d in s.placement:
            for kind, mib in (
                ("model", d.model_mib),
                ("kv", d.kv_mib),
                ("compute", d.compute_mib),
                ("output", d.output_mib),
            ):
                add("lltui_llama_device_memory_bytes",
                    (*lb, ("device", d.name), ("kind", kind)), round(mib * MIB))  # fmt: skip
            if d.layers:
                add("lltui_llama_device_layers", (*lb, ("device", d.name)), len(d.layers))
        add("lltui_llama_kv_tokens", lb, s.kv_tokens)
        for g in s.kv:
            dl = (*lb, ("device", g.device))
            add("lltui_llama_kv_used_bytes", dl, g.used_bytes)
            add("lltui_llama_kv_capacity_bytes", dl, g.capacity_bytes)
            add("lltui_llama_kv_seconds_to_full", dl, g.seconds_to_full)
    helps = {
        "lltui_llama_up": ("gauge", "1 when the server answers /health as ready.", ""),
        "lltui_llama_prompt_tokens_total": ("counter", "Prompt tokens processed.", ""),
        "lltui_llama_prompt_seconds_total": ("counter", "Time spent on prompts.", "seconds"),
        "lltui_llama_generated_tokens_total": ("counter", "Tokens generated.", ""),
        "lltui_llama_generation_seconds_total": (
            "counter", "Time spent generating.", "seconds"),
        "lltui_llama_decode_calls_total": ("counter", "llama_decode calls.", ""),
        "lltui_llama_requests_processing": ("gauge", "Requests being processed.", ""),
        "lltui_llama_requests_deferred": ("gauge", "Requests waiting for a slot.", ""),
        "lltui_llama_generation_tokens_per_second": (
            "gauge", "Tokens generated per second over the last interval.", ""),
        "lltui_llama_decode_tokens_per_second": (
            "gauge", "Decode speed of requests finished in the last interval.", ""),
        "lltui_llama_prompt_tokens_per_second": (
            "gauge", "Prompt speed of requests finished in the last interval.", ""),
        "lltui_llama_slots": ("gauge", "Slots the server has.", ""),
        "lltui_llama_slots_busy": ("gauge", "Slots processing a request.", ""),
        "lltui_llama_slot_context_tokens": ("gauge", "Context size of one slot.", ""),
        "lltui_llama_model_info": ("gauge", "The model served; always 1.", ""),
        "lltui_llama_device_memory_bytes": (
            "gauge", "Memory the server placed on a device, by kind.", "bytes"),
        "lltui_llama_device_layers": ("gauge", "Layers the server placed on a device.", ""),
        "lltui_llama_kv_tokens": ("gauge", "Tokens the server's slots hold in its KV cache.", ""),
        "lltui_llama_kv_used_bytes": (
            "gauge", "KV cache bytes the slots' tokens take on a device.", "bytes"),
        "lltui_llama_kv_capacity_bytes": ("gauge", "KV cache bytes of a device.", "bytes"),
        "lltui_llama_kv_seconds_to_full": (
            "gauge", "Seconds until a device's KV cache is full at the current rate.", "seconds"),
    }  # fmt: skip
    return tuple(
        Family(name, kind, text, unit, tuple(rows.get(name, ())))
        for name, (kind, text, unit) in helps.items()
    )


# --- in --------------------------------------------------------------------------------------

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
    throttle: list[str] = field(default_factory=list)
    processes: list[tuple[int, str | None, float, str | None]] = field(default_factory=list)
    models: dict[int, str] = field(default_factory=dict)  # pid -> the model it serves
    cuda_index: int | None = None
    compute_capability: tuple[int, int] | None = None
    info_text: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Host:
    gpus: dict[str, _Gpu] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)
    driver_version: str | None = None
    cuda_version: str | None = None
    simulated: bool = False
    exporters: set[str] = field(default_factory=set)
    error: str | None = None


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _host_of(s: Series, exporter: str, fallback: str) -> str:
    return s.label(*_HOST_KEYS[exporter]) or s.label("instance") or fallback


def _gpu_key(s: Series, exporter: str) -> tuple[str | None, int | None]:
    if exporter == "lltui":
        return s.label("uuid"), _int_or_none(s.label("gpu"))
    if exporter == "dcgm":
        return s.label("UUID", "uuid"), _int_or_none(s.label("gpu"))
    return s.label("gpu_uuid", "uuid"), _int_or_none(s.label("gpu_index", "index"))


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
    know, and values that are not finite, are skipped; a GPU with neither UUID nor index
    label cannot be told apart from the others and is skipped too. ``rates`` turns counters
    (dcgm-exporter's PCIe KB) into rates from one call to the next; ``down`` maps a
    Prometheus target (its ``instance`` label) to why its last scrape failed, so that the
    hosts whose series came from it carry that error."""
    hosts: dict[str, _Host] = {}
    # all-smi labels its process series with the GPU's UUID but not the host: matched later
    allsmi_procs: dict[str, list[tuple[int, str | None, str | None, float]]] = {}
    for s in series:
        exporter = exporter_of(s.name)
        if exporter is None or not math.isfinite(s.value):
            continue
        if s.name == ALLSMI_PROCESS:
            pid, uuid = _int_or_none(s.label("pid")), s.label("device_uuid")
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
        if _take_host_series(h, s, exporter):
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
        _take_gpu_series(h, g, s, exporter)
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
            g.cuda_index = _int_or_none(s.label("cuda_index"))
            cc = (s.label("compute_capability") or "").split(".")
            if len(cc) == 2 and all(p.isdigit() for p in cc):
                g.compute_capability = (int(cc[0]), int(cc[1]))
            for key in INFO_TEXT_LABELS:
                if s.label(key):
                    g.info_text[key] = s.label(key) or ""
        elif n == GPU_LOST:
            g.lost = v >= 1
        elif n == THROTTLE:
            reason = s.label("reason")
            if reason and v >= 1 and reason not in g.throttle:
                g.throttle.append(reason)
        elif n == PROCESS_MEMORY:
            pid = _int_or_none(s.label("pid"))
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


def _gpu_sample(g: _Gpu, position: int) -> GpuSample:
    values: dict[str, float | int] = {}
    for attr, v in {**g.fallbacks, **g.values}.items():
        values[attr] = round(v) if attr in _INT_FIELDS else v
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
        uuid=g.uuid or f"index:{index}",
        name=g.name or "",
        pci_bus_id=g.pci_bus_id or "",
        memory_total=round(total_f) if total_f is not None else None,
        cuda_index=g.cuda_index,
        compute_capability=g.compute_capability,
        **g.info_text,  # type: ignore[arg-type]
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
    if g.throttle:
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
        hostname=host_name,
        gpus=tuple(g.info for g in samples),
    )
    host_kw: dict[str, float | int] = {}
    for attr, v in h.host.items():
        host_kw[attr] = round(v) if attr in ("mem_total", "mem_used", "cpu_count") else v
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

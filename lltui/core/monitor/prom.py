"""lltui's Prometheus names, one table for both directions: the series the exporter writes
(:mod:`lltui.core.monitor.prom_export`) and the ones the Prometheus and scrape sources read
back (:mod:`lltui.core.monitor.prom_import`), with the records they pass around. Pure: no
HTTP, no exposition text.
"""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.llama.metrics import LlamaMetrics, ServerProps, SlotState, Throughput
from lltui.core.llamalog.models import DevicePlacement, PromptCache
from lltui.core.monitor.plan_reality import PlanReality
from lltui.core.text import one_line

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
        """The first of ``keys`` this series has with a non-empty value, its control
        characters escaped (a page's labels reach the screen: GPU names, commands, hosts)."""
        for key in keys:
            for k, v in self.labels:
                if k == key and v != "":
                    return one_line(v)
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
    plan: PlanReality | None = None  # its plan per GPU beside what its process holds
    prompt_cache: PromptCache | None = None  # its host prompt cache, from its log


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
# GpuStatic yes/no facts that ride on it too, as "true" or "false" (absent where None)
INFO_BOOL_LABELS = ("persistence_mode", "mig_mode", "unified_memory")
GPU_LOST = "lltui_gpu_lost"
THROTTLE = "lltui_gpu_throttle_reason_active"
# how many reasons hold the clocks down: 0 says none does (absent: the GPU does not say)
THROTTLE_COUNT = "lltui_gpu_throttle_reasons"
XID_ERRORS = "lltui_gpu_xid_errors_total"
PROCESS_MEMORY = "lltui_gpu_process_memory_bytes"
RIG_INFO = "lltui_rig_info"
HOST_CPU = "lltui_host_cpu_utilization_ratio"
HOST_MEM_TOTAL = "lltui_host_memory_total_bytes"
HOST_MEM_USED = "lltui_host_memory_used_bytes"
HOST_LOAD1 = "lltui_host_load1"
HOST_CPUS = "lltui_host_cpus"

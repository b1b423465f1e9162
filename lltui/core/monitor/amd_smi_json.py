"""``amd-smi list|static|metric|process --json`` read into core models.

The CLI's JSON changed shape across ROCm releases, and this reads all of them:

* 6.0 to 6.4 print a list of GPUs, ``[{"gpu": 0, ...}, ...]``; 7.x wraps it,
  ``{"gpu_data": [...]}`` (and may add ``"timestamp"`` per GPU under ``-w``);
* values are bare numbers (6.0), ``{"value": 42, "unit": "W"}`` (6.1 on) or ``"N/A"``
  (see :mod:`.amd_values`);
* fields moved: partitions went from ``static`` top level into ``"partition"``, clocks
  from ``gfx``/``mem`` to ``gfx_0``/``mem_0``, violation counters into ``"throttle"``,
  and a process's memory from ``mem_usage`` to ``memory_usage.vram_mem``;
* fields were renamed after 6.0: ``usage.gfx_usage``/``mem_usage`` became ``gfx_activity``/
  ``umc_activity``, ``power.current_power`` ``socket_power``, ``limit.current_power``
  ``socket_power``, ``vram.vram_size_mb`` ``size`` and ``driver.driver_version``
  ``version``.

A field a GPU does not report is None. A GPU is keyed by its ``gpu`` index, the index
``amd-smi`` itself uses (the same for every subcommand of one run).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lltui.core.hardware.gpus import find_gpu
from lltui.core.monitor.amd_values import (
    AmdJsonError,
    dig,
    first,
    integer,
    is_na,
    load_json,
    nonneg,
    number,
    pci_bus_id,
    pcie_gen,
    text,
    to_bytes,
)
from lltui.core.monitor.models import GpuProcess, GpuSample, GpuStatic, gpu_key
from lltui.core.monitor.plausible import plausible, within
from lltui.core.monitor.throttle import AMD_THROTTLED, AMD_VIOLATIONS
from lltui.core.units import KIB, MIB

VENDOR = "amd"
# Mb/s (amd-smi's PCIe bandwidth unit) -> KiB/s (lltui's link rates, as NVML gives them)
MBIT_TO_KIBS = 1e6 / 8 / KIB
# the PCIe traffic amd-smi prints as "Mb/s" (older releases "MB/s") is MiB/s: its CLI divides the
# bytes of a second by 1024 twice (amdsmi_cli/amdsmi_commands.py, ROCm/amdsmi)
MIB_TO_KIBS = MIB / KIB


def gpu_entries(output: str, what: str) -> list[dict[str, Any]]:
    """The per-GPU objects of one ``amd-smi SUBCOMMAND --json`` output, list or
    ``gpu_data`` form; AmdJsonError (one line) for anything else."""
    doc = load_json(output, what)
    if isinstance(doc, dict) and isinstance(doc.get("gpu_data"), list):
        doc = doc["gpu_data"]
    elif isinstance(doc, dict) and "gpu" in doc:
        doc = [doc]
    if not isinstance(doc, list):
        raise AmdJsonError(f"{what} printed JSON without a list of GPUs")
    entries = [e for e in doc if isinstance(e, dict) and integer(e.get("gpu")) is not None]
    if doc and not entries:
        raise AmdJsonError(f"{what} printed JSON whose entries name no GPU")
    return entries


def by_gpu(entries: Iterable[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for entry in entries:
        index = integer(entry.get("gpu"))
        if index is not None:
            out.setdefault(index, entry)
    return out


# --- static facts ------------------------------------------------------------------------------


def static_of(index: int, static: Mapping[str, Any], listing: Mapping[str, Any]) -> GpuStatic:
    """One GPU's facts from its ``static`` entry and its ``list`` entry (uuid, bdf)."""
    compute = first(static, ("partition", "compute_partition"), ("compute_partition",))
    memory = first(static, ("partition", "memory_partition"), ("memory_partition",))
    name = text(dig(static, "asic", "market_name")) or f"AMD GPU {index}"
    width = integer(dig(static, "bus", "max_pcie_width"))
    return GpuStatic(
        index=index,
        uuid=gpu_key(text(listing.get("uuid")), index),
        name=name,
        pci_bus_id=pci_bus_id(first(listing, ("bdf",)) or dig(static, "bus", "bdf")),
        memory_total=to_bytes(first(static, ("vram", "size"), ("vram", "vram_size_mb")), "mb"),
        power_limit_default_w=nonneg(
            first(static, ("limit", "socket_power"), ("limit", "current_power"))
        ),
        power_limit_max_w=nonneg(dig(static, "limit", "max_power")),
        pcie_gen_max=pcie_gen(dig(static, "bus", "max_pcie_speed")),
        pcie_width_max=width if width else None,
        serial=text(first(static, ("asic", "asic_serial"), ("board", "product_serial"))),
        vbios=text(first(static, ("vbios", "version"), ("vbios", "name"))),
        mem_bus_width_bits=integer(dig(static, "vram", "bit_width")),
        vendor=VENDOR,
        gfx_target=text(dig(static, "asic", "target_graphics_version")),
        compute_partition=text(compute),
        memory_partition=text(memory),
    )


def with_catalog(static: GpuStatic) -> GpuStatic:
    """The catalog's word on what the tools do not say: whether the GPU is an APU whose
    memory is the host's (Strix Halo, Phoenix)."""
    spec = find_gpu(
        static.name, None if static.memory_total is None else static.memory_total // MIB
    )
    if spec is None or static.unified_memory is not None:
        return static
    return replace(static, unified_memory=spec.unified)


def driver_version(entries: Iterable[Mapping[str, Any]]) -> str | None:
    for entry in entries:
        version = text(first(entry, ("driver", "version"), ("driver", "driver_version")))
        if version:
            return version
    return None


# --- one sample --------------------------------------------------------------------------------


def _clock(metric: Mapping[str, Any], *names: str) -> int | None:
    """The current clock of the first named domain (``gfx_0`` on 6.1 on, ``gfx`` before)."""
    for name in names:
        value = first(metric, ("clock", name, "clk"), ("clock", name, "cur_clk"))
        if value is not None:
            return integer(value)
    return None


def throttle_words(metric: Mapping[str, Any]) -> tuple[str, ...] | None:
    """What slows the GPU now: the ``throttle`` section's active violations (MI300 on),
    else ``power.throttle_status`` (``THROTTLED``/``UNTHROTTLED``); None where neither
    is reported."""
    section = metric.get("throttle")
    words: list[str] = []
    known = False
    if isinstance(section, dict):
        for word, key, _flag in AMD_VIOLATIONS:
            status = text(section.get(f"{key}_violation_status"))
            if status is None:
                continue
            known = True
            if status.upper() == "ACTIVE" and word not in words:
                words.append(word)
    if known:
        return tuple(words)
    status = text(dig(metric, "power", "throttle_status"))
    if status is None:
        return None
    return (AMD_THROTTLED,) if status.upper() == "THROTTLED" else ()


def _energy_mj(metric: Mapping[str, Any]) -> int | None:
    """The energy counter in mJ; a counter that reads 0.0 J is one the GPU does not keep
    (RDNA cards print 0.0 however long they ran)."""
    joules = number(dig(metric, "energy", "total_energy_consumption"))
    if joules is None or joules <= 0:
        return None
    return round(joules * 1000)


def _pcie(metric: Mapping[str, Any]) -> dict[str, Any]:
    pcie = metric.get("pcie") if isinstance(metric.get("pcie"), dict) else {}
    assert isinstance(pcie, dict)
    bw = nonneg(pcie.get("bandwidth"))
    sent = nonneg(pcie.get("current_bandwidth_sent"))
    received = nonneg(pcie.get("current_bandwidth_received"))
    width = integer(pcie.get("width"))
    return {
        "pcie_gen": pcie_gen(pcie.get("speed")),
        "pcie_width": width if width else None,
        "pcie_bw_kbs": None if bw is None else bw * MBIT_TO_KIBS,
        "pcie_tx_kbs": None if sent is None else sent * MIB_TO_KIBS,
        "pcie_rx_kbs": None if received is None else received * MIB_TO_KIBS,
    }


def _memory(metric: Mapping[str, Any], static: GpuStatic) -> dict[str, Any]:
    usage = metric.get("mem_usage")
    if not isinstance(usage, dict):  # ROCm 6.0: "fb_usage": {"total": .., "used": ..}
        fb = metric.get("fb_usage") if isinstance(metric.get("fb_usage"), dict) else {}
        usage = {"total_vram": dig(fb, "total"), "used_vram": dig(fb, "used")}
    total = to_bytes(usage.get("total_vram"), "mb") or static.memory_total
    used = to_bytes(usage.get("used_vram"), "mb")
    free = to_bytes(usage.get("free_vram"), "mb")
    if free is None and used is not None and total is not None:
        free = max(total - used, 0)
    return {
        "memory_used": used,
        "memory_free": free,
        "gtt_used": to_bytes(usage.get("used_gtt"), "mb"),
        "gtt_total": to_bytes(usage.get("total_gtt"), "mb"),
    }


def sample_of(metric: Mapping[str, Any], static: GpuStatic) -> GpuSample:
    """One GPU's reading from its ``metric`` entry."""
    edge = within("temp_c", nonneg(dig(metric, "temperature", "edge")))
    hotspot = nonneg(first(metric, ("temperature", "hotspot"), ("temperature", "junction")))
    ecc = metric.get("ecc") if isinstance(metric.get("ecc"), dict) else {}
    assert isinstance(ecc, dict)
    power = first(
        metric,
        ("power", "socket_power"),
        ("power", "average_socket_power"),
        ("power", "current_socket_power"),
        ("power", "current_power"),  # 6.0
    )
    return GpuSample(
        info=static,
        util_gpu=nonneg(first(metric, ("usage", "gfx_activity"), ("usage", "gfx_usage"))),
        util_mem=nonneg(first(metric, ("usage", "umc_activity"), ("usage", "mem_usage"))),
        power_w=nonneg(power),
        power_limit_w=nonneg(dig(metric, "power", "power_limit")) or static.power_limit_default_w,
        energy_mj=_energy_mj(metric),
        temp_c=edge if edge is not None else hotspot,
        hotspot_temp_c=hotspot,
        mem_temp_c=nonneg(first(metric, ("temperature", "mem"), ("temperature", "vram"))),
        sm_clock_mhz=_clock(metric, "gfx_0", "gfx"),
        mem_clock_mhz=_clock(metric, "mem_0", "mem"),
        fan_pct=nonneg(first(metric, ("fan", "usage"))),
        throttle_reasons=throttle_words(metric),
        ecc_corrected=integer(ecc.get("total_correctable_count")),
        ecc_uncorrected=integer(ecc.get("total_uncorrectable_count")),
        ecc_deferred=integer(ecc.get("total_deferred_count")),
        **_pcie(metric),
        **_memory(metric, static),
    )


# --- processes ---------------------------------------------------------------------------------


def processes_of(entry: Mapping[str, Any], gpu: int) -> tuple[GpuProcess, ...]:
    """The processes of one ``amd-smi process --json`` entry. A GPU without any prints
    ``"process_list": [{"process_info": "No running processes detected"}]`` or ``[]``."""
    rows = entry.get("process_list")
    if not isinstance(rows, list):
        rows = [entry] if isinstance(entry.get("process_info"), dict) else []
    out = []
    for row in rows:
        info = row.get("process_info") if isinstance(row, dict) else None
        pid = integer(dig(info, "pid")) if isinstance(info, dict) else None
        if not isinstance(info, dict) or pid is None or pid <= 0:
            continue
        vram = to_bytes(dig(info, "memory_usage", "vram_mem"), "b")
        out.append(
            GpuProcess(
                pid=pid,
                gpu_index=gpu,
                used_memory=vram if vram is not None else to_bytes(info.get("mem_usage"), "b"),
                name=text(info.get("name")),
                gtt_memory=to_bytes(dig(info, "memory_usage", "gtt_mem"), "b"),
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AmdSmiRig:
    """Every GPU of one ``amd-smi`` run: static facts by index, and the driver."""

    statics: tuple[GpuStatic, ...]
    driver_version: str | None


def read_rig(list_out: str | None, static_out: str) -> AmdSmiRig:
    """The rig from ``amd-smi static --json`` (and ``list --json`` where it ran: older
    ``static`` output lacks the uuid, some lacks the bus id)."""
    statics = gpu_entries(static_out, "amd-smi static")
    listing = by_gpu(gpu_entries(list_out, "amd-smi list")) if list_out else {}
    rows = [static_of(i, s, listing.get(i, {})) for i, s in sorted(by_gpu(statics).items())]
    rows = [with_catalog(r) for r in rows]
    for i, entry in sorted(listing.items()):  # listed but without static facts
        if all(r.index != i for r in rows):
            rows.append(with_catalog(static_of(i, {}, entry)))
    return AmdSmiRig(tuple(sorted(rows, key=lambda r: r.index)), driver_version(statics))


def read_samples(metric_out: str, statics: Iterable[GpuStatic]) -> dict[int, GpuSample]:
    """Each GPU's sample from ``amd-smi metric --json``, by index (absent: not printed)."""
    metrics = by_gpu(gpu_entries(metric_out, "amd-smi metric"))
    return {
        s.index: plausible(sample_of(metrics[s.index], s)) for s in statics if s.index in metrics
    }


def read_processes(process_out: str) -> dict[int, tuple[GpuProcess, ...]]:
    return {
        i: processes_of(e, i)
        for i, e in by_gpu(gpu_entries(process_out, "amd-smi process")).items()
    }


__all__ = [
    "AmdJsonError",
    "AmdSmiRig",
    "gpu_entries",
    "is_na",
    "processes_of",
    "read_processes",
    "read_rig",
    "read_samples",
    "sample_of",
    "static_of",
    "throttle_words",
    "with_catalog",
]

"""One rig sample as the ``gpus --json`` contract and as a text table."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lltui.core.hardware.gpus import short_gpu_name
from lltui.core.jsonout import fields_of
from lltui.core.monitor.models import (
    ContainerRef,
    GpuProcess,
    GpuSample,
    MigDevice,
    RigSample,
)
from lltui.core.monitor.redact import redact_sample
from lltui.core.monitor.simulated import simulated_json, simulated_line
from lltui.core.monitor.xid import xid_meaning
from lltui.core.text import one_line
from lltui.core.units import GIB, fmt_mib, fmt_pct, fmt_rate_kbs, fmt_temp, fmt_time, fmt_watts

if TYPE_CHECKING:
    from lltui.core.monitor.alerts import Alert


def gpu_to_json(g: GpuSample) -> dict[str, Any]:
    info = g.info
    return {
        **fields_of(info, "index cuda_index uuid name pci_bus_id"),
        "compute_capability": (
            f"{info.compute_capability[0]}.{info.compute_capability[1]}"
            if info.compute_capability
            else None
        ),
        "lost": g.lost,
        "memory_total": info.memory_total,
        **fields_of(g, "memory_used memory_free memory_reserved power_w power_limit_w"),
        "power_limit_default_w": info.power_limit_default_w,
        **fields_of(g, "energy_mj util_gpu util_mem temp_c sm_clock_mhz mem_clock_mhz"),
        **fields_of(info, "max_sm_clock_mhz max_mem_clock_mhz"),
        **fields_of(
            g,
            "fan_pct pstate pcie_gen pcie_width pcie_rx_kbs pcie_tx_kbs nvlink_active "
            "nvlink_rx_kbs nvlink_tx_kbs",
        ),
        "throttle_reasons": list(g.throttle_reasons) if g.throttle_reasons is not None else None,
        **fields_of(g, "ecc_uncorrected ecc_corrected"),
        "ecc_volatile_corrected": g.ecc_corrected,
        "ecc_volatile_uncorrected": g.ecc_uncorrected,
        **fields_of(g, "ecc_aggregate_corrected ecc_aggregate_uncorrected retired_pages xid"),
        "xid_events": [fields_of(e, "xid meaning t") for e in g.xid_events],
        "xid_dropped": g.xid_dropped,
        "persistence_mode": info.persistence_mode,
        "processes": [
            {
                **fields_of(p, "pid name user used_memory"),
                "type": p.kind,
                **fields_of(p, "command host_rss cpu_pct sm_util mem_util started"),
                "container": container_to_json(p.container),
                **fields_of(p, "gpu_instance_id compute_instance_id gtt_memory"),
            }
            for p in g.processes
        ],
        **fields_of(g, "error mem_temp_c"),
        "mig_mode": info.mig_mode,
        "mig": [mig_to_json(m, g) for m in g.mig],
        **fields_of(
            info,
            "virtualization vendor gfx_target compute_partition memory_partition unified_memory",
        ),
        **fields_of(
            g,
            "gtt_used gtt_total hotspot_temp_c pcie_bw_kbs xgmi_active xgmi_rx_kbs xgmi_tx_kbs "
            "ecc_deferred",
        ),
        "vgpus": [
            {
                "instance": v.instance,
                "type": v.type_name,
                **fields_of(v, "vm memory_total memory_used"),
            }
            for v in g.vgpus
        ],
    }


def container_to_json(c: ContainerRef | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return fields_of(c, "runtime id name pod namespace unit job label")


def mig_to_json(m: MigDevice, g: GpuSample) -> dict[str, Any]:
    """One MIG instance, with the pids of the processes in it."""
    return {
        **fields_of(
            m,
            "uuid profile gpu_instance_id compute_instance_id memory_total memory_used "
            "memory_free sm_count slices util_gpu",
        ),
        "processes": [p.pid for p in mig_processes(m, g)],
    }


def mig_processes(m: MigDevice, g: GpuSample) -> list[GpuProcess]:
    """The processes of GPU ``g`` that run in MIG instance ``m``."""
    return [
        p
        for p in g.processes
        if p.gpu_instance_id == m.gpu_instance_id
        and p.compute_instance_id in (None, m.compute_instance_id)
    ]


def rig_to_json(sample: RigSample) -> dict[str, Any]:
    """The ``lltui gpus --json`` object (DESIGN.md contract; extra keys are additions);
    secrets in process command lines as ``***``."""
    sample = redact_sample(sample)
    info = sample.info
    host = sample.host
    return {
        "source": info.source,
        **simulated_json(info),
        **fields_of(info, "driver_version cuda_version nvml_version rocm_version"),
        "hostname": host.hostname or info.hostname,
        "gpus": [gpu_to_json(g) for g in sample.gpus],
        "host": fields_of(host, "cpu_pct mem_total mem_used cpu_count load_1m"),
        "hints": list(info.hints),
        "error": sample.error,
    }


def rig_to_text(sample: RigSample, width: int | None = None) -> str:
    """A compact table, one line per GPU, like ``nvidia-smi`` users expect. ``width``: the
    terminal's columns; the GPU table narrows to fit, longer lines are cut (sentences wrap)."""
    text = _rig_text(redact_sample(sample), narrow=width is not None and width < WIDE_COLUMNS)
    if width is None:
        return text
    return "\n".join(_fit_line(line, width) for line in text.splitlines())


WIDE_COLUMNS = 100  # the full table's width


def alert_lines(alerts: Sequence[Alert], width: int | None = None) -> str:
    """The alerts raised now, a line each (wrapped to ``width`` where given)."""
    lines = [f"alert: {a.line}" for a in alerts]
    return "\n".join(lines if width is None else [_fit_line(x, width) for x in lines])


def _fit_line(line: str, width: int) -> str:
    if len(line) <= width:
        return line
    if line.startswith(("hint: ", "error: ", "alert: ", "SIMULATED ")):  # sentences: wrap
        return "\n".join(textwrap.wrap(line, width, subsequent_indent="  "))
    return line[: max(width - 1, 1)] + "…"


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f}"


def _cuda_column(sample: RigSample) -> bool:
    """Whether the table has a CUDA index column: not on a rig of AMD GPUs alone, which CUDA
    does not see (ROCm numbers them apart, and the tools read no HIP order to show)."""
    return not sample.gpus or any(g.info.vendor != "amd" for g in sample.gpus)


def _narrow_row(g: GpuSample, cuda_column: bool = True) -> str:
    """One GPU in about 60 columns: short name, GiB, watts."""
    i = g.info
    cuda = "-" if i.cuda_index is None else str(i.cuda_index)
    ids = f"{i.index:>3} {cuda:>2}" if cuda_column else f"{i.index:>3}"
    name = one_line(short_gpu_name(i.name))[:18]
    if g.lost:
        return f"{ids} {name:<18} LOST: {one_line(g.error or 'gone')}"
    mem = f"{_gib(g.memory_used)}/{_gib(i.memory_total)}G"
    watts = g.power_w is not None and math.isfinite(g.power_w)
    limit = g.power_limit_w is not None and math.isfinite(g.power_limit_w)
    power = f"{g.power_w:.0f}" if watts else "-"
    power += f"/{g.power_limit_w:.0f}W" if limit else "W"
    reasons = one_line(", ".join(g.throttle_reasons or ()) or "-")
    return (
        f"{ids} {name:<18} {mem:>11} {fmt_pct(g.util_gpu):>4}"
        f" {power:>9} {fmt_temp(g.temp_c):>5} {reasons}"
    )


def _gtt_lines(g: GpuSample, indent: int) -> list[str]:
    """Its GTT where it matters (an APU keeps its model there, not in the carve-out)."""
    if g.lost or not g.gtt_shown:
        return []
    return [f"{'':>{indent}}GTT {fmt_mib(g.gtt_used)} / {fmt_mib(g.gtt_total)}"]


def _rig_text(sample: RigSample, *, narrow: bool) -> str:
    # every string here came from a driver, a server, a recording or another user's
    # process: each is one line (a break in a GPU's name or a command prints no line)
    info = sample.info
    lines = []
    if info.simulated:
        lines.append(simulated_line(info))
    head = f"source {one_line(info.source)}"
    if info.driver_version:
        head += f"  driver {one_line(info.driver_version)}"
    if info.cuda_version:
        head += f"  CUDA {one_line(info.cuda_version)}"
    if info.rocm_version:
        head += f"  ROCm {one_line(info.rocm_version)}"
    lines.append(head)
    cuda_column = _cuda_column(sample)
    if narrow:
        ids = f"{'GPU':>3} {'CU':>2}" if cuda_column else f"{'GPU':>3}"
        cols = f"{ids} {'name':<18} {'used/total':>11} {'util':>4}"
        lines.append(cols + f" {'power':>9} {'temp':>5} throttle")
    else:
        # as wide as the widest row's (196592 MiB cards: 23 characters)
        mem_w = max([22, *(len(_memory(g)) for g in sample.gpus if not g.lost)])
        ids = f"{'GPU':>3} {'CUDA':>4}" if cuda_column else f"{'GPU':>3}"
        cols = f"{ids}  {'name':<26} {'memory used / total':>{mem_w}} {'util':>5}"
        lines.append(cols + f" {'power':>13} {'temp':>5}  throttle")
    lead = 10 if cuda_column else 5  # where the name column starts
    for g in sample.gpus:
        i = g.info
        if narrow:
            lines.append(_narrow_row(g, cuda_column))
            lines += _gtt_lines(g, 3)
            lines += _xid_lines(g)
            continue
        cuda = "-" if i.cuda_index is None else str(i.cuda_index)
        ids = f"{i.index:>3} {cuda:>4}" if cuda_column else f"{i.index:>3}"
        name = one_line(i.name)[:26]
        if g.lost:
            lines.append(f"{ids}  {name:<26} LOST: {one_line(g.error or 'gone')}")
            lines += _xid_lines(g)
            continue
        power = f"{fmt_watts(g.power_w)} / {fmt_watts(g.power_limit_w)}"
        reasons = one_line(", ".join(g.throttle_reasons or ()) or "-")
        lines.append(
            f"{ids}  {name:<26} {_memory(g):>{mem_w}} {fmt_pct(g.util_gpu):>5}"
            f" {power:>13} {fmt_temp(g.temp_c):>5}  {reasons}"
        )
        if g.pcie_rx_kbs is not None or g.pcie_tx_kbs is not None:
            lines.append(
                f"{'':>{lead}}PCIe rx {fmt_rate_kbs(g.pcie_rx_kbs)}"
                f"  tx {fmt_rate_kbs(g.pcie_tx_kbs)}"
            )
        lines += _gtt_lines(g, lead)
        lines += _mig_lines(g)
        lines += [
            f"{'':>6}vGPU {v.instance} {v.type_name}  {fmt_mib(v.memory_used)} / "
            f"{fmt_mib(v.memory_total)}  VM {v.vm or '?'}"
            for v in g.vgpus
        ]
        lines += _xid_lines(g)
    procs = [p for g in sample.gpus for p in g.processes]
    if procs:
        lines.append("")
        boxed = any(p.container for p in procs)
        head = f"{'GPU':>3} {'pid':>8} {'type':<4} {'user':<10} {'GPU mem':>10}"
        lines.append(head + (f"  {'container':<24}" if boxed else "") + "  command")
        for p in procs:
            cmd = one_line(p.command or p.name or "?")[:60]
            user = one_line(p.user or "-")[:10]
            box = (
                f"  {one_line(p.container.label if p.container else '-')[:24]:<24}" if boxed else ""
            )
            lines.append(
                f"{p.gpu_index:>3} {p.pid:>8} {one_line(p.kind):<4} {user:<10}"
                f" {fmt_mib(p.used_memory):>10}{box}  {cmd}"
            )
    h = sample.host
    if h.cpu_pct is not None or h.mem_total is not None:
        lines.append("")
        lines.append(
            f"host {one_line(h.hostname or '')}  CPU {fmt_pct(h.cpu_pct)}"
            f"  RAM {fmt_mib(h.mem_used)} / {fmt_mib(h.mem_total)}"
        )
    for hint in info.hints:
        lines.append(f"hint: {one_line(hint)}")
    if sample.error:
        lines.append(f"error: {one_line(sample.error)}")
    return "\n".join(lines)


def _memory(g: GpuSample) -> str:
    return f"{fmt_mib(g.memory_used)} / {fmt_mib(g.info.memory_total)}"


def _mig_lines(g: GpuSample) -> list[str]:
    """One line per MIG instance, under its GPU."""
    out = []
    for m in g.mig:
        pids = len(mig_processes(m, g))
        out.append(
            f"{'':>6}MIG {m.profile:<10} {fmt_mib(m.memory_used)} / {fmt_mib(m.memory_total)}"
            f"  GI {m.gpu_instance_id} CI {m.compute_instance_id}"
            f"  {pids} process{'es' if pids != 1 else ''}  {m.uuid}"
        )
    return out


def _xid_lines(g: GpuSample) -> list[str]:
    """One line per XID event in this sample (or the last XID seen, when none came now)."""
    pad = " " * 10
    lines = [f"{pad}XID {e.xid} at {fmt_time(e.t)}: {one_line(e.meaning)}" for e in g.xid_events]
    if g.xid_dropped:
        lines.append(f"{pad}{g.xid_dropped} more XID events dropped (too many to keep)")
    if not lines and g.xid is not None:
        lines.append(f"{pad}last XID {g.xid}: {xid_meaning(g.xid)}")
    return lines

"""Everything about one GPU, with wide sparklines; follows the live model."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.markup import escape

from lltui.app.app_protocol import host_of
from lltui.app.rig_model import RigModel
from lltui.app.screens.base import HistoryModal
from lltui.app.widgets.gpu_card import num
from lltui.app.widgets.status import fmt_window
from lltui.core.monitor.commands import command_label
from lltui.core.monitor.models import GpuSample, GpuStatic
from lltui.core.units import GIB, fmt_bytes, fmt_duration, fmt_energy_mj, spark


def span_words(held: float, window: float) -> str:
    """What graphs of ``held`` seconds of history cover: the window, or the history there
    is when it is shorter."""
    held = min(window, held)
    return f"the last {fmt_duration(held)}" if held < window else f"the {fmt_window(window)} window"


def _v(value: object) -> str:
    return "-" if value is None else escape(str(value))


def _runtime(info: GpuStatic) -> str:
    """Its CUDA index; an AMD GPU, which CUDA does not see: the ISA HIP builds for, and an
    Instinct's partition modes (as its card says)."""
    if info.vendor != "amd":
        return f"CUDA index {_v(info.cuda_index)}"
    parts = "/".join(p for p in (info.compute_partition, info.memory_partition) if p)
    return f"gfx target {_v(info.gfx_target)}" + (f"  partition {escape(parts)}" if parts else "")


def _links(g: GpuSample) -> str:
    """Its GPU-to-GPU links: NVLink's; an AMD GPU's XGMI (as its card says), where it has
    them (a Radeon has none)."""
    if g.info.vendor != "amd":
        return f"   NVLink links {_v(g.info.nvlink_links)} active {_v(g.nvlink_active)}"
    return "" if g.xgmi_active is None else f"   XGMI links up {g.xgmi_active}"


def _errors(g: GpuSample) -> str:
    """Its ECC counts, and the rest of what its vendor keeps of its errors: NVIDIA's retired
    pages and last XID, AMD's deferred (poisoned) count."""
    ecc = f"ECC uncorrected {_v(g.ecc_uncorrected)} corrected {_v(g.ecc_corrected)}"
    if g.info.vendor == "amd":
        return f"{ecc} deferred {_v(g.ecc_deferred)}"
    return f"{ecc}   retired pages {_v(g.retired_pages)}   XID {_v(g.xid)}"


def _temperatures(g: GpuSample) -> str:
    """The memory's temperature, with NVIDIA's MIG and virtualization modes; an AMD GPU's
    junction (hotspot) temperature instead, which NVML does not give."""
    mem = f"memory temperature {_v(g.mem_temp_c)} °C"
    if g.info.vendor == "amd":
        return f"{mem}   junction {_v(g.hotspot_temp_c)} °C"
    return f"{mem}   MIG {_v(g.info.mig_mode)}   virtualization {_v(g.info.virtualization)}"


def render_detail(g: GpuSample, model: RigModel, width: int, window: float) -> str:
    info = g.info
    cc = info.compute_capability
    nvidia = info.vendor != "amd"  # CUDA's compute capability, persistence mode: NVIDIA's
    lines = [
        f"[b]GPU{info.index} {escape(info.name)}[/b]  {_runtime(info)}",
        f"UUID {escape(info.uuid)}   PCI {escape(info.pci_bus_id)}",
        *([f"compute {cc[0]}.{cc[1]}" if cc else "compute -"] if nvidia else []),
        f"VBIOS {_v(info.vbios)}   serial {_v(info.serial)}"
        + (f"   persistence {_v(info.persistence_mode)}" if nvidia else ""),
        f"power limit {_v(g.power_limit_w)} W (default {_v(info.power_limit_default_w)},"
        f" max {_v(info.power_limit_max_w)})",
        f"PCIe gen {_v(g.pcie_gen)}/{_v(info.pcie_gen_max)} width x{_v(g.pcie_width)}"
        f"/x{_v(info.pcie_width_max)}{_links(g)}",
        _errors(g),
        f"memory reserved {fmt_bytes(g.memory_reserved)}   energy counter"
        f" {fmt_energy_mj(g.energy_mj)}",
        "clock events: "
        + ("-" if g.throttle_reasons is None else escape(", ".join(g.throttle_reasons) or "none")),
        _temperatures(g),
        *(
            f"  vGPU {v.instance} {escape(v.type_name)}  VM {_v(v.vm)}"
            f"  {fmt_bytes(v.memory_used)} of {fmt_bytes(v.memory_total)}"
            for v in g.vgpus
        ),
        *(
            f"  MIG {escape(m.profile)} GI {m.gpu_instance_id} CI {m.compute_instance_id}"
            f"  {fmt_bytes(m.memory_used)} of {fmt_bytes(m.memory_total)}"
            f"  {_v(m.sm_count)} SMs  {escape(m.uuid)}"
            for m in g.mig
        ),
        "",
        *now_lines(g),
        "",
    ]
    span = span_words(model.history.seconds(), window)
    spark_w = max(20, width - 30)
    for label, metric, hi, unit, scale in (
        ("power", "power_w", float(g.power_limit_w or info.power_limit_max_w or 1.0), "W", 1.0),
        ("util", "util_gpu", 100.0, "%", 1.0),
        ("mem util", "util_mem", 100.0, "%", 1.0),
        ("VRAM", "memory_used", float(info.memory_total or 0), "GiB", GIB),
        ("temp", "temp_c", 100.0, "°C", 1.0),
    ):
        s = model.history.series(info.uuid, metric, window)
        rng = (
            "-"
            if s.lo is None or s.hi is None
            else f"min {s.lo / scale:.1f} max {s.hi / scale:.1f} {unit}"
        )
        now = "-" if s.last is None else f"{s.last / scale:.1f} {unit}"
        lines.append(f"{label:<9}[$spark]{spark(s.values, spark_w, 0.0, hi)}[/]")
        lines.append(f"{'':<9}[$text-muted]now {now}, {rng} over {span}[/]")
    if g.processes:
        lines.append("")
        lines.append("[b]processes[/b]")
        for p in g.processes:
            mem = fmt_bytes(p.used_memory)
            command = command_label(p.command or p.name or "?")
            lines.append(
                f"{p.pid:>8} {p.kind:<3} {escape(p.user or '-'):<10} {mem:>10}"
                f"  {escape(command[: max(10, width - 40)])}"
            )
    return "\n".join(lines)


def now_lines(g: GpuSample) -> list[str]:
    """The GPU's readings now: what the graphs below end at, and what they do not draw."""
    info = g.info
    used = "-" if g.memory_used is None else f"{g.memory_used / GIB:.1f}"
    total = "-" if info.memory_total is None else f"{info.memory_total / GIB:.1f}"  # never 0
    return [
        f"[b]now[/b]  power {num(g.power_w, '{:.0f}')}/{num(g.power_limit_w, '{:.0f} W')}"
        f"   util {num(g.util_gpu, '{:.0f}%')}   mem util {num(g.util_mem, '{:.0f}%')}",
        f"     VRAM {used}/{total} GiB   temp {num(g.temp_c, '{:.0f}°C')}"
        f"   fan {num(g.fan_pct, '{:.0f}%')}"
        + ("" if info.vendor == "amd" else f"   P-state {num(g.pstate, 'P{}')}"),
        f"     clocks SM {num(g.sm_clock_mhz, '{}')}/{num(info.max_sm_clock_mhz, '{}')} MHz"
        f"   memory {num(g.mem_clock_mhz, '{}')}/{num(info.max_mem_clock_mhz, '{}')} MHz",
    ]


class GpuDetailScreen(HistoryModal):
    """A modal over the monitor; the app renders the model on it and on the monitor below.
    ``[``/``]`` page through the GPUs, ``w`` through the history windows."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,d,q", "dismiss", "Close", id="close-detail"),
        Binding("left_square_bracket,k", "step(-1)", "Prev GPU", id="detail-prev"),
        Binding("right_square_bracket,j", "step(1)", "Next GPU", id="detail-next"),
        Binding("w", "cycle_window", "Window", id="detail-window"),
    ]

    def __init__(self, uuid: str) -> None:
        super().__init__()
        self.uuid = uuid

    def show(self, model: RigModel) -> None:
        sample = model.latest
        if sample is None:
            return
        window = host_of(self).monitor_prefs.window_s
        for g in sample.gpus:
            if g.info.uuid == self.uuid:
                self.set_text(render_detail(g, model, self.text_width(), window))
                return

    def action_step(self, step: int) -> None:
        """The next or previous GPU's detail; the monitor below selects it too."""
        host = host_of(self)
        sample = host.model.latest
        if sample is None or not sample.gpus:
            return
        uuids = [g.info.uuid for g in sample.gpus]
        pos = uuids.index(self.uuid) if self.uuid in uuids else 0
        host.monitor_prefs.selected = (pos + step) % len(uuids)
        self.uuid = uuids[host.monitor_prefs.selected]
        host.render_model()

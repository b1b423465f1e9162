"""Everything about one GPU, with wide sparklines; follows the live model."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static

from lltui.app.host import host_of
from lltui.app.model import RigModel
from lltui.app.screens.base import ModelView
from lltui.core.monitor.models import GpuSample
from lltui.core.units import GIB, fmt_bytes, fmt_duration, fmt_energy_mj, spark


def _v(value: object) -> str:
    return "-" if value is None else escape(str(value))


def render_detail(g: GpuSample, model: RigModel, width: int) -> str:
    info = g.info
    cc = info.compute_capability
    lines = [
        f"[b]GPU{info.index} {escape(info.name)}[/b]  CUDA index {_v(info.cuda_index)}",
        f"UUID {escape(info.uuid)}   PCI {escape(info.pci_bus_id)}",
        f"compute {cc[0]}.{cc[1]}" if cc else "compute -",
        f"VBIOS {_v(info.vbios)}   serial {_v(info.serial)}"
        f"   persistence {_v(info.persistence_mode)}",
        f"power limit {_v(g.power_limit_w)} W (default {_v(info.power_limit_default_w)},"
        f" max {_v(info.power_limit_max_w)})",
        f"PCIe gen {_v(g.pcie_gen)}/{_v(info.pcie_gen_max)} width x{_v(g.pcie_width)}"
        f"/x{_v(info.pcie_width_max)}   NVLink links {_v(info.nvlink_links)}"
        f" active {_v(g.nvlink_active)}",
        f"ECC uncorrected {_v(g.ecc_uncorrected)} corrected {_v(g.ecc_corrected)}"
        f"   retired pages {_v(g.retired_pages)}   XID {_v(g.xid)}",
        f"memory reserved {fmt_bytes(g.memory_reserved)}   energy counter"
        f" {fmt_energy_mj(g.energy_mj)}",
        f"clock events: {escape(', '.join(g.throttle_reasons or ()) or 'none')}",
        "",
    ]
    window = model.window_s
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
        lines.append(f"{label:<9}[$spark]{spark(s.values, spark_w, 0.0, hi)}[/]")
        lines.append(f"{'':<9}[$text-muted]{rng} over {fmt_duration(window)}[/]")
    if g.processes:
        lines.append("")
        lines.append("[b]processes[/b]")
        for p in g.processes:
            mem = fmt_bytes(p.used_memory)
            lines.append(
                f"{p.pid:>8} {p.kind:<3} {escape(p.user or '-'):<10} {mem:>10}"
                f"  {escape((p.command or p.name or '?')[: max(10, width - 40)])}"
            )
    return "\n".join(lines)


class GpuDetailScreen(ModelView, ModalScreen[None]):
    """A modal over the monitor; the app renders the model on it and on the monitor below."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,d", "dismiss", "Close", id="close-detail")
    ]

    def __init__(self, uuid: str) -> None:
        super().__init__()
        self.uuid = uuid

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-box"):
            yield Static("", id="detail")

    def on_mount(self) -> None:
        # the app renders only screens it sees mounted; this one draws its first frame itself
        model = host_of(self).model
        with model.lock:
            self.show(model)

    def show(self, model: RigModel) -> None:
        sample = model.latest
        if sample is None:
            return
        for g in sample.gpus:
            if g.info.uuid == self.uuid:
                width = self.query_one("#detail-box").size.width or self.size.width
                self.query_one("#detail", Static).update(render_detail(g, model, width))
                return

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        return  # the detail has no status line

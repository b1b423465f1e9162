"""One GPU: VRAM and power bars, utilisation, temperature, clocks, links, throttle reasons,
and sparklines of power, utilisation and VRAM with their min/max."""

from __future__ import annotations

from textual.markup import escape
from textual.widgets import Static

from lltui.app.host import host_of
from lltui.core.monitor.history import RigHistory
from lltui.core.monitor.models import GpuSample
from lltui.core.monitor.throttle import SLOWDOWNS
from lltui.core.monitor.xid import xid_meaning
from lltui.core.units import (
    GIB,
    MIB,
    bar,
    fmt_pct,
    fmt_rate_kbs,
    spark,
)

LABEL_W = 5


def _level(pct: float | None, warn: float, hot: float) -> str:
    if pct is None:
        return "$text-muted"
    if pct >= hot:
        return "$gpu-hot"
    if pct >= warn:
        return "$gpu-warn"
    return "$gpu-ok"


def _bar(fraction: float | None, width: int, var: str) -> str:
    filled = bar(fraction, width, empty=" ")
    body = filled.rstrip(" ")
    rest = width - len(body)
    return f"[{var}]{body}[/][on $bar-empty]{' ' * rest}[/]"


def _num(v: float | None, fmt: str = "{:.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def short_bus(bus: str) -> str:
    """``00000000:3B:00.0`` -> ``3B:00.0``."""
    parts = bus.split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else bus


def render_card(
    g: GpuSample,
    history: RigHistory,
    *,
    width: int,
    window_s: float,
    graphs: bool,
    selected: bool = False,
) -> str:
    """Markup for one card, ``width`` cells wide."""
    width = max(width, 40)
    title = _card_title(g, selected)
    if g.lost:
        return (
            f"{title}\n[b $error]LOST[/] {escape(g.error or 'the GPU fell off the bus')}\n"
            "[$text-muted]other GPUs keep updating; a reboot or reset brings it back[/]"
        )
    bar_w = max(10, min(30, width - 40))
    lines = [
        f"{title}  {_card_state(g)}",
        _memory_line(g, bar_w),
        _power_line(g, bar_w),
        _clocks_line(g),
    ]
    extras = _extras(g)
    if extras:
        lines.append("  ".join(extras))
    if graphs:
        lines += _graph_lines(g, history, width, window_s)
    return "\n".join(lines)


def _card_title(g: GpuSample, selected: bool) -> str:
    info = g.info
    cuda = f"CUDA{info.cuda_index}" if info.cuda_index is not None else "CUDA-"
    marker = "[reverse]" if selected else ""
    marker_end = "[/reverse]" if selected else ""
    return (
        f"{marker}[b]GPU{info.index}[/b]{marker_end} [b]{escape(info.name)}[/b]"
        f" [$text-muted]{cuda} {short_bus(info.pci_bus_id)}[/]"
    )


def _card_state(g: GpuSample) -> str:
    """Temperature, fan and P-state, right of the title."""
    temp_s = f"[{_level(g.temp_c, 75, 85)}]{_num(g.temp_c)}°C[/]"
    fan = f" fan {_num(g.fan_pct)}%" if g.fan_pct is not None else ""
    pstate = f" P{g.pstate}" if g.pstate is not None else ""
    return f"{temp_s}{fan}{pstate}"


def _memory_line(g: GpuSample, bar_w: int) -> str:
    total = g.info.memory_total
    used = g.memory_used
    mem_frac = used / total if used is not None and total else None
    mem_pct = None if mem_frac is None else 100 * mem_frac
    used_s = "-" if used is None else f"{used / MIB:.0f}"
    return (
        f"{'VRAM':<{LABEL_W}}{_bar(mem_frac, bar_w, '$bar-vram')} "
        f"{used_s}/{total / MIB:.0f} MiB [{_level(mem_pct, 85, 95)}]{fmt_pct(mem_pct, width=4)}[/]"
    )


def _power_line(g: GpuSample, bar_w: int) -> str:
    limit = g.power_limit_w
    pwr_frac = g.power_w / limit if g.power_w is not None and limit else None
    util_s = f"[{_level(g.util_gpu, 101, 101)}]{fmt_pct(g.util_gpu, width=4)}[/]"
    return (
        f"{'PWR':<{LABEL_W}}{_bar(pwr_frac, bar_w, '$bar-power')} "
        f"{_num(g.power_w)}/{_num(limit)} W"
        f" {fmt_pct(None if pwr_frac is None else 100 * pwr_frac, width=4)}"
        f"  util{util_s} mem{fmt_pct(g.util_mem, width=4)}"
    )


def _clocks_line(g: GpuSample) -> str:
    info = g.info
    sm = f"SM {_num(g.sm_clock_mhz)}/{_num(info.max_sm_clock_mhz)}"
    mem = f"MEM {_num(g.mem_clock_mhz)}/{_num(info.max_mem_clock_mhz)} MHz"
    pcie = ""
    if g.pcie_gen is not None or g.pcie_rx_kbs is not None:
        link = f"{_num(g.pcie_gen)}x{_num(g.pcie_width)}"
        degraded = (
            info.pcie_width_max is not None
            and g.pcie_width is not None
            and g.pcie_width < info.pcie_width_max
        )
        link_s = f"[$gpu-warn]{link}[/]" if degraded else link
        pcie = f"  PCIe {link_s} ↓{fmt_rate_kbs(g.pcie_rx_kbs)} ↑{fmt_rate_kbs(g.pcie_tx_kbs)}"
    return f"{sm} {mem}{pcie}"


def _extras(g: GpuSample) -> list[str]:
    """Throttling, NVLink and errors: only what there is to say."""
    extras = []
    reasons = g.throttle_reasons or ()
    slow = [r for r in reasons if r in SLOWDOWNS]
    if slow:
        extras.append(f"[b $gpu-hot]throttled: {escape(', '.join(slow))}[/]")
    elif reasons:
        extras.append(f"[$text-muted]clocks: {escape(', '.join(reasons))}[/]")
    if g.nvlink_active:
        extras.append(
            f"NVLink {g.nvlink_active} up ↓{fmt_rate_kbs(g.nvlink_rx_kbs)}"
            f" ↑{fmt_rate_kbs(g.nvlink_tx_kbs)}"
        )
    if g.ecc_uncorrected:
        extras.append(f"[b $error]ECC uncorrected {g.ecc_uncorrected}[/]")
    if g.retired_pages:
        extras.append(f"[$gpu-warn]retired pages {g.retired_pages}[/]")
    if g.xid is not None:
        extras.append(f"[b $error]XID {g.xid}: {escape(xid_meaning(g.xid))}[/]")
    if g.error:
        extras.append(f"[$gpu-warn]{escape(g.error)}[/]")
    return extras


def _graph_lines(g: GpuSample, history: RigHistory, width: int, window_s: float) -> list[str]:
    """Power, utilisation and VRAM sparklines on fixed axes, with their range."""
    info = g.info
    range_w = 13
    spark_w = max(10, width - LABEL_W - range_w - 4)
    limit = g.power_limit_w
    lines = []
    for label, metric, lo, hi, unit, scale in (
        ("pwr", "power_w", 0.0, float(limit or info.power_limit_max_w or 1.0), "W", 1.0),
        ("util", "util_gpu", 0.0, 100.0, "%", 1.0),
        ("vram", "memory_used", 0.0, float(info.memory_total), "GiB", GIB),
    ):
        s = history.series(info.uuid, metric, window_s)
        if s.lo is None or s.hi is None:
            rng = "-"
        elif unit == "GiB":
            rng = f"{s.lo / scale:.1f}..{s.hi / scale:.1f}{unit}"
        else:
            rng = f"{s.lo / scale:.0f}..{s.hi / scale:.0f}{unit}"
        line = spark(s.values, spark_w, lo, hi)
        lines.append(f"{label:<{LABEL_W}}[$text-muted]{rng:>{range_w}}[/] [$spark]{line}[/]")
    return lines


class GpuCard(Static):
    """A card for one GPU, updated in place each tick (no relayout unless its height changes)."""

    DEFAULT_CSS = """
    GpuCard { height: auto; }
    """

    def __init__(self, uuid: str, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.uuid = uuid

    def on_click(self) -> None:
        host_of(self).select_gpu_uuid(self.uuid)

    def show(self, text: str) -> None:
        # Relayout only when the number of lines differs from the height we have.
        lines = text.count("\n") + 1
        self.update(text, layout=lines != self.content_size.height)

"""One GPU, as a card (VRAM and power bars, utilisation, temperature, clocks, links, throttle
reasons, sparklines of power, utilisation and VRAM) or as one or two compact lines.

Both are rich ``Text`` built with styles resolved once per theme: no markup is parsed on a
tick, and a card that is off screen or shows what it already shows is not rebuilt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.geometry import Region
from textual.message import Message

from lltui.app.monitor_layout import CARD_LINES
from lltui.app.widgets.text_lines import TextBuilder, TextLines
from lltui.core.monitor.alerts import CRITICAL, WARNING
from lltui.core.monitor.history import RigHistory
from lltui.core.monitor.models import GpuSample
from lltui.core.monitor.throttle import SLOWDOWNS
from lltui.core.monitor.xid import xid_meaning
from lltui.core.units import GIB, MIB, bar, fmt_pct, fmt_rate_kbs, spark

LABEL_W = 5
# when a reading turns warm (gpu-warn) and hot (gpu-hot); the key help's legend says them
TEMP_WARN_C, TEMP_HOT_C = 75, 85
MEM_TEMP_WARN_C, MEM_TEMP_HOT_C = 85, 95  # HBM throttles near 95
VRAM_WARN_PCT, VRAM_HOT_PCT = 85, 95
COMPACT_WIDE = 60  # a compact line this wide has labels and full numbers
COMPACT_NAME_WIDE = 16
COMPACT_NAME_NARROW = 9
NAME_NOISE = ("NVIDIA ", "GeForce ", "Tesla ", "Quadro ", "AMD ", "Instinct ", "Radeon ")
# one letter per slowdown for the narrowest compact line, a word where there is room
THROTTLE_SHORT = {
    "power cap": ("P", "pwr cap"),
    "power brake": ("B", "pwr brake"),
    "hw slowdown": ("H", "hw slow"),
    "sw thermal": ("T", "thermal"),
    "hw thermal": ("T", "hw therm"),
}


def theme_colour(variables: dict[str, str], name: str, fallback: str = "#808080") -> str:
    """A theme variable's colour as TCSS would draw it: translucent colours blended over the
    background; "auto 60%" (``$text-muted``) is the background's contrasting text at 60%."""
    background = Color.parse(variables.get("background", "#000000"))
    value = variables.get(name, fallback)
    if value.startswith("auto"):
        pct = value.removeprefix("auto").strip().rstrip("%")
        alpha = float(pct) / 100 if pct else 0.95
        return (background + background.get_contrast_text(alpha)).hex
    return (background + Color.parse(value)).hex


def theme_style(variables: dict[str, str], name: str, *, bold: bool = False) -> Style:
    """A rich style in a theme variable's colour."""
    return Style(color=theme_colour(variables, name), bold=bold or None)


@dataclass(frozen=True, slots=True)
class CardStyles:
    """The theme's colours as rich styles, worked out once per theme."""

    theme: str
    plain: Style
    bold: Style
    muted: Style
    ok: Style
    warn: Style
    hot: Style
    hot_bold: Style
    error_bold: Style
    vram: Style
    power: Style
    empty: Style
    spark: Style
    reverse_bold: Style

    @classmethod
    def from_variables(cls, theme: str, variables: dict[str, str]) -> CardStyles:
        def fg(name: str, bold: bool = False) -> Style:
            return theme_style(variables, name, bold=bold)

        return cls(
            theme=theme,
            plain=Style(),
            bold=Style(bold=True),
            muted=fg("text-muted"),
            ok=fg("gpu-ok"),
            warn=fg("gpu-warn"),
            hot=fg("gpu-hot"),
            hot_bold=fg("gpu-hot", bold=True),
            error_bold=fg("error", bold=True),
            vram=fg("bar-vram"),
            power=fg("bar-power"),
            empty=Style(bgcolor=theme_colour(variables, "bar-empty")),
            spark=fg("spark"),
            reverse_bold=Style(reverse=True, bold=True),
        )

    def level(self, pct: float | None, warn: float, hot: float) -> Style:
        if pct is None:
            return self.muted
        if pct >= hot:
            return self.hot
        if pct >= warn:
            return self.warn
        return self.ok


def num(v: float | None, fmt: str = "{:.0f}") -> str:
    """``v`` in ``fmt``, or "-" where it is unknown (never a 0)."""
    return "-" if v is None else fmt.format(v)


def short_bus(bus: str) -> str:
    """``00000000:3B:00.0`` -> ``3B:00.0``."""
    parts = bus.split(":")
    return ":".join(parts[-2:]) if len(parts) >= 2 else bus


def short_name(name: str, width: int) -> str:
    """A GPU's name in ``width`` cells: without the vendor's brand words, then its first
    word (``Tesla V100-SXM3-32GB`` -> ``V100-SXM3-32GB`` -> ``V100``), else empty."""
    for noise in NAME_NOISE:
        name = name.replace(noise, "")
    if len(name) <= width:
        return name
    first = name.split(" ")[0]
    if first in ("RTX", "RX", "PRO") and " " in name:  # "RTX 3090", "RX 7900 XTX"
        first = name.split(" ")[1]
    if len(first) > width:
        first = first.split("-")[0]
    # a cut name misleads ("V10" for a V100): none at all rather than part of one
    return first if len(first) <= width else ""


def _bar(
    text: Text | TextBuilder, fraction: float | None, width: int, style: Style, styles: CardStyles
) -> None:
    filled = bar(fraction, width, empty=" ").rstrip(" ")
    text.append(filled, style)
    text.append(" " * (width - len(filled)), styles.empty)


def _throttle(g: GpuSample) -> tuple[str, ...]:
    return tuple(r for r in (g.throttle_reasons or ()) if r in SLOWDOWNS)


# -- the card --------------------------------------------------------------------------------
def card_lines(
    g: GpuSample,
    history: RigHistory,
    styles: CardStyles,
    *,
    width: int,
    window_s: float,
    graphs: bool,
    selected: bool = False,
) -> list[Text]:
    """The lines of one card, ``width`` cells wide, :data:`CARD_LINES` of them (plus three
    of graphs)."""
    width = max(width, 40)
    lines = [_card_title(g, selected, styles)]
    if g.lost:
        lines.append(
            Text.assemble(("LOST", styles.error_bold), " ", g.error or "the GPU fell off the bus")
        )
        lines.append(
            Text("other GPUs keep updating; a reboot or reset brings it back", styles.muted)
        )
    else:
        lines[0].append("  ")
        lines[0].append_text(_card_state(g, styles))
        bar_w = max(10, min(30, width - 40))
        lines += [
            _memory_line(g, bar_w, styles),
            _power_line(g, bar_w, styles),
            _clocks_line(g, styles),
        ]
        lines.append(Text("  ").join(_extras(g, styles)))
    # a fixed height: a throttle flag coming and going does not move the cards below
    lines += [Text() for _ in range(CARD_LINES - len(lines))]
    if graphs and not g.lost:
        lines += _graph_lines(g, history, width, window_s, styles)
    return lines


def _card_title(g: GpuSample, selected: bool, styles: CardStyles) -> Text:
    info = g.info
    if info.gfx_target:  # AMD: the ISA HIP builds for, and an Instinct's partition modes
        parts = "/".join(p for p in (info.compute_partition, info.memory_partition) if p)
        runtime = info.gfx_target + (f" {parts}" if parts else "")
    else:
        runtime = f"CUDA{info.cuda_index}" if info.cuda_index is not None else "CUDA-"
    return Text.assemble(
        (f"GPU{info.index}", styles.reverse_bold if selected else styles.bold),
        " ",
        (info.name, styles.bold),
        (f" {runtime} {short_bus(info.pci_bus_id)}", styles.muted),
    )


def _card_state(g: GpuSample, styles: CardStyles) -> Text:
    """Temperature, fan and P-state, right of the title."""
    text = Text()  # a style given to Text() would colour all that is appended after
    text.append(f"{num(g.temp_c)}°C", styles.level(g.temp_c, TEMP_WARN_C, TEMP_HOT_C))
    if g.hotspot_temp_c is not None and g.hotspot_temp_c != g.temp_c:
        text.append(f" jct {num(g.hotspot_temp_c)}°C")
    if g.mem_temp_c is not None:
        text.append(
            f" mem {num(g.mem_temp_c)}°C",
            styles.level(g.mem_temp_c, MEM_TEMP_WARN_C, MEM_TEMP_HOT_C),
        )
    if g.fan_pct is not None:
        text.append(f" fan {num(g.fan_pct)}%")
    if g.pstate is not None:
        text.append(f" P{g.pstate}")
    return text


def _memory_line(g: GpuSample, bar_w: int, styles: CardStyles) -> Text:
    total = g.info.memory_total
    used = g.memory_used
    mem_frac = used / total if used is not None and total else None
    mem_pct = None if mem_frac is None else 100 * mem_frac
    used_s = "-" if used is None else f"{used / MIB:.0f}"
    text = Text(f"{'VRAM':<{LABEL_W}}")
    _bar(text, mem_frac, bar_w, styles.vram, styles)
    total_s = "-" if total is None else f"{total / MIB:.0f}"  # unknown: never 0
    text.append(f" {used_s}/{total_s} MiB ")
    text.append(fmt_pct(mem_pct, width=4), styles.level(mem_pct, VRAM_WARN_PCT, VRAM_HOT_PCT))
    return text


def _power_line(g: GpuSample, bar_w: int, styles: CardStyles) -> Text:
    limit = g.power_limit_w
    pwr_frac = g.power_w / limit if g.power_w is not None and limit else None
    text = Text(f"{'PWR':<{LABEL_W}}")
    _bar(text, pwr_frac, bar_w, styles.power, styles)
    text.append(
        f" {num(g.power_w)}/{num(limit)} W"
        f" {fmt_pct(None if pwr_frac is None else 100 * pwr_frac, width=4)}  util"
    )
    text.append(fmt_pct(g.util_gpu, width=4), styles.level(g.util_gpu, 101, 101))
    text.append(f" mbw{fmt_pct(g.util_mem, width=4)}")  # memory bandwidth: time busy
    return text


def _clocks_line(g: GpuSample, styles: CardStyles) -> Text:
    info = g.info
    text = Text(
        f"SM {num(g.sm_clock_mhz)}/{num(info.max_sm_clock_mhz)}"
        f" MEM {num(g.mem_clock_mhz)}/{num(info.max_mem_clock_mhz)} MHz"
    )
    if g.pcie_gen is not None or g.pcie_rx_kbs is not None:
        link = f"{num(g.pcie_gen)}x{num(g.pcie_width)}"
        degraded = (
            info.pcie_width_max is not None
            and g.pcie_width is not None
            and g.pcie_width < info.pcie_width_max
        )
        text.append("  PCIe ")
        text.append(link, styles.warn if degraded else styles.plain)
        text.append(f" ↓{fmt_rate_kbs(g.pcie_rx_kbs)} ↑{fmt_rate_kbs(g.pcie_tx_kbs)}")
    return text


def _extras(g: GpuSample, styles: CardStyles) -> list[Text]:
    """Throttling, NVLink and errors: only what there is to say."""
    extras = []
    reasons = g.throttle_reasons or ()
    slow = _throttle(g)
    if slow:
        extras.append(Text(f"throttled: {', '.join(slow)}", styles.hot_bold))
    elif reasons:
        extras.append(Text(f"clocks: {', '.join(reasons)}", styles.muted))
    if g.nvlink_active:
        extras.append(
            Text(
                f"NVLink {g.nvlink_active} up ↓{fmt_rate_kbs(g.nvlink_rx_kbs)}"
                f" ↑{fmt_rate_kbs(g.nvlink_tx_kbs)}"
            )
        )
    if g.xgmi_active:
        extras.append(
            Text(
                f"XGMI {g.xgmi_active} up ↓{fmt_rate_kbs(g.xgmi_rx_kbs)}"
                f" ↑{fmt_rate_kbs(g.xgmi_tx_kbs)}"
            )
        )
    if g.gtt_shown:
        # host memory the GPU maps: where an APU's model lives, a spill on a discrete card
        extras.append(Text(f"GTT {(g.gtt_used or 0) / GIB:.1f}/{(g.gtt_total or 0) / GIB:.0f}G"))
    if g.ecc_uncorrected:
        extras.append(Text(f"ECC uncorrected {g.ecc_uncorrected}", styles.error_bold))
    if g.ecc_deferred:
        extras.append(Text(f"ECC deferred {g.ecc_deferred}", styles.warn))
    if g.retired_pages:
        extras.append(Text(f"retired pages {g.retired_pages}", styles.warn))
    if g.mig:
        parts = [f"{m.profile} {(m.memory_used or 0) / GIB:.1f}G" for m in g.mig]
        extras.append(Text("MIG " + " · ".join(parts), styles.plain))
    if g.vgpus:
        parts = [f"{v.type_name} {(v.memory_used or 0) / GIB:.1f}G" for v in g.vgpus]
        extras.append(Text(f"{len(g.vgpus)} vGPU: " + " · ".join(parts), styles.plain))
    elif g.info.virtualization == "vgpu":
        extras.append(Text("vGPU (in a VM)", styles.muted))
    if g.xid is not None:
        extras.append(Text(f"XID {g.xid}: {xid_meaning(g.xid)}", styles.error_bold))
    if g.error:
        extras.append(Text(g.error, styles.warn))
    return extras


def _graph_lines(
    g: GpuSample, history: RigHistory, width: int, window_s: float, styles: CardStyles
) -> list[Text]:
    """Power, utilisation and VRAM sparklines on fixed axes, with their range."""
    info = g.info
    range_w = 13
    spark_w = max(10, width - LABEL_W - range_w - 4)
    limit = g.power_limit_w
    lines = []
    for label, metric, lo, hi, unit, scale in (
        ("pwr", "power_w", 0.0, float(limit or info.power_limit_max_w or 1.0), "W", 1.0),
        ("util", "util_gpu", 0.0, 100.0, "%", 1.0),
        ("vram", "memory_used", 0.0, float(info.memory_total or 0), "GiB", GIB),
    ):
        s = history.series(info.uuid, metric, window_s)
        if s.lo is None or s.hi is None:
            rng = "-"
        elif unit == "GiB":
            rng = f"{s.lo / scale:.1f}..{s.hi / scale:.1f}{unit}"
        else:
            rng = f"{s.lo / scale:.0f}..{s.hi / scale:.0f}{unit}"
        lines.append(
            Text.assemble(
                f"{label:<{LABEL_W}}",
                (f"{rng:>{range_w}}", styles.muted),
                " ",
                (spark(s.values, spark_w, lo, hi), styles.spark),
            )
        )
    return lines


# -- the compact line ------------------------------------------------------------------------
def compact_name_width(names: list[str], width: int) -> int:
    """The name column of compact lines ``width`` cells wide: the longest short name, so
    the bars of a mixed rig line up."""
    cap = COMPACT_NAME_WIDE if width >= COMPACT_WIDE else COMPACT_NAME_NARROW
    return max((len(short_name(n, cap)) for n in names), default=0)


def compact_lines(
    g: GpuSample,
    styles: CardStyles,
    *,
    width: int,
    selected: bool,
    name_width: int = COMPACT_NAME_WIDE,
    index_width: int = 2,
    lines: int = 1,
    history: RigHistory | None = None,
    window_s: float = 60.0,
) -> list[Text]:
    """The line (or two) of one GPU in ``width`` cells: index, name, VRAM bar and numbers,
    utilisation, power, temperature and a throttle flag. Below :data:`COMPACT_WIDE` cells
    the labels go and the numbers shrink, so 16 GPUs fit two to a line in 80 columns.
    ``lines`` 2 adds clocks, PCIe and NVLink traffic, fan and P-state below; more (with
    ``history``) add sparklines of utilisation, VRAM and power, in that order."""
    first = _compact_text(g, styles, width, selected, name_width, index_width, min(lines, 2))
    if lines <= 2 or history is None:
        return first
    indent = " " * (4 + index_width if width >= COMPACT_WIDE else index_width + 1)
    graphs = _graph_lines(g, history, width - len(indent), window_s, styles)
    picked = [graphs[i] for i in (1, 2, 0)[: lines - 2]]  # pwr, util, vram as made
    return first + [Text(indent) + line for line in picked]


def _compact_text(
    g: GpuSample,
    styles: CardStyles,
    width: int,
    selected: bool,
    name_width: int,
    index_width: int,
    lines: int,
) -> list[Text]:
    wide = width >= COMPACT_WIDE
    info = g.info
    index = f"GPU{info.index}".ljust(3 + index_width) if wide else f"{info.index:>{index_width}}"
    text = TextBuilder()
    text.append(index, styles.reverse_bold if selected else styles.bold)
    if g.lost:
        text.append(f" {short_name(info.name, name_width)} ")
        text.append("LOST", styles.error_bold)
        text.append(f" {g.error or 'the GPU fell off the bus'}")
        if lines > 1:  # the same height as the others, so the rows below stay put
            below = TextBuilder(" " * (len(index) + 1))
            below.append("other GPUs keep updating", styles.muted)
            return [text.build(), below.build()]
        return [text.build()]
    total = info.memory_total
    used = g.memory_used
    frac = used / total if used is not None and total else None
    pct = None if frac is None else 100 * frac
    used_s = "-" if used is None else f"{used / GIB:.1f}"
    total_s = "-" if total is None else f"{total / GIB:.0f}"  # unknown: never 0
    mem = f"{used_s}/{total_s} GiB" if wide else f"{used_s}/{total_s}G"
    util = fmt_pct(g.util_gpu, width=4)
    power = f"{num(g.power_w):>4}/{num(g.power_limit_w)}W" if wide else f"{num(g.power_w):>4}W"
    temp = f"{num(g.temp_c):>3}°C" if wide else f"{num(g.temp_c):>3}°"
    slow = _throttle(g)
    flag = THROTTLE_SHORT.get(slow[0], ("!", slow[0]))[1 if wide else 0] if slow else ""
    util_label = " util" if wide else " "
    flag_w = 10 if wide else 2  # kept when empty, so the columns of all lines agree
    tail = 1 + len(mem) + len(util_label) + len(util) + 1 + len(power) + 1 + len(temp) + flag_w
    room = width - len(index) - 1 - tail
    # the name before the bar, down to its first word; the bar takes what is left
    name_w = name_width if room >= name_width + 3 else max(0, room - 3)
    name = short_name(info.name, name_w) if name_w >= 2 else ""
    bar_w = min(40, max(0, room - (name_w + 1 if name else 0)))
    text.append(" ")
    if name:
        text.append(name.ljust(name_w) + " ")
    _bar(text, frac, bar_w, styles.vram, styles)
    text.append(" ")
    text.append(mem, styles.level(pct, VRAM_WARN_PCT, VRAM_HOT_PCT))
    text.append(util_label)
    text.append(util, styles.level(g.util_gpu, 101, 101))
    text.append(f" {power} ")
    text.append(temp, styles.level(g.temp_c, TEMP_WARN_C, TEMP_HOT_C))
    if flag:
        text.append(" ")
        text.append(flag, styles.hot_bold)
    if lines > 1:
        indent = len(index) + 1
        below = TextBuilder(" " * indent)
        _compact_second_line(below, g, styles, wide, width)
        return [text.build(), below.build()]
    return [text.build()]


def _compact_second_line(
    text: TextBuilder, g: GpuSample, styles: CardStyles, wide: bool, width: int
) -> None:
    """Clocks, throttling, links, fan and P-state: what a card shows that one line has no
    room for, added to ``text`` (its indent) as much of it as fits ``width`` (whole items,
    none cut)."""
    info = g.info
    sm = f"SM {num(g.sm_clock_mhz)}"
    items: list[tuple[str, Style]] = [
        (f"{sm}/{num(info.max_sm_clock_mhz)} MHz" if wide else f"{sm} MHz", styles.muted)
    ]
    slow = _throttle(g)
    if slow:
        items.append((", ".join(slow), styles.hot_bold))
    if g.util_mem is not None:  # memory bandwidth: the share of time memory was busy
        items.append((f"mbw {g.util_mem:.0f}%", styles.muted))
    if g.pcie_rx_kbs is not None or g.pcie_tx_kbs is not None:
        pcie = "PCIe " if wide else ""
        rates = f"↓{fmt_rate_kbs(g.pcie_rx_kbs)} ↑{fmt_rate_kbs(g.pcie_tx_kbs)}"
        items.append((pcie + rates, styles.muted))
    if g.nvlink_active:
        rates = f"↓{fmt_rate_kbs(g.nvlink_rx_kbs)} ↑{fmt_rate_kbs(g.nvlink_tx_kbs)}"
        items.append(("NVL " + rates, styles.muted))
    if g.xgmi_active:
        rates = f"↓{fmt_rate_kbs(g.xgmi_rx_kbs)} ↑{fmt_rate_kbs(g.xgmi_tx_kbs)}"
        items.append(("XGMI " + rates, styles.muted))
    if g.fan_pct is not None:
        items.append((f"fan {num(g.fan_pct)}%", styles.muted))
    if g.pstate is not None:
        items.append((f"P{g.pstate}", styles.muted))
    indent = len(text)
    for item, style in items:
        gap = "  " if len(text) > indent else ""
        if len(text) + len(gap) + len(item) > width:
            continue  # a later, shorter item may still fit
        text.append(gap)
        text.append(item, style)


@dataclass(frozen=True, slots=True)
class CardView:
    """What a card shows; a card given the same view again does nothing."""

    sample: GpuSample
    styles: CardStyles
    width: int
    compact: bool
    graphs: bool
    window_s: float
    selected: bool
    history_seq: int  # the sparklines move with the history, not only the sample
    name_width: int = COMPACT_NAME_WIDE
    index_width: int = 2  # digits of the highest GPU index
    lines: int = 1


class GpuCard(TextLines):
    """A card (or compact line) for one GPU. Rebuilt only when what it shows changed and
    it is on screen; one scrolled out of view is rebuilt when it comes back (``flush``).
    Where it is comes from its place in the scroll area, not from the last frame drawn, so
    a card scrolled into view a moment ago counts as in view.

    A new view repaints only the columns that changed (:class:`TextLines`)."""

    DEFAULT_CSS = """
    GpuCard { height: auto; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, uuid: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.uuid = uuid
        self._view: CardView | None = None
        self._history: RigHistory | None = None
        self._dirty = False
        self.renders = 0  # content builds, for tests and the bench
        self._marks: tuple[bool, bool, bool, str | None] | None = None

    class Clicked(Message):
        """A card was clicked: the monitor selects its GPU (or opens its detail)."""

        def __init__(self, uuid: str) -> None:
            super().__init__()
            self.uuid = uuid

    def on_click(self) -> None:
        self.post_message(self.Clicked(self.uuid))

    def mark(self, *, lost: bool, selected: bool, stale: bool, alert: str | None) -> None:
        """Set the classes that mark the card: lost, selected, stale and its worst alert's
        severity (``warning``, ``critical`` or None); only those that changed are set (a
        class set costs a walk of the styles, every card every tick)."""
        marks = (lost, selected, stale, alert)
        if marks == self._marks:
            return
        self._marks = marks
        self.set_class(lost, "-lost")
        self.set_class(selected, "-selected")
        self.set_class(stale, "-stale")
        self.set_class(alert == WARNING, "-alert-warning")
        self.set_class(alert == CRITICAL, "-alert-critical")

    def mark_stale(self, stale: bool) -> None:
        lost, selected, _stale, alert = self._marks or (False, False, False, None)
        self.mark(lost=lost, selected=selected, stale=stale, alert=alert)

    def show(self, view: CardView, history: RigHistory, window: Region | None = None) -> None:
        """Take what to show; build it now if the card is inside ``window`` (the visible
        part of the scroll area, in its content's coordinates; None: all of it)."""
        if view == self._view:
            return
        self._view = view
        self._history = history
        self._dirty = True
        self.flush(window)

    def in_window(self, window: Region | None) -> bool:
        """Whether any of the card is inside ``window`` (a card not laid out yet counts as
        inside: it is about to be)."""
        if window is None:
            return True
        where = self.virtual_region
        return not where or where.overlaps(window)

    def flush(self, window: Region | None = None) -> bool:
        """Build and show the latest view if it is pending and the card is in ``window``."""
        view = self._view
        if not self._dirty or view is None or self._history is None:
            return False
        if not self.in_window(window):
            return False
        self._dirty = False
        g = view.sample
        if view.compact:
            lines = compact_lines(
                g,
                view.styles,
                width=view.width,
                selected=view.selected,
                name_width=view.name_width,
                index_width=view.index_width,
                lines=view.lines,
                history=self._history,
                window_s=view.window_s,
            )
        else:
            lines = card_lines(
                g,
                self._history,
                view.styles,
                width=view.width,
                window_s=view.window_s,
                graphs=view.graphs,
                selected=view.selected,
            )
        self.renders += 1
        self.update_lines(lines)
        return True

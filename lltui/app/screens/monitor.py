"""The monitor view: rig summary, one card per GPU, the process table, host CPU/RAM."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, VerticalScroll
from textual.geometry import Region

from lltui.app.monitor_layout import PROCESS_RESERVE, MonitorLayout, plan_layout
from lltui.app.rig_model import RigModel
from lltui.app.screens.base import LltuiScreen
from lltui.app.state.monitor import MonitorPrefs
from lltui.app.widgets.footer import LltuiFooter
from lltui.app.widgets.gpu_card import (
    CardStyles,
    CardView,
    GpuCard,
    compact_name_width,
)
from lltui.app.widgets.process_table import ProcessPane, ProcessTable
from lltui.app.widgets.status import Banner, StatusBar, show_header
from lltui.app.widgets.text_lines import TextLines
from lltui.core.monitor.alerts import CRITICAL, Alert
from lltui.core.monitor.balance import Imbalance, imbalances
from lltui.core.monitor.models import RigSample
from lltui.core.text import counted
from lltui.core.units import (
    GIB,
    compact_indexes,
    fmt_bytes,
    fmt_duration,
    fmt_energy_mj,
    fmt_pct,
    fmt_time,
)

# the monitor's own keys (the app's are in keys.py), each with an id for the keymap
MONITOR_BINDINGS: list[BindingType] = [
    Binding("s", "cycle_sort", "Sort", id="sort"),
    Binding("r", "reverse_sort", "Reverse", id="sort-reverse", show=False),
    Binding("w", "cycle_window", "Window", id="window"),
    Binding("g", "toggle_graphs", "Graphs", id="graphs"),
    Binding("l", "cycle_layout", "Layout", id="layout"),
    Binding("left_square_bracket,k", "select_gpu(-1)", "Prev GPU", id="gpu-prev", show=False),
    Binding("right_square_bracket,j", "select_gpu(1)", "Next GPU", id="gpu-next", show=False),
    Binding("enter,d", "gpu_detail", "Detail", id="gpu-detail"),
]


def _known_sum(values: Iterable[float | None]) -> float | None:
    """The sum where every GPU says its value; None ("-") where one does not: never a 0
    for what a source does not report."""
    out = 0.0
    for v in values:
        if v is None:
            return None
        out += v
    return out


def _fmt(value: float | None, unit: float, spec: str) -> str:
    return "-" if value is None else format(value / unit, spec)


def render_rig_line(
    sample: RigSample, model: RigModel, styles: CardStyles, width: int = 200
) -> Text:
    """Totals over the GPUs, energy since start, host, and the load balance of what they
    serve; each line fits 78 columns (``width`` below 84 tightens the balance line)."""
    live = [g for g in sample.gpus if not g.lost]
    total = _known_sum(g.info.memory_total for g in live)
    used = _known_sum(g.memory_used for g in live)
    free = _known_sum(g.free_bytes for g in live)
    power = _known_sum(g.power_w for g in live)
    limit = _known_sum(g.power_limit_w for g in live)
    energy = model.history.energy_since_start_mj()
    lost = len(sample.gpus) - len(live)
    n = len(sample.gpus)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(counted(n, "GPU"), styles.bold)
    text.append(
        f"  VRAM {_fmt(used, GIB, '.1f')}/{_fmt(total, GIB, '.1f')} GiB"
        f" ({_fmt(free, GIB, '.1f')} free)"
        f"  power {_fmt(power, 1, '.0f')}/{_fmt(limit, 1, '.0f')} W"
    )
    if lost:
        text.append("  ")
        text.append(f"{lost} lost", styles.error_bold)
    text.append(f"\nenergy {fmt_energy_mj(energy)} in {fmt_duration(model.history.seconds())}")
    cost = energy_cost(energy, model.energy_price)
    if cost is not None:
        text.append(f" ≈ {cost:.2f}{' ' + model.currency if model.currency else ''}")
    host = sample.host
    if host.cpu_pct is not None or host.mem_total:
        used_gib = (host.mem_used or 0) / GIB
        total_gib = (host.mem_total or 0) / GIB
        text.append("  ")
        text.append("host", styles.bold)
        text.append(
            f" CPU {fmt_pct(host.cpu_pct)}/{host.cpu_count or '?'}"
            f"  RAM {used_gib:.1f}/{total_gib:.1f} GiB"
        )
        if host.load_1m is not None:
            text.append(f"  load {host.load_1m:.2f}")
    balance = imbalances(sample)
    if balance:
        text.append("\n")
        text.append_text(_balance_line(balance[0], styles, width))
    return text


def _balance_line(im: Imbalance, styles: CardStyles, width: int) -> Text:
    """The split's balance in one line of ``width`` less the border: what does not fit goes,
    the utilisation's detail first, then the neighbours' names."""
    level = {"ok": styles.ok, "uneven": styles.warn, "skewed": styles.hot}.get(im.level)
    gap, gpu = ("  ", "GPU") if width >= 84 else (" ", "")
    head = f" {im.name[:16]} {gpu}{compact_indexes(im.gpu_indexes)} "
    vram = f"{gap}VRAM ±-%"  # (a GPU does not report its memory)
    if im.vram_spread is not None:
        vram = f"{gap}VRAM ±{im.vram_spread:.0f}% full {im.fullest} empty {im.emptiest}"
    util = f"{gap}util ±-%"  # (a GPU does not report its utilisation)
    if im.util_spread is not None:
        util = f"{gap}util ±{im.util_spread:.0f}% busy {im.busiest}"
    beside = _beside(im, width)
    room = max(40, min(width, 200) - 2)
    for parts in ((vram, util, beside), (vram, beside), (vram, _beside(im, 0)), (vram,)):
        if len("balance") + len(head) + len(im.level) + sum(map(len, parts)) <= room:
            break
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append("balance", styles.bold)
    line.append(head)
    line.append(im.level, level)
    for part in parts:
        line.append(part, styles.muted if part.startswith((" +", "  beside")) else None)
    return line


def _beside(im: Imbalance, width: int) -> str:
    """The other processes on the split's GPUs (whose memory the balance leaves out): the
    biggest named where the line has room, else how many."""
    if not im.neighbours:
        return ""
    n = len(im.neighbours)
    if width < 120:
        return f" +{counted(n, 'other')}" if width else f" +{n}"
    first = im.neighbours[0]
    held = f" {fmt_bytes(first.used_bytes)}" if first.used_bytes is not None else ""
    more = f" +{n - 1} more" if n > 1 else ""
    return f"  beside: {first.name[:16]}{held} on GPU {compact_indexes(first.gpu_indexes)}{more}"


def energy_cost(energy_mj: int | None, price_per_kwh: float | None) -> float | None:
    """What ``energy_mj`` cost at ``price_per_kwh`` (None: no price or no energy)."""
    if energy_mj is None or price_per_kwh is None:
        return None
    return energy_mj / 3.6e9 * price_per_kwh


def render_alerts(alerts: tuple[Alert, ...], styles: CardStyles, width: int = 200) -> Text:
    """The alerts raised now, one line: how many, then each (what, since when, the GPU), as
    many as fit ``width``; empty when there is none."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if not alerts:
        return text
    worst = styles.error_bold if alerts[0].severity == CRITICAL else styles.warn
    text.append(f"▲ {counted(len(alerts), 'alert')}", worst)
    for i, a in enumerate(alerts):
        item = f"{a.where} {a.message} since {fmt_time(a.since)}"
        if i and text.cell_len + len(item) + 3 > width - 10:
            text.append(f"  +{len(alerts) - i} more", styles.muted)
            break
        text.append("  ")
        text.append(
            a.severity[:4].upper(), styles.error_bold if a.severity == CRITICAL else styles.warn
        )
        text.append(" " + item)
    return text


def _graphs_shown(layout: MonitorLayout) -> bool:
    """Whether the layout draws history: cards' graphs or compact lines' sparklines."""
    return layout.graphs or layout.sparklines > 0


class MonitorScreen(LltuiScreen):
    """Live per-GPU dashboard. Rendering reads only the app's model."""

    AUTO_FOCUS = "ProcessTable"  # its keys (filter, signal) work without a tab first
    BINDINGS: ClassVar[list[BindingType]] = MONITOR_BINDINGS

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status", history=True)
        yield Banner(id="banner")
        yield TextLines(id="rig")
        yield TextLines(id="alerts")
        with VerticalScroll(id="cards-scroll"):
            yield Grid(id="cards")
        yield ProcessPane(id="processes")
        yield LltuiFooter()

    def __init__(self) -> None:
        super().__init__()
        self._cards: dict[str, GpuCard] = {}
        self._layout: MonitorLayout | None = None
        self._styles: CardStyles | None = None
        self._name_width: tuple[tuple[str, ...], int, int] = ((), 0, 0)
        self._selected_uuid: str | None = None
        self._reserve = PROCESS_RESERVE
        self._ready = False
        self._alerts_shown: tuple[int, int] | None = None  # (tracker version, width)

    def on_mount(self) -> None:
        self._ready = True
        # cards scrolled into view show the latest sample they were given
        self.watch(self.query_one("#cards-scroll"), "scroll_y", self._flush_cards, init=False)
        # the cards' colours are worked out from the theme: a new theme redraws them (paused too)
        self.watch(self.app, "theme", self.lltui.render_model, init=False)
        self.lltui.render_model()

    def on_screen_resume(self) -> None:
        self.lltui.render_model()

    def on_resize(self) -> None:
        self.lltui.render_model()

    @property
    def prefs(self) -> MonitorPrefs:
        """How the monitor shows the rig (kept by the app, changed only here)."""
        return self.lltui.monitor_prefs

    # -- actions -------------------------------------------------------------------------
    def action_cycle_sort(self) -> None:
        self.prefs.cycle_sort(self.query_one(ProcessTable).sort_keys)
        self.lltui.render_model()

    def action_sort_by(self, key: str) -> None:
        self.prefs.sort_by(key)
        self.lltui.render_model()

    def action_reverse_sort(self) -> None:
        self.prefs.reverse_sort()
        self.lltui.render_model()

    def action_cycle_window(self) -> None:
        self.prefs.cycle_window()
        self.lltui.render_model()

    def action_set_window(self, index: int) -> None:
        self.prefs.set_window(index)
        self.lltui.render_model()

    def action_toggle_graphs(self) -> None:
        """Graphs off where they are shown (cards' graphs, compact lines' sparklines), else
        on; where compact lines leave no room for them, a notification says so."""
        prefs = self.prefs
        prefs.graphs = not (prefs.graphs if self._layout is None else _graphs_shown(self._layout))
        self.lltui.render_model()
        sample, layout = self.lltui.model.latest, self._layout
        shown = layout is None or _graphs_shown(layout)
        if prefs.graphs and sample is not None and not shown:
            self.notify(
                f"no room for graphs under {len(sample.gpus)} compact lines at this "
                "height: a taller terminal shows them, or cards (l), which scroll",
                severity="warning",
            )

    def action_cycle_layout(self) -> None:
        """Auto (the richest layout that fits), compact lines, cards."""
        self.prefs.cycle_layout()
        self.notify(f"layout: {self.prefs.layout_mode}", timeout=2)
        self.lltui.render_model()

    def action_select_gpu(self, step: int) -> None:
        sample = self.lltui.model.latest
        self.prefs.step_selection(step, len(sample.gpus) if sample else 0)
        self.lltui.render_model()

    def action_gpu_detail(self) -> None:
        from lltui.app.screens.gpu_detail import GpuDetailScreen  # first opened here

        sample = self.lltui.model.latest
        if sample is None or not sample.gpus:
            return
        if any(isinstance(s, GpuDetailScreen) for s in self.app.screen_stack):
            return  # open already (the palette's entry, over it): it shows the selected GPU
        g = sample.gpus[min(self.prefs.selected, len(sample.gpus) - 1)]
        self.app.push_screen(GpuDetailScreen(g.info.uuid))

    @on(GpuCard.Clicked)
    def _card_clicked(self, message: GpuCard.Clicked) -> None:
        """A click selects a GPU's card; a second click on it opens its detail."""
        sample = self.lltui.model.latest
        if sample is None:
            return
        for pos, g in enumerate(sample.gpus):
            if g.info.uuid == message.uuid:
                if self.prefs.selected == pos:
                    self.action_gpu_detail()
                else:
                    self.prefs.selected = pos
                    self.lltui.render_model()
                return

    @on(ProcessTable.HistoryWanted)
    def _process_history(self, message: ProcessTable.HistoryWanted) -> None:
        """Enter on a process: its own history."""
        from lltui.app.screens.process_detail import ProcessDetailScreen  # first opened here

        self.app.push_screen(ProcessDetailScreen(message.row.pid))

    @on(ProcessTable.SortClicked)
    def _header_clicked(self, message: ProcessTable.SortClicked) -> None:
        """A click on a column's header sorts by it; a second click reverses."""
        if self.prefs.sort_key == message.key:
            self.action_reverse_sort()
        else:
            self.action_sort_by(message.key)

    def _window(self) -> Region:
        """The visible part of the GPU area, in the coordinates of its content."""
        scroll = self.query_one("#cards-scroll", VerticalScroll)
        size = scroll.scrollable_content_region.size
        return Region(round(scroll.scroll_x), round(scroll.scroll_y), size.width, size.height)

    def _flush_cards(self) -> None:
        window = self._window()
        for card in self._cards.values():
            card.flush(window)

    def _flush_every_card(self) -> None:
        """Draw every card, out of view too (their height changed with the layout)."""
        for card in self._cards.values():
            card.flush(None)

    @property
    def gpu_layout(self) -> MonitorLayout | None:
        """The layout of the GPUs now on screen (None before the first sample)."""
        return self._layout

    def _room(self) -> int:
        """Lines left for the GPUs and the process table: the screen less the status line,
        banner, rig summary and footer as they are now wrapped to the width."""
        size = self.size
        used = 1  # the footer
        widgets = (
            self.query_one(StatusBar),
            self.query_one(Banner),
            self.query_one("#rig"),
            self.query_one("#alerts"),
        )
        for widget in widgets:
            if widget.display:
                used += widget.get_content_height(size, size, max(1, size.width - 2))
        return size.height - used

    def plan(self, n: int) -> MonitorLayout:
        """The layout of ``n`` GPUs on this screen's size and the user's choices."""
        prefs = self.prefs
        width, room = self.size.width, self._room()
        reserve = self._reserve = self._process_reserve()
        mode, graphs = prefs.layout_mode, prefs.graphs
        plan = plan_layout(n, width, room, mode=mode, graphs=graphs, reserve=reserve)
        if not plan.fits:  # the scroll bar takes a column
            plan = plan_layout(n, width - 1, room, mode=mode, graphs=graphs, reserve=reserve)
        return plan

    def _process_reserve(self) -> int:
        """Five rows of processes below the table's header, its horizontal scroll bar when
        its columns are wider than the screen, and the filter line while it is open."""
        pane = self.query_one(ProcessPane)
        return PROCESS_RESERVE + pane.filter_open + pane.table.show_horizontal_scrollbar

    def _check_reserve(self) -> None:
        # the table learns its columns' width after a frame: plan again if that changed it
        if self._process_reserve() != self._reserve:
            self.lltui.render_model()

    def _apply_layout(self, layout: MonitorLayout) -> None:
        grid = self.query_one("#cards", Grid)
        grid.styles.grid_size_columns = layout.columns
        grid.set_class(layout.compact, "-compact")
        self.query_one("#cards-scroll").styles.height = layout.height
        for card in self._cards.values():
            card.set_class(layout.compact, "-compact")
        # from cards to lines (or back) every card's height changes, out of view too: a card
        # left as it was drawn would push the others down until it scrolled into view
        every = self._layout is not None and self._layout.compact != layout.compact
        self._layout = layout
        # cards that come into view with the new layout are drawn once it is worked out
        self.call_after_refresh(self._flush_every_card if every else self._flush_cards)

    def _card_styles(self) -> CardStyles:
        theme = self.app.theme
        if self._styles is None or self._styles.theme != theme:
            self._styles = CardStyles.from_variables(theme, self.app.get_css_variables())
        return self._styles

    def _compact_name_width(self, sample: RigSample, width: int) -> int:
        names = tuple(g.info.name for g in sample.gpus)
        if self._name_width[:2] != (names, width):
            self._name_width = (names, width, compact_name_width(list(names), width))
        return self._name_width[2]

    def show(self, model: RigModel) -> None:
        if not self._ready:  # a sample can arrive before this screen is composed
            return
        prefs = self.prefs
        show_header(self, model, self.lltui.busy_for(), prefs.window_s)
        sample = model.latest
        # a fleet host opened before its first sample: no cards, no processes (the last
        # host's would stand under this one's status line); before any sample they stay
        # (the table keeps its focus)
        if sample is not None or self._cards:
            for part in ("#cards-scroll", "#processes"):
                widget = self.query_one(part)
                if widget.display != (sample is not None):
                    widget.display = sample is not None
        if sample is None:
            self.query_one("#rig", TextLines).update(
                "[$text-muted]waiting for the first sample…[/]"
            )
            self._show_alerts(model)  # a source failing from its first poll (no_gpu)
            return
        with self.app.batch_update():
            # the columns that changed are repainted; a relayout only when the lines do
            rig = render_rig_line(sample, model, self._card_styles(), self.size.width)
            self.query_one("#rig", TextLines).update(rig)
            self._show_alerts(model)
            layout = self.plan(len(sample.gpus))
            if layout != self._layout:
                self._apply_layout(layout)
            self._show_cards(model, sample, layout)
            table = self.query_one(ProcessTable)
            prefs.fit_sort(table.sort_keys)  # never by a column the width leaves out
            table.show(sample, prefs.sort_key, prefs.sort_reverse)
        self.call_after_refresh(self._check_reserve)

    def _show_alerts(self, model: RigModel) -> None:
        """The alerts line, built only when the alerts (or the width) changed."""
        key = (model.alerts.version, self.size.width)
        if key == self._alerts_shown:
            return
        self._alerts_shown = key
        bar = self.query_one("#alerts", TextLines)
        text = render_alerts(model.alerts.active, self._card_styles(), self.size.width - 2)
        bar.display = bool(text)
        bar.update(text)

    def _gpu_alerts(self, model: RigModel) -> dict[str, str]:
        """The worst severity raised per GPU UUID (the cards are marked with it)."""
        worst: dict[str, str] = {}
        for a in model.alerts.active:
            if a.gpu_uuid and worst.get(a.gpu_uuid) != CRITICAL:
                worst[a.gpu_uuid] = a.severity
        return worst

    def _show_cards(self, model: RigModel, sample: RigSample, layout: MonitorLayout) -> None:
        grid = self.query_one("#cards", Grid)
        present = {g.info.uuid for g in sample.gpus}
        for uuid in [u for u in self._cards if u not in present]:
            self._cards.pop(uuid).remove()
        prefs = self.prefs
        selected = min(prefs.selected, len(sample.gpus) - 1)
        stale = model.stale(None)
        # a card's border and padding take 3 columns, a compact line's 2
        width = layout.item_width - (2 if layout.compact else 3)
        name_width = self._compact_name_width(sample, width) if layout.compact else 0
        styles = self._card_styles()
        history_seq = sample.seq if layout.graphs or layout.sparklines else 0
        window = self._window()
        index_width = len(str(len(sample.gpus) - 1))
        marked = self._gpu_alerts(model)
        for pos, g in enumerate(sample.gpus):
            card = self._cards.get(g.info.uuid)
            if card is None:
                card = GpuCard(g.info.uuid, classes="gpu-card")
                card.set_class(layout.compact, "-compact")
                self._cards[g.info.uuid] = card
                grid.mount(card)
            card.mark(
                lost=g.lost, selected=pos == selected, stale=stale, alert=marked.get(g.info.uuid)
            )
            view = CardView(
                sample=g,
                styles=styles,
                width=width,
                compact=layout.compact,
                graphs=layout.graphs,
                window_s=prefs.window_s,
                selected=pos == selected,
                history_seq=history_seq,
                name_width=name_width,
                index_width=index_width,
                lines=layout.lines,
            )
            card.show(view, model.history, window)
        if sample.gpus:
            self._follow_selection(sample.gpus[selected].info.uuid)

    def _follow_selection(self, uuid: str) -> None:
        """Scroll a newly selected GPU into view (where the GPUs do not all fit)."""
        if uuid == self._selected_uuid:
            return
        self._selected_uuid = uuid
        card = self._cards.get(uuid)
        if card is not None:
            self.call_after_refresh(card.scroll_visible, animate=False)

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        """Cheap refresh of the status line only (age, stale marker) between samples."""
        if not self._ready:
            return
        self.query_one(StatusBar).show(model, busy_for, self.prefs.window_s)
        stale = model.stale(busy_for)
        for card in self._cards.values():
            card.mark_stale(stale)

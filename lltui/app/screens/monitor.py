"""The monitor view: rig summary, one card per GPU, the process table, host CPU/RAM."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.geometry import Region

from lltui.app.model import RigModel
from lltui.app.monitor_layout import PROCESS_RESERVE, MonitorLayout, plan_layout
from lltui.app.screens.base import LltuiScreen
from lltui.app.widgets.footer import LltuiFooter
from lltui.app.widgets.gpu_card import (
    CardStyles,
    CardView,
    GpuCard,
    TextLines,
    compact_name_width,
)
from lltui.app.widgets.process_table import ProcessPane, ProcessTable
from lltui.app.widgets.status import Banner, StatusBar, show_header
from lltui.core.monitor.balance import imbalances
from lltui.core.monitor.models import RigSample
from lltui.core.units import GIB, compact_indexes, fmt_duration, fmt_energy_mj, fmt_pct


def render_rig_line(
    sample: RigSample, model: RigModel, styles: CardStyles, width: int = 200
) -> Text:
    """Totals over the GPUs, energy since start, host, and the load balance of what they
    serve; each line fits 78 columns (``width`` below 84 tightens the balance line)."""
    live = [g for g in sample.gpus if not g.lost]
    totals = [g.info.memory_total for g in live]
    # the sum where every GPU says its total; "-" where one does not (never a 0 for it)
    total = sum(t for t in totals if t is not None) if None not in totals else None
    used = sum(g.memory_used or 0 for g in live)
    free = sum(g.memory_free or 0 for g in live)
    power = sum(g.power_w or 0.0 for g in live)
    limit = sum(g.power_limit_w or 0.0 for g in live)
    energy = model.history.energy_since_start_mj()
    lost = len(sample.gpus) - len(live)
    n = len(sample.gpus)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{n} GPU{'s' if n != 1 else ''}", styles.bold)
    text.append(
        f"  VRAM {used / GIB:.1f}/{'-' if total is None else f'{total / GIB:.1f}'} GiB"
        f" ({free / GIB:.1f} free)"
        f"  power {power:.0f}/{limit:.0f} W"
    )
    if lost:
        text.append("  ")
        text.append(f"{lost} lost", styles.error_bold)
    text.append(f"\nenergy {fmt_energy_mj(energy)} in {fmt_duration(model.history.seconds())}")
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
        im = balance[0]
        level = {"ok": styles.ok, "uneven": styles.warn, "skewed": styles.hot}[im.level]
        gap, gpu = ("  ", "GPU") if width >= 84 else (" ", "")
        text.append("\n")
        text.append("balance", styles.bold)
        text.append(f" {im.name[:16]} {gpu}{compact_indexes(im.gpu_indexes)} ")
        text.append(im.level, level)
        text.append(
            f"{gap}VRAM ±{im.vram_spread:.0f}% full {im.fullest} empty {im.emptiest}"
            f"{gap}util ±{im.util_spread:.0f}% busy {im.busiest}"
        )
    return text


class MonitorScreen(LltuiScreen):
    """Live per-GPU dashboard. Rendering reads only the app's model."""

    AUTO_FOCUS = "ProcessTable"  # its keys (filter, signal) work without a tab first

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status", history=True)
        yield Banner(id="banner")
        yield TextLines(id="rig")
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

    def on_mount(self) -> None:
        self._ready = True
        # cards scrolled into view show the latest sample they were given
        self.watch(self.query_one("#cards-scroll"), "scroll_y", self._flush_cards, init=False)
        # the cards' colours are worked out from the theme: a new theme redraws them (paused too)
        self.watch(self.app, "theme", self._render_from_app, init=False)
        self._render_from_app()

    def on_screen_resume(self) -> None:
        self._render_from_app()

    def on_resize(self) -> None:
        self._render_from_app()

    def _render_from_app(self) -> None:
        self.lltui.render_model()

    def _window(self) -> Region:
        """The visible part of the GPU area, in the coordinates of its content."""
        scroll = self.query_one("#cards-scroll", VerticalScroll)
        size = scroll.scrollable_content_region.size
        return Region(round(scroll.scroll_x), round(scroll.scroll_y), size.width, size.height)

    def _flush_cards(self) -> None:
        window = self._window()
        for card in self._cards.values():
            card.flush(window)

    @property
    def gpu_layout(self) -> MonitorLayout | None:
        """The layout of the GPUs now on screen (None before the first sample)."""
        return self._layout

    def _room(self) -> int:
        """Lines left for the GPUs and the process table: the screen less the status line,
        banner, rig summary and footer as they are now wrapped to the width."""
        size = self.size
        used = 1  # the footer
        for widget in (self.query_one(StatusBar), self.query_one(Banner), self.query_one("#rig")):
            if widget.display:
                used += widget.get_content_height(size, size, max(1, size.width - 2))
        return size.height - used

    def plan(self, n: int) -> MonitorLayout:
        """The layout of ``n`` GPUs on this screen's size and the user's choices."""
        model = self.lltui.model
        width, room = self.size.width, self._room()
        reserve = self._reserve = self._process_reserve()
        mode, graphs = model.layout_mode, model.graphs
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
            self._render_from_app()

    def _apply_layout(self, layout: MonitorLayout) -> None:
        grid = self.query_one("#cards", Grid)
        grid.styles.grid_size_columns = layout.columns
        grid.set_class(layout.compact, "-compact")
        self.query_one("#cards-scroll").styles.height = layout.height
        for card in self._cards.values():
            card.set_class(layout.compact, "-compact")
        self._layout = layout
        # cards that come into view with the new layout are drawn once it is worked out
        self.call_after_refresh(self._flush_cards)

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
        show_header(self, model, self.lltui.busy_for())
        sample = model.latest
        if sample is None:
            self.query_one("#rig", TextLines).update(
                "[$text-muted]waiting for the first sample…[/]"
            )
            return
        with self.app.batch_update():
            self._show_rig(render_rig_line(sample, model, self._card_styles(), self.size.width))
            layout = self.plan(len(sample.gpus))
            if layout != self._layout:
                self._apply_layout(layout)
            self._show_cards(model, sample, layout)
            self.query_one(ProcessTable).show(sample, model.sort_key, model.sort_reverse)
        self.call_after_refresh(self._check_reserve)

    def _show_rig(self, text: Text) -> None:
        # the columns that changed are repainted; a relayout only when the lines do
        self.query_one("#rig", TextLines).update(text)

    def _show_cards(self, model: RigModel, sample: RigSample, layout: MonitorLayout) -> None:
        grid = self.query_one("#cards", Grid)
        present = {g.info.uuid for g in sample.gpus}
        for uuid in [u for u in self._cards if u not in present]:
            self._cards.pop(uuid).remove()
        selected = min(model.selected, len(sample.gpus) - 1)
        stale = model.stale(None)
        # a card's border and padding take 3 columns, a compact line's 2
        width = layout.item_width - (2 if layout.compact else 3)
        name_width = self._compact_name_width(sample, width) if layout.compact else 0
        styles = self._card_styles()
        history_seq = sample.seq if layout.graphs else 0
        window = self._window()
        index_width = len(str(len(sample.gpus) - 1))
        for pos, g in enumerate(sample.gpus):
            card = self._cards.get(g.info.uuid)
            if card is None:
                card = GpuCard(g.info.uuid, classes="gpu-card")
                card.set_class(layout.compact, "-compact")
                self._cards[g.info.uuid] = card
                grid.mount(card)
            card.set_class(g.lost, "-lost")
            card.set_class(pos == selected, "-selected")
            card.set_class(stale, "-stale")
            view = CardView(
                sample=g,
                styles=styles,
                width=width,
                compact=layout.compact,
                graphs=layout.graphs,
                window_s=model.window_s,
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
        self.query_one(StatusBar).show(model, busy_for)
        stale = model.stale(busy_for)
        for card in self._cards.values():
            card.set_class(stale, "-stale")

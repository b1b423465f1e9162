"""The monitor view: rig summary, one card per GPU, the process table, host CPU/RAM."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.markup import escape
from textual.widgets import Static

from lltui.app.model import RigModel
from lltui.app.screens.base import LltuiScreen
from lltui.app.widgets.footer import LltuiFooter
from lltui.app.widgets.gpu_card import GpuCard, render_card
from lltui.app.widgets.process_table import ProcessPane, ProcessTable
from lltui.app.widgets.status import Banner, StatusBar, show_header
from lltui.core.monitor.balance import imbalances
from lltui.core.monitor.models import RigSample
from lltui.core.units import GIB, compact_indexes, fmt_duration, fmt_energy_mj, fmt_pct

CARD_MIN_WIDTH = 78
GRAPHS_MIN_ROWS_PER_GPU = 9  # a card with sparklines needs this many rows to be useful


def render_rig_line(sample: RigSample, model: RigModel) -> str:
    """Totals over the GPUs, energy since start, host, and the load balance of what they
    serve; each line fits 78 columns."""
    live = [g for g in sample.gpus if not g.lost]
    total = sum(g.info.memory_total for g in live)
    used = sum(g.memory_used or 0 for g in live)
    free = sum(g.memory_free or 0 for g in live)
    power = sum(g.power_w or 0.0 for g in live)
    limit = sum(g.power_limit_w or 0.0 for g in live)
    energy = model.history.energy_since_start_mj()
    lost = len(sample.gpus) - len(live)
    n = len(sample.gpus)
    first = (
        f"[b]{n} GPU{'s' if n != 1 else ''}[/b]  VRAM {used / GIB:.1f}/{total / GIB:.1f} GiB"
        f" ({free / GIB:.1f} free)  power {power:.0f}/{limit:.0f} W"
    )
    if lost:
        first += f"  [b $error]{lost} lost[/]"
    second = f"energy {fmt_energy_mj(energy)} in {fmt_duration(model.history.seconds())}"
    host = sample.host
    if host.cpu_pct is not None or host.mem_total:
        used_gib = (host.mem_used or 0) / GIB
        total_gib = (host.mem_total or 0) / GIB
        second += (
            f"  [b]host[/b] CPU {fmt_pct(host.cpu_pct)}/{host.cpu_count or '?'}"
            f"  RAM {used_gib:.1f}/{total_gib:.1f} GiB"
        )
        if host.load_1m is not None:
            second += f"  load {host.load_1m:.2f}"
    lines = [first, second]
    balance = imbalances(sample)
    if balance:
        im = balance[0]
        colour = {"ok": "$gpu-ok", "uneven": "$gpu-warn", "skewed": "$gpu-hot"}[im.level]
        lines.append(
            f"[b]balance[/b] {escape(im.name[:16])} GPU{compact_indexes(im.gpu_indexes)}"
            f" [{colour}]{im.level}[/]  VRAM ±{im.vram_spread:.0f}%"
            f" full {im.fullest} empty {im.emptiest}"
            f"  util ±{im.util_spread:.0f}% busy {im.busiest}"
        )
    return "\n".join(lines)


class MonitorScreen(LltuiScreen):
    """Live per-GPU dashboard. Rendering reads only the app's model."""

    AUTO_FOCUS = "ProcessTable"  # its keys (filter, signal) work without a tab first

    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Banner(id="banner")
        yield Static("", id="rig")
        with VerticalScroll(id="cards-scroll"):
            yield Grid(id="cards")
        yield ProcessPane(id="processes")
        yield LltuiFooter()

    def __init__(self) -> None:
        super().__init__()
        self._cards: dict[str, GpuCard] = {}
        self._columns = 0
        self._rig_lines = -1
        self._ready = False

    def on_mount(self) -> None:
        self._ready = True
        self._render_from_app()

    def on_screen_resume(self) -> None:
        self._render_from_app()

    def on_resize(self) -> None:
        self._render_from_app()

    def _render_from_app(self) -> None:
        self.lltui.render_model()

    def layout_for(self, n: int) -> tuple[int, bool, int]:
        """Columns of cards, whether cards carry sparklines, and each card's width, for
        ``n`` GPUs on this screen's size."""
        width, height = self.size
        columns = max(1, min(n, width // CARD_MIN_WIDTH)) if n else 1
        graphs = self.lltui.model.graphs
        if graphs is None:
            rows_per_column = -(-n // columns) if n else 1
            graphs = height >= 14 + rows_per_column * GRAPHS_MIN_ROWS_PER_GPU
        card_width = max(40, width // columns - 2)
        return columns, graphs, card_width

    def show(self, model: RigModel) -> None:
        if not self._ready:  # a sample can arrive before this screen is composed
            return
        show_header(self, model, self.lltui.busy_for())
        sample = model.latest
        if sample is None:
            self.query_one("#rig", Static).update("[$text-muted]waiting for the first sample…[/]")
            return
        with self.app.batch_update():
            rig_text = render_rig_line(sample, model)
            rig_lines = rig_text.count("\n")
            # same number of lines: repaint only, no relayout of the whole screen
            self.query_one("#rig", Static).update(rig_text, layout=rig_lines != self._rig_lines)
            self._rig_lines = rig_lines
            grid = self.query_one("#cards", Grid)
            columns, graphs, card_width = self.layout_for(len(sample.gpus))
            if columns != self._columns:
                grid.styles.grid_size_columns = columns
                self._columns = columns
            present = {g.info.uuid for g in sample.gpus}
            for uuid in [u for u in self._cards if u not in present]:
                self._cards.pop(uuid).remove()
            selected = min(model.selected, len(sample.gpus) - 1)
            for pos, g in enumerate(sample.gpus):
                card = self._cards.get(g.info.uuid)
                if card is None:
                    card = GpuCard(g.info.uuid, classes="gpu-card")
                    self._cards[g.info.uuid] = card
                    grid.mount(card)
                card.set_class(g.lost, "-lost")
                card.set_class(pos == selected, "-selected")
                card.set_class(model.stale(None), "-stale")
                card.show(
                    render_card(
                        g,
                        model.history,
                        width=card_width,
                        window_s=model.window_s,
                        graphs=graphs,
                        selected=pos == selected,
                    )
                )
            self.query_one(ProcessTable).show(sample, model.sort_key, model.sort_reverse)

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        """Cheap refresh of the status line only (age, stale marker) between samples."""
        if not self._ready:
            return
        self.query_one(StatusBar).show(model, busy_for)
        stale = model.stale(busy_for)
        for card in self._cards.values():
            card.set_class(stale, "-stale")

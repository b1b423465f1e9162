"""The topology view: the link matrix coloured by link kind, affinities, NICs and advice."""

from __future__ import annotations

from collections.abc import Sequence

from textual import on, work
from textual.app import ComposeResult
from textual.containers import HorizontalScroll, Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Static

from lltui.app.background import off_thread_reported
from lltui.app.messages import TopologyReady
from lltui.app.screens.base import LoadOnceScreen
from lltui.app.state.topology import TopologyState, read_topology
from lltui.app.widgets.hanging import Entry, HangingList
from lltui.core.monitor.models import GpuStatic
from lltui.core.topo.advice import Advice
from lltui.core.topo.matrix import Topology, link_meaning

LOADING = "[$text-muted]reading the topology…[/]"
SEVERITY_STYLE = {"error": "$error", "warn": "$warning", "warning": "$warning", "info": "$primary"}


def cell_style(cell: str) -> str:
    """A theme variable per link kind: NVLink best, then PCIe switch, host bridge, NUMA."""
    c = cell.strip().upper()
    if c == "X":
        return "$text-muted"
    if c.startswith("NV"):
        return "b $gpu-ok"
    if c in ("PIX", "PXB"):
        return "$primary"
    if c == "PHB":
        return "$gpu-warn"
    if c == "NODE":
        return "$accent"
    if c == "SYS":
        return "b $gpu-hot"
    return "$text"


def render_matrix_markup(topo: Topology) -> str:
    devices = list(topo.gpus) + list(topo.nics)
    extra: list[tuple[str, dict[str, str] | None]] = [
        ("CPU Affinity", topo.affinity("cpu_affinity")),
        ("NUMA", topo.affinity("numa_affinity")),
        ("GPU NUMA", topo.affinity("gpu_numa_id")),
    ]
    extra = [(name, values) for name, values in extra if values is not None]
    label_w = max((len(d) for d in devices), default=4) + 2
    cell_w = max([len(d) for d in devices] + [4]) + 2
    extra_w = {
        name: max([len(name)] + [len(v) for v in (values or {}).values()]) + 2
        for name, values in extra
    }
    head = " " * label_w + "".join(f"[b]{d:<{cell_w}}[/b]" for d in devices)
    head += "".join(f"[b]{name:<{extra_w[name]}}[/b]" for name, _ in extra)
    lines = [head]
    for a in devices:
        row = f"[b]{a:<{label_w}}[/b]"
        for b in devices:
            if a in topo.nics and b in topo.nics and a != b:
                row += f"[$text-muted]{'·':<{cell_w}}[/]"  # NIC pairs are not kept
                continue
            cell = topo.link(a, b) or "?"
            row += f"[{cell_style(cell)}]{escape(cell):<{cell_w}}[/]"
        for name, values in extra:
            row += f"{escape((values or {}).get(a, '')):<{extra_w[name]}}"
        lines.append(row.rstrip())
    return "\n".join(lines)


def legend_entries(topo: Topology) -> list[Entry]:
    """Each link kind of the matrix, in its colour, and what it means."""
    cells = sorted({c for _a, _b, c in (*topo.links, *topo.gpu_nic_links) if c.upper() != "X"})
    return [(f"[{cell_style(c)}]{escape(c)}[/]", escape(link_meaning(c))) for c in cells]


def render_gpus(gpus: tuple[GpuStatic, ...], topo: Topology) -> str:
    """One line per GPU, then per NIC, each in columns (GPU10's name under GPU9's)."""
    rows = [
        (
            f"GPU{g.index}",
            g.name,
            f"CUDA{g.cuda_index}" if g.cuda_index is not None else (g.gfx_target or "CUDA-"),
            g.pci_bus_id,
        )
        for g in gpus
    ]
    names = topo.nic_map()
    nics = []
    for nic in topo.nics:
        near = [
            f"{gpu} ({cell})"
            for gpu in topo.gpus
            if (cell := topo.link(gpu, nic) or "").upper() in ("PIX", "PXB")
        ]
        nics.append((nic, names.get(nic, ""), f"nearest: {', '.join(near) or '-'}"))
    return "\n".join(escape(line) for line in aligned(rows) + aligned(nics))


def aligned(rows: Sequence[tuple[str, ...]]) -> list[str]:
    """Rows of as many cells, each column as wide as its widest cell, two spaces between."""
    widths = [max(map(len, column)) for column in zip(*rows, strict=True)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def advice_entries(advice: tuple[Advice, ...]) -> list[Entry]:
    """Each piece of advice: its severity, then the message and its hint, which wrap under
    the message, not under the severity."""
    entries = []
    for item in advice:
        style = SEVERITY_STYLE.get(item.severity, "$text")
        text = escape(item.message)
        if item.hint:
            text += f"\n[$text-muted]{escape(item.hint)}[/]"
        entries.append((f"[b {style}]{escape(item.severity)}[/]", text))
    return entries or [("", "[$text-muted]no advice[/]")]


class TopologyScreen(LoadOnceScreen):
    """Reads the topology once, in its own worker, and shows it."""

    CSS_PATH = "topology.tcss"  # read when the view is first shown, not at startup

    def __init__(self) -> None:
        super().__init__()
        self.state = TopologyState()

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="topo-page"):
            yield Static(LOADING, id="topo-title")
            with Vertical(id="topo-body"):  # drawn from a topology read, hidden without one
                with HorizontalScroll(id="topo-matrix-scroll"):
                    yield Static("", id="topo-matrix")
                yield Static("[b]legend[/b]", id="topo-legend-title", classes="topo-section")
                yield HangingList(id="topo-legend")
                yield Static("", id="topo-devices", classes="topo-section")
                yield Static(
                    "[b $warning]warnings[/]", id="topo-warnings-title", classes="topo-section"
                )
                yield HangingList(id="topo-warnings")
                yield Static("[b]advice[/b]", id="topo-advice-title", classes="topo-section")
                yield HangingList(id="topo-advice")

    @property
    def awaiting_data(self) -> bool:
        return self.state.loading

    def start_loading(self, source: str) -> None:
        self.state = TopologyState()  # loading: what was read of another host is not this one's
        self._load(source)

    @work(group="topology", exclusive=True, exit_on_error=False)
    async def _load(self, source: str) -> None:
        """Read once: nvidia-smi can take seconds."""
        state = await off_thread_reported(self, lambda: read_topology(source), "topology")
        if state is None:  # a bug, already reported: the view must not wait forever
            state = TopologyState(error="reading the topology failed")
        self.post_message(TopologyReady(state))

    @on(TopologyReady)
    def _topology_ready(self, message: TopologyReady) -> None:
        self.state = message.state
        self.show_view()

    def show_view(self) -> None:
        state = self.state
        if not self.is_mounted:
            return
        title = self.query_one("#topo-title", Static)
        # no topology (loading, or this host's error): none of another host's under the title
        self.query_one("#topo-body").display = state.report is not None
        if state.error:
            title.update(f"[b $error]topology unavailable:[/] {escape(state.error)}")
            return
        if state.report is None:
            title.update(LOADING)
            return
        live = state.report.live
        topo = live.topology
        title.update(f"[b]GPU topology[/b] from {escape(live.where)}")
        self.query_one("#topo-matrix", Static).update(render_matrix_markup(topo))
        self.query_one("#topo-legend", HangingList).set_entries(legend_entries(topo))
        self.query_one("#topo-devices", Static).update(
            "[b]devices[/b]\n" + (render_gpus(live.gpus, topo) or "-")
        )
        self.query_one("#topo-warnings-title").display = bool(topo.warnings)
        self.query_one("#topo-warnings", HangingList).set_entries(
            [("•", escape(w)) for w in topo.warnings]
        )
        self.query_one("#topo-advice", HangingList).set_entries(advice_entries(state.advice))

"""One process's own history: GPU memory, SM %, CPU % and RSS over the monitor's window,
with who it is, where it runs and for how long; follows the live model."""

from __future__ import annotations

import time
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.markup import escape

from lltui.app.app_protocol import host_of
from lltui.app.rig_model import RigModel
from lltui.app.screens.base import HistoryModal
from lltui.app.screens.gpu_detail import span_words
from lltui.app.widgets.gpu_card import num
from lltui.core.cmdline.secrets import redact_command
from lltui.core.units import GIB, fmt_bytes, fmt_duration, spark


def render_process(pid: int, model: RigModel, width: int, window: float) -> str:
    """The process's facts (as the latest sample has them) and its sparklines."""
    sample = model.latest
    now = [p for g in sample.gpus for p in g.processes if p.pid == pid] if sample else []
    seen = model.history.process_seen(pid)
    lines = []
    if now:
        p = now[0]
        gpus = ", ".join(
            f"GPU{q.gpu_index}"
            + (f" (MIG GI {q.gpu_instance_id})" if q.gpu_instance_id is not None else "")
            for q in now
        )
        lines.append(f"[b]pid {pid}[/b]  {escape(p.user or '-')}  on {gpus}")
        command = redact_command(p.command) if p.command else p.name or "?"
        lines.append(f"[$text-muted]{escape(command[:400])}[/]")
        if p.container is not None:
            lines.append(
                f"container {escape(p.container.label)}"
                + (f"  id {escape(p.container.id[:12])}" if p.container.id else "")
            )
        if p.started is not None and sample is not None:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(p.started))
            lines.append(f"started {started}, running {fmt_duration(sample.wall - p.started)}")
    else:
        lines.append(f"[b]pid {pid}[/b]  [$warning]no longer on the GPUs[/]")
    if seen is not None:
        lines.append(f"[$text-muted]watched for {fmt_duration(seen[1] - seen[0])}[/]")
    lines.append("")
    spark_w = max(20, width - 30)
    held = model.history.seconds()
    span = span_words(min(held, seen[1] - seen[0]) if seen is not None else held, window)
    total = sum(g.info.memory_total or 0 for g in sample.gpus) if sample is not None else 0
    for label, metric, hi, unit, scale in (
        ("GPU mem", "gpu_mem", float(total or 1), "GiB", GIB),
        ("SM", "sm", 100.0, "%", 1.0),
        ("CPU", "cpu", None, "%", 1.0),
        ("RSS", "rss", None, "GiB", GIB),
    ):
        s = model.history.process_series(pid, metric, window)
        top = hi if hi is not None else max(s.hi or 1.0, 1.0)
        rng = (
            "-"
            if s.lo is None or s.hi is None or s.last is None
            else f"now {s.last / scale:.1f}, min {s.lo / scale:.1f} max {s.hi / scale:.1f} {unit}"
        )
        lines.append(f"{label:<9}[$spark]{spark(s.values, spark_w, 0.0, top)}[/]")
        lines.append(f"{'':<9}[$text-muted]{rng} over {span}[/]")
    if now:
        lines.append("")
        for q in now:
            lines.append(
                f"GPU{q.gpu_index}  {fmt_bytes(q.used_memory)}  SM {num(q.sm_util, '{:.0f}%')}"
                f"  memory {num(q.mem_util, '{:.0f}%')}  ({q.kind})"
            )
    return "\n".join(lines)


class ProcessDetailScreen(HistoryModal):
    """A modal over the monitor for one pid; ``w`` steps through the history windows."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "dismiss", "Close", id="close-process"),
        Binding("w", "cycle_window", "Window", id="process-window"),
    ]

    def __init__(self, pid: int) -> None:
        super().__init__()
        self.pid = pid

    def show(self, model: RigModel) -> None:
        window = host_of(self).monitor_prefs.window_s
        self.set_text(render_process(self.pid, model, self.text_width(), window))

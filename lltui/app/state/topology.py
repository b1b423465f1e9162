"""The topology view's data: the rig's topology and its advice, read once off the UI thread."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lltui.core.topo.advice import Advice
    from lltui.core.topo.matrix import TopologyReport


@dataclass(frozen=True)
class TopologyState:
    """The topology with its advice, or why there is none; neither while loading."""

    report: TopologyReport | None = None
    advice: tuple[Advice, ...] = ()
    error: str | None = None

    @property
    def loading(self) -> bool:
        return self.report is None and self.error is None


def read_topology(source: str) -> TopologyState:
    """The topology behind a ``--source`` spec (nvidia-smi can take seconds: call it off the
    UI thread); what went wrong in one line."""
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.core.topo.advice import advise
    from lltui.services.rig import topology_in_use

    try:
        report = topology_in_use(source)[0]
        advice = advise(report.live.topology, report.live.gpus, env=report.env)
    except (SourceUnavailable, ValueError, OSError) as exc:
        return TopologyState(error=str(exc))
    return TopologyState(report=report, advice=advice)

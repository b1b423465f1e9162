"""Messages that bring results to the UI thread: from the poller thread to the app, from a
screen's workers to the screen (those do not bubble on to the app: only their screen wants
them). Each carries its result; the handler on the UI thread is the only one that stores it
or touches widgets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from lltui.app.state.fit import FitOutcome
    from lltui.app.state.topology import TopologyState
    from lltui.core.fit.planner import PlanResult
    from lltui.core.fit.quant_table import QuantFit
    from lltui.core.gguf.refs import ModelFile
    from lltui.core.monitor.models import RigSample
    from lltui.services.nccl import NcclReport


class Coalescing(Message):
    """A message that a newer one of its kind replaces while it waits in the queue."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, type(self))


@dataclass
class SampleReady(Coalescing):
    """The model took a new sample: render it. Coalesces: only the newest pending one is
    handled (the model's history already holds every sample)."""

    sample: RigSample


@dataclass
class PollFailed(Coalescing):
    """The source raised; the poller keeps going and the UI shows the error."""

    error: str


@dataclass
class TopologyReady(Message, bubble=False):
    """The topology was read, with its advice; or why it could not be (its ``error``)."""

    state: TopologyState


@dataclass
class NcclReady(Message, bubble=False):
    """The NCCL facts and findings; or why they could not be made (``error``)."""

    report: NcclReport | None
    error: str | None = None


@dataclass
class NcclBenchDone(Message, bubble=False):
    """A bandwidth test finished: its text, or None when it failed unexpectedly (the user
    was told)."""

    text: str | None


@dataclass
class NcclFileLoaded(Message, bubble=False):
    """An NCCL log or nccl-tests file, summarised (or why it could not be read)."""

    text: str


@dataclass
class FleetChanged(Coalescing):
    """A host of the fleet has a new state (``index``: the latest to change). Coalesces:
    the view reads every host's latest state from the fleet."""

    index: int


class LaunchChanged(Coalescing):
    """The launched (or followed) server changed: a log line, a poll, a state. Coalesces;
    the controller's state is read under its lock."""


@dataclass
class LaunchPreview(Message, bubble=False):
    """The command the launch form would start, or why it cannot."""

    line: str
    note: str | None
    generation: int = 0

    def can_replace(self, message: Message) -> bool:
        # Textual asks the queued message whether the one behind it supersedes it; workers
        # finish out of order, so only a newer form's command may
        return isinstance(message, LaunchPreview) and message.generation > self.generation


@dataclass
class FitReady(Message, bubble=False):
    """A fit estimate finished; the view keeps the newest request's."""

    outcome: FitOutcome


@dataclass
class PlanReady(Message, bubble=False):
    """The planner's fastest command for the estimate of request ``generation``, or why
    there is none."""

    generation: int
    plan: PlanResult | None
    error: str | None = None


@dataclass
class QuantsReady(Message, bubble=False):
    """The quant table of the estimate of request ``generation`` (or why there is none)."""

    generation: int
    quants: list[QuantFit]
    error: str | None = None


@dataclass
class ModelsFound(Message, bubble=False):
    """GGUF files found in the usual folders (``roots``: the folders looked in)."""

    models: tuple[ModelFile, ...] = field(default_factory=tuple)
    roots: tuple[str, ...] = ()

"""Messages from worker threads to the UI thread."""

from __future__ import annotations

from textual.message import Message

from lltui.core.monitor.models import RigSample


class SampleReady(Message):
    """The model took a new sample: render it. Coalesces: only the newest pending one is
    handled (the model's history already holds every sample)."""

    def __init__(self, sample: RigSample) -> None:
        super().__init__()
        self.sample = sample

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SampleReady)


class PollFailed(Message):
    """The source raised; the poller keeps going and the UI shows the error."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PollFailed)


class TopologyReady(Message):
    """The topology was read (or could not be); the app holds the result."""


class NcclReady(Message):
    """NCCL facts, a bandwidth test or a loaded file changed; the app holds them."""


class LaunchChanged(Message):
    """The launched (or followed) server changed: a log line, a poll, a state. Coalesces."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LaunchChanged)


class LaunchPreview(Message):
    """The command the launch form would start, or why it cannot."""

    def __init__(self, line: str, note: str | None, generation: int = 0) -> None:
        super().__init__()
        self.line = line
        self.note = note
        self.generation = generation

    def can_replace(self, message: Message) -> bool:
        # Textual asks the queued message whether the one behind it supersedes it; workers
        # finish out of order, so only a newer form's command may
        return isinstance(message, LaunchPreview) and message.generation > self.generation


class FitReady(Message):
    """A fit estimate finished; the app keeps the newest."""

    def __init__(self, outcome: object) -> None:
        super().__init__()
        self.outcome = outcome


class ModelsFound(Message):
    """GGUF files found in the usual folders."""

    def __init__(self, models: list[object]) -> None:
        super().__init__()
        self.models = models

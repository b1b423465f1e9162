"""Messages from worker threads to the UI thread."""

from __future__ import annotations

from textual.message import Message

from lltui.core.models import RigSample


class SampleReady(Message):
    """A new sample from the poller. Coalesces: only the newest pending one is handled."""

    def __init__(self, sample: RigSample, poll_seconds: float) -> None:
        super().__init__()
        self.sample = sample
        self.poll_seconds = poll_seconds

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SampleReady)


class PollFailed(Message):
    """The source raised; the poller keeps going and the UI shows the error."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PollFailed)

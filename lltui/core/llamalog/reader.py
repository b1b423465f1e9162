"""One reader of llama.cpp's output: each line classified once (:mod:`.classify`), then folded
twice, into the memory facts (:mod:`.memory`) and the server's state (:mod:`.server`). A
launch's supervisor, a router's log and ``lltui explain`` all read through it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from lltui.core.llamalog.classify import Classified, classify
from lltui.core.llamalog.lines import split_line
from lltui.core.llamalog.memory import MemoryFold
from lltui.core.llamalog.models import DeviceSeen, LlamaLogSummary, LogFacts
from lltui.core.llamalog.patterns import BY_GROUP
from lltui.core.llamalog.server import ServerFold


class LogReader:
    """Feed lines with :meth:`feed`; read :meth:`summary` (the server's state with the memory
    facts) or :meth:`facts` (the memory facts alone)."""

    def __init__(self) -> None:
        self.memory = MemoryFold()
        self.server = ServerFold()

    def feed(self, raw: str) -> list[str]:
        """Take one line of stderr (text) or stdout (``--log-jsonl``); return what it changed
        of the server's state (``ready``, ``listening``, ``error``, ``exit``, ...)."""
        return self.take(classify(raw))

    def take(self, c: Classified) -> list[str]:
        """A line already classified."""
        self.memory.take(c)
        return self.server.take(c)

    def feed_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.feed(line)

    @property
    def ready(self) -> bool:
        return self.server.ready

    def facts(self) -> LogFacts:
        return self.memory.facts()

    def summary(self) -> LlamaLogSummary:
        return self.server.summary(self.memory.facts())


def parse_log(text: str | Iterable[str]) -> LlamaLogSummary:
    """Read a whole log (a string or lines) at once."""
    reader = LogReader()
    reader.feed_lines(text.splitlines() if isinstance(text, str) else text)
    return reader.summary()


def scan_lines(lines: Iterable[str]) -> LogFacts:
    """The memory facts of lines already in memory (tests, a pasted log)."""
    reader = LogReader()
    reader.feed_lines(lines)
    return reader.facts()


_DEVICE_ROW = next(s for s in BY_GROUP["common_param"] if s.name == "device_info")


def parse_list_devices(text: str) -> tuple[DeviceSeen, ...]:
    """The devices ``llama-server --list-devices`` prints (none on a CPU-only build)."""
    devices: list[DeviceSeen] = []
    listing = False
    for raw in text.splitlines():
        line = split_line(raw)
        if line.message.strip().startswith("Available devices"):
            listing = True
        elif listing and (m := _DEVICE_ROW.regex.search(line.message)):
            seen = _DEVICE_ROW.make(m, line)
            if isinstance(seen, DeviceSeen):
                devices.append(replace(seen, source="--list-devices"))
    return tuple(devices)

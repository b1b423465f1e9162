"""The log of llama-server in router mode (``--models-dir``/``--models-preset``): the router's
own lines, and each model's server's lines, which the router forwards prefixed with that
server's port (``[47885] 0.00.016.752 I srv  load_model: ...``; tools/server/server-models.cpp,
server_monitor::on_line).

:class:`RouterLogParser` sorts the lines out: the router's own go to one
:class:`~lltui.core.llama.log.LlamaLogParser`, each model server's to its own, found by the
port the router names when it spawns it (``spawning server instance with name=NAME on port
P``, followed by the arguments one a line); ``instance name=NAME exited with status N`` ends
it. Each model's latest server thus has its own placement (buffers per device), readiness and
error lines. The parser has the interface :class:`~lltui.sources.llama.supervisor.Supervisor`
feeds: :meth:`feed` returns the router's own events, :meth:`summary` the router's own summary;
:meth:`router_summary` gives the models. Standard library only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lltui.core.llama.log import LlamaLogParser, LlamaLogSummary
from lltui.core.llama.log_patterns import FUNC, split_line, strip_tag

CHILD_LINE = re.compile(r"^\[\s*(?P<port>\d{1,5})\] (?P<rest>.*)$", re.DOTALL)
SPAWNED = re.compile(r"^spawning server instance with name=(?P<name>.+) on port (?P<port>\d+)$")
ARGS_START = "spawning server instance with args:"
EXITED = re.compile(r"^instance name=(?P<name>.+) exited with status (?P<code>-?\d+)$")
STOPPING = re.compile(r"^stopping model instance name=(?P<name>.+)$")
FORCE_KILL = re.compile(
    r"^(?:force-killing model instance name=(?P<a>.+) after timeout|"
    r"model name=(?P<b>.+) is still loading, force-killing)$"
)
AVAILABLE = re.compile(r"^\s*\[\s*(?P<source>[\w]+)\] (?P<name>\S+)")
MAX_INSTANCES = 64  # servers remembered over a long run (the newest of each model kept)
MAX_ARGS = 512  # arguments kept of one spawn
_CAUSE_KINDS = ("oom", "cuda", "abort", "argument", "bind")


@dataclass(frozen=True, slots=True)
class ModelInstance:
    """One model server the router started. ``state``: loading, loaded, stopping (asked to
    stop), exited; ``exit_status`` once it exited (0: a clean stop)."""

    name: str
    port: int
    seq: int  # how many servers the router had started before this one
    args: tuple[str, ...]
    state: str
    exit_status: int | None
    force_killed: bool
    log: LlamaLogSummary

    @property
    def failed(self) -> bool:
        """Ended on its own with an error (the router's ``failed``: unloaded, exit code != 0)."""
        return self.state == "exited" and self.exit_status not in (None, 0)

    def problem(self) -> str | None:
        """The line that says why it failed: an out-of-memory, CUDA, abort or argument line
        first, else its first error line (the cause; the lines after it repeat it up the
        stack), else its exit."""
        problems = self.log.problems
        for p in problems:
            if p.kind in _CAUSE_KINDS:
                return p.message
        for p in problems:
            if p.kind != "fit":  # a fit probe's failure repeats the load's
                return p.message
        if self.exit_status not in (None, 0):
            return f"exited with status {self.exit_status}"
        return None


@dataclass(frozen=True, slots=True)
class RouterLogSummary:
    router: LlamaLogSummary
    available: tuple[tuple[str, str], ...]  # (source, name) as the router listed them
    instances: tuple[ModelInstance, ...]  # in the order started

    def latest(self, name: str) -> ModelInstance | None:
        """The newest server of a model, or None if none was started."""
        found = [i for i in self.instances if i.name == name]
        return found[-1] if found else None


@dataclass
class _Instance:
    name: str
    port: int
    seq: int
    parser: LlamaLogParser = field(default_factory=LlamaLogParser)
    args: list[str] = field(default_factory=list)
    state: str = "loading"
    exit_status: int | None = None
    force_killed: bool = False

    def frozen(self) -> ModelInstance:
        return ModelInstance(
            name=self.name,
            port=self.port,
            seq=self.seq,
            args=tuple(self.args),
            state=self.state,
            exit_status=self.exit_status,
            force_killed=self.force_killed,
            log=self.parser.summary(),
        )


class RouterLogParser:
    """Feeds on a router's log a line at a time (see the module docstring)."""

    def __init__(self) -> None:
        self._router = LlamaLogParser()
        self._instances: list[_Instance] = []
        self._by_port: dict[int, _Instance] = {}
        self._available: dict[str, str] = {}
        self._in_available = False
        self._args_for: _Instance | None = None  # the spawn whose arguments are being listed
        self._started = 0

    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            self.feed(line)

    def feed(self, raw: str) -> list[str]:
        """Take one line; return the router's own events (``ready``, ``exit``, ...), plus
        ``model`` when a model's server started, loaded or ended."""
        m = CHILD_LINE.match(raw)
        if m is not None:
            self._args_for = None
            inst = self._by_port.get(int(m.group("port")))
            if inst is None:
                return []
            events = inst.parser.feed(m.group("rest"))
            if "ready" in events and inst.state == "loading":
                inst.state = "loaded"
                return ["model"]
            return []
        return self._own(raw)

    def _own(self, raw: str) -> list[str]:
        line = split_line(raw)
        body = strip_tag(line.message)
        fm = FUNC.match(body)
        func, rest = (fm.group("func"), fm.group("rest")) if fm else ("", body)
        if self._args_for is not None:
            if func == "load" and rest.startswith("  "):
                if len(self._args_for.args) < MAX_ARGS:
                    self._args_for.args.append(rest[2:])
                return []
            self._args_for = None
        events = self._router.feed(raw)
        text = rest.strip()
        if "Available models" in text:
            self._available.clear()
            self._in_available = True
            return events
        if self._in_available and func == "operator()" and (am := AVAILABLE.match(rest)):
            self._available[am.group("name")] = am.group("source")
            return events
        self._in_available = False
        return events + self._lifecycle(text)

    def _lifecycle(self, text: str) -> list[str]:
        if m := SPAWNED.match(text):
            inst = _Instance(m.group("name"), int(m.group("port")), self._started)
            self._started += 1
            self._instances.append(inst)
            self._by_port[inst.port] = inst
            self._forget_old()
            return ["model"]
        if text == ARGS_START:
            self._args_for = self._instances[-1] if self._instances else None
            return []
        if m2 := EXITED.match(text):
            inst2 = self._newest(m2.group("name"))
            if inst2 is not None:
                inst2.state = "exited"
                inst2.exit_status = int(m2.group("code"))
                if self._by_port.get(inst2.port) is inst2:
                    del self._by_port[inst2.port]
                return ["model"]
            return []
        if m3 := STOPPING.match(text):
            inst3 = self._newest(m3.group("name"))
            if inst3 is not None and inst3.state != "exited":
                inst3.state = "stopping"
                return ["model"]
            return []
        if m4 := FORCE_KILL.match(text):
            inst4 = self._newest(m4.group("a") or m4.group("b"))
            if inst4 is not None:
                inst4.force_killed = True
        return []

    def _newest(self, name: str) -> _Instance | None:
        for inst in reversed(self._instances):
            if inst.name == name:
                return inst
        return None

    def _forget_old(self) -> None:
        """Keep the newest server of each model and, of the ended ones, the latest few."""
        if len(self._instances) <= MAX_INSTANCES:
            return
        newest = {inst.name: inst for inst in self._instances}
        ended = [i for i in self._instances if i.state == "exited"]
        # the older servers of a model first, then the oldest ended ones
        ended.sort(key=lambda i: (newest[i.name] is i, i.seq))
        for inst in ended:
            if len(self._instances) <= MAX_INSTANCES:
                break
            self._instances.remove(inst)

    def summary(self) -> LlamaLogSummary:
        """The router's own log (its readiness, its address, its exit)."""
        return self._router.summary()

    def router_summary(self) -> RouterLogSummary:
        return RouterLogSummary(
            router=self._router.summary(),
            available=tuple((src, name) for name, src in self._available.items()),
            instances=tuple(inst.frozen() for inst in self._instances),
        )


def parse_router_log(text: str) -> RouterLogSummary:
    """A whole router log read at once."""
    parser = RouterLogParser()
    parser.feed_text(text)
    return parser.router_summary()

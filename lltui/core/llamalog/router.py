"""The log of llama-server in router mode (``--models-dir``/``--models-preset``): the router's
own lines, and each model's server's lines, which the router forwards prefixed with that
server's port (``[47885] 0.00.016.752 I srv  load_model: ...``; tools/server/server-models.cpp,
server_monitor::on_line).

:class:`RouterLogReader` sorts the lines out: the router's own go to one
:class:`~.reader.LogReader`, each model server's to its own, found by the port the router
names when it spawns it (``spawning server instance with name=NAME on port P``, followed by
the arguments one a line); ``instance name=NAME exited with status N`` ends it. Each model's
latest server thus has its own placement, readiness and error lines. It reads like a
:class:`~.reader.LogReader` (:meth:`feed` returns the router's own events, :meth:`summary`
its own summary); :meth:`router_summary` gives the models. A :class:`RepeatFolder` shows a
log to a person."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lltui.core.llamalog.classify import classify
from lltui.core.llamalog.events import Instance
from lltui.core.llamalog.lines import split_line
from lltui.core.llamalog.models import LlamaLogSummary
from lltui.core.llamalog.reader import LogReader
from lltui.core.text import counted

CHILD_LINE = re.compile(r"^\[\s*(?P<port>\d{1,5})\] (?P<rest>.*)$", re.DOTALL)
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
    reader: LogReader = field(default_factory=LogReader)
    args: list[str] = field(default_factory=list)
    state: str = "loading"
    exit_status: int | None = None
    force_killed: bool = False

    def frozen(self) -> ModelInstance:
        return ModelInstance(
            self.name,
            self.port,
            self.seq,
            tuple(self.args),
            self.state,
            self.exit_status,
            self.force_killed,
            self.reader.summary(),
        )


class RouterLogReader:
    """Feeds on a router's log a line at a time (see the module docstring)."""

    def __init__(self) -> None:
        self._router = LogReader()
        self._instances: list[_Instance] = []
        self._by_port: dict[int, _Instance] = {}
        self._available: dict[str, str] = {}
        self._listing = False
        self._args_for: _Instance | None = None  # the spawn whose arguments are being listed
        self._started = 0

    def feed(self, raw: str) -> list[str]:
        """Take one line; return the router's own events (``ready``, ``exit``, ...), plus
        ``model`` when a model's server started, loaded or ended."""
        m = CHILD_LINE.match(raw)
        if m is not None:
            self._args_for = None
            inst = self._by_port.get(int(m.group("port")))
            if inst is None:
                return []
            if "ready" in inst.reader.feed(m.group("rest")) and inst.state == "loading":
                inst.state = "loaded"
                return ["model"]
            return []
        c = classify(raw)
        line, ev = c.line, c.event
        if self._args_for is not None:
            arg = line.body[len(line.func) + 1 :]  # "load:   ARG"
            if line.func == "load" and arg.startswith("   "):
                if len(self._args_for.args) < MAX_ARGS:
                    self._args_for.args.append(arg[3:])
                return []
            self._args_for = None
        events = self._router.take(c)
        listing, self._listing = self._listing, False
        if not isinstance(ev, Instance):
            return events
        if ev.what == "listing":
            self._available.clear()
            self._listing = True
        elif ev.what == "listed":
            if listing:
                self._available[ev.name] = ev.value
            self._listing = listing
        else:
            return events + self._lifecycle(ev)
        return events

    def _lifecycle(self, ev: Instance) -> list[str]:
        if ev.what == "spawned":
            inst = _Instance(ev.name, int(ev.value), self._started)
            self._started += 1
            self._instances.append(inst)
            self._by_port[inst.port] = inst
            self._forget_old()
            return ["model"]
        if ev.what == "args":
            self._args_for = self._instances[-1] if self._instances else None
            return []
        inst2 = self._newest(ev.name)
        if inst2 is None:
            return []
        if ev.what == "exited":
            inst2.state = "exited"
            inst2.exit_status = int(ev.value)
            if self._by_port.get(inst2.port) is inst2:
                del self._by_port[inst2.port]
            return ["model"]
        if ev.what == "stopping" and inst2.state != "exited":
            inst2.state = "stopping"
            return ["model"]
        if ev.what == "killed":
            inst2.force_killed = True
        return []

    def _newest(self, name: str) -> _Instance | None:
        return next((i for i in reversed(self._instances) if i.name == name), None)

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

    @property
    def ready(self) -> bool:
        return self._router.ready

    def router_summary(self) -> RouterLogSummary:
        return RouterLogSummary(
            router=self._router.summary(),
            available=tuple((src, name) for name, src in self._available.items()),
            instances=tuple(inst.frozen() for inst in self._instances),
        )


def parse_router_log(text: str) -> RouterLogSummary:
    """A whole router log read at once."""
    reader = RouterLogReader()
    for line in text.splitlines():
        reader.feed(line)
    return reader.router_summary()


class RepeatFolder:
    """A log shown to a person: a run of lines that say the same thing (timestamps aside),
    such as an idle server's "all slots are idle" every second, is shown once, then how often
    it came. Feed raw lines; get back the lines to show."""

    def __init__(self) -> None:
        self._last: str | None = None
        self._repeats = 0

    def feed(self, line: str) -> list[str]:
        child = CHILD_LINE.match(line)  # a router's model server: its port, then its line
        if child is not None:
            message = f"[{child.group('port')}] {split_line(child.group('rest')).message}"
        else:
            message = split_line(line).message
        if message == self._last:
            self._repeats += 1
            return []
        shown = self.flush()
        self._last = message
        return [*shown, line]

    def flush(self) -> list[str]:
        """The count of a run still open (at the end of a log, or before a pause)."""
        if not self._repeats:
            return []
        n, self._repeats = self._repeats, 0
        return [f"    (the line above {counted(n, 'more time')})"]

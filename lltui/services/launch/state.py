"""A launch's state: one frozen value that a :class:`~.watch.LaunchWatch` folds the
supervisor's events, the server's log, its HTTP answers and its served speeds into, and hands
to the front ends each time it changes. ``lltui launch`` prints what changed, the launch view
renders it, the monitor's alerts read :func:`llama_status` of it.

What is a stream (the log, how loading went, served requests, each router model's news) is a
:class:`Tail`: its last items and how many came in all, so a front end says each item once.
A new kind of fact is a new field here and a new fold in the watch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Generic, TypeVar

from lltui.core.cmdline.address import public_url
from lltui.core.fit.evict import Decision
from lltui.core.llama.timings import RequestTimings
from lltui.core.llamalog.exit_reason import exit_sentence
from lltui.core.llamalog.models import DevicePlacement, LlamaLogSummary
from lltui.core.memory.kv_fill import KvFill
from lltui.core.monitor.alerts import LlamaStatus
from lltui.core.monitor.bottleneck import Verdict
from lltui.core.monitor.plan_reality import PlanReality
from lltui.core.speed.served import SpeedCheck
from lltui.sources.llama.supervisor import ServerExit

if TYPE_CHECKING:
    from lltui.services.launch.compare import LaunchCheck

T = TypeVar("T")
LOG_LINES = 2000
SERIES_LEN = 300
# phases: idle, starting, loading, ready, stopping, exited (a server of ours); following (one
# started elsewhere, HTTP only); error (nothing started: why in the message)
RUNNING_PHASES = ("starting", "loading", "ready", "stopping")


@dataclass(frozen=True, slots=True)
class Tail(Generic[T]):
    """The last ``limit`` items of a stream and how many came in all."""

    items: tuple[T, ...] = ()
    total: int = 0
    limit: int = LOG_LINES

    def add(self, new: Sequence[T]) -> Tail[T]:
        if not new:
            return self
        return Tail((self.items + tuple(new))[-self.limit :], self.total + len(new), self.limit)

    def since(self, seen: int) -> tuple[T, ...]:
        """The items after the first ``seen`` that are still kept."""
        fresh = self.total - seen
        return self.items[-fresh:] if fresh > 0 else ()


@dataclass(frozen=True, slots=True)
class Rates:
    """What the server's HTTP endpoints say: tokens/s and J/token with their history."""

    gen_tps: tuple[float, ...] = ()
    prompt_tps: tuple[float, ...] = ()
    jpt: tuple[float, ...] = ()
    tokens_total: float | None = None
    slots_busy: int | None = None
    jpt_note: str | None = None  # why there is no J/token


@dataclass(frozen=True, slots=True)
class Speed:
    """The prediction for the command, and each served request's own timing beside it."""

    predicted_decode_tps: float | None = None
    predicted_prefill_tps: float | None = None
    calibrated: str | None = None  # "calibrated on this rig from N points, DATE": it applied
    last_request: RequestTimings | None = None  # from the server's timing lines
    last_request_at: float | None = None  # time.monotonic()
    served: Tail[SpeedCheck] = field(default_factory=lambda: Tail(limit=16))
    kept: str | None = None  # the requests kept as calibration points of this rig, in words

    def latest(self, prompt: bool) -> SpeedCheck | None:
        return next((c for c in reversed(self.served.items) if c.prompt == prompt), None)


@dataclass(frozen=True, slots=True)
class ModelUse:
    """What the on-demand proxy served of one model: requests forwarded, the last one's
    time (time.monotonic())."""

    name: str
    requests: int = 0
    last_used: float | None = None


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One model as the CLI and the view show it: the router's state, the plan's numbers,
    its server's memory per device from its log, why it failed; where its own server is
    polled, its requests in flight and tokens/s."""

    name: str
    state: str  # unloaded, loading, loaded, sleeping, failed, unknown
    kept: bool
    n_ctx: int | None = None  # the context the plan pins
    planned_bytes: int | None = None  # what the plan says its server allocates (host too)
    placement: tuple[DevicePlacement, ...] = ()  # from its server's log
    port: int | None = None  # its own server's, while it runs
    problem: str | None = None
    busy: int | None = None  # requests in flight (busy slots)
    gen_tps: float | None = None
    tokens_total: float | None = None
    # served on demand: the devices the plan gives it (its pod), its priority, what the
    # proxy counted, and what a request for it would do now (the eviction policy's answer)
    pod: tuple[str, ...] = ()
    priority: int = 0
    use: ModelUse | None = None
    on_request: Decision | None = None
    # its own server's KV fill and the GPU memory its process holds now (where polled)
    kv: KvFill | None = None
    held_bytes: int | None = None

    @property
    def memory_mib(self) -> float | None:
        """What its server allocated (host included), from its log."""
        return sum(p.total_mib for p in self.placement) if self.placement else None


@dataclass(frozen=True, slots=True)
class RouterView:
    """A router's models (the rows), its last word on a load (``note``), each model's state
    change worth a line (``news``), the loads at start the plan refused, and the on-demand
    proxy's address."""

    rows: tuple[ModelRow, ...] = ()
    note: str | None = None
    on_demand_url: str | None = None  # where clients connect, served on demand
    news: Tail[ModelRow] = field(default_factory=lambda: Tail(limit=256))
    refused: Tail[str] = field(default_factory=lambda: Tail(limit=64))
    # the model the note follows: (load|unload, name) while that is under way, ("", name)
    # once it is done (the note then says the model's state as the rows have it)
    acted: tuple[str, str] | None = None

    def following(self, rows: tuple[ModelRow, ...]) -> RouterView:
        """The view with ``rows``, its note true of them: "loading alpha" while the load
        asked for is under way, then "alpha: loaded" (or failed, or unloaded since)."""
        if self.acted is None:
            return replace(self, rows=rows)
        what, name = self.acted
        state = next((r.state for r in rows if r.name == name), None)
        if state is None:
            return replace(self, rows=rows)
        done = {"load": ("loaded", "sleeping", "failed"), "unload": ("unloaded", "failed")}
        if what and state not in done[what]:
            return replace(self, rows=rows, note=f"{what}ing {name}")
        return replace(self, rows=rows, note=f"{name}: {state}", acted=("", name))


@dataclass(frozen=True, slots=True)
class LaunchState:
    phase: str = "idle"
    message: str = ""  # the last thing worth telling, in words
    subject: str = ""  # what runs: the model, or a router's models
    notes: tuple[str, ...] = ()  # warnings said when it started
    url: str | None = None
    pid: int | None = None
    argv: tuple[str, ...] = ()
    health: str | None = None  # the last /health answer, in words
    refused_plan: bool = False  # not started: fit says it will not fit (it can be forced)
    # from the server's log: what it read, where the model went, how loading went
    log_summary: LlamaLogSummary | None = None
    placement: tuple[DevicePlacement, ...] = ()
    offload: str | None = None  # "offloaded 33/33 layers"
    progress: Tail[str] = field(default_factory=lambda: Tail(limit=64))
    ready_at: float | None = None  # time.monotonic() when it was first ready
    # once loaded: the server's buffers beside lltui's prediction for its flags and build
    check: LaunchCheck | None = None
    exit: ServerExit | None = None
    log: Tail[str] = field(default_factory=Tail)  # the log as shown (repeats folded)
    rates: Rates = field(default_factory=Rates)
    speed: Speed = field(default_factory=Speed)
    router: RouterView | None = None  # a router (llama-server --models-preset)
    kv: KvFill | None = None  # how full the KV cache is, from /slots (kv_watch)
    kv_note: str | None = None  # why there is no KV fill
    plan: PlanReality | None = None  # the plan per GPU beside what the process holds now
    verdicts: tuple[Verdict, ...] = ()  # why it is slow, from the last samples

    @property
    def running(self) -> bool:
        """A server of ours that still runs."""
        return self.phase in RUNNING_PHASES and self.pid is not None


def describe_exit(result: ServerExit) -> str:
    """One line on how the server ended, the same in the CLI and the view."""
    return exit_sentence(result.returncode, result.reason, clean=result.clean)


def llama_status(st: LaunchState) -> LlamaStatus | None:
    """The launched (or followed) server's health as the monitor's alerts take it; None
    when there is no server."""
    if st.url is None or st.phase == "idle":
        return None
    if st.phase in ("exited", "error"):
        state = "down"
    elif st.phase in ("starting", "loading", "stopping"):
        state = "loading"
    else:
        state = st.health or ("ready" if st.phase == "ready" else "loading")
    return LlamaStatus(public_url(st.url), state, None if state == "ready" else st.message)

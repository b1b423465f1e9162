"""The server's fold: what llama-server says of itself as it starts, serves and stops, from its
lines' events: readiness and its address, what ``--fit`` decided, the memory breakdown table
it prints at exit, and the problems (error lines, the raw lines of a dying process)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lltui.core.llamalog.classify import Classified
from lltui.core.llamalog.events import (
    BreakdownTable,
    Event,
    Fatal,
    FitContext,
    FitEnd,
    FitProjected,
    FitTarget,
    Flag,
)
from lltui.core.llamalog.lines import strip_tag
from lltui.core.llamalog.models import (
    MAX_KEPT_LINES,
    AllocFailure,
    FitDeviceLayers,
    FitDeviceProjection,
    FitSummary,
    LlamaLogSummary,
    LogFacts,
    LogProblem,
    MemoryBreakdownRow,
    PromptCache,
)
from lltui.core.llamalog.patterns import BACKEND_ABORTS, CUDA_BACKENDS, group

_KIND = {"bind": "bind", "flag": "argument", "value": "argument", "load": "load", "damaged": "load"}


def classify_problem(ev: Event | None) -> str:
    """A word for what kind of failure an error line reports, from what the table read of it
    (``ev``): out of memory, a ggml-cuda error, an abort, --fit's end, a flag, ..."""
    if isinstance(ev, AllocFailure):
        if ev.kind in ("oom", "abort"):
            return ev.kind
        return "cuda" if ev.backend in CUDA_BACKENDS else "error"
    if isinstance(ev, FitEnd):  # (a --fit probe's model that did not load: the load's)
        return "load" if ev.failure is not None and ev.failure.stage == "load" else "fit"
    if isinstance(ev, Fatal):
        return _KIND.get(ev.what, "error")
    if isinstance(ev, Flag) and ev.what == "abort_at":
        return "cuda" if ev.value in BACKEND_ABORTS else "abort"
    return "error"


def _last_words(ev: Event | None) -> bool:
    """A raw stderr line of a process that aborts: a ggml-cuda error (its out of memory
    too), an assertion, ggml_abort's FILE:LINE line."""
    if isinstance(ev, AllocFailure):
        return ev.kind == "abort" or ev.backend in CUDA_BACKENDS
    return isinstance(ev, Flag) and ev.what == "abort_at"


def _fit(fit: FitSummary, ev: Event | None) -> FitSummary:
    """What --fit decided, with one more of its lines."""
    fit = replace(fit, ran=True)
    if isinstance(ev, FitProjected):
        return replace(
            fit, projected_used_mib=ev.used_mib, projected_of=ev.of, projected_free_mib=ev.free_mib
        )
    if isinstance(ev, FitDeviceProjection):
        return replace(fit, projections=(*fit.projections, ev))
    if isinstance(ev, FitDeviceLayers):
        # fit prints its plan per device once per pass; the last pass is the one used
        kept = tuple(d for d in fit.device_layers if d.device != ev.device)
        return replace(fit, device_layers=(*kept, ev))
    if isinstance(ev, FitTarget):
        return replace(fit, target_mib=ev.target_mib, reduce_by_mib=ev.reduce_by_mib)
    if isinstance(ev, FitContext):
        return replace(fit, ctx_from=ev.ctx_from, ctx_to=ev.ctx_to, ctx_saved_mib=ev.saved_mib)
    if isinstance(ev, FitEnd):
        if ev.status == "took":
            return replace(fit, seconds=ev.seconds)
        return replace(fit, status=ev.status, reason=ev.reason)
    what = ev.what if isinstance(ev, Flag) else None
    if what == "fit_no_change" or (what == "fit_ok" and fit.status != "no_change"):
        return replace(fit, status="no_change" if what == "fit_no_change" else "changed")
    return fit


class ServerFold:
    """Take each classified line with :meth:`take` (it returns the names of what the line
    changed: ``ready``, ``listening``, ``model_loaded``, ``error``, ``exit``, ``shutdown``);
    read :meth:`summary`."""

    def __init__(self) -> None:
        self.model_loaded = False
        self.ready = False
        self.shutting_down = False
        self.exit_reason: str | None = None
        self.listening: list[str] = []
        self.problems: list[LogProblem] = []
        self.problems_dropped = 0
        self.warnings: list[str] = []
        self.warnings_dropped = 0
        self.fit = FitSummary()
        self.breakdown: list[MemoryBreakdownRow] = []
        self.breakdown_open = False
        self.seen_prefix = False
        self.prompt_cache: PromptCache | None = None

    def take(self, c: Classified) -> list[str]:
        line, ev = c.line, c.event
        if isinstance(ev, BreakdownTable):
            self.breakdown, self.breakdown_open = list(ev.rows), False
            return []
        msg = line.message
        if line.prefixed:
            self.seen_prefix = True
        elif self.seen_prefix:
            # with prefixes on, a bare line continues a multi-line message; only the raw
            # stderr lines of a dying process can matter there
            return self._raw(msg, ev)
        if not msg.strip():
            return []
        # (ggml-sycl says its pinned-memory warning at the error level)
        pinned = isinstance(ev, Flag) and ev.what == "pinned"
        if (
            line.level == "W"
            or pinned
            or (not line.prefixed and msg.startswith(("warn", "warning:")))
        ):
            self._keep(self.warnings, msg.strip(), "warnings_dropped")
        name = group(line.func)
        if name != "@breakdown":
            self.breakdown_open = False
        events = self._event(name, line.func, line.rest, line.level, ev)
        if line.level == "E" and not pinned:
            events += self._problem(strip_tag(msg), "E", ev)
        elif not line.prefixed:
            events += self._raw(msg, ev)
        return events

    def _event(
        self, name: str, func: str, rest: str, level: str | None, ev: Event | None
    ) -> list[str]:
        if name == "@fit" or func == "common_fit_params":
            if isinstance(ev, Flag) and ev.what == "fit_start":
                self.fit = FitSummary()
            self.fit = _fit(self.fit, ev)
            if isinstance(ev, FitEnd) and ev.status == "failed":
                self._problem(rest, level, ev, kind="fit")
            return []
        if isinstance(ev, PromptCache):
            self.prompt_cache = ev
            return ["prompt_cache"]
        if isinstance(ev, Flag) and ev.what == "fit_start":  # llama-server's own fit
            self.fit = FitSummary(ran=True)
        elif isinstance(ev, Flag) and ev.what == "breakdown":
            self.breakdown, self.breakdown_open = [], True
        elif isinstance(ev, MemoryBreakdownRow) and self.breakdown_open:
            self.breakdown.append(ev)
        elif isinstance(ev, Flag) and func in ("llama_server", "main", "operator()"):
            return self._server(ev)
        return []

    def _server(self, ev: Flag) -> list[str]:
        if ev.what == "model_loaded":
            self.model_loaded = True
            return ["model_loaded"]
        if ev.what in ("listening", "http_listening") and ev.value:
            # older builds say "HTTP server is listening" before they load the model: an
            # address, not readiness; "listening on" follows "model loaded" in every build
            if ev.value not in self.listening:
                self.listening.append(ev.value)
            if ev.what == "listening" and not self.ready:
                self.ready = True
                return ["listening", "ready"]
            return ["listening"]
        if ev.what == "exiting":
            self.exit_reason = ev.value
            return ["exit"]
        if ev.what == "shutdown":
            self.shutting_down = True
            return ["shutdown"]
        return []

    def _raw(self, msg: str, ev: Event | None) -> list[str]:
        """A line without llama-server's prefix: llama-server refusing its arguments, or the
        last words of a process that aborts."""
        s = msg.strip()
        argument = isinstance(ev, Fatal) and ev.what in ("flag", "value")
        if argument or _last_words(ev):
            return self._problem(s, None, ev)
        if ev == Flag("shutdown", "second"):
            self.shutting_down = True
            return ["shutdown"]
        return []

    def _problem(
        self, message: str, level: str | None, ev: Event | None, kind: str | None = None
    ) -> list[str]:
        problem = LogProblem(kind or classify_problem(ev), message.strip(), level)
        if not self.problems or self.problems[-1] != problem:
            self._keep(self.problems, problem, "problems_dropped")
        return ["error"]

    def _keep(self, kept: list[Any], item: object, dropped: str) -> None:
        if len(kept) < MAX_KEPT_LINES:
            kept.append(item)
        else:
            setattr(self, dropped, getattr(self, dropped) + 1)

    def summary(self, memory: LogFacts) -> LlamaLogSummary:
        return LlamaLogSummary(
            memory=memory,
            model_loaded=self.model_loaded,
            listening=tuple(self.listening),
            ready=self.ready,
            shutting_down=self.shutting_down,
            exit_reason=self.exit_reason,
            problems=tuple(self.problems),
            problems_dropped=self.problems_dropped,
            warnings=tuple(self.warnings),
            warnings_dropped=self.warnings_dropped,
            fit=self.fit,
            memory_breakdown=tuple(self.breakdown),
            prompt_cache=self.prompt_cache,
        )

"""llama-server in router mode, the same for ``lltui launch --models`` and the launch view.

A :class:`RouterSession` reads the models (:mod:`.router_prep`), plans them together
(:mod:`lltui.services.plan`), writes the preset that pins each model's settings, and starts
the router as a :class:`~.session.Session` (the same binary lookup, address checks, secrets
and supervision as one server; the log read by a
:class:`~lltui.core.llamalog.router.RouterLogReader`). Loads go through the plan: a model
that would not fit with the ones loaded is refused in one line naming what to unload, kept
models are never named, and the router runs without autoload so that a request for an
unloaded model cannot load it behind the plan's back. Stopping the router stops every model
server: they share its process group, and the supervisor sweeps the group once it exits.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.cmdline.launch_spec import ANY_LAUNCH, LaunchError, LaunchPolicy, LaunchSpec
from lltui.core.fit.evict import (
    Decision,
    Policy,
    Resident,
    decide,
    decide_all,
    policy_from_plan,
    refusal,
    residents,
)
from lltui.core.fit.plan import fits_with
from lltui.core.llama.router_api import RESIDENT_STATES, RouterModel
from lltui.core.llamalog.exit_reason import exit_reason, stopped_from_outside
from lltui.core.llamalog.router import CHILD_LINE, RouterLogReader, RouterLogSummary
from lltui.paths import state_dir
from lltui.services.launch.request import (
    SECRET_IN_PS,
    GivenLaunch,
    NoteSink,
    PreparedLaunch,
    check_secrets,
    runtime_spec,
)
from lltui.services.launch.router_prep import (
    RouterRequest,
    alias_map,
    named,
    preset_text,
    read_models,
    router_args,
    split_shared,
    with_keep,
)
from lltui.services.launch.session import Session
from lltui.services.launch.state import ModelRow, ModelUse
from lltui.services.plan import (
    PlanReport,
    PlanRequest,
    left_out_line,
    named_entries,
    plan_models,
)
from lltui.sources.llama.supervisor import DEFAULT_LOG_LINES, ServerExit, free_port

LOOPBACK = "127.0.0.1"

if TYPE_CHECKING:
    from lltui.core.memory.results import FitResult


class RouterRefused(Exception):
    """A load or unload lltui will not ask for, or the router refused: one line."""


@dataclass(frozen=True)
class PreparedRouter:
    launch: PreparedLaunch
    report: PlanReport
    preset: str  # the preset's text
    preset_path: str  # where it is written when the router starts
    kept: tuple[str, ...]
    load: tuple[str, ...]  # loaded at start, after the kept ones
    proxy_url: str | None = None  # on demand: where clients connect (the router is private)
    priority: tuple[tuple[str, int], ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.report.plan.models)

    @property
    def url(self) -> str:
        """Where clients connect."""
        return self.proxy_url or self.launch.spec.url

    def policy(self, kept: Sequence[str] | None = None) -> Policy:
        """The eviction policy over the plan (:mod:`lltui.core.fit.evict`)."""
        pinned = self.kept if kept is None else kept
        return policy_from_plan(self.report.plan, pinned, dict(self.priority))

    def at_start(self) -> tuple[list[Resident], dict[str, str]]:
        """The start's loads as :meth:`RouterSession.load_at_start` decides them: the models
        resident after, and for each load refused the line it is refused with."""
        policy = self.policy()
        resident: list[Resident] = []
        refused: dict[str, str] = {}
        for name in (*self.kept, *self.load):
            line = refusal(policy, name, resident)
            if line is not None:
                refused[name] = line
            elif decide(policy, name, resident).action == "load":
                resident.append(Resident(name, float(len(resident))))
        return resident, refused

    def on_demand(self) -> dict[str, Decision]:
        """For each model, what a request for it would do once the start's loads are done."""
        return decide_all(self.policy(), self.at_start()[0])


def _allocated(result: FitResult) -> int:
    """What llama.cpp allocates for the model, every device and the host (no margin)."""
    return sum(d.total_bytes for d in result.devices if d.kind != "cpu") + result.host.total_bytes


def last_used(use: ModelUse | None) -> float:
    """When the proxy last forwarded a request for a model (0: never)."""
    return (use.last_used or 0.0) if use is not None else 0.0


class RouterSession(Session):
    """One router, from a request to its exit: :meth:`prepare`, :meth:`start`, load and
    unload by the plan, :meth:`stop`; :meth:`close` (or ``with``) leaves nothing running."""

    def __init__(
        self,
        request: RouterRequest,
        *,
        environ: Mapping[str, str] | None = None,
        on_note: NoteSink | None = None,
        policy: LaunchPolicy = ANY_LAUNCH,
    ) -> None:
        super().__init__(environ=environ, on_note=on_note, policy=policy)
        self.request = request
        self._parser = RouterLogReader()
        self._prepared: PreparedRouter | None = None
        self._kept: set[str] = set()
        self._client: Any = None  # RouterClient, made once the router runs (imports httpx)
        self._op = threading.Lock()  # one load or unload decided at a time, the proxy's too
        self._proxy: Any = None  # OnDemandProxy while it runs (imports aiohttp)
        # when lltui loaded each model (the view's l, --load): a use, as llama-server's router
        # counts a load; the proxy sees only the loads and requests that pass through it
        self._loaded_at: dict[str, float] = {}
        self._public: tuple[str, int] | None = None  # on demand: the clients' address
        self._preset_written: str | None = None  # the preset this session wrote
        # what the proxy loaded and unloaded, for the watch: a model loaded and evicted
        # between two polls of the router's list was never said (kind, model), in order
        self._moves: list[tuple[str, str]] = []
        self._moves_lock = threading.Lock()

    @property
    def subject(self) -> str:
        return f"{', '.join(self.prepared.names)} (router)"

    def take_moves(self) -> list[tuple[str, str]]:
        """The proxy's loads and evictions since the last call: (state, model), in order."""
        with self._moves_lock:
            moves, self._moves = self._moves, []
        return moves

    def log_parser(self) -> RouterLogReader:
        return self._parser

    def prepare(self, *, require_binary: bool = True) -> PreparedRouter:
        """Read the models, plan them, write the preset's text, build the command."""
        from lltui.sources.llama import launch_prep

        req = self.request
        launch_args, shared, router_words = split_shared(req.words)
        report, kept, loads, priority = self._plan(req, shared)
        for model in report.plan.models:  # a preset's own flags reach a process too
            self.policy.check(model.args.to_argv())
        spec = self._router_spec(req, launch_args, router_words)
        file_keys = launch_prep.read_key_file(spec.api_key_file) if spec.api_key_file else ()
        prepared = self.prepare_given(
            GivenLaunch(spec=spec), file_keys, require_binary=require_binary
        )
        if self._public is not None:  # on demand: the proxy is what clients reach
            self._warn_if_open(self._public[0], spec, "use the models and load them")
        self._warn_if_rpc_open(ep for model in report.plan.models for ep in model.args.rpc)
        header = [f"written by lltui for llama-server --models-preset (router on port {spec.port})"]
        text = preset_text(report.plan.models, prepared.flags, header)
        self._kept = set(kept)
        path = spec.models_preset or ""
        proxy_url = None
        if self._public is not None:
            proxy_url = replace(spec, host=self._public[0], port=self._public[1]).url
        self._prepared = PreparedRouter(
            prepared, report, text, path, kept, loads, proxy_url, priority
        )
        return self._prepared

    def _plan(
        self, req: RouterRequest, shared: LlamaArgs
    ) -> tuple[PlanReport, tuple[str, ...], tuple[str, ...], tuple[tuple[str, int], ...]]:
        """The models read and planned: the report, the kept ones, the ones to load, the
        priorities (the preset's, then the flags')."""
        from lltui.services.fit import FitFailed

        read = read_models(req, shared)
        for line in read.notes:
            self._note("warning", line)
        entries = named_entries(read.entries)
        # a model named by one of its aliases (--pin chat), as the router serves it
        model_of = alias_map([(e.name or "", e.args) for e in entries])
        pins = (*read.pin, *(model_of.get(n, n) for n in req.keep))
        given = [(model_of.get(n, n), v) for n, v in req.priority]
        priority = tuple(dict((*read.priority, *given)).items())
        request = PlanRequest(
            with_keep(entries, pins),
            gpus=req.gpus,
            margin_mib=req.margin_mib,
            host_free_bytes=req.host_free_bytes,
            verb="launch",
        )
        try:
            # a folder's or a preset's file that cannot be read is left out, with a line; a
            # model the user typed on the command line is refused, as one model's launch is
            report = plan_models(request)
        except FitFailed as exc:  # (the front end puts its own name first)
            raise LaunchError(str(exc).removeprefix("launch: "), exc.code) from None
        for name, why in report.left_out:
            self._note("warning", left_out_line(name, why))
        # a name checked against the models served (one left out is dropped: said above)
        planned = set(report.plan.model_names)
        served = [e.name or "" for e in entries if e.name in planned]
        left = {name for name, _ in report.left_out}
        kept = named(served, [n for n in pins if n not in left], "--pin")
        wanted = (*read.load, *(model_of.get(n, n) for n in req.load))
        loads = named(served, [n for n in wanted if n not in left], "--load")
        named(served, [n for n, _ in given if n not in left], "--priority")
        loads = tuple(n for n in loads if n not in kept)
        if kept and not fits_with(report.plan, kept):
            raise LaunchError(f"the kept models do not fit together: {', '.join(kept)}")
        return report, kept, loads, priority

    def _router_spec(
        self, req: RouterRequest, launch_args: LlamaArgs, router_words: Sequence[str]
    ) -> LaunchSpec:
        """The router's launch: its address and keys, no model flag, the preset's path."""
        # the request's address (the view's listen field) under the flags', as for one server
        launch: dict[str, Any] = {"host": req.host, "port": req.port}
        launch = {name: value for name, value in launch.items() if value is not None}
        launch.update({name: getattr(launch_args, name) for name in launch_args.given})
        if check_secrets(launch, req.keys_on_command_line):
            self._note("warning", SECRET_IN_PS)
        spec = runtime_spec(
            LaunchSpec(args=router_args(router_words), models_preset="-", **launch), self.environ
        )
        path = str(state_dir(self.environ) / f"router-{spec.port}.ini")
        if req.on_demand:  # lltui takes the address; the router a private port behind it
            if "," in spec.host or spec.host.endswith(".sock"):
                raise LaunchError(
                    f"--host {spec.host}: lltui serves models on demand on one TCP address; "
                    "give one, or --no-on-demand"
                )
            self._public = (spec.host, spec.port)
            spec = replace(spec, host=LOOPBACK, port=free_port(LOOPBACK))
        return replace(spec, models_preset=path)

    @property
    def prepared(self) -> PreparedRouter:
        if self._prepared is None:
            raise LaunchError("the router is not prepared yet", 1)
        return self._prepared

    def _ensure_prepared(self) -> PreparedLaunch:
        """The preset written where the router reads it, before it starts."""
        prepared = self._prepared or self.prepare()
        _write_private(prepared.preset_path, prepared.preset)
        self._preset_written = prepared.preset_path
        return prepared.launch

    def start(
        self,
        *,
        keep_running: bool = False,
        on_line: Callable[[str], None] | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        """Start the router and, on demand, the proxy in front of it (the proxy lives in
        lltui's process: a router kept running past lltui would lose it)."""
        if keep_running and self.request.on_demand:
            raise LaunchError("a router served on demand cannot outlive lltui (its proxy is lltui)")
        _check_servable(self.prepared)
        # the address first: nothing written or started where it is taken (the preset is
        # named after its port: another router's on that port was overwritten)
        spec = self.prepared.launch.spec
        _check_free(*(self._public or (spec.host, spec.port)))
        super().start(keep_running=keep_running, on_line=on_line, on_event=on_event)
        if self._public is not None:
            self._start_proxy(*self._public)

    def _start_proxy(self, host: str, port: int) -> None:
        from lltui.services.launch.ondemand import OnDemandProxy, ProxyEvent

        def said(event: ProxyEvent) -> None:
            with self._moves_lock:
                if event.kind == "load":
                    self._moves.append(("loading", event.model))
                elif event.kind == "unloaded":
                    self._moves.append(("unloaded", event.model))
            if event.kind == "evict":
                self._note("info", f"unloading {', '.join(event.models)} to load {event.model}")
            elif event.kind == "refused":
                self._note("info", f"not loading {event.model}: {event.reason}")

        spec = self.launch.spec
        keys = [k for k in self.launch.command.secrets if k != spec.hf_token and "," not in k]
        proxy = OnDemandProxy(
            self.url,
            lambda: self.prepared.policy(sorted(self._kept)),
            host=host,
            port=port,
            keys=keys,
            on_event=said,
            decisions=self._op,
        )
        try:
            proxy.start()
        except OSError as exc:
            raise LaunchError(str(exc), 1) from None
        self._proxy = proxy

    @property
    def proxy(self) -> Any:
        """The on-demand proxy while it runs (None otherwise)."""
        return self._proxy

    def load_at_start(self) -> list[str]:
        """Load the kept models, then the ones asked for; a line for each refused (those the
        plan refuses at start in the dry run's words: asked while the ones before still load,
        the router's state would add what they are doing)."""
        refused = self.prepared.at_start()[1]
        said = []
        for name in (*self.prepared.kept, *self.prepared.load):
            if name in refused:
                said.append(refused[name])
                continue
            try:
                self.load(name)
            except RouterRefused as exc:
                said.append(str(exc))
        return said

    @property
    def client(self) -> Any:
        if self._client is None:
            from lltui.sources.llama.router_http import RouterClient

            self._client = RouterClient(self.url, api_key=self.launch.http_key)
        return self._client

    @property
    def url(self) -> str:
        return self.launch.spec.url

    def models(self) -> tuple[RouterModel, ...]:
        """The router's list now (RouterRefused when it cannot be read)."""
        from lltui.sources.llama.router_http import RouterHttpError

        try:
            return tuple(self.client.models())
        except RouterHttpError as exc:
            raise RouterRefused(str(exc)) from None

    def refusal(self, name: str, listed: tuple[RouterModel, ...]) -> str | None:
        """Why ``name`` may not load now, by the policy the proxy evicts by (None: it may)."""
        state = next((m.state for m in listed if m.name == name), None)
        if state in RESIDENT_STATES:
            return f"{name} is already {state}"
        return refusal(self.prepared.policy(sorted(self._kept)), name, self._resident(listed))

    def _resident(self, listed: tuple[RouterModel, ...] | None) -> list[Resident]:
        """The models the router lists resident, each with its last use and its requests in
        flight and waiting as the proxy saw them, and whether it is still loading."""
        proxy = self._proxy
        use = proxy.use() if proxy is not None else {}
        busy = proxy.in_flight() if proxy is not None else {}
        queued = proxy.queued() if proxy is not None else {}
        states = {m.name: m.state for m in listed or ()}
        last = {n: max(self._loaded_at.get(n, 0.0), last_used(use.get(n))) for n in states}
        return residents(states, last, busy, queued)

    def load(self, name: str) -> None:
        """Load ``name`` if the plan says it fits with what is loaded now; RouterRefused
        (one line: why, and what to unload) otherwise."""
        from lltui.sources.llama.router_http import RouterHttpError

        with self._op:
            refused = self.refusal(name, self.models())
            if refused is not None:
                raise RouterRefused(refused)
            try:
                self.client.load(name)
            except RouterHttpError as exc:
                raise RouterRefused(f"{name}: {exc}") from None
            self._loaded_at[name] = time.monotonic()
            if self._proxy is not None:  # (its own evictions go by last use too)
                self._proxy.note_use(name, self._loaded_at[name])

    def unload(self, name: str) -> None:
        from lltui.sources.llama.router_http import RouterHttpError

        if name in self._kept:
            raise RouterRefused(f"{name} is kept: unkeep it first")
        with self._op:
            try:
                self.client.unload(name)
            except RouterHttpError as exc:
                raise RouterRefused(f"{name}: {exc}") from None

    def keep(self, name: str, on: bool) -> None:
        if name not in self.prepared.names:
            raise RouterRefused(f"{name}: no model of that name")
        (self._kept.add if on else self._kept.discard)(name)

    @property
    def kept(self) -> frozenset[str]:
        return frozenset(self._kept)

    def log(self) -> RouterLogSummary:
        sup = self.supervisor
        if sup is None:
            return self._parser.router_summary()
        return sup.read_log(lambda p: self._parser.router_summary())

    def rows(self, listed: tuple[RouterModel, ...] | None) -> list[ModelRow]:
        """Every model of the plan (and any other the router lists), in the plan's order."""
        log = self.log()
        plan = self.prepared.report.plan
        by_name = {m.name: m for m in listed or ()}
        names = [m.name for m in plan.models] + [n for n in by_name if n not in plan.model_names]
        demand = self._on_demand(listed)
        rows = []
        for name in names:
            status = by_name.get(name)
            inst = log.latest(name)
            state = status.state if status is not None else "unknown"
            if status is not None and status.failed and state == "unloaded":
                state = "failed"
            running = inst is not None and inst.state in ("loading", "loaded", "stopping")
            planned = next((m for m in plan.models if m.name == name), None)
            rows.append(
                ModelRow(
                    name=name,
                    state=state,
                    kept=name in self._kept,
                    n_ctx=planned.n_ctx if planned is not None else None,
                    planned_bytes=_allocated(planned.result) if planned is not None else None,
                    # what its server holds: nothing once it has stopped (its last log
                    # stays behind)
                    placement=tuple(inst.log.placement()) if running and inst is not None else (),
                    port=inst.port if running and inst is not None else None,
                    problem=inst.problem() if inst is not None and state == "failed" else None,
                    **demand.get(name, {}),
                )
            )
        return rows

    def _on_demand(self, listed: tuple[RouterModel, ...] | None) -> dict[str, dict[str, Any]]:
        """Served on demand: each model's pod, priority, what the proxy counted, and for
        one not resident what a request would do now (asked once per refresh)."""
        proxy = self._proxy
        if proxy is None:
            return {}
        use = proxy.use()
        policy = self.prepared.policy(sorted(self._kept))
        resident = self._resident(listed)
        out: dict[str, dict[str, Any]] = {}
        for name, need in policy.needs.items():
            out[name] = {
                "pod": tuple(need.devices),
                "priority": need.priority,
                "use": use.get(name),
                "on_request": None
                if listed is None or name in {r.name for r in resident}
                else decide(policy, name, resident),
            }
        return out

    def judged_exit(self, result: ServerExit) -> ServerExit:
        sup = self.supervisor
        lines = sup.log_tail(DEFAULT_LOG_LINES) if sup is not None else list(result.log_tail)
        return router_exit(result, lines)

    def close(self) -> None:
        if self._proxy is not None:
            with contextlib.suppress(Exception):
                self._proxy.stop()
            self._proxy = None
        try:
            super().close()
        finally:
            if self._client is not None:
                with contextlib.suppress(Exception):
                    self._client.close()
                self._client = None
            written, self._preset_written = self._preset_written, None
            if written is not None and not (self._keep_running or self._detached):
                with contextlib.suppress(OSError):  # (a router left running still reads it)
                    os.unlink(written)


def router_exit(result: ServerExit, lines: Sequence[str]) -> ServerExit:
    """How a router ended, judged on its own lines: what a model's server said (forwarded
    as ``[port] ...``), a failed load among it, is that model's, not the router's."""
    own = [line for line in lines if not CHILD_LINE.match(line)]
    stopped, code = result.stopped, result.returncode
    return replace(
        result,
        reason=exit_reason(code, own, stopped=stopped, supervised=True, hurried=result.hurried),
        from_outside=stopped_from_outside(code, own, stopped=stopped),
    )


def _write_private(path: str, text: str) -> None:
    """The preset, readable by its owner only (it names every model file)."""
    from lltui.paths import open_private

    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open_private(target) as f:
            f.write(text)
    except OSError as exc:
        raise LaunchError(f"cannot write the preset {path}: {exc.strerror or exc}", 1) from None


def _check_servable(prepared: PreparedRouter) -> None:
    """LaunchError where the plan lets no model load at all (a router that can serve
    nothing would refuse every request)."""
    decisions = prepared.on_demand()
    if decisions and not any(d.can_load for d in decisions.values()):
        why = "; ".join(d.reason or d.model for d in decisions.values())
        raise LaunchError(f"no model can load, so nothing would be served: {why}", 1)


def _check_free(host: str, port: int) -> None:
    """LaunchError with one line where the address lltui would serve on is taken."""
    from lltui.sources.llama.supervisor import SupervisorError, check_port_free

    try:
        check_port_free(host, port)
    except SupervisorError as exc:
        raise LaunchError(str(exc), getattr(exc, "code", 1)) from None

"""What a :class:`~.watch.LaunchWatch` asks over HTTP, each question folding its own answer:
:class:`ServerPoll` asks a server's ``/health``, ``/metrics``, ``/slots`` and ``/props``
(tokens/s, busy slots, tokens so far, and J/token from the monitor's energy counters);
:class:`RouterPoll` asks a router for its models (loading the ones asked for at start, by
the plan) and, where asked, each loaded model's own server for its requests and tokens/s.
:class:`ModelNews` says which models' states are worth a line. Nothing here touches a
widget or prints."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING

from lltui.core.cmdline.address import public_url
from lltui.core.monitor.bottleneck import ServerSpeed, Verdict, verdicts
from lltui.core.monitor.energy import EnergyPoint, JoulesPerToken, rig_energy_mj
from lltui.core.monitor.models import RigSample
from lltui.core.monitor.plan_reality import PlanReality, PlanWatch
from lltui.services.follow import ServerFollow
from lltui.services.launch.kv_watch import NO_LAYOUT, KvWatch
from lltui.services.launch.router import RouterRefused, RouterSession
from lltui.services.launch.state import SERIES_LEN, LaunchState, ModelRow, Rates, RouterView

if TYPE_CHECKING:  # httpx is imported only once a server is watched
    from lltui.services.launch.watch import Rig
    from lltui.sources.llama.http import LlamaServerClient
    from lltui.sources.llama.http import ServerPoll as Answer

POLL_INTERVAL_S = 1.0
PLACEMENT_WAIT_S = 2.0  # a model's buffer lines may trail the router's word that it loaded
VERDICT_SAMPLES = 30  # the window the bottleneck verdicts read (a poll a second: 30 s)


def _series(values: tuple[float, ...], value: float | None) -> tuple[float, ...]:
    return values if value is None else (*values[-(SERIES_LEN - 1) :], value)


class ServerPoll:
    """A server's endpoints (a router's: ``/health`` alone, its models are asked apart)."""

    def __init__(
        self,
        url: str,
        api_key: str | None,
        *,
        interval_s: float = POLL_INTERVAL_S,
        whole: bool = True,
        slots_only: bool = False,
        rig: Rig | None = None,
        follow: ServerFollow | None = None,
    ) -> None:
        from lltui.sources.llama.http import LlamaServerClient

        self.interval_s = interval_s
        self._client = LlamaServerClient(url, api_key=api_key)
        self._whole = whole
        self._slots_only = slots_only  # /health and /slots alone (the KV fill)
        self._kv = KvWatch()
        self._plan: PlanWatch | None = None
        self._window: deque[RigSample] = deque(maxlen=VERDICT_SAMPLES)  # for the verdicts
        self._rig = rig
        self._jpt = JoulesPerToken()
        self._jpt_gpus: frozenset[int] = frozenset()
        self._follow = follow  # a server lltui did not launch: its plan from its own log

    def update(self, state: LaunchState, now: float) -> LaunchState:
        whole, more = self._whole, self._whole and not self._slots_only
        return self.fold(
            state, self._client.poll(with_metrics=more, with_slots=whole, with_props=more)
        )

    def fold(self, st: LaunchState, poll: Answer) -> LaunchState:
        message = st.message
        if st.phase == "following":
            message = f"following {st.url}: {'ready' if poll.ready else poll.state}"
        rates = st.rates
        tp = poll.throughput
        if tp is not None:
            rates = replace(
                rates,
                gen_tps=_series(rates.gen_tps, tp.generation_tps),
                prompt_tps=_series(rates.prompt_tps, tp.prompt_tps),
                slots_busy=tp.busy_slots,
            )
        if poll.metrics is not None:
            rates = replace(rates, tokens_total=poll.metrics.tokens_predicted_total)
        st = replace(
            st,
            message=message,
            health=None if st.phase == "exited" else poll.state,
            rates=rates if self._slots_only else self._energy(rates, st.pid),
        )
        if self._follow is not None:
            return self._followed(st, poll)
        return self._against_plan(self._kv.fold(st, poll))

    def _followed(self, st: LaunchState, poll: Answer) -> LaunchState:
        """A followed server: its plan (naming its process) and KV fill as ``lltui watch``
        finds them; the state's pid stays None (not ours: nothing to stop)."""
        assert self._follow is not None
        sample = self._rig() if self._rig is not None else None
        found = self._follow.fold(sample, poll.slots, poll.t)
        verdicts = self._verdicts(st, sample, found.plan) if sample and found.plan else ()
        note = None if found.kv is not None else NO_LAYOUT
        return replace(st, plan=found.plan, verdicts=verdicts, kv=found.kv, kv_note=note)

    def _against_plan(self, st: LaunchState) -> LaunchState:
        """The plan per GPU (the load log's buffers) beside what the GPU source says the
        server's process holds now, once it has loaded."""
        sample = self._rig() if self._rig is not None else None
        if sample is None or st.check is None or st.pid is None or st.url is None:
            return st
        if self._plan is None or self._plan.pid != st.pid:
            planned = {d.name: d.logged_bytes or d.predicted_bytes for d in st.check.devices}
            self._plan = PlanWatch(public_url(st.url), st.pid, planned)
        plan = self._plan.fold(sample)
        return replace(st, plan=plan, verdicts=self._verdicts(st, sample, plan))

    def _verdicts(
        self, st: LaunchState, sample: RigSample, plan: PlanReality
    ) -> tuple[Verdict, ...]:
        """Why it is slow, from the last samples of the GPUs its process is on, beside the
        last served request's speed and its prediction."""
        if not self._window or self._window[-1] is not sample:
            self._window.append(sample)
        gpus = tuple(r.gpu_index for r in plan.rows if r.held_bytes)
        check = st.speed.latest(prompt=False)
        server = ServerSpeed(
            gpus,
            measured_decode_tps=check.measured_tps if check is not None else None,
            predicted_decode_tps=check.predicted_tps if check is not None else None,
        )
        return verdicts(list(self._window), server) if gpus else ()

    def _energy(self, rates: Rates, pid: int | None) -> Rates:
        """J/token from the energy counters of the GPUs this server uses."""
        sample = self._rig() if self._rig is not None else None
        if sample is None:
            return replace(rates, jpt_note="no GPU samples yet")
        if sample.info.simulated:
            why = "the rig is simulated: no real energy counters to charge tokens with"
            return replace(rates, jpt_note=why)
        if rates.tokens_total is None:
            return replace(rates, jpt_note="the server's /metrics gives no token counter")
        gpus = frozenset(
            g.info.index
            for g in sample.gpus
            for p in g.processes
            if pid is not None and p.pid == pid
        )
        # the set of GPUs summed must stay the same between points, or the sum jumps by
        # the lifetime counters of the GPUs that joined (a server spreading as it loads)
        if gpus != self._jpt_gpus:
            self._jpt_gpus, self._jpt = gpus, JoulesPerToken()
        energy = rig_energy_mj(sample, set(gpus) or None)
        if energy is None:
            return replace(rates, jpt_note="these GPUs have no energy counter (Volta and newer do)")
        self._jpt.add(EnergyPoint(time.monotonic(), energy, rates.tokens_total))
        value = self._jpt.value()
        return replace(
            rates,
            jpt=_series(rates.jpt, value),
            jpt_note=None if value is not None else "no tokens generated in the last minute",
        )

    def close(self) -> None:
        self._client.close()


class ModelNews:
    """Which models' rows are news: a state (or its problem) other than the one last said,
    each said once. A model the router's listing left out for a moment (``unknown``) is no
    news: said, it came back as a second line of the state it had. A model just loaded
    waits a little for its buffer lines, one that failed for the line that says why."""

    def __init__(self) -> None:
        self._said: dict[str, tuple[str, str | None]] = {}
        self._waiting: dict[str, float] = {}

    def changed(self, rows: tuple[ModelRow, ...], now: float) -> list[ModelRow]:
        out = []
        for row in rows:
            said = self._said.get(row.name, ("unloaded", None))
            if row.state == "unknown" or (row.state, row.problem) == said:
                continue
            # its buffer lines, or the line saying why it failed, may trail the router's word
            trailing = row.state == "failed" and row.problem is None
            if (row.state == "loaded" and not row.placement) or trailing:
                first = self._waiting.setdefault(row.name, now)
                if now - first < PLACEMENT_WAIT_S:
                    continue
            self._waiting.pop(row.name, None)
            self._said[row.name] = (row.state, row.problem)
            out.append(row)
        return out

    def moved(self, moves: list[tuple[str, str]], rows: tuple[ModelRow, ...]) -> list[ModelRow]:
        """The proxy's loads and evictions as rows, each state said once: a model loaded
        and evicted between two polls is "loading" then "unloaded" (no placement: its
        server's log lines say it)."""
        by_name = {r.name: r for r in rows}
        out = []
        for state, name in moves:
            row = by_name.get(name)
            if row is None or self._said.get(name, ("unloaded", None))[0] == state:
                continue
            self._waiting.pop(name, None)
            self._said[name] = (state, None)
            out.append(replace(row, state=state, placement=(), problem=None))
        return out


class RouterPoll:
    """A router's models, once it is ready: the kept models and the ones asked for loaded at
    the first poll (a refusal is a line), then each model's row every poll; ``per_model``:
    each loaded model's own server asked for its requests and tokens/s too."""

    def __init__(
        self,
        session: RouterSession,
        *,
        interval_s: float = POLL_INTERVAL_S,
        per_model: bool,
        rig: Rig | None = None,
    ) -> None:
        self.interval_s = interval_s
        self.session = session
        self._per_model = per_model
        self._rig = rig
        self._clients: dict[str, LlamaServerClient] = {}
        self._follows: dict[str, ServerFollow] = {}  # each child's plan and KV fill
        self._started_loads = False
        self._news = ModelNews()

    def update(self, state: LaunchState, now: float) -> LaunchState | None:
        session = self.session
        if state.ready_at is None:
            return None
        moves = session.take_moves()  # (before the list is read: they came first)
        refused: list[str] = []
        if not self._started_loads:
            self._started_loads = True
            refused = session.load_at_start()
        note = None
        try:
            rows = tuple(session.rows(session.models()))
        except RouterRefused as exc:
            rows, note = tuple(session.rows(None)), str(exc)
        if self._per_model:
            rows = self._measured(rows)
        moved = self._news.moved(moves, rows)
        return self.fold(state, rows, note or "; ".join(refused) or None, refused, now, moved)

    def fold(
        self,
        st: LaunchState,
        rows: tuple[ModelRow, ...],
        note: str | None,
        refused: list[str],
        now: float,
        moved: list[ModelRow] | None = None,
    ) -> LaunchState:
        """``moved``: the proxy's loads and evictions since the last poll, said first."""
        view = st.router or RouterView()
        news = [*(moved or ()), *self._news.changed(rows, now)]
        if rows == view.rows and note is None and not news and not refused:
            return st
        if note is not None:  # a word of the poll's own: the note follows no model now
            view = replace(view, note=note, acted=None)
        view = replace(view, news=view.news.add(news), refused=view.refused.add(refused))
        return replace(st, router=view.following(rows))

    def _measured(self, rows: tuple[ModelRow, ...]) -> tuple[ModelRow, ...]:
        """Each loaded model's own server, asked on its port (the router spawned it on
        127.0.0.1, from its log): not through the router, whose log would gain two lines a
        poll."""
        loaded = {f"{r.name}:{r.port}": r for r in rows if r.state == "loaded" and r.port}
        for key in [k for k in self._clients if k not in loaded]:
            self._clients.pop(key).close()
            self._follows.pop(key, None)
        return tuple(self._measure(r) if f"{r.name}:{r.port}" in loaded else r for r in rows)

    def _measure(self, row: ModelRow) -> ModelRow:
        key = f"{row.name}:{row.port}"
        url = f"http://127.0.0.1:{row.port}"
        client = self._clients.get(key)
        if client is None:
            from lltui.sources.llama.http import LlamaServerClient

            client = LlamaServerClient(url, api_key=self.session.launch.http_key)
            self._clients[key] = client
        poll = client.poll(with_props=False)
        # the child's own command line gives its plan (its output goes to the router's log)
        follow = self._follows.setdefault(key, ServerFollow(url, background=True))
        found = follow.fold(self._rig() if self._rig is not None else None, poll.slots, poll.t)
        held = None
        if found.plan is not None:
            held = sum(r.held_bytes or 0 for r in found.plan.rows)
        busy = gen = tokens = None
        if poll.throughput is not None:
            gen = poll.throughput.generation_tps
            busy = poll.throughput.busy_slots
        if poll.metrics is not None:
            tokens = poll.metrics.tokens_predicted_total
            if busy is None and poll.metrics.requests_processing is not None:
                busy = int(poll.metrics.requests_processing)
        return replace(
            row, busy=busy, gen_tps=gen, tokens_total=tokens, kv=found.kv, held_bytes=held
        )

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

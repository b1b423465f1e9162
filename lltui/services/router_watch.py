"""A router watched: each model's state from the router, its memory per device from its
server's log, its requests and tokens/s from its own ``/metrics`` and ``/slots`` (through the
router: ``?model=NAME``). The launch view's controller calls :meth:`RouterWatch.poll` on its
poller thread; nothing here touches a widget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lltui.core.llamalog.models import DevicePlacement
from lltui.services.router import ModelRow, RouterRefused, RouterSession

if TYPE_CHECKING:  # httpx is imported only once a router is watched
    from lltui.core.memory.results import FitResult
    from lltui.sources.llama.http import LlamaServerClient


def _allocated(result: FitResult) -> int:
    """What llama.cpp allocates for the model, every device and the host (no margin)."""
    return sum(d.total_bytes for d in result.devices if d.kind != "cpu") + result.host.total_bytes


@dataclass(frozen=True, slots=True)
class RouterRowView:
    """One model's line in the launch view."""

    name: str
    state: str
    kept: bool
    n_ctx: int | None  # the context the plan pins
    planned_bytes: int | None  # what the plan says its server allocates (host included)
    placement: tuple[DevicePlacement, ...]  # from its server's log
    busy: int | None  # requests in flight (busy slots)
    gen_tps: float | None
    tokens_total: float | None
    problem: str | None

    @property
    def memory_mib(self) -> float | None:
        """What its server allocated (host included), from its log."""
        return sum(p.total_mib for p in self.placement) if self.placement else None


class RouterWatch:
    """Polls one router for the view (use from the poller thread only)."""

    def __init__(self, session: RouterSession) -> None:
        self.session = session
        self._clients: dict[str, LlamaServerClient] = {}
        self._started_loads = False

    def poll(self) -> tuple[tuple[RouterRowView, ...], str | None]:
        """The rows now, and a line when the router could not be read. The models to load
        at start are loaded at the first poll after the router is ready."""
        session = self.session
        note = None
        if session.is_ready and not self._started_loads:
            self._started_loads = True
            refused = session.load_at_start()
            note = "; ".join(refused) or None
        try:
            listed = session.models()
        except RouterRefused as exc:
            return tuple(self._view(r, None) for r in session.rows(None)), str(exc)
        rows = session.rows(listed)
        self._forget_unloaded({f"{r.name}:{r.port}" for r in rows if r.state == "loaded"})
        return tuple(self._view(r, self._client(r)) for r in rows), note

    def _client(self, row: ModelRow) -> LlamaServerClient | None:
        """The model's own server, asked on its port (the router spawned it on 127.0.0.1,
        from its log): not through the router, whose log would gain two lines a poll."""
        if row.state != "loaded" or row.port is None:
            return None
        key = f"{row.name}:{row.port}"
        client = self._clients.get(key)
        if client is None:
            from lltui.sources.llama.http import LlamaServerClient

            prepared = self.session.prepared.launch
            client = LlamaServerClient(f"http://127.0.0.1:{row.port}", api_key=prepared.http_key)
            self._clients[key] = client
        return client

    def _forget_unloaded(self, loaded: set[str]) -> None:
        for key in [k for k in self._clients if k not in loaded]:
            self._clients.pop(key).close()

    def _view(self, row: ModelRow, client: LlamaServerClient | None) -> RouterRowView:
        busy = gen = tokens = None
        if client is not None:
            poll = client.poll(with_props=False)
            if poll.throughput is not None:
                gen = poll.throughput.generation_tps
                busy = poll.throughput.busy_slots
            if poll.metrics is not None:
                tokens = poll.metrics.tokens_predicted_total
                if busy is None and poll.metrics.requests_processing is not None:
                    busy = int(poll.metrics.requests_processing)
        planned = row.planned
        return RouterRowView(
            name=row.name,
            state=row.state,
            kept=row.kept,
            n_ctx=planned.n_ctx if planned is not None else None,
            planned_bytes=_allocated(planned.result) if planned is not None else None,
            placement=row.placement,
            busy=busy,
            gen_tps=gen,
            tokens_total=tokens,
            problem=row.problem,
        )

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

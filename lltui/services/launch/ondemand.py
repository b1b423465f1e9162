"""Models loaded on demand: a thin HTTP proxy in front of a llama-server router.

Clients talk to lltui on the address they were given; the router listens on a private
loopback port. A request that names a model (``POST /v1/chat/completions`` and the other
inference endpoints, the ``model`` field of their JSON body or multipart form) for a model
that is not loaded goes through the eviction policy (:mod:`lltui.core.fit.evict`): lltui
unloads the models the policy names, idle ones where they make room (``POST
/models/unload``; a busy one once its requests in flight are answered, one loading once it
has loaded), loads the model (``POST /models/load``), waits until the router lists it
``loaded``, and forwards the request; a client's ``POST /models/load`` is decided the same
way, and its ``POST /models/unload`` of a pinned model refused. One decision at a time (a
lock): two requests for models that cannot be resident together are served in turn, and a
load lltui is asked for itself (the launch view's ``l``, ``--load``) is decided under the
same lock, so neither decides on a list that misses the other's load. The requests that
waited their turn for a load that failed are answered its failure (it is not tried again).
Every other request, and every request for a model already loaded, is forwarded as it is;
responses (streams included) are passed through as they come. What lltui refuses is answered
in the OpenAI error format (``{"error": {"message", "type", "code"}}``), naming why.

The proxy runs an asyncio loop on a thread of its own (:meth:`OnDemandProxy.start`,
:meth:`OnDemandProxy.stop`); it starts no process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import ClientSession, ClientTimeout, DummyCookieJar, TCPConnector, web
from aiohttp.client_exceptions import (
    ClientConnectionError,
    ClientError,
    ServerDisconnectedError,
)

from lltui.core.fit.evict import Decision, Policy, decide, residents
from lltui.core.llama.router_api import RESIDENT_STATES, parse_router_models, request_fields
from lltui.core.text import error_text
from lltui.services.launch.state import ModelUse
from lltui.sources.http_server import serve

if TYPE_CHECKING:
    from aiohttp import ClientResponse

# the endpoints whose JSON body names the model a request is for (llama-server's server.cpp
# routes them through the router's proxy_post, which reads the body's "model")
MODEL_PATHS = frozenset(
    {
        "/completion",
        "/completions",
        "/v1/completions",
        "/chat/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/responses",
        "/chat/completions/input_tokens",
        "/v1/chat/completions/input_tokens",
        "/responses/input_tokens",
        "/v1/responses/input_tokens",
        "/v1/audio/transcriptions",  # (a multipart form: its text fields are the body)
        "/audio/transcriptions",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/embedding",
        "/embeddings",
        "/v1/embeddings",
        "/rerank",
        "/reranking",
        "/v1/rerank",
        "/v1/reranking",
        "/infill",
        "/tokenize",
        "/detokenize",
        "/apply-template",
        "/props",
        "/lora-adapters",
        "/v1/chat/completions/control",
        "/v1/systemone",
    }
)
SLOT_PATH = "/slots/"  # POST /slots/:id_slot (save, restore, erase a slot) names it too
# the GETs the router sends to the model ``?model=`` names (server.cpp's proxy_get; GET
# /props without one is the router's own): a GET elsewhere naming one loads nothing
MODEL_GET_PATHS = frozenset({"/metrics", "/props", "/lora-adapters", "/slots"})
# the router's own load (server.cpp): through lltui it loads by the policy, unloading first
LOAD_PATH = "/models/load"
UNLOAD_PATH = "/models/unload"  # a client's unload: refused for a pinned model, else passed on
# headers that belong to one connection, not to the request (RFC 9110 7.6.1)
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
MAX_BODY = 256 * 1024 * 1024  # a request's body (images in a chat request)
LOAD_TIMEOUT_S = 600.0
POLL_S = 0.05
SHUTDOWN_S = 2.0
STATUS = {
    "model_not_found": 404,
    "model_file_missing": 404,  # (until the file is put back)
    "invalid_request": 400,
    "unauthorized": 401,
    "router_unavailable": 502,  # llama-server is not answering (it died, lltui exits next)
    "router_error": 502,
}
UNREACHABLE = "the router is not reachable"


def error_body(message: str, code: str, status: int) -> dict[str, Any]:
    """An error as OpenAI's API (and llama-server's) shapes it."""
    kind = "invalid_request_error" if status < 500 else "unavailable_error"
    return {"error": {"message": message, "type": kind, "code": code}}


def error_response(message: str, code: str, status: int | None = None) -> web.Response:
    """The error, 503 where ``code`` has no status of its own (asking again may succeed:
    OpenAI's clients retry a 5xx by themselves, never a 4xx)."""
    status = status or STATUS.get(code, 503)
    return web.json_response(error_body(message, code, status), status=status)


@dataclass(frozen=True)
class ProxyEvent:
    """What the proxy did: ``evict`` (``models`` to be unloaded for ``model``), ``unloaded``
    (one of them, done), ``load``, ``refused`` (``reason``), ``failed`` (the load failed)."""

    kind: str
    model: str
    models: tuple[str, ...] = ()
    reason: str = ""


class LoadRefused(Exception):
    def __init__(self, message: str, code: str, status: int | None = None) -> None:
        super().__init__(message)
        self.code, self.status = code, status


class OnDemandProxy:
    """``router_url``: the router's private address; ``policy``: called for the current
    policy at each decision (pinned models change); ``keys``: the API keys a client must
    give when the router has any (lltui checks before it loads anything); ``decisions``: the
    lock lltui's own loads are decided under, held by each decision of the proxy's from the
    router's list it reads until the router has taken the load (then lists it loading)."""

    def __init__(
        self,
        router_url: str,
        policy: Callable[[], Policy],
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        keys: Sequence[str] = (),
        on_event: Callable[[ProxyEvent], None] | None = None,
        load_timeout_s: float = LOAD_TIMEOUT_S,
        decisions: threading.Lock | None = None,
    ) -> None:
        self.router_url = router_url.rstrip("/")
        self.policy = policy
        self.host, self.port = host, port
        self.keys = tuple(k for k in keys if k)
        self.on_event = on_event
        self.load_timeout_s = load_timeout_s
        self._decisions = decisions or threading.Lock()
        self.last_used: dict[str, float] = {}
        self._served: dict[str, int] = {}  # requests forwarded, by model
        self._ready: set[str] = set()  # loaded, as far as the proxy knows
        self._evicting: set[str] = set()
        self._in_flight: dict[str, int] = {}
        self._queued: dict[str, int] = {}  # requests waiting for their model to be decided
        self._failed: dict[str, int] = {}  # the loads of each model that failed, counted
        self._aliases: dict[str, str] = {}  # an alias -> the model's name, as last listed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._client: ClientSession | None = None
        self._lock: asyncio.Lock | None = None
        self._idle: asyncio.Condition | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # --- lifecycle (any thread) -----------------------------------------------------------

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        """Listen (OSError when the address cannot be bound); returns once it does."""
        self._thread = threading.Thread(target=self._run, name="lltui-ondemand", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise OSError(f"the proxy did not start listening on {self.url}")
        if self._start_error is not None:
            raise OSError(f"cannot listen on {self.url}: {self._start_error}")

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError, concurrent.futures.TimeoutError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(SHUTDOWN_S + 8)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._listen())
        except BaseException as exc:  # reported to start()'s caller
            self._start_error = exc
            self._started.set()
            loop.close()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self) -> None:
        self._lock = asyncio.Lock()
        self._idle = asyncio.Condition()
        self._client = ClientSession(
            connector=TCPConnector(limit=0),
            timeout=ClientTimeout(total=None, connect=10),
            auto_decompress=False,
            cookie_jar=DummyCookieJar(),  # a client's cookies are its own, never kept here
        )
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # a stop cuts streams still open short: the router and its models stop too. A client
        # that goes takes its request to the router with it (the request's task is cancelled,
        # which closes its connection to the router): the model stopped generating only at a
        # stream's next chunk, and a whole answer (no stream) was generated to the end
        self._runner, self.port = await serve(
            app,
            self.host,
            self.port,
            self._admit,
            shutdown_timeout=SHUTDOWN_S,
            handler_cancellation=True,
        )

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._client is not None:
            await self._client.close()

    def note_use(self, name: str, at: float) -> None:
        """A use of ``name`` at ``at`` (monotonic) the proxy did not see: a load lltui asked
        the router for itself, which llama-server's router counts as a use. From any thread:
        kept on the proxy's loop, where its own uses are, so a later one is never lost."""

        def note() -> None:
            self.last_used[name] = max(self.last_used.get(name, 0.0), at)

        loop = self._loop
        if loop is None:
            note()
            return
        with contextlib.suppress(RuntimeError):  # (closed: the proxy serves nothing more)
            loop.call_soon_threadsafe(note)

    def in_flight(self) -> dict[str, int]:
        """The requests each model is answering now (a snapshot, from any thread)."""
        return {n: k for n, k in dict(self._in_flight).items() if k}

    def queued(self) -> dict[str, int]:
        """The requests waiting at the proxy for each model (a snapshot, from any thread)."""
        return {n: k for n, k in dict(self._queued).items() if k}

    def use(self) -> dict[str, ModelUse]:
        """What it served of each model so far (a snapshot, from any thread)."""
        last, served = dict(self.last_used), dict(self._served)
        return {n: ModelUse(n, served.get(n, 0), last.get(n)) for n in last.keys() | served}

    def _emit(self, event: ProxyEvent) -> None:
        if self.on_event is not None:
            with contextlib.suppress(Exception):
                self.on_event(event)

    # --- requests -------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        """Every request; a fault of lltui's own is the API's error too, not a bare 500."""
        try:
            return await self._serve(request)
        except (asyncio.CancelledError, web.HTTPException, ConnectionResetError):
            raise
        except Exception as exc:  # the client gets one line, lltui goes on
            return error_response(f"lltui: {error_text(exc)}", "internal_error", 500)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        get = request.method == "GET" and request.path in MODEL_GET_PATHS
        asked = request.query.get("model") if get else None
        if asked:  # /props?model=, /slots?model=: the router loads for these too
            return await self._serve_get(request, asked)
        if request.method != "POST" or not _names_model(request.path):
            return await self._pass(request, await request.read())
        body = await request.read()
        try:
            data = request_fields(request.headers.get("Content-Type", ""), body)
        except (ValueError, RecursionError):
            return error_response(
                "the request body is neither JSON nor a multipart form", "invalid_request"
            )
        name = data.get("model") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name:
            return await self._pass(request, body)  # the router says what is missing
        if not self._authorized(request):
            return error_response("invalid API key", "unauthorized")
        name = await self._model_named(name)
        if request.path == UNLOAD_PATH:
            need = self.policy().needs.get(name)
            if need is not None and need.pinned:
                return error_response(
                    f"model '{name}' is pinned (--pin): lltui keeps it loaded", "invalid_request"
                )
            self._ready.discard(name)
            return await self._pass(request, body)
        if request.path == LOAD_PATH:  # a client's own load goes through the policy too
            try:
                await self._ensure_loaded(name)
            except LoadRefused as exc:
                return error_response(str(exc), exc.code, exc.status)
            self.last_used[name] = time.monotonic()  # (the last to be evicted, as a use)
            return web.json_response({"success": True})
        for _attempt in range(2):
            refused = await self._ready_or_refused(name)
            if refused is not None:
                return refused
            self._in_flight[name] = self._in_flight.get(name, 0) + 1
            try:
                self.last_used[name] = time.monotonic()
                response = await self._forward(request, body, model=name)
                if response is not None:
                    self._served[name] = self._served.get(name, 0) + 1
            finally:
                await self._done(name)
            if response is not None:
                return response
            self._ready.discard(name)  # unloaded behind lltui's back: decide again
        return error_response(f"model '{name}' is not loaded", "model_not_loaded")

    async def _serve_get(self, request: web.Request, asked: str) -> web.StreamResponse:
        """A GET naming a model (``?model=``): loaded by the policy first, as llama.cpp's
        router loads it with autoload; the answer is the router's."""
        if not self._authorized(request):
            return error_response("invalid API key", "unauthorized")
        refused = await self._ready_or_refused(await self._model_named(asked))
        if refused is not None:
            return refused
        return await self._pass(request, await request.read())

    async def _model_named(self, asked: str) -> str:
        """The model a request names: the router answers to a model's aliases too (listed
        anew where the name is not known yet)."""
        if asked not in self._ready and asked not in self._aliases:
            with contextlib.suppress(LoadRefused):
                await self._states()  # the aliases as listed now
        return self._aliases.get(asked, asked)

    async def _ready_or_refused(self, name: str) -> web.Response | None:
        """None once ``name`` is loaded (by the policy, where it is not); else the API's
        error saying why it cannot be."""
        if name in self._ready and name not in self._evicting:
            return None
        # waiting its turn, it makes its model busy: a decision before it unloads another
        self._queued[name] = self._queued.get(name, 0) + 1
        try:
            await self._ensure_loaded(name)
        except LoadRefused as exc:
            return error_response(str(exc), exc.code, exc.status)
        finally:
            self._queued[name] -= 1
        return None

    def _admit(self, request: web.Request) -> web.Response | None:
        """A request that sends a body (any but GET, HEAD and a browser's OPTIONS, which
        llama-server answers without a key; /health and the web UI are GETs) without a key
        the router takes is refused before its body is read: 256 clients sending 256 MiB
        each held 64 GiB."""
        if request.method in ("GET", "HEAD", "OPTIONS") or self._authorized(request):
            return None
        return error_response("invalid API key", "unauthorized")

    def _authorized(self, request: web.Request) -> bool:
        if not self.keys:
            return True
        given = request.headers.get("X-Api-Key") or ""
        auth = request.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            given = auth[7:].strip()
        return any(hmac.compare_digest(given.encode(), k.encode()) for k in self.keys)

    async def _done(self, name: str) -> None:
        self._in_flight[name] -= 1
        if name in self._evicting:  # an unload waits for this model's requests to end
            assert self._idle is not None
            async with self._idle:
                self._idle.notify_all()

    async def _pass(self, request: web.Request, body: bytes) -> web.StreamResponse:
        response = await self._forward(request, body)
        assert response is not None
        return response

    async def _forward(
        self, request: web.Request, body: bytes, *, model: str | None = None
    ) -> web.StreamResponse | None:
        """The request sent on to the router, its answer passed back as it comes. With a
        ``model``: None when the router says that model is not loaded (nothing sent yet)."""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        # the router loads a model itself for ?autoload=1: every load is the policy's here
        rel = request.rel_url
        if any(k.lower() == "autoload" for k in rel.query):
            rel = rel.with_query([(k, v) for k, v in rel.query.items() if k.lower() != "autoload"])
        url = self.router_url + rel.raw_path_qs
        try:
            upstream = await self._send(request.method, url, headers, body)
            async with upstream:
                if model is not None and upstream.status == 400:
                    text = await upstream.read()
                    if b"model is not loaded" in text:
                        return None
                    return _response(upstream, text)
                if upstream.content_length is not None or request.method == "HEAD":
                    return _response(upstream, await upstream.read())
                return await self._stream(request, upstream)
        except (TimeoutError, ClientConnectionError):
            return error_response(UNREACHABLE, "router_unavailable")
        except ClientError as exc:
            return error_response(f"the router: {exc}", "router_error")

    async def _send(
        self, method: str, url: str, headers: dict[str, str], body: bytes
    ) -> ClientResponse:
        """The request sent; sent again once when the router had closed the kept-alive
        connection it went on (it closes one idle a few seconds, or after its 100th request)
        before answering anything."""
        assert self._client is not None
        for attempt in (1, 2):
            try:
                return await self._client.request(
                    method, url, headers=headers, data=body or None, allow_redirects=False
                )
            except ServerDisconnectedError:
                # a POST the router may have taken (a generation) is not sent twice
                if attempt == 2 or method not in ("GET", "HEAD"):
                    raise
        raise AssertionError("unreachable")

    async def _stream(self, request: web.Request, upstream: ClientResponse) -> web.StreamResponse:
        out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for k, v in upstream.headers.items():
            if k.lower() not in HOP_BY_HOP:
                out.headers.add(k, v)
        await out.prepare(request)
        try:
            async for chunk in upstream.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
        except ConnectionResetError:
            pass  # the client left: leaving closes the router's side too
        except ClientError:
            # the router's side broke mid-answer: the client must not see a clean end
            if request.transport is not None:
                request.transport.close()
        return out

    # --- loads ----------------------------------------------------------------------------

    async def _ensure_loaded(self, name: str) -> None:
        assert self._lock is not None
        failed = self._failed.get(name, 0)
        # loaded already: no decision to wait for (a request for it waited out another
        # model's load, up to load_timeout_s; one unloaded meanwhile is decided again)
        if self._now_ready(name, (await self._states()).get(name)):
            return
        async with self._lock:
            if self._failed.get(name, 0) != failed:  # the load it waited for failed
                raise LoadRefused(_failed_to_load(name), "load_failed")
            async with self._deciding():
                states = await self._states()
                if name not in states:
                    raise LoadRefused(f"model '{name}' not found", "model_not_found")
                state = states[name]
                if self._now_ready(name, state):
                    return
                if state not in RESIDENT_STATES:  # (loading: --load at start, or lltui's l)
                    policy = self.policy()
                    # a load that cannot start unloads nothing for it
                    gone = _file_gone(policy, name)
                    if gone is not None:
                        self._emit(ProxyEvent("refused", name, reason=gone))
                        raise LoadRefused(gone, "model_file_missing")
                    resident = residents(states, self.last_used, self._in_flight, self._queued)
                    decision = decide(policy, name, resident)
                    if not decision.can_load:
                        self._emit(ProxyEvent("refused", name, reason=decision.reason))
                        code = decision.code or "does_not_fit"
                        # one that can never load is a 400, which no client retries
                        final = decision.final and code not in STATUS
                        status = STATUS["invalid_request"] if final else None
                        raise LoadRefused(decision.reason, code, status)
                    loading = [n for n in decision.evict if states.get(n) == "loading"]
                    await self._evict(decision, loading)
                    self._emit(ProxyEvent("load", name))
                    await self._post("/models/load", name)
            # listed loading from here: lltui's own decisions count it resident
            if await self._wait_state(name, ("loaded", "unloaded")) != "loaded":
                self._failed[name] = self._failed.get(name, 0) + 1
                self._emit(ProxyEvent("failed", name))
                raise LoadRefused(_failed_to_load(name), "load_failed")
            self._ready.add(name)

    @contextlib.asynccontextmanager
    async def _deciding(self) -> AsyncIterator[None]:
        """The lock lltui's own loads are decided under, waited for without holding up the
        loop (the thread that holds it is asking the router for one load)."""
        while not self._decisions.acquire(blocking=False):
            await asyncio.sleep(POLL_S)
        try:
            yield
        finally:
            self._decisions.release()

    def _now_ready(self, name: str, state: str | None) -> bool:
        """Whether ``name``, in ``state`` as the router lists it, is loaded and not being
        evicted: then it is ready (a sleeping one wakes on the request)."""
        if state not in ("loaded", "sleeping") or name in self._evicting:
            return False
        self._ready.add(name)
        return True

    async def _evict(self, decision: Decision, loading: Sequence[str] = ()) -> None:
        """Unload ``decision.evict``: one still ``loading`` loads first (an unload kills it
        mid-load), then their requests in flight are answered."""
        assert self._idle is not None
        if not decision.evict:
            return
        self._evicting.update(decision.evict)
        try:
            for victim in loading:
                await self._wait_state(victim, ("loaded", "sleeping", "unloaded"))
            async with self._idle:  # their requests in flight are answered first (bounded)
                try:
                    await asyncio.wait_for(
                        self._idle.wait_for(
                            lambda: all(self._in_flight.get(n, 0) == 0 for n in decision.evict)
                        ),
                        self.load_timeout_s,
                    )
                except TimeoutError:
                    busy = ", ".join(decision.evict)
                    raise LoadRefused(
                        f"'{decision.model}' needs {busy} unloaded, still answering requests",
                        "load_timeout",
                    ) from None
            # said once it goes ahead: a request that leaves while they answer unloads none
            self._emit(ProxyEvent("evict", decision.model, decision.evict, decision.reason))
            for victim in decision.evict:
                self._ready.discard(victim)
                await self._post("/models/unload", victim)
            for victim in decision.evict:
                await self._wait_state(victim, ("unloaded",))
                self._emit(ProxyEvent("unloaded", victim))
        finally:
            self._evicting.difference_update(decision.evict)

    async def _post(self, path: str, name: str) -> None:
        assert self._client is not None
        try:
            async with self._client.post(
                self.router_url + path, json={"model": name}, headers=self._own_headers()
            ) as resp:
                text = await resp.read()
        except (TimeoutError, ClientConnectionError):
            raise LoadRefused(UNREACHABLE, "router_unavailable") from None
        except ClientError as exc:
            raise LoadRefused(f"{path}: the router: {exc}", "router_error") from None
        if resp.status != 200 and b"already running" not in text and b"not running" not in text:
            raise LoadRefused(f"{path} {name}: HTTP {resp.status}", "router_error")

    def _own_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[0]}"} if self.keys else {}

    async def _states(self) -> dict[str, str]:
        assert self._client is not None
        try:
            async with self._client.get(
                self.router_url + "/models", headers=self._own_headers()
            ) as resp:
                data = await resp.json(content_type=None)
            models = parse_router_models(data)
            self._aliases = {a: m.name for m in models for a in m.aliases if a != m.name}
            return {m.name: m.state for m in models}
        except (TimeoutError, ClientConnectionError):
            raise LoadRefused(UNREACHABLE, "router_unavailable") from None
        except (ClientError, ValueError) as exc:
            raise LoadRefused(f"the router's model list: {exc}", "router_error") from None

    async def _wait_state(self, name: str, wanted: tuple[str, ...]) -> str:
        """Poll the router's list until ``name`` is in one of ``wanted`` (bounded)."""
        deadline = time.monotonic() + self.load_timeout_s
        while True:
            state = (await self._states()).get(name, "unknown")
            if state in wanted:
                return state
            if time.monotonic() > deadline:
                raise LoadRefused(f"model '{name}' is still {state}", "load_timeout")
            await asyncio.sleep(POLL_S)


def _names_model(path: str) -> bool:
    """Whether a POST to ``path`` names its model in its body (or is a load or unload)."""
    if path.startswith(SLOT_PATH):
        slot = path.removeprefix(SLOT_PATH)
        return bool(slot) and "/" not in slot
    return path in MODEL_PATHS or path in (LOAD_PATH, UNLOAD_PATH)


def _file_gone(policy: Policy, name: str) -> str | None:
    """Why ``name`` cannot load where the file its server would load is gone (deleted or
    moved since lltui read it); None otherwise."""
    need = policy.needs.get(name)
    if need is None or not need.path or os.path.exists(need.path):
        return None
    return f"model '{name}' cannot load: its file {need.path} is gone"


def _failed_to_load(name: str) -> str:
    return f"model '{name}' failed to load (the router's log says why)"


def _response(upstream: ClientResponse, body: bytes) -> web.Response:
    out = web.Response(status=upstream.status, reason=upstream.reason, body=body)
    for k, v in upstream.headers.items():
        if k.lower() not in HOP_BY_HOP:
            out.headers.add(k, v)
    return out

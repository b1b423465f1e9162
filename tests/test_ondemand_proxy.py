"""The on-demand proxy against a stand-in router (an aiohttp app on 127.0.0.1, not llama.cpp:
it answers what the cases need and misbehaves as asked): no request reaches the router with
``?autoload=`` (the router would load a model past the policy), and an answer the router cuts
off midway reaches the client as a broken one, not a clean end."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from support.router_helpers import wait_for

from lltui.core.fit.evict import ModelNeed, Policy, Room
from lltui.core.units import MIB
from lltui.services.launch.ondemand import OnDemandProxy


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# POSTs llama-server's router sends to the model the body names (server.cpp: proxy_post)
ROUTED_POSTS = ("/props", "/lora-adapters", "/v1/systemone", "/v1/chat/completions/control")


class StandIn:
    """A router stand-in on its own loop: records the query strings it got."""

    def __init__(self) -> None:
        self.queries: list[str] = []  # what reached it: query strings, models asked for
        self.states = {"big": "loaded", "small": "unloaded"}
        self.slow_loads = False  # a model loaded stays "loading" until the test says
        self.gates: dict[str, threading.Event] = {}  # a load of the model waits for its event
        self.most_resident = 0  # the most models loading or loaded at once
        self.port = _port()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        assert self._ready.wait(10)

    async def _slots(self, request: web.Request) -> web.Response:
        self.queries.append(request.query_string)
        return web.json_response([])

    async def _cut(self, request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse()
        await out.prepare(request)
        await out.write(b"data: 1\n\n")
        assert request.transport is not None
        request.transport.close()  # the model's server died mid-answer
        return out

    async def _models(self, request: web.Request) -> web.Response:
        models = [
            {"id": n, "aliases": ["chat"] if n == "big" else [], "status": {"value": state}}
            for n, state in self.states.items()
        ]
        return web.json_response({"data": models})

    async def _unload(self, request: web.Request) -> web.Response:
        name = (await request.json())["model"]
        self.queries.append("unload " + name)
        if self.states.get(name) == "loading":  # llama-server kills its server mid-load
            self.queries.append("killed " + name)
        self.states[name] = "unloaded"
        return web.json_response({"success": True})

    async def _load(self, request: web.Request) -> web.Response:
        name = (await request.json())["model"]
        self.queries.append("load " + name)
        gate = self.gates.get(name)
        if gate is not None:  # the router has not taken the load yet
            await asyncio.get_running_loop().run_in_executor(None, gate.wait, 30)
        self.states[name] = "loading" if self.slow_loads else "loaded"
        resident = [n for n, s in self.states.items() if s in ("loading", "loaded")]
        self.most_resident = max(self.most_resident, len(resident))
        return web.json_response({"success": True})

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.queries.append(body["model"])
        if body.get("max_tokens"):  # generates until its client goes (then llama-server stops)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.queries.append("client gone")
                raise
        return web.json_response({"choices": []})

    async def _routed(self, request: web.Request) -> web.Response:
        """A POST llama-server's router sends to the model its body names."""
        name = (await request.json())["model"]
        if self.states.get(name) != "loaded":
            return web.json_response({"error": {"message": "model is not loaded"}}, status=400)
        self.queries.append(f"{request.path} {name}")
        return web.json_response({})

    async def _health(self, request: web.Request) -> web.Response:
        self.queries.append("health")
        return web.json_response({"status": "ok"})

    async def _transcribe(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.queries.append(f"{form['model']} heard {form['file'].file.read()!r}")
        return web.json_response({"text": ""})

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_get("/slots", self._slots)
        app.router.add_get("/cut", self._cut)
        app.router.add_get("/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/models/unload", self._unload)
        app.router.add_post("/models/load", self._load)
        app.router.add_post("/v1/audio/transcriptions", self._transcribe)
        app.router.add_get("/health", self._health)
        for path in ROUTED_POSTS:
            app.router.add_post(path, self._routed)
        app.router.add_post("/slots/{slot}", self._routed)
        runner = web.AppRunner(app, handler_cancellation=True)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._ready.set()
        self._loop.run_forever()


@pytest.fixture
def proxy() -> Iterator[tuple[OnDemandProxy, StandIn]]:
    router = StandIn()
    pinned = {"big": ModelNeed("big", {}, 0, pinned=True), "small": ModelNeed("small", {}, 0)}
    p = OnDemandProxy(
        f"http://127.0.0.1:{router.port}",
        lambda: Policy(pinned, Room({}, None)),
        port=_port(),
    )
    p.start()
    try:
        yield p, router
    finally:
        p.stop()


@contextlib.contextmanager
def _running(policy: Policy | None = None, **kw: Any) -> Iterator[tuple[OnDemandProxy, StandIn]]:
    """A proxy on a port of its own before a stand-in router, stopped after."""
    router = StandIn()
    chosen = policy if policy is not None else Policy({}, Room({}, None))
    p = OnDemandProxy(f"http://127.0.0.1:{router.port}", lambda: chosen, port=0, **kw)
    p.start()
    try:
        yield p, router
    finally:
        p.stop()


def _post_head(length: int) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % length
    )


def test_autoload_never_reaches_the_router(proxy):
    p, router = proxy
    r = httpx.get(f"{p.url}/slots?model=big&autoload=true&x=1", timeout=10)
    assert r.status_code == 200
    r = httpx.get(f"{p.url}/slots?AutoLoad=1", timeout=10)
    assert r.status_code == 200
    assert router.queries == ["model=big&x=1", ""]


def test_an_answer_cut_upstream_is_not_a_clean_end(proxy):
    p, _ = proxy
    with pytest.raises(httpx.HTTPError), httpx.stream("GET", f"{p.url}/cut", timeout=10) as r:
        for _ in r.iter_bytes():
            pass


def test_a_models_alias_is_served_as_the_model(proxy):
    p, router = proxy
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(f"{p.url}/v1/chat/completions", json=body, timeout=10)
    assert r.status_code == 200, r.text
    assert router.queries == ["chat"]  # the router takes its alias as it is
    assert set(p.use()) == {"big"}  # counted, and its last use kept, as the model's


def test_a_client_that_goes_takes_its_request_to_the_router_with_it(proxy):
    """A client that went before the first chunk of its answer (no stream, or a stream in
    its prompt processing) left the router generating for it to the end."""
    p, router = proxy
    body = {"model": "big", "max_tokens": 4096, "stream": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{p.url}/v1/chat/completions", json=body, timeout=1)
    wait_for(lambda: "client gone" in router.queries, 10, "the router's request ended")


def test_a_loaded_model_is_served_while_another_loads(proxy):
    """A request for a model already loaded (--load, or loaded through the router) waited
    for another model's load to end, up to its load timeout (10 minutes)."""
    p, router = proxy
    router.slow_loads = True
    chat = f"{p.url}/v1/chat/completions"
    small = threading.Thread(target=lambda: httpx.post(chat, json={"model": "small"}, timeout=60))
    small.start()
    wait_for(lambda: "load small" in router.queries, 10, "small being loaded")
    r = httpx.post(chat, json={"model": "big"}, timeout=10)
    assert r.status_code == 200, r.text
    router.states["small"] = "loaded"
    small.join(30)
    assert router.queries == ["load small", "big", "small"]


def test_a_transcription_names_its_model_in_its_form(proxy):
    """An audio transcription is a multipart form, whose model field llama-server's router
    reads: lltui passed it on without loading, and the client got 400 'model is not
    loaded' (a form was no JSON body, and the path was not one that names a model)."""
    p, router = proxy
    url = f"{p.url}/v1/audio/transcriptions"
    form = {"model": "small", "language": "en"}
    r = httpx.post(url, data=form, files={"file": ("a.wav", b"RIFF--\r\n", "audio/wav")})
    assert r.status_code == 200, r.text
    assert router.queries == ["load small", "small heard b'RIFF--\\r\\n'"]
    bad = httpx.post(url, content=b"x", headers={"Content-Type": "multipart/form-data"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_a_clients_unload_of_a_pinned_model_is_refused(proxy):
    """--pin keeps a model loaded: a client's POST /models/unload went straight through."""
    p, router = proxy
    r = httpx.post(f"{p.url}/models/unload", json={"model": "chat"}, timeout=10)  # big's alias
    assert r.status_code == 400 and "pinned" in r.json()["error"]["message"]
    r = httpx.post(f"{p.url}/models/unload", json={"model": "small"}, timeout=10)
    assert r.status_code == 200 and r.json() == {"success": True}
    assert router.queries == ["unload small"]


def test_a_get_naming_an_unloaded_model_loads_it(proxy):
    """GET /slots?model=small (and /props, /metrics) got 400 "model is not loaded": lltui
    took autoload away and loaded only for POSTs. llama.cpp's router loads for these."""
    p, router = proxy
    r = httpx.get(f"{p.url}/slots?model=small", timeout=30)
    assert r.status_code == 200, r.text
    assert router.queries == ["load small", "model=small"]
    r = httpx.get(f"{p.url}/slots?model=nothing", timeout=30)
    assert r.status_code == 404 and "not found" in r.text


@pytest.mark.parametrize("path", [*ROUTED_POSTS, "/slots/0?action=save"])
def test_every_post_the_router_sends_to_its_model_loads_it(proxy, path):
    """POST /props, /lora-adapters, /slots/:id, /v1/systemone and /v1/chat/completions/control
    name their model in the body, which llama-server's router reads (proxy_post): lltui
    passed them on with their model unloaded, and the client got 400 'model is not
    loaded'."""
    p, router = proxy
    r = httpx.post(f"{p.url}{path}", json={"model": "small"}, timeout=30)
    assert r.status_code == 200, r.text
    assert router.queries == ["load small", f"{path.split('?')[0]} small"]


def test_a_get_the_router_answers_itself_loads_no_model(proxy):
    """A GET naming a model loads it only where llama-server's router sends that GET to the
    model (/slots, /props, /metrics, /lora-adapters): GET /health?model=small loaded small."""
    p, router = proxy
    r = httpx.get(f"{p.url}/health?model=small", timeout=30)
    assert r.status_code == 200, r.text
    assert router.queries == ["health"]


def test_a_clients_load_counts_as_a_use(proxy):
    """A model a client had just loaded with /models/load was the first evicted."""
    p, _ = proxy
    r = httpx.post(f"{p.url}/models/load", json={"model": "small"}, timeout=30)
    assert r.status_code == 200, r.text
    assert "small" in p.use() and p.use()["small"].last_used is not None


def test_a_malformed_request_is_answered_400_and_prints_no_traceback(proxy, caplog):
    """aiohttp logged each request its parser refuses with a traceback, which reached the
    terminal of lltui launch --models (any client could fill it); the client still gets 400."""
    p, _ = proxy
    for request in (
        b"GET @elsewhere/ HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    ):
        with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
            s.sendall(request)
            answer = b""
            while b"\r\n" not in answer and (chunk := s.recv(4096)):
                answer += chunk
            assert answer.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400")), (request, answer)
    assert not [r.getMessage() for r in caplog.records if r.exc_info]  # (pytest holds the log)


_PROXY_WITH_FEW_FILES = """
import resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
from lltui.core.fit.evict import Policy, Room
from lltui.services.launch.ondemand import OnDemandProxy
proxy = OnDemandProxy(sys.argv[1], lambda: Policy({}, Room({}, None)), port=0)
proxy.start()
print(proxy.port, flush=True)
sys.stdin.read()
proxy.stop()
"""


def test_idle_connections_neither_take_every_file_descriptor_nor_keep_a_request_out():
    """aiohttp kept a connection that sent nothing open for an hour and took every one: 600
    of them took the proxy's file descriptors (ulimit -n 256 here), asyncio printed a
    traceback per accept that failed on launch's terminal, and no request got in. Now the
    oldest connection still sending its request is let go for a new one."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    router = StandIn()
    root = Path(__file__).resolve().parents[1]
    child = subprocess.Popen(
        [sys.executable, "-c", _PROXY_WITH_FEW_FILES, f"http://127.0.0.1:{router.port}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(root)),
    )
    idle: list[socket.socket] = []
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        for _ in range(600):
            try:
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
            except OSError:
                break  # no longer accepted
        body = {"model": "big", "messages": []}
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=10)
        assert r.status_code == 200, r.text
        idle[0].settimeout(10)
        assert idle[0].recv(1) == b""  # the oldest, let go
    finally:
        for s in idle:
            s.close()
        _, err = child.communicate("", timeout=30)
    assert "Traceback" not in err and "Too many open files" not in err, err[:2000]
    assert len(idle) == 600


def test_a_request_not_sent_in_time_is_let_go(monkeypatch):
    """A connection that sent nothing was held for 3630 s, one that sent its headers and
    part of its body for as long as it liked."""
    from lltui.sources import http_server

    monkeypatch.setattr(http_server, "REQUEST_TIMEOUT_S", 0.5)
    with _running() as (p, _):
        with socket.create_connection(("127.0.0.1", p.port), timeout=10) as idle:
            assert idle.recv(1) == b""
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
        with socket.create_connection(("127.0.0.1", p.port), timeout=10) as slow:
            slow.sendall(head)
            answer = b""
            while chunk := slow.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 408"), answer  # and closed


def test_a_request_without_its_key_is_refused_before_its_body_is_read():
    """The proxy read a whole body (up to 256 MiB) before it checked the key: 256 clients with
    no key could make it hold 64 GiB. A POST without the key is now refused on its head, as
    llama-server refuses it (401); one with the key is served."""
    pinned = Policy({"big": ModelNeed("big", {}, 0, pinned=True)}, Room({}, None))
    with _running(pinned, keys=("secret",)) as (p, router):
        with socket.create_connection(("127.0.0.1", p.port), timeout=20) as s:
            s.sendall(_post_head(104857600))  # and none of the 100 MiB it announces
            answer = b""
            while b"\r\n" not in answer and (chunk := s.recv(4096)):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 401"), answer
        keyed = httpx.post(
            f"http://127.0.0.1:{p.port}/v1/chat/completions",
            json={"model": "big"},
            headers={"Authorization": "Bearer secret"},
            timeout=20,
        )
        assert keyed.status_code == 200 and router.queries[-1] == "big"


def test_a_kept_alive_request_has_its_whole_time_to_be_sent(monkeypatch):
    """A request after the first on a kept-alive connection had only what was left of the
    time since the last answer: one begun 2 s after it, its body sent over 1.5 s, was cut
    mid-body at 3 s. Its time now runs from its head."""
    from lltui.sources import http_server

    monkeypatch.setattr(http_server, "REQUEST_TIMEOUT_S", 3.0)
    with _running() as (p, _), socket.create_connection(("127.0.0.1", p.port), timeout=20) as s:
        s.sendall(b"GET /slots HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        time.sleep(2.0)  # idle, as a client between two requests (not a wait on state)
        body = b'{"model": "big"}'
        s.sendall(_post_head(len(body)) + body[:5])
        time.sleep(1.5)  # the rest of the body later, as a slow upload sends it
        s.sendall(body[5:])
        assert s.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_running_answer_is_not_cut_for_a_new_connection(monkeypatch):
    """With every connection held being answered, a new one cut the oldest answer (and the
    router's generation with it) for a client that had sent nothing; it is closed itself."""
    from lltui.sources import http_server

    monkeypatch.setattr(http_server, "MAX_CONNECTIONS", 1)
    with (
        _running() as (p, router),
        socket.create_connection(("127.0.0.1", p.port), timeout=20) as busy,
    ):
        body = b'{"model": "big", "max_tokens": 4096}'
        busy.sendall(_post_head(len(body)) + body)
        wait_for(lambda: "big" in router.queries, 10, "the generation started")
        with socket.create_connection(("127.0.0.1", p.port), timeout=20) as late:
            assert late.recv(1) == b""  # closed at once
        assert "client gone" not in router.queries


class _Watched:
    """A lock that says when someone had to wait for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.waited = threading.Event()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        self.waited.set()
        return self._lock.acquire(blocking, timeout) if blocking else False

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("first", ["lltui", "client"])
def test_a_load_lltui_is_asked_for_and_a_clients_are_decided_one_at_a_time(tmp_path, first):
    """alpha and beta each fit alone, not together. The view's l (and --load) decided under
    the session's lock and a client's request under the proxy's: while the router had not
    yet taken one load, the other was decided on the same list, and both loaded (the GPU
    over-committed). Now they take one lock: the load that comes second sees the first's
    model resident, and a client's evicts it while lltui's own load is refused."""
    from support.llama_fixture import write_tiny_llama

    from lltui.services.launch.router import RouterRefused, RouterSession
    from lltui.services.launch.router_prep import RouterRequest
    from lltui.sources.llama.router_http import RouterClient

    write_tiny_llama(tmp_path / "alpha.gguf", layers=4, seed=1)
    write_tiny_llama(tmp_path / "beta.gguf", layers=5, seed=2)
    router = StandIn()
    router.states = {"alpha": "unloaded", "beta": "unloaded"}
    request = RouterRequest(
        source=str(tmp_path),
        words=("-c", "512", "-cram", "0"),
        gpus="10MiB",
        margin_mib=0,
        host="127.0.0.1",
        port=router.port,
    )
    said: list[str] = []
    answered: list[int] = []

    def view_load() -> None:
        try:
            session.load("alpha")
            said.append("loading alpha")
        except RouterRefused as exc:
            said.append(str(exc))

    def client() -> None:
        body = {"model": "beta", "messages": [{"role": "user", "content": "hi"}]}
        answered.append(httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30).status_code)

    with RouterSession(request) as session:
        session.prepare(require_binary=False)
        lock = session._op = _Watched()  # type: ignore[assignment]
        session._client = RouterClient(session.url, timeout_s=30)  # (a load waits its turn)
        session._start_proxy("127.0.0.1", 0)
        url = session.proxy.url
        gated, other = (view_load, client) if first == "lltui" else (client, view_load)
        gate = router.gates["alpha" if first == "lltui" else "beta"] = threading.Event()
        one, two = threading.Thread(target=gated), threading.Thread(target=other)
        one.start()
        wait_for(lambda: len(router.queries) == 1, 10, "the first load sent, not taken")
        two.start()
        # the second load sent too (the over-commit), or waiting for the first's decision
        wait_for(lambda: len(router.queries) >= 2 or lock.waited.is_set(), 10, "the second")
        gate.set()
        one.join(30)
        two.join(30)
    assert router.most_resident == 1, router.queries
    assert answered == [200]
    if first == "lltui":  # the client's request evicts what lltui loaded
        assert said == ["loading alpha"]
        assert router.queries == ["load alpha", "unload alpha", "load beta", "beta"]
    else:  # lltui's own load is refused, with what to unload (beta may be serving then,
        # or the client's request still waiting for its load)
        doing = (" (it is serving 1 request)", " (it has 1 request waiting)")
        assert [line.removesuffix(doing[0]).removesuffix(doing[1]) for line in said] == [
            "alpha does not fit with beta loaded: CUDA0 has 3.65 MiB left, alpha needs "
            "5.85 MiB; unload beta first"
        ]
        assert router.queries == ["load beta", "beta"]


def test_a_use_lltui_notes_never_replaces_a_later_one(proxy):
    """note_use (a load lltui asked for, from the session's thread) read a model's last use
    and wrote the later of it and its own: a request the proxy forwarded in between (a later
    use, written on the proxy's loop) was replaced by the earlier time, and the model it had
    just served was the first evicted."""
    p, _ = proxy
    loop_thread = p._thread
    written: list[float] = []

    class Racing(dict):  # the proxy forwards a request for small between a read and a write
        def get(self, key: str, default: float = 0.0) -> float:
            seen = super().get(key, default)
            if threading.current_thread() is not loop_thread:
                self[key] = 200.0
            return seen

        def __setitem__(self, key: str, value: float) -> None:
            written.append(value)
            super().__setitem__(key, value)

    p.last_used = Racing()
    p.note_use("small", 100.0)
    wait_for(lambda: "small" in p.use(), 10, "the use noted")
    assert p.last_used["small"] == max(written), written


def _two_of_three() -> Policy:
    """a, b and c take 10 GiB of CUDA0 each, which has 24: two fit."""
    needs = {n: ModelNeed(n, {"CUDA0": 10240 * MIB}, 0) for n in "abc"}
    return Policy(needs, Room({"CUDA0": 24576 * MIB}, None))


def test_an_idle_model_goes_before_a_busy_one_served_longer_ago():
    """a, answering a request, was the least recently used and the one named to unload: the
    request for c waited for a's answer to end (up to 10 minutes) while b sat idle."""
    with _running(_two_of_three()) as (p, router):
        router.states = {"a": "loaded", "b": "loaded", "c": "unloaded"}
        body = b'{"model": "a", "max_tokens": 64}'
        with socket.create_connection(("127.0.0.1", p.port)) as held:  # a generates on
            held.sendall(_post_head(len(body)) + body)
            wait_for(lambda: p._in_flight.get("a") == 1, 10, "a's request in flight")
            chat = f"{p.url}/v1/chat/completions"
            assert httpx.post(chat, json={"model": "b"}, timeout=10).status_code == 200
            r = httpx.post(chat, json={"model": "c"}, timeout=10)
            assert r.status_code == 200, r.text
            assert router.queries == ["a", "b", "unload b", "load c", "c"]
        wait_for(lambda: not p._in_flight.get("a"), 10, "a's request ended with its client")


def test_a_request_that_leaves_while_its_room_is_made_unloads_nothing_said():
    """a answered a request while a request for b waited to unload it, and b's client left:
    nothing was unloaded, yet lltui had said 'unloading a to load b' when it began to wait."""
    events: list[str] = []
    one_fits = Policy({n: ModelNeed(n, {"CUDA0": 10240 * MIB}, 0) for n in "ab"},
                      Room({"CUDA0": 12288 * MIB}, None))  # fmt: skip
    with _running(one_fits, on_event=lambda e: events.append(e.kind)) as (p, router):
        router.states = {"a": "loaded", "b": "unloaded"}
        body = b'{"model": "a", "max_tokens": 64}'
        with socket.create_connection(("127.0.0.1", p.port)) as held:  # a generates on
            held.sendall(_post_head(len(body)) + body)
            wait_for(lambda: p._in_flight.get("a") == 1, 10, "a's request in flight")
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(f"{p.url}/v1/chat/completions", json={"model": "b"}, timeout=1)
            wait_for(lambda: not p._evicting, 10, "b's request gone")
        wait_for(lambda: not p._in_flight.get("a"), 10, "a's request ended with its client")
        # (the router sees its side close a moment after the proxy counts the request done)
        wait_for(lambda: "client gone" in router.queries, 10, "a's request gone at the router")
        assert router.queries == ["a", "client gone"] and events == []
        r = httpx.post(f"{p.url}/v1/chat/completions", json={"model": "b"}, timeout=10)
        assert r.status_code == 200, r.text
        assert router.queries[2:] == ["unload a", "load b", "b"]
        assert events == ["evict", "unloaded", "load"]


def test_a_loading_model_is_never_unloaded_mid_load():
    """a, still loading, was named to unload (never served: the least recently used), and
    the router killed its load. Passed over while b makes room; where only a does, lltui
    waits until it has loaded."""
    with _running(_two_of_three()) as (p, router):
        router.states = {"a": "loading", "b": "loaded", "c": "unloaded"}
        chat = f"{p.url}/v1/chat/completions"
        assert httpx.post(chat, json={"model": "c"}, timeout=10).status_code == 200
        assert router.queries == ["unload b", "load c", "c"]
    kept = _two_of_three()
    kept = Policy(
        {**kept.needs, "b": ModelNeed("b", {"CUDA0": 10240 * MIB}, 0, pinned=True)}, kept.room
    )
    with _running(kept) as (p, router):
        router.states = {"a": "loading", "b": "loaded", "c": "unloaded"}
        chat = f"{p.url}/v1/chat/completions"
        asked = threading.Thread(target=lambda: httpx.post(chat, json={"model": "c"}, timeout=30))
        asked.start()
        wait_for(lambda: p._evicting == {"a"}, 10, "a named to unload")
        router.states["a"] = "loaded"
        asked.join(30)
        assert router.queries == ["unload a", "load c", "c"]


def _queued_at_lock(p: OnDemandProxy) -> int:
    """The requests waiting for the proxy's decision lock."""
    return len(getattr(p._lock, "_waiters", None) or ())


def test_a_model_with_requests_waiting_for_it_is_not_the_one_unloaded():
    """b (loaded by lltui's l) had a request waiting at the proxy for it while another model
    loaded; the next decision saw b idle, never used, and unloaded it before that request was
    served (which then loaded b again in a's place). A model with requests waiting counts as
    busy: the idle a goes."""
    needs = {n: ModelNeed(n, {"CUDA0": 10240 * MIB}, 0) for n in "abcd"}
    with _running(Policy(needs, Room({"CUDA0": 34816 * MIB}, None))) as (p, router):
        router.states = {"a": "loaded", "b": "loading", "c": "unloaded", "d": "unloaded"}
        router.slow_loads = True
        chat = f"{p.url}/v1/chat/completions"
        assert httpx.post(chat, json={"model": "a"}, timeout=10).status_code == 200
        answered: dict[str, int] = {}

        def ask(model: str) -> None:
            answered[model] = httpx.post(chat, json={"model": model}, timeout=60).status_code

        asked = [threading.Thread(target=ask, args=(m,)) for m in "dcb"]
        asked[0].start()  # d loads, holding the decision
        wait_for(lambda: "load d" in router.queries, 10, "d loading")
        asked[1].start()
        wait_for(lambda: _queued_at_lock(p) == 1, 10, "c's request waiting")
        asked[2].start()
        wait_for(lambda: _queued_at_lock(p) == 2, 10, "b's request waiting")
        router.slow_loads = False
        router.states.update(b="loaded", d="loaded")
        for t in asked:
            t.join(60)
        assert answered == {"d": 200, "c": 200, "b": 200}
        assert [q for q in router.queries if q.startswith(("load", "unload"))] == [
            "load d",
            "unload a",
            "load c",
        ]


def test_requests_that_waited_for_a_load_that_failed_do_not_load_it_again():
    """Three requests for small at once: the first loaded it, the other two waited their
    turn and, the load having failed, each loaded small again (a model that fails after a
    minute failed three times over, each unloading what it needed room from). The requests
    that waited for that load are answered its failure."""
    with _running(Policy({"small": ModelNeed("small", {}, 0)}, Room({}, None))) as (p, router):
        router.states = {"small": "unloaded"}
        router.slow_loads = True
        chat = f"{p.url}/v1/chat/completions"
        answered: list[int] = []

        def ask() -> None:
            answered.append(httpx.post(chat, json={"model": "small"}, timeout=60).status_code)

        asked = [threading.Thread(target=ask) for _ in range(3)]
        for t in asked:
            t.start()
        wait_for(lambda: "load small" in router.queries, 10, "small loading")
        wait_for(lambda: _queued_at_lock(p) == 2, 10, "two requests waiting for it")
        router.slow_loads = False  # (a load asked for again would succeed)
        router.states["small"] = "unloaded"  # its server exited while loading
        for t in asked:
            t.join(60)
        assert answered == [503, 503, 503]
        assert router.queries == ["load small"]
        # a request after the failure loads it again
        assert httpx.post(chat, json={"model": "small"}, timeout=60).status_code == 200
        assert router.queries == ["load small", "load small", "small"]


def test_a_router_that_is_gone_is_a_502_saying_so(caplog):
    """With llama-server gone (killed, before lltui saw it exit), a request naming a model got
    503 and aiohttp's words for the failed connection ("the router's model list: Cannot
    connect to host 127.0.0.1:PORT ssl:default [...]"), a request naming none 502 "the router
    is not reachable": every one is now the 502, in one line."""
    policy = Policy({"a": ModelNeed("a", {}, 0)}, Room({}, None))
    p = OnDemandProxy(f"http://127.0.0.1:{_port()}", lambda: policy, port=0)
    p.start()
    try:
        for method, path, body in (
            ("POST", "/v1/chat/completions", {"model": "a"}),
            ("POST", "/models/load", {"model": "a"}),
            ("GET", "/props?model=a", None),
            ("GET", "/v1/models", None),
        ):
            r = httpx.request(method, f"{p.url}{path}", json=body, timeout=30)
            assert r.status_code == 502, (path, r.text)
            assert r.json()["error"]["code"] == "router_unavailable"
            assert r.json()["error"]["message"] == "the router is not reachable"
    finally:
        p.stop()
    assert not [r.getMessage() for r in caplog.records if r.exc_info]


def test_a_model_whose_file_is_gone_unloads_nothing_and_says_so(tmp_path):
    """small's file was deleted while lltui served: a request for it unloaded big to make
    room, then the load failed, and the client got 503 load_failed '(the router's log says
    why)'."""
    room = Room({"CUDA0": 12288 * MIB}, None)
    needs = {
        "big": ModelNeed("big", {"CUDA0": 10240 * MIB}, 0, path=str(tmp_path / "big.gguf")),
        "small": ModelNeed("small", {"CUDA0": 4096 * MIB}, 0, path=str(tmp_path / "small.gguf")),
    }
    (tmp_path / "big.gguf").write_bytes(b"GGUF")
    events: list[str] = []
    with _running(Policy(needs, room), on_event=lambda e: events.append(e.reason)) as (p, router):
        r = httpx.post(f"{p.url}/v1/chat/completions", json={"model": "small"}, timeout=30)
        assert r.status_code == 404, r.text
        gone = f"model 'small' cannot load: its file {tmp_path / 'small.gguf'} is gone"
        assert r.json() == {
            "error": {
                "message": gone,
                "type": "invalid_request_error",
                "code": "model_file_missing",
            }
        }
        assert router.queries == [] and router.states["big"] == "loaded"
        assert events == [gone]
        (tmp_path / "small.gguf").write_bytes(b"GGUF")  # put back: it loads
        r = httpx.post(f"{p.url}/v1/chat/completions", json={"model": "small"}, timeout=30)
        assert r.status_code == 200, r.text
        assert router.queries == ["unload big", "load small", "small"]


def test_a_model_that_can_never_fit_is_a_400_one_that_may_later_a_503():
    """A model too big for the rig even alone was a 503, which OpenAI's clients retry by
    themselves (openai-python twice, each time refused again); a load that may succeed once
    another model goes stays a 503."""
    room = Room({"CUDA0": 12288 * MIB}, None)
    needs = {
        "big": ModelNeed("big", {"CUDA0": 10240 * MIB}, 0, pinned=True),
        "small": ModelNeed("small", {"CUDA0": 4096 * MIB}, 0),
        "huge": ModelNeed("huge", {"CUDA0": 16384 * MIB}, 0),
    }
    with _running(Policy(needs, room)) as (p, router):
        router.states = {"big": "loaded", "small": "unloaded", "huge": "unloaded"}
        chat = f"{p.url}/v1/chat/completions"
        never = httpx.post(chat, json={"model": "huge"}, timeout=30)
        assert never.status_code == 400, never.text
        error = never.json()["error"]
        assert (error["code"], error["type"]) == ("does_not_fit", "invalid_request_error")
        assert error["message"].startswith("huge does not fit even alone: CUDA0 has ")
        later = httpx.post(chat, json={"model": "small"}, timeout=30)  # once big is unpinned
        assert later.status_code == 503, later.text
        error = later.json()["error"]
        assert (error["code"], error["type"]) == ("pinned", "unavailable_error")
        load = httpx.post(f"{p.url}/models/load", json={"model": "huge"}, timeout=30)
        assert load.status_code == 400 and load.json()["error"]["code"] == "does_not_fit"
        assert router.queries == []

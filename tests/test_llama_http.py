"""The llama-server poller: error paths on httpx.MockTransport, the rest on a real server."""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable

import httpx
import pytest
from support.llama_fixture import free_port, llama_bins, llama_server, tiny_model

from lltui.sources.llama.http import (
    BAD_RESPONSE,
    DISABLED,
    DOWN,
    LOADING,
    OK,
    STATE_DOWN,
    STATE_ERROR,
    STATE_LOADING,
    STATE_READY,
    STATE_UNAUTHORIZED,
    TIMEOUT,
    UNAUTHORIZED,
    LlamaServerClient,
)

__all__ = ["llama_bins", "tiny_model"]  # fixtures for the live tests

SECRET = "sk-very-secret-4711"
LOADING_BODY = {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
NO_METRICS = {
    "error": {
        "code": 501,
        "message": "This server does not support metrics endpoint. Start it with `--metrics`",
        "type": "not_supported_error",
    }
}
BAD_KEY = {"error": {"message": "Invalid API Key", "type": "authentication_error", "code": 401}}
METRICS_TEXT = "llamacpp:tokens_predicted_total 10\nllamacpp:tokens_predicted_seconds_total 0.5\n"
SLOTS = [{"id": 0, "n_ctx": 512, "is_processing": False, "speculative": False}]
PROPS = {"total_slots": 1, "default_generation_settings": {"n_ctx": 512}, "build_info": "b1"}


class FakeServer:
    """Routes for httpx.MockTransport; counts requests per path."""

    def __init__(self, routes: dict[str, Callable[[httpx.Request], httpx.Response]]) -> None:
        self.routes = routes
        self.calls: Counter[str] = Counter()
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls[request.url.path] += 1
        self.requests.append(request)
        return self.routes[request.url.path](request)


def reply(status: int, payload: object) -> Callable[[httpx.Request], httpx.Response]:
    if isinstance(payload, str):
        return lambda _req: httpx.Response(status, text=payload)
    return lambda _req: httpx.Response(status, json=payload)


def ready_routes() -> dict[str, Callable[[httpx.Request], httpx.Response]]:
    return {
        "/health": reply(200, {"status": "ok"}),
        "/metrics": reply(200, METRICS_TEXT),
        "/slots": reply(200, SLOTS),
        "/props": reply(200, PROPS),
    }


def client_for(server: FakeServer, **kw: object) -> LlamaServerClient:
    return LlamaServerClient(
        "http://127.0.0.1:9",
        transport=httpx.MockTransport(server),
        **kw,
    )


def test_loading_503_is_a_state_and_stops_the_poll_there() -> None:
    server = FakeServer({"/health": reply(503, LOADING_BODY)})
    with client_for(server) as client:
        poll = client.poll()
    assert poll.state == STATE_LOADING and not poll.ready
    assert poll.health.status == LOADING and poll.health.http_status == 503
    assert poll.health.message == "Loading model"
    assert poll.message is not None and "loading the model" in poll.message
    assert set(server.calls) == {"/health"}


def test_older_loading_body_on_200() -> None:
    server = FakeServer({"/health": reply(200, {"status": "loading model"})})
    with client_for(server) as client:
        assert client.poll().state == STATE_LOADING


def test_other_503_is_an_error_not_loading() -> None:
    server = FakeServer({"/health": reply(503, {"error": {"message": "no slot available"}})})
    with client_for(server) as client:
        assert client.poll().state == STATE_ERROR


def test_ready_poll_reads_every_endpoint() -> None:
    server = FakeServer(ready_routes())
    with client_for(server) as client:
        poll = client.poll()
    assert poll.state == STATE_READY and poll.ready
    assert poll.metrics is not None and poll.metrics.tokens_predicted_total == 10
    assert poll.slots is not None and [s.n_ctx for s in poll.slots] == [512]
    assert poll.props is not None and poll.props.build_info == "b1"
    assert [e.status for e in poll.endpoints] == [OK, OK, OK, OK]
    assert poll.throughput is None  # the first poll has nothing to diff against


def test_metrics_501_is_disabled_and_not_asked_again() -> None:
    routes = ready_routes()
    routes["/metrics"] = reply(501, NO_METRICS)
    server = FakeServer(routes)
    with client_for(server, props_ttl_s=1000.0) as client:
        first = client.poll()
        second = client.poll()
    assert first.state == STATE_READY and first.metrics is None
    metrics_result = next(e for e in first.endpoints if e.endpoint == "/metrics")
    assert metrics_result.status == DISABLED and metrics_result.http_status == 501
    assert "--metrics" in (metrics_result.message or "")
    assert server.calls["/metrics"] == 1 and server.calls["/slots"] == 2
    assert server.calls["/props"] == 1  # props are read again only after their TTL
    assert second.props is not None and second.throughput is not None
    assert second.throughput.sources == ("slots",)


def test_disabled_endpoints_are_asked_again_after_a_restart() -> None:
    routes = ready_routes()
    routes["/metrics"] = reply(501, NO_METRICS)
    server = FakeServer(routes)
    with client_for(server) as client:
        client.poll()
        server.routes["/health"] = reply(503, LOADING_BODY)
        assert client.poll().state == STATE_LOADING
        server.routes["/health"] = reply(200, {"status": "ok"})
        server.routes["/metrics"] = reply(200, METRICS_TEXT)
        poll = client.poll()
    assert server.calls["/metrics"] == 2
    assert poll.metrics is not None and poll.throughput is None  # counters started over


def test_connection_refused_is_down_not_an_exception() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with client_for(FakeServer({"/health": refuse})) as client:
        poll = client.poll()
    assert poll.state == STATE_DOWN and poll.health.status == DOWN
    assert poll.message == "/health: not reachable (connection refused)"


def test_real_refused_port_is_down() -> None:
    with LlamaServerClient(f"http://127.0.0.1:{free_port()}", timeout_s=1.0) as client:
        poll = client.poll()
    assert poll.state == STATE_DOWN and poll.health.status == DOWN


def test_timeout_is_reported() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with client_for(FakeServer({"/health": hang})) as client:
        poll = client.poll()
    assert poll.state == STATE_DOWN and poll.health.status == TIMEOUT


def test_bad_key_401_is_unauthorized_and_the_key_never_shows() -> None:
    routes = ready_routes()
    for path in ("/metrics", "/slots", "/props"):
        routes[path] = reply(401, BAD_KEY)
    server = FakeServer(routes)
    client = client_for(server, api_key=SECRET)
    poll = client.poll()
    client.close()
    assert poll.state == STATE_UNAUTHORIZED
    assert poll.message == "/metrics: rejected the API key (401: Invalid API Key)"
    assert {e.status for e in poll.endpoints[1:]} == {UNAUTHORIZED}
    # The key goes out as a bearer token and nowhere else.
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in server.requests)
    assert SECRET not in repr(client) and SECRET not in repr(poll) and SECRET not in str(poll)
    assert SECRET not in repr(vars(client))


def test_a_401_when_no_key_was_sent_says_a_key_is_needed_and_how_to_give_it() -> None:
    # it said 'rejected the API key' of a key never sent
    routes = ready_routes()
    routes["/metrics"] = reply(401, BAD_KEY)
    with client_for(FakeServer(routes)) as client:
        poll = client.poll()
    assert poll.state == STATE_UNAUTHORIZED and poll.message is not None
    assert poll.message.startswith("/metrics: needs an API key, and none was sent")
    assert "--llama-api-key-file" in poll.message and "LLAMA_API_KEY" in poll.message


def test_garbage_bodies_are_bad_responses() -> None:
    routes = ready_routes()
    routes["/metrics"] = reply(200, "<html>proxy login</html>")
    routes["/slots"] = reply(200, "not json at all")
    routes["/props"] = reply(200, [1, 2, 3])
    with client_for(FakeServer(routes)) as client:
        poll = client.poll()
    statuses = {e.endpoint: e.status for e in poll.endpoints}
    assert statuses == {
        "/health": OK,
        "/metrics": BAD_RESPONSE,
        "/slots": BAD_RESPONSE,
        "/props": BAD_RESPONSE,
    }
    assert poll.state == STATE_READY and poll.metrics is None and poll.slots is None


def test_throughput_from_successive_polls() -> None:
    totals = iter([10, 30])
    now = [100.0]
    routes = ready_routes()
    routes["/metrics"] = lambda _r: httpx.Response(
        200,
        text=f"llamacpp:tokens_predicted_total {next(totals)}\n"
        "llamacpp:tokens_predicted_seconds_total 1.0\n"
        "llamacpp:predicted_tokens_seconds 999\n",
    )
    with client_for(FakeServer(routes), clock=lambda: now[0]) as client:
        client.poll(with_slots=False, with_props=False)
        now[0] = 102.0
        poll = client.poll(with_slots=False, with_props=False)
    assert poll.throughput is not None
    assert poll.throughput.generated_tokens == 20
    assert poll.throughput.generation_tps == pytest.approx(10.0)


# --- a real llama-server ----------------------------------------------------------------------


def wait_ready(client: LlamaServerClient, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.poll(with_metrics=False, with_slots=False, with_props=False).state != STATE_READY:
        assert time.monotonic() < deadline, "server not ready in time"
        time.sleep(0.1)


@pytest.mark.slow
def test_live_server_polls(llama_bins, tiny_model, tmp_path) -> None:
    with (
        llama_server(
            llama_bins, tiny_model, tmp_path / "server.log", extra=["--metrics", "-np", "2"]
        ) as run,
        LlamaServerClient(run.url, timeout_s=5.0) as client,
    ):
        wait_ready(client)
        first = client.poll()
        assert first.state == STATE_READY
        assert first.props is not None and first.props.total_slots == 2
        assert first.slots is not None and len(first.slots) == first.props.total_slots
        assert first.metrics is not None and first.metrics.tokens_predicted_total == 0
        completion = httpx.post(
            f"{run.url}/completion",
            json={"prompt": "hello the gpu", "n_predict": 12, "seed": 1, "ignore_eos": True},
            timeout=60.0,
        ).json()
        second = client.poll()
        assert second.metrics is not None and second.throughput is not None
        predicted = completion["tokens_predicted"]
        assert second.metrics.tokens_predicted_total == predicted
        assert second.throughput.generated_tokens == predicted
        assert second.throughput.decode_tps is not None and second.throughput.decode_tps > 0
        assert second.throughput.prompt_tokens == second.metrics.prompt_tokens_total


@pytest.mark.slow
def test_live_server_api_key(llama_bins, tiny_model, tmp_path) -> None:
    with llama_server(
        llama_bins, tiny_model, tmp_path / "server.log", extra=["--api-key", SECRET]
    ) as run:
        with LlamaServerClient(run.url, api_key="wrong-key", timeout_s=5.0) as wrong:
            poll = wrong.poll()
        assert poll.health.status == OK  # /health is never key-checked
        assert poll.state == STATE_UNAUTHORIZED
        assert next(e for e in poll.endpoints if e.endpoint == "/slots").http_status == 401
        with LlamaServerClient(run.url, api_key=SECRET, timeout_s=5.0) as right:
            good = right.poll()
        assert good.state == STATE_READY and good.slots is not None
        metrics = next(e for e in good.endpoints if e.endpoint == "/metrics")
        assert metrics.status == DISABLED  # started without --metrics
    assert SECRET not in json.dumps([repr(poll), repr(good)])


# --- a server that misbehaves: every response is bounded in size, time and nesting ----------


class _Misbehaving:
    """A real HTTP server on 127.0.0.1 whose endpoints break one bound each."""

    def __init__(self) -> None:
        import http.server
        import threading

        self.stop = threading.Event()
        stop = self.stop

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _start(self, length: int | None = None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()

            def do_GET(self) -> None:
                # the client giving up mid-body is what these endpoints are for
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    getattr(self, "_" + self.path.strip("/"))()

            def _health(self) -> None:
                body = b'{"status": "ok"}'
                self._start(len(body))
                self.wfile.write(body)

            def _metrics(self) -> None:  # endless body, no length
                self._start()
                line = b"llamacpp:tokens_predicted_total 1\n" * 2000
                for _ in range(10_000):  # bounded: 700 MB, far past any limit
                    if stop.is_set():
                        return
                    self.wfile.write(line)

            def _slots(self) -> None:  # nested far past the decoder's limit
                body = b"[" * 200_000 + b"]" * 200_000
                self._start(len(body))
                self.wfile.write(body)

            def _props(self) -> None:  # drips a byte at a time, never finishing in time
                self._start()
                for _ in range(400):  # bounded: 20 s at most
                    if stop.wait(0.05):
                        return
                    self.wfile.write(b" ")
                    self.wfile.flush()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def misbehaving():
    server = _Misbehaving()
    yield server
    server.close()


def test_endless_body_is_cut_at_its_limit(misbehaving) -> None:
    with LlamaServerClient(misbehaving.url, timeout_s=5.0) as client:
        result, metrics = client.metrics()
    assert metrics is None
    assert result.status == BAD_RESPONSE
    assert "limit" in (result.message or "")


def test_declared_oversized_body_is_refused_unread() -> None:
    def huge(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Content-Length": str(10**9)}, content=b"")

    client = client_for(FakeServer({"/slots": huge}))
    result, slots = client.slots()
    assert slots is None and result.status == BAD_RESPONSE
    assert "1000000000 bytes" in (result.message or "")


def test_deep_nesting_is_a_bad_response_not_an_exception(misbehaving) -> None:
    with LlamaServerClient(misbehaving.url, timeout_s=5.0) as client:
        result, slots = client.slots()
    assert slots is None
    assert result.status == BAD_RESPONSE
    assert "nested" in (result.message or "")


def test_a_dripping_body_ends_at_the_deadline(misbehaving) -> None:
    with LlamaServerClient(misbehaving.url, timeout_s=1.0, deadline_s=0.5) as client:
        started = time.monotonic()
        result, props = client.props()
        took = time.monotonic() - started
    assert props is None
    assert result.status == BAD_RESPONSE
    assert "took over 0.5 s" in (result.message or "")
    # each byte arrives well within the read timeout: only the deadline can end it this soon
    assert took < 10


def test_poll_of_a_misbehaving_server_never_raises(misbehaving) -> None:
    with LlamaServerClient(misbehaving.url, timeout_s=2.0, deadline_s=1.0) as client:
        poll = client.poll()
    assert poll.state == STATE_READY  # /health is fine
    bad = {e.endpoint: e.status for e in poll.endpoints}
    assert bad == {
        "/health": OK,
        "/metrics": BAD_RESPONSE,
        "/slots": BAD_RESPONSE,
        "/props": BAD_RESPONSE,
    }
    assert poll.metrics is None and poll.slots is None and poll.props is None

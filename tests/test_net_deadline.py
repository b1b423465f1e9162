"""One deadline for a whole network read, at the socket: a server on 127.0.0.1 that drips its
answer (headers or body, a byte at a time, each in time for the per-read timeout) ends at
the deadline with one line; a redirect that fails names where it was sent; every HTTP client
of lltui reads through the same deadline."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.sources.gpu.prom import ScrapeSource
from lltui.sources.llama.http import BAD_RESPONSE, TIMEOUT, LlamaServerClient
from lltui.sources.models.remote import read_remote
from lltui.sources.models.remote_gguf import RemoteError
from lltui.sources.net import Deadline, http_client

DRIP_S = 0.1  # a byte every DRIP_S: far inside any per-read timeout
DEADLINE_S = 1.0


class _Drip(BaseHTTPRequestHandler):
    """``/body``: headers at once, then the body a byte at a time; ``/head``: the status
    line, then the headers a byte at a time; ``/moved/HOST/PORT/PATH``: 302 to
    http://HOST:PORT/PATH; ``/missing``: 404."""

    model: bytes = b""
    stop: threading.Event

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _drip(self, data: bytes) -> None:
        for i in range(len(data)):
            if self.stop.wait(DRIP_S):
                return
            try:
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
            except OSError:
                return

    def do_HEAD(self) -> None:
        self.send_response(405)
        self.end_headers()

    def do_GET(self) -> None:
        if self.path.startswith("/moved/"):
            _, _, host, port, rest = self.path.split("/", 4)
            self.send_response(302)
            self.send_header("Location", f"http://{host}:{port}/{rest}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/missing"):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.model[:4096]
        if self.path.startswith("/head"):
            self.wfile.write(b"HTTP/1.1 206 Partial Content\r\n")
            self.wfile.flush()
            self._drip(b"Content-Type: application/octet-stream\r\n" * 50)
            return
        self.send_response(206)
        self.send_header("Content-Range", f"bytes 0-{len(body) - 1}/{len(self.model)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self._drip(body)


@pytest.fixture
def drip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (path,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "F16")
    stop = threading.Event()
    handler = type("Drip", (_Drip,), {"model": path.read_bytes(), "stop": stop})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again: nothing listens there


@pytest.mark.parametrize("where", ["body", "head"])
def test_a_dripping_server_ends_at_the_deadline(drip, where):
    t0 = time.monotonic()
    with pytest.raises(RemoteError) as err:
        read_remote(f"{drip}/{where}/m.gguf", deadline_s=DEADLINE_S)
    took = time.monotonic() - t0
    assert "took longer than 1 s, the deadline for the whole read" in str(err.value)
    assert err.value.code == 1
    assert took < DEADLINE_S + 5  # ends at the deadline, not at the end of the drip


def test_the_deadline_comes_from_the_environment_through_the_cli(drip, capsys, monkeypatch):
    monkeypatch.setenv("LLTUI_NET_DEADLINE", "1")
    assert main(["fit", f"{drip}/body/m.gguf", "--gpus", "cpu"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "took longer than 1 s" in err
    monkeypatch.setenv("LLTUI_NET_DEADLINE", "soon")
    assert main(["fit", f"{drip}/body/m.gguf", "--gpus", "cpu"]) == 2
    assert "LLTUI_NET_DEADLINE='soon': not a number" in capsys.readouterr().err


def test_a_failed_redirect_names_where_it_was_sent(drip):
    dead = _dead_port()
    with pytest.raises(RemoteError) as err:
        read_remote(f"{drip}/moved/127.0.0.1/{dead}/x.gguf", deadline_s=10)
    first = drip.split("//")[1]
    assert f"cannot connect (127.0.0.1:{dead}, redirected from {first})" in str(err.value)


def test_a_redirect_to_a_missing_file_names_the_server_that_said_so(drip):
    port = drip.rsplit(":", 1)[1]
    with pytest.raises(RemoteError) as err:  # localhost: another origin than 127.0.0.1
        read_remote(f"{drip}/moved/localhost/{port}/missing", deadline_s=10)
    expected = f"not found (HTTP 404 from localhost:{port}, redirected from 127.0.0.1:{port})"
    assert expected in str(err.value)


def test_the_deadline_covers_headers_body_and_every_request_of_a_client(drip):
    deadline = Deadline(DEADLINE_S)
    with http_client(deadline, timeout=httpx.Timeout(30.0)) as client:
        t0 = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            client.get(f"{drip}/head/x")
        assert deadline.expired and time.monotonic() - t0 < DEADLINE_S + 5
        with pytest.raises(httpx.TimeoutException):  # nothing left for the next request
            client.get(f"{drip}/body/x")
        deadline.restart()
        with pytest.raises(httpx.TimeoutException):
            client.get(f"{drip}/body/x")


def test_scrape_sources_and_llama_server_polls_end_at_their_deadline(drip):
    src = ScrapeSource(f"{drip}/head/metrics", timeout_s=30.0, deadline_s=DEADLINE_S)
    t0 = time.monotonic()
    with pytest.raises(Exception, match=r"did not answer in time|did not finish"):
        src.poll_hosts()
    src.close()
    assert time.monotonic() - t0 < DEADLINE_S + 5
    with LlamaServerClient(f"{drip}/head", timeout_s=30.0, deadline_s=DEADLINE_S) as client:
        t0 = time.monotonic()
        result = client.health()
        assert result.status in (TIMEOUT, BAD_RESPONSE)
        assert time.monotonic() - t0 < DEADLINE_S + 5


def test_proxies_from_the_environment_are_bounded_too(drip, monkeypatch):
    from lltui.sources.net import _Backend, _proxy_mounts

    mounts = _proxy_mounts(
        Deadline(1.0), {"https": "proxy.example:3128", "no": "localhost,.internal,10.0.0.1,::1"}
    )
    assert set(mounts) == {
        "https://",
        "all://localhost",
        "all://*internal",
        "all://10.0.0.1",
        "all://[::1]",
    }
    proxied = mounts["https://"]
    assert isinstance(proxied, httpx.HTTPTransport)
    assert isinstance(proxied._pool._network_backend, _Backend)
    assert _proxy_mounts(Deadline(1.0), {"http": "p:1", "no": "*"}) == {}
    # a request through a proxy (the dripping server, as one) ends at the deadline
    monkeypatch.setenv("http_proxy", drip)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    deadline = Deadline(DEADLINE_S)
    with http_client(deadline, timeout=httpx.Timeout(30.0), trust_env=True) as client:
        t0 = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            client.get("http://model.example/m.gguf")
        assert deadline.expired and time.monotonic() - t0 < DEADLINE_S + 5

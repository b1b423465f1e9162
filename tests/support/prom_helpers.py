"""Helpers of the Prometheus tests: `lltui exporter` processes, a stub HTTP server, waits."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROM_FIXTURES = FIXTURES / "prom"
ROOT = Path(__file__).resolve().parents[2]


def wait_until(predicate: Callable[[], object], timeout: float = 20.0, what: str = "") -> object:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        event.wait(0.05)


def http_body(name: str) -> bytes:
    """The body of a captured HTTP response in tests/fixtures/llama-server/."""
    raw = (FIXTURES / "llama-server" / name).read_bytes()
    for sep in (b"\r\n\r\n", b"\n\n"):
        if sep in raw:
            return raw.split(sep, 1)[1]
    return raw


@dataclass
class Exporter:
    proc: subprocess.Popen[str]
    url: str
    first_line: str


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("COLUMNS", None)  # a pipe: the full table, whatever width an earlier test set
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_cli(*args: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lltui", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(),
        cwd=ROOT,
    )


@contextmanager
def exporter(*args: str, timeout: float = 30.0) -> Iterator[Exporter]:
    """An `lltui exporter` on a free loopback port, stopped (SIGTERM, then SIGKILL) after."""
    argv = [sys.executable, "-m", "lltui", "exporter", "--listen", "127.0.0.1:0", *args]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=ROOT
    )
    try:
        line = _read_line(proc, timeout)
        marker = "serving http://"
        if marker not in line:
            proc.kill()
            _out, err = proc.communicate(timeout=10)
            raise AssertionError(f"exporter did not start: {line!r} {err!r}")
        url = "http://" + line.split(marker, 1)[1].split()[0].rstrip(",")
        yield Exporter(proc, url, line)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        if not sel.select(timeout):
            raise AssertionError("exporter printed nothing in time")
        return proc.stdout.readline()
    finally:
        sel.close()


def get_text(url: str) -> str:
    resp = httpx.get(url, timeout=10.0, trust_env=False)
    resp.raise_for_status()
    return resp.text


# --- a stub HTTP server --------------------------------------------------------------------


@dataclass
class Stub:
    """Answers GET PATH with ``routes[PATH]`` (status, content type, body), a route with its
    query string before one without; ``hang`` holds every request until the stub stops."""

    routes: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)
    hang: bool = False
    requests: list[str] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)
    url: str = ""


@contextmanager
def stub_server(stub: Stub) -> Iterator[Stub]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            stub.requests.append(self.path)
            if stub.hang:
                stub.stopped.wait(30)
                return
            path = self.path.split("?", 1)[0]
            missing = (404, "text/plain", b"not found")
            status, ctype, body = stub.routes.get(self.path, stub.routes.get(path, missing))
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield stub
    finally:
        stub.stopped.set()
        server.shutdown()
        server.server_close()

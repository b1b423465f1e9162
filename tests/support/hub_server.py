"""A small Hugging Face hub on 127.0.0.1 for tests: the endpoints huggingface_hub and lltui's
ranged reader call, over real HTTP, with every request logged.

- ``GET /api/models/OWNER/NAME[/revision/REV]``: model info with ``siblings`` (sizes, LFS
  sha256), ``sha``, ``gated``, ``private``; errors with the hub's ``X-Error-Code``.
- ``GET|HEAD /OWNER/NAME/resolve/REV/PATH``: the file, with Range support (206), ETag,
  X-Repo-Commit and Content-Length; a gated or private repository wants the token.
- ``GET|HEAD /files/NAME``: a plain file server for https-URL references.
- ``GET|HEAD /cdn/OWNER/NAME/PATH``: where ``/resolve/`` redirects when ``cdn`` is set (the
  hub's storage, another origin: ``localhost`` rather than ``127.0.0.1``).

``ranges = False`` makes it answer every GET with 200 and the whole body, as servers that
ignore Range do.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class Repo:
    files: dict[str, Path]  # path in the repository -> file on disk
    gated: bool = False
    private: bool = False
    commit: str = COMMIT


@dataclass
class Hit:
    method: str
    path: str
    range: str | None
    status: int
    sent: int  # body bytes written
    auth: str | None


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    files: dict[str, Path] = field(default_factory=dict)  # /files/NAME
    token: str | None = None  # the token gated and private repositories accept
    ranges: bool = True
    head: bool = True  # False: HEAD answers 405, as URLs signed for GET only do
    cdn: bool = False  # /resolve/ answers 302 to another origin (localhost), as the hub does
    log: list[Hit] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def hits(self, kind: str = "") -> list[Hit]:
        with self.lock:
            return [h for h in self.log if kind in h.path]

    def clear(self) -> None:
        with self.lock:
            self.log.clear()


def etag_of(path: Path) -> str:
    st = path.stat()
    return hashlib.sha256(f"{path.name}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()


def _handler(hub: Hub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _log(self, status: int, sent: int) -> Hit:
            # logged before the body goes out: a client that has its answer finds it logged
            hit = Hit(
                self.command,
                self.path,
                self.headers.get("Range"),
                status,
                sent,
                self.headers.get("Authorization"),
            )
            with hub.lock:
                hub.log.append(hit)
            return hit

        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None):
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            sending = self.command != "HEAD" and bool(body)
            self._log(status, len(body) if sending else 0)
            self.end_headers()
            if sending:
                self.wfile.write(body)

        def _error(self, status: int, code: str | None = None) -> None:
            self._send(status, b'{"error": "no"}', {"X-Error-Code": code} if code else {})

        def _authorized(self, repo: Repo) -> int:
            """0 when the request may read ``repo``, else the status the hub answers."""
            if not (repo.gated or repo.private):
                return 0
            auth = self.headers.get("Authorization")
            if auth == f"Bearer {hub.token}" and hub.token:
                return 0
            return 401 if auth is None else 403

        def do_HEAD(self) -> None:
            if not hub.head:
                return self._error(405)
            self.do_GET()

        def do_GET(self) -> None:
            path = unquote(urlsplit(self.path).path)
            m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/(.+))?$", path)
            if m:
                return self._info(m.group(1), m.group(2) or "main")
            m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
            if m:
                repo = hub.repos.get(m.group(1))
                if repo is None:
                    return self._error(404, "RepoNotFound")
                if m.group(2) not in ("main", repo.commit):
                    return self._error(404, "RevisionNotFound")
                denied = self._authorized(repo)
                if denied:
                    code = "GatedRepo" if repo.gated else "RepoNotFound"
                    return self._error(denied if repo.gated else 401, code)
                f = repo.files.get(m.group(3))
                if f is None:
                    return self._error(404, "EntryNotFound")
                if hub.cdn:
                    port = hub.url.rsplit(":", 1)[1]
                    where = f"http://localhost:{port}/cdn/{m.group(1)}/{m.group(3)}"
                    return self._send(
                        302,
                        b"",
                        {
                            "Location": where,
                            "X-Repo-Commit": repo.commit,
                            "X-Linked-Etag": f'"{etag_of(f)}"',
                            "X-Linked-Size": str(f.stat().st_size),
                        },
                    )
                return self._file(f, {"X-Repo-Commit": repo.commit})
            m = re.match(r"^/cdn/([^/]+/[^/]+)/(.+)$", path)
            if m and m.group(1) in hub.repos and m.group(2) in hub.repos[m.group(1)].files:
                return self._file(hub.repos[m.group(1)].files[m.group(2)], {})
            m = re.match(r"^/files/(.+)$", path)
            if m and m.group(1) in hub.files:
                return self._file(hub.files[m.group(1)], {})
            return self._error(404)

        def _info(self, name: str, rev: str) -> None:
            repo = hub.repos.get(name)
            if repo is None:
                return self._error(404, "RepoNotFound")
            if rev not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound")
            if repo.private and self._authorized(repo):
                return self._error(401, "RepoNotFound")
            siblings = []
            for p, f in repo.files.items():
                size = f.stat().st_size
                siblings.append(
                    {
                        "rfilename": p,
                        "size": size,
                        "blobId": etag_of(f)[:40],
                        "lfs": {"size": size, "sha256": etag_of(f), "pointerSize": 134},
                    }
                )
            info = {
                "id": name,
                "modelId": name,
                "sha": repo.commit,
                "private": repo.private,
                "gated": "manual" if repo.gated else False,
                "siblings": siblings,
            }
            self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})

        def _file(self, f: Path, extra: dict[str, str]) -> None:
            size = f.stat().st_size
            headers = {"ETag": f'"{etag_of(f)}"', "Accept-Ranges": "bytes", **extra}
            rng = self.headers.get("Range")
            m = re.match(r"^bytes=(\d+)-(\d*)$", rng or "")
            if self.command == "HEAD" or not m or not hub.ranges:
                return self._whole(f, size, headers)
            start = int(m.group(1))
            end = min(int(m.group(2)) if m.group(2) else size - 1, size - 1)
            if start >= size:
                return self._send(416, b"", {"Content-Range": f"bytes */{size}"})
            with open(f, "rb") as fh:
                fh.seek(start)
                body = fh.read(end - start + 1)
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
            self._send(206, body, headers)

        def _whole(self, f: Path, size: int, headers: dict[str, str]) -> None:
            self.send_response(200)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(size))
            hit = self._log(200, 0)
            self.end_headers()
            if self.command != "HEAD":
                try:
                    with open(f, "rb") as fh:
                        while chunk := fh.read(1 << 20):
                            self.wfile.write(chunk)
                            with hub.lock:
                                hit.sent += len(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

    return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that hangs up mid-body (as the ranged reader does) is no error


class HubServer:
    """``with HubServer(hub) as url:`` serves ``hub`` on 127.0.0.1 for the block."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(hub))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        host, port = self.httpd.server_address[:2]
        self.hub.url = f"http://{host}:{port}"
        return self.hub.url

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)

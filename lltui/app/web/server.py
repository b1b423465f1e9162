"""The app in a browser: each tab that connects gets its own lltui process, driven over a
websocket in Textual's web-driver protocol, drawn by textual-serve's page script (xterm.js).

The HTTP side is lltui's own (aiohttp), made to face other users and other sites:

* **a token on every request**, always (``lltui serve`` makes one up when none is given):
  given once as ``?token=``, it becomes an HTTP-only, same-site cookie scoped to the app's
  path (``/lltui/``) so other services on the host are not sent it; compared in constant
  time; a wrong or missing one is 403;
* **the Host header checked**: a loopback name, the listen address, this machine's names and
  addresses when listening on all of them, or a name given with ``--allow-host``; a page of
  another site that points its own name at this machine (DNS rebinding) gets 403;
* **the Origin checked** on the websocket against the Host: a page of another site open in
  the same browser cannot drive the app;
* **bounded**: sessions (``max_sessions``), the terminal size a client asks for, each
  message's size; a malformed message closes that tab's socket, nothing more;
* **no shell, nothing left behind**: each tab's app runs from an argv in a session of its
  own; when its tab goes it is asked to quit, then terminated, then killed, and its output
  is read to the end meanwhile so that it never blocks writing to a tab that has gone;
* **nothing from another site, no listing**: the page's URLs are relative (it works through
  an SSH tunnel or a proxy), its font comes with the served files, ``/static/`` lists nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import ipaddress
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import textual_serve
from aiohttp import WSMsgType, web

from lltui.services.processes import stop_group
from lltui.services.web import serve

APP_PATH = "/lltui/"
TOKEN_COOKIE = "lltui_token"
PAGE = Path(__file__).resolve().parent / "app_index.html"
STATICS = Path(textual_serve.__file__).resolve().parent / "static"
# A terminal of more cells than this is no screen: a client asking for 20000x20000 took the
# app to 2.2 GiB. 500 columns by 200 rows is past any monitor at a readable font.
MAX_COLUMNS, MAX_ROWS = 500, 200
MAX_MESSAGE = 64 * 1024  # a key press or a resize; a paste is cut by the browser first
MAX_PACKET = 32 * 1024 * 1024  # one frame from the app; past it the app is not Textual's
QUIT_WAIT_S, TERM_WAIT_S = 3.0, 2.0  # a tab's app: asked to quit, then SIGTERM, then SIGKILL
PRELUDE = b"__GANGLION__\n"  # Textual's web driver writes it before its first packet
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class ServeOptions:
    """How the server faces the network: ``token`` always; ``allowed_hosts`` the names a
    browser may reach it by, besides loopback names and (for a wildcard address) this
    machine's own."""

    host: str
    port: int
    token: str
    allowed_hosts: frozenset[str]
    max_sessions: int


def host_names(host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names (lower case, no port) a browser may use to reach a server on ``host``:
    loopback names (an SSH tunnel arrives as localhost), the address itself, this machine's
    names and addresses, and ``extra``. None of them is a name another site controls, which
    is what a page that points its own name at this machine (DNS rebinding) would send."""
    return frozenset({*LOOPBACK_NAMES, host.lower(), *(h.lower() for h in extra), *machine_names()})


def machine_names() -> set[str]:
    """This machine's host names and interface addresses."""
    import socket

    import psutil

    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    with contextlib.suppress(OSError):
        for addrs in psutil.net_if_addrs().values():
            names |= {a.address.split("%")[0].lower() for a in addrs if a.family in
                      (socket.AF_INET, socket.AF_INET6)}  # fmt: skip
    return names


def browser_urls(host: str, port: int) -> list[str]:
    """Where a browser can open a server on ``host``: for all addresses, this machine's names
    and its addresses that reach it (``0.0.0.0`` is no address to open)."""
    if host not in ("0.0.0.0", "::", ""):
        return [f"http://{_bracket(host)}:{port}{APP_PATH}"]
    shown = []
    for name in sorted(machine_names(), key=lambda n: (_is_address(n), n)):
        if not _is_loopback(name) and _reaches(name, host):
            shown.append(f"http://{_bracket(name)}:{port}{APP_PATH}")
    return shown or [f"http://127.0.0.1:{port}{APP_PATH}"]


def _reaches(name: str, wildcard: str) -> bool:
    """Whether ``name`` opens a server bound to ``wildcard``: ``0.0.0.0`` takes IPv4 alone,
    ``::`` IPv6 alone (asyncio binds it IPv6-only); an IPv6 link-local address needs a zone
    no browser takes; a name may resolve to either."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return True
    if address.version == 6 and address.is_link_local:
        return False
    return wildcard == "" or address.version == (6 if ":" in wildcard else 4)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def request_host(request: web.Request) -> str | None:
    """The Host header's name, lower case, without the port; None when there is none."""
    header = request.headers.get("Host", "")
    try:
        name = urlsplit(f"//{header}").hostname
    except ValueError:
        return None
    return name.lower() if name else None


class LltuiWebServer:
    """Serves ``argv`` (an lltui command line) to browsers as ``options`` say."""

    def __init__(
        self,
        argv: Sequence[str],
        options: ServeOptions,
        *,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self.options = options
        self.names = host_names(options.host, options.allowed_hosts)
        self.sessions: set[TabSession] = set()
        self._on_ready = on_ready
        self._page = PAGE.read_text(encoding="utf-8")

    def serve(self) -> None:
        """Serve until SIGINT, SIGTERM or SIGHUP; OSError when the address cannot be bound.
        The ready callback runs once the socket listens."""
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        runner, _ = await serve(self.make_app(), self.options.host, self.options.port)
        try:
            if self._on_ready is not None:
                self._on_ready()
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await asyncio.gather(*(s.end() for s in list(self.sessions)))
            await runner.cleanup()

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_MESSAGE)
        app.add_routes(
            [
                web.get("/", self._to_app),
                web.get(APP_PATH, self._index),
                web.get(APP_PATH + "ws", self._websocket),
                web.static(APP_PATH + "static", STATICS, show_index=False),
            ]
        )
        return app

    # -- the checks every request passes ----------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The Host, the token (from the query or the cookie), and on the websocket the
        Origin; a token given in the query becomes the cookie."""
        name = request_host(request)
        if name is None or not (name in self.names or _is_loopback(name)):
            return _refuse(403, "this server is not reached by that name (--allow-host NAME)")
        given = request.query.get("token")
        held = given or request.cookies.get(TOKEN_COOKIE) or ""
        if not hmac.compare_digest(held.encode("utf-8", "replace"), self.options.token.encode()):
            return _refuse(403, "a token is needed (open the address lltui serve printed)")
        if request.path.endswith("/ws") and not _same_origin(request):
            return _refuse(403, "a websocket from another site is refused")
        response = await handler(request)
        if given:
            response.set_cookie(
                TOKEN_COOKIE, self.options.token, path=APP_PATH, httponly=True, samesite="Strict"
            )
        return response

    # -- the page ---------------------------------------------------------------------------
    async def _to_app(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(APP_PATH + (f"?{request.query_string}" if request.query_string else ""))

    async def _index(self, request: web.Request) -> web.StreamResponse:
        try:
            font_size = min(max(int(request.query.get("fontsize", "16")), 6), 64)
        except ValueError:
            font_size = 16
        page = self._page.replace("{{ font_size }}", str(font_size))
        page = page.replace("{{ title }}", escape("lltui"))
        return web.Response(
            text=page,
            content_type="text/html",
            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
        )

    # -- a tab ------------------------------------------------------------------------------
    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if len(self.sessions) >= self.options.max_sessions:
            return _refuse(503, f"{len(self.sessions)} tabs are open, the most this server takes")
        ws = web.WebSocketResponse(heartbeat=15, max_msg_size=MAX_MESSAGE)
        await ws.prepare(request)  # a bad upgrade is aiohttp's 400, raised from here
        session = TabSession(self.argv, ws)
        self.sessions.add(session)
        try:
            width = _bounded(request.query.get("width"), MAX_COLUMNS, 80)
            height = _bounded(request.query.get("height"), MAX_ROWS, 24)
            await session.run(width, height)
        finally:
            self.sessions.discard(session)
        return ws


def _refuse(status: int, why: str) -> web.Response:
    return web.Response(status=status, text=f"lltui: {why}\n")


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:  # not a browser: the token stood
        return True
    try:
        return urlsplit(origin).netloc.lower() == request.headers.get("Host", "").lower()
    except ValueError:
        return False


def _bounded(value: Any, most: int, default: int) -> int:
    """A terminal dimension a client gave: a whole number from 1 to ``most``."""
    if isinstance(value, bool):
        return default
    try:
        n = int(value)
    except (TypeError, ValueError):
        return default
    return min(max(n, 1), most)


class TabSession:
    """One tab's app: started from the argv, fed the tab's keys and sizes, its frames sent
    back; ended when either side goes."""

    def __init__(self, argv: Sequence[str], ws: web.WebSocketResponse) -> None:
        self.argv = argv
        self.ws = ws
        self.process: asyncio.subprocess.Process | None = None

    async def run(self, width: int, height: int) -> None:
        env = dict(
            os.environ,
            TEXTUAL_DRIVER="textual.drivers.web_driver:WebDriver",
            TEXTUAL_FPS="60",
            TEXTUAL_COLOR_SYSTEM="truecolor",
            TERM_PROGRAM="textual",
            COLUMNS=str(width),
            ROWS=str(height),
        )
        self.process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # the server's Ctrl-C is not the app's; stopped below
        )
        frames = asyncio.create_task(self._frames())
        try:
            await self._keys()
        finally:
            await self.end()
            await frames

    async def _keys(self) -> None:
        """The tab's messages to the app, until the tab goes or sends one that does not read."""
        async for message in self.ws:
            if message.type != WSMsgType.TEXT:
                break
            try:
                kind, data = _envelope(message.data)
            except ValueError:
                break  # not the page's script: this tab is closed, nothing else
            if kind == "stdin":
                await self._send(b"D", data.encode("utf-8", "replace"))
            elif kind == "resize":
                width = _bounded(data.get("width"), MAX_COLUMNS, 80)
                height = _bounded(data.get("height"), MAX_ROWS, 24)
                await self._meta({"type": "resize", "width": width, "height": height})
            elif kind == "ping":
                await self.ws.send_json(["pong", data])
            elif kind in ("blur", "focus"):
                await self._meta({"type": kind})

    async def _frames(self) -> None:
        """The app's output to the tab; once the tab has gone, read and dropped to the end
        (an app blocked writing to a gone tab would not even stop on SIGTERM)."""
        assert self.process is not None and self.process.stdout is not None
        out = self.process.stdout
        try:
            for _ in range(10):  # lines before the first packet, as Textual writes them
                if await out.readline() in (PRELUDE, b""):
                    break
            while True:
                head = await out.readexactly(5)
                size = int.from_bytes(head[1:], "big")
                if size > MAX_PACKET:
                    break
                payload = await out.readexactly(size)
                await self._to_tab(head[:1], payload)
        except (asyncio.IncompleteReadError, ValueError, ConnectionError):
            pass
        with contextlib.suppress(Exception):
            while await out.read(65536):
                pass
        if not self.ws.closed:  # the app has ended: so has its tab
            await self.ws.close()

    async def _to_tab(self, kind: bytes, payload: bytes) -> None:
        if self.ws.closed:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            if kind == b"D":
                await self.ws.send_bytes(payload)
            elif kind == b"M":
                meta = json.loads(payload)
                if isinstance(meta, dict) and meta.get("type") == "exit":
                    await self.ws.close()
                # open_url and file delivery are not passed on: the app opens no page in
                # the browser and delivers no file (no download route)

    async def _send(self, kind: bytes, payload: bytes) -> None:
        process = self.process
        if process is None or process.stdin is None or process.returncode is not None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            process.stdin.write(kind + len(payload).to_bytes(4, "big") + payload)
            await process.stdin.drain()

    async def _meta(self, meta: dict[str, Any]) -> None:
        await self._send(b"M", json.dumps(meta).encode())

    async def end(self) -> None:
        """The app asked to quit, then its session terminated, then killed."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        await self._meta({"type": "quit"})
        loop = asyncio.get_running_loop()

        async def exited(seconds: float) -> bool:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), seconds)
            return process.returncode is not None

        def ended(seconds: float) -> bool:  # on the worker thread: the wait runs on the loop
            try:
                waited = asyncio.run_coroutine_threadsafe(exited(seconds), loop)
                return waited.result(seconds + 1.0)
            except (RuntimeError, TimeoutError, concurrent.futures.CancelledError):
                return process.returncode is not None  # the loop is closing: signal on

        steps = ((None, QUIT_WAIT_S), (signal.SIGTERM, TERM_WAIT_S), (signal.SIGKILL, 10.0))
        await asyncio.to_thread(stop_group, process.pid, ended, steps)


def _envelope(text: str) -> tuple[str, Any]:
    """A message of the page's script: ``[kind, data]``; ValueError for anything else."""
    value = json.loads(text)
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise ValueError("not an envelope")
    kind, data = value[0], value[1] if len(value) > 1 else None
    if kind == "stdin" and not isinstance(data, str):
        raise ValueError("stdin without text")
    if kind == "resize" and not isinstance(data, dict):
        raise ValueError("resize without a size")
    return kind, data


def app_argv(options: Sequence[str]) -> list[str]:
    """The lltui command line each browser's app runs: this Python, lltui, ``options``; it
    stops with the server, even one killed (SIGTERM from the kernel, PR_SET_PDEATHSIG)."""
    from lltui.services.processes import dies_with_us

    return dies_with_us([sys.executable, "-m", "lltui", *options])

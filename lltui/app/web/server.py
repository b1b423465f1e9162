"""The app in a browser: textual-serve's server, made fit to face a network.

Each browser tab that connects gets its own lltui process (the same app, driven over a
websocket). Over textual-serve this adds:

* **a token** for every request when one is set (``lltui serve`` sets one for any address
  but loopback): given once as ``?token=`` it becomes a same-site, HTTP-only cookie;
  compared in constant time; a wrong or missing one is 403;
* **the origin checked** on the websocket: a page of another site open in the same browser
  cannot drive the app (a websocket is not bound by the same-origin rule);
* **no shell**: the app runs from an argv, not a command line a shell parses;
* **nothing from another site**: the page's font comes with the served files.
"""

from __future__ import annotations

import asyncio
import hmac
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import textual_serve.server as ts_server
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server

TOKEN_COOKIE = "lltui_token"
TEMPLATES = Path(__file__).resolve().parent
STATICS = Path(ts_server.__file__).resolve().parent / "static"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ExecAppService(AppService):
    """textual-serve's app process, started from an argv (no shell)."""

    argv: tuple[str, ...] = ()

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Any:
        environment = self._build_environment(width=width, height=height)
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
        )
        assert process.stdin is not None
        self._stdin = process.stdin
        return process


class LltuiWebServer(Server):
    """Serves ``argv`` (an lltui command line) to browsers on ``host:port``."""

    def __init__(
        self,
        argv: Sequence[str],
        host: str,
        port: int,
        *,
        token: str | None = None,
        title: str = "lltui",
        on_ready: Callable[[str], None] | None = None,
    ) -> None:
        shown = f"[{host}]" if ":" in host else host
        super().__init__(
            " ".join(argv),
            host=host,
            port=port,
            title=title,
            public_url=f"http://{shown}:{port}",
            statics_path=STATICS,
            templates_path=TEMPLATES,
        )
        self.argv = tuple(argv)
        self.token = token
        self._on_ready = on_ready

    def initialize_logging(self) -> None:
        """textual-serve's rich log of every request is left out: lltui prints its own line."""

    async def _make_app(self) -> web.Application:
        # each connection's process is started from our argv (textual-serve makes its
        # AppService by this module-level name)
        ExecAppService.argv = self.argv
        ts_server.AppService = ExecAppService  # type: ignore[misc]
        app = await super()._make_app()
        app.middlewares.append(self._guard)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve's banner is left out: lltui prints its own line once listening."""

    def serve(self, debug: bool = False) -> None:
        """Serve until SIGINT, SIGTERM or SIGHUP; OSError when the address cannot be bound.
        The ready line comes once the socket listens (not before, as textual-serve's does)."""
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        runner = web.AppRunner(await self._make_app(), handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
            if self._on_ready is not None:
                self._on_ready(self.public_url)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                loop.add_signal_handler(sig, stop.set)
            await stop.wait()
        finally:
            await runner.cleanup()  # closes the websockets: each tab's lltui is stopped

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The token (when set) on every request; the origin on the websocket."""
        given = request.query.get("token")
        if self.token is not None:
            held = given or request.cookies.get(TOKEN_COOKIE) or ""
            if not hmac.compare_digest(held.encode(), self.token.encode()):
                return web.Response(status=403, text="lltui: a token is needed (?token=...)\n")
        if request.path == "/ws" and not self._same_origin(request):
            return web.Response(status=403, text="lltui: websocket from another site refused\n")
        response = await handler(request)
        if self.token is not None and given:
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="Strict")
        return response

    @staticmethod
    def _same_origin(request: web.Request) -> bool:
        origin = request.headers.get("Origin")
        if origin is None:  # not a browser: the token (if any) already stood
            return True
        try:
            return urlsplit(origin).netloc.lower() == request.host.lower()
        except ValueError:
            return False


def app_argv(options: Sequence[str]) -> list[str]:
    """The lltui command line each browser's app runs: this Python, lltui, ``options``; it
    stops with the server, even one killed (SIGTERM from the kernel, PR_SET_PDEATHSIG)."""
    from lltui.sources.llama.supervisor import dies_with_us

    return dies_with_us([sys.executable, "-m", "lltui", *options])

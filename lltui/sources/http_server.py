"""An aiohttp app served to other programs (the on-demand proxy, ``lltui serve``), bounded.

aiohttp takes every connection offered and keeps one that sends nothing open for an hour
(its keep-alive timeout, 3630 s, runs from the connect): a client that opened a thousand
connections and sent nothing took every file descriptor of lltui's process (ulimit -n 1024),
asyncio printed a traceback for each accept that failed, and lltui could open no file or
socket. Here at most ``MAX_CONNECTIONS`` are held (a quarter of the file descriptors the
process may have where that is fewer); past it the oldest connection still sending its
request (or idle) is let go for the new one. A request, its body included, is to be
sent within ``REQUEST_TIMEOUT_S`` of the connect (a later one on a kept-alive connection, of
its head; the wait for it is aiohttp's keep-alive, as long): one that is not is let go (its
head) or answered 408 (its body). Where every connection held is being answered, a new one
is closed at once: no running answer is cut for it. A body that does not read, or a client
gone while sending it, is answered 400 (aiohttp printed a traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web import RequestHandler

MAX_CONNECTIONS = 256  # held at once: each is a file descriptor (a proxied one, two)
LISTEN_BACKLOG = 128  # aiohttp's
REQUEST_TIMEOUT_S = 60.0  # to send a request, a chat's images included; and a kept-alive wait


Admit = Callable[[web.Request], web.StreamResponse | None]


async def serve(
    app: web.Application,
    host: str | None,
    port: int,
    admit: Admit | None = None,
    **runner: Any,
) -> tuple[web.AppRunner, int]:
    """``app`` listening on ``host:port`` (OSError when it cannot be bound): its runner (to
    ``cleanup()``) and the port it listens on. ``admit``: the answer to a request refused on
    its head alone (a missing API key), before its body is read; None lets it in.
    ``runner``: more of web.AppRunner's options."""
    fds = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if fds == resource.RLIM_INFINITY:
        fds = 1 << 20
    # (asyncio accepts up to a backlog of connections at once, before any is let go)
    backlog = max(min(LISTEN_BACKLOG, fds // 8), 1)
    held = _Held(max(min(MAX_CONNECTIONS, fds // 4), 1), REQUEST_TIMEOUT_S, backlog, admit)
    app.middlewares.insert(0, held.middleware)
    run = web.AppRunner(
        app,
        handle_signals=False,
        access_log=None,
        logger=quiet_server_log(),
        keepalive_timeout=held.request_s,  # (aiohttp's runs from the connect too)
        **runner,
    )
    await run.setup()
    site = _Site(run, host, port, held)
    try:
        await site.start()
    except BaseException:
        await run.cleanup()
        raise
    return run, site.port


def quiet_server_log() -> logging.Logger:
    """The log of an aiohttp server other programs reach (``lltui serve``, the on-demand
    proxy): aiohttp logs each malformed request (no Host, a header past 8 KiB, a request line
    that does not read) with its traceback, which lltui's terminal printed; such a request is
    answered 400 and said nowhere. A fault of lltui's own is logged as before."""
    log = logging.getLogger("lltui.http_server")
    if not log.filters:
        log.addFilter(_not_a_bad_request)
    return log


def _not_a_bad_request(record: logging.LogRecord) -> bool:
    return not (record.exc_info and isinstance(record.exc_info[1], HttpProcessingError))


class _Held:
    """The connections held, oldest first, each with since when it has been sending its
    request or waiting idle for the next (None while it is answered)."""

    def __init__(self, most: int, request_s: float, backlog: int, admit: Admit | None) -> None:
        self.most, self.request_s, self.backlog, self.admit = most, request_s, backlog, admit
        self.open: dict[RequestHandler, float | None] = {}
        self.answered: set[RequestHandler] = set()  # kept alive after an answer

    def made(self, connection: RequestHandler) -> bool:
        """Whether ``connection`` is held: past the cap the oldest still sending its request
        (or idle) is let go for it; where every one is being answered none is cut (a
        running answer, a generation, for a client that has sent nothing) and False."""
        if len(self.open) >= self.most:
            oldest = next((c for c, since in self.open.items() if since is not None), None)
            if oldest is None:
                return False
            del self.open[oldest]
            self.answered.discard(oldest)
            oldest.force_close()
        self.open[connection] = asyncio.get_running_loop().time()
        return True

    def lost(self, connection: RequestHandler) -> None:
        self.open.pop(connection, None)
        self.answered.discard(connection)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """The body read by the request's deadline; the connection not let go while the
        request is answered."""
        connection, loop = request.protocol, asyncio.get_running_loop()
        refused = self.admit(request) if self.admit is not None else None
        if refused is not None:  # (its body unread: the connection goes with the answer)
            refused.force_close()
            return refused
        # the first request's deadline runs from the connect (its head included); a later
        # one's from its head (its idle wait is aiohttp's keep-alive): it had only what was
        # left of the idle time after the last answer, and was cut mid-body
        first = connection not in self.answered
        since = (self.open.get(connection) if first else None) or loop.time()
        try:
            async with asyncio.timeout_at(since + self.request_s):
                await request.read()
        except TimeoutError:
            return await _closing(
                request, 408, f"the request was not sent within {self.request_s:g} s"
            )
        except (ConnectionError, web.RequestPayloadError):  # (gone: aiohttp printed a traceback)
            return await _closing(request, 400, "the request's body does not read")
        if connection in self.open:
            self.open[connection] = None
        try:
            return await handler(request)
        finally:
            if connection in self.open:  # kept alive: its next request is being sent
                self.open[connection] = loop.time()
                self.answered.add(connection)


async def _closing(request: web.Request, status: int, why: str) -> web.Response:
    """The answer, then the connection closed (aiohttp read what was left of the body for
    another 10 s, and a stop left that read pending: "Task was destroyed")."""
    answer = web.Response(status=status, text=f"lltui: {why}\n")
    answer.force_close()
    with contextlib.suppress(ConnectionError):
        await answer.prepare(request)
        await answer.write_eof()
    request.protocol.force_close()
    return answer


class _Tracked(asyncio.Protocol):
    """An aiohttp connection whose start and end ``held`` is told of."""

    def __init__(self, connection: RequestHandler, held: _Held) -> None:
        self.connection, self.held = connection, held
        self.refused = False  # no room: closed at once, never aiohttp's

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.held.made(self.connection):
            self.refused = True
            transport.close()
            return
        self.connection.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.refused:
            return
        self.held.lost(self.connection)
        self.connection.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            self.connection.data_received(data)

    def eof_received(self) -> bool | None:
        if self.refused:
            return None
        return self.connection.eof_received()  # type: ignore[func-returns-value]

    def pause_writing(self) -> None:
        if not self.refused:
            self.connection.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.connection.resume_writing()


class _Site(web.BaseSite):
    """web.TCPSite whose connections are held by ``held``."""

    def __init__(self, runner: web.AppRunner, host: str | None, port: int, held: _Held) -> None:
        super().__init__(runner)
        self.host, self.port, self.held = host, port, held

    @property
    def name(self) -> str:
        host = self.host or "0.0.0.0"
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Tracked(server(), self.held), self.host, self.port, backlog=self.held.backlog
        )
        self.port = self._server.sockets[0].getsockname()[1]

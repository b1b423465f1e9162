"""Poll a running llama-server over HTTP: /health, /slots, /metrics, /props.

Every call is bounded, and never raises for what the server does. A response is read as a
stream, up to a size per endpoint and within one deadline for the whole request (a per-read
timeout alone lets a server that drips a byte a second hold a poll for minutes), and JSON
nested past the decoder's limit is a bad response, not an exception. A server that
breaks a bound is a ``bad_response`` that says which bound it broke. A refused
connection is ``down``, a 503 while the model loads is ``loading``, a 501 for an endpoint the
server was not started with is ``disabled``, a 401 is ``unauthorized``. Each poll returns a
frozen :class:`ServerPoll` with tokens/s from :class:`lltui.core.llama.metrics.ThroughputTracker`.

The API key is sent as ``Authorization: Bearer``; it is kept out of reprs, logs and errors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from lltui.core.llama.metrics import (
    LlamaMetrics,
    MetricsFormatError,
    ServerProps,
    SlotState,
    Throughput,
    ThroughputTracker,
    error_message,
    parse_metrics,
    parse_props,
    parse_slots,
)
from lltui.core.text import error_text
from lltui.sources.net import Deadline, http_client

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 2.0
# The most a healthy llama-server sends: /metrics is a few KiB, /slots grows with the slots
# (each with its sampling settings), /props holds the chat template.
MAX_BODY_BYTES: dict[str, int] = {
    "/health": 64 * 1024,
    "/metrics": 1024 * 1024,
    "/slots": 8 * 1024 * 1024,
    "/props": 4 * 1024 * 1024,
    "/models": 8 * 1024 * 1024,  # a router's list: every model's argv and preset
}
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
PROPS_TTL_S = 60.0  # props change only when the server restarts

# EndpointResult.status values
OK = "ok"
LOADING = "loading"
DISABLED = "disabled"
UNAUTHORIZED = "unauthorized"
DOWN = "down"
TIMEOUT = "timeout"
BAD_RESPONSE = "bad_response"
HTTP_ERROR = "error"

# ServerPoll.state values
STATE_DOWN = "down"
STATE_LOADING = "loading"
STATE_READY = "ready"
STATE_UNAUTHORIZED = "unauthorized"
STATE_ERROR = "error"


@dataclass(frozen=True, slots=True)
class EndpointResult:
    """How one request went. ``message`` is a line a user can read."""

    endpoint: str
    status: str
    http_status: int | None = None
    message: str | None = None
    elapsed_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass(frozen=True, slots=True)
class ServerPoll:
    """One round of polling. ``state``: down, loading, ready, unauthorized or error."""

    url: str
    t: float  # monotonic seconds
    wall: float
    state: str
    health: EndpointResult
    metrics: LlamaMetrics | None = None
    slots: tuple[SlotState, ...] | None = None
    props: ServerProps | None = None
    throughput: Throughput | None = None
    endpoints: tuple[EndpointResult, ...] = ()
    message: str | None = None

    @property
    def ready(self) -> bool:
        return self.state == STATE_READY


class _Secret:
    """Holds a string and never shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<hidden>"

    __str__ = __repr__


class LlamaServerClient:
    """Synchronous poller for one llama-server; use from one thread at a time."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        deadline_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        props_ttl_s: float = PROPS_TTL_S,
        params: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # sent with every GET: a router's ``model=NAME`` picks the model's own server
        self._params = dict(params or {})
        self._key = _Secret(api_key) if api_key else None
        # the whole request, headers to last byte; a slow drip cannot outlast it
        self.deadline_s = deadline_s if deadline_s is not None else 2 * timeout_s
        self._clock = clock
        self._wall = wall
        self.props_ttl_s = props_ttl_s
        # the deadline at the socket too (lltui.sources.net): headers that come a byte at
        # a time end there; restarted for each request
        self._deadline = Deadline(self.deadline_s, clock=clock)
        common: dict[str, Any] = {
            "base_url": self.base_url,
            "timeout": httpx.Timeout(timeout_s, connect=min(timeout_s, 1.0)),
            "follow_redirects": False,
            # no compression: the size limits count what is held in memory
            "headers": {"Accept-Encoding": "identity"},
        }
        if transport is None:
            # trust_env off: a proxy from the environment must not see loopback traffic
            self._client = http_client(self._deadline, **common)
        else:  # a test's transport: no sockets to bound, the body's check does it
            self._client = httpx.Client(transport=transport, trust_env=False, **common)
        self._tracker = ThroughputTracker()
        self._props: ServerProps | None = None
        self._props_t: float | None = None
        self._disabled: set[str] = set()
        self._was_ready = False

    def __repr__(self) -> str:
        key = "set" if self._key else "none"
        return f"LlamaServerClient({self.base_url!r}, api_key={key})"

    def __enter__(self) -> LlamaServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    # -- one request -----------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key.reveal()}"} if self._key else {}

    def _get(self, path: str) -> tuple[EndpointResult, _Body | None]:
        started = self._clock()
        self._deadline.restart()
        try:
            with self._client.stream(
                "GET", path, headers=self._headers(), params=self._params or None
            ) as resp:
                code = resp.status_code
                limit = MAX_BODY_BYTES.get(path, DEFAULT_MAX_BODY_BYTES)
                if code != 200:
                    limit = min(limit, 64 * 1024)  # an error page needs no more
                content, broken = self._read_bounded(resp, limit, started)
                reason = resp.reason_phrase
        except httpx.ConnectError:
            return EndpointResult(path, DOWN, message="connection refused"), None
        except httpx.TimeoutException:
            if self._deadline.expired:  # a bound broken: the answer took over the deadline
                message = f"the answer took over {self.deadline_s:g} s"
                return EndpointResult(path, BAD_RESPONSE, message=message), None
            return EndpointResult(path, TIMEOUT, message="no answer in time"), None
        except httpx.HTTPError as exc:
            # Error texts from httpx name the URL, never the headers.
            return EndpointResult(path, HTTP_ERROR, message=error_text(exc)), None
        elapsed = self._clock() - started
        if broken is not None:
            return EndpointResult(path, BAD_RESPONSE, code, broken, elapsed), None
        body = _Body(content)
        if code == 200:
            return EndpointResult(path, OK, code, elapsed_s=elapsed), body
        message = _body_message(body) or reason or f"HTTP {code}"
        status = {503: LOADING, 501: DISABLED, 401: UNAUTHORIZED, 403: UNAUTHORIZED}.get(
            code, HTTP_ERROR
        )
        if code == 503 and "loading" not in message.lower():
            status = HTTP_ERROR  # a 503 for another reason (e.g. no slot available)
        return EndpointResult(path, status, code, message, elapsed), body

    def _read_bounded(
        self, resp: httpx.Response, limit: int, started: float
    ) -> tuple[bytes, str | None]:
        """The body, or why it was cut off: larger than ``limit`` or slower than the deadline."""
        declared = resp.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return b"", f"body of {int(declared)} bytes is over the {limit}-byte limit"
        chunks: list[bytes] = []
        size = 0
        # each read as it arrives: a chunk size would wait for a full chunk before any check
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > limit:
                return b"", f"body is over the {limit}-byte limit"
            chunks.append(chunk)
            if self._clock() - started > self.deadline_s:
                return b"", f"body took over {self.deadline_s:g} s"
        return b"".join(chunks), None

    def _get_json(self, path: str) -> tuple[EndpointResult, Any]:
        result, body = self._get(path)
        if body is None or not result.ok:
            return result, None
        data, why = body.json()
        if why is not None:
            return _bad(result, why), None
        return result, data

    # -- endpoints -------------------------------------------------------------------------

    def health(self) -> EndpointResult:
        result, data = self._get_json("/health")
        if result.ok and isinstance(data, dict):
            status = data.get("status")
            if isinstance(status, str) and status != "ok":
                # Older builds answered 200 {"status": "loading model"} while loading.
                state = LOADING if "loading" in status else HTTP_ERROR
                return EndpointResult(result.endpoint, state, result.http_status, status)
        return result

    def metrics(self) -> tuple[EndpointResult, LlamaMetrics | None]:
        result, body = self._get("/metrics")
        if body is None or not result.ok:
            return result, None
        try:
            return result, parse_metrics(body.text())
        except MetricsFormatError as exc:
            return _bad(result, str(exc)), None

    def _parsed(self, path: str, parse: Callable[[Any], T]) -> tuple[EndpointResult, T | None]:
        """``path``'s JSON as ``parse`` reads it (its ValueError: a bad response)."""
        result, data = self._get_json(path)
        if data is None:
            return result, None
        try:
            return result, parse(data)
        except ValueError as exc:
            return _bad(result, str(exc)), None

    def slots(self) -> tuple[EndpointResult, tuple[SlotState, ...] | None]:
        return self._parsed("/slots", parse_slots)

    def props(self) -> tuple[EndpointResult, ServerProps | None]:
        return self._parsed("/props", parse_props)

    # -- a poll ----------------------------------------------------------------------------

    def poll(
        self, *, with_metrics: bool = True, with_slots: bool = True, with_props: bool = True
    ) -> ServerPoll:
        """Health first; the other endpoints only once the server is ready."""
        t, wall = self._clock(), self._wall()
        health = self.health()
        if not health.ok:
            if self._was_ready:
                self._forget_server()
            state = {
                DOWN: STATE_DOWN,
                TIMEOUT: STATE_DOWN,
                LOADING: STATE_LOADING,
                UNAUTHORIZED: STATE_UNAUTHORIZED,
            }.get(health.status, STATE_ERROR)
            return ServerPoll(
                url=self.base_url,
                t=t,
                wall=wall,
                state=state,
                health=health,
                endpoints=(health,),
                message=_describe(health, keyed=self._key is not None),
            )
        self._was_ready = True
        endpoints = [health]
        metrics: LlamaMetrics | None = None
        slots: tuple[SlotState, ...] | None = None
        if with_metrics and "/metrics" not in self._disabled:
            res_m, metrics = self.metrics()
            endpoints.append(self._note(res_m))
        if with_slots and "/slots" not in self._disabled:
            res_s, slots = self.slots()
            endpoints.append(self._note(res_s))
        if with_props and (
            self._props is None or self._props_t is None or t - self._props_t >= self.props_ttl_s
        ):
            res_p, props = self.props()
            endpoints.append(self._note(res_p))
            if props is not None:
                self._props, self._props_t = props, t
        throughput = self._tracker.update(t, metrics, slots)
        refused = [e for e in endpoints if e.status == UNAUTHORIZED]
        state = STATE_UNAUTHORIZED if refused else STATE_READY
        return ServerPoll(
            url=self.base_url,
            t=t,
            wall=wall,
            state=state,
            health=health,
            metrics=metrics,
            slots=slots,
            props=self._props,
            throughput=throughput,
            endpoints=tuple(endpoints),
            message=_describe(refused[0], keyed=self._key is not None) if refused else None,
        )

    def _note(self, result: EndpointResult) -> EndpointResult:
        if result.status == DISABLED:
            # Endpoints are chosen by flags at start; ask again only after a restart.
            self._disabled.add(result.endpoint)
        return result

    def _forget_server(self) -> None:
        """The server went away: its counters, props and flags may differ when it returns."""
        self._was_ready = False
        self._tracker.reset()
        self._props = self._props_t = None
        self._disabled.clear()


def _bad(result: EndpointResult, why: str) -> EndpointResult:
    return EndpointResult(result.endpoint, BAD_RESPONSE, result.http_status, why, result.elapsed_s)


class _Body:
    """A response body already read within its bounds."""

    __slots__ = ("content",)

    def __init__(self, content: bytes) -> None:
        self.content = content

    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> tuple[Any, str | None]:
        """The decoded JSON, or why it could not be: not JSON, or nested too deep (the C
        decoder stops at the interpreter's recursion limit rather than overflow)."""
        try:
            return json.loads(self.content), None
        except RecursionError:
            return None, "JSON nested too deeply"
        except (ValueError, UnicodeDecodeError):
            return None, "body is not JSON"


def _body_message(body: _Body) -> str | None:
    data, why = body.json()
    if why is None:
        return error_message(data)
    text = body.text().strip()
    return text[:200] if text else None


def _describe(result: EndpointResult, *, keyed: bool) -> str:
    """An endpoint's failure in words; ``keyed``: whether the request carried an API key (a
    401 to a request without one rejected no key: it asks for one)."""
    no_key = result.status == UNAUTHORIZED and not keyed
    what = {
        DOWN: "not reachable (connection refused)",
        TIMEOUT: "did not answer in time",
        LOADING: "loading the model",
        UNAUTHORIZED: "needs an API key, and none was sent" if no_key else "rejected the API key",
        DISABLED: "endpoint not enabled",
        BAD_RESPONSE: "sent a response lltui cannot read",
    }.get(result.status, "answered with an error")
    detail = f" ({result.http_status}: {result.message})" if result.http_status else ""
    fix = ": give --llama-api-key-file FILE or set LLAMA_API_KEY" if no_key else ""
    return f"{result.endpoint}: {what}{detail}{fix}"

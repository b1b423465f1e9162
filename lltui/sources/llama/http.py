"""Poll a running llama-server over HTTP: /health, /slots, /metrics, /props.

Every call is bounded by a timeout and never raises for what the server does: a refused
connection is ``down``, a 503 while the model loads is ``loading``, a 501 for an endpoint the
server was not started with is ``disabled``, a 401 is ``unauthorized``. Each poll returns a
frozen :class:`ServerPoll` with tokens/s from :class:`lltui.core.llama.metrics.ThroughputTracker`.

The API key is sent as ``Authorization: Bearer``; it is kept out of reprs, logs and errors.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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

DEFAULT_TIMEOUT_S = 2.0
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
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        props_ttl_s: float = PROPS_TTL_S,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._key = _Secret(api_key) if api_key else None
        self._clock = clock
        self._wall = wall
        self.props_ttl_s = props_ttl_s
        self._client = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 1.0)),
            transport=transport,
            trust_env=False,  # a proxy from the environment must not see loopback traffic
            follow_redirects=False,
        )
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

    def _get(self, path: str) -> tuple[EndpointResult, httpx.Response | None]:
        started = self._clock()
        try:
            resp = self._client.get(path, headers=self._headers())
        except httpx.ConnectError:
            return EndpointResult(path, DOWN, message="connection refused"), None
        except httpx.TimeoutException:
            return EndpointResult(path, TIMEOUT, message="no answer in time"), None
        except httpx.HTTPError as exc:
            # Error texts from httpx name the URL, never the headers.
            return EndpointResult(path, HTTP_ERROR, message=type(exc).__name__), None
        elapsed = self._clock() - started
        code = resp.status_code
        if code == 200:
            return EndpointResult(path, OK, code, elapsed_s=elapsed), resp
        message = _body_message(resp) or resp.reason_phrase or f"HTTP {code}"
        status = {503: LOADING, 501: DISABLED, 401: UNAUTHORIZED, 403: UNAUTHORIZED}.get(
            code, HTTP_ERROR
        )
        if code == 503 and "loading" not in message.lower():
            status = HTTP_ERROR  # a 503 for another reason (e.g. no slot available)
        return EndpointResult(path, status, code, message, elapsed), resp

    def _get_json(self, path: str) -> tuple[EndpointResult, Any]:
        result, resp = self._get(path)
        if resp is None or not result.ok:
            return result, None
        try:
            return result, resp.json()
        except (ValueError, UnicodeDecodeError):
            return _bad(result, "body is not JSON"), None

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
        result, resp = self._get("/metrics")
        if resp is None or not result.ok:
            return result, None
        try:
            return result, parse_metrics(resp.text)
        except MetricsFormatError as exc:
            return _bad(result, str(exc)), None

    def slots(self) -> tuple[EndpointResult, tuple[SlotState, ...] | None]:
        result, data = self._get_json("/slots")
        if data is None:
            return result, None
        try:
            return result, parse_slots(data)
        except ValueError as exc:
            return _bad(result, str(exc)), None

    def props(self) -> tuple[EndpointResult, ServerProps | None]:
        result, data = self._get_json("/props")
        if data is None:
            return result, None
        try:
            return result, parse_props(data)
        except ValueError as exc:
            return _bad(result, str(exc)), None

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
                message=_describe(health),
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
            message=_describe(refused[0]) if refused else None,
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


def _body_message(resp: httpx.Response) -> str | None:
    try:
        return error_message(json.loads(resp.content[:65536]))
    except (ValueError, UnicodeDecodeError):
        text = resp.text.strip()
        return text[:200] if text else None


def _describe(result: EndpointResult) -> str:
    what = {
        DOWN: "not reachable (connection refused)",
        TIMEOUT: "did not answer in time",
        LOADING: "loading the model",
        UNAUTHORIZED: "rejected the API key",
        DISABLED: "endpoint not enabled",
        BAD_RESPONSE: "sent a response lltui cannot read",
    }.get(result.status, "answered with an error")
    detail = f" ({result.http_status}: {result.message})" if result.http_status else ""
    return f"{result.endpoint}: {what}{detail}"

"""GPU metrics others already collect: ``scrape:URL`` reads one exporter's ``/metrics``
(lltui's own, dcgm-exporter, all-smi), ``prom:URL`` a Prometheus server's query API.

Both return one :class:`RigSample` per host through :meth:`poll_hosts`; as a single source
of the monitor, :meth:`poll` gives the host named by ``#host=NAME`` after the URL, else the
first in name order. Exposition text is parsed by ``prometheus_client``'s parser; the
mapping of names onto lltui's fields is :mod:`lltui.core.monitor.prom_import`.

Every request is bounded: a connect and read timeout, one deadline for the whole request
(headers and body, at the socket: :mod:`lltui.sources.net`) and a size limit; a server that
breaks one is a :class:`SourceUnavailable` with one line.
Credentials in the URL (``http://user:pass@host``) are sent as basic auth and never shown;
a bearer token comes from ``$LLTUI_PROM_TOKEN``.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit, urlunsplit

from lltui.core.monitor.models import RigInfo, RigSample, SourceUnavailable
from lltui.core.monitor.prom import Series
from lltui.core.monitor.prom_import import (
    QUERY,
    UP_QUERY,
    CounterRates,
    rigs_from_series,
    series_from_labels,
)
from lltui.core.text import error_text
from lltui.sources.gpu.base import SequenceCounter

if TYPE_CHECKING:
    import httpx

DEFAULT_TIMEOUT_S = 3.0
MAX_BODY_BYTES = 32 * 1024 * 1024  # a Prometheus answer for a large fleet (JSON)
MAX_PAGE_BYTES = 8 * 1024 * 1024  # one exporter's page: a few hundred KiB on 8 GPUs
TOKEN_ENV = "LLTUI_PROM_TOKEN"
SHARE_MAX_AGE_S = 1.0  # a page another source of the same URL fetched is taken this long


def check_url(kind: str, arg: str) -> None:
    """Raises ValueError with one line unless ``arg`` is an http(s) URL with a host."""
    example = f"--source {kind}:http://127.0.0.1:{9090 if kind == 'prom' else 9400}"
    if not arg:
        raise ValueError(f"{kind} needs a URL: {example}")
    try:
        parts = urlsplit(arg)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise ValueError(f"{kind}: not a URL; use {example}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{kind}: expected an http:// or https:// URL; use {example}")


ALL_HOSTS = "*"  # prom:URL#host=* : every host the metrics name, as a fleet


def wants_all_hosts(spec: str) -> bool:
    """Whether a ``--source`` spec is ``prom:URL#host=*`` or ``scrape:URL#host=*``."""
    kind, _, arg = spec.partition(":")
    if kind.lower() not in ("prom", "scrape") or "#" not in arg:
        return False
    return parse_qs(arg.split("#", 1)[1]).get("host", [None])[0] == ALL_HOSTS


def expand_all_hosts(spec: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[str]:
    """``prom:URL#host=*``: one ``prom:URL#host=NAME`` per host the server holds GPU metrics
    for, in name order. A server that cannot be read (or names no host) leaves the spec as it
    is, so a fleet shows it as one host that is down, with the reason."""
    kind, _, arg = spec.partition(":")
    base = arg.split("#", 1)[0]
    cls = PromSource if kind.lower() == "prom" else ScrapeSource
    try:
        source = cls(base, timeout_s=timeout_s)
    except ValueError:
        return [spec]
    try:
        hosts = sorted(source.poll_hosts())
    except SourceUnavailable:
        return [spec]
    finally:
        source.close()
    return [f"{kind}:{base}#host={quote(h, safe='')}" for h in hosts] or [spec]


def host_label(url: str) -> str:
    """How a fleet names a ``prom:``/``scrape:`` source: the host ``#host=NAME`` picks, else
    the URL's host and port; never its user or password."""
    try:
        parts = urlsplit(url)
        chosen = parse_qs(parts.fragment).get("host", [None])[0] if parts.fragment else None
        if chosen:
            return chosen
        host = parts.hostname or url
        port = parts.port
    except ValueError:
        return "<unparsable URL>"
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{port}" if port else host


def public_spec(spec: str) -> str:
    """A ``--source`` spec fit to show: a ``prom:``/``scrape:`` URL loses its user and
    password (its ``#host=`` stays); any other spec is returned as it is."""
    kind, _, arg = spec.partition(":")
    if kind.lower() not in ("prom", "scrape") or not arg:
        return spec
    try:
        fragment = urlsplit(arg).fragment
        shown = _public(arg)
    except ValueError:
        return f"{kind}:<unparsable URL>"
    return f"{kind}:{shown}" + (f"#{fragment}" if fragment else "")


def _public(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class _SharedPoll:
    """The last answer of one URL, shared by every source that reads it: a fleet of
    ``#host=*`` is one source per host of one server, and each host's poll fetched and parsed
    every host's series (a tick cost hosts x hosts). The first source to poll fetches (the
    others wait on the lock for it); each takes an answer once, and only within
    :data:`SHARE_MAX_AGE_S` of its fetch. A failure is shared too: a dead server is asked once
    a round, not once per host."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = 0
        self.fetched_at = 0.0
        self.hosts: dict[str, RigSample] = {}
        self.error: SourceUnavailable | None = None
        self.seq = SequenceCounter()
        self.seq_now = 0  # the sample number of the newest answer (every host's sample has it)
        self.rates = CounterRates()  # counters of one server: one history of them


_SHARED: weakref.WeakValueDictionary[tuple[object, ...], _SharedPoll]
_SHARED = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def _shared_poll(key: tuple[object, ...]) -> _SharedPoll:
    with _SHARED_LOCK:
        shared = _SHARED.get(key)
        if shared is None:
            shared = _SHARED[key] = _SharedPoll()
        return shared


class _PromBase:
    """What scrape: and prom: share: the URL, its host choice, the HTTP client."""

    kind = ""
    default_path = ""  # put on a URL with no path
    max_body = MAX_BODY_BYTES

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        deadline_s: float | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        import httpx  # here: a spec's name and label need no HTTP library

        check_url(self.kind, url)
        parts = urlsplit(url)
        if self.default_path and parts.path in ("", "/"):
            parts = parts._replace(path=self.default_path)
        self.selected_host: str | None = (
            parse_qs(parts.fragment).get("host", [None])[0] if parts.fragment else None
        )
        auth = None
        if parts.username is not None:
            auth = httpx.BasicAuth(parts.username, parts.password or "")
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port:
            netloc = f"{netloc}:{parts.port}"
        self._url = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
        self.public_url = _public(urlunsplit(parts))
        self.name = f"{self.kind}:{self.public_url}"
        self.default_host = parts.hostname or "unknown"
        self.deadline_s = deadline_s if deadline_s is not None else 2 * timeout_s
        headers = {"Accept-Encoding": "identity"}
        token = os.environ.get(TOKEN_ENV)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        from lltui.sources.net import Deadline, http_client

        self._deadline = Deadline(self.deadline_s, clock=clock)  # restarted for each request
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 2.0))
        common: dict[str, Any] = {"follow_redirects": False, "headers": headers, "auth": auth}
        if transport is None:
            self._client = http_client(self._deadline, timeout=timeout, **common)
        else:  # a test's transport: no sockets to bound, the body's check below does it
            self._client = httpx.Client(
                timeout=timeout, transport=transport, trust_env=False, **common
            )
        self._clock = clock
        self._wall = wall
        if transport is None:  # (a test's transport is its own server)
            key = (self.kind, self._url, parts.username, parts.password, token)
            self._shared = _shared_poll(key)
        else:
            self._shared = _SharedPoll()
        self._seen = 0  # the generation of the last answer this source took
        self._seq_taken = 0  # and its sample number
        self._info: RigInfo | None = None
        self._hints: tuple[str, ...] = ()

    # -- HTTP ----------------------------------------------------------------------------

    def _get(self, url: str, params: dict[str, str] | None = None, *, hint: str = "") -> bytes:
        """The body of a 200 answer, read within the deadline and the size limit. ``hint``
        follows the message of a 404."""
        import httpx

        start = self._clock()
        self._deadline.restart()
        where = self.public_url
        try:
            with self._client.stream("GET", url, params=params) as resp:
                if resp.status_code != 200:
                    extra = f": {hint}" if hint and resp.status_code == 404 else ""
                    raise SourceUnavailable(f"{where} answered HTTP {resp.status_code}{extra}")
                chunks: list[bytes] = []
                size = 0
                for chunk in resp.iter_raw():
                    size += len(chunk)
                    if size > self.max_body:
                        raise SourceUnavailable(
                            f"{where} sent more than {self.max_body // (1024 * 1024)} MiB"
                        )
                    if self._clock() - start > self.deadline_s:
                        raise SourceUnavailable(
                            f"{where} did not finish answering in {self.deadline_s:g} s"
                        )
                    chunks.append(chunk)
                return b"".join(chunks)
        except httpx.TimeoutException:
            if self._deadline.expired:
                raise SourceUnavailable(
                    f"{where} did not finish answering in {self.deadline_s:g} s"
                ) from None
            raise SourceUnavailable(f"{where} did not answer in time") from None
        except httpx.ConnectError as exc:
            raise SourceUnavailable(f"{where} is not reachable ({_connect_words(exc)})") from None
        except httpx.HTTPError as exc:
            raise SourceUnavailable(f"{where}: {error_text(exc)}") from None

    def _series(self) -> list[Series]:
        raise NotImplementedError

    def _down(self) -> dict[str, str]:
        """Targets (``instance``) whose last scrape failed, and why, in words."""
        return {}

    # -- the source ------------------------------------------------------------------------

    def poll_hosts(self, *, take: bool = True) -> dict[str, RigSample]:
        """One RigSample per host the metrics name, from the URL's newest answer this source
        has not taken yet (see :class:`_SharedPoll`); ``take=False`` (an open) leaves it to
        the poll after. Raises SourceUnavailable."""
        shared = self._shared
        with shared.lock:
            fresh = self._clock() - shared.fetched_at <= SHARE_MAX_AGE_S
            if not (shared.generation > self._seen and fresh):
                shared.seq_now = shared.seq.next()
                try:
                    shared.hosts, shared.error = self._fetch_hosts(shared.seq_now), None
                except SourceUnavailable as exc:
                    shared.hosts, shared.error = {}, exc
                shared.generation += 1
                shared.fetched_at = self._clock()
            if take:
                self._seen, self._seq_taken = shared.generation, shared.seq_now
            if shared.error is not None:  # a new one: other threads raise this one too
                raise SourceUnavailable(str(shared.error))
            return shared.hosts

    def _fetch_hosts(self, seq: int) -> dict[str, RigSample]:
        series = self._series()
        return rigs_from_series(
            series,
            source=self.name,
            default_host=self.default_host,
            seq=seq,
            t=self._clock(),
            wall=self._wall(),
            rates=self._shared.rates,
            down=self._down(),
        )

    def _pick(self, hosts: dict[str, RigSample]) -> RigSample | None:
        if self.selected_host is not None:
            return hosts.get(self.selected_host)
        return next(iter(hosts.values()), None)

    def open(self) -> RigInfo:
        hosts = self.poll_hosts(take=False)
        if not hosts:
            raise SourceUnavailable(
                f"{self.public_url} holds no GPU metrics lltui reads "
                "(lltui_*, DCGM_FI_*, all_smi_*)"
            )
        sample = self._pick(hosts)
        if sample is None:
            raise SourceUnavailable(
                f"host {self.selected_host!r} is not among the hosts at {self.public_url}: "
                + ", ".join(hosts)
            )
        if self.selected_host is None and len(hosts) > 1:
            others = [h for h in hosts if h != sample.info.hostname]
            shown = ", ".join(others[:8])
            if len(others) > 8:
                shown += f" and {len(others) - 8} more"
            base = self.name.split("#", 1)[0]
            self._hints = (
                f"{self.public_url} also holds {shown}: pick a host with {base}#host=NAME, "
                f"or see them all as a fleet with {base}#host={ALL_HOSTS}",
            )
        self._info = self._hinted(sample).info
        return self._info

    def _hinted(self, sample: RigSample) -> RigSample:
        if not self._hints:
            return sample
        return replace(sample, info=replace(sample.info, hints=sample.info.hints + self._hints))

    def poll(self) -> RigSample:
        hosts = self.poll_hosts()
        sample = self._pick(hosts)
        if sample is not None:
            return self._hinted(sample)
        info = self._info or RigInfo(source=self.name, hostname=self.selected_host)
        wanted = self.selected_host or "any host"
        error = f"no GPU metrics for {wanted} at {self.public_url} this time"
        down = sorted(self._down())
        if down:
            # Prometheus marks a failed target's series stale at once: its host vanishes
            error += f" (Prometheus cannot scrape {', '.join(down)})"
        return RigSample(
            seq=self._seq_taken,  # (the answer's: a later answer's samples are newer)
            t=self._clock(),
            wall=self._wall(),
            info=info,
            gpus=(),
            error=error,
        )

    def close(self) -> None:
        self._client.close()


class ScrapeSource(_PromBase):
    """One exporter's ``/metrics`` page (``/metrics`` is added to a URL with no path)."""

    kind = "scrape"
    default_path = "/metrics"
    max_body = MAX_PAGE_BYTES

    def _series(self) -> list[Series]:
        body = self._get(self._url)
        return parse_exposition(body.decode("utf-8", errors="replace"), where=self.public_url)


class PromSource(_PromBase):
    """A Prometheus server's ``/api/v1/query``: one instant query for every GPU series."""

    kind = "prom"

    def _series(self) -> list[Series]:
        base = self._url.rstrip("/")
        hint = "is it a Prometheus server? (an exporter's page is scrape:URL)"
        body = self._get(f"{base}/api/v1/query", params={"query": QUERY}, hint=hint)
        return parse_query_result(body, where=self.public_url)

    def _down(self) -> dict[str, str]:
        base = self._url.rstrip("/")
        body = self._get(f"{base}/api/v1/query", params={"query": UP_QUERY})
        return {
            target: f"Prometheus cannot scrape {target} now: its values are the last it got"
            for s in parse_query_result(body, where=self.public_url)
            if s.value == 0 and (target := s.label("instance")) is not None
        }


def parse_exposition(text: str, *, where: str = "the page") -> list[Series]:
    """Series of Prometheus exposition text; raises SourceUnavailable for text that is not."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [
            series_from_labels(s.name, s.labels, float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, TypeError, IndexError) as exc:
        raise SourceUnavailable(f"{where} is not Prometheus text: {exc}") from None


def parse_query_result(body: bytes, *, where: str = "the server") -> list[Series]:
    """Series of a Prometheus ``/api/v1/query`` answer (an instant vector)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise SourceUnavailable(
            f"{where} did not answer with JSON: is it a Prometheus server?"
        ) from None
    if not isinstance(data, dict) or data.get("status") != "success":
        why = data.get("error") if isinstance(data, dict) else None
        raise SourceUnavailable(f"{where}: query failed{': ' + str(why) if why else ''}")
    result = data.get("data")
    if not isinstance(result, dict) or result.get("resultType") != "vector":
        raise SourceUnavailable(f"{where}: the query answer is not an instant vector")
    out: list[Series] = []
    for item in result.get("result") or ():
        if not isinstance(item, dict):
            continue
        metric, value = item.get("metric"), item.get("value")
        if not isinstance(metric, dict) or not isinstance(value, list) or len(value) != 2:
            continue
        name = metric.get("__name__")
        if not isinstance(name, str):
            continue
        try:
            v = float(value[1])
        except (TypeError, ValueError):
            continue
        labels = {str(k): str(x) for k, x in metric.items() if k != "__name__"}
        out.append(series_from_labels(name, labels, v))
    return out


_ERRNO = re.compile(r"^\[Errno -?\d+\] ")


def _connect_words(exc: httpx.ConnectError) -> str:
    """Why a connection failed, in the resolver's or the kernel's words ("Name or service
    not known", "Connection refused", a TLS error), not always "connection refused"."""
    words = _ERRNO.sub("", error_text(exc))
    return words[:1].lower() + words[1:] if words else "connection failed"

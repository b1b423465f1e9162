"""``lltui exporter``: what the monitor samples, served as Prometheus metrics.

One thread samples the source (and the llama-servers followed) every interval and keeps the
last result; a scrape reads that result and never samples. Families come from
:mod:`lltui.core.monitor.prom_export`; ``prometheus_client`` (imported here, lazily by the
command) writes the exposition text and serves it.
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from lltui.core.cmdline.address import public_url
from lltui.core.memory.kv_fill import KvFill
from lltui.core.monitor.alert_settings import AlertThresholds
from lltui.core.monitor.alerts import AlertTracker, LlamaStatus
from lltui.core.monitor.models import GpuSource, RigInfo, RigSample, SourceUnavailable
from lltui.core.monitor.plan_reality import PlanReality
from lltui.core.monitor.prom import DEFAULT_MAX_PROCESSES, Family, KvGauge, LlamaExport
from lltui.core.monitor.prom_export import (
    alert_families,
    llama_families,
    plan_families,
    rig_families,
)
from lltui.core.periodic import Periodic
from lltui.core.text import error_text
from lltui.services.follow import FoundServers, ServerFollow
from lltui.sources.gpu.kinds import watches_xids

if TYPE_CHECKING:
    from lltui.services.rig import Rig, RigRequest


@dataclass(slots=True)
class LlamaFollow:
    """One llama-server the exporter follows: its URL, and its log where lltui knows it."""

    url: str
    log: Path | None = None
    api_key: str | None = field(default=None, repr=False)


def kv_gauges(fill: KvFill | None) -> tuple[KvGauge, ...]:
    if fill is None:
        return ()
    return tuple(
        KvGauge(d.name, d.used_bytes, d.capacity_bytes, d.seconds_to_full) for d in fill.devices
    )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What the last sampling round saw; scrapes read only this."""

    families: tuple[Family, ...] = ()
    samples_total: int = 0
    errors_total: int = 0
    source_up: bool = False
    last_wall: float | None = None
    last_error: str | None = None
    plans: tuple[PlanReality, ...] = ()  # of the servers found on the GPUs, none followed


class Sampler:
    """Samples ``source`` (opened already) and the llama-servers every ``interval_s``."""

    def __init__(
        self,
        source: GpuSource,
        *,
        host: str,
        interval_s: float = 1.0,
        llama: Sequence[LlamaFollow] = (),
        max_processes: int = DEFAULT_MAX_PROCESSES,
        llama_timeout_s: float = 2.0,
        on_error: Callable[[str], None] | None = None,
        thresholds: AlertThresholds | None = None,
    ) -> None:
        from lltui.sources.llama.http import LlamaServerClient

        self.alerts = AlertTracker(thresholds)
        self.source = source
        self.host = host
        self.interval_s = interval_s
        self.max_processes = max_processes
        self._follow = list(llama)
        self._clients = [
            LlamaServerClient(f.url, api_key=f.api_key, timeout_s=llama_timeout_s)
            for f in self._follow
        ]
        # each followed server's plan, placement (from its log) and KV fill; servers found
        # on the GPUs by their own
        self._servers = [ServerFollow(f.url, log=f.log, background=True) for f in self._follow]
        self._found = FoundServers(background=True)
        self._sample: RigSample | None = None  # the last round's, for the servers' plans
        self._xids: dict[str, int] = {}  # XID errors seen per GPU UUID
        # the last poll of each llama-server; each has its own thread, so that a server that
        # hangs holds neither the GPUs' round nor the other servers
        self._llama = [LlamaExport(server=public_url(f.url), up=False) for f in self._follow]
        self._polled: set[int] = set()
        self._on_error = on_error
        self._lock = threading.Lock()
        self._version = 0  # counts the changes of what a scrape serves
        self._snapshot = Snapshot()
        self._loops: list[Periodic] = []
        self._last_error: str | None = None

    @property
    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot

    @property
    def version(self) -> int:
        """A number that changes whenever what a scrape serves changes (a sampling round, a
        llama-server's poll): scrapes between two changes can share one rendering."""
        with self._lock:
            return self._version

    def families(self) -> tuple[Family, ...]:
        """What a scrape serves: the last GPU round and the last poll of each llama-server."""
        snap = self.snapshot
        with self._lock:
            exports = tuple(self._llama)
        plans = (*snap.plans, *(x.plan for x in exports if x.plan is not None))
        plan = plan_families(plans, host=self.host) if plans or exports else ()
        if not self._follow:
            return snap.families + plan
        return snap.families + llama_families(exports, host=self.host) + plan

    def sample_once(self, *, with_llama: bool = True) -> Snapshot:
        """One round of the source (and, unless ``with_llama`` is false, of each
        llama-server, one after the other); kept for the scrapes."""
        if with_llama:
            for i in range(len(self._follow)):
                self.poll_llama(i)
        prev = self.snapshot
        families: list[Family] = []
        error: str | None = None
        sample: RigSample | None = None
        found: list[PlanReality] = []
        try:
            sample = self.source.poll()
        except SourceUnavailable as exc:
            error = f"source {self.source.name}: {exc}"
        except Exception as exc:  # a source bug must not end the exporter
            error = f"source {self.source.name}: {error_text(exc)}"
        if sample is not None:
            if sample.error:
                error = sample.error
            for g in sample.gpus:  # (a source that cannot see XIDs has no count: no 0)
                if watches_xids(sample.info.source, g.info):
                    seen = len(g.xid_events) + g.xid_dropped
                    self._xids[g.info.uuid] = self._xids.get(g.info.uuid, 0) + seen
            families.extend(
                rig_families(
                    sample,
                    host=self.host,
                    max_processes=self.max_processes,
                    xid_counts=self._xids,
                )
            )
            self._sample = sample
            found = self._found_plans(sample)
            with self._lock:
                servers = [
                    LlamaStatus(x.server, x.state)
                    for i, x in enumerate(self._llama)
                    if i in self._polled  # not yet asked: no word on it
                ]
                plans = [x.plan for x in self._llama if x.plan is not None] + found
            self.alerts.update(sample.wall, rigs={None: sample}, llama=servers or None, plans=plans)
            families.extend(alert_families(self.alerts.active, host=self.host))
        if error and error != self._last_error and self._on_error is not None:
            self._on_error(error)
        self._last_error = error
        snap = Snapshot(
            families=tuple(families),
            samples_total=prev.samples_total + 1,
            errors_total=prev.errors_total + (1 if sample is None else 0),
            source_up=sample is not None,
            last_wall=sample.wall if sample is not None else prev.last_wall,
            last_error=error,
            plans=tuple(found),
        )
        with self._lock:
            self._snapshot = snap
            self._version += 1
        return snap

    def poll_llama(self, i: int) -> LlamaExport:
        """Poll the ``i``th llama-server once; kept for the scrapes."""
        follow, client = self._follow[i], self._clients[i]
        try:
            poll = client.poll()
        except Exception:  # the client bounds every call; this is a last guard
            export = LlamaExport(server=public_url(follow.url), up=False)
        else:
            state = self._servers[i].fold(self._sample, poll.slots, poll.t)
            fill = state.kv
            export = LlamaExport(
                server=public_url(follow.url),
                up=poll.ready,
                state=poll.state,
                metrics=poll.metrics,
                slots=poll.slots,
                props=poll.props,
                throughput=poll.throughput,
                placement=state.placement,
                kv=kv_gauges(fill),
                kv_tokens=fill.used_tokens if fill is not None else None,
                plan=state.plan,
                prompt_cache=state.prompt_cache,
            )
        with self._lock:
            self._llama[i] = export
            self._polled.add(i)
            self._version += 1
        return export

    def _found_plans(self, sample: RigSample) -> list[PlanReality]:
        """The plans of this user's llama-servers on the GPUs that no ``--llama`` names."""
        with self._lock:
            skip = {x.plan.pid for x in self._llama if x.plan is not None}
        return [f.plan for _, f in self._found.fold(sample, skip) if f.plan is not None]

    def start(self) -> None:
        """Sample once now (so the first scrape has data), then on the interval: the source
        in one thread, each llama-server in a thread of its own."""
        self.sample_once(with_llama=False)
        self._loops = [
            Periodic(
                partial(self.sample_once, with_llama=False),
                self.interval_s,
                name="lltui-exporter",
                delay_s=self.interval_s,
            )
        ]
        self._loops += [
            Periodic(partial(self.poll_llama, i), self.interval_s, name=f"lltui-exporter-llama-{i}")
            for i in range(len(self._follow))
        ]
        for loop in self._loops:
            loop.start()

    def stop(self) -> None:
        for loop in self._loops:
            loop.stop(join_s=5.0)
        for client in self._clients:
            client.close()


def to_metric(f: Family) -> Metric:
    """A prometheus_client family from one of ours. Samples of one family may carry extra
    labels (a GPU with a PCI id, one without): each sample gets every label name of the
    family, empty where it has none (Prometheus treats an empty label as absent)."""
    names: list[str] = []
    for labels, _v in f.samples:
        for k, _ in labels:
            if k not in names:
                names.append(k)
    m: GaugeMetricFamily | CounterMetricFamily
    if f.kind == "counter":
        m = CounterMetricFamily(f.name, f.help, labels=names, unit=f.unit)
    else:
        m = GaugeMetricFamily(f.name, f.help, labels=names, unit=f.unit)
    for labels, value in f.samples:
        given = dict(labels)
        m.add_metric([given.get(k, "") for k in names], value)
    return m


class LltuiCollector(Collector):
    """Yields the sampler's last snapshot, and how the exporter itself fares."""

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler

    def collect(self) -> Iterator[Metric]:
        snap = self.sampler.snapshot
        for f in self.sampler.families():
            yield to_metric(f)
        host = (("host", self.sampler.host),)
        own = (
            Family("lltui_exporter_samples_total", "counter", "Sampling rounds done.", "",
                   ((host, float(snap.samples_total)),)),
            Family("lltui_exporter_sample_errors_total", "counter",
                   "Sampling rounds whose source failed.", "",
                   ((host, float(snap.errors_total)),)),
            Family("lltui_exporter_source_up", "gauge",
                   "1 when the last round read the source.", "",
                   ((host, 1.0 if snap.source_up else 0.0),)),
            Family("lltui_exporter_last_sample_timestamp_seconds", "gauge",
                   "When the source was last read, seconds since the epoch.", "seconds",
                   ((host, snap.last_wall),) if snap.last_wall is not None else ()),
        )  # fmt: skip
        for f in own:
            yield to_metric(f)


def make_registry(sampler: Sampler) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LltuiCollector(sampler))
    return registry


# listen(2) backlog (the kernel caps it at net.core.somaxconn): a burst of scrapers waits
# here to be accepted. With the 5 of http.server's default the kernel dropped their
# connection attempts and each came back a second or more later (200 scrapers: p99 6 s,
# 140 timeouts); 128 still dropped some (bench/exporter.py)
LISTEN_BACKLOG = 1024
REQUEST_TIMEOUT_S = 10.0  # to send the whole request: one sent a byte at a time is let go


MAX_CONNECTIONS = 256  # served at once; each holds a thread until it is answered or let go
SLOT_WAIT_S = 2.0  # for the thread of a connection let go to end, when a new one needs its slot


class MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per request, a real listen backlog; threads do not outlive the server.
    Past ``max_connections`` at once the oldest connection still sending its request is let
    go for the new one: clients that open connections and send nothing, or a byte at a time,
    neither start threads without bound nor keep a scrape out (the new connection was the
    one closed, so 256 of them kept every scrape out). When every connection is being
    answered (a slow or hung collection), nothing frees a slot soon: the oldest scrape being
    answered is cut and the new connection closed at once, so that accepting never waits
    behind the answers (it waited SLOT_WAIT_S for each new connection, one after another)."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG
    max_connections = MAX_CONNECTIONS

    def server_activate(self) -> None:
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._open: dict[Any, bool] = {}  # connection -> its request read, oldest first
        self._open_lock = threading.Lock()
        super().server_activate()

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            # a connection let go while sending its request ends at once; one being
            # answered only once the answer is made: no waiting for that
            if self._let_go_oldest():
                freed = self._slots.acquire(timeout=SLOT_WAIT_S)
            else:
                freed = self._slots.acquire(blocking=False)
            if not freed:
                self.shutdown_request(request)
                return
        with self._open_lock:
            self._open[request] = False
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def request_read(self, request: Any) -> None:
        with self._open_lock:
            if request in self._open:
                self._open[request] = True

    def _let_go_oldest(self) -> bool:
        """Shut the oldest connection still sending its request (else the oldest, being
        answered); whether it was still sending it: then its thread's read fails at once and
        the thread ends, freeing its slot (one being answered fails only when it writes)."""
        with self._open_lock:  # (held until shut: a connection is closed only once out)
            reading = [c for c, read in self._open.items() if not read]
            oldest = next(iter(reading or self._open), None)
            if oldest is not None:
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RDWR)
            return bool(reading)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.pop(request, None)
        super().shutdown_request(request)


class _ReadBy(io.RawIOBase):
    """A socket's reads, all of them by ``deadline`` (monotonic): a timeout per read let a
    client that sent a byte every few seconds hold its connection for ever."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock, self._deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request took too long")
        self._sock.settimeout(left)
        return self._sock.recv_into(buffer)


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_S

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(_ReadBy(self.connection, time.monotonic() + self.timeout))

    def parse_request(self) -> bool:
        read = super().parse_request()
        self.server.request_read(self.connection)  # type: ignore[attr-defined]
        self.connection.settimeout(self.timeout)  # the answer: its own time to be sent
        return read

    def handle(self) -> None:
        """One request; a client that does not send it in time, or goes, is let go without
        a word (socketserver printed a traceback for each)."""
        with contextlib.suppress(OSError):
            super().handle()

    def log_message(self, format: str, *args: Any) -> None:
        """No line per request."""


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
_CACHE_KEYS = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "HTTP_ACCEPT", "HTTP_ACCEPT_ENCODING")
MAX_CACHED = 16  # renderings kept: one per format, encoding and filter asked for


def cached_app(app: WsgiApp, version: Callable[[], int]) -> WsgiApp:
    """``app`` with its 200 answers kept until ``version()`` changes: a burst of scrapers
    between two sampling rounds costs one rendering per kind of request (format, encoding,
    filter), not one each. Renderings are made one at a time; whoever waits for one takes
    the answer it made."""
    lock = threading.Lock()
    render = threading.Lock()
    cache: dict[tuple[str, ...], tuple[int, str, list[tuple[str, str]], bytes]] = {}

    def cached(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        key = tuple(str(environ.get(k, "")) for k in _CACHE_KEYS)
        v = version()
        with lock:
            hit = cache.get(key)
        if hit is None or hit[0] != v:
            with render:
                with lock:
                    hit = cache.get(key)
                if hit is None or hit[0] != v:
                    said: list[Any] = []

                    def keep(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
                        said[:] = [status, headers]
                        return lambda _data: None

                    body = b"".join(app(environ, keep))
                    hit = (v, said[0], list(said[1]), body)
                    if said[0].startswith("200"):
                        with lock:
                            if len(cache) >= MAX_CACHED:
                                cache.clear()
                            cache[key] = hit
        start_response(hit[1], list(hit[2]))
        return [hit[3]]

    return cached


METRICS_PATH = "/metrics"
_LANDING = (
    b"lltui exporter: the metrics are at /metrics\n"
    b"(Prometheus text, or OpenMetrics when asked; gzip when accepted)\n"
)


def routed_app(metrics: WsgiApp) -> WsgiApp:
    """``/metrics`` is the metrics; ``/`` a line that says where they are; every other path
    404, as node_exporter and dcgm-exporter answer (prometheus_client's app alone serves the
    metrics on any path, so a mistyped scrape path would look healthy). HEAD is GET's
    answer without its content (it was 405 on /metrics, and the whole page on /); any
    other method 405."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD") or "GET")
        path = str(environ.get("PATH_INFO") or "/")
        if method == "HEAD":
            said: list[Any] = []
            got = app(dict(environ, REQUEST_METHOD="GET"), lambda *a: said.extend(a[:2]))
            length = str(len(b"".join(got)))
            status, headers = said
            if not any(k.lower() == "content-length" for k, _ in headers):
                headers = [*headers, ("Content-Length", length)]
            start_response(status, headers)
            return []
        if method != "GET":
            status, body = "405 Method Not Allowed", b"the metrics are read with GET\n"
        elif path == METRICS_PATH:
            return metrics(environ, start_response)
        elif path == "/":
            status, body = "200 OK", _LANDING
        else:
            status, body = "404 Not Found", b"not found: the metrics are at /metrics\n"
        headers = [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))),
        ]
        headers += [("Allow", "GET, HEAD")] if method != "GET" else []
        start_response(status, headers)
        return [body]

    return app


def serve(
    registry: CollectorRegistry,
    host: str,
    port: int,
    *,
    version: Callable[[], int] | None = None,
) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` (prometheus_client's WSGI app: text or OpenMetrics, gzip; other
    paths 404) on
    ``host:port`` in a thread; returns the server and its thread. ``version``: a number
    that changes with what the registry collects (``Sampler.version``), so that scrapes in
    between share one rendering. Raises OSError when the address cannot be bound."""
    from prometheus_client import make_wsgi_app

    family, _, _, _, sockaddr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    server_class = type("MetricsServer", (MetricsServer,), {"address_family": family})
    app: WsgiApp = make_wsgi_app(registry)
    if version is not None:
        app = cached_app(app, version)
    app = routed_app(app)
    httpd: WSGIServer = make_server(
        str(sockaddr[0]), port, app, server_class, handler_class=_QuietHandler
    )
    thread = threading.Thread(target=httpd.serve_forever, name="lltui-exporter-http", daemon=True)
    thread.start()
    return httpd, thread


@dataclass(frozen=True)
class ExportRequest:
    """What ``lltui exporter`` serves: one rig (not a fleet), sampled every ``interval_s``,
    on ``host:port``, with the llama-servers it follows."""

    rig: RigRequest
    host: str
    port: int
    interval_s: float = 1.0
    llama: tuple[LlamaFollow, ...] = ()
    host_label: str | None = None  # None: the rig's host name, else this machine's
    max_processes: int = DEFAULT_MAX_PROCESSES
    thresholds: AlertThresholds | None = None


class ExportFailed(Exception):
    """The exporter cannot serve; ``str()`` is one line, ``code`` 2 for bad input."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Serving:
    """What is being served, once it is: the URL as bound and the source without secrets."""

    url: str
    source: str
    info: RigInfo


def _open_rig(request: RigRequest) -> Rig:
    """The one rig to export; a simulated one only where asked for by name."""
    from lltui.services.rig import kind_of, open_rig

    if request.is_fleet:
        raise ExportFailed(
            "the exporter serves one rig: run one exporter per host and let Prometheus "
            "scrape them all",
            2,
        )
    try:
        rig = open_rig(request)
    except ValueError as exc:
        raise ExportFailed(str(exc), 2) from None
    except SourceUnavailable as exc:
        raise ExportFailed(f"source {request.source}: {exc}", exc.exit_code) from None
    kind = kind_of(request.source)
    if rig.info.simulated and not (kind.simulated or kind.recorded):  # (a replay is asked for)
        rig.source.close()
        why = (rig.info.simulated_reason or "no NVIDIA GPU here").split("; showing")[0]
        raise ExportFailed(
            f"nothing to export: {why} (a simulated rig is served only when asked for: "
            "--source sim:PROFILE)"
        )
    return rig


def export(
    request: ExportRequest,
    stop: threading.Event,
    *,
    on_serving: Callable[[Serving], None],
    on_error: Callable[[str], None],
) -> None:
    """Sample the rig and serve its metrics until ``stop`` is set; everything it started is
    stopped and closed on the way out. ExportFailed when it cannot start."""
    from lltui.sources.gpu.prom import public_spec

    rig = _open_rig(request.rig)
    sampler = Sampler(
        rig.source,
        host=request.host_label or rig.info.hostname or socket.gethostname(),
        interval_s=request.interval_s,
        llama=request.llama,
        max_processes=request.max_processes,
        thresholds=request.thresholds,
        on_error=on_error,
    )
    host, port = request.host, request.port
    try:
        sampler.start()
        try:
            server, _thread = serve(
                make_registry(sampler), host, port, version=lambda: sampler.version
            )
        except OSError as exc:
            raise ExportFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        try:
            shown = f"[{host}]" if ":" in host else host
            url = f"http://{shown}:{server.server_address[1]}/metrics"
            on_serving(Serving(url, public_spec(request.rig.source or "auto"), rig.info))
            stop.wait()
        finally:
            server.shutdown()
            server.server_close()
    finally:
        sampler.stop()
        rig.source.close()

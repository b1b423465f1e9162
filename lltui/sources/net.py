"""One deadline for a whole network operation, kept at the socket.

A per-read timeout alone lets a server that sends a byte every two seconds hold a request
for ever: each read gets its byte in time. Every HTTP client lltui makes goes through
:func:`http_client`, whose transport asks a :class:`Deadline` before each connect, write and
read of every connection, and gives the socket no more time than the deadline leaves: the
headers, the body, a redirect and the next request of the same operation all count against
it. When it has passed, the read raises httpx's timeout, and ``deadline.expired`` tells the
caller to say "took longer than N s" rather than "timed out".
"""

from __future__ import annotations

import ipaddress
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpcore
import httpx


class Deadline:
    """The moment an operation must be over by: ``seconds`` from now (or from
    :meth:`restart`). ``clock`` is monotonic."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self.at = clock() + seconds

    def restart(self, seconds: float | None = None) -> None:
        """The deadline of the next operation of a client that is used again."""
        if seconds is not None:
            self.seconds = seconds
        self.at = self._clock() + self.seconds

    def left(self) -> float:
        return self.at - self._clock()

    @property
    def expired(self) -> bool:
        return self.left() <= 0

    def clamp(self, timeout: float | None, exc: type[Exception]) -> float:
        """The time one socket call may take: its own timeout, cut to what is left; ``exc``
        (httpcore's timeout of that call) once nothing is."""
        left = self.left()
        if left <= 0:
            raise exc(f"the deadline of {self.seconds:g} s has passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._deadline.clamp(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, wait), self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    """httpcore's network backend with every socket call bounded by the deadline."""

    def __init__(self, inner: httpcore.NetworkBackend, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        wait = self._deadline.clamp(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return _Stream(stream, self._deadline)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        wait = self._deadline.clamp(timeout, httpcore.ConnectTimeout)
        return _Stream(self._inner.connect_unix_socket(path, wait, socket_options), self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(min(seconds, max(0.0, self._deadline.left())))


def deadline_transport(
    deadline: Deadline, *, proxy: str | None = None, trust_env: bool = False
) -> httpx.HTTPTransport:
    """httpx's own transport (TLS, HTTP/1.1, a proxy), its sockets bounded by ``deadline``.
    ``trust_env``: certificates from ``SSL_CERT_FILE``/``SSL_CERT_DIR``, as httpx does."""
    transport = httpx.HTTPTransport(proxy=proxy, trust_env=trust_env)
    # httpx builds its connection pool (direct or through a proxy) inside the transport and
    # hands it httpcore's default backend; the pool makes every connection through that
    # backend, so wrapping it puts the deadline under each one (tests/test_net.py holds it)
    pool = transport._pool
    pool._network_backend = _Backend(pool._network_backend, deadline)
    return transport


def _proxy_mounts(
    deadline: Deadline, proxies: Mapping[str, str]
) -> dict[str, httpx.BaseTransport | None]:
    """Mounts for the proxies the environment names (``https_proxy``, ``all_proxy``,
    ``no_proxy``), each transport bounded by the deadline too, as httpx reads them."""
    mounts: dict[str, httpx.BaseTransport | None] = {}
    for scheme in ("http", "https"):
        url = proxies.get(scheme) or proxies.get("all")
        if url:
            if "://" not in url:
                url = f"http://{url}"
            mounts[f"{scheme}://"] = deadline_transport(deadline, proxy=url, trust_env=True)
    for host in (h.strip() for h in proxies.get("no", "").split(",")):
        if not host:
            continue
        if host == "*":
            return {}
        if "://" in host:
            mounts[host] = None
            continue
        try:
            ip = ipaddress.ip_address(host)
            mounts[f"all://[{host}]" if ip.version == 6 else f"all://{host}"] = None
        except ValueError:
            bare = host.lstrip(".")
            mounts[f"all://{bare}" if bare == "localhost" else f"all://*{bare}"] = None
    return mounts


def http_client(
    deadline: Deadline,
    *,
    timeout: httpx.Timeout,
    trust_env: bool = False,
    **kwargs: Any,
) -> httpx.Client:
    """An httpx client whose every request is bounded by ``deadline`` (restart it for each
    operation of a client kept for several); ``timeout`` still bounds each socket call.
    ``trust_env``: the proxies and certificates of the environment (connections through a
    proxy bounded alike)."""
    mounts = _proxy_mounts(deadline, urllib.request.getproxies()) if trust_env else {}
    return httpx.Client(
        transport=deadline_transport(deadline, trust_env=trust_env),
        mounts=mounts or None,
        trust_env=False,
        timeout=timeout,
        **kwargs,
    )

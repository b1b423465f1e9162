"""Where llama-server listens and where its RPC servers are: addresses as lltui checks them."""

from __future__ import annotations

import ipaddress
import re

from lltui.core.text import is_digits

DEFAULT_HOST = "127.0.0.1"


class AddressError(ValueError):
    """A HOST:PORT that is not one."""


def check_hostport(hostport: str) -> None:
    host, sep, port = hostport.rpartition(":")
    if not sep or not host or not is_digits(port) or not 0 < int(port) < 65536:
        raise AddressError(f"RPC server {hostport!r} is not HOST:PORT")


_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?\Z")


def check_listen_host(host: str) -> None:
    """llama-server's ``--host``: each address of a comma list a host name, an IP address
    (IPv6 bare, as llama-server takes it) or a UNIX socket's path (``.sock``); AddressError
    for one that is none (``256.1.1.1``, ``[::1]``)."""
    for h in (x.strip() for x in host.split(",")):
        if h.endswith(".sock"):
            continue
        if h.startswith("[") and h.endswith("]"):
            raise AddressError(f"--host {h}: give an IPv6 address without brackets ({h[1:-1]})")
        if ":" in h or all(c.isdigit() or c == "." for c in h):
            try:
                ipaddress.ip_address(h)
            except ValueError:
                raise AddressError(f"--host {h!r} is not an IP address") from None
        elif not _HOST_NAME.match(h):
            raise AddressError(f"--host {h!r} is not a host name or an address")


def check_server_url(url: str) -> None:
    """A server's URL: http or https, a host, a port that is one (AddressError if not)."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        port = parts.port  # ValueError where it is no port
    except ValueError:
        ok, port = False, None
    if not ok or (port is not None and not 0 < port < 65536):
        raise AddressError(f"{url!r}: expected an http:// or https:// URL")


def server_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` for the first TCP address; IPv6 in brackets, a wildcard as loopback;
    ``unix:PATH`` for a UNIX socket (llama-server listens on one for a host ending .sock)."""
    first = next((h.strip() for h in host.split(",") if h.strip()), DEFAULT_HOST)
    if first.endswith(".sock"):
        return f"unix:{first}"
    if first in ("0.0.0.0", ""):
        first = "127.0.0.1"
    elif first == "::":
        first = "::1"
    try:
        if isinstance(ipaddress.ip_address(first), ipaddress.IPv6Address):
            first = f"[{first}]"
    except ValueError:
        pass
    return f"http://{first}:{port}"


def is_loopback(host: str) -> bool:
    """True when every address of ``host`` (a comma list) is loopback or a UNIX socket."""
    for h in (x.strip() for x in host.split(",")):
        if not h or h.endswith(".sock") or h == "localhost":
            continue
        try:
            if not ipaddress.ip_address(h).is_loopback:
                return False
        except ValueError:
            return False
    return True


def endpoint_is_loopback(endpoint: str) -> bool:
    """Whether an RPC server's ``HOST:PORT`` is on this machine's loopback network."""
    host = endpoint.rpartition(":")[0].strip("[]").lower()
    if host == "localhost":
        return True
    try:  # "127.evil.example" is a name, not the loopback network
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def public_url(url: str) -> str:
    """``url`` without user, password, query or fragment: fit for a label or a message."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "<unparsable URL>"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))

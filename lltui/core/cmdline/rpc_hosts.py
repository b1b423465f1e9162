"""``lltui launch --rpc-host HOST[:PORT]``: llama.cpp's rpc-server on other hosts, in words.

Each host runs ``rpc-server -H BIND -p PORT`` over ssh. BIND defaults to 127.0.0.1 *on that
host*: llama-server then reaches it through a port forwarded by the same ssh connection, so
the RPC traffic (which llama.cpp neither authenticates nor encrypts) never leaves the ssh
tunnel. Binding anything else makes the RPC port reachable from the network; lltui says so
loudly. Pure: the remote command line is built here, run in lltui.sources.llama.rpc_hosts.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass

from lltui.core.text import is_digits

DEFAULT_RPC_PORT = 50052
RPC_BINARIES = ("rpc-server", "ggml-rpc-server")  # the name differs between llama.cpp builds
PID_MARK = "lltui-rpc-pid"

_HOST_PORT = re.compile(r"^(?P<host>[^:\s\[\]]+|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[^:]*))?$")


class RpcHostError(ValueError):
    """A ``--rpc-host`` that cannot be used; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class RpcHost:
    host: str  # [user@]host for ssh (an alias of the user's ssh config is fine)
    port: int = DEFAULT_RPC_PORT  # where rpc-server listens on that host
    bind: str = "127.0.0.1"  # the address it binds there
    binary: str | None = None  # its path there; None: rpc-server/ggml-rpc-server on PATH
    threads: int | None = None

    @property
    def loopback(self) -> bool:
        return is_loopback(self.bind)

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"

    def direct_endpoint(self) -> str:
        """Where llama-server reaches a non-loopback rpc-server: the bound address, or the
        host's name when it binds every address."""
        if self.bind in ("0.0.0.0", "::", ""):
            name = self.host.rpartition("@")[2].strip("[]")
        else:
            name = self.bind
        return f"[{name}]:{self.port}" if ":" in name else f"{name}:{self.port}"


def is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_rpc_host(
    text: str, *, bind: str | None = None, binary: str | None = None, threads: int | None = None
) -> RpcHost:
    """``[user@]HOST[:PORT]``; RpcHostError with one line for anything else."""
    user, at, rest = text.strip().rpartition("@")
    m = _HOST_PORT.match(rest)
    if not rest or m is None or (user and not re.fullmatch(r"[A-Za-z0-9._+-]+", user)):
        raise RpcHostError(f"--rpc-host {text!r}: expected [user@]HOST[:PORT]")
    host = user + at + m.group("host").strip("[]")
    if host.startswith("-"):
        raise RpcHostError(f"--rpc-host {text!r} starts with '-' and would be read as an option")
    port = DEFAULT_RPC_PORT
    if m.group("port") is not None:
        if not is_digits(m.group("port")) or not 0 < int(m.group("port")) < 65536:
            raise RpcHostError(f"--rpc-host {text!r}: the port is not a number from 1 to 65535")
        port = int(m.group("port"))
    address = bind or "127.0.0.1"
    if address != "localhost":
        try:
            ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            raise RpcHostError(f"--rpc-bind {address!r} is not an IP address") from None
    return RpcHost(host, port, address.strip("[]"), binary, threads)


def remote_command(spec: RpcHost) -> str:
    """The command line the host's login shell runs: ``sh`` says its pid, then becomes
    rpc-server (``exec``, so that pid is rpc-server's). Every word is quoted."""
    args = ["-H", spec.bind, "-p", str(spec.port)]
    if spec.threads:
        args += ["-t", str(spec.threads)]
    quoted = " ".join(shlex.quote(a) for a in args)
    if spec.binary:
        find = (
            f'b={shlex.quote(spec.binary)}; [ -x "$b" ] || {{ echo {_missing(spec)}; exit 127; }}'
        )
    else:
        lookup = " || ".join(f"command -v {name}" for name in RPC_BINARIES)
        find = f"b=$({lookup}) || {{ echo {_missing(spec)}; exit 127; }}"
    script = f'{find}; echo {PID_MARK} $$; exec "$b" {quoted}'
    # through sh whatever the user's login shell is (fish, csh): ``exec`` keeps the pid
    return f"exec sh -c {shlex.quote(script)}"


def _missing(spec: RpcHost) -> str:
    if spec.binary:
        return shlex.quote(f"lltui: {spec.binary} is not an executable file on {spec.host}")
    return shlex.quote(
        f"lltui: neither {' nor '.join(RPC_BINARIES)} is on PATH on {spec.host} "
        "(give its path with --rpc-server PATH)"
    )


def exposure_warning(spec: RpcHost) -> str | None:
    """The loud warning for an rpc-server bound beyond loopback; None on loopback."""
    if spec.loopback:
        return None
    return (
        f"WARNING: rpc-server on {spec.host} listens on {spec.bind}:{spec.port}. llama.cpp RPC "
        "has NO authentication and NO encryption: anyone who can reach that port can use the "
        "host's devices and memory. Keep it on a private network you trust, or leave "
        "--rpc-bind out (127.0.0.1 there, reached through the ssh connection)."
    )


def device_line(line: str) -> tuple[str, str] | None:
    """A device rpc-server lists at start (``  CPU: AMD EPYC (24105 MiB, 24105 MiB free)``)
    as (name, description); None for other lines."""
    m = re.match(r"^\s{2,}(?P<name>[A-Za-z][\w.-]*)\s*:\s+(?P<desc>.*\(.*MiB.*\).*)$", line)
    if m is None:
        return None
    return m.group("name"), m.group("desc").strip()

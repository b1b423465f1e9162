"""``--hosts FILE``: one ssh host a line, as a fleet of ``smi:`` sources.

A line is ``[user@]host[:port]`` or ``[user@]host -p PORT``; ``#`` starts a comment; blank
lines are skipped. Everything else ssh needs (jump hosts, keys, user names) comes from the
user's ssh config, so an alias defined there is a line here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lltui.core.text import is_digits

MAX_HOSTS = 1024

_HOST = re.compile(r"^(?:[A-Za-z0-9._+-]+@)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])$")


_WITH_PORT = re.compile(r"^(?P<host>(?:[^@\s]+@)?(?:\[[^\]]+\]|[^:\[\]]+))(?::(?P<port>[^:]*))?$")


# ssh reads a password from a terminal only: one in a host spec would just be printed
PASSWORD_REFUSED = (
    "a host holds a password (user:password@host); ssh takes none on its command line: "
    "log in with a key, or name the host in your ssh_config (or LLTUI_SSH_CONFIG)"
)


class HostsFileError(ValueError):
    """A line of a hosts file that is not a host; ``str()`` names the line."""


@dataclass(frozen=True, slots=True)
class HostEntry:
    host: str  # [user@]host, as ssh takes it
    port: int | None = None

    @property
    def spec(self) -> str:
        """The ``--source`` spec of this host."""
        return f"smi:{self.host}" + (f":{self.port}" if self.port is not None else "")


def _port(text: str, where: str) -> int:
    if not is_digits(text) or not 0 < int(text) < 65536:
        raise HostsFileError(f"{where}: port {text!r} is not a number from 1 to 65535")
    return int(text)


def parse_hosts(text: str, name: str = "hosts file") -> tuple[HostEntry, ...]:
    """The hosts of a hosts file, in order, each once; HostsFileError for a bad line."""
    hosts: list[HostEntry] = []
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{name} line {number}"
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if ":" in words[0].rpartition("@")[0]:
            raise HostsFileError(f"{where}: {PASSWORD_REFUSED}")
        port: int | None = None
        if len(words) == 3 and words[1] == "-p":
            port = _port(words[2], where)
        elif len(words) != 1:
            raise HostsFileError(f"{where}: expected [user@]host[:port] or host -p PORT")
        host = words[0]
        if port is None:
            m = _WITH_PORT.match(host)
            if m is None:
                raise HostsFileError(f"{where}: {words[0]!r} is not a host name")
            host = m.group("host")
            if m.group("port") is not None:
                port = _port(m.group("port"), where)
        if host.startswith("-") or not _HOST.match(host):
            raise HostsFileError(f"{where}: {words[0]!r} is not a host name")
        entry = HostEntry(host, port)
        if entry not in hosts:
            hosts.append(entry)
        if len(hosts) > MAX_HOSTS:
            raise HostsFileError(f"{name}: more than {MAX_HOSTS} hosts")
    if not hosts:
        raise HostsFileError(f"{name} lists no host")
    return tuple(hosts)

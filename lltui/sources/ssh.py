"""ssh to the hosts of a fleet: one persistent connection per host, closed at exit.

Every command to a host goes through an OpenSSH control master (``ControlMaster=auto``): the
first command opens the connection, later ones are sessions on it, so a tick costs no
handshake. The control sockets live in a private folder (:func:`lltui.paths.runtime_dir`)
and carry lltui's pid (``ssh/PID-HASH``), so two lltui do not share (or close) each other's masters.
``ControlPersist`` is short: a master left by an lltui that was killed goes away on its own
once idle; :meth:`SshTarget.close` stops it at once (``ssh -O exit``) on every normal exit.

``LLTUI_SSH_CONFIG`` names an ssh_config file passed with ``-F`` (tests use it; users with
a fleet-only config may too). Commands are argv lists; what the remote login shell reads is
quoted with :func:`shlex.quote` by the callers that send words from outside lltui.
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

from lltui.core.monitor.hosts_file import PASSWORD_REFUSED

SSH_CONFIG_ENV = "LLTUI_SSH_CONFIG"
CONTROL_PERSIST_S = 30  # a master nobody uses any more exits after this long
CONNECT_TIMEOUT_S = 5
MAX_SOCKET_PATH = 86  # a socket path holds 104 bytes (macOS; 108 Linux), ssh binds PATH.<17 chars>
BASE_OPTIONS: tuple[str, ...] = (
    "-o",
    "BatchMode=yes",
    "-o",
    f"ConnectTimeout={CONNECT_TIMEOUT_S}",
    "-o",
    "ServerAliveInterval=5",
    "-o",
    "ServerAliveCountMax=2",
)

# one colon: HOST:PORT, whatever follows it (an IPv6 address, with more, is no HOST:PORT)
_PORTED = re.compile(r"^(?P<host>[^:\[\]]+):(?P<port>[^:]*)\Z")
_BRACKETED = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\])(?::(?P<port>[^:]*))?\Z")


def check_host(host: str) -> str:
    """A host name for ssh as the user gave it; ValueError for one ssh would take as an
    option (leading ``-``), that holds whitespace or control characters, or a password
    (``user:password@host``: the message never repeats it)."""
    if not host:
        raise ValueError("an ssh host name is empty")
    if ":" in host.rpartition("@")[0]:
        raise ValueError(PASSWORD_REFUSED)
    if host.startswith("-"):
        raise ValueError(f"host {host!r} starts with '-' and would be read as an ssh option")
    if any(c.isspace() or not c.isprintable() for c in host):
        raise ValueError(f"host {host!r} holds whitespace or control characters")
    if "," in host:  # ssh refuses it; a fleet's sources each name their kind
        raise ValueError(
            f"host {host!r} holds a comma: give each host its kind (smi:h1,smi:h2) or --hosts FILE"
        )
    return host


def split_host_port(text: str) -> tuple[str, int | None]:
    """``[user@]host[:port]`` (``[v6]:port`` too) as (``[user@]host``, port or None);
    ValueError with one line for a port that is no number or out of range."""
    user, at, rest = text.rpartition("@")
    prefix = f"{user}{at}"
    for pattern in (_BRACKETED, _PORTED):
        m = pattern.match(rest)
        if m:
            host = m.group("host").strip("[]")
            port_text = m.group("port")
            if port_text is None:
                return prefix + host, None
            if not port_text.isascii() or not port_text.isdigit():
                raise ValueError(f"port {port_text!r} in {text!r} is not a number (HOST:PORT)")
            port = int(port_text)
            if not 0 < port < 65536:
                raise ValueError(f"port {port} in {text!r} is out of range (1-65535)")
            return prefix + host, port
    return text, None


def ssh_config_file(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    return env.get(SSH_CONFIG_ENV) or None


@dataclass(eq=False)  # hashed by identity: kept in a WeakSet
class SshTarget:
    """One host reached over ssh, with its control master."""

    host: str  # [user@]host as ssh takes it (an alias of the user's ssh config is fine)
    port: int | None = None
    config_file: str | None = field(default_factory=ssh_config_file)
    multiplex: bool = True
    _control_path: str | None = field(default=None, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        check_host(self.host)

    @property
    def label(self) -> str:
        return self.host if self.port is None else f"{self.host}:{self.port}"

    def control_path(self) -> str | None:
        """The socket of this host's master (None when multiplexing is off or no private
        folder could be made: each command then opens its own connection)."""
        if not self.multiplex or self._closed:
            return None
        if self._control_path is None:
            from lltui.paths import runtime_dir

            try:
                folder = runtime_dir() / "ssh"
                folder.mkdir(mode=0o700, exist_ok=True)
            except OSError:
                self.multiplex = False
                return None
            # a hash of what names the connection: short (a socket path has ~100 bytes), one
            # per host as the user wrote it (two aliases of one machine are two hosts); and
            # one per target, so that a closed target's watcher (close) never stops the
            # master of a newer target of the same host
            key = f"{self.host}\0{self.port}\0{self.config_file}".encode()
            digest = hashlib.sha256(key).hexdigest()[:20]
            path = str(folder / f"{os.getpid()}-{next(_TARGET_IDS)}-{digest}")
            if len(path.encode()) > MAX_SOCKET_PATH:
                self.multiplex = False  # ssh would refuse it: a connection per command
                return None
            self._control_path = path
            _OPEN.add(self)
        return self._control_path

    def options(self) -> list[str]:
        """ssh's options for this host, without the host itself."""
        opts: list[str] = []
        if self.config_file:
            opts += ["-F", self.config_file]
        opts += list(BASE_OPTIONS)
        path = self.control_path()
        if path is None:
            # no master, and none made by this command (one closed stays closed: a command
            # racing the close must not start a master nobody will stop)
            opts += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
        else:
            opts += [
                "-o",
                "ControlMaster=auto",
                "-o",
                f"ControlPersist={CONTROL_PERSIST_S}",
                "-o",
                f"ControlPath={path}",
            ]
        if self.port is not None:
            opts += ["-p", str(self.port)]
        return opts

    def argv(self, *remote: str, extra: tuple[str, ...] = ()) -> list[str]:
        """``ssh [options] [extra] -- host remote...``."""
        return ["ssh", *self.options(), *extra, "--", self.host, *remote]

    def master_running(self, timeout: float = 5.0) -> bool:
        """Whether this host's master is up (``ssh -O check``)."""
        if self.control_path() is None:
            return False
        return _quiet(["ssh", *self.options(), "-O", "check", "--", self.host], timeout) == 0

    def close(self, timeout: float = 5.0) -> None:
        """Stop this host's master (``ssh -O exit``); nothing when none runs. Later
        commands to this target each use a connection of their own."""
        path = self._control_path
        if path is None or self._closed or shutil.which("ssh") is None:
            self._closed = True
            return
        argv = ["ssh", *self.options(), "-O", "exit", "--", self.host]
        self._closed = True
        _OPEN.discard(self)
        _quiet(argv, timeout)
        # A command whose argv was made before this close may still be logging in (or an
        # exit that timed out on a loaded machine left the master): the master it makes
        # would outlive us by ControlPersist. Watch the path for a login's time and stop
        # whatever master appears there, whether or not the exit found one.
        stop = [*argv[: argv.index("-O")], "-O", "stop", "--", self.host]
        with _LATE_LOCK:
            _LATE[path] = argv  # at lltui's exit: -O exit
        threading.Thread(
            target=_stop_late, args=(path, stop, argv, timeout), name="ssh close", daemon=True
        ).start()


_TARGET_IDS = itertools.count()
# Targets whose master may run; whatever their owner forgot is stopped when lltui exits.
_OPEN: weakref.WeakSet[SshTarget] = weakref.WeakSet()
# Masters closed while a command may still have been making them: path -> its -O exit
_LATE: dict[str, list[str]] = {}
_LATE_LOCK = threading.Lock()


LATE_GRACE_S = 1.0  # for the racing command's own session to open on its new master


LATE_WATCH_S = CONNECT_TIMEOUT_S + 5.0  # a login's time, with room for a loaded machine


def _stop_late(path: str, stop: list[str], exit_argv: list[str], timeout: float) -> None:
    """Stop any master at ``path`` that is up, or comes up, within a login's time: ``-O
    stop`` lets the command that made it finish its session, then the master exits (``-O
    exit`` where it is still there after a grace)."""
    deadline = time.monotonic() + LATE_WATCH_S
    wake = threading.Event()
    while time.monotonic() < deadline:
        with _LATE_LOCK:
            if path not in _LATE:
                return  # lltui's exit took it over
        if os.path.exists(path):
            wake.wait(LATE_GRACE_S)  # the racing command's session opens first
            _quiet(stop, timeout)
            wake.wait(LATE_GRACE_S)
            if os.path.exists(path):
                _quiet(exit_argv, timeout)
        wake.wait(0.05)
    with _LATE_LOCK:
        _LATE.pop(path, None)
    if os.path.exists(path):
        _quiet(exit_argv, timeout)


@atexit.register
def _close_all() -> None:
    for target in list(_OPEN):
        target.close(timeout=2.0)
    with _LATE_LOCK:
        late = dict(_LATE)
        _LATE.clear()
    for path, exit_argv in late.items():
        if os.path.exists(path):
            _quiet(exit_argv, 2.0)


def _quiet(argv: list[str], timeout: float) -> int:
    try:
        return subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        ).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 255

"""rpc-server on other hosts over ssh, for ``lltui launch --rpc-host``.

Each host gets its own ssh connection (``ssh -tt``: a terminal there, so rpc-server gets a
hangup if the connection drops), running :func:`remote_command`; with the default loopback
bind, the same connection forwards a free local port to it and llama-server uses that. The
local ssh client runs under the supervisor's shim (``PR_SET_PDEATHSIG``), started from a
thread that lives as long as it, so it dies with lltui even when lltui is killed.

Stopping (every exit path: a normal stop, an error, Ctrl-C, SIGTERM, SIGHUP): ``kill -TERM``
the remote pid over the host's control connection, wait for the session to end, end the ssh
client (a hangup there), then close the control connection.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from lltui.core.cmdline.rpc_hosts import (
    PID_MARK,
    RpcHost,
    device_line,
    remote_command,
)
from lltui.sources.proc_group import dies_with_us, stop_process
from lltui.sources.ssh import SshTarget

START_TIMEOUT_S = 30.0
STOP_WAIT_S = 5.0


class RpcStartError(Exception):
    """An rpc-server could not be started; ``str()`` is one line."""


def free_local_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RemoteRpc:
    """One rpc-server on one host, and the ssh session that runs it."""

    spec: RpcHost
    local_port: int | None = None  # the forwarded port here (loopback bind)
    pid: int | None = None  # rpc-server's pid there
    devices: list[tuple[str, str]] = field(default_factory=list)
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=40))
    proc: subprocess.Popen[bytes] | None = None
    listening: threading.Event = field(default_factory=threading.Event)
    endpoint_at: float | None = None  # when its banner named the endpoint
    ended: threading.Event = field(default_factory=threading.Event)
    control: SshTarget | None = None

    @property
    def endpoint(self) -> str:
        """What llama-server's ``--rpc`` names for this host."""
        if self.local_port is not None:
            return f"127.0.0.1:{self.local_port}"
        return self.spec.direct_endpoint()

    def argv(self) -> list[str]:
        """The ssh command: its own connection (no multiplexing: the forward and the
        terminal end with it), a terminal, the forward when bound to loopback."""
        session = SshTarget(self.spec.host, multiplex=False)
        extra: list[str] = ["-tt", "-o", "ExitOnForwardFailure=yes"]
        if self.local_port is not None:
            there = "127.0.0.1" if self.spec.bind in ("localhost",) else self.spec.bind
            there = f"[{there}]" if ":" in there else there
            extra += ["-L", f"127.0.0.1:{self.local_port}:{there}:{self.spec.port}"]
        return session.argv(remote_command(self.spec), extra=tuple(extra))

    def last_line(self) -> str:
        for line in reversed(self.lines):
            if line.strip() and not line.startswith(PID_MARK):
                return line.strip()[:200]
        return "no output"


class RpcHosts:
    """Every ``--rpc-host`` of one launch: started together, stopped together."""

    def __init__(
        self,
        specs: Sequence[RpcHost],
        *,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        self.servers = [
            RemoteRpc(s, local_port=free_local_port() if s.loopback else None) for s in specs
        ]
        self.start_timeout = start_timeout
        self._threads: list[threading.Thread] = []
        self._stopped = False

    def rpc_value(self) -> str:
        """llama-server's ``--rpc`` value."""
        return ",".join(s.endpoint for s in self.servers)

    def exposed(self) -> list[str]:
        """The endpoints of the servers bound beyond loopback (reached directly)."""
        return [s.endpoint for s in self.servers if not s.spec.loopback]

    def describe(self) -> list[str]:
        """One line per host: where it runs, how llama-server reaches it, its devices, named
        as llama-server names them (``-dev`` and its ready line: RPC<n> counted over every
        server's devices; its buffer lines: RPC<i>[HOST:PORT], counted within a server)."""
        out = []
        first = 0
        for s in self.servers:
            count = max(len(s.devices), 1)
            names = ",".join(f"RPC{first + i}" for i in range(count))
            first += count
            via = f"through ssh, {s.endpoint} here" if s.local_port is not None else "directly"
            devices = ", ".join(f"{n} {d}" for n, d in s.devices) or "devices not listed"
            out.append(
                f"{names} ({s.endpoint}) = rpc-server on {s.spec.host} "
                f"({s.spec.bind}:{s.spec.port}, {via}): {devices}"
            )
        return out

    # -- starting -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start every rpc-server and wait until each listens; RpcStartError (after
        stopping those that started) when one does not."""
        for server in self.servers:
            server.control = SshTarget(server.spec.host)
            t = threading.Thread(
                target=self._run, args=(server,), name=f"lltui-rpc-{server.spec.host}", daemon=True
            )
            self._threads.append(t)
            t.start()
        try:
            deadline = time.monotonic() + self.start_timeout
            for server in self.servers:
                self._wait_listening(server, deadline)
        except BaseException:
            self.stop()
            raise

    def _run(self, server: RemoteRpc) -> None:
        """Start the ssh client (from this thread, which lives as long as it: the death
        signal is tied to the thread that forked it) and read its output to the end."""
        argv = server.argv()
        try:
            import shutil

            ssh = shutil.which(argv[0]) or argv[0]
            proc = subprocess.Popen(
                dies_with_us([ssh, *argv[1:]]),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            server.lines.append(f"cannot run ssh: {exc.strerror or exc}")
            server.ended.set()
            return
        server.proc = proc
        assert proc.stdout is not None
        seen_devices = False
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n").replace("\r", "")
            server.lines.append(line)
            if line.startswith(PID_MARK):
                with contextlib.suppress(ValueError, IndexError):
                    server.pid = int(line.split()[1])
                continue
            if line.strip() == "Devices:":
                seen_devices = True
                continue
            device = device_line(line) if seen_devices else None
            if device is not None:
                server.devices.append(device)
            if line.strip().startswith("endpoint"):
                server.endpoint_at = time.monotonic()
            if line.strip().startswith("transport"):  # the banner's last line
                server.listening.set()
        proc.wait()
        server.ended.set()

    def _wait_listening(self, server: RemoteRpc, deadline: float) -> None:
        """Its banner said it listens, and (through a tunnel) a connection stays open."""
        while time.monotonic() < deadline:
            if server.ended.is_set():
                raise RpcStartError(
                    f"rpc-server on {server.spec.host} did not start: {server.last_line()}"
                )
            banner_done = server.listening.is_set() or (
                server.endpoint_at is not None and time.monotonic() - server.endpoint_at > 1.0
            )
            if banner_done and self._answers(server):
                return
            server.ended.wait(0.05)
        raise RpcStartError(
            f"rpc-server on {server.spec.host} was not listening after "
            f"{self.start_timeout:g} s: {server.last_line()}"
        )

    @staticmethod
    def _answers(server: RemoteRpc) -> bool:
        host, _, port = server.endpoint.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2) as s:
                if server.local_port is None:
                    return True
                # through the tunnel the local side always accepts; the far side refusing
                # shows as the tunnel closing the connection at once
                s.settimeout(0.3)
                try:
                    return s.recv(1) != b""
                except TimeoutError:
                    return True
        except OSError:
            return False

    # -- stopping -----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop every rpc-server and ssh session of this launch; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        for server in self.servers:
            if server.pid is not None and server.control is not None and not server.ended.is_set():
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    subprocess.run(
                        server.control.argv("kill", "-TERM", str(server.pid)),
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                        timeout=STOP_WAIT_S,
                        check=False,
                    )
        for server in self.servers:
            # an rpc-server asked to end has a moment to; one whose pid never came (ssh
            # still connecting) has nothing to wait for: its ssh client is stopped at once
            if server.control is not None and server.pid is not None:
                server.ended.wait(STOP_WAIT_S)
            proc = server.proc
            if proc is not None and proc.poll() is None:
                # the ssh client: its end is a hangup for what runs in the terminal there
                stop_process(proc, ((signal.SIGTERM, STOP_WAIT_S), (signal.SIGKILL, STOP_WAIT_S)))
            if proc is not None and proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            if server.control is not None:
                server.control.close()
        for t in self._threads:
            t.join(STOP_WAIT_S)

    def __enter__(self) -> RpcHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

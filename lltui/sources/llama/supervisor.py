"""Start, watch and stop one llama-server.

Safety rules this module keeps:

* No shell: argv goes to ``execv`` as a list.
* The server runs in its own session and process group, so a terminal's SIGHUP or Ctrl-C
  reaches lltui only, and lltui signals the whole group when it stops the server.
* The server dies with lltui. A short Python shim sets ``PR_SET_PDEATHSIG`` (SIGKILL) and
  then execs llama-server, so the setting survives into it without running code between
  fork and exec in this multi-threaded process. The kernel sends that signal when the
  *thread* that forked the child exits, so the child is started from a launcher thread that
  lives exactly as long as the child. ``keep_running`` skips this, and sends the log to a
  file so the server does not die writing to a closed pipe.
* The port is bind-tested before the start; readiness is ``/health`` going from refused to
  503 to 200; the log is kept in a bounded buffer with the API key scrubbed from each line.
* Stop is SIGTERM to the group, a bounded wait, a second SIGTERM (llama-server then exits at
  once), then SIGKILL. A process that has exited is never signalled: the launcher marks it
  exited before reaping it, so its pid cannot have been reused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from lltui.core.cmdline.launch_spec import BinaryFlags, LaunchCommand
from lltui.core.llamalog.exit_reason import exit_reason, signal_name, stopped_from_outside
from lltui.core.llamalog.models import LlamaLogSummary, LogFacts
from lltui.core.llamalog.reader import LogReader
from lltui.sources.llama import http as llama_http
from lltui.sources.llama.binary import ServerProbe
from lltui.sources.llama.http import EndpointResult, LlamaServerClient
from lltui.sources.proc_group import dies_with_us, signal_group, stop_group

MAX_LINE_CHARS = 4000  # one log line kept at most this long
DEFAULT_LOG_LINES = 2000
TAIL_LINES = 20
HEALTH_TIMEOUT_S = 1.0
HEALTH_FIRST_INTERVAL_S = 0.01
# After /health answers 200, how long to wait for the "listening" log line that follows the
# placement lines (the log pipe can trail the HTTP answer by a moment).
READY_LOG_GRACE_S = 2.0


T = TypeVar("T")


class LogParser(Protocol):
    """What reads the server's log as it comes: a :class:`LogReader`, or a router's
    (:class:`lltui.core.llamalog.router.RouterLogReader`)."""

    @property
    def ready(self) -> bool: ...
    def feed(self, raw: str) -> list[str]: ...
    def summary(self) -> LlamaLogSummary: ...


class SupervisorError(Exception):
    """The server cannot be started; ``str()`` is one line, ``code`` the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ServerExit:
    """How a server ended: its return code (negative: the signal), the reason in words."""

    returncode: int | None
    reason: str
    log_tail: tuple[str, ...]
    stopped: bool  # lltui asked it to stop
    was_ready: bool
    pid: int | None = None
    from_outside: bool = False  # shut down by a signal someone other than lltui sent
    hurried: bool = False  # stopped, and a second signal to lltui cut its shutdown short

    @property
    def signal(self) -> str | None:
        return signal_name(self.returncode)

    @property
    def clean(self) -> bool:
        """Stopped on request, or exited 0 on its own (not on someone else's signal)."""
        return self.stopped or (self.returncode == 0 and not self.from_outside)


@dataclass(frozen=True)
class ServerStatus:
    """A snapshot of the supervised server for a view."""

    state: str  # idle, starting, loading, ready, stopping, exited
    pid: int | None
    url: str
    health: int | str | None  # last /health answer: a status code, "refused", or None
    log: LlamaLogSummary
    exit: ServerExit | None = None


def check_port_free(host: str, port: int) -> None:
    """Bind-test ``port`` on every address of ``host``; raise :class:`SupervisorError` if taken.

    Uses SO_REUSEADDR as llama-server does, so a port held only by TIME_WAIT counts as free.
    """
    if port == 0:
        return
    for h in (x.strip() for x in host.split(",")):
        if not h or h.endswith(".sock"):
            continue
        try:
            infos = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise SupervisorError(f"cannot listen on {h}: {exc.strerror}", 2) from None
        for family, kind, proto, _, addr in infos:
            with socket.socket(family, kind, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(addr)
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise SupervisorError(f"port {port} on {h} is already in use") from None
                    if exc.errno in (errno.EACCES, errno.EPERM):
                        raise SupervisorError(
                            f"no permission to listen on port {port} on {h}"
                        ) from None
                    raise SupervisorError(
                        f"cannot listen on {h} port {port}: {exc.strerror}", 2
                    ) from None


def free_port(host: str = "127.0.0.1") -> int:
    """A port that is free on ``host`` now (another process may still take it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def binary_flags(probe: ServerProbe) -> BinaryFlags:
    """A probed llama-server's flags in the form
    :func:`lltui.core.cmdline.launch_spec.build_command` takes."""
    version = probe.version.version if probe.version is not None else None
    from lltui.core.cmdline.flags import pinned_arity

    return BinaryFlags(
        flags=probe.flags,
        env_vars=frozenset(env for _, env in probe.env_vars),
        path=probe.path,
        version=version,
        arity={f: n for f in probe.flags if (n := pinned_arity(f)) is not None},
        env_flags={env: flag for flag, env in probe.env_vars},
    )


def _health_word(result: EndpointResult) -> int | str:
    """``refused``, or the HTTP status: the steps of a start are refused -> 503 -> 200."""
    if result.status == llama_http.DOWN:
        return "refused"
    if result.ok:
        return 200
    return result.http_status if result.http_status is not None else result.status


class Supervisor:
    """One llama-server process: started by :meth:`start`, watched, stopped by :meth:`stop`.

    ``url`` is where ``/health`` is polled (``None``: readiness from the log only, as for a
    UNIX socket). ``on_event`` is called from worker threads with ``spawned``, ``loading``,
    ``ready`` and ``exited``. Use as a context manager to stop the server on the way out.
    """

    def __init__(
        self,
        command: LaunchCommand,
        *,
        url: str | None,
        host: str = "127.0.0.1",
        port: int = 0,
        check_port: bool = True,
        log_lines: int = DEFAULT_LOG_LINES,
        keep_running: bool = False,
        log_file: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        health_interval_s: float = 0.25,
        on_event: Callable[[str], None] | None = None,
        on_line: Callable[[str], None] | None = None,
        parser: LogParser | None = None,
    ) -> None:
        if keep_running and log_file is None:
            raise ValueError("keep_running needs a log_file: a pipe would die with lltui")
        self.command = command
        self.url = url or ""
        self._poll_url = url
        self._host, self._port, self._check_port = host, port, check_port
        self._keep_running = keep_running
        self._log_file = os.fspath(log_file) if log_file is not None else None
        self._environ = dict(os.environ if environ is None else environ)
        self._health_interval = health_interval_s
        self._on_event = on_event
        self._on_line = on_line
        self._lines: deque[str] = deque(maxlen=max(1, log_lines))
        self._parser: LogParser = parser if parser is not None else LogReader()
        self._lock = threading.Lock()  # guards the parser, the lines and the state below
        self._signal_lock = threading.Lock()  # held while signalling or marking the exit
        self._proc: subprocess.Popen[bytes] | None = None
        self._state = "idle"
        self._health: int | str | None = None
        self._first_200: float | None = None
        self._exited_flag = False
        self._stop_requested = False
        self._exit: ServerExit | None = None
        self._spawned = threading.Event()
        self._spawn_error: BaseException | None = None
        self._ready = threading.Event()
        self._done = threading.Event()
        self._hurry = threading.Event()
        self._reader: threading.Thread | None = None

    # -- starting -------------------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        """Check the port, start the server; returns once it runs (not once it is ready)."""
        if self._state != "idle":
            raise SupervisorError("this supervisor has already started a server")
        binary = self.command.argv[0]
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise SupervisorError(f"llama-server not found or not executable: {binary}")
        if self._check_port:
            check_port_free(self._host, self._port)
        self._state = "starting"
        launcher = threading.Thread(target=self._launch, name="llama-server launcher", daemon=True)
        launcher.start()
        if not self._spawned.wait(timeout_s):
            raise SupervisorError("llama-server did not start in time")
        if self._spawn_error is not None:
            self._state = "exited"
            raise SupervisorError(f"cannot start llama-server: {self._spawn_error}")
        if self._poll_url:
            threading.Thread(
                target=self._watch_health, name="llama-server health", daemon=True
            ).start()

    def _launch(self) -> None:
        """Runs on the launcher thread for the child's whole life (see the module docstring)."""
        deathsig = 0 if self._keep_running else int(signal.SIGKILL)
        argv = dies_with_us(list(self.command.argv), deathsig, isolated=True)
        log_fd: int | None = None
        try:
            if self._log_file is not None:
                log_fd = os.open(
                    self._log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600
                )
                self._log_start = os.fstat(log_fd).st_size  # earlier runs' lines are not ours
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_fd if log_fd is not None else subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.command.environ(self._environ),
                start_new_session=True,  # own session and process group
                close_fds=True,
            )
        except (OSError, ValueError) as exc:
            self._spawn_error = exc
            self._spawned.set()
            return
        finally:
            if log_fd is not None:
                os.close(log_fd)
        with self._lock:
            self._proc = proc
            self._state = "loading"
        self._spawned.set()
        self._emit("spawned")
        self._emit("loading")
        reader = threading.Thread(target=self._read_log, name="llama-server log", daemon=True)
        self._reader = reader
        reader.start()
        unreaped = self._wait_exit_unreaped(proc)
        with self._signal_lock:
            self._exited_flag = True
        if unreaped and not self._keep_running:
            self._sweep_group(proc.pid)
        returncode = proc.wait()
        reader.join(timeout=2.0)
        self._finish(returncode)

    @staticmethod
    def _wait_exit_unreaped(proc: subprocess.Popen[bytes]) -> bool:
        """Block until the child exits, leaving it a zombie so its pid stays ours; False
        where it could only be reaped."""
        waitid = getattr(os, "waitid", None)
        if waitid is None:
            proc.wait()
            return False
        try:
            waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            return False
        return True

    @staticmethod
    def _sweep_group(pgid: int) -> None:
        """SIGKILL what is left of the server's process group once the server itself has
        exited: a router's model servers share its group and must not outlive it. The
        server is still an unreaped zombie, so the group id cannot have been reused."""
        signal_group(pgid, signal.SIGKILL)

    def _finish(self, returncode: int) -> None:
        with self._lock:
            lines = list(self._lines)
            stopped = self._stop_requested
            hurried = stopped and self._hurry.is_set() and returncode != 0
            self._exit = ServerExit(
                returncode=returncode,
                reason=exit_reason(
                    returncode, lines, stopped=stopped, supervised=True, hurried=hurried
                ),
                log_tail=tuple(lines[-TAIL_LINES:]),
                stopped=stopped,
                was_ready=self._ready.is_set(),
                pid=self._proc.pid if self._proc else None,
                from_outside=stopped_from_outside(returncode, lines, stopped=stopped),
                hurried=hurried,
            )
            self._state = "exited"
        self._done.set()
        self._emit("exited")

    # -- the log --------------------------------------------------------------------------

    def _read_log(self) -> None:
        proc = self._proc
        assert proc is not None
        if self._log_file is not None:
            self._follow_file(self._log_file)
            return
        stream = proc.stdout
        assert stream is not None
        with stream:
            while True:
                raw = stream.readline(MAX_LINE_CHARS * 4)
                if not raw:
                    break
                self._take_line(raw.decode("utf-8", errors="replace"))

    def _follow_file(self, path: str) -> None:
        """Tail the log file from its end at spawn, until the server has exited and it is read."""
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below; the loop outlives a with block's reading)
        except OSError:
            return
        with f:
            f.seek(self._log_start)
            pending = b""
            while True:
                chunk = f.readline(MAX_LINE_CHARS * 4)
                if chunk:
                    pending += chunk
                    if pending.endswith(b"\n") or len(pending) >= MAX_LINE_CHARS * 4:
                        self._take_line(pending.decode("utf-8", errors="replace"))
                        pending = b""
                    continue
                if self._exited_flag or self._detached:
                    if pending:
                        self._take_line(pending.decode("utf-8", errors="replace"))
                    return
                time.sleep(0.05)

    _detached = False
    _log_start = 0

    def _take_line(self, text: str) -> None:
        line = self.command.mask(text.rstrip("\r\n"))[:MAX_LINE_CHARS]
        with self._lock:
            self._lines.append(line)
            events = self._parser.feed(line)  # each line read once, for all it says
        if self._on_line is not None:
            # a failing listener must not stop this reader: an undrained pipe blocks the server
            with contextlib.suppress(Exception):
                self._on_line(line)
        if "ready" in events:
            self._maybe_ready()

    # -- readiness ------------------------------------------------------------------------

    def _watch_health(self) -> None:
        assert self._poll_url is not None
        # Poll fast at first (a small model is ready in tens of milliseconds), then back off
        # to the interval; the connection closes as soon as the server is ready, because
        # an open keep-alive connection slows llama-server's shutdown.
        delay = HEALTH_FIRST_INTERVAL_S
        with LlamaServerClient(self._poll_url, timeout_s=HEALTH_TIMEOUT_S) as client:
            while True:
                self._note_health(_health_word(client.health()))
                self._maybe_ready()
                if self._done.is_set() or self._ready.is_set():
                    break
                self._done.wait(delay)
                delay = min(delay * 1.5, self._health_interval)

    def _note_health(self, status: int | str) -> None:
        with self._lock:
            self._health = status
            if status == 200 and self._first_200 is None:
                self._first_200 = time.monotonic()

    def _maybe_ready(self) -> None:
        with self._lock:
            if self._ready.is_set() or self._state not in ("loading", "starting"):
                return
            log_ready = self._parser.ready
            if self._poll_url:
                if self._first_200 is None:
                    return
                waited = time.monotonic() - self._first_200
                if not log_ready and waited < READY_LOG_GRACE_S:
                    return
            elif not log_ready:
                return
            self._state = "ready"
            self._ready.set()
        self._emit("ready")

    # -- reading the state ----------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def is_ready(self) -> bool:
        return self._ready.is_set()

    @property
    def exited(self) -> bool:
        return self._done.is_set()

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        """True once ready; False if the server exited first or the time ran out."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            if self._ready.is_set():
                return True
            if self._done.is_set():
                return self._ready.is_set()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._ready.wait(0.05 if left is None else min(0.05, left))

    def wait_exit(self, timeout_s: float | None = None) -> ServerExit | None:
        self._done.wait(timeout_s)
        return self._exit

    def log_tail(self, n: int = TAIL_LINES) -> list[str]:
        with self._lock:
            lines = list(self._lines)
        return lines[-n:] if n > 0 else []

    def summary(self) -> LlamaLogSummary:
        with self._lock:
            return self._parser.summary()

    def facts(self) -> LogFacts:
        """What the log said of memory so far, line by line (buffers, devices, settings)."""
        return self.summary().memory

    def read_log(self, read: Callable[[LogParser], T]) -> T:
        """``read(parser)`` under the lock the log reader feeds it under."""
        with self._lock:
            return read(self._parser)

    def status(self) -> ServerStatus:
        with self._lock:
            return ServerStatus(
                state=self._state,
                pid=self.pid,
                url=self.url,
                health=self._health,
                log=self._parser.summary(),
                exit=self._exit,
            )

    # -- stopping -------------------------------------------------------------------------

    def _signal_group(self, pgid: int, sig: int) -> bool:
        """Signal the server's process group, unless the server has already exited (the
        launcher sweeps its group then, before reaping it)."""
        with self._signal_lock:
            return not self._exited_flag and signal_group(pgid, sig)

    def hurry(self) -> None:
        """Cut the waits of a :meth:`stop` in progress short (a second Ctrl-C)."""
        self._hurry.set()

    def _wait_done(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while not self._done.is_set():
            left = deadline - time.monotonic()
            if left <= 0 or self._hurry.is_set():
                return self._done.is_set()
            self._done.wait(min(0.05, left))
        return True

    def stop(
        self, grace_s: float = 10.0, second_grace_s: float = 3.0, kill_wait_s: float = 5.0
    ) -> ServerExit | None:
        """SIGTERM to the group, up to ``grace_s`` for a clean exit, a second SIGTERM (which
        llama-server honours at once), then SIGKILL. Returns how the server ended."""
        if self._proc is None:
            return self._exit
        with self._lock:
            self._stop_requested = True
            if self._state not in ("exited",):
                self._state = "stopping"
        if not self._done.is_set():
            steps = (
                (signal.SIGTERM, grace_s),
                (signal.SIGTERM, second_grace_s),
                (signal.SIGKILL, kill_wait_s),
            )
            stop_group(self._proc.pid, self._wait_done, steps, send=self._signal_group)
            # a hurried stop (a second signal) cut the waits short, SIGKILL's too: the
            # process is killed, its exit near; wait for it so that it is recorded
            self._done.wait(kill_wait_s)
        return self._exit

    def detach(self) -> None:
        """Leave a ``keep_running`` server running and stop watching it."""
        if not self._keep_running:
            raise SupervisorError("only a server started with keep_running can be left running")
        self._detached = True

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._detached:
            self.stop()

    def _emit(self, event: str) -> None:
        if self._on_event is not None:
            with contextlib.suppress(Exception):
                self._on_event(event)

"""A llama-server lltui follows but did not launch (``watch --llama``, the exporter, a
server found on the GPUs): which process it is, what it planned to hold on each device, and
how full its KV cache is, folded sample after sample.

The plan comes from the server's load log where one can be found (given, the log ``lltui
launch --keep-running`` left, its ``--log-file``, or its stdout/stderr when that is a file),
else from lltui's prediction for its own command line (a router's child, whose output goes
to the router). Either is worked out once per process and again when the log starts over;
a log read while its load was still being written (no compute buffers yet) is read again as
it grows, every few seconds, until the load is whole."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lltui.core.monitor.models import RigSample
from lltui.core.monitor.plan_reality import PlanReality, PlanWatch
from lltui.services.rig import pids_here

if TYPE_CHECKING:  # the memory model is imported once a plan is made (the monitor starts)
    from lltui.core.llama.metrics import SlotState
    from lltui.core.llamalog.models import BufferLine, DevicePlacement, LogFacts, PromptCache
    from lltui.core.memory.kv_fill import KvFill, KvHistory, KvLayout
    from lltui.core.memory.results import FitResult

SERVER_NAMES = ("llama-server",)  # the program a found process must be to be followed
HISTORY = 64  # KV fills kept for the rate (a poll a second: a minute)
# what a plan is made of: the process, its log, the log's size when read (-1: none)
_Key = tuple[int | None, Path | None, int]
RETRY_S = 5.0  # a plan not to be made, or a load still being logged, is tried again this often
CACHE_TAIL_BYTES = 64 * 1024  # a log's last lines read for its prompt cache, at the most


@dataclass(frozen=True, slots=True)
class ServerPlan:
    """What a server planned: bytes per llama.cpp device (host buffers apart), what a token
    takes on each device (for the KV fill), and where the numbers came from."""

    planned: Mapping[str, int]
    kv: KvLayout | None
    source: str  # "log <path>" or "prediction"
    # from a log: the load's buffers per device, and whether the load was whole when read
    placement: tuple[DevicePlacement, ...] = ()
    complete: bool = True


@dataclass(frozen=True, slots=True)
class FollowState:
    """One sample of a followed server: its plan beside its process, and its KV fill."""

    pid: int | None
    plan: PlanReality | None
    kv: KvFill | None
    plan_source: str | None  # where the plan came from; None: none could be made
    layout: KvLayout | None = None  # what a token takes on each device
    prompt_cache: PromptCache | None = None  # its host prompt cache, from its log's lines
    placement: tuple[DevicePlacement, ...] = ()  # its log's buffers per device


def launched_log(url: str) -> Path | None:
    """The log ``lltui launch --keep-running`` left for a loopback server on this port."""
    from lltui.paths import state_dir

    port = _loopback_port(url)
    if port is None:
        return None
    path = state_dir() / f"llama-server-{port}.log"
    return path if path.is_file() else None


def own_argv(pid: int) -> tuple[str, ...] | None:
    """A process's command line, where it is this user's (another user's is never read)."""
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            return None
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(256 * 1024)
    except OSError:
        return None
    return tuple(w.decode("utf-8", "replace") for w in raw.split(b"\0") if w)


def _own_env(pid: int) -> dict[str, str]:
    """A process's LLAMA_ARG_* and device-order variables (this user's process only)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read(1024 * 1024)
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, _, value = item.decode("utf-8", "replace").partition("=")
        if key.startswith(("LLAMA_ARG_", "CUDA_", "HIP_", "ROCR_")):
            out[key] = value
    return out


def url_of_argv(argv: Sequence[str]) -> str:
    """Where a llama-server of this command line answers (llama-server's defaults)."""
    host, port = "127.0.0.1", "8080"
    for i, word in enumerate(argv[:-1]):
        if word == "--host":
            host = argv[i + 1]
        elif word == "--port":
            port = argv[i + 1]
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def is_server(argv: Sequence[str] | None) -> bool:
    return argv is not None and len(argv) > 0 and os.path.basename(argv[0]) in SERVER_NAMES


def pid_of_url(url: str, sample: RigSample) -> int | None:
    """The process on the rig's GPUs that answers at ``url``: one of this user's
    llama-servers whose command line listens on its port (another user's is not read)."""
    try:
        port = urlsplit(url).port or 80
    except ValueError:
        return None
    for pid in sorted({p.pid for g in sample.gpus for p in g.processes}):
        argv = own_argv(pid)
        if is_server(argv) and urlsplit(url_of_argv(argv or ())).port == port:
            return pid
    return None


def pid_listening(port: int) -> int | None:
    """This user's process listening on TCP ``port`` on this machine (a server on loopback
    that holds no GPU memory, or that no GPU source sees): the socket's inode from
    /proc/net/tcp{,6}, then the process holding it among this user's."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    # local address "0100007F:1F90", state 0A: listening
                    if (
                        len(cols) > 9
                        and cols[3] == "0A"
                        and int(cols[1].rsplit(":", 1)[1], 16) == port
                    ):
                        inodes.add(f"socket:[{cols[9]}]")
        except (OSError, ValueError):
            continue
    if not inodes:
        return None
    uid = os.getuid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{entry.name}/fd/{fd}") in inodes:
                    return int(entry.name)
            except OSError:
                continue
    return None


def _loopback_port(url: str) -> int | None:
    from lltui.core.cmdline.address import is_loopback

    try:
        parts = urlsplit(url)
        return parts.port if parts.port and is_loopback(parts.hostname or "") else None
    except ValueError:
        return None


def listening_server(url: str) -> int | None:
    """This user's llama-server listening on this machine at a loopback ``url``, else None
    (a server elsewhere is not looked for here)."""
    port = _loopback_port(url)
    pid = pid_listening(port) if port is not None else None
    return pid if pid is not None and is_server(own_argv(pid)) else None


def log_of_process(pid: int, argv: Sequence[str]) -> Path | None:
    """A server's log: its ``--log-file``, else its stderr or stdout where that is a file."""
    for i, word in enumerate(argv[:-1]):
        if word == "--log-file":
            path = Path(argv[i + 1])
            if not path.is_absolute():
                try:
                    path = Path(os.readlink(f"/proc/{pid}/cwd")) / path
                except OSError:
                    return None
            return path if path.is_file() else None
    for fd in (2, 1):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/") and os.path.isfile(target):
            return Path(target)
    return None


def _planned(result: FitResult | None, logged: Mapping[str, int]) -> dict[str, int]:
    """Bytes per device: as the log printed them, else as predicted; host buffers apart."""
    from lltui.core.llamalog.models import is_host_buffer

    if logged:
        return dict(logged)
    out: dict[str, int] = {}
    for name, _kind, n in result.buffers if result is not None else ():
        if not is_host_buffer(name):
            out[name] = out.get(name, 0) + n
    return out


def plan_of_log(path: Path, *, kv: bool = True) -> ServerPlan | None:
    """The plan of the server that wrote this log (None: not a log lltui can read, or one
    with no load in it yet). ``kv``: with what a token takes on each device, which needs
    the model the log names and lltui's estimate of it; else the log's buffers alone."""
    from lltui.core.llamalog.models import is_host_buffer

    if not kv:
        return _logged_plan(path)
    from lltui.core.memory.kv_fill import kv_layout
    from lltui.services.explain import ExplainFailed, ExplainRequest, explain

    try:
        report = explain(ExplainRequest(str(path), ask_binary=False, model_from_log=True))
    except (ExplainFailed, OSError):
        return None
    logged = _model_bytes_per_device(report.facts.last_load())
    layout = None
    if report.result is not None:
        by_buffer = {b: p.name for p in report.facts.placement() for b in p.buffers}
        names = {
            b: by_buffer.get(b, "CPU" if is_host_buffer(b) else b)
            for b, _, _ in report.result.buffers
        }
        layout = kv_layout(report.result, names)
    return _of_log(path, report.facts, _planned(report.result, logged), layout)


def _logged_plan(path: Path) -> ServerPlan | None:
    """The buffers of a log's last load, per device (no estimate: the memory model stays
    unloaded in a monitor that only holds a found server against its log)."""
    from lltui.core.llamalog.reader import scan_lines
    from lltui.sources.llama.log_file import LogFileError, read_lines

    try:
        facts = scan_lines(read_lines(str(path)))
    except (LogFileError, OSError):
        return None
    return _of_log(path, facts, _model_bytes_per_device(facts.last_load()), None)


def _of_log(
    path: Path, facts: LogFacts, planned: Mapping[str, int], layout: KvLayout | None
) -> ServerPlan | None:
    """The plan of a log's last load; None before it has put anything on a GPU (or a
    whole load that put nothing anywhere: not a load log)."""
    last = facts.last_load()
    # a load is whole once its compute buffers are logged (they come last), its slots are
    # (the server has started), or it failed
    whole = (
        any(b.kind == "compute" for b in last) or facts.slots is not None or bool(facts.failures)
    )
    if not planned and layout is None and not (whole and last):
        return None  # still loading (the host's buffers alone so far), or not a load log
    return ServerPlan(planned, layout, f"log {path}", facts.placement(), whole)


def _model_bytes_per_device(buffers: Iterable[BufferLine]) -> dict[str, int]:
    """The model's own bytes a load's buffers put on each device (the host's apart)."""
    from lltui.core.llamalog.models import is_host_buffer

    logged: dict[str, int] = {}
    for b in buffers:
        if b.part == "model" and not b.superseded and not is_host_buffer(b.device):
            logged[b.device] = logged.get(b.device, 0) + b.logged_bytes
    return logged


def plan_of_argv(
    argv: Sequence[str], env: Mapping[str, str], sample: RigSample | None
) -> ServerPlan | None:
    """lltui's prediction for a server's own command line on the rig watched (None: its
    flags or model cannot be read)."""
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.core.memory.kv_fill import kv_layout
    from lltui.services.fit import FitFailed, FitRequest, fit

    try:
        args = parse_llama_args(argv[1:], env=env, keep_unknown=True)
    except ValueError:
        return None
    if args.model_path is None:
        return None  # a router: its children hold the models
    request = FitRequest(args.model_path, args, sample=sample, watch_rig=sample is not None)
    try:
        result = fit(request).result
    except (FitFailed, OSError, ValueError):
        return None
    return ServerPlan(_planned(result, {}), kv_layout(result), "prediction")


@dataclass(slots=True)
class ServerFollow:
    """One server followed: by URL (its process found on the GPUs by its port), by pid (a
    server found there), or both. ``log``: its log where the caller knows it."""

    url: str | None = None
    pid: int | None = None
    log: Path | None = None
    _plan: ServerPlan | None = None
    _made: _Key | None = None  # what the plan shown was made of
    # the process looked up: its pid, command line and log
    _proc: tuple[int | None, tuple[str, ...] | None, Path | None] | None = None
    _watch: PlanWatch | None = None
    _watched: ServerPlan | None = None  # the plan the watch holds the process to
    _history: KvHistory | None = None  # the last fills, for the rate
    _retry_at: float = 0.0  # no plan could be made: not again before this (monotonic)
    _found: int | None = None  # the pid found by the URL's port, while it holds GPU memory
    _scanned: frozenset[int] = frozenset()  # the GPUs' processes it was last looked for among
    _listener: int | None = None  # the pid listening on a loopback URL's port
    _listen_at: float = 0.0  # when to look for it again, not found (monotonic)
    # made on a thread of its own (``background``: a monitor's poll must not wait on a
    # model's header): the key it is made for, and once done the plan in a 1-tuple
    background: bool = False
    kv: bool = True  # its KV fill is wanted (its /slots are polled): the plan needs a layout
    _cache: PromptCache | None = None  # the prompt cache its log said last
    _cache_at: int = 0  # how far into its log the prompt cache lines were read
    _log_size: int = -1  # its log's size this sample (-1: none), as the plan's check read it
    _aside: tuple[_Key, tuple[ServerPlan | None] | None] | None = None

    @property
    def name(self) -> str:
        from lltui.core.cmdline.address import public_url

        return public_url(self.url) if self.url else f"pid {self.pid}"

    def fold(
        self, sample: RigSample | None, slots: Sequence[SlotState] | None, t: float
    ) -> FollowState:
        """The plan against ``sample`` (the process's memory per GPU) and the KV fill of
        ``slots`` (a ``/slots`` answer at monotonic ``t``)."""
        pid = self.pid
        # a rig whose processes are this machine's: the server's memory is read there (a
        # simulated or remote rig's processes are not ours, nor its devices the server's)
        rig = sample if sample is not None and pids_here(sample.info.source) else None
        if pid is None and rig is not None and self.url is not None:
            held = frozenset(p.pid for g in rig.gpus for p in g.processes)
            if self._found not in held and held != self._scanned:
                # each process's command line read again only when the processes change
                self._scanned, self._found = held, pid_of_url(self.url, rig)
            pid = self._found
        if pid is None and self.url is not None:
            pid = self._listening()  # on loopback, on no GPU the source sees
        plan = self._plan_for(pid, rig)
        reality = None
        if plan is not None and pid is not None and rig is not None:
            if self._watch is None or self._watch.pid != pid or self._watched is not plan:
                self._watch, self._watched = PlanWatch(self.name, pid, plan.planned), plan
            reality = self._watch.fold(rig)
        fill = None
        if plan is not None and plan.kv is not None and slots is not None:
            if self._history is None:
                from lltui.core.memory.kv_fill import KvHistory

                self._history = KvHistory(HISTORY)
            ctx = [s.n_ctx for s in slots]
            fill = self._history.fold(plan.kv, [s.n_prompt_tokens for s in slots], ctx, t)
        cache = self._prompt_cache()
        if plan is None:
            return FollowState(pid, reality, fill, None, prompt_cache=cache)
        return FollowState(pid, reality, fill, plan.source, plan.kv, cache, plan.placement)

    def _prompt_cache(self) -> PromptCache | None:
        """The last ``cache state`` line of the server's log: its tail at first, then the
        lines written since (a few each request; past the tail's size, the tail)."""
        log = self._proc[2] if self._proc is not None else None
        if log is None or self._log_size == self._cache_at:  # nothing written since
            return self._cache
        try:
            with open(log, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._cache_at:  # the log started over
                    self._cache_at, self._cache = 0, None
                start = max(self._cache_at, size - CACHE_TAIL_BYTES)
                if start >= size:
                    return self._cache
                f.seek(start)
                raw = f.read(size - start)
        except OSError:
            return self._cache
        # whole lines only: a line still being written is read with the next sample
        whole = raw[: raw.rfind(b"\n") + 1]
        self._cache_at = start + len(whole)
        if b"cache state" in whole or b"prompt cache" in whole:
            from lltui.core.llamalog.reader import parse_log

            found = parse_log(whole.decode("utf-8", "replace")).prompt_cache
            self._cache = found or self._cache
        return self._cache

    def _listening(self) -> int | None:
        """The pid behind a loopback URL, looked up once (again once that process is gone)."""
        port = _loopback_port(self.url or "")
        if port is None:
            return None
        if self._listener is None or not os.path.exists(f"/proc/{self._listener}"):
            now = time.monotonic()
            if now < self._listen_at:  # not found lately: not a scan of /proc each tick
                return None
            self._listener, self._listen_at = pid_listening(port), now + RETRY_S
        return self._listener

    def _plan_for(self, pid: int | None, sample: RigSample | None) -> ServerPlan | None:
        """Made once per process and log (again when the log starts over: a restart)."""
        if self._proc is None or pid != self._proc[0]:  # looked up once per process
            argv = own_argv(pid) if pid is not None else None
            log = self.log or (launched_log(self.url) if self.url else None)
            if log is None and pid is not None and argv is not None:
                log = log_of_process(pid, argv)
            self._proc = (pid, argv, log)
        _, argv, log = self._proc
        try:
            size = os.stat(log).st_size if log is not None else -1
        except OSError:
            size = -1
        self._log_size = size
        now = time.monotonic()
        key = (pid, log, size)
        plan = self._plan
        if plan is not None and self._same_load(key):
            # one read before the load's end is read again as the log grows
            if plan.complete or self._made == key or now < self._retry_at:
                return plan
        elif now < self._retry_at:  # none could be made lately: not again each sample
            return None
        if self.background:  # a header read can take seconds: not on the caller's poll
            return self._plan_aside(key, argv, sample, now)
        return self._keep(key, _make_plan(key, argv, sample, self.kv), now)

    def _plan_aside(
        self,
        key: _Key,
        argv: tuple[str, ...] | None,
        sample: RigSample | None,
        now: float,
    ) -> ServerPlan | None:
        """The plan made on a thread of its own; until it is (one at a time), the one made
        before of the same process and log, else None. A log that grows meanwhile (a server
        loading, or serving) is the same process's: what the thread made of it stands, with
        the size it read."""
        done = self._aside
        if done is not None and done[0][:2] == key[:2]:
            if done[1] is None:
                return self._standing(key)  # still being made
            self._aside = None
            return self._keep(done[0], done[1][0], now)
        self._aside = (key, None)

        def make() -> None:
            plan = _make_plan(key, argv, sample, self.kv)
            if self._aside is not None and self._aside[0] == key:  # not let go meanwhile
                self._aside = (key, (plan,))

        threading.Thread(target=make, name="lltui-server-plan", daemon=True).start()
        return self._standing(key)

    def _standing(self, key: _Key) -> ServerPlan | None:
        """The plan made before of the same load (read again as it is logged), else None."""
        return self._plan if self._same_load(key) else None

    def _same_load(self, key: _Key) -> bool:
        """Whether ``key`` is the plan's process and log, grown since (not started over)."""
        made = self._made
        return made is not None and made[:2] == key[:2] and key[2] >= made[2]

    def _keep(self, key: _Key, plan: ServerPlan | None, now: float) -> ServerPlan | None:
        if plan is None:
            self._retry_at = now + RETRY_S
            return self._standing(key)
        if not plan.complete:  # read again as the load goes on, but not each sample
            self._retry_at = now + RETRY_S
        if not self._same_load(key):
            self._history = None  # another process's, or another load's: a new history
        self._plan, self._made = plan, key
        return plan


def _make_plan(
    key: _Key,
    argv: tuple[str, ...] | None,
    sample: RigSample | None,
    kv: bool,
) -> ServerPlan | None:
    """A server's plan from its log, else from its own command line."""
    pid, log, _size = key
    plan = plan_of_log(log, kv=kv) if log is not None else None
    if plan is None and pid is not None and argv is not None and is_server(argv):
        plan = plan_of_argv(argv, _own_env(pid), sample)
    return plan


class FoundServers:
    """This user's llama-servers on the rig's GPUs, each followed by its pid for as long as
    it holds GPU memory (a router's children too: each is a llama-server of its own)."""

    def __init__(self, *, background: bool = False) -> None:
        self.background = background  # plans made on a thread of their own (see ServerFollow)
        self._follows: dict[int, ServerFollow] = {}
        self._argv: dict[int, tuple[str, ...] | None] = {}  # each pid's, read once

    def fold(
        self, sample: RigSample, skip: Collection[int | None]
    ) -> list[tuple[str, FollowState]]:
        """Each found server but those in ``skip`` (followed otherwise): its name (the URL
        its command line listens on), its state."""
        if not pids_here(sample.info.source):
            return []
        held = {p.pid for g in sample.gpus for p in g.processes}
        self._argv = {p: self._argv[p] if p in self._argv else own_argv(p) for p in held}
        pids = {p: a for p, a in self._argv.items() if is_server(a) and p not in skip}
        for pid in [p for p in self._follows if p not in pids]:
            del self._follows[pid]
        out = []
        for pid, argv in sorted(pids.items()):
            assert argv is not None
            follow = self._follows.get(pid)
            if follow is None:
                # found, not polled: its plan, no KV fill (and so no estimate from a log)
                follow = ServerFollow(url_of_argv(argv), pid, background=self.background, kv=False)
                self._follows[pid] = follow
            out.append((follow.name, follow.fold(sample, None, sample.t)))
        return out

"""The ``smi`` and ``smi:HOST`` sources: ``nvidia-smi`` queries, locally or through ssh.

Every command is an argv list run without a shell. Over ssh the remote side does hand the
command to the user's login shell, so every word we send is checked to hold nothing a shell
would interpret (it is built from our own field table, never from user text).

A remote command bounds its own run: killing a local ssh past its timeout does not end the
command on the host (without a terminal, sshd signals nothing when the session drops), so a
slow host would gather nvidia-smi runs that nobody waits for.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict, Unpack

from lltui.core.monitor.models import (
    GpuSample,
    GpuStatic,
    HostSample,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.monitor.smi_csv import (
    APP_QUERY_FIELDS,
    EVENT_REASON_PREFIX,
    GPU_QUERY_FIELDS,
    THROTTLE_REASON_PREFIX,
    SmiAppRow,
    SmiGpuRow,
    SmiParseError,
    canonical_field,
    gpu_rows,
    parse_apps,
    parse_csv,
    processes_by_gpu,
    unknown_field,
)
from lltui.sources.gpu.base import PROCESS_TTL_S, Clock, SequenceCounter, mono_clock, wall_clock
from lltui.sources.gpu.host_facts import HostSampler
from lltui.sources.proc_group import run_group
from lltui.sources.ssh import SshTarget
from lltui.sources.ssh import check_host as check_host

CSV_FORMAT = "--format=csv,noheader,nounits"

# Words sent to a remote shell: letters, digits and . , _ = - only.
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9._,=-]+\Z")
_CUDA_VERSION = re.compile(r"CUDA Version\s*:\s*([0-9][0-9.]*)")
_NVML_VERSION = re.compile(r"NVML version\s*:\s*([0-9][0-9.]*)", re.IGNORECASE)
# What a host runs, ahead of SECONDS PROGRAM ARGS (through sh, whatever the login shell):
# PROGRAM under coreutils' (or busybox's) timeout, ended after SECONDS; plainly without one.
BOUNDED = (
    "exec",
    "sh",
    "-c",
    """'command -v timeout >/dev/null && exec timeout "$@"; shift; exec "$@"'""",
    "sh",
)


@dataclass(frozen=True, slots=True)
class CommandResult:
    returncode: int
    stdout: str
    stderr: str


# argv, timeout in seconds -> result. Tests inject captured outputs through this.
Runner = Callable[[Sequence[str], float], CommandResult]


def run_command(argv: Sequence[str], timeout: float) -> CommandResult:
    """Run argv without a shell, in a group of its own (stopped whole past the timeout, and
    when lltui exits); a missing program or a timeout is a result, not a raise."""
    try:
        done = run_group(argv, timeout)
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except PermissionError:
        return CommandResult(126, "", f"{argv[0]}: permission denied")
    except OSError as exc:
        return CommandResult(126, "", f"{argv[0]}: {exc.strerror or exc}")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]} did not answer within {timeout:g} s")
    return CommandResult(done.returncode, done.stdout or "", done.stderr or "")


def smi_argv(
    args: Sequence[str],
    target: SshTarget | None = None,
    *,
    program: str = "nvidia-smi",
    timeout: float,
) -> list[str]:
    """The argv that runs ``PROGRAM ARGS`` (nvidia-smi, or AMD's amd-smi / rocm-smi) here,
    or on ``target``'s host through its persistent connection. Remotely it ends itself after
    ``timeout`` seconds (rounded up), the caller's own limit (see :data:`BOUNDED`)."""
    if target is None:
        return [program, *args]
    remote = [str(max(1, math.ceil(timeout))), program, *args]
    for word in remote:
        if not _SHELL_SAFE.match(word):
            raise ValueError(f"refusing to send {word!r} to a remote shell")
    return target.argv(*BOUNDED, *remote)


def run_tool(
    run: Runner,
    args: Sequence[str],
    target: SshTarget | None,
    *,
    program: str,
    timeout: float,
) -> CommandResult:
    """Run ``PROGRAM ARGS`` as :func:`smi_argv` builds it. An ssh that could not connect
    through its host's master and says only that the connection closed is asked once more
    without a master, within what is left of ``timeout``: a master (ControlPersist) sends its
    ProxyJump's or ProxyCommand's error to /dev/null, and that error is the reason."""
    started = time.monotonic()
    result = run(smi_argv(args, target, program=program, timeout=timeout), timeout)
    left = timeout - (time.monotonic() - started)
    if (
        target is None
        or target.control_path() is None
        or result.returncode != 255
        or ssh_reason(result.stderr)[0]
        or not result.stderr.strip()  # (255 is also nvidia-smi's own "Other error")
        or left < 1
    ):
        return result
    direct = SshTarget(target.host, target.port, target.config_file, multiplex=False)
    again = run(smi_argv(args, direct, program=program, timeout=left), left)
    return result if again.returncode == 124 else again


# what ssh prints (in a banner of @s) where a host's key is not the one known_hosts holds
CHANGED_KEY = "REMOTE HOST IDENTIFICATION HAS CHANGED"
# what ssh says when the connection its proxy (ProxyJump, ProxyCommand) gave it closed: the
# proxy's own line, before it, says why
_PROXY_CLOSED = re.compile(
    r"^(?:kex_exchange_identification|banner exchange): |^Connection (?:closed|reset) by UNKNOWN"
)


def silent(ssh: SshTarget | None, tool: str, given: float, whole: float) -> str:
    """Who did not answer within ``given`` seconds (of ``whole``): on a host, ``tool`` where
    the host's ssh connection is up (ssh logged in; the tool hung), ssh where none came up,
    and both where no connection is kept (it cannot tell)."""
    if ssh is None:
        return late(tool, given, whole)
    host = ssh.label
    if ssh.control_path() is None:
        return f"{late(host, given, whole)} (ssh or {tool})"
    if ssh.master_running(timeout=2.0):
        return f"{late(f'{tool} on {host}', given, whole)} (its ssh connection is up)"
    return late("ssh", given, whole)


def late(who: str, given: float, whole: float) -> str:
    """``who`` did not answer within the ``given`` seconds: the ``whole`` timeout, or what
    the commands before it left of it (none: it was not run)."""
    if given <= 0:
        return f"{who} was not run: the commands before it took all of {whole:g} s"
    if whole - given < 0.05:
        return f"{who} did not answer within {whole:g} s"
    return f"{who} did not answer within the {given:.1f} s left of {whole:g} s"


def telling_line(text: str, limit: int = 200) -> str:
    """The most telling line of a command's output: the last non-empty one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:limit] if lines else ""


def ssh_reason(stderr: str) -> tuple[str, bool]:
    """ssh's last line that says why it failed (empty when it only says that its proxy's
    connection closed), and whether such a line followed it (the reason is its proxy's)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    told = [line for line in lines if not _PROXY_CLOSED.match(line)]
    if not told:
        return "", False
    return told[-1][:200], told[-1] != lines[-1]


def ssh_failed(result: CommandResult, host: str | None) -> bool:
    """Whether ssh failed to reach ``host`` (exit 255, its reason on stderr), not the command
    it ran (a tool exiting 255 itself, as nvidia-smi's "Other error", says why on stdout)."""
    err, out = telling_line(result.stderr), telling_line(result.stdout)
    return host is not None and result.returncode == 255 and bool(err or not out)


def command_failure(tool: str, result: CommandResult, host: str | None) -> str:
    """One line for a failed run of ``tool`` here or on ``host``, in words."""
    where = "here" if host is None else f"on {host}"
    out = telling_line(result.stdout)
    err = telling_line(result.stderr)
    if ssh_failed(result, host):
        if CHANGED_KEY in result.stderr:  # not an unknown key: a warning, kept whole
            return (
                f"ssh to {host} failed: its host key has CHANGED since it was last seen "
                "(someone may be in the middle); check it before trusting it again"
            )
        reason, proxied = ssh_reason(result.stderr)
        if proxied:
            return f"ssh to {host} failed at its jump host (ProxyJump/ProxyCommand): {reason}"
        if reason.startswith("ssh: "):  # ssh's own line names the host and says why
            return reason
        return f"ssh to {host} failed: {reason or err or 'no reason given'}"
    if result.returncode == 127:
        return f"{tool} is not installed {where}" + (f" ({err})" if err and host else "")
    if result.returncode == 124:
        return err or f"{tool} did not answer {where}"
    return f"{tool} failed {where}: {out or err or f'exit status {result.returncode}'}"


class ToolOptions(TypedDict, total=False):
    """What a :class:`ToolSource` may be given besides its host (defaults: its __init__)."""

    port: int | None
    runner: Runner | None
    timeout: float | None  # an open's, a poll's commands; 10 s here, 20 s on a host
    which: Callable[[str], str | None]
    host_sampler: HostSampler | None
    clock: Clock
    wall: Clock
    process_ttl_s: float


class ToolSource:
    """What the sources that run a vendor's tool (nvidia-smi, amd-smi, rocm-smi) here or on
    ``host`` over ssh share: the host and its one persistent connection (closed by close()),
    one timeout that an open's or a poll's commands share (:meth:`_start`, :meth:`_call`),
    the host's sampler (local only), the clocks and the sample numbers."""

    prefix = ""  # the source's name here; ``PREFIX:HOST`` on a host

    def __init__(self, host: str | None = None, **options: Unpack[ToolOptions]) -> None:
        self.host = check_host(host) if host is not None else None
        self.ssh = SshTarget(self.host, options.get("port")) if self.host is not None else None
        self.name = self.prefix if self.ssh is None else f"{self.prefix}:{self.ssh.label}"
        self._run = options.get("runner") or run_command
        timeout = options.get("timeout")
        self._timeout = timeout if timeout is not None else (10.0 if host is None else 20.0)
        self._which = options.get("which", shutil.which)
        self._host_sampler = options.get("host_sampler")
        self._clock = options.get("clock", mono_clock)
        self._wall = options.get("wall", wall_clock)
        self.process_ttl_s = options.get("process_ttl_s", PROCESS_TTL_S)
        self._info: RigInfo | None = None
        self._seq = SequenceCounter()
        # one open's or poll's commands share its timeout (a host answering each in 2 s of
        # a 5 s poll was called down after four); the first poll takes what open() read
        self._deadline = 0.0

    def _where(self) -> str:
        return "here" if self.host is None else f"on {self.host}"

    def _failure(self, tool: str, result: CommandResult) -> str:
        return command_failure(tool, result, self.host)

    def _start(self) -> None:
        """Start the timeout of an open's or a poll's commands."""
        self._deadline = time.monotonic() + self._timeout

    def _call(self, tool: str, *args: str) -> CommandResult:
        """Run ``tool ARGS`` with what is left of this open's or poll's timeout."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            return CommandResult(124, "", late(f"{tool} {self._where()}", 0.0, self._timeout))
        result = run_tool(self._run, args, self.ssh, program=tool, timeout=left)
        argv0 = tool if self.ssh is None else "ssh"
        if result.returncode == 124 and result.stderr.startswith(f"{argv0} did not answer"):
            return replace(result, stderr=self._silent(tool, left))
        return result

    def _silent(self, tool: str, given: float) -> str:
        return silent(self.ssh, tool, given, self._timeout)

    def _hostname(self) -> str | None:
        if self.host is not None:
            return self.host.rsplit("@", 1)[-1]
        return self._host().sample().hostname

    def _host(self) -> HostSampler:
        if self._host_sampler is None:  # built on first use: it primes the host's CPU counter
            self._host_sampler = HostSampler()
        return self._host_sampler

    def _rig_sample(
        self, now: float, wall: float, gpus: list[GpuSample], error: str | None
    ) -> RigSample:
        """A poll's sample, numbered; the host's CPU and memory where the GPUs are local."""
        assert self._info is not None
        return RigSample(
            seq=self._seq.next(),
            t=now,
            wall=wall,
            info=self._info,
            gpus=tuple(gpus),
            host=self._host().sample() if self.host is None else HostSample(),
            error=error,
        )

    def close(self) -> None:
        self._info = None
        if self.ssh is not None:
            self.ssh.close()  # the host's persistent connection ends with the source


class SmiSource(ToolSource):
    """GPUs as ``nvidia-smi`` reports them, on this machine or on ``host`` over ssh.

    Fields an older driver rejects are dropped (and remembered) the first time it rejects
    them. Local samples carry the host's CPU/RAM and process details; remote ones carry
    what nvidia-smi says and None for the host.
    """

    prefix = "smi"

    def __init__(self, host: str | None = None, **options: Unpack[ToolOptions]) -> None:
        super().__init__(host, **options)
        self._apps: tuple[SmiAppRow, ...] = ()
        self._apps_t: float | None = None
        self._gpu_fields: list[str] = list(GPU_QUERY_FIELDS)
        self._app_fields: list[str] = list(APP_QUERY_FIELDS)
        self.dropped_fields: list[str] = []  # fields this driver rejected, in order
        self._statics: dict[str, GpuStatic] = {}
        self._opened_rows: tuple[tuple[SmiGpuRow, ...], str] | None = None

    # -- commands ------------------------------------------------------------------------
    def _query(self, flag: str, fields: list[str]) -> tuple[str, list[str]]:
        """Run one query; on ``Field "x" is not a valid field to query`` drop x (a rejected
        ``clocks_event_reasons.*`` swaps in the older ``clocks_throttle_reasons.*`` names)
        and retry. Each rejected field costs one retry; the field list bounds them."""
        for _ in range(len(fields) + 2):
            result = self._call("nvidia-smi", f"{flag}={','.join(fields)}", CSV_FORMAT)
            if result.returncode == 0:
                return result.stdout, fields
            rejected = unknown_field(result.stdout + "\n" + result.stderr)
            if rejected is None or rejected not in fields or len(fields) == 1:
                raise SourceUnavailable(self._failure("nvidia-smi", result))
            if rejected.startswith(EVENT_REASON_PREFIX):
                # Drivers before 535 call the whole family clocks_throttle_reasons.*
                fields = [
                    THROTTLE_REASON_PREFIX + f[len(EVENT_REASON_PREFIX) :]
                    if f.startswith(EVENT_REASON_PREFIX)
                    else f
                    for f in fields
                ]
            else:
                self.dropped_fields.append(rejected)
                fields = [f for f in fields if f != rejected]
        raise SourceUnavailable(f"nvidia-smi {self._where()} rejected every field asked for")

    def _gpu_rows(self) -> tuple[tuple[SmiGpuRow, ...], str]:
        stdout, self._gpu_fields = self._query("--query-gpu", self._gpu_fields)
        try:
            table = parse_csv(stdout, self._gpu_fields)
        except SmiParseError as exc:
            if "no devices were found" in stdout.lower():
                raise SourceUnavailable(f"nvidia-smi finds no GPU {self._where()}") from None
            raise SourceUnavailable(f"nvidia-smi output {self._where()}: {exc}") from None
        rows = gpu_rows(table)
        # Lines that are not rows (a GPU nvidia-smi cannot reach prints a sentence instead).
        chatter = [
            line.strip()
            for line in stdout.splitlines()
            if line.strip() and "," not in line and not line.strip().startswith("[")
        ]
        return rows, telling_line("\n".join(chatter))

    def _versions(self) -> tuple[str | None, str | None]:
        """CUDA and NVML versions from ``nvidia-smi --version`` (drivers 525 and later);
        None when this driver does not print them."""
        result = self._call("nvidia-smi", "--version")
        if result.returncode != 0:  # (or the poll's time is up: its GPUs matter more)
            return None, None
        cuda = _CUDA_VERSION.search(result.stdout)
        nvml = _NVML_VERSION.search(result.stdout)
        return (cuda.group(1) if cuda else None, nvml.group(1) if nvml else None)

    # -- GpuSource -----------------------------------------------------------------------
    def open(self) -> RigInfo:
        if self.host is None and self._which("nvidia-smi") is None:
            raise SourceUnavailable(
                "nvidia-smi is not on PATH here (is the NVIDIA driver installed?)"
            )
        self._start()
        self._opened_rows = None
        rows, chatter = self._gpu_rows()
        if not rows:
            raise SourceUnavailable(f"nvidia-smi lists no GPU {self._where()}")
        statics = tuple(sorted((r.static for r in rows), key=lambda s: s.index))
        self._statics = {self._key(s): s for s in statics}
        cuda, nvml = self._versions()
        self._info = RigInfo(
            source=self.name,
            driver_version=next((r.driver_version for r in rows if r.driver_version), None),
            cuda_version=cuda,
            nvml_version=nvml,
            hostname=self._hostname(),
            gpus=statics,
            hints=self._hints(),
        )
        self._opened_rows = rows, chatter
        return self._info

    def _hints(self) -> tuple[str, ...]:
        if not self.dropped_fields:
            return ()
        names = ", ".join(canonical_field(f)[0] for f in self.dropped_fields)
        return (f"this nvidia-smi does not report: {names}",)

    @staticmethod
    def _key(static: GpuStatic) -> str:
        return static.uuid or static.pci_bus_id or f"#{static.index}"

    def _known(self, row: GpuStatic) -> GpuStatic | None:
        """The GPU seen at open that a row is about: by UUID, else bus id, else (for a row
        whose UUID cannot be read, as on a GPU that needs a reset) by index."""
        for static in self._statics.values():
            if row.uuid and static.uuid == row.uuid:
                return static
        for static in self._statics.values():
            if row.pci_bus_id and static.pci_bus_id.lower() == row.pci_bus_id.lower():
                return static
        if not row.uuid:
            for static in self._statics.values():
                if static.index == row.index:
                    return static
        return None

    def poll(self) -> RigSample:
        if self._info is None:
            self.open()
        assert self._info is not None
        opened, self._opened_rows = self._opened_rows, None
        if opened is not None and time.monotonic() < self._deadline:
            rows, chatter = opened  # open() read them within this poll's time
        else:
            self._start()
            rows, chatter = self._gpu_rows()
        now, wall = self._clock(), self._wall()
        errors: list[str] = []
        # processes change slowly and cost a second nvidia-smi run (an ssh session remotely)
        if self._apps_t is None or now - self._apps_t >= self.process_ttl_s:
            self._apps_t = now
            try:
                stdout, self._app_fields = self._query("--query-compute-apps", self._app_fields)
                self._apps = tuple(parse_apps(stdout, self._app_fields))
            except (SourceUnavailable, SmiParseError) as exc:
                self._apps = ()
                errors.append(f"process list: {exc}")
        apps = self._apps

        seen: dict[str, GpuSample] = {}
        new_statics: list[GpuStatic] = []
        for row in rows:
            static = self._known(row.static)
            if static is None:  # attached since open: learn it
                static = row.static
                self._statics[self._key(static)] = static
                new_statics.append(static)
            seen[self._key(static)] = replace(row.sample, info=static)
        if new_statics or self._hints() != self._info.hints:
            self._info = replace(
                self._info,
                gpus=tuple(sorted(self._statics.values(), key=lambda s: s.index)),
                hints=self._hints(),
            )
        statics = self._info.gpus
        sampler = self._host() if self.host is None else None
        procs = processes_by_gpu(apps, statics)
        if sampler is not None and procs:
            # enrich all at once: the sampler keeps only the pids of its latest call
            enriched = iter(sampler.enrich([p for ps in procs.values() for p in ps]))
            procs = {gpu: tuple(next(enriched) for _ in ps) for gpu, ps in procs.items()}
        gpus = []
        for static in statics:
            sample = seen.get(self._key(static))
            if sample is None:
                reason = "missing from nvidia-smi output" + (f" ({chatter})" if chatter else "")
                gpus.append(GpuSample(info=static, lost=True, error=reason))
                continue
            gpus.append(replace(sample, processes=procs.get(static.index, ())))
        return self._rig_sample(now, wall, gpus, "; ".join(errors) or None)

"""Summaries of NCCL_DEBUG=INFO logs: version, ranks, channels, transports, network, warnings.

NCCL prefixes each record with ``host:pid:tid [cudaDev]`` and a level (``NCCL INFO``,
``NCCL WARN``; NCCL before 2.4 printed the level without the ``NCCL`` token). Launchers add
their own prefix in front (Open MPI ``[1,0]<stdout>:``, Slurm ``0: ``, torchrun
``[default0]:``, Ray ``(Worker pid=1)``), so records are searched for inside each line rather
than anchored at its start. A line with no record right after a long WARN line is the rest of
that WARN, hard-wrapped by a terminal or a paste, and is joined back onto it.

Input is an iterable of lines, so a log of any size is read in one pass; what is kept of it
(WARN and error lines) is capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.nccl.enums import RESULT_NAMES
from lltui.core.text import counted

MAX_KEPT_LINES = 2000  # WARN and error lines kept; the totals count every one
MAX_LINE_CHARS = 4096  # a longer line is cut: no NCCL record is that long
_WRAP_MIN_CHARS = 60  # a line shorter than this was not hard-wrapped
_MAX_CONTINUATIONS = 3

# ":pid:tid [dev] (file.cc:123 )?(NCCL )?LEVEL message", found first; the host name is read
# backwards from where it starts. Searching for the host first would rescan every long run
# of non-space characters from each of its positions. NCCL 2.30 names the function after a
# WARN's file and line ("net.cc:541 (ncclNetSocketTest) NCCL WARN"); a TRACE gives the
# milliseconds since init before its function and line ("[0] 1520.25 func:88 NCCL TRACE").
_RECORD_TAIL = re.compile(
    r":(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>[^\]\s]{0,16})\] (?:\d+\.\d+ )?"
    r"(?:(?P<src>[\w./+-]+:\d+) (?:\(\S*?\) )?)?(?P<nccl>NCCL )?"
    r"(?P<level>INFO|WARN|TRACE|ABORT)\b ?(?P<msg>.*)$"
)
_HOST_STOP = frozenset(" \t:[]()")
_MAX_HOST_CHARS = 255
# The same without the host prefix: only with the NCCL token, which makes it unambiguous.
_BARE_RECORD = re.compile(r"\bNCCL (?P<level>INFO|WARN|TRACE|ABORT)\b ?(?P<msg>.*)$")
# Launcher prefixes, for lines that hold no record (continuations, error lines).
LAUNCHER_PREFIX = re.compile(
    r"^(?:\s*>)*\s*"
    r"(?:\[\d+,\d+\]<\w+>:|\d+:(?=\s|#|$)|\[(?:default|rank)?\d+\]:|\(\w+ pid=\d+\))?"
    r"\s*"
)

_VERSION = re.compile(r"\bNCCL version (?P<v>\d+\.\d+\.\d+\S*)")
_CUDA_DRIVER = re.compile(r"\bcuda ?Driver ?Version:? (?P<v>\d+)", re.IGNORECASE)
_NETWORK = re.compile(r"\bUsing (?:internal )?network (?P<net>\S.*?)[\s.]*$", re.IGNORECASE)
# "Could not find: libnccl-net.so. Using internal network plugin.": which plugin is not said
_NOT_A_NETWORK = ("plugin", "plugins")
# "with error 12, opcode 0, ..." (NCCL's own IB transport), "with status=12 opcode=0 ..."
# (NCCL 2.19+ and the IB plugins built from it) or "with status=IBV_WC_RETRY_EXC_ERR(12)
# opcode=IBV_WC_SEND(0) vendor_err=129" (NCCL 2.28.7+)
_IB_COMPLETION = re.compile(
    r"Got completion (?:from peer (?P<peer>\S+) )?with (?:error |status=)(?:\w+\()?(?P<err>\d+)"
    r"(?:.*?vendor[ _]err[ =](?P<vendor>\d+))?",
    re.DOTALL,
)
_NET_PREFIX = re.compile(r"\bNET/(?P<net>[A-Za-z][\w-]*)\s*:")
_NET_DEVICES = re.compile(r"\bNET/(?P<net>[A-Za-z][\w-]*) ?: Using (?P<devs>\[\d+\].*)$")
_VIA = re.compile(r"\bvia (?P<t>\S.*?)\s*$")
_CHANNEL_VIA = re.compile(r"\b(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? : .*\bvia ")
_CHANNEL_LIST = re.compile(
    r"\b(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<total>\d+))? :(?P<ranks>(?:\s+\d+)+)\s*$"
)
_COLL_CHANNELS = re.compile(r"\b(?P<n>\d+) coll channels\b")
_NRANKS = re.compile(r"\bnranks (?P<n>\d+)\b", re.IGNORECASE)
_RANK = re.compile(r"\brank (?P<r>\d+) nranks \d+", re.IGNORECASE)
_NNODES = re.compile(r"\bnRanks \d+ nNodes (?P<n>\d+)\b")
_ENV_SET = re.compile(r"\b(?P<name>NCCL_\w+) set by environment to (?P<value>.*?)\.?\s*$")
_ERROR_TRACE = re.compile(
    r"^(?P<where>[\w./+-]+\.(?:cc|cu|c|cpp|h)):(?P<line>\d+) -> (?P<code>\d+)"
)
_ERROR_LINE = re.compile(
    r"NCCL error|NCCL failure|CUDA failure|\bnccl(?:UnhandledCuda|System|Internal|Remote)Error\b"
    r"|\bnccl(?:InvalidArgument|InvalidUsage)\b|unhandled (?:cuda|system) error"
    r"|Watchdog caught collective operation timeout|DistBackendError"
    r"|NCCL communicator was aborted",
    re.IGNORECASE,
)
_NOT_A_CONTINUATION = re.compile(
    r"^(?:Traceback\b|File \"|\w[\w.]*(?:Error|Exception|Warning)\b|#|\$|>>>|\S+@\S+[:$#])"
)
# What starts a line of its own in a log: a date or time stamp (bare or bracketed), a
# torchrun rank tag, a glog/c10d severity tag ("[E218 04:54:22.86 ProcessGroupNCCL.cpp:616]")
_LOG_LINE_START = re.compile(
    r"^\[?(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\d\d:\d\d:\d\d\b)"
    r"|^\[(?:rank|default)\d+\]:|^\[?[IWEF]\d{4} \d\d:\d\d:\d\d"
)
# A NET/X line that names a transport NCCL did not take
_NET_NOT_USED = re.compile(r"No device found|Failed to initiali[sz]e", re.IGNORECASE)


# ibv_wc_status (verbs.h): what a failed InfiniBand/RoCE work completion means, in words
IB_WC_STATUS: dict[int, tuple[str, str]] = {
    1: ("IBV_WC_LOC_LEN_ERR", "a message was longer than the receive buffer"),
    2: ("IBV_WC_LOC_QP_OP_ERR", "the local queue pair hit an internal error"),
    4: ("IBV_WC_LOC_PROT_ERR", "a local buffer was not registered for this access"),
    5: (
        "IBV_WC_WR_FLUSH_ERR",
        "work flushed because the queue pair had already failed: look at the first error",
    ),
    7: ("IBV_WC_BAD_RESP_ERR", "the peer answered with something unexpected"),
    8: ("IBV_WC_LOC_ACCESS_ERR", "a local protection error on the buffer"),
    9: ("IBV_WC_REM_INV_REQ_ERR", "the peer found the request invalid"),
    10: (
        "IBV_WC_REM_ACCESS_ERR",
        "the peer refused access to its buffer (key or permissions)",
    ),
    11: ("IBV_WC_REM_OP_ERR", "the peer could not complete the operation"),
    12: (
        "IBV_WC_RETRY_EXC_ERR",
        "transport retries exhausted: the peer never acknowledged (link or switch down, "
        "peer process gone, or a RoCE GID/VLAN/MTU mismatch)",
    ),
    13: (
        "IBV_WC_RNR_RETRY_EXC_ERR",
        "receiver-not-ready retries exhausted: the peer posted no receive in time",
    ),
    16: ("IBV_WC_REM_ABORT_ERR", "the peer aborted the operation"),
    19: ("IBV_WC_FATAL_ERR", "a fatal error in the adapter"),
    20: ("IBV_WC_RESP_TIMEOUT_ERR", "the response timed out"),
    21: ("IBV_WC_GENERAL_ERR", "a general error"),
}


@dataclass(frozen=True, slots=True)
class IbCompletionError:
    """One kind of failed InfiniBand/RoCE completion NCCL reported (``NET/IB : Got completion
    from peer ... with error 12, ... vendor err 129``)."""

    error: int
    vendor_err: int | None = None

    @property
    def name(self) -> str | None:
        known = IB_WC_STATUS.get(self.error)
        return known[0] if known else None

    @property
    def meaning(self) -> str:
        known = IB_WC_STATUS.get(self.error)
        return known[1] if known else "an InfiniBand completion error"


def ib_completion_errors(lines: Iterable[str]) -> tuple[IbCompletionError, ...]:
    """The distinct IB completion errors in WARN lines (wrapped lines already joined)."""
    out: list[IbCompletionError] = []
    for line in lines:
        if "Got completion" not in line:
            continue
        m = _IB_COMPLETION.search(line)
        if m:
            vendor = int(m.group("vendor")) if m.group("vendor") else None
            _add(out, IbCompletionError(int(m.group("err")), vendor))
    return tuple(out)


# codes passed up the stack that are no failure: success, and an operation still in progress
NOT_FAILURES = (None, 0, 7)


@dataclass(frozen=True, slots=True)
class ErrorTrace:
    """One ``file.cc:123 -> 6`` line: where NCCL passed an error code up the stack."""

    where: str
    code: int

    @property
    def name(self) -> str | None:
        return RESULT_NAMES.get(self.code)


@dataclass(frozen=True, slots=True)
class NcclLogSummary:
    nccl_version: str | None  # as printed: "2.25.1+cuda12.2"
    cuda_driver_version: str | None  # "12.2", from cudaDriverVersion 12020
    cuda_driver_code: int | None
    nranks: int | None
    channels: int | None
    transports: tuple[str, ...]  # after "via", as printed, first seen first
    network: str | None  # "IB", "Socket", a plugin's name
    networks: tuple[str, ...]
    warn_lines: tuple[str, ...]
    error_lines: tuple[str, ...]
    warn_total: int
    error_total: int
    hosts: tuple[str, ...]
    pids: tuple[int, ...]
    devices: tuple[str, ...]  # the [cudaDev] field values seen
    ranks_seen: tuple[int, ...] = ()  # ranks whose communicator setup is in the log
    nnodes: int | None = None  # the hosts a communicator spans ("nNodes 2"), lines or not
    host_versions: dict[str, str] = field(default_factory=dict)  # host -> NCCL version printed
    env: dict[str, str] = field(default_factory=dict)  # NCCL_X set by environment to Y
    net_devices: tuple[str, ...] = ()  # "mlx5_0:1/IB", from NET/IB : Using [0]...
    error_trace: tuple[ErrorTrace, ...] = ()
    ib_errors: tuple[IbCompletionError, ...] = ()
    # where NCCL began passing a failure code up its stack (``net.cc:1134 -> 6``), one line
    # per failure: a run can fail with no line printed as an error
    failure_lines: tuple[str, ...] = ()
    failure_total: int = 0
    init_complete: int = 0  # "Init COMPLETE" lines
    lines: int = 0
    record_lines: int = 0  # lines holding an NCCL record

    @property
    def has_nccl(self) -> bool:
        """True when anything in the input came from NCCL."""
        return bool(
            self.record_lines
            or self.nccl_version
            or self.transports
            or self.error_lines
            or self.network
        )

    @property
    def failed(self) -> bool:
        """The run hit an error: an error line, an ABORT, or a failure code passed up."""
        return bool(self.error_total or self.failure_total)

    @property
    def mismatched_versions(self) -> dict[str, list[str]]:
        """NCCL version -> the hosts running it, where hosts run different versions (NCCL
        compares the version number, not the +cuda build, and fails init on a mismatch)."""
        by_version: dict[str, list[str]] = {}
        for host, version in self.host_versions.items():
            by_version.setdefault(version, []).append(host)
        return by_version if len({v.split("+")[0] for v in by_version}) > 1 else {}

    @property
    def transport_classes(self) -> tuple[str, ...]:
        """``P2P``, ``SHM``, ``NET``, ... from the transports, first seen first."""
        out: list[str] = []
        for t in self.transports:
            # NCCL before 2.8 said "direct shared memory" for SHM
            cls = "SHM" if "shared memory" in t else t.split("/", 1)[0].split()[0]
            if cls not in out:
                out.append(cls)
        return tuple(out)

    def to_json(self) -> dict[str, Any]:
        return {
            **fields_of(self, "nccl_version cuda_driver_version nranks channels"),
            "transports": list(self.transports),
            "network": self.network,
            "warn_lines": list(self.warn_lines),
            "error_lines": list(self.error_lines),
            **fields_of(self, "warn_total error_total"),
            "transport_classes": list(self.transport_classes),
            "networks": list(self.networks),
            "net_devices": list(self.net_devices),
            "cuda_driver_code": self.cuda_driver_code,
            "hosts": list(self.hosts),
            "pids": list(self.pids),
            "devices": list(self.devices),
            "ranks_seen": list(self.ranks_seen),
            "nnodes": self.nnodes,
            "host_versions": dict(self.host_versions),
            "versions_differ": bool(self.mismatched_versions),
            "env": dict(self.env),
            "error_trace": [fields_of(t, "where code name") for t in self.error_trace],
            "failed": self.failed,
            "failure_lines": list(self.failure_lines),
            "failure_total": self.failure_total,
            "ib_errors": [fields_of(e, "error name meaning vendor_err") for e in self.ib_errors],
            **fields_of(self, "init_complete lines record_lines"),
        }


def strip_launcher_prefix(line: str) -> str:
    """The line without an MPI, Slurm, torchrun or Ray prefix, quote marks and indentation."""
    m = LAUNCHER_PREFIX.match(line)
    return line[m.end() :] if m else line


def decode_cuda_driver(code: int) -> str:
    """12020 -> "12.2", as CUDA encodes it (1000 * major + 10 * minor)."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def _add(seq: list[Any], value: Any) -> None:
    if value not in seq:
        seq.append(value)


class _Distinct:
    """Values in the order first seen, each once, at most MAX_KEPT_LINES of them. A dict, so
    each value costs one lookup: a list searched from its start made a log of a hundred
    thousand hosts take minutes."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen: dict[Any, None] = {}

    def add(self, value: Any) -> None:
        if len(self.seen) < MAX_KEPT_LINES:
            self.seen.setdefault(value, None)

    def __contains__(self, value: object) -> bool:
        return value in self.seen

    def __bool__(self) -> bool:
        return bool(self.seen)

    def list(self) -> list[Any]:
        return list(self.seen)


class _Collector:
    """Mutable state of one pass; frozen into an NcclLogSummary at the end."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.version_fallback: str | None = None
        self.cuda_code: int | None = None
        self.nranks = 0
        self.ranks_seen: set[int] = set()
        self.nnodes = 0
        self.host: str | None = None  # the host of the record being read
        self.host_versions: dict[str, str] = {}
        self.list_ranks = 0
        self.channel_total = 0
        self.channel_ids: set[int] = set()
        self.via_channel_max = -1
        self.coll_channels = 0
        self.transports = _Distinct()
        self.networks = _Distinct()
        self.net_hint = _Distinct()  # NET/X named in a line that does not rule it out
        self.net_using = _Distinct()  # NET/X : Using [0]dev ...
        self.net_devices = _Distinct()
        self.warn: list[str] = []
        self.errors: list[str] = []
        self.warn_total = 0
        self.error_total = 0
        self.hosts = _Distinct()
        self.pids = _Distinct()
        self.devices = _Distinct()
        self.env: dict[str, str] = {}
        self.trace = _Distinct()
        self.trace_code: int | None = None  # the code the last record passed up the stack
        self.failures: list[str] = []  # the first line of each failing chain
        self.failure_total = 0
        self.init_complete = 0
        self.lines = 0
        self.record_lines = 0
        # The WARN or error line being extended by hard-wrapped continuations.
        self.open_kind: str | None = None
        self.open_len = 0
        self.open_continuations = 0

    def keep(self, kind: str, text: str) -> None:
        if kind == "warn":
            self.warn_total += 1
            if len(self.warn) < MAX_KEPT_LINES:
                self.warn.append(text)
                self._open(kind, text)
            else:
                self.open_kind = None
        else:
            self.error_total += 1
            if len(self.errors) < MAX_KEPT_LINES:
                self.errors.append(text)
                self._open(kind, text)
            else:
                self.open_kind = None

    def _open(self, kind: str, text: str) -> None:
        self.open_kind = kind
        self.open_len = len(text)
        self.open_continuations = 0

    def continue_open(self, line: str, rest: str) -> bool:
        """Join ``line`` onto the open WARN or error line when it looks hard-wrapped: right
        after a long one, with no launcher prefix of its own, and not the start of
        something else (a traceback, an error, a prompt)."""
        if (
            self.open_kind is None
            or self.open_len < _WRAP_MIN_CHARS
            or self.open_continuations >= _MAX_CONTINUATIONS
            or not rest.strip()
            or line[: len(line) - len(rest)].strip()
            or _NOT_A_CONTINUATION.match(rest.strip())
            or _LOG_LINE_START.match(rest.strip())
            or _is_error_line(rest)
        ):
            return False
        target = self.warn if self.open_kind == "warn" else self.errors
        target[-1] = target[-1] + "\n" + line
        self.open_len = len(line)
        self.open_continuations += 1
        return True


def _message_facts(c: _Collector, msg: str) -> None:
    """Facts any NCCL message can carry (INFO and WARN alike). Substring checks gate the
    regular expressions: most lines carry none of these facts."""
    if "NCCL version" in msg:
        m = _VERSION.search(msg)
        if m:
            version = m.group("v").rstrip(",.;:)")
            c.version = c.version or version
            if c.host is not None and len(c.host_versions) < MAX_KEPT_LINES:
                c.host_versions.setdefault(c.host, version)
    if c.cuda_code is None and "ersion" in msg:
        m = _CUDA_DRIVER.search(msg)
        if m:
            c.cuda_code = int(m.group("v"))
    if "etwork" in msg:
        m = _NETWORK.search(msg)
        if m and m.group("net").lower() not in _NOT_A_NETWORK:
            c.networks.add(m.group("net"))
    if "NET/" in msg:
        m = _NET_DEVICES.search(msg)
        if m:
            for dev in re.findall(r"\[\d+\](\S+)", m.group("devs")):
                c.net_devices.add(dev)
            # a transport that found devices to use: the best guess without "Using network"
            c.net_using.add(m.group("net"))
        m = _NET_PREFIX.search(msg)
        if m and m.group("net") not in ("Plugin", "OFI") and not _NET_NOT_USED.search(msg):
            c.net_hint.add(m.group("net"))
    if " via " in msg:
        mv = _VIA.search(msg)
        if mv:
            c.transports.add(mv.group("t"))
        mc = _CHANNEL_VIA.search(msg)
        if mc:
            c.via_channel_max = max(c.via_channel_max, int(mc.group("ch")))
    elif "Channel " in msg or "Ring " in msg:
        ml = _CHANNEL_LIST.search(msg)
        if ml:
            c.channel_ids.add(int(ml.group("ch")))
            if ml.group("total"):
                c.channel_total = max(c.channel_total, int(ml.group("total")))
            c.list_ranks = max(c.list_ranks, len(ml.group("ranks").split()))
    if "coll channels" in msg:
        m = _COLL_CHANNELS.search(msg)
        if m:
            c.coll_channels = max(c.coll_channels, int(m.group("n")))
    if "anks " in msg:
        for m in _NRANKS.finditer(msg):
            c.nranks = max(c.nranks, int(m.group("n")))
        m = _RANK.search(msg)
        if m:
            c.ranks_seen.add(int(m.group("r")))
        m = _NNODES.search(msg)
        if m:
            c.nnodes = max(c.nnodes, int(m.group("n")))
    if "set by environment" in msg:
        m = _ENV_SET.search(msg)
        if m:
            c.env[m.group("name")] = m.group("value")
    if " -> " in msg:
        m = _ERROR_TRACE.match(msg)
        if m:
            trace = ErrorTrace(f"{m.group('where')}:{m.group('line')}", int(m.group("code")))
            c.trace.add(trace)
            c.trace_code = trace.code
    if "Init COMPLETE" in msg:
        c.init_complete += 1


def _is_error_line(text: str) -> bool:
    low = text.lower()
    if not any(w in low for w in ("nccl", "cuda", "unhandled", "watchdog", "distbackend")):
        return False
    return _ERROR_LINE.search(text) is not None


def _find_record(line: str) -> tuple[int, re.Match[str]] | None:
    """(where the host name starts, the match of the rest) for an NCCL record in ``line``."""
    for m in _RECORD_TAIL.finditer(line):
        end = m.start()
        i = end
        while i > 0 and end - i < _MAX_HOST_CHARS and line[i - 1] not in _HOST_STOP:
            i -= 1
        if i < end:
            return i, m
    return None


def _feed(c: _Collector, raw: str) -> None:
    line = raw.rstrip("\r\n")
    if len(line) > MAX_LINE_CHARS:
        line = line[:MAX_LINE_CHARS]
    line = line.rstrip()
    c.lines += 1
    has_level = "INFO" in line or "WARN" in line or "TRACE" in line or "ABORT" in line
    rec = _find_record(line) if has_level else None
    if rec is not None:
        start, m = rec
        c.record_lines += 1
        c.host = line[start : m.start()]
        c.hosts.add(c.host)
        pid = int(m.group("pid"))
        c.pids.add(pid)
        c.devices.add(m.group("dev"))
        level, msg, text = m.group("level"), m.group("msg"), line[start:]
    else:
        bare = _BARE_RECORD.search(line) if has_level and "NCCL " in line else None
        if bare:
            c.record_lines += 1
            c.host = None
            level, msg, text = bare.group("level"), bare.group("msg"), line[bare.start() :]
        else:
            level, msg, text = "", "", ""
    if level:
        in_chain = c.trace_code is not None
        c.trace_code = None
        _message_facts(c, msg)
        if c.trace_code not in NOT_FAILURES and not in_chain:
            # NCCL passing an error code up its stack: the run failed here, whatever the
            # level of the line; the rest of the chain is the same failure
            c.failure_total += 1
            if len(c.failures) < MAX_KEPT_LINES:
                c.failures.append(text)
            c.open_kind = None
            return
        if level == "WARN":
            c.keep("warn", text)
        elif level == "ABORT" or (level != "INFO" and _is_error_line(msg)):
            c.keep("error", text)
        else:
            c.open_kind = None
        return
    rest = strip_launcher_prefix(line)
    if c.continue_open(line, rest):
        return
    c.open_kind = None
    if not rest:
        return
    # Lines outside NCCL's records: the version banner NCCL_DEBUG=VERSION prints bare,
    # and the errors frameworks and nccl-tests report about NCCL.
    vm = _VERSION.search(rest) if "NCCL version" in rest else None
    if vm and rest.lstrip().startswith("NCCL version"):
        c.version = c.version or vm.group("v").rstrip(",.;:)")
    elif vm and c.version_fallback is None:
        c.version_fallback = vm.group("v").rstrip(",.;:)")
    if _is_error_line(rest):
        c.keep("error", rest)


def parse_nccl_log(lines: Iterable[str]) -> NcclLogSummary:
    """Summarise an NCCL_DEBUG=INFO log given as lines (with or without their newlines)."""
    c = _Collector()
    for raw in lines:
        _feed(c, raw)
    channels = (
        c.channel_total
        or c.coll_channels
        or len(c.channel_ids)
        or (c.via_channel_max + 1 if c.via_channel_max >= 0 else 0)
    )
    nranks = c.nranks or c.list_ranks or None
    networks = c.networks.list()
    transports = c.transports.list()
    network = networks[0] if networks else None
    if network is None:
        # No "Using network" line: the net transport that was used or talked about.
        net_from_transport = [
            t.split("/")[1] for t in transports if t.startswith("NET/") and t.count("/") >= 1
        ]
        candidates = net_from_transport + c.net_using.list() + c.net_hint.list()
        network = candidates[0] if candidates else None
    return NcclLogSummary(
        nccl_version=c.version or c.version_fallback,
        cuda_driver_version=decode_cuda_driver(c.cuda_code) if c.cuda_code else None,
        cuda_driver_code=c.cuda_code,
        nranks=nranks,
        channels=channels or None,
        transports=tuple(transports),
        network=network,
        networks=tuple(networks),
        warn_lines=tuple(c.warn),
        error_lines=tuple(c.errors),
        warn_total=c.warn_total,
        error_total=c.error_total,
        hosts=tuple(c.hosts.list()),
        pids=tuple(c.pids.list()),
        devices=tuple(c.devices.list()),
        ranks_seen=tuple(sorted(c.ranks_seen)),
        nnodes=c.nnodes or None,
        host_versions=dict(c.host_versions),
        env=dict(c.env),
        net_devices=tuple(c.net_devices.list()),
        error_trace=tuple(c.trace.list()),
        ib_errors=ib_completion_errors(c.warn),
        failure_lines=tuple(c.failures),
        failure_total=c.failure_total,
        init_complete=c.init_complete,
        lines=c.lines,
        record_lines=c.record_lines,
    )


def parse_nccl_log_text(text: str) -> NcclLogSummary:
    return parse_nccl_log(text.splitlines())


def format_log_summary(s: NcclLogSummary) -> str:
    """The summary as a few lines of text for the terminal."""
    head = [f"NCCL {s.nccl_version}" if s.nccl_version else "NCCL version not in the log"]
    if s.cuda_driver_version:
        head.append(f"CUDA driver {s.cuda_driver_version}")
    if s.nranks:
        # nNodes counts hosts with no lines here too; without it the hosts are known only
        # where every rank's lines are here (one rank: its one host)
        every_rank = s.nranks == 1 or len(s.ranks_seen) >= s.nranks
        n = max(s.nnodes, len(s.hosts)) if s.nnodes else len(s.hosts) if every_rank else 0
        hosts = f" on {counted(n, 'host')}" if n else ""
        if s.hosts and n > len(s.hosts):
            hosts += f" (lines from {len(s.hosts)})"
        elif s.hosts and not n:
            hosts = f" (lines from {counted(len(s.hosts), 'host')})"
        head.append(f"{counted(s.nranks, 'rank')}{hosts}")
    if s.channels:
        head.append(counted(s.channels, "channel"))
    out = [" · ".join(head)]
    if s.mismatched_versions:
        shown = "; ".join(f"{v} on {', '.join(h)}" for v, h in s.mismatched_versions.items())
        out.append(
            f"versions    differ between hosts: {shown} (ranks of one communicator need one "
            "NCCL version: init fails with 'Mismatched NCCL version detected')"
        )
    out.append(f"network     {s.network or '-'}")
    out.append(f"transports  {', '.join(s.transports) if s.transports else '-'}")
    if s.env:
        out.append("environment " + " ".join(f"{k}={v}" for k, v in s.env.items()))
    for t in s.error_trace[:5]:
        out.append(f"error code  {t.code} ({t.name or 'unknown'}) passed up at {t.where}")
    for ib in s.ib_errors:
        vendor = f", vendor err {ib.vendor_err}" if ib.vendor_err is not None else ""
        out.append(f"IB error    {ib.error} ({ib.name or 'unknown'}{vendor}): {ib.meaning}")
    out.append(f"warnings    {s.warn_total}")
    for w in s.warn_lines:
        out.append("  " + w.replace("\n", "\n    "))
    if s.warn_total > len(s.warn_lines):
        out.append(f"  ... {s.warn_total - len(s.warn_lines)} more")
    out.append(f"errors      {s.error_total + s.failure_total}")
    for e in s.error_lines:
        out.append("  " + e.replace("\n", "\n    "))
    if s.error_total > len(s.error_lines):
        out.append(f"  ... {s.error_total - len(s.error_lines)} more")
    for f in s.failure_lines:
        out.append(f"  {f}  (a failure passed up NCCL's stack)")
    if s.failure_total > len(s.failure_lines):
        out.append(f"  ... {s.failure_total - len(s.failure_lines)} more")
    return "\n".join(out)

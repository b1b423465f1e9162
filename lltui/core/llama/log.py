"""Parse llama-server's log: where the model went, what --fit did, errors and readiness.

Pure: feed it lines (text log from stderr, or ``--log-jsonl`` lines from stdout) and read a
frozen :class:`LlamaLogSummary`. Works at any verbosity, reporting what the lines gave; the
placement lines need ``-lv 4`` (see ``research/llama-server.md`` section 3).

Buffer sizes are kept per load: each ``load_tensors: loading model tensors`` line (the fit
probes print one too at ``-v``) starts a new set, so the sizes of the real load win. Within one
load, KV and recurrent-state buffers of one name add up (an SWA model has two KV caches);
model, output and compute buffers keep the last value printed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Bounds on what a long-running server's log may make us keep.
MAX_KEPT_LINES = 100


@dataclass(frozen=True, slots=True)
class LogLine:
    """One log line split into its parts. ``level`` is ``I``/``W``/``E``/``D`` or None."""

    message: str
    level: str | None = None
    t_us: int | None = None  # microseconds since the server started, when printed
    prefixed: bool = False


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """A device as ``device_info`` or ``--list-devices`` prints it."""

    name: str  # CUDA0, CPU, RPC0[127.0.0.1:50052]
    description: str
    total_mib: int
    free_mib: int


@dataclass(frozen=True, slots=True)
class CudaDevice:
    """A GPU as ``ggml_cuda_init`` prints it."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    vmm: bool | None = None
    vram_mib: int | None = None


@dataclass(frozen=True, slots=True)
class UsedDevice:
    """``using device ...``: a device the model is loaded onto, with its free memory then."""

    name: str
    description: str
    device_id: str | None
    free_mib: int


@dataclass(frozen=True, slots=True)
class BufferSizes:
    """MiB in one named backend buffer (``CUDA0``, ``CPU_Mapped``, ``RPC0[...]``)."""

    name: str
    model_mib: float = 0.0
    kv_mib: float = 0.0
    compute_mib: float = 0.0
    output_mib: float = 0.0
    rs_mib: float = 0.0

    @property
    def total_mib(self) -> float:
        return self.model_mib + self.kv_mib + self.compute_mib + self.output_mib + self.rs_mib


@dataclass(frozen=True, slots=True)
class DevicePlacement:
    """Buffers grouped by the device that owns them; host buffers go under ``CPU``."""

    name: str
    model_mib: float = 0.0
    kv_mib: float = 0.0
    compute_mib: float = 0.0
    output_mib: float = 0.0
    rs_mib: float = 0.0
    buffers: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()  # from ``layer N assigned to device`` (-v only)
    free_mib: int | None = None  # from ``using device``

    @property
    def total_mib(self) -> float:
        return self.model_mib + self.kv_mib + self.compute_mib + self.output_mib + self.rs_mib


@dataclass(frozen=True, slots=True)
class MemoryBreakdownRow:
    """One row of the memory breakdown table (or its ``--log-jsonl`` object), in MiB."""

    kind: str  # "device", "host" or "buffer_type"
    name: str
    self_mib: int
    model_mib: int
    context_mib: int
    compute_mib: int
    description: str | None = None
    total_mib: int | None = None
    free_mib: int | None = None
    unaccounted_mib: int | None = None


@dataclass(frozen=True, slots=True)
class KvCacheSize:
    """``llama_kv_cache: size = ...``: one KV cache of the context (an SWA model has two)."""

    size_mib: float
    cells: int
    layers: int
    seqs: str  # "4/1" as printed
    k_type: str | None = None
    k_mib: float | None = None
    v_type: str | None = None
    v_mib: float | None = None


@dataclass(frozen=True, slots=True)
class FitDeviceProjection:
    """``- DEV: total, used, free vs. target`` printed by fit before it changes anything."""

    device: str
    total_mib: int
    used_mib: int
    free_mib: int
    target_mib: int


@dataclass(frozen=True, slots=True)
class FitDeviceLayers:
    """``- DEV: N layers (K overflowing), U MiB used, F MiB free``: fit's layer plan."""

    device: str
    layers: int
    used_mib: int
    free_mib: int
    overflowing: int | None = None


@dataclass(frozen=True, slots=True)
class FitSummary:
    """What ``--fit`` decided. ``status``: no_change, changed, failed, error or unknown."""

    ran: bool = False
    status: str = "unknown"
    reason: str | None = None  # why it failed, as printed
    ctx_from: int | None = None
    ctx_to: int | None = None
    ctx_saved_mib: int | None = None
    target_mib: int | None = None
    reduce_by_mib: int | None = None
    projected_used_mib: int | None = None
    projected_free_mib: int | None = None  # free (device) or total (host) memory it compared to
    projected_of: str | None = None  # "device" or "host"
    projections: tuple[FitDeviceProjection, ...] = ()
    device_layers: tuple[FitDeviceLayers, ...] = ()
    seconds: float | None = None


@dataclass(frozen=True, slots=True)
class LogProblem:
    """An error or failure line. ``kind``: oom, load, bind, argument, fit, cuda, abort, error."""

    kind: str
    message: str
    level: str | None = None


@dataclass(frozen=True, slots=True)
class Offload:
    layers_offloaded: int | None = None
    layers_total: int | None = None  # n_layer + 1 (the output layer counts)
    repeating_layers: int | None = None
    output_layer: bool = False


@dataclass(frozen=True, slots=True)
class LlamaLogSummary:
    """Everything the lines fed so far said. Empty fields mean the log did not say."""

    build: str | None = None
    verbosity: int | None = None
    devices: tuple[DeviceInfo, ...] = ()
    cuda_devices: tuple[CudaDevice, ...] = ()
    used_devices: tuple[UsedDevice, ...] = ()
    model_path: str | None = None
    load_mode: str | None = None
    loads: int = 0  # ``loading model tensors`` lines seen (fit probes count at -v)
    offload: Offload = field(default_factory=Offload)
    buffers: tuple[BufferSizes, ...] = ()  # of the last load
    layer_devices: tuple[tuple[int, str], ...] = ()  # (layer, device), last load, -v only
    kv_layer_devices: tuple[tuple[int, str], ...] = ()
    kv_caches: tuple[KvCacheSize, ...] = ()  # of the last load
    context: tuple[tuple[str, str], ...] = ()  # llama_context: key = value
    graph_nodes: int | None = None
    graph_splits: int | None = None
    pipeline_parallel: bool = False
    n_slots: int | None = None
    n_ctx_slot: int | None = None
    fit: FitSummary = field(default_factory=FitSummary)
    memory_breakdown: tuple[MemoryBreakdownRow, ...] = ()  # the last table printed
    model_loaded: bool = False
    listening: tuple[str, ...] = ()  # URLs
    ready: bool = False
    shutting_down: bool = False
    exit_reason: str | None = None  # "model loading error", "HTTP server error", ...
    problems: tuple[LogProblem, ...] = ()
    problems_dropped: int = 0
    warnings: tuple[str, ...] = ()
    warnings_dropped: int = 0

    def context_value(self, key: str) -> str | None:
        for k, v in self.context:
            if k == key:
                return v
        return None

    def context_int(self, key: str) -> int | None:
        value = self.context_value(key)
        try:
            return int(value) if value is not None else None
        except ValueError:
            return None

    @property
    def n_ctx(self) -> int | None:
        return self.context_int("n_ctx")

    @property
    def failed(self) -> bool:
        return self.exit_reason is not None and not self.ready

    def placement(self) -> tuple[DevicePlacement, ...]:
        """Buffers of the last load grouped per device: devices in llama.cpp's order, then CPU."""
        groups: dict[str, dict[str, Any]] = {}
        endpoints = {d.description: d.name for d in self.devices}
        endpoints.update({u.description: u.name for u in self.used_devices})
        for buf in self.buffers:
            dev = device_of_buffer(buf.name, endpoints)
            g = groups.setdefault(
                dev,
                {"model": 0.0, "kv": 0.0, "compute": 0.0, "output": 0.0, "rs": 0.0, "bufs": []},
            )
            g["model"] += buf.model_mib
            g["kv"] += buf.kv_mib
            g["compute"] += buf.compute_mib
            g["output"] += buf.output_mib
            g["rs"] += buf.rs_mib
            g["bufs"].append(buf.name)
        layers: dict[str, list[int]] = {}
        for layer, dev in self.layer_devices:
            layers.setdefault(dev, []).append(layer)
        free = {d.name: d.free_mib for d in self.used_devices}
        # llama.cpp's device order (buffer lines come in no fixed order), the host last.
        rank = {d.name: i for i, d in enumerate(self.used_devices)}
        order = sorted(groups, key=lambda d: (d == "CPU", rank.get(d, len(rank))))
        groups = {d: groups[d] for d in order}
        return tuple(
            DevicePlacement(
                name=dev,
                model_mib=round(g["model"], 2),
                kv_mib=round(g["kv"], 2),
                compute_mib=round(g["compute"], 2),
                output_mib=round(g["output"], 2),
                rs_mib=round(g["rs"], 2),
                buffers=tuple(g["bufs"]),
                layers=tuple(layers.get(dev, ())),
                free_mib=free.get(dev),
            )
            for dev, g in groups.items()
        )

    def ready_devices(self) -> list[dict[str, Any]]:
        """The ``devices`` list of the launcher's ready event."""
        return [
            {
                "name": p.name,
                "model_mib": p.model_mib,
                "kv_mib": p.kv_mib,
                "compute_mib": p.compute_mib,
            }
            for p in self.placement()
        ]


_RPC_BUFFER = re.compile(r"^RPC\d+\[(?P<endpoint>.+)\]$")


def device_of_buffer(name: str, rpc_endpoints: Mapping[str, str] | None = None) -> str:
    """The device owning a backend buffer; host buffers (``CPU_Mapped``, ``CUDA_Host``) -> CPU.

    RPC buffers are named after the remote server's own device index and endpoint
    (``RPC0[127.0.0.1:50052]``), while the device is ``RPC<n>`` with the endpoint as its
    description; ``rpc_endpoints`` (endpoint -> device name) joins the two.
    """
    if name == "CPU" or name.startswith("CPU_") or name.endswith("_Host"):
        return "CPU"
    m = _RPC_BUFFER.match(name)
    if m and rpc_endpoints and m.group("endpoint") in rpc_endpoints:
        return rpc_endpoints[m.group("endpoint")]
    return name


# --- line splitting ----------------------------------------------------------------------

_PREFIX = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ([IWED]) (.*)$", re.DOTALL)
_JSON_LEVELS = {"info": "I", "warn": "W", "error": "E", "debug": "D"}


def split_line(raw: str) -> LogLine:
    """Split the ``M.SS.mmm.uuu L`` prefix off a text line, when it has one."""
    line = raw.rstrip("\r\n")
    m = _PREFIX.match(line)
    if not m:
        return LogLine(message=line)
    minutes, sec, ms, us, level, msg = m.groups()
    t_us = ((int(minutes) * 60 + int(sec)) * 1000 + int(ms)) * 1000 + int(us)
    return LogLine(message=msg, level=level, t_us=t_us, prefixed=True)


def _strip_tag(message: str) -> str:
    """Drop the ``srv``/``cmn``/``slot``/``spec`` tag the server puts before a function name."""
    if len(message) > 5 and message[:4] in ("srv ", "cmn ", "slot", "spec") and message[4] == " ":
        return message[5:].lstrip()
    return message


# --- patterns ----------------------------------------------------------------------------

_FUNC = re.compile(r"^(?P<func>[A-Za-z_~][\w~]*(?:\(\))?):\s?(?P<rest>.*)$", re.DOTALL)
_DEVICE_ROW = re.compile(
    r"^\s*(?:-\s+)?(?P<name>\S+?)\s*:\s+(?P<desc>.*?)\s*"
    r"\((?P<total>\d+) MiB,\s*(?P<free>\d+) MiB free\)\s*$"
)
_CUDA_FOUND = re.compile(r"found (\d+) (?:CUDA|ROCm|MUSA) devices")
_CUDA_DEVICE = re.compile(
    r"^\s*Device\s+(?P<idx>\d+):\s+(?P<name>.+?),\s+compute capability\s+(?P<maj>\d+)\.(?P<min>\d+)"
    r"(?:,\s+VMM:\s+(?P<vmm>\w+))?(?:,\s+VRAM:\s+(?P<vram>\d+)\s+MiB)?"
)
_USING_DEVICE = re.compile(r"using device (?P<name>\S+) \((?P<inner>.*)\) - (?P<free>\d+) MiB free")
_LOAD_START = re.compile(
    r"loading model tensors.*?\((?:load_mode = (?P<mode>[\w+]+)|mmap = (\w+))\)"
)
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_REPEATING = re.compile(r"offloading (\d+) repeating layers to GPU")
_LAYER_DEV = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
_KV_LAYER_DEV = re.compile(r"^layer\s+(\d+): dev = (\S+)")
_BUFFER = re.compile(
    r"^\s*(?P<name>\S+)\s+(?P<kind>model|KV|compute|output|RS)\s+buffer size\s*=\s*"
    r"(?P<mib>-?[\d.]+)\s*MiB"
)
_KV_SIZE = re.compile(
    r"^size\s*=\s*(?P<size>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,\s*"
    r"(?P<seqs>[\d/]+) seqs\)(?:,\s*K \((?P<kt>\w+)\):\s*(?P<k>[\d.]+) MiB)?"
    r"(?:,\s*V \((?P<vt>\w+)\):\s*(?P<v>[\d.]+) MiB)?"
)
_CONTEXT_KV = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*)\s+= (?P<value>.+?)\s*$")
_GRAPH = re.compile(r"graph: nodes = (\d+), splits = (\d+)")
_SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)")
_LOADING_MODEL = re.compile(r"^loading model '(.*)'$")
_LISTENING = re.compile(r"listening on (\S+?)(?: - starting the main loop)?\s*$")
_HTTP_LISTENING = re.compile(r"HTTP server is listening, hostname: (\S+), port: (\d+)")
_EXITING = re.compile(r"exiting due to (.+?)\s*$")
_BUILD = re.compile(r"common_params_print_info: (build .+?)\s*$")
_VERBOSITY = re.compile(r"verbosity = (\d+)")
_BREAKDOWN_ROW = re.compile(r"^\|\s+-\s+(?P<label>.+?)\s+\|\s*(?P<nums>[-\d=+() ]*?)\s*\|\s*$")
_BREAKDOWN_GPU = re.compile(
    r"^(-?\d+)\s*=\s*(-?\d+)\s*\+\s*\(\s*(-?\d+)\s*=\s*(-?\d+)\s*\+\s*(-?\d+)\s*\+\s*(-?\d+)\s*\)"
    r"\s*\+\s*(-?\d+)$"
)
_BREAKDOWN_OTHER = re.compile(r"^(-?\d+)\s*=\s*(-?\d+)\s*\+\s*(-?\d+)\s*\+\s*(-?\d+)$")
_FIT_PROJECTED = re.compile(
    r"projected to use (-?\d+) MiB of (device|host) memory vs\. (-?\d+) MiB of (?:free|total)"
)
_FIT_PROJECTION_ROW = re.compile(
    r"^\s*-\s+(?P<dev>.+?):\s+(?P<total>-?\d+) total,\s+(?P<used>-?\d+) used,\s+"
    r"(?P<free>-?\d+) free vs\. target of\s+(?P<target>-?\d+)"
)
_FIT_LAYERS_ROW = re.compile(
    r"^\s*-\s+(?P<dev>.+?):\s+(?P<layers>\d+) layers(?:\s+\(\s*(?P<over>\d+) overflowing\))?,"
    r"\s+(?P<used>-?\d+) MiB used,\s+(?P<free>-?\d+) MiB free"
)
_FIT_TARGET = re.compile(
    r"cannot meet free memory target of (-?\d+) MiB, need to reduce device memory by (-?\d+) MiB"
)
_FIT_CTX = re.compile(
    r"context size reduced from (\d+) to (\d+) -> need (-?\d+) MiB less memory in total"
)
_FIT_TOOK = re.compile(r"fitting params to free memory took ([\d.]+) seconds")
_ARG_ERROR = re.compile(r"^(?:error: invalid argument: \S+|error while handling argument .*)$")
_OOM = re.compile(
    r"out of memory|insufficient memory|failed to allocate|unable to allocate|cudaMalloc failed",
    re.IGNORECASE,
)


# --- the parser ----------------------------------------------------------------------------


class LlamaLogParser:
    """Feeds on log lines one at a time; :meth:`summary` returns a frozen snapshot.

    ``feed`` returns the names of the events a line raised (``ready``, ``listening``,
    ``model_loaded``, ``error``, ``exit``, ...) so a supervisor can react as lines arrive.
    """

    def __init__(self) -> None:
        self._s: dict[str, Any] = {
            "build": None,
            "verbosity": None,
            "model_path": None,
            "load_mode": None,
            "loads": 0,
            "graph_nodes": None,
            "graph_splits": None,
            "pipeline_parallel": False,
            "n_slots": None,
            "n_ctx_slot": None,
            "model_loaded": False,
            "ready": False,
            "shutting_down": False,
            "exit_reason": None,
        }
        self._devices: dict[str, DeviceInfo] = {}
        self._cuda: dict[int, CudaDevice] = {}
        self._used: dict[str, UsedDevice] = {}
        self._offload: dict[str, Any] = {}
        self._buffers: dict[str, dict[str, float]] = {}
        self._layer_devices: dict[int, str] = {}
        self._kv_layer_devices: dict[int, str] = {}
        self._kv_caches: list[KvCacheSize] = []
        self._context: dict[str, str] = {}
        self._listening: list[str] = []
        self._fit: dict[str, Any] = {"ran": False, "status": "unknown"}
        self._fit_projections: list[FitDeviceProjection] = []
        self._fit_layers: list[FitDeviceLayers] = []
        self._breakdown: list[MemoryBreakdownRow] = []
        self._breakdown_open = False
        self._problems: list[LogProblem] = []
        self._problems_dropped = 0
        self._warnings: list[str] = []
        self._warnings_dropped = 0
        self._seen_prefix = False
        self._in_device_list = False

    # -- input ---------------------------------------------------------------------------

    def feed_text(self, text: str) -> None:
        for line in text.splitlines():
            self.feed(line)

    def feed_lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.feed(line)

    def feed(self, raw: str) -> list[str]:
        """Take one line of stderr (text) or stdout (``--log-jsonl``); return its events."""
        stripped = raw.strip()
        if stripped.startswith("{") and stripped.endswith("}"):
            try:
                obj = json.loads(stripped)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and "type" in obj:
                return self._feed_json(obj)
        return self._feed_line(split_line(raw))

    def _feed_json(self, obj: dict[str, Any]) -> list[str]:
        kind = obj.get("type")
        if kind == "fit_memory_breakdown":
            data = obj.get("data")
            rows = data.get("rows") if isinstance(data, dict) else None
            if isinstance(rows, list):
                self._breakdown = [r for r in map(_breakdown_from_json, rows) if r is not None]
                self._breakdown_open = False
                return ["memory_breakdown"]
            return []
        if kind != "log":
            return []
        msg = obj.get("msg")
        if not isinstance(msg, str):
            return []
        level = _JSON_LEVELS.get(str(obj.get("level")))
        t = obj.get("time")
        t_us = t if isinstance(t, int) else None
        events: list[str] = []
        # A message may span lines (a chat template); only its first line carries meaning.
        lines = msg.split("\n")
        events += self._feed_line(LogLine(lines[0], level, t_us, prefixed=True))
        return events

    # -- one line ------------------------------------------------------------------------

    def _feed_line(self, line: LogLine) -> list[str]:
        msg = line.message
        if line.prefixed:
            self._seen_prefix = True
        elif self._seen_prefix:
            # With prefixes on, a bare line continues a multi-line message; only the raw
            # stderr lines of a dying process can matter there.
            return self._raw_line(msg)
        if not msg.strip():
            return []
        body = _strip_tag(msg)
        m = _FUNC.match(body)
        func, rest = (m.group("func"), m.group("rest")) if m else ("", body)
        events: list[str] = []
        if line.level == "W" or (not line.prefixed and msg.startswith(("warn", "warning:"))):
            self._warn(msg)
        if func != "common_memory_breakdown_print" and func != "llama_memory_breakdown_print":
            self._breakdown_open = False
        handler = _HANDLERS.get(func)
        if handler is not None:
            events += handler(self, rest, line)
        else:
            events += self._other(func, rest, body, line)
        if line.level == "E":
            events += self._problem(body, line.level)
        elif not line.prefixed:
            events += self._raw_line(msg)
        return events

    def _raw_line(self, msg: str) -> list[str]:
        s = msg.strip()
        if _ARG_ERROR.match(s):
            return self._problem(s, None, kind="argument")
        if "CUDA error" in s or "GGML_ASSERT" in s or "GGML_ABORT" in s:
            return self._problem(s, None)
        if s.startswith("Received second interrupt"):
            self._s["shutting_down"] = True
            return ["shutdown"]
        return []

    def _warn(self, msg: str) -> None:
        if len(self._warnings) < MAX_KEPT_LINES:
            self._warnings.append(msg.strip())
        else:
            self._warnings_dropped += 1

    def _problem(self, message: str, level: str | None, kind: str | None = None) -> list[str]:
        k = kind or classify_problem(message)
        problem = LogProblem(kind=k, message=message.strip(), level=level)
        if self._problems and self._problems[-1] == problem:
            return ["error"]
        if len(self._problems) < MAX_KEPT_LINES:
            self._problems.append(problem)
        else:
            self._problems_dropped += 1
        return ["error"]

    # -- handlers by function name -------------------------------------------------------

    def _common_param(self, rest: str, line: LogLine) -> list[str]:
        if rest.startswith("device_info:"):
            self._in_device_list = True
            self._devices = {}
            return []
        m = _DEVICE_ROW.match(rest)
        if m and self._in_device_list:
            self._add_device(m)
            return ["device"]
        self._in_device_list = False
        b = _BUILD.search(rest)
        if b and rest.startswith("common_params_print_info: build"):
            self._s["build"] = b.group(1)
        v = _VERBOSITY.search(rest)
        if v and "verbosity" in rest:
            self._s["verbosity"] = int(v.group(1))
        return []

    def _add_device(self, m: re.Match[str]) -> None:
        dev = DeviceInfo(
            name=m.group("name"),
            description=m.group("desc").strip(),
            total_mib=int(m.group("total")),
            free_mib=int(m.group("free")),
        )
        self._devices[dev.name] = dev

    def _ggml_cuda_init(self, rest: str, line: LogLine) -> list[str]:
        if _CUDA_FOUND.search(rest):
            self._cuda = {}
        return []

    def _model_load_impl(self, rest: str, line: LogLine) -> list[str]:
        m = _USING_DEVICE.search(rest)
        if not m:
            return []
        inner = m.group("inner")
        desc, dev_id = inner, None
        split = inner.rfind(") (")
        if split != -1:
            desc, dev_id = inner[:split], inner[split + 3 :]
        used = UsedDevice(m.group("name"), desc, dev_id, int(m.group("free")))
        self._used[used.name] = used
        return ["device"]

    def _load_tensors(self, rest: str, line: LogLine) -> list[str]:
        m = _LOAD_START.search(rest)
        if m or rest.startswith("loading model tensors"):
            self._s["loads"] += 1
            if m:
                self._s["load_mode"] = m.group("mode") or (
                    "mmap" if m.group(2) == "true" else "none"
                )
            # A new load (a fit probe at -v, then the real one): start its buffers afresh.
            self._buffers = {}
            self._kv_caches = []
            self._layer_devices = {}
            self._kv_layer_devices = {}
            self._offload = {}
            return ["loading"]
        if m2 := _OFFLOADED.search(rest):
            self._offload["layers_offloaded"] = int(m2.group(1))
            self._offload["layers_total"] = int(m2.group(2))
            return ["offload"]
        if m3 := _REPEATING.search(rest):
            self._offload["repeating_layers"] = int(m3.group(1))
            return []
        if "offloading output layer to GPU" in rest:
            self._offload["output_layer"] = True
            return []
        if m4 := _LAYER_DEV.search(rest):
            self._layer_devices[int(m4.group(1))] = m4.group(2)
            return []
        return self._buffer(rest)

    def _buffer(self, rest: str) -> list[str]:
        m = _BUFFER.match(rest)
        if not m:
            return []
        name, kind, mib = m.group("name"), m.group("kind"), float(m.group("mib"))
        key = {"model": "model", "KV": "kv", "compute": "compute", "output": "output", "RS": "rs"}[
            kind
        ]
        sizes = self._buffers.setdefault(name, {})
        if key in ("kv", "rs"):
            sizes[key] = sizes.get(key, 0.0) + mib
        else:
            sizes[key] = mib
        return ["buffer"]

    def _llama_context(self, rest: str, line: LogLine) -> list[str]:
        if "pipeline parallelism enabled" in rest:
            self._s["pipeline_parallel"] = True
            return []
        if self._buffer(rest):
            return ["buffer"]
        m = _CONTEXT_KV.match(rest)
        if m:
            self._context[m.group("key")] = m.group("value")
        if m2 := _GRAPH.search(rest):  # older builds print the graph line here
            self._s["graph_nodes"], self._s["graph_splits"] = int(m2.group(1)), int(m2.group(2))
        return []

    def _kv_cache(self, rest: str, line: LogLine) -> list[str]:
        if m := _KV_LAYER_DEV.match(rest):
            self._kv_layer_devices[int(m.group(1))] = m.group(2)
            return []
        if m2 := _KV_SIZE.match(rest):
            self._kv_caches.append(
                KvCacheSize(
                    size_mib=float(m2.group("size")),
                    cells=int(m2.group("cells")),
                    layers=int(m2.group("layers")),
                    seqs=m2.group("seqs"),
                    k_type=m2.group("kt"),
                    k_mib=float(m2.group("k")) if m2.group("k") else None,
                    v_type=m2.group("vt"),
                    v_mib=float(m2.group("v")) if m2.group("v") else None,
                )
            )
            return []
        return self._buffer(rest)

    def _sched_reserve(self, rest: str, line: LogLine) -> list[str]:
        if m := _GRAPH.search(rest):
            self._s["graph_nodes"], self._s["graph_splits"] = int(m.group(1)), int(m.group(2))
            return []
        return self._buffer(rest)

    def _breakdown_line(self, rest: str, line: LogLine) -> list[str]:
        if "memory breakdown [MiB]" in rest:
            self._breakdown = []
            self._breakdown_open = True
            return []
        if not self._breakdown_open:
            return []
        row = parse_breakdown_row(rest)
        if row is not None:
            self._breakdown.append(row)
            return ["memory_breakdown"]
        return []

    def _fit_impl(self, rest: str, line: LogLine) -> list[str]:
        fit = self._fit
        fit["ran"] = True
        if rest.startswith("getting device memory data for initial parameters"):
            # A fresh fit run (llama-fit-params prints one, the server one per start).
            self._fit = fit = {"ran": True, "status": "unknown"}
            self._fit_projections, self._fit_layers = [], []
            return ["fit"]
        if m := _FIT_PROJECTED.search(rest):
            fit["projected_used_mib"] = int(m.group(1))
            fit["projected_of"] = m.group(2)
            fit["projected_free_mib"] = int(m.group(3))
        elif m := _FIT_PROJECTION_ROW.match(rest):
            self._fit_projections.append(
                FitDeviceProjection(
                    device=m.group("dev"),
                    total_mib=int(m.group("total")),
                    used_mib=int(m.group("used")),
                    free_mib=int(m.group("free")),
                    target_mib=int(m.group("target")),
                )
            )
        elif m := _FIT_LAYERS_ROW.match(rest):
            layers = FitDeviceLayers(
                device=m.group("dev"),
                layers=int(m.group("layers")),
                used_mib=int(m.group("used")),
                free_mib=int(m.group("free")),
                overflowing=int(m.group("over")) if m.group("over") is not None else None,
            )
            # Fit prints its plan per device once per pass; the last pass is the one used.
            self._fit_layers = [d for d in self._fit_layers if d.device != layers.device]
            self._fit_layers.append(layers)
        elif m := _FIT_TARGET.search(rest):
            fit["target_mib"] = int(m.group(1))
            fit["reduce_by_mib"] = int(m.group(2))
        elif m := _FIT_CTX.search(rest):
            fit["ctx_from"], fit["ctx_to"] = int(m.group(1)), int(m.group(2))
            fit["ctx_saved_mib"] = int(m.group(3))
        elif "no changes needed" in rest:
            fit["status"] = "no_change"
        return ["fit"]

    def _fit_params(self, rest: str, line: LogLine) -> list[str]:
        fit = self._fit
        fit["ran"] = True
        if "successfully fit params" in rest:
            if fit.get("status") != "no_change":
                fit["status"] = "changed"
        elif "failed to fit params to free device memory" in rest:
            fit["status"] = "failed"
            fit["reason"] = rest.split("memory:", 1)[-1].strip() or None
            self._problem(rest, line.level, kind="fit")
        elif "encountered an error while trying to fit params" in rest:
            fit["status"] = "error"
            fit["reason"] = rest.split("memory:", 1)[-1].strip() or None
        elif m := _FIT_TOOK.search(rest):
            fit["seconds"] = float(m.group(1))
        return ["fit"]

    def _common_init(self, rest: str, line: LogLine) -> list[str]:
        if rest.startswith("fitting params to device memory"):
            self._fit = {"ran": True, "status": "unknown"}
            self._fit_projections, self._fit_layers = [], []
            return ["fit"]
        return []

    def _load_model(self, rest: str, line: LogLine) -> list[str]:
        if m := _LOADING_MODEL.match(rest.strip()):
            self._s["model_path"] = m.group(1)
            return ["loading_model"]
        if m2 := _SLOTS.search(rest):
            self._s["n_slots"], self._s["n_ctx_slot"] = int(m2.group(1)), int(m2.group(2))
            return ["slots"]
        return []

    def _server(self, rest: str, line: LogLine) -> list[str]:
        r = rest.strip()
        if r == "model loaded":
            self._s["model_loaded"] = True
            return ["model_loaded"]
        if m := _LISTENING.search(r):
            if m.group(1) not in self._listening:
                self._listening.append(m.group(1))
            return self._became_ready()
        if m2 := _EXITING.search(r):
            self._s["exit_reason"] = m2.group(1)
            return ["exit"]
        if m3 := _HTTP_LISTENING.search(r):
            # Older builds print this before loading the model: an address, not readiness.
            url = f"http://{m3.group(1)}:{m3.group(2)}"
            if url not in self._listening:
                self._listening.append(url)
            return ["listening"]
        return []

    def _became_ready(self) -> list[str]:
        events = ["listening"]
        # "listening on" follows "model loaded" in every build that prints it.
        if not self._s["ready"]:
            self._s["ready"] = True
            events.append("ready")
        return events

    def _operator(self, rest: str, line: LogLine) -> list[str]:
        if "cleaning up before exit" in rest:
            self._s["shutting_down"] = True
            return ["shutdown"]
        return []

    def _other(self, func: str, rest: str, body: str, line: LogLine) -> list[str]:
        if m := _CUDA_DEVICE.match(body):
            dev = CudaDevice(
                index=int(m.group("idx")),
                name=m.group("name").strip(),
                compute_capability=(int(m.group("maj")), int(m.group("min"))),
                vmm=None if m.group("vmm") is None else m.group("vmm").lower() == "yes",
                vram_mib=int(m.group("vram")) if m.group("vram") else None,
            )
            self._cuda[dev.index] = dev
            return ["device"]
        if _USING_DEVICE.search(rest):  # the function printing it was renamed over time
            return self._model_load_impl(rest, line)
        if func == "main":  # older builds: "main: server is listening on ..."
            return self._server(rest, line)
        if func.startswith("llama_kv_cache"):
            return self._kv_cache(rest, line)
        if func == "llama_memory_breakdown_print":
            return self._breakdown_line(rest, line)
        return []

    # -- output --------------------------------------------------------------------------

    def summary(self) -> LlamaLogSummary:
        s = self._s
        fit_extra = {k: v for k, v in self._fit.items() if k not in ("ran", "status")}
        return LlamaLogSummary(
            build=s["build"],
            verbosity=s["verbosity"],
            devices=tuple(self._devices.values()),
            cuda_devices=tuple(self._cuda[i] for i in sorted(self._cuda)),
            used_devices=tuple(self._used.values()),
            model_path=s["model_path"],
            load_mode=s["load_mode"],
            loads=s["loads"],
            offload=Offload(**self._offload),
            buffers=tuple(
                BufferSizes(
                    name=name,
                    model_mib=sizes.get("model", 0.0),
                    kv_mib=round(sizes.get("kv", 0.0), 2),
                    compute_mib=sizes.get("compute", 0.0),
                    output_mib=sizes.get("output", 0.0),
                    rs_mib=round(sizes.get("rs", 0.0), 2),
                )
                for name, sizes in self._buffers.items()
            ),
            layer_devices=tuple(sorted(self._layer_devices.items())),
            kv_layer_devices=tuple(sorted(self._kv_layer_devices.items())),
            kv_caches=tuple(self._kv_caches),
            context=tuple(self._context.items()),
            graph_nodes=s["graph_nodes"],
            graph_splits=s["graph_splits"],
            pipeline_parallel=s["pipeline_parallel"],
            n_slots=s["n_slots"],
            n_ctx_slot=s["n_ctx_slot"],
            fit=FitSummary(
                ran=bool(self._fit.get("ran")),
                status=str(self._fit.get("status", "unknown")),
                projections=tuple(self._fit_projections),
                device_layers=tuple(self._fit_layers),
                **fit_extra,
            ),
            memory_breakdown=tuple(self._breakdown),
            model_loaded=s["model_loaded"],
            listening=tuple(self._listening),
            ready=s["ready"],
            shutting_down=s["shutting_down"],
            exit_reason=s["exit_reason"],
            problems=tuple(self._problems),
            problems_dropped=self._problems_dropped,
            warnings=tuple(self._warnings),
            warnings_dropped=self._warnings_dropped,
        )


_HANDLERS: dict[str, Any] = {
    "common_param": LlamaLogParser._common_param,
    "ggml_cuda_init": LlamaLogParser._ggml_cuda_init,
    "llama_model_load_from_file_impl": LlamaLogParser._model_load_impl,
    "llama_load_model_from_file": LlamaLogParser._model_load_impl,
    "llama_prepare_model_devices": LlamaLogParser._model_load_impl,
    "load_tensors": LlamaLogParser._load_tensors,
    "llm_load_tensors": LlamaLogParser._load_tensors,
    "llama_context": LlamaLogParser._llama_context,
    "llama_new_context_with_model": LlamaLogParser._llama_context,
    "llama_kv_cache": LlamaLogParser._kv_cache,
    "llama_kv_cache_unified": LlamaLogParser._kv_cache,
    "llama_kv_cache_init": LlamaLogParser._kv_cache,
    "llama_memory_recurrent": LlamaLogParser._kv_cache,
    "sched_reserve": LlamaLogParser._sched_reserve,
    "common_memory_breakdown_print": LlamaLogParser._breakdown_line,
    "common_params_fit_impl": LlamaLogParser._fit_impl,
    "common_fit_params": LlamaLogParser._fit_params,
    "common_init_": LlamaLogParser._common_init,
    "load_model": LlamaLogParser._load_model,
    "llama_server": LlamaLogParser._server,
    "operator()": LlamaLogParser._operator,
}


def classify_problem(message: str) -> str:
    """A word for what kind of failure an error line reports."""
    if _OOM.search(message):
        return "oom"
    if "couldn't bind" in message:
        return "bind"
    if _ARG_ERROR.match(message.strip()):
        return "argument"
    if "CUDA error" in message:
        return "cuda"
    if "GGML_ASSERT" in message or "GGML_ABORT" in message:
        return "abort"
    if "failed to load model" in message or "error loading model" in message:
        return "load"
    if "fit params" in message:
        return "fit"
    return "error"


def parse_breakdown_row(text: str) -> MemoryBreakdownRow | None:
    """One ``|   - NAME (DESC) | numbers |`` row of the memory breakdown table."""
    m = _BREAKDOWN_ROW.match(text.strip())
    if not m:
        return None
    label, nums = m.group("label").strip(), m.group("nums").strip()
    if g := _BREAKDOWN_GPU.match(nums):
        total, free, self_, model, context, compute, unaccounted = (int(x) for x in g.groups())
        name, _, desc = label.partition(" ")
        desc = desc.strip()
        if desc.startswith("(") and desc.endswith(")"):
            desc = desc[1:-1]
        return MemoryBreakdownRow(
            kind="device",
            name=name,
            description=desc or None,
            total_mib=total,
            free_mib=free,
            self_mib=self_,
            model_mib=model,
            context_mib=context,
            compute_mib=compute,
            unaccounted_mib=unaccounted,
        )
    if o := _BREAKDOWN_OTHER.match(nums):
        self_, model, context, compute = (int(x) for x in o.groups())
        return MemoryBreakdownRow(
            kind="host" if label == "Host" else "buffer_type",
            name=label,
            self_mib=self_,
            model_mib=model,
            context_mib=context,
            compute_mib=compute,
        )
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _breakdown_from_json(row: Any) -> MemoryBreakdownRow | None:
    if not isinstance(row, dict):
        return None
    name, kind = row.get("name"), row.get("kind")
    numbers = [_int_or_none(row.get(k)) for k in ("self", "model", "context", "compute")]
    if not isinstance(name, str) or not isinstance(kind, str) or None in numbers:
        return None
    self_, model, context, compute = (int(n or 0) for n in numbers)
    desc = row.get("description")
    return MemoryBreakdownRow(
        kind=kind,
        name=name,
        self_mib=self_,
        model_mib=model,
        context_mib=context,
        compute_mib=compute,
        description=desc if isinstance(desc, str) else None,
        total_mib=_int_or_none(row.get("total")),
        free_mib=_int_or_none(row.get("free")),
        unaccounted_mib=_int_or_none(row.get("unaccounted")),
    )


def parse_log(text: str | Iterable[str]) -> LlamaLogSummary:
    """Parse a whole log (a string or lines) at once."""
    parser = LlamaLogParser()
    if isinstance(text, str):
        parser.feed_text(text)
    else:
        parser.feed_lines(text)
    return parser.summary()


def parse_list_devices(text: str) -> tuple[DeviceInfo, ...]:
    """The devices ``llama-server --list-devices`` prints (none on a CPU-only build)."""
    devices: list[DeviceInfo] = []
    in_list = False
    for raw in text.splitlines():
        line = split_line(raw).message
        if line.strip().startswith("Available devices"):
            in_list = True
            continue
        if not in_list:
            continue
        m = _DEVICE_ROW.match(line)
        if m:
            devices.append(
                DeviceInfo(
                    name=m.group("name"),
                    description=m.group("desc").strip(),
                    total_mib=int(m.group("total")),
                    free_mib=int(m.group("free")),
                )
            )
    return tuple(devices)


# Lines the launcher waits for, exposed for it without a whole parser.
def is_ready_line(raw: str) -> str | None:
    """The URL if this line says the server is listening (and so ready), else None."""
    body = _strip_tag(split_line(raw).message)
    m = _FUNC.match(body)
    if not m or m.group("func") not in ("llama_server", "main"):
        return None
    rest = m.group("rest").strip()
    if lm := _LISTENING.search(rest):
        return lm.group(1)
    return None

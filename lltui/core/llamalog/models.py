"""What a llama.cpp log says, as frozen models: the memory facts (every buffer line with its
number, the devices and their free memory, the KV caches, the settings the context printed,
the build, the failure that ended a load) and the server's state (readiness, what ``--fit``
decided, problems), with the placement per device both folds lead to."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.llama.builds import BuildRange
from lltui.core.units import MIB

KINDS = ("model", "kv", "rs", "compute", "output", "moe_cache")  # of the buffer lines
MAX_KEPT_LINES = 100  # problems and warnings kept


HOST_NAMES = ("CPU", "CPU_Mapped", "CPU_REPACK", "CPU_AARCH64")


def is_host_buffer(name: str) -> bool:
    """A buffer in host memory: the CPU's, a mapped file, pinned memory (CUDA_Host)."""
    return name in HOST_NAMES or name.startswith("CPU_") or name.endswith("_Host")


@dataclass(frozen=True, slots=True)
class BufferLine:
    """One ``<device> <kind> buffer size = <MiB> MiB`` line, as printed."""

    line: int  # 1-based, in the file
    device: str  # as llama.cpp names the buffer: CUDA0, CPU_Mapped, RPC0[host:port], CUDA_Host
    kind: str  # model, kv, rs, compute, output, moe_cache (--moe-cache-mib)
    mib: float
    mib_text: str  # the number as printed ("3577.56")
    part: str = "model"  # whose buffer: the model, its draft, a projector (mmproj), a LoRA
    load: int = 1  # which load of the log it belongs to (fit probes, earlier runs first)
    cache: str | None = None  # KV lines of a two-cache model: "base" or "swa"; or its label
    function: str = ""  # the function that printed it
    superseded: bool = False  # a compute buffer reserved again later in the same load

    @property
    def logged_bytes(self) -> int:
        """The bytes the printed MiB stand for (llama.cpp prints two decimals: +-5 KiB)."""
        return round(self.mib * MIB)


@dataclass(frozen=True, slots=True)
class DeviceSeen:
    """A device the log names, with what it says of its memory (MiB)."""

    name: str  # CUDA0, ROCm1, Vulkan0, RPC0[host:port], CPU
    description: str | None = None
    free_mib: int | None = None  # when the model was loaded
    total_mib: int | None = None
    source: str = ""  # which line said it: "using device", "device_info", "ggml_cuda_init", ...


@dataclass(frozen=True, slots=True)
class KvSizeLine:
    """``size = ... (N cells, L layers, S seqs), K (t): .., V (t): ..`` or ``KV self size``."""

    line: int
    size_mib: float
    cells: int | None
    layers: int | None
    seqs: str | None  # "4/1" as printed (n_seq_max/n_stream)
    k_type: str | None
    k_mib: float | None
    v_type: str | None
    v_mib: float | None
    cache: str | None = None
    recurrent: bool = False  # R/S of a recurrent state


@dataclass(frozen=True, slots=True)
class AllocFailure:
    """One line saying an allocation failed (or the load aborted)."""

    line: int
    message: str
    kind: str  # oom, abort, error
    device: str | None = None  # as llama.cpp names it
    device_index: int | None = None  # "on device N" (the backend's own index)
    needed_bytes: int | None = None
    stage: str | None = None  # weights, kv, rs, compute, output, context, load
    load: int = 0  # which load of the log it ended (as BufferLine.load; 0: before any)
    # the backend of a line that names no device (Metal's, Vulkan's, SYCL's): the log's one
    # device of it is the device
    backend: str | None = None
    rounded: bool = False  # needed_bytes read from MiB with two decimals (bytes said win)


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
class BufferSizes:
    """MiB in one named backend buffer (``CUDA0``, ``CPU_Mapped``, ``RPC0[...]``)."""

    name: str
    model_mib: float = 0.0
    kv_mib: float = 0.0
    compute_mib: float = 0.0
    output_mib: float = 0.0
    rs_mib: float = 0.0
    moe_cache_mib: float = 0.0  # --moe-cache-mib: experts of host layers copied to the device

    @property
    def total_mib(self) -> float:
        parts = (self.model_mib, self.kv_mib, self.compute_mib, self.output_mib, self.rs_mib)
        return sum(parts) + self.moe_cache_mib


@dataclass(frozen=True, slots=True)
class DevicePlacement(BufferSizes):
    """Buffers grouped by the device that owns them; host buffers go under ``CPU``."""

    buffers: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()  # from ``layer N assigned to device`` (-v only)
    free_mib: int | None = None  # from ``using device``


@dataclass(frozen=True, slots=True)
class LogFacts:
    """Everything the log said of memory. Empty fields: the log did not say."""

    lines: int = 0  # lines read
    recognised: int = 0  # lines that were llama.cpp's (any rule read them)
    build: int | None = None
    commit: str | None = None
    build_line: int | None = None
    build_note: str | None = None  # why the build the log printed is not used
    build_range: BuildRange | None = None  # what the line formats imply
    tool: str | None = None  # server, cli, bench, mtmd
    command: tuple[str, ...] = ()  # a command line pasted with the log (its words)
    refused: tuple[str, ...] = ()  # the flags of it llama-server refused (never applied)
    command_line: int | None = None
    model_path: str | None = None
    model_info: tuple[tuple[str, str], ...] = ()  # print_info: key = value, as printed
    model_kv: tuple[tuple[str, str], ...] = ()  # llama_model_loader's metadata dump
    type_counts: tuple[tuple[str, int], ...] = ()  # tensor types: ("q4_K", 193)
    devices: tuple[DeviceSeen, ...] = ()
    offloaded: tuple[int, int] | None = None  # (N, M) of "offloaded N/M layers to GPU"
    layer_devices: tuple[tuple[int, str], ...] = ()  # -v: "layer N assigned to device X"
    context: tuple[tuple[str, str], ...] = ()  # the last context's key = value lines
    kv_init: tuple[tuple[str, str], ...] = ()  # "kv_size = N, type_k = 'f16', ..." (older)
    kv_sizes: tuple[KvSizeLine, ...] = ()  # of the last load
    buffers: tuple[BufferLine, ...] = ()
    buffers_dropped: int = 0
    loads: int = 0
    pipeline_parallel: bool = False
    # -sm tensor: the devices of the "Meta()" device, (name, description) in llama.cpp's order
    meta_devices: tuple[tuple[str, str], ...] = ()
    flash_attn: str | None = None  # "enabled"/"disabled" where -fa auto said what it chose
    set_rows_off: bool = False  # LLAMA_SET_ROWS=0: one KV stream (b5913-b6070)
    cpu: str | None = None  # the host CPU's repack rules from system_info: x86, x86-avx512, arm
    threads: tuple[int, int] | None = None  # system_info's n_threads and n_threads_batch
    slots: tuple[int, int, str | None] | None = None  # llama-server: n_slots, n_ctx_slot, unified
    failures: tuple[AllocFailure, ...] = ()
    unparsed: tuple[tuple[int, str], ...] = ()  # lines about memory no rule could read
    unparsed_dropped: int = 0
    notes: tuple[str, ...] = ()
    # the draft model's context (-md), logged after the model's
    draft_context: tuple[tuple[str, str], ...] = ()
    draft_kv_sizes: tuple[KvSizeLine, ...] = ()
    mmproj_estimate_mib: float | None = None  # llama-server's worst case for the projector
    mmproj_backend: str | None = None  # where the projector runs ("CLIP using X backend")

    def context_value(self, *keys: str) -> str | None:
        """The last printed value of the first of ``keys`` the context printed."""
        found = dict(self.context)
        return next((found[k] for k in keys if k in found), None)

    def context_int(self, *keys: str) -> int | None:
        value = self.context_value(*keys)
        if value is None:
            return None
        head = value.split()[0] if value.split() else ""
        return int(head) if head.isdecimal() else None

    def info(self, key: str) -> str | None:
        return dict(self.model_info).get(key)

    def last_load(self) -> tuple[BufferLine, ...]:
        """The buffer lines of the last load (the one that counts)."""
        return tuple(b for b in self.buffers if b.load == self.loads and not b.superseded)

    def sizes(self, part: str = "model") -> tuple[BufferSizes, ...]:
        """MiB per buffer name of one part's lines in the last load."""
        out: dict[str, dict[str, float]] = {}
        for b in self.last_load():
            if b.part == part:
                slot = out.setdefault(b.device, {})
                slot[b.kind] = round(slot.get(b.kind, 0.0) + b.mib, 2)
        return tuple(
            BufferSizes(name, *(s.get(k, 0.0) for k in _SIZE_KINDS)) for name, s in out.items()
        )

    def placement(self) -> tuple[DevicePlacement, ...]:
        """The model's buffers of the last load per device: llama.cpp's order, then CPU."""
        endpoints = {d.description: d.name for d in self.devices if d.description}
        used = [d for d in self.devices if d.source == "using device"]
        groups: dict[str, list[BufferSizes]] = {}
        for buf in self.sizes():
            groups.setdefault(device_of_buffer(buf.name, endpoints), []).append(buf)
        layers: dict[str, list[int]] = {}
        for layer, dev in self.layer_devices:
            layers.setdefault(dev, []).append(layer)
        rank = {d.name: i for i, d in enumerate(used)}
        free = {d.name: d.free_mib for d in used}
        order = sorted(groups, key=lambda d: (d == "CPU", rank.get(d, len(rank))))
        out = []
        for dev in order:
            bufs = groups[dev]
            mib = {k: round(sum(getattr(b, f"{k}_mib") for b in bufs), 2) for k in _SIZE_KINDS}
            out.append(
                DevicePlacement(
                    dev,
                    mib["model"],
                    mib["kv"],
                    mib["compute"],
                    mib["output"],
                    mib["rs"],
                    mib["moe_cache"],
                    buffers=tuple(b.name for b in bufs),
                    layers=tuple(layers.get(dev, ())),
                    free_mib=free.get(dev),
                )
            )
        return tuple(out)

    def parts_mib(self) -> dict[str, dict[str, float]]:
        """MiB of the draft's context, the LoRA adapters and the projector per device (the
        host as CPU): device -> {"draft": MiB, "lora": MiB, "mmproj": MiB}."""
        endpoints = {d.description: d.name for d in self.devices if d.description}
        out: dict[str, dict[str, float]] = {}
        for part in ("draft", "lora", "mmproj"):
            for b in self.last_load():
                if b.part == part:
                    slot = out.setdefault(device_of_buffer(b.device, endpoints), {})
                    slot[part] = round(slot.get(part, 0.0) + b.mib, 2)
        return out


_SIZE_KINDS = ("model", "kv", "compute", "output", "rs", "moe_cache")  # BufferSizes' order


@dataclass(frozen=True, slots=True)
class PromptCache:
    """llama-server's prompt cache in host memory: ``prompt cache is enabled, size limit: L
    MiB`` at load, then ``cache state: N prompts, X MiB (limits: L MiB, ...)`` after tasks."""

    limit_mib: float
    prompts: int | None = None
    mib: float | None = None

    @property
    def line(self) -> str:
        held = "empty" if not self.mib else f"{self.prompts} prompts, {self.mib:.1f} MiB"
        return f"prompt cache (host memory): {held} of {self.limit_mib:.0f} MiB"

    def to_json(self) -> dict[str, Any]:
        mib = MIB
        return {
            "prompts": self.prompts,
            "bytes": round(self.mib * mib) if self.mib is not None else None,
            "limit_bytes": round(self.limit_mib * mib),
        }


@dataclass(frozen=True, slots=True)
class LlamaLogSummary:
    """The server's state as its log tells it, and the memory facts of the same lines."""

    memory: LogFacts = field(default_factory=LogFacts)
    model_loaded: bool = False
    listening: tuple[str, ...] = ()  # URLs
    ready: bool = False
    shutting_down: bool = False
    exit_reason: str | None = None  # "model loading error", "HTTP server error", ...
    problems: tuple[LogProblem, ...] = ()
    problems_dropped: int = 0
    warnings: tuple[str, ...] = ()
    warnings_dropped: int = 0
    fit: FitSummary = field(default_factory=FitSummary)
    memory_breakdown: tuple[MemoryBreakdownRow, ...] = ()  # the last table printed
    # the prompt cache in host memory: its limit, and what it held at the last task's end
    prompt_cache: PromptCache | None = None

    @property
    def failed(self) -> bool:
        return self.exit_reason is not None and not self.ready

    @property
    def buffers(self) -> tuple[BufferSizes, ...]:
        """The model's buffers of the last load, by name."""
        return self.memory.sizes()

    def placement(self) -> tuple[DevicePlacement, ...]:
        return self.memory.placement()

    def ready_devices(self) -> list[dict[str, Any]]:
        """The ``devices`` list of the launcher's ready event (``parts_mib`` where a draft
        model or an adapter has buffers on the device, ``moe_cache_mib`` where the MoE cache
        of --moe-cache-mib has one)."""
        parts = self.memory.parts_mib()
        return [
            {
                **fields_of(p, "name model_mib kv_mib compute_mib"),
                **({"moe_cache_mib": p.moe_cache_mib} if p.moe_cache_mib else {}),
                **({"parts_mib": parts[p.name]} if p.name in parts else {}),
            }
            for p in self.placement()
        ]


_RPC_BUFFER = re.compile(r"^RPC\d*\[(?P<endpoint>.*)\]$")


def rpc_endpoint(name: str) -> str | None:
    """The endpoint in an RPC buffer's name (``RPC0[127.0.0.1:50052]``), else None."""
    m = _RPC_BUFFER.match(name)
    return m.group("endpoint") if m is not None else None


_DEVICE_BUFFERS = ("_Mapped", "_Private")  # a device's buffer types named after it


def device_of_buffer(name: str, rpc_endpoints: Mapping[str, str] | None = None) -> str:
    """The device owning a backend buffer; host buffers (``CPU_Mapped``, ``CUDA_Host``) -> CPU,
    a Metal device's mapped file and private memory (``MTL0_Mapped``) -> the device.

    RPC buffers are named after the remote server's own device index and endpoint
    (``RPC0[127.0.0.1:50052]``), while the device is ``RPC<n>`` with the endpoint as its
    description; ``rpc_endpoints`` (endpoint -> device name) joins the two.
    """
    if name == "CPU" or name.startswith("CPU_") or name.endswith("_Host"):
        return "CPU"
    for kind in _DEVICE_BUFFERS:  # Metal's other buffer types: MTL0_Mapped, MTL0_Private
        if name.endswith(kind):
            return name.removesuffix(kind)
    endpoint = rpc_endpoint(name)
    if endpoint and rpc_endpoints and endpoint in rpc_endpoints:
        return rpc_endpoints[endpoint]
    return name

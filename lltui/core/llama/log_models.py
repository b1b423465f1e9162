"""What llama-server's log says, as frozen models: devices, buffers per device, the KV
cache, what ``--fit`` decided, problems, and the summary :class:`LlamaLogParser` builds."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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
    # the draft model's context (-md), logged after the model's: its own buffers and caches
    draft_buffers: tuple[BufferSizes, ...] = ()
    draft_kv_caches: tuple[KvCacheSize, ...] = ()
    draft_context: tuple[tuple[str, str], ...] = ()
    lora_buffers: tuple[tuple[str, float], ...] = ()  # (buffer, MiB) per adapter buffer line
    mmproj_backend: str | None = None  # "CLIP using X backend"
    mmproj_estimate_mib: float | None = None  # llama-server's worst case for the projector
    mmproj_compute: tuple[tuple[str, float], ...] = ()  # (buffer, MiB) of its compute buffers
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

    def parts_mib(self) -> dict[str, dict[str, float]]:
        """MiB of the draft's context and the LoRA adapters per device (the host as CPU),
        from their own buffer lines: device -> {"draft": MiB, "lora": MiB}."""
        endpoints = {d.description: d.name for d in self.devices}
        endpoints.update({u.description: u.name for u in self.used_devices})
        out: dict[str, dict[str, float]] = {}
        rows = [("draft", b.name, b.total_mib) for b in self.draft_buffers]
        rows += [("lora", name, mib) for name, mib in self.lora_buffers]
        for part, name, mib in rows:
            slots = out.setdefault(device_of_buffer(name, endpoints), {})
            slots[part] = round(slots.get(part, 0.0) + mib, 2)
        return out

    def ready_devices(self) -> list[dict[str, Any]]:
        """The ``devices`` list of the launcher's ready event (``parts_mib`` where a draft
        model or an adapter has buffers on the device)."""
        parts = self.parts_mib()
        return [
            {
                "name": p.name,
                "model_mib": p.model_mib,
                "kv_mib": p.kv_mib,
                "compute_mib": p.compute_mib,
                **({"parts_mib": parts[p.name]} if p.name in parts else {}),
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

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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from lltui.core.llama import log_patterns as pat
from lltui.core.llama.log_models import (
    MAX_KEPT_LINES,
    BufferSizes,
    CudaDevice,
    DeviceInfo,
    DevicePlacement,
    FitDeviceLayers,
    FitDeviceProjection,
    FitSummary,
    KvCacheSize,
    LlamaLogSummary,
    LogLine,
    LogProblem,
    MemoryBreakdownRow,
    Offload,
    UsedDevice,
    device_of_buffer,
)
from lltui.core.llama.log_patterns import (
    classify_problem,
    is_ready_line,
    parse_breakdown_row,
    parse_list_devices,
    split_line,
)

# The log's models and line helpers live in log_models and log_patterns; this module is the
# one place callers import them from.
__all__ = [
    "MAX_KEPT_LINES",
    "BufferSizes",
    "CudaDevice",
    "DeviceInfo",
    "DevicePlacement",
    "FitDeviceLayers",
    "FitDeviceProjection",
    "FitSummary",
    "KvCacheSize",
    "LlamaLogParser",
    "LlamaLogSummary",
    "LogLine",
    "LogProblem",
    "MemoryBreakdownRow",
    "Offload",
    "UsedDevice",
    "classify_problem",
    "device_of_buffer",
    "is_ready_line",
    "parse_breakdown_row",
    "parse_list_devices",
    "parse_log",
    "split_line",
]


@dataclass
class _Server:
    """What the server says of itself as it starts, serves and stops."""

    build: str | None = None
    verbosity: int | None = None
    model_path: str | None = None
    load_mode: str | None = None
    loads: int = 0
    graph_nodes: int | None = None
    graph_splits: int | None = None
    pipeline_parallel: bool = False
    n_slots: int | None = None
    n_ctx_slot: int | None = None
    model_loaded: bool = False
    ready: bool = False
    shutting_down: bool = False
    exit_reason: str | None = None


@dataclass
class _Offload:
    layers_offloaded: int | None = None
    layers_total: int | None = None
    repeating_layers: int | None = None
    output_layer: bool = False

    def frozen(self) -> Offload:
        return Offload(
            self.layers_offloaded, self.layers_total, self.repeating_layers, self.output_layer
        )


@dataclass
class _Load:
    """One model's load (the model's own, or its draft's): its buffers by name and kind,
    its KV caches, its context's settings, where its layers went."""

    buffers: dict[str, dict[str, float]] = field(default_factory=dict)
    kv_caches: list[KvCacheSize] = field(default_factory=list)
    context: dict[str, str] = field(default_factory=dict)
    layer_devices: dict[int, str] = field(default_factory=dict)
    kv_layer_devices: dict[int, str] = field(default_factory=dict)
    offload: _Offload = field(default_factory=_Offload)

    def restart(self) -> None:
        """A new load of the same model (a fit probe at -v, then the real one): its buffers,
        caches and placement start afresh; the context's settings stay."""
        self.buffers = {}
        self.kv_caches = []
        self.layer_devices = {}
        self.kv_layer_devices = {}
        self.offload = _Offload()


@dataclass
class _Fit:
    """What --fit printed as it went."""

    ran: bool = False
    status: str = "unknown"
    reason: str | None = None
    ctx_from: int | None = None
    ctx_to: int | None = None
    ctx_saved_mib: int | None = None
    target_mib: int | None = None
    reduce_by_mib: int | None = None
    projected_used_mib: int | None = None
    projected_free_mib: int | None = None
    projected_of: str | None = None
    seconds: float | None = None
    projections: list[FitDeviceProjection] = field(default_factory=list)
    device_layers: list[FitDeviceLayers] = field(default_factory=list)

    def frozen(self) -> FitSummary:
        plain = {f.name: getattr(self, f.name) for f in fields(self)}
        plain["projections"] = tuple(self.projections)
        plain["device_layers"] = tuple(self.device_layers)
        return FitSummary(**plain)


@dataclass
class _Mmproj:
    backend: str | None = None
    estimate_mib: float | None = None
    compute: list[tuple[str, float]] = field(default_factory=list)


class LlamaLogParser:
    """Feeds on log lines one at a time; :meth:`summary` returns a frozen snapshot.

    ``feed`` returns the names of the events a line raised (``ready``, ``listening``,
    ``model_loaded``, ``error``, ``exit``, ...) so a supervisor can react as lines arrive.
    """

    def __init__(self) -> None:
        self._s = _Server()
        self._devices: dict[str, DeviceInfo] = {}
        self._cuda: dict[int, CudaDevice] = {}
        self._used: dict[str, UsedDevice] = {}
        self._load = _Load()  # the load lines go to: the model's, or its draft's
        self._listening: list[str] = []
        self._fit = _Fit()
        self._breakdown: list[MemoryBreakdownRow] = []
        self._breakdown_open = False
        self._problems: list[LogProblem] = []
        self._problems_dropped = 0
        self._warnings: list[str] = []
        self._warnings_dropped = 0
        self._seen_prefix = False
        self._in_device_list = False
        # the model's load while the draft's is parsed (None: no draft seen yet), then the
        # draft's once its load is over
        self._main_load: _Load | None = None
        self._draft_load: _Load | None = None
        self._in_draft = False
        self._lora: list[tuple[str, float]] = []
        self._mmproj = _Mmproj()

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
            except (ValueError, RecursionError):  # not JSON, or nested past the decoder
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
                self._breakdown = [r for r in map(pat.breakdown_from_json, rows) if r is not None]
                self._breakdown_open = False
                return ["memory_breakdown"]
            return []
        if kind != "log":
            return []
        msg = obj.get("msg")
        if not isinstance(msg, str):
            return []
        level = pat.JSON_LEVELS.get(str(obj.get("level")))
        t = obj.get("time")
        t_us = t if isinstance(t, int) else None
        events: list[str] = []
        # A message may span lines (a chat template); only its first line carries meaning.
        lines = msg.split("\n")
        first = lines[0][: pat.MAX_PARSED_CHARS]
        events += self._feed_line(LogLine(first, level, t_us, prefixed=True))
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
        body = pat.strip_tag(msg)
        m = pat.FUNC.match(body)
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
        if pat.ARG_ERROR.match(s):
            return self._problem(s, None, kind="argument")
        if "CUDA error" in s or "GGML_ASSERT" in s or "GGML_ABORT" in s:
            return self._problem(s, None)
        if s.startswith("Received second interrupt"):
            self._s.shutting_down = True
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
        m = pat.DEVICE_ROW.match(rest)
        if m and self._in_device_list:
            self._add_device(m)
            return ["device"]
        self._in_device_list = False
        b = pat.BUILD.search(rest)
        if b and rest.startswith("common_params_print_info: build"):
            self._s.build = b.group(1)
        v = pat.VERBOSITY.search(rest)
        if v and "verbosity" in rest:
            self._s.verbosity = int(v.group(1))
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
        if pat.CUDA_FOUND.search(rest):
            self._cuda = {}
        return []

    # -- the other parts: a draft model, LoRA adapters, a multimodal projector ------------

    def _speculative(self, rest: str, line: LogLine) -> list[str]:
        if "loading draft model" not in rest:
            return []
        # the draft's lines fill a load of their own; the model's is kept aside
        self._main_load = self._load
        self._load = _Load()
        self._in_draft = True
        return ["draft"]

    def _end_draft(self) -> None:
        if self._in_draft and self._main_load is not None:
            self._draft_load = self._load
            self._load = self._main_load
            self._in_draft = False

    def _lora_line(self, rest: str, line: LogLine) -> list[str]:
        if m := pat.LORA_BUFFER.match(rest):
            self._lora.append((m.group("name"), float(m.group("mib"))))
            return ["buffer"]
        return []

    def _clip(self, func: str, rest: str) -> list[str]:
        self._end_draft()
        if m := pat.CLIP_BACKEND.search(rest):
            self._mmproj.backend = m.group(1)
        elif (m2 := pat.BUFFER.match(rest)) and m2.group("kind") == "compute":
            self._mmproj.compute.append((m2.group("name"), float(m2.group("mib"))))
            return ["buffer"]
        return []

    def _model_load_impl(self, rest: str, line: LogLine) -> list[str]:
        m = pat.USING_DEVICE.search(rest)
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
        m = pat.LOAD_START.search(rest)
        if m or rest.startswith("loading model tensors"):
            self._s.loads += 1
            if m:
                self._s.load_mode = m.group("mode") or ("mmap" if m.group(2) == "true" else "none")
            # A new load (a fit probe at -v, then the real one): start its buffers afresh.
            self._load.restart()
            return ["loading"]
        offload = self._load.offload
        if m2 := pat.OFFLOADED.search(rest):
            offload.layers_offloaded = int(m2.group(1))
            offload.layers_total = int(m2.group(2))
            return ["offload"]
        if m3 := pat.REPEATING.search(rest):
            offload.repeating_layers = int(m3.group(1))
            return []
        if "offloading output layer to GPU" in rest:
            offload.output_layer = True
            return []
        if m4 := pat.LAYER_DEV.search(rest):
            self._load.layer_devices[int(m4.group(1))] = m4.group(2)
            return []
        return self._buffer(rest)

    def _buffer(self, rest: str) -> list[str]:
        m = pat.BUFFER.match(rest)
        if not m:
            return []
        name, kind, mib = m.group("name"), m.group("kind"), float(m.group("mib"))
        key = {"model": "model", "KV": "kv", "compute": "compute", "output": "output", "RS": "rs"}[
            kind
        ]
        sizes = self._load.buffers.setdefault(name, {})
        if key in ("kv", "rs"):
            sizes[key] = sizes.get(key, 0.0) + mib
        else:
            sizes[key] = mib
        return ["buffer"]

    def _llama_context(self, rest: str, line: LogLine) -> list[str]:
        if "pipeline parallelism enabled" in rest:
            self._s.pipeline_parallel = True
            return []
        if self._buffer(rest):
            return ["buffer"]
        m = pat.CONTEXT_KV.match(rest)
        if m:
            self._load.context[m.group("key")] = m.group("value").strip()
        if m2 := pat.GRAPH.search(rest):  # older builds print the graph line here
            self._s.graph_nodes, self._s.graph_splits = int(m2.group(1)), int(m2.group(2))
        return []

    def _kv_cache(self, rest: str, line: LogLine) -> list[str]:
        if m := pat.KV_LAYER_DEV.match(rest):
            self._load.kv_layer_devices[int(m.group(1))] = m.group(2)
            return []
        if m2 := pat.KV_SIZE.match(rest):
            self._load.kv_caches.append(
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
        if m := pat.GRAPH.search(rest):
            self._s.graph_nodes, self._s.graph_splits = int(m.group(1)), int(m.group(2))
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
        fit.ran = True
        if rest.startswith("getting device memory data for initial parameters"):
            # A fresh fit run (llama-fit-params prints one, the server one per start).
            self._fit = _Fit(ran=True)
            return ["fit"]
        if m := pat.FIT_PROJECTED.search(rest):
            fit.projected_used_mib = int(m.group(1))
            fit.projected_of = m.group(2)
            fit.projected_free_mib = int(m.group(3))
        elif m := pat.FIT_PROJECTION_ROW.match(rest):
            fit.projections.append(
                FitDeviceProjection(
                    device=m.group("dev"),
                    total_mib=int(m.group("total")),
                    used_mib=int(m.group("used")),
                    free_mib=int(m.group("free")),
                    target_mib=int(m.group("target")),
                )
            )
        elif m := pat.FIT_LAYERS_ROW.match(rest):
            layers = FitDeviceLayers(
                device=m.group("dev"),
                layers=int(m.group("layers")),
                used_mib=int(m.group("used")),
                free_mib=int(m.group("free")),
                overflowing=int(m.group("over")) if m.group("over") is not None else None,
            )
            # Fit prints its plan per device once per pass; the last pass is the one used.
            fit.device_layers = [d for d in fit.device_layers if d.device != layers.device]
            fit.device_layers.append(layers)
        elif m := pat.FIT_TARGET.search(rest):
            fit.target_mib = int(m.group(1))
            fit.reduce_by_mib = int(m.group(2))
        elif m := pat.FIT_CTX.search(rest):
            fit.ctx_from, fit.ctx_to = int(m.group(1)), int(m.group(2))
            fit.ctx_saved_mib = int(m.group(3))
        elif "no changes needed" in rest:
            fit.status = "no_change"
        return ["fit"]

    def _fit_params(self, rest: str, line: LogLine) -> list[str]:
        fit = self._fit
        fit.ran = True
        if "successfully fit params" in rest:
            if fit.status != "no_change":
                fit.status = "changed"
        elif "failed to fit params to free device memory" in rest:
            fit.status = "failed"
            fit.reason = rest.split("memory:", 1)[-1].strip() or None
            self._problem(rest, line.level, kind="fit")
        elif "encountered an error while trying to fit params" in rest:
            fit.status = "error"
            fit.reason = rest.split("memory:", 1)[-1].strip() or None
        elif m := pat.FIT_TOOK.search(rest):
            fit.seconds = float(m.group(1))
        return ["fit"]

    def _common_init(self, rest: str, line: LogLine) -> list[str]:
        if rest.startswith("fitting params to device memory"):
            self._fit = _Fit(ran=True)
            return ["fit"]
        return []

    def _load_model(self, rest: str, line: LogLine) -> list[str]:
        if m0 := pat.MMPROJ_ESTIMATE.search(rest):
            self._mmproj.estimate_mib = float(m0.group(1))
            return []
        if "loaded multimodal model" in rest or pat.SLOTS.search(rest):
            self._end_draft()
        if m := pat.LOADING_MODEL.match(rest.strip()):
            self._s.model_path = m.group(1)
            return ["loading_model"]
        if m2 := pat.SLOTS.search(rest):
            self._s.n_slots, self._s.n_ctx_slot = int(m2.group(1)), int(m2.group(2))
            return ["slots"]
        return []

    def _server(self, rest: str, line: LogLine) -> list[str]:
        r = rest.strip()
        if r == "model loaded":
            self._s.model_loaded = True
            return ["model_loaded"]
        if m := pat.LISTENING.search(r):
            if m.group(1) not in self._listening:
                self._listening.append(m.group(1))
            return self._became_ready()
        if m2 := pat.EXITING.search(r):
            self._s.exit_reason = m2.group(1)
            return ["exit"]
        if m3 := pat.HTTP_LISTENING.search(r):
            # Older builds print this before loading the model: an address, not readiness.
            url = f"http://{m3.group(1)}:{m3.group(2)}"
            if url not in self._listening:
                self._listening.append(url)
            return ["listening"]
        return []

    def _became_ready(self) -> list[str]:
        events = ["listening"]
        # "listening on" follows "model loaded" in every build that prints it.
        if not self._s.ready:
            self._s.ready = True
            events.append("ready")
        return events

    def _operator(self, rest: str, line: LogLine) -> list[str]:
        if "cleaning up before exit" in rest:
            self._s.shutting_down = True
            return ["shutdown"]
        return []

    def _other(self, func: str, rest: str, body: str, line: LogLine) -> list[str]:
        if m := pat.CUDA_DEVICE.match(body):
            dev = CudaDevice(
                index=int(m.group("idx")),
                name=m.group("name").strip(),
                compute_capability=(int(m.group("maj")), int(m.group("min"))),
                vmm=None if m.group("vmm") is None else m.group("vmm").lower() == "yes",
                vram_mib=int(m.group("vram")) if m.group("vram") else None,
            )
            self._cuda[dev.index] = dev
            return ["device"]
        if pat.USING_DEVICE.search(rest):  # the function printing it was renamed over time
            return self._model_load_impl(rest, line)
        if func == "main":  # older builds: "main: server is listening on ..."
            return self._server(rest, line)
        if func.startswith("llama_kv_cache"):
            return self._kv_cache(rest, line)
        if func == "llama_memory_breakdown_print":
            return self._breakdown_line(rest, line)
        if func in ("clip_ctx", "reserve_compute_meta", "clip_model_loader"):
            return self._clip(func, rest)
        return []

    # -- output --------------------------------------------------------------------------

    def summary(self) -> LlamaLogSummary:
        # while the draft's load is still the last, the model's is the one reported
        main = self._main_load if self._in_draft else self._load
        draft = self._load if self._in_draft else self._draft_load
        return self._summary(main or self._load, draft)

    def _summary(self, load: _Load, draft: _Load | None) -> LlamaLogSummary:
        s = self._s
        return LlamaLogSummary(
            build=s.build,
            verbosity=s.verbosity,
            devices=tuple(self._devices.values()),
            cuda_devices=tuple(self._cuda[i] for i in sorted(self._cuda)),
            used_devices=tuple(self._used.values()),
            model_path=s.model_path,
            load_mode=s.load_mode,
            loads=s.loads,
            offload=load.offload.frozen(),
            buffers=_buffer_sizes(load.buffers),
            layer_devices=tuple(sorted(load.layer_devices.items())),
            kv_layer_devices=tuple(sorted(load.kv_layer_devices.items())),
            kv_caches=tuple(load.kv_caches),
            context=tuple(load.context.items()),
            graph_nodes=s.graph_nodes,
            graph_splits=s.graph_splits,
            pipeline_parallel=s.pipeline_parallel,
            n_slots=s.n_slots,
            n_ctx_slot=s.n_ctx_slot,
            fit=self._fit.frozen(),
            memory_breakdown=tuple(self._breakdown),
            model_loaded=s.model_loaded,
            listening=tuple(self._listening),
            ready=s.ready,
            shutting_down=s.shutting_down,
            exit_reason=s.exit_reason,
            problems=tuple(self._problems),
            problems_dropped=self._problems_dropped,
            warnings=tuple(self._warnings),
            warnings_dropped=self._warnings_dropped,
            draft_buffers=() if draft is None else _buffer_sizes(draft.buffers),
            draft_kv_caches=() if draft is None else tuple(draft.kv_caches),
            draft_context=() if draft is None else tuple(draft.context.items()),
            lora_buffers=tuple(self._lora),
            mmproj_backend=self._mmproj.backend,
            mmproj_estimate_mib=self._mmproj.estimate_mib,
            mmproj_compute=tuple(self._mmproj.compute),
        )


def _buffer_sizes(buffers: dict[str, dict[str, float]]) -> tuple[BufferSizes, ...]:
    return tuple(
        BufferSizes(
            name=name,
            model_mib=sizes.get("model", 0.0),
            kv_mib=round(sizes.get("kv", 0.0), 2),
            compute_mib=sizes.get("compute", 0.0),
            output_mib=sizes.get("output", 0.0),
            rs_mib=round(sizes.get("rs", 0.0), 2),
        )
        for name, sizes in buffers.items()
    )


_Handler = Callable[[LlamaLogParser, str, LogLine], list[str]]
_HANDLERS: dict[str, _Handler] = {
    "common_speculative_init_result": LlamaLogParser._speculative,
    "llama_adapter_lora_init_impl": LlamaLogParser._lora_line,
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


def parse_log(text: str | Iterable[str]) -> LlamaLogSummary:
    """Parse a whole log (a string or lines) at once."""
    parser = LlamaLogParser()
    if isinstance(text, str):
        parser.feed_text(text)
    else:
        parser.feed_lines(text)
    return parser.summary()

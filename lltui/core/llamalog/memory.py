"""The memory fold: what a llama.cpp log of any build (2024 to today; llama-server,
llama-cli, llama-bench -v, llama-mtmd-cli) says about memory, from its lines' events: every
buffer line with its number and load, the devices and their free memory, the KV caches, the
context's settings, the build and what its line formats date it to, the failures.

Memory stays bounded whatever the number of lines: every list kept has a cap, and a count of
what went past it; each line costs the same, however many came before it. Other programs'
lines in between (ollama's, a shell prompt) are skipped; a line about memory that no rule
reads is listed under ``unparsed`` with its number, never dropped without a trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from lltui.core.cmdline.secrets import redact_argv
from lltui.core.llama.builds import LineFormat, build_range
from lltui.core.llamalog.classify import Classified
from lltui.core.llamalog.events import (
    Buffer,
    Build,
    Command,
    Event,
    Fatal,
    FitContext,
    FitEnd,
    Flag,
    Gpu,
    Instance,
    JsonRecord,
    KvInit,
    LayerDevice,
    MetaMember,
    Offloaded,
    Setting,
    Slots,
    SystemInfo,
)
from lltui.core.llamalog.lines import Line
from lltui.core.llamalog.models import (
    AllocFailure,
    BufferLine,
    DeviceSeen,
    KvSizeLine,
    LogFacts,
    MemoryBreakdownRow,
)
from lltui.core.llamalog.patterns import MMPROJ_FUNCS, SERVER_FUNCS
from lltui.core.units import MIB

MAX_BUFFERS = 20_000  # buffer lines kept (a -v log of many fit probes has thousands)
MAX_UNPARSED = 200
MAX_INFO = 400  # print_info / metadata entries kept
MAX_FAILURES = 50
MAX_DEVICES = 256
MAX_LAYERS = 4096
_MEMORY_WORDS = ("MiB", "buffer", "out of memory", "alloc", "OOM")
# what the server's own lines say, nothing of memory (not counted as read here)
_SERVER_ONLY = frozenset({"model_loaded", "listening", "http_listening", "shutdown"})
_SERVER_ONLY |= {"fit_ok", "abort_at"}
MID_LOAD = (
    'the log ends before its load finished (no graph line, "model loaded" or failure after '
    "its last load line): the comparison and the verdict are a partial load's"
)
PINNED_REFUSED = (
    "pinned host memory refused: host buffers fell back to pageable memory; slower host-GPU copies"
)
_CLI_FUNCS = ("llama_perf_sampler_print", "llama_perf_context_print", "sampler")


@dataclass
class _Load:
    """One context's lines: the model's (or its draft's) settings, caches, placement."""

    context: dict[str, str] = field(default_factory=dict)
    kv_init: dict[str, str] = field(default_factory=dict)
    kv_sizes: list[KvSizeLine] = field(default_factory=list)
    offloaded: tuple[int, int] | None = None
    reserved: bool = False  # a "graph splits" line ended a compute reserve
    layers: dict[int, str] = field(default_factory=dict)  # -v: layer -> device
    first_line: int | None = None  # of its first (model) buffer line
    compute: list[int] = field(default_factory=list)  # where its compute lines are kept


class MemoryFold:
    """Take each classified line with :meth:`take`; read :meth:`facts`."""

    def __init__(self) -> None:
        self.n = 0
        self.recognised = 0
        self.build: int | None = None
        self.commit: str | None = None
        self.build_line: int | None = None
        self.build_note: str | None = None
        self.formats: dict[str, LineFormat] = {}
        self.votes: dict[str, int] = {}
        self.command: Command | None = None
        self.command_line: int | None = None
        self.model_path: str | None = None
        self.info: dict[str, str] = {}
        self.meta: dict[str, str] = {}
        self.types: dict[str, int] = {}
        self.devices: dict[str, DeviceSeen] = {}
        self.cuda_prefix = "CUDA"
        self.buffers: list[BufferLine] = []
        self.buffers_dropped = 0
        self.loads = 0
        self.load = _Load()
        self.draft: _Load | None = None
        self.cache: str | None = None
        self.part = "model"
        self.pipeline_parallel = False
        self.meta_devices: list[tuple[str, str]] = []
        self.flash_attn: str | None = None
        self.set_rows_off = False
        self.failures: list[AllocFailure] = []
        self.last_failure = 0  # the line of the last failure kept
        self.last_model_kind: str | None = None  # of the model's last buffer line kept
        self.unparsed: list[tuple[int, str]] = []
        self.unparsed_dropped = 0
        self.notes: list[str] = []
        self.loading_started = False  # the last load's start line was seen (no new one)
        self.loaded = False  # the server said its model loaded (a failure now is serving's)
        self.mid_load = False  # a load line came, and no graph, "model loaded" or failure since
        self.started_by_path = False  # a new run's "loading model" began the current load
        self.cpu: str | None = None
        self.threads: tuple[int, int] | None = None
        self.slots: tuple[int, int, str | None] | None = None
        self.mmproj_mib: float | None = None
        self.mmproj_backend: str | None = None
        self.mmproj_weighed = False  # the projector file's weights were taken
        self.metal: str | None = None  # the Metal device whose lines these are
        self.pinned_at = -1  # the line of the last pinned-memory warning
        self.refused: list[str] = []  # flags llama-server refused
        self.gguf_at = -1  # the line of gguf's last reason a file is not one it reads
        self.gguf_reason: AllocFailure | None = None  # the first of those lines in a row

    def take(self, c: Classified) -> None:
        """One line, classified."""
        self.n += 1
        line, event, text = c.line, c.event, c.text
        if not text.strip():
            return
        for f in c.formats:
            self.formats.setdefault(f.what, f)
        if line.func:
            self._vote(line)
        if isinstance(event, FitEnd):
            event = event.failure  # what a --fit that failed says of memory: the failure
        if isinstance(event, Flag) and event.what == "model_loaded":
            self.loaded = True
            self.mid_load = False
        if (
            event is not None
            and not isinstance(event, Instance)
            and not (isinstance(event, Flag) and event.what in _SERVER_ONLY)
        ):
            self.recognised += 1
            self._read(line, event)
        elif any(w in text for w in _MEMORY_WORDS):
            if len(self.unparsed) < MAX_UNPARSED:
                self.unparsed.append((self.n, text.strip()[:300]))
            else:
                self.unparsed_dropped += 1

    # -- what kind of program wrote it -------------------------------------------------

    def _vote(self, line: Line, tool: str | None = None, n: int = 1) -> None:
        func = line.func
        if tool is None:
            if func in SERVER_FUNCS or "srv " in line.text[:40] or func == "slot":
                tool = "server"
            elif func in MMPROJ_FUNCS or func == "mtmd_cli":
                tool = "mtmd"
            elif func in _CLI_FUNCS:
                tool = "cli"
        if tool is not None:
            self.votes[tool] = self.votes.get(tool, 0) + n

    def _tool(self) -> str | None:
        if self.command is not None:
            return self.command.tool
        # a server with --mmproj votes mtmd too
        return next((t for t in ("server", "bench", "mtmd", "cli") if self.votes.get(t)), None)

    # -- the events -----------------------------------------------------------------------

    def _read(self, line: Line, ev: Event) -> None:
        target = self._target()
        if isinstance(ev, Buffer):
            self._buffer(line, ev)
        elif isinstance(ev, Flag):
            self._flag(line, ev, target)
        elif isinstance(ev, Setting):
            self._setting(ev, target)
        elif isinstance(ev, KvSizeLine):
            cache = self.cache if ev.cells is not None else None
            target.kv_sizes.append(replace(ev, line=self.n, cache=cache))
        elif isinstance(ev, AllocFailure):
            # ggml-vulkan's reason under its pinned-memory warning (older builds) is the
            # warning's, not a device's failure
            reason = ev.backend == "Vulkan" and ev.needed_bytes is None
            if not (reason and self.n == self.pinned_at + 1):
                self._fail(replace(ev, line=self.n))
        elif isinstance(ev, DeviceSeen):
            if ev.source == "ggml_metal":
                self.metal = ev.name
            self._device(ev)
        elif isinstance(ev, MemoryBreakdownRow):
            if ev.kind == "device":
                # the table printed before the load (fit's first look) has the load's free memory
                free = ev.free_mib if self.loads == 0 else None
                self._device(
                    DeviceSeen(ev.name, ev.description, free, ev.total_mib, "memory breakdown")
                )
        elif isinstance(ev, Offloaded):
            target.offloaded = (ev.layers, ev.of)
        elif isinstance(ev, LayerDevice):
            if len(target.layers) < MAX_LAYERS:
                target.layers[ev.layer] = ev.device
        elif isinstance(ev, Gpu):
            name = f"{self.cuda_prefix}{ev.index}"
            self._device(DeviceSeen(name, ev.name, ev.free_mib, ev.vram_mib, "ggml_cuda_init"))
        elif isinstance(ev, Build):
            self._set_build(ev.number, ev.commit)
            if ev.bench:
                self._vote(line, "bench", 3)
            elif line.func == "main" and " = " in line.body[:20]:
                self._vote(line, "cli")  # print_build_info
        else:
            self._other(line, ev, target)

    def _other(self, line: Line, ev: Event, target: _Load) -> None:
        if isinstance(ev, Command):
            if self.command is None:  # the first command pasted is the one that ran
                self.command, self.command_line = ev, self.n
        elif isinstance(ev, KvInit):
            target.kv_init = dict(ev.values)
        elif isinstance(ev, MetaMember):
            self.meta_devices.append((ev.name, ev.description))
        elif isinstance(ev, SystemInfo):
            self.cpu = ev.cpu or self.cpu
            self.threads = ev.threads or self.threads
        elif isinstance(ev, Slots):
            self.part = "model"
            self.slots = (ev.n, ev.ctx, ev.unified)
        elif isinstance(ev, FitContext):
            self.notes.append(f"--fit reduced the context from {ev.ctx_from} to {ev.ctx_to}")
        elif isinstance(ev, Fatal) and ev.what in ("flag", "value"):
            # refused before loading: the flags never applied
            self._fail(AllocFailure(self.n, line.message, "error", stage="arguments"))
            if ev.name and len(self.refused) < MAX_FAILURES:
                self.refused.append(ev.name)
        elif isinstance(ev, Fatal) and ev.what in ("load", "damaged", "missing", "file"):
            # (a file that cannot be opened or read: its line says why; the loader's after it
            # do not)
            said = self.gguf_reason if self.gguf_at == self.n - 1 else None
            self._fail(said or AllocFailure(self.n, line.body, "error", stage="load"))
        elif isinstance(ev, JsonRecord):
            self._vote(line, "server")
            if ev.build is not None:
                self._set_build(ev.build, ev.commit)
            if ev.error is not None:
                self._fail(AllocFailure(self.n, ev.error, "error", stage="load"))

    def _flag(self, line: Line, ev: Flag, target: _Load) -> None:
        what, value = ev.what, ev.value or ""
        if what == "tensors":
            self.mid_load = True
            if self.part == "draft":
                self.draft = _Load()
            elif self.started_by_path:
                self.started_by_path = False  # (the load its "loading model" began)
            else:
                self._new_load()
        elif what == "reserving" and self.part == "model":
            self._reserve_again()
        elif what in ("reserved", "pipeline", "set_rows_off"):
            if what == "reserved":
                target.reserved = True
                self.mid_load = False
            else:
                setattr(self, "pipeline_parallel" if what == "pipeline" else what, True)
        elif what in ("swa_cache", "backend", "flash_attn"):
            setattr(self, {"swa_cache": "cache", "backend": "cuda_prefix"}.get(what, what), value)
        elif what in ("draft", "parts_end"):
            self.part = "draft" if what == "draft" else "model"
        elif what == "model_path":  # (the server's "loading model": one per load)
            # a run after one that loaded or failed (appended to the same file): its own
            # load from here (it may fail before its tensors line would begin one)
            if self.loaded or (self.failures and self.failures[-1].load == self.loads):
                self._new_load()
                self.started_by_path = True
            self._model_path(value)
        elif what == "loader_path":  # (the loader's: the same file, or a draft's)
            self.model_path = self.model_path or value
            if self.loads and self.buffers:
                self.loading_started = False
        elif what == "meta_start":
            self.meta_devices = []  # a new load's Meta device
        elif what == "padded":
            target.context["n_ctx_padded"] = value
        elif what == "mmproj_mib":
            self.mmproj_mib = float(value)
        elif what == "mmproj_backend":
            self.mmproj_backend = value
        elif what == "mmproj_file":
            self.mmproj_weighed = False
        elif what == "mmproj_weights" and not self.mmproj_weighed:
            # in the buffer of the backend named before; clip.cpp's loader prints its whole
            # file's size once per modality (vision, then audio): the file's weights, once
            self._buffer(line, Buffer(self.mmproj_backend or "CPU", "model", value, part="mmproj"))
            self.mmproj_weighed = True
        elif what == "metal_total":
            total = int(float(value) * 1e6 // MIB)
            self._device(DeviceSeen(self.metal or "Metal", None, None, total, "ggml_metal"))
        elif what == "pinned":  # the host buffer falls back to pageable memory; the load goes on
            self.pinned_at = self.n
            if PINNED_REFUSED not in self.notes:
                self.notes.append(PINNED_REFUSED)
        elif what == "gguf":  # (a failure only with the loader's on the line after it)
            if self.gguf_at != self.n - 1:
                self.gguf_reason = AllocFailure(self.n, line.body, "error", stage="load")
            self.gguf_at = self.n
        elif what == "exiting":
            self._fail(AllocFailure(self.n, line.body, "error", stage="load"))
        elif what == "bench":
            self._vote(line, "bench")

    def _model_path(self, value: str) -> None:
        """The model of the load the buffers are compared for: the last a log loads (a
        router's log loads one model after another), a draft's never."""
        if self.part != "draft" or not self.model_path:
            self.model_path = value

    def _setting(self, ev: Setting, target: _Load) -> None:
        if ev.table == "context":
            if target is self.load and self._after_context():
                # a second context's settings (llama-bench makes one per test): its own load
                self._new_load()
                target = self.load
            target.context[ev.key] = ev.value
        elif ev.table == "types":
            self.types[ev.key] = int(ev.value)
        elif ev.table == "meta":
            if not ev.key.startswith("tokenizer.") and len(self.meta) < MAX_INFO:
                self.meta[ev.key] = ev.value[:200]
        elif len(self.info) < MAX_INFO or ev.key in self.info:
            self.info[ev.key] = ev.value[:200]

    def _target(self) -> _Load:
        """Where a context's lines go: the model's load, or its draft's while that loads."""
        return self.draft if self.part == "draft" and self.draft is not None else self.load

    # -- the build -----------------------------------------------------------------------

    def _set_build(self, n: int, commit: str) -> None:
        if self.build is not None or self.build_note is not None:
            return
        self.build_line = self.n
        if n == 0:
            self.build_note = "the log says build 0: llama.cpp built without its git history"
        elif n < 1000:
            self.build_note = (
                f"the log says build {n} ({commit}): a count from a partial copy of the "
                "history, not a llama.cpp build number"
            )
        else:
            self.build, self.commit = n, commit

    # -- buffers -------------------------------------------------------------------------

    def _buffer(self, line: Line, ev: Buffer) -> None:
        part = ev.part or self.part
        kind = ev.kind
        if part != "mmproj":  # (a projector's reserve ends in a line not read as the graph's)
            self.mid_load = True
        if part == "model":
            if kind == "model":
                self._model_buffer_starts_load()
            elif kind == "compute" and self.load.reserved:
                self._new_load()  # a second reserve (a second run pasted below the first)
            elif kind in ("kv", "rs") and self._after_context():
                self._new_load()  # a second context: a run pasted below one that ended
        if len(self.buffers) >= MAX_BUFFERS:
            self.buffers_dropped += 1
            return
        if part == "model":
            self.last_model_kind = kind
            if self.load.first_line is None:
                self.load.first_line = self.n
            if kind == "compute":
                self.load.compute.append(len(self.buffers))
        cache = ev.cache or (self.cache if kind == "kv" else None)
        mib = float(ev.mib_text)
        load = max(self.loads, 1)
        self.buffers.append(
            BufferLine(self.n, ev.device, kind, mib, ev.mib_text, part, load, cache, line.func)
        )
        if self.loads == 0:
            self.loads = 1

    def _model_buffer_starts_load(self) -> None:
        """A weights line after the previous load's context started a new load (fragments
        without a "loading model tensors" line)."""
        if self.loads == 0:
            # the first load of a fragment: what came before it (the offload lines) is its
            self.loads = 1
            self.loading_started = True
            return
        if not self.loading_started and self.last_model_kind not in (None, "model"):
            self._new_load()

    def _after_context(self) -> bool:
        """The current load already reserved its compute buffers or failed."""
        if self.loads == 0:
            return False
        first = self.load.first_line
        return bool(self.load.compute) or (first is not None and self.last_failure > first)

    def _new_load(self) -> None:
        self.loads += 1
        self.load = _Load()
        self.cache = None
        self.loading_started = True
        self.loaded = self.started_by_path = False
        self.mmproj_weighed = False
        # what a load's context says of itself (an earlier run's flash attention was not it)
        self.flash_attn = None
        self.pipeline_parallel = self.set_rows_off = False

    def _reserve_again(self) -> None:
        """The compute buffers reserved again in the same load (a warm-up of the server's
        parts): the earlier lines are superseded by the ones that follow."""
        if self.load.reserved and self.load.compute:
            for i in self.load.compute:
                self.buffers[i] = replace(self.buffers[i], superseded=True)
            self.load.compute = []
            self.load.reserved = False

    # -- failures ------------------------------------------------------------------------

    def _fail(self, failure: AllocFailure) -> None:
        if self.model_path is None and (path := _model_named(failure.message)):
            self.model_path = path  # failure lines name the model (failed to load model 'X')
        self.mid_load = False
        if len(self.failures) >= MAX_FAILURES:
            return
        # after "model loaded", an allocation that fails is a request's, not the load's
        stage = "serving" if self.loaded else failure.stage or self._stage()
        message = failure.message.strip()[:500]
        self.failures.append(replace(failure, message=message, stage=stage, load=self.loads))
        self.last_failure = self.n

    def _stage(self) -> str:
        """What was being allocated: the last buffer line of the log says how far it got."""
        last = self.buffers[-1].kind if self.buffers else None
        if last is None:
            return "weights"
        return {"model": "kv", "output": "kv", "kv": "compute", "rs": "compute"}.get(
            last, "compute"
        )

    def _device(self, seen: DeviceSeen) -> None:
        old = self.devices.get(seen.name)
        if old is None:
            if len(self.devices) < MAX_DEVICES:
                self.devices[seen.name] = seen
            return
        # "using device" is what the load found free; the other lines fill in the rest
        wins = seen.source == "using device" and seen.free_mib is not None
        keep = not wins and old.free_mib is not None
        self.devices[seen.name] = DeviceSeen(
            seen.name,
            old.description or seen.description,
            old.free_mib if keep else seen.free_mib,
            old.total_mib if old.total_mib is not None else seen.total_mib,
            old.source if keep else seen.source,
        )

    # -- output --------------------------------------------------------------------------

    def facts(self) -> LogFacts:
        load, draft = self.load, self.draft
        return LogFacts(
            lines=self.n,
            recognised=self.recognised,
            build=self.build,
            commit=self.commit,
            build_line=self.build_line,
            build_note=self.build_note,
            build_range=build_range(self.formats.values()),
            tool=self._tool(),
            # a pasted command's keys and tokens are never shown, nor put in a fix
            command=tuple(redact_argv(self.command.words)) if self.command else (),
            command_line=self.command_line,
            refused=tuple(self.refused),
            model_path=self.model_path,
            model_info=tuple(self.info.items()),
            model_kv=tuple(self.meta.items()),
            type_counts=tuple(self.types.items()),
            devices=tuple(self.devices.values()),
            offloaded=load.offloaded,
            layer_devices=tuple(sorted(load.layers.items())),
            context=tuple(load.context.items()),
            kv_init=tuple(load.kv_init.items()),
            kv_sizes=tuple(load.kv_sizes),
            buffers=tuple(self.buffers),
            buffers_dropped=self.buffers_dropped,
            loads=max(self.loads, 1 if self.buffers else 0),
            pipeline_parallel=self.pipeline_parallel,
            meta_devices=tuple(self.meta_devices),
            flash_attn=self.flash_attn,
            set_rows_off=self.set_rows_off,
            cpu=self.cpu,
            threads=self.threads,
            slots=self.slots,
            failures=tuple(self.failures),
            unparsed=tuple(self.unparsed),
            unparsed_dropped=self.unparsed_dropped,
            notes=tuple(dict.fromkeys([*self.notes, MID_LOAD] if self.mid_load else self.notes)),
            draft_context=tuple(draft.context.items()) if draft else (),
            draft_kv_sizes=tuple(draft.kv_sizes) if draft else (),
            mmproj_estimate_mib=self.mmproj_mib,
            mmproj_backend=self.mmproj_backend,
        )


def _model_named(message: str) -> str | None:
    """The path in ``... model 'PATH'`` (a failure line naming the model)."""
    start = message.find("model '")
    end = message.find("'", start + 7) if start != -1 else -1
    return message[start + 7 : end] if end > start + 7 else None

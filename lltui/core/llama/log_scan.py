"""Read a llama.cpp log of any build (2024 to today; llama-server, llama-cli, llama-bench -v,
llama-mtmd-cli) for what it says about memory: :class:`LogScanner` takes lines one at a time
and keeps a bounded amount of them; :meth:`LogScanner.facts` is a frozen :class:`LogFacts`.

Lines may carry anything in front of llama.cpp's own ``function: message`` (a timestamp and
level letter, ANSI colour, a journald or pid prefix, a server tag, a quote mark): the
function is found as the first ``name: `` in the line. Other programs' lines in between
(ollama's, a shell prompt) are skipped; a line about memory that no rule reads is listed
under ``unparsed`` with its number, never dropped without a trace.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from lltui.core.llama import log_patterns as pat
from lltui.core.llama.builds import FORMAT_MARKERS, FormatMarker, build_range
from lltui.core.llama.log_scan_models import (
    AllocFailure,
    BufferLine,
    DeviceSeen,
    KvSizeLine,
    LogFacts,
)
from lltui.core.units import MIB

MAX_BUFFERS = 20_000  # buffer lines kept (a -v log of many fit probes has thousands)
MAX_UNPARSED = 200
MAX_INFO = 400  # print_info / metadata entries kept
MAX_FAILURES = 50
MAX_LINE = pat.MAX_PARSED_CHARS

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# colour codes whose ESC was lost on the way into an issue thread: "[34m1.14.608.510[0m"
_BARE_COLOUR = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
_CUDA_DEVICE = re.compile(
    r"(?:^|\s)Device\s+(?P<idx>\d+):\s+(?P<name>.+?),\s+compute capability\s+\d+\.\d+"
)
# the function: the first identifier followed by ": " that is not part of a path, host or tag
_FUNC = re.compile(r"(?<![\w.\[\]/\\-])([A-Za-z_][A-Za-z0-9_]*(?:\(\))?):(?=\s|$)")
_BUFFER = re.compile(
    r"^\s*(?P<name>\S+)\s+(?P<kind>(?:[\w/-]+\s+)*?)buffer size\s*=\s*"
    r"(?P<mib>-?\d+(?:\.\d+)?)\s*MiB"
)
_BUILD = re.compile(r"\bbuild(?: =|:)? (?P<n>\d+) \((?P<commit>[\w.-]+)\)")
_BENCH_BUILD = re.compile(r"^build: (?P<commit>[0-9a-f]{6,}) \((?P<n>\d+)\)\s*$")
_VERSION = re.compile(r"^version: (?P<n>\d+) \((?P<commit>[\w.-]+)\)")
_META_FROM = re.compile(r"tensors from (?P<path>.+?) \(version GGUF")
_LOADING = re.compile(r"^(?:loading model '(?P<q>.+)'|loading model: (?P<p>.+))$")
_TYPE_COUNT = re.compile(r"^\s*- type\s+(?P<t>\w+):\s+(?P<n>\d+) tensors")
_META_KV = re.compile(r"^\s*- kv\s+\d+:\s+(?P<key>[\w.]+)\s+(?:arr\[\w+,\d+\]|\w+)\s+= (?P<v>.*)$")
_INFO = re.compile(r"^(?P<key>[A-Za-z_][\w .]*?)\s*=\s*(?P<v>.*\S)\s*$")
_VULKAN_DEV = re.compile(r"^(?P<i>\d+) = (?P<desc>.+?) \|")
_KV_SELF = re.compile(
    r"KV self size\s*=\s*(?P<size>[\d.]+) MiB, K \((?P<kt>\w+)\):\s*(?P<k>[\d.]+) MiB, "
    r"V \((?P<vt>\w+)\):\s*(?P<v>[\d.]+) MiB"
)
_KV_SIZE = re.compile(
    r"^size\s*=\s*(?P<size>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,\s*"
    r"(?P<seqs>\d+\s*(?:/\s*\d+)?) seqs[^)]*\)"
    r"(?:,\s*(?P<a>[KR]) \((?P<kt>\w+)\):\s*(?P<k>[\d.]+) MiB)?"
    r"(?:,\s*(?P<b>[VS]) \((?P<vt>\w+)\):\s*(?P<v>[\d.]+) MiB)?"
)
_KV_INIT = re.compile(
    r"kv_size = (?P<size>\d+), offload = (?P<off>\d+), type_k = '(?P<k>\w+)', "
    r"type_v = '(?P<v>\w+)', n_layer = (?P<n>\d+)"
)
_SWA_CACHE = re.compile(r"creating\s+(?P<which>non-SWA|SWA) KV cache, size = (?P<cells>\d+) cells")
_CUDA_MALLOC = re.compile(
    r"allocating (?P<mib>[\d.]+) MiB on device (?P<dev>\d+): \w+ failed: (?P<why>.+)$"
)
_FAILED_BUFFER = re.compile(r"failed to allocate (?P<name>\S+) buffer of size (?P<bytes>\d+)")
_SLOTS = re.compile(r"n_slots = (\d+), n_ctx_slot = (\d+)(?:, kv_unified = '(\w+)')?")
_HOST_FAIL = re.compile(r"failed to allocate buffer of size (?P<bytes>\d+)")
_MALLOC_MB = re.compile(r"insufficient memory \(attempted to allocate (?P<mb>[\d.]+) MB\)")
_UNABLE_BUFFER = re.compile(r"unable to allocate (?P<name>\S+) buffer")
_VULKAN_FAIL = re.compile(r"Device memory allocation of size (?P<bytes>\d+) failed")
_CTX_REDUCED = re.compile(r"context size reduced from (\d+) to (\d+)")
_COMMAND = re.compile(
    r"(?:^|[\s/$>#])(?P<tool>llama-server|llama-cli|llama-bench|llama-mtmd-cli|llama-completion"
    r"|llama-sweep-bench|llama-batched-bench)(?:\.exe)?\s+(?P<args>-.*)$"
)
_FA_AUTO = re.compile(
    r"Flash Attention (?:was auto, set to (?P<a>\w+)|(?P<b>enabled)|not supported)"
)
_WITH_MODEL = re.compile(r"model '(?P<p>[^']+)'")
_FAILURE_WORDS = ("fail", "alloc", "memory", "error", "exiting", "unable")
_MEMORY_WORDS = ("MiB", "buffer", "out of memory", "alloc", "OOM")

CONTEXT_FUNCS = frozenset(
    {"llama_context", "llama_new_context_with_model", "llama_init_from_model"}
)
MODEL_FUNCS = frozenset({"llm_load_tensors", "load_tensors"})
INFO_FUNCS = frozenset({"print_info", "llm_load_print_meta"})
MMPROJ_FUNCS = frozenset(
    {"clip_model_loader", "clip_ctx", "alloc_compute_meta", "load_hparams", "warmup", "clip_init"}
)
SERVER_FUNCS = frozenset({"llama_server", "init_listene", "server_http", "load_model", "srv"})
_KIND_WORDS = {"model": "model", "kv": "kv", "rs": "rs", "compute": "compute", "output": "output"}


def normalise(raw: str) -> str:
    """The line without its end, colour codes and anything past what is read."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if "m" in line and "[" in line and _BARE_COLOUR.search(line):
        line = _BARE_COLOUR.sub("", line)
    return line[:MAX_LINE]


def split_function(line: str) -> tuple[str, str, str]:
    """(function, rest, body): body is ``function: rest``; the function is "" when none."""
    m = _FUNC.search(line)
    if m is None:
        stripped = line.strip()
        return "", stripped, stripped
    func = m.group(1)
    rest = line[m.end() :].lstrip()
    return func, rest, line[m.start() :].strip()


@dataclass
class _Load:
    context: dict[str, str] = field(default_factory=dict)
    kv_init: dict[str, str] = field(default_factory=dict)
    kv_sizes: list[KvSizeLine] = field(default_factory=list)
    offloaded: tuple[int, int] | None = None
    reserved: bool = False  # a "graph splits" line ended a compute reserve
    layers: dict[int, str] = field(default_factory=dict)  # -v: layer -> device


class LogScanner:
    """Feed lines with :meth:`feed`; read :meth:`facts`. Memory stays bounded whatever the
    number of lines: every list it keeps has a cap, and a count of what went past it."""

    def __init__(self) -> None:
        self.n = 0
        self.recognised = 0
        self.build: int | None = None
        self.commit: str | None = None
        self.build_line: int | None = None
        self.build_note: str | None = None
        self.markers: dict[str, FormatMarker] = {}
        self.tool_votes: dict[str, int] = {}
        self.command: tuple[str, ...] = ()
        self.command_tool: str | None = None
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
        self.cache: str | None = None
        self.part = "model"
        self.pipeline_parallel = False
        self.meta_devices: list[tuple[str, str]] = []
        self.flash_attn: str | None = None
        self.set_rows_off = False
        self.failures: list[AllocFailure] = []
        self.unparsed: list[tuple[int, str]] = []
        self.unparsed_dropped = 0
        self.notes: list[str] = []
        self._loading_started = False  # the last load's start line was seen (no new one)
        self.cpu: str | None = None
        self.slots: tuple[int, int, str | None] | None = None

    # -- input -------------------------------------------------------------------------

    def feed(self, raw: str) -> None:
        self.n += 1
        line = normalise(raw)
        if not line.strip():
            return
        if self._feed(line):
            self.recognised += 1
        elif any(w in line for w in _MEMORY_WORDS):
            self._unparsed(line)

    def _unparsed(self, line: str) -> None:
        if len(self.unparsed) < MAX_UNPARSED:
            self.unparsed.append((self.n, line.strip()[:300]))
        else:
            self.unparsed_dropped += 1

    def _feed(self, line: str) -> bool:
        """Read one line; True when it was llama.cpp's and a rule took it."""
        stripped = line.strip()
        if stripped.startswith("{") and stripped.endswith("}") and '"' in stripped:
            return self._json_line(stripped)
        if "llama-" in line and (m := _COMMAND.search(line)):
            self._command(m)
            return True
        if "compute capability" in line and (dev := _CUDA_DEVICE.search(line)):
            name = f"{self.cuda_prefix}{dev.group('idx')}"
            self._device(name, dev.group("name").strip(), source="ggml_cuda_init")
            return True
        func, rest, body = split_function(line)
        for marker in FORMAT_MARKERS:
            if body.startswith(marker.text) if marker.func else marker.text in body:
                self.markers.setdefault(marker.text, marker)
        if not func:
            return self._bare(stripped)
        self._vote(func, line)
        if "system_info" in body[:40]:
            self._system_info(body)
            return True
        if self._build(func, rest, body):
            return True
        if "buffer size" in rest and self._buffer(func, rest):
            return True
        if self._failure(func, rest, body):
            return True
        handler = _HANDLERS.get(func)
        if handler is not None:
            return handler(self, rest)
        return self._other(func, rest, body)

    def _markers(self, func: str, body: str) -> None:
        """The line formats this line has, each dating the log to a range of builds."""
        for marker in _FUNC_MARKERS.get(func, ()):
            if body.startswith(marker.text):
                self.markers.setdefault(marker.text, marker)
        if _TEXT_MARKER.search(body):
            for marker in _TEXT_MARKERS:
                if marker.text in body:
                    self.markers.setdefault(marker.text, marker)

    # -- what kind of program wrote it -------------------------------------------------

    def _vote(self, func: str, line: str) -> None:
        tool = None
        if func in SERVER_FUNCS or "srv " in line[:40] or func == "slot":
            tool = "server"
        elif func in MMPROJ_FUNCS or func == "mtmd_cli":
            tool = "mtmd"
        elif func in ("llama_perf_sampler_print", "llama_perf_context_print", "sampler"):
            tool = "cli"
        if tool is not None:
            self.tool_votes[tool] = self.tool_votes.get(tool, 0) + 1

    def _tool(self) -> str | None:
        if self.command_tool is not None:
            return self.command_tool
        votes = self.tool_votes
        if votes.get("server"):
            return "server"  # a server with --mmproj prints the projector's lines too
        if votes.get("bench"):
            return "bench"
        if votes.get("mtmd"):
            return "mtmd"
        if votes.get("cli"):
            return "cli"
        return None

    def _command(self, m: re.Match[str]) -> None:
        try:
            words = shlex.split(m.group("args"))
        except ValueError:
            words = m.group("args").split()
        if self.command:
            return  # the first command pasted is the one that ran (later ones are edits)
        self.command = tuple(words[:400])
        self.command_line = self.n
        tool = m.group("tool")
        self.command_tool = {
            "llama-server": "server",
            "llama-bench": "bench",
            "llama-mtmd-cli": "mtmd",
        }.get(tool, "cli")

    # -- the build -----------------------------------------------------------------------

    def _build(self, func: str, rest: str, body: str) -> bool:
        m = None
        if func == "build" and (b := _BENCH_BUILD.match(body)):
            self.tool_votes["bench"] = self.tool_votes.get("bench", 0) + 3
            m = b
        elif "build" in body[:60] and (func in ("build", "main", "common_init", "common_param")):
            m = _BUILD.search(body)
            if m is not None and func == "main" and " = " in body[:20]:
                self.tool_votes["cli"] = self.tool_votes.get("cli", 0) + 1  # print_build_info
        elif func == "version":
            m = _VERSION.match(body)
        if m is None:
            return False
        self._set_build(int(m.group("n")), m.group("commit"))
        return True

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

    def _system_info(self, body: str) -> None:
        """The CPU's features say which weights it repacks (CPU_REPACK)."""
        if "NEON = 1" in body or "ARM_FMA = 1" in body:
            self.cpu = "arm"
        elif "AVX512 = 1" in body:
            self.cpu = "x86-avx512"
        elif "AVX2 = 1" in body or "AVX = 1" in body:
            self.cpu = "x86"

    def _json_line(self, text: str) -> bool:
        """Older llama-server printed JSON lines (build info, errors)."""
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            return False
        if not isinstance(obj, dict):
            return False
        if obj.get("type") == "log" and isinstance(obj.get("msg"), str):
            # --log-jsonl: the message is a line as the text log prints it
            first = obj["msg"].split("\n", 1)[0][:MAX_LINE]
            return bool(first.strip()) and self._feed(first)
        if obj.get("type") is not None:
            return True  # --log-jsonl's other objects (fit_memory_breakdown): known, not sizes
        self.tool_votes["server"] = self.tool_votes.get("server", 0) + 1
        build = obj.get("build")
        if isinstance(build, int) and not isinstance(build, bool):
            commit = obj.get("commit")
            self._set_build(build, commit if isinstance(commit, str) else "?")
        msg = obj.get("msg")
        if obj.get("level") in ("ERR", "ERROR", "error") and isinstance(msg, str):
            self._fail(msg, "error", stage="load")
        return True

    # -- buffers -------------------------------------------------------------------------

    def _buffer(self, func: str, rest: str) -> bool:
        m = _BUFFER.match(rest)
        if m is None:
            return False
        words = m.group("kind").split()
        kind, cache = self._kind(func, words)
        if kind is None:
            return False
        part = self.part
        if (words and words[-1] == "LoRA") or func.startswith("llama_adapter_lora"):
            part = "lora"
        elif func in MMPROJ_FUNCS:
            part = "mmproj"
        if kind == "model" and part == "model":
            self._model_buffer_starts_load()
        elif kind == "compute" and part == "model" and self.load.reserved:
            self._new_load()  # a second reserve (a second run pasted below the first)
        elif kind in ("kv", "rs") and part == "model" and self._after_context():
            self._new_load()  # a second context: a run pasted below one that ended
        if len(self.buffers) >= MAX_BUFFERS:
            self.buffers_dropped += 1
            return True
        self.buffers.append(
            BufferLine(
                line=self.n,
                device=m.group("name"),
                kind=kind,
                mib=float(m.group("mib")),
                mib_text=m.group("mib"),
                part=part,
                load=max(self.loads, 1),
                cache=cache,
                function=func,
            )
        )
        if self.loads == 0:
            self.loads = 1
        return True

    def _kind(self, func: str, words: list[str]) -> tuple[str | None, str | None]:
        if not words:
            # before b3990 the weights' lines had no kind
            return ("model", None) if func in MODEL_FUNCS else (None, None)
        last = words[-1].lower()
        if last == "lora":
            return "model", None
        kind = _KIND_WORDS.get(last)
        if kind is None:
            return None, None
        if kind == "kv" and len(words) > 1:
            return "kv", " ".join(words[:-1])  # a cache of its own kind (DeepSeek4 compressed)
        return kind, self.cache if kind == "kv" else None

    def _model_buffer_starts_load(self) -> None:
        """A weights line after the previous load's context started a new load (fragments
        without a "loading model tensors" line)."""
        if self.loads == 0:
            # the first load of a fragment: what came before it (the offload lines) is its
            self.loads = 1
            self._loading_started = True
            return
        if self._loading_started:
            return
        last = next((b for b in reversed(self.buffers) if b.part == "model"), None)
        if last is not None and last.kind != "model":
            self._new_load()

    def _after_context(self) -> bool:
        """The current load already reserved its compute buffers or failed."""
        if self.loads == 0:
            return False
        mine = [b for b in self.buffers if b.load == self.loads and b.part == "model"]
        failed = any(f.line > (mine[0].line if mine else 0) for f in self.failures)
        return any(b.kind == "compute" for b in mine) or (bool(mine) and failed)

    def _new_load(self) -> None:
        self.loads += 1
        self.load = _Load()
        self.cache = None
        self._loading_started = True

    # -- failures ------------------------------------------------------------------------

    def _failure(self, func: str, rest: str, body: str) -> bool:
        low = rest.lower()
        if not any(w in low for w in _FAILURE_WORDS) and "GGML_A" not in body:
            return False  # most lines: none of the words a failure is said with
        if m := _CUDA_MALLOC.search(rest):
            self._fail(
                body,
                "oom" if "memory" in m.group("why") else "error",
                device_index=int(m.group("dev")),
                needed=round(float(m.group("mib")) * MIB),
            )
            return True
        if m2 := _FAILED_BUFFER.search(rest):
            stage = "weights" if func == "alloc_tensor_range" else None
            if func.startswith("ggml_gallocr"):
                stage = "compute"
            self._fail(
                body, "oom", device=m2.group("name"), needed=int(m2.group("bytes")), stage=stage
            )
            return True
        if m5 := _HOST_FAIL.search(rest):
            self._fail(body, "oom", device="CPU", needed=int(m5.group("bytes")))
            return True
        if m6 := _MALLOC_MB.search(rest):
            self._fail(body, "oom", device="CPU", needed=round(float(m6.group("mb")) * MIB))
            return True
        if m3 := _UNABLE_BUFFER.search(rest):
            self._fail(body, "oom", device=m3.group("name"), stage="weights")
            return True
        if m4 := _VULKAN_FAIL.search(rest):
            self._fail(body, "oom", needed=int(m4.group("bytes")))
            return True
        if "OutOfDeviceMemory" in rest or "exceeds device memory" in rest:
            self._fail(body, "oom")
            return True
        if "failed to allocate buffer for kv cache" in low:
            self._fail(body, "oom", stage="kv")
            return True
        if "failed to allocate compute" in low:
            self._fail(body, "oom", stage="compute")
            return True
        if "GGML_ASSERT" in body or "GGML_ABORT" in body:
            self._fail(body, "abort")
            return True
        if "CUDA error" in body or "out of memory" in low:
            self._fail(body, "oom" if "out of memory" in low else "error")
            return True
        if any(
            w in low
            for w in (
                "error loading model",
                "failed to load model",
                "failed to create context",
                "failed to initialize the context",
                "exiting due to",
            )
        ):
            self._fail(body, "error", stage="load")
            return True
        return False

    def _model_in(self, message: str) -> None:
        """Failure lines name the model (``failed to load model 'PATH'``)."""
        if self.model_path is None and (m := _WITH_MODEL.search(message)):
            self.model_path = m.group(1)

    def _fail(
        self,
        message: str,
        kind: str,
        *,
        device: str | None = None,
        device_index: int | None = None,
        needed: int | None = None,
        stage: str | None = None,
    ) -> None:
        self._model_in(message)
        if len(self.failures) >= MAX_FAILURES:
            return
        self.failures.append(
            AllocFailure(
                line=self.n,
                message=message.strip()[:500],
                kind=kind,
                device=device,
                device_index=device_index,
                needed_bytes=needed,
                stage=stage or self._stage(),
            )
        )

    def _stage(self) -> str:
        """What was being allocated: the last buffer line of the log says how far it got."""
        last = self.buffers[-1].kind if self.buffers else None
        if last is None:
            return "weights"
        return {"model": "kv", "output": "kv", "kv": "compute", "rs": "compute"}.get(
            last, "compute"
        )

    # -- handlers by function ------------------------------------------------------------

    def _load_tensors(self, rest: str) -> bool:
        if rest.startswith("loading model tensors"):
            self._new_load()
            return True
        if m := pat.OFFLOADED.search(rest):
            self.load.offloaded = (int(m.group(1)), int(m.group(2)))
            return True
        if (m2 := pat.LAYER_DEV.search(rest)) and len(self.load.layers) < 4096:
            self.load.layers[int(m2.group(1))] = m2.group(2)
            return True
        return rest.startswith(("offloading", "ggml ctx size", "tensor ", "layer ", "CPU_"))

    def _model_loader(self, rest: str) -> bool:
        if m := _META_FROM.search(rest):
            self.model_path = self.model_path or m.group("path")
            if self.loads and self.buffers:
                self._loading_started = False
            return True
        if m2 := _TYPE_COUNT.match(rest):
            self.types[m2.group("t")] = int(m2.group("n"))
            return True
        if m3 := _META_KV.match(rest):
            key, value = m3.group("key"), m3.group("v").strip()
            if not key.startswith("tokenizer.") and len(self.meta) < MAX_INFO:
                self.meta[key] = value[:200]
            return True
        return rest.startswith(("Dumping", "loaded meta", "- kv", "- type"))

    def _print_info(self, rest: str) -> bool:
        m = _INFO.match(rest)
        if m is None:
            return False
        if len(self.info) < MAX_INFO or m.group("key") in self.info:
            self.info[m.group("key").strip()] = m.group("v").strip()[:200]
        return True

    def _context(self, rest: str) -> bool:
        if "matches expectation" in rest:
            return True  # -v, on the way out: a compute buffer checked against its reserve
        if "pipeline parallelism enabled" in rest:
            self.pipeline_parallel = True
            return True
        if m := _KV_SELF.search(rest):
            self.load.kv_sizes.append(
                KvSizeLine(
                    line=self.n,
                    size_mib=float(m.group("size")),
                    cells=None,
                    layers=None,
                    seqs=None,
                    k_type=m.group("kt"),
                    k_mib=float(m.group("k")),
                    v_type=m.group("vt"),
                    v_mib=float(m.group("v")),
                )
            )
            return True
        if m2 := pat.CONTEXT_KV.match(rest):
            self.load.context[m2.group("key")] = m2.group("value").strip()
            return True
        if "graph splits" in rest or "graph nodes" in rest:
            self.load.reserved = True
            return True
        return rest.startswith(("constructing", "enumerating", "backend_ptrs", "n_ctx_", "n_ctx"))

    def _create_memory(self, rest: str) -> bool:
        m = re.match(r"n_ctx = (\d+) \(padded\)", rest)
        if m:
            self.load.context["n_ctx_padded"] = m.group(1)
        return True

    def _kv_cache(self, rest: str) -> bool:
        if m := _SWA_CACHE.search(rest):
            self.cache = "swa" if m.group("which") == "SWA" else "base"
            return True
        if m2 := _KV_INIT.search(rest):
            self.load.kv_init = {
                "kv_size": m2.group("size"),
                "offload": m2.group("off"),
                "type_k": m2.group("k"),
                "type_v": m2.group("v"),
                "n_layer": m2.group("n"),
            }
            return True
        if m3 := _KV_SIZE.match(rest):
            self.load.kv_sizes.append(
                KvSizeLine(
                    line=self.n,
                    size_mib=float(m3.group("size")),
                    cells=int(m3.group("cells")),
                    layers=int(m3.group("layers")),
                    seqs=re.sub(r"\s+", "", m3.group("seqs")),
                    k_type=m3.group("kt"),
                    k_mib=float(m3.group("k")) if m3.group("k") else None,
                    v_type=m3.group("vt"),
                    v_mib=float(m3.group("v")) if m3.group("v") else None,
                    cache=self.cache,
                    recurrent=m3.group("a") == "R",
                )
            )
            return True
        if "LLAMA_SET_ROWS=0" in rest:
            self.set_rows_off = True
            return True
        if m4 := _KV_SELF.search(rest):
            return self._context(m4.group(0))
        return rest.startswith(("layer", "n_rot", "attn_rot", "creating", "kv_size"))

    def _reserve(self, rest: str) -> bool:
        if "graph splits" in rest or "graph: nodes" in rest or "graph nodes" in rest:
            self.load.reserved = True
            return True
        if "pipeline parallelism enabled" in rest:
            self.pipeline_parallel = True
            return True
        if m := _FA_AUTO.search(rest):
            self.flash_attn = "disabled" if "not supported" in rest else (m.group("a") or "enabled")
            return True
        return True  # sched_reserve's other lines say nothing about sizes

    def _devices_line(self, rest: str) -> bool:
        if _META_START.search(rest):
            self.meta_devices = []  # a new load's Meta device
            return True
        if m := _META_MEMBER.match(rest):
            self.meta_devices.append((m.group("name"), m.group("desc") or ""))
            return True
        if m := pat.USING_DEVICE.search(rest):
            inner = m.group("inner")
            split = inner.rfind(") (")
            desc = inner[:split] if split != -1 else inner
            self._device(m.group("name"), desc, free=int(m.group("free")), source="using device")
            return True
        return False

    def _cuda_init(self, rest: str) -> bool:
        if m := pat.CUDA_FOUND.search(rest):
            self.cuda_prefix = m.group(2)
        return True

    def _vulkan(self, rest: str) -> bool:
        if m := _VULKAN_DEV.match(rest):
            self._device(f"Vulkan{m.group('i')}", m.group("desc"), source="ggml_vulkan")
        return True

    def _common_param(self, rest: str) -> bool:
        m = pat.DEVICE_ROW.match(rest)
        if m is not None:
            self._device(
                m.group("name"),
                m.group("desc").strip(),
                free=int(m.group("free")),
                total=int(m.group("total")),
                source="device_info",
            )
        return True

    def _breakdown(self, rest: str) -> bool:
        row = pat.parse_breakdown_row(rest)
        if row is None and (m := _OLD_BREAKDOWN.match(rest)):
            name, desc, total = m.group("name"), m.group("desc"), int(m.group("total"))
            self._device(name, desc, total=total, source="memory breakdown")
            return True
        if row is not None and row.kind == "device":
            # the table printed before the load (fit's first look) has the load's free memory
            free = row.free_mib if self.loads == 0 else None
            self._device(
                row.name, row.description, free=free, total=row.total_mib, source="memory breakdown"
            )
        return True

    def _fit(self, rest: str) -> bool:
        if m := _CTX_REDUCED.search(rest):
            self.notes.append(f"--fit reduced the context from {m.group(1)} to {m.group(2)}")
        return True

    def _speculative(self, rest: str) -> bool:
        if "loading draft model" in rest:
            self.part = "draft"
        return True

    def _load_model(self, rest: str) -> bool:
        if m := _LOADING.match(rest.strip()):
            self.model_path = self.model_path or (m.group("q") or m.group("p"))
            return True
        if "initializing" in rest or "loaded multimodal" in rest:
            self.part = "model"
        if m2 := _SLOTS.search(rest):  # llama-server's slots, printed at every verbosity
            self.slots = (int(m2.group(1)), int(m2.group(2)), m2.group(3))
        return True

    def _other(self, func: str, rest: str, body: str) -> bool:
        if self._devices_line(rest):
            return True
        if func.startswith("llama_kv_cache") or func in ("init", "llama_memory_recurrent"):
            return self._kv_cache(rest)
        if func.startswith(("llama_memory_hybrid", "llama_kv_cache_dsv4")):
            return True
        if func in CONTEXT_FUNCS:
            return self._context(rest)
        if func in ("llama_params_fit_impl", "common_params_fit_impl", "llama_params_fit"):
            return self._fit(rest)
        if func in ("main", "common_init_from_params", "common_init_"):
            if m := _LOADING.match(rest.strip()):
                self.model_path = self.model_path or (m.group("q") or m.group("p"))
                return True
            return func != "main"  # "main:" alone says nothing of llama.cpp
        if func in MMPROJ_FUNCS:
            return True
        if "preferred buffer type" in rest:
            return True  # -v: a weight the CPU cannot repack
        # the server's prompt cache (host memory it reports as it goes)
        return "cache state" in rest or "prompt cache" in rest

    def _bare(self, stripped: str) -> bool:
        """A line with no function: a GPU of ggml_cuda_init, a bench table row."""
        if stripped.startswith("| model") or stripped.startswith("| ---"):
            self.tool_votes["bench"] = self.tool_votes.get("bench", 0) + 1
            return True
        if m2 := _BENCH_BUILD.match(stripped):
            self._set_build(int(m2.group("n")), m2.group("commit"))
            return True
        return False

    def _device(
        self,
        name: str,
        description: str | None,
        *,
        free: int | None = None,
        total: int | None = None,
        source: str,
    ) -> None:
        old = self.devices.get(name)
        if old is None:
            if len(self.devices) >= 256:
                return
            self.devices[name] = DeviceSeen(name, description, free, total, source)
            return
        # "using device" is what the load found free; the other lines fill in the rest
        wins = source == "using device" and free is not None
        self.devices[name] = DeviceSeen(
            name,
            old.description or description,
            free if wins or old.free_mib is None else old.free_mib,
            old.total_mib if old.total_mib is not None else total,
            source if wins or old.free_mib is None else old.source,
        )

    # -- output --------------------------------------------------------------------------

    def facts(self) -> LogFacts:
        return LogFacts(
            lines=self.n,
            recognised=self.recognised,
            build=self.build,
            commit=self.commit,
            build_line=self.build_line,
            build_note=self.build_note,
            build_range=build_range(self.markers.values()),
            tool=self._tool(),
            command=self.command,
            command_line=self.command_line,
            model_path=self.model_path,
            model_info=tuple(self.info.items()),
            model_kv=tuple(self.meta.items()),
            type_counts=tuple(self.types.items()),
            devices=tuple(self.devices.values()),
            offloaded=self.load.offloaded,
            layer_devices=tuple(sorted(self.load.layers.items())),
            context=tuple(self.load.context.items()),
            kv_init=tuple(self.load.kv_init.items()),
            kv_sizes=tuple(self.load.kv_sizes),
            buffers=tuple(self.buffers),
            buffers_dropped=self.buffers_dropped,
            loads=max(self.loads, 1 if self.buffers else 0),
            pipeline_parallel=self.pipeline_parallel,
            meta_devices=tuple(self.meta_devices),
            flash_attn=self.flash_attn,
            set_rows_off=self.set_rows_off,
            cpu=self.cpu,
            slots=self.slots,
            failures=tuple(self.failures),
            unparsed=tuple(self.unparsed),
            unparsed_dropped=self.unparsed_dropped,
            notes=tuple(dict.fromkeys(self.notes)),
        )


# -sm tensor (llama_prepare_model_devices): "creating a Meta device [for tensor parallelism]
# from N devices", then "- device I: NAME (DESCRIPTION)" for each
_META_START = re.compile(
    r"creating a Meta device (?:for tensor parallelism )?(?:with|from) \d+ devices"
)
_META_MEMBER = re.compile(r"^\s*- device \d+: (?P<name>\S+)(?: \((?P<desc>[^)]*)\))?\s*$")

# ``  - CUDA0 (RTX 4090):  24080 = 9436 + (...)`` (the breakdown's first form, b6569 era)
_OLD_BREAKDOWN = re.compile(r"^\s*-\s+(?P<name>\S+) \((?P<desc>[^)]*)\):\s+(?P<total>\d+) =")

# the format markers by the function that prints them, and one search for the others
_FUNC_MARKERS: dict[str, list[FormatMarker]] = {}
for _m in FORMAT_MARKERS:
    if _m.func:
        _FUNC_MARKERS.setdefault(_m.text.split(":", 1)[0], []).append(_m)
_TEXT_MARKERS = [m for m in FORMAT_MARKERS if not m.func]
_TEXT_MARKER = re.compile("|".join(re.escape(m.text) for m in _TEXT_MARKERS))

_HANDLERS = {
    "llm_load_tensors": LogScanner._load_tensors,
    "load_tensors": LogScanner._load_tensors,
    "llama_model_loader": LogScanner._model_loader,
    "print_info": LogScanner._print_info,
    "llm_load_print_meta": LogScanner._print_info,
    "create_memory": LogScanner._create_memory,
    "sched_reserve": LogScanner._reserve,
    "graph_reserve": LogScanner._reserve,
    "resolve_fused_ops": LogScanner._reserve,
    "ggml_cuda_init": LogScanner._cuda_init,
    "ggml_vulkan": LogScanner._vulkan,
    "common_param": LogScanner._common_param,
    "common_memory_breakdown_print": LogScanner._breakdown,
    "llama_memory_breakdown_print": LogScanner._breakdown,
    "llama_print_memory_breakdown": LogScanner._breakdown,
    "common_speculative_init_result": LogScanner._speculative,
    "load_model": LogScanner._load_model,
}


def scan_lines(lines: list[str] | tuple[str, ...]) -> LogFacts:
    """Scan lines already in memory (tests, a pasted log)."""
    scanner = LogScanner()
    for line in lines:
        scanner.feed(line)
    return scanner.facts()

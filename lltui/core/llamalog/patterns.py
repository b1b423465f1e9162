"""The one table of llama.cpp's log lines: each shape with the one regular expression that
reads it, a line as llama.cpp prints it, the functions that print it, the builds that print
it (builds.py's :class:`~lltui.core.llama.builds.LineFormat`), and the event it makes.

A line of llama.cpp's is ``function: rest``; the shapes of a function are tried in the
table's order (the general ones first: a build, a buffer size, a failure), the first that
matches makes the event. A line that no shape reads but that a function prints only about
things lltui does not read is :data:`~.events.KNOWN` (see :data:`KNOWN_LINES`)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from lltui.core.llama.builds import LineFormat
from lltui.core.llamalog.events import (
    KNOWN,
    Buffer,
    Build,
    Command,
    Event,
    Fatal,
    FitContext,
    FitEnd,
    FitProjected,
    FitTarget,
    Flag,
    Gpu,
    Instance,
    KvInit,
    LayerDevice,
    Mark,
    MetaMember,
    Offloaded,
    Setting,
    Slots,
    SystemInfo,
)
from lltui.core.llamalog.lines import Line
from lltui.core.llamalog.models import (
    AllocFailure,
    DeviceSeen,
    FitDeviceLayers,
    FitDeviceProjection,
    KvSizeLine,
    MemoryBreakdownRow,
    PromptCache,
)
from lltui.core.units import MIB

# --- the functions: which group of shapes each reads, the builds that named it -----------------

MODEL_FUNCS = frozenset({"llm_load_tensors", "load_tensors"})
CONTEXT_FUNCS = frozenset(
    {"llama_context", "llama_new_context_with_model", "llama_init_from_model"}
)
MMPROJ_FUNCS = frozenset(
    {"clip_model_loader", "clip_ctx", "alloc_compute_meta", "reserve_compute_meta", "load_hparams"}
    | {"warmup", "clip_init", "get_dummy_batch"}
)
BREAKDOWN_FUNCS = (
    "common_memory_breakdown_print",
    "llama_memory_breakdown_print",
    "llama_print_memory_breakdown",
)
SERVER_FUNCS = frozenset({"llama_server", "init_listene", "server_http", "load_model", "srv"})
_GROUPS: dict[str, str] = {
    **dict.fromkeys(MODEL_FUNCS, "@tensors"),
    **dict.fromkeys(CONTEXT_FUNCS, "@context"),
    **dict.fromkeys(MMPROJ_FUNCS, "@mmproj"),
    **dict.fromkeys(("print_info", "llm_load_print_meta"), "@info"),
    **dict.fromkeys(("sched_reserve", "graph_reserve", "resolve_fused_ops"), "@reserve"),
    **dict.fromkeys(("init", "llama_memory_recurrent"), "@kv"),
    **dict.fromkeys(
        ("llama_params_fit_impl", "common_params_fit_impl", "llama_params_fit"), "@fit"
    ),
    **dict.fromkeys(("common_init_from_params", "common_init_"), "@init"),
    **dict.fromkeys(BREAKDOWN_FUNCS, "@breakdown"),
    # ggml-metal's device (ggml_metal_device_init; ggml_metal_init before the device split)
    **dict.fromkeys(("ggml_metal_init", "ggml_metal_device_init"), "@metal"),
}


def group(func: str) -> str:
    """The group of shapes a function's lines are read with (the function itself if none)."""
    found = _GROUPS.get(func)
    if found is not None:
        return found
    if func.startswith("llama_kv_cache"):
        return "@kv"
    return "@hybrid" if func.startswith("llama_memory_hybrid") else func


# The builds that print each function's name (a rename dates a log).
FUNCTION_FORMATS: dict[str, LineFormat] = {
    "llm_load_tensors": LineFormat(0, 4462, "the llm_load_tensors prefix"),
    "load_tensors": LineFormat(4463, None, "the load_tensors prefix"),
    "llama_new_context_with_model": LineFormat(0, 4462, "llama_new_context_with_model"),
    "llama_kv_cache_init": LineFormat(0, 4880, "llama_kv_cache_init"),
    "llama_kv_cache_unified": LineFormat(5262, 6232, "llama_kv_cache_unified"),
    "llama_kv_cache_unified_iswa": LineFormat(5429, 6232, "llama_kv_cache_unified_iswa"),
    "llama_kv_cache": LineFormat(6233, None, "the llama_kv_cache prefix"),
    "llama_kv_cache_iswa": LineFormat(6233, None, "llama_kv_cache_iswa"),
    "sched_reserve": LineFormat(7746, None, "sched_reserve"),
    # (still there after b9018, where only its "using device" lines moved: see that shape)
    "llama_model_load_from_file_impl": LineFormat(4492, None, "load_from_file_impl"),
    "llama_prepare_model_devices": LineFormat(9019, None, "llama_prepare_model_devices"),
    "llama_memory_breakdown_print": LineFormat(6569, 9150, "llama_memory_breakdown_print"),
    "common_memory_breakdown_print": LineFormat(9151, None, "common_memory_breakdown_print"),
    "common_params_fit_impl": LineFormat(9151, None, "common_params_fit_impl"),
    "llama_params_fit_impl": LineFormat(7407, 9150, "llama_params_fit_impl"),
}
_AARCH64 = LineFormat(4081, 5614, "CPU_AARCH64 buffers")
_USING_DEVICE_OLD = LineFormat(4492, 9018, "load_from_file_impl's using device lines")
_REPACK = LineFormat(5615, None, "CPU_REPACK buffers")

# Lines of a group that say nothing lltui reads: True for every line of it, else how they start.
KNOWN_LINES: dict[str, bool | tuple[str, ...]] = {
    "@tensors": ("offloading", "ggml ctx size", "tensor ", "layer ", "CPU_"),
    "llama_model_loader": ("Dumping", "loaded meta", "- kv", "- type"),
    "@kv": ("layer", "n_rot", "attn_rot", "creating", "kv_size"),
    "@context": ("constructing", "enumerating", "backend_ptrs", "n_ctx_", "n_ctx"),
    **dict.fromkeys(("create_memory", "@reserve", "ggml_cuda_init", "ggml_vulkan", "@metal"), True),
    **dict.fromkeys(("common_param", "@breakdown", "common_speculative_init_result"), True),
    **dict.fromkeys(("load_model", "@hybrid", "@fit", "@init", "@mmproj"), True),
    "llama_moe_cache": True,  # its hits and uploads at exit
}

# --- the shapes ---------------------------------------------------------------------------------

Text = Literal["rest", "body", "message", "text"]
_Make = Callable[[re.Match[str], Line], Event | None]


@dataclass(frozen=True, slots=True)
class Shape:
    """One line shape. ``groups``: the groups (:func:`group`) whose lines it reads, empty for
    all; ``on``: what it reads (the text after the function, the whole line, ...); ``hint``:
    text one of which the line must hold before the expression is tried (in lower case for
    an expression that ignores case); ``formats``: (regex group,
    value, format) the builds a match dates the log to (group "func": the function; value
    None: any); ``fallback``: a catch-all for what the shapes before it did not read."""

    name: str
    regex: re.Pattern[str]
    make: _Make
    sample: str
    groups: frozenset[str] = frozenset()
    on: Text = "rest"
    hint: tuple[str, ...] = ()
    formats: tuple[tuple[str, str | None, LineFormat], ...] = ()
    fallback: bool = False
    fold: bool = False  # the expression ignores case (its hints are looked for in lower case)

    def match(self, line: Line) -> re.Match[str] | None:
        text = getattr(line, self.on)
        if self.hint:
            hay = text.lower() if self.fold else text
            for h in self.hint:
                if h in hay:
                    break
            else:
                return None
        return self.regex.search(text)


def _shape(
    name: str,
    pattern: str,
    make: _Make,
    sample: str,
    groups: Sequence[str] = (),
    *,
    on: Text = "rest",
    hint: str | tuple[str, ...] = (),
    formats: tuple[tuple[str, str | None, LineFormat], ...] = (),
    fallback: bool = False,
) -> Shape:
    hints = (hint,) if isinstance(hint, str) else hint
    regex = re.compile(pattern)
    fold = bool(regex.flags & re.IGNORECASE)
    return Shape(name, regex, make, sample, frozenset(groups), on, hints, formats, fallback, fold)


def _flag(what: Mark, group_name: str | int | None = None) -> _Make:
    """A maker of a :class:`~.events.Flag`, its value the regex group named."""
    if group_name is None:
        return lambda m, line: Flag(what)
    return lambda m, line: Flag(what, m.group(group_name))


def _known(m: re.Match[str], line: Line) -> Event:
    return KNOWN


def _fail(kind: str, stage: str | None = None) -> _Make:
    return lambda m, line: AllocFailure(0, line.body, kind, stage=stage)


_TOOLS = {"llama-server": "server", "llama-bench": "bench", "llama-mtmd-cli": "mtmd"}


def _command(m: re.Match[str], line: Line) -> Event:
    try:
        words = shlex.split(m.group("args"))
    except ValueError:
        words = m.group("args").split()
    return Command(_TOOLS.get(m.group("tool"), "cli"), tuple(words[:400]))


def _buffer(m: re.Match[str], line: Line) -> Event | None:
    words = m.group("kind").split()
    part = None
    if (words and words[-1] == "LoRA") or line.func.startswith("llama_adapter_lora"):
        part = "lora"
    elif line.func in MMPROJ_FUNCS:
        part = "mmproj"
    if not words:  # before b3990 the weights' lines had no kind
        return (
            Buffer(m["name"], "model", m["mib"], None, part)
            if group(line.func) == "@tensors"
            else None
        )
    last = words[-1].lower()
    kind = (
        "model"
        if last == "lora"
        else last
        if last in ("model", "kv", "rs", "compute", "output")
        else None
    )
    if kind is None:
        return None
    cache = " ".join(words[:-1]) if kind == "kv" and len(words) > 1 else None  # DeepSeek4's own
    return Buffer(m["name"], kind, m["mib"], cache, part)


def _cuda_malloc(m: re.Match[str], line: Line) -> Event:
    kind = "oom" if "memory" in m["why"] else "error"
    needed = round(float(m["mib"]) * MIB)
    return AllocFailure(
        0, line.body, kind, device_index=int(m["dev"]), needed_bytes=needed, rounded=True
    )


def _failed_buffer(m: re.Match[str], line: Line) -> Event:
    if m["mib"]:  # llama_context's output buffer, in MiB: named by what it is for
        needed = round(float(m["bytes"] + m["mib"]) * MIB)
        return AllocFailure(0, line.body, "oom", needed_bytes=needed, stage="output", rounded=True)
    stage = "weights" if line.func == "alloc_tensor_range" else None
    stage = "compute" if line.func.startswith("ggml_gallocr") else stage
    # ggml-metal's own line says "Metal" whatever the device's name (MTL0 since the split)
    name, backend = (None, "Metal") if m["name"] == "Metal" else (m["name"], None)
    needed = int(m["bytes"])
    return AllocFailure(
        0, line.body, "oom", name, needed_bytes=needed, stage=stage, backend=backend
    )


def _backend_failed(backend: str | None, unit: float = 1) -> _Make:
    """A backend's line that names no device: its size (group ``size``, in ``unit`` bytes) and
    the backend (None: Metal where the function is ggml-metal's)."""

    def make(m: re.Match[str], line: Line) -> Event:
        size = m.groupdict().get("size")
        needed = round(float(size) * unit) if size else None
        of = backend or ("Metal" if "metal" in line.func else None)
        rounded = unit == MIB
        text = line.message.strip()  # (ggml-sycl's trace has no function)
        return AllocFailure(0, text, "oom", needed_bytes=needed, backend=of, rounded=rounded)

    return make


def _kv_size(m: re.Match[str], line: Line) -> Event:
    k, v = m.group("k"), m.group("v")
    seqs = m.groupdict().get("seqs")
    cells, layers = m.groupdict().get("cells"), m.groupdict().get("layers")
    return KvSizeLine(
        line=0,
        size_mib=float(m["size"]),
        cells=int(cells) if cells else None,
        layers=int(layers) if layers else None,
        seqs="".join(seqs.split()) if seqs else None,
        k_type=m["kt"],
        k_mib=float(k) if k else None,
        v_type=m["vt"],
        v_mib=float(v) if v else None,
        recurrent=m.groupdict().get("a") == "R",
    )


def _using_device(m: re.Match[str], line: Line) -> Event:
    inner = m["inner"]
    split = inner.rfind(") (")  # "(DESCRIPTION) (PCI id)"
    desc = inner[:split] if split != -1 else inner
    return DeviceSeen(m["name"], desc, int(m["free"]), None, "using device")


def _system_info(m: re.Match[str], line: Line) -> Event:
    """The CPU's features say which weights it repacks (CPU_REPACK); the threads, the -t
    and -tb the run used (-tb is -t where the line does not say it)."""
    body = line.body
    threads = (int(m["t"]), int(m["tb"] or m["t"])) if m["t"] else None
    if "NEON = 1" in body or "ARM_FMA = 1" in body:
        return SystemInfo("arm", threads)
    if "AVX512 = 1" in body:
        return SystemInfo("x86-avx512", threads)
    return SystemInfo("x86" if "AVX2 = 1" in body or "AVX = 1" in body else None, threads)


def _build(m: re.Match[str], line: Line) -> Event | None:
    return Build(int(m["n"]), m["commit"]) if "build" in line.body[:60] else None


_BREAKDOWN_NUMS = re.compile(r"[-\d=+() ]*")
_N = r"(-?\d{1,12})"  # MiB in whole numbers (none too large to hold)
_BREAKDOWN_GPU = re.compile(
    rf"^{_N}\s*=\s*{_N}\s*\+\s*\(\s*{_N}\s*=\s*{_N}\s*\+\s*{_N}\s*\+\s*{_N}\s*\)\s*\+\s*{_N}$"
)
_BREAKDOWN_OTHER = re.compile(rf"^{_N}\s*=\s*{_N}\s*\+\s*{_N}\s*\+\s*{_N}$")


def parse_breakdown_row(text: str) -> MemoryBreakdownRow | None:
    """One ``|   - NAME (DESC) | numbers |`` row of the memory breakdown table, split at its
    last inner bar: linear, where one expression with a lazy label backtracks."""
    row = text.strip()
    if len(row) < 2 or row[0] != "|" or row[-1] != "|":
        return None
    head, sep, nums = row[1:-1].rpartition("|")
    dash = head.lstrip()
    label = dash[1:]
    if not sep or not head[:1].isspace() or not dash.startswith("-") or not label[:1].isspace():
        return None
    nums, label = nums.strip(), label.strip()
    if not head[-1:].isspace() or not label or not _BREAKDOWN_NUMS.fullmatch(nums):
        return None
    if g := _BREAKDOWN_GPU.match(nums):
        total, free, self_, model, context, compute, unaccounted = (int(x) for x in g.groups())
        name, _, desc = label.partition(" ")
        desc = desc.strip()
        desc = desc[1:-1] if desc.startswith("(") and desc.endswith(")") else desc
        return MemoryBreakdownRow(
            "device", name, self_, model, context, compute, desc or None, total, free, unaccounted
        )
    if o := _BREAKDOWN_OTHER.match(nums):
        kind = "host" if label == "Host" else "buffer_type"
        self_, model, context, compute = (int(x) for x in o.groups())
        return MemoryBreakdownRow(kind, label, self_, model, context, compute)
    return None


def _fit_end(status: Literal["failed", "error"]) -> _Make:
    """How --fit ended, and the failure its reason names (a model that did not load)."""

    def make(m: re.Match[str], line: Line) -> Event:
        reason = line.rest.split("memory:", 1)[-1].strip() or None
        failure = next((e for s in FAILURES if isinstance(e := _read(s, line), AllocFailure)), None)
        return FitEnd(status, reason, failure=failure)

    return make


def _read(shape: Shape, line: Line) -> Event | None:
    """What ``shape`` reads of ``line`` (None: not its shape)."""
    m = shape.match(line)
    return shape.make(m, line) if m is not None else None


def _error_kind(said: str) -> str:
    low = said.lower()
    return "oom" if "out of memory" in low or "insufficient memory" in low else "error"


def _cuda_error(m: re.Match[str], line: Line) -> Event:
    return AllocFailure(0, line.body, _error_kind(line.rest), backend="CUDA" if m["cuda"] else None)


def _bad_arg(m: re.Match[str], line: Line) -> Event:
    if m["flag"]:
        return Fatal("flag", m["flag"])
    why = m["why"].strip().removeprefix("error: ").strip()
    if m["of"] == "argument":
        return Fatal("value", m["name"], why or "invalid value")
    return Fatal("env", m["name"], why)


def _load_error(m: re.Match[str], line: Line) -> Event:
    why = m["why"].strip()
    damaged = any(w in why for w in ("corrupted", "incomplete", "bounds", "invalid"))
    return Fatal("damaged" if damaged else "load", why=why)


def _cuda_device(m: re.Match[str], line: Line) -> Event:
    return AllocFailure(0, line.message.strip(), "error", device_index=int(m["dev"]))


def _flash_attn(m: re.Match[str], line: Line) -> Event:
    chose = "disabled" if m["a"] is None and m["b"] is None else m["a"] or "enabled"
    return Flag("flash_attn", chose)


def _device_info(m: re.Match[str], line: Line) -> Event:
    free, total = int(m["free"]), int(m["total"])
    return DeviceSeen(m["name"], m["desc"].strip(), free, total, "device_info")


def _fit_projection(m: re.Match[str], line: Line) -> Event:
    total, used, free, target = (int(m[k]) for k in ("total", "used", "free", "target"))
    return FitDeviceProjection(m["dev"], total, used, free, target)


def _fit_layers(m: re.Match[str], line: Line) -> Event:
    layers, used, free = (int(m[k]) for k in ("layers", "used", "free"))
    return FitDeviceLayers(m["dev"], layers, used, free, _int(m["over"]))


def _int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def _gpu(m: re.Match[str], line: Line) -> Event:
    arch = m.groupdict().get("arch")
    return Gpu(int(m["idx"]), m["name"].strip(), _int(m["vram"]), _int(m["free"]), arch)


# ggml_cuda_init's ", VRAM: M MiB" (llama.cpp #20185, after b8204), with " (F MiB free)"
# until #20595 (before b8821): bounds from logs of b8204 and b8821, not the merges' builds
_VRAM = r"(?:,\s+VRAM:\s+(?P<vram>\d{1,12}) MiB(?:\s+\((?P<free>\d{1,12}) MiB free\))?)?"
_VRAM_FORMATS = (
    ("vram", None, LineFormat(8205, None, "VRAM in ggml_cuda_init's device lines")),
    ("free", None, LineFormat(8205, 8820, "free VRAM in ggml_cuda_init's device lines")),
)
# at the start of a line's message, or behind journald's "ident[pid]: " (ggml's own lines,
# which have no function)
_BEHIND = r"(?:^|\]:\s)"
# ggml-cuda's names (GGML_CUDA_NAME): its error line's and its abort's
CUDA_BACKENDS = ("CUDA", "ROCm", "MUSA")
BACKEND_ABORTS = frozenset(f"{b} error" for b in CUDA_BACKENDS)
_CUDA_NAMES = "|".join(CUDA_BACKENDS)
_CTX, _KV, _FIT = ("@context",), ("@kv",), ("@fit",)
# how --fit ended: common_fit_params's lines, llama_params_fit's (group @fit) in b7407-b9150
_FIT_END = ("common_fit_params", "@fit")
_SERVER = ("llama_server", "main")
_N_COPIES = LineFormat(2413, 7748, "pipeline parallelism (n_copies=N)")
_N_CTX_SEQ = (
    ("key", "n_ctx_per_seq", LineFormat(4014, 6924, "n_ctx_per_seq")),
    ("key", "n_ctx_seq", LineFormat(6925, None, "n_ctx_seq")),
)

# The table, in the order tried (see _index). Each shape: its name, expression, maker, a line
# as llama.cpp prints it, the groups whose lines it reads (none: any), and its options.
# fmt: off
SHAPES: tuple[Shape, ...] = (
    # -- whole lines, before any function --------------------------------------------------------
    _shape("command", r"(?:^|[\s/$>#])(?P<tool>llama-server|llama-cli|llama-bench|llama-mtmd-cli|"
           r"llama-completion|llama-sweep-bench|llama-batched-bench)(?:\.exe)?\s+(?P<args>-.*)$",
           _command, "$ ./llama-server -m models/7b.gguf -c 4096 -ngl 99", on="text",
           hint="llama-"),
    # ggml-cuda.cu's ggml_cuda_init, one line a device: CUDA and MUSA name the compute
    # capability (as HIP did before llama.cpp #11244), HIP its gcnArchName and wave size
    _shape("gpu", r"(?:^|\s)Device\s+(?P<idx>\d+):\s+(?P<name>.+?),\s+compute capability\s+"
           r"\d+\.\d+(?:,\s+VMM:\s+\w+" + _VRAM + ")?", _gpu,
           "  Device 0: NVIDIA GeForce RTX 4090, compute capability 8.9, VMM: yes, VRAM: 24080 MiB",
           on="text", hint="compute capability", formats=_VRAM_FORMATS),
    _shape("hip_gpu", r"(?:^|\s)Device\s+(?P<idx>\d+):\s+(?P<name>.+?),\s+(?P<arch>gfx[\w:+-]*)"
           r"\s+\(0x[0-9a-fA-F]+\),\s+VMM:\s+\w+(?:,\s+Wave Size:\s+\d+)?" + _VRAM, _gpu,
           "  Device 0: AMD Radeon 8060S Graphics, gfx1151 (0x1151), VMM: no, Wave Size: 32, "
           "VRAM: 131072 MiB", on="text", hint=("(0x",), formats=_VRAM_FORMATS),
    # current llama.cpp's semantic version (--version, llama-bench)
    _shape("version", r"\bversion: (?P<semver>\d+\.\d+\.\d+\S*) \(build (?P<n>\d+), commit "
           r"(?P<commit>[\w.-]+)\)", lambda m, line: Build(int(m["n"]), m["commit"]),
           "version: 0.3.0-dev (build 10621, commit c1d0e7a00)", on="text", hint="(build "),
    # ggml-sycl's memory trace: "[SYCL-MEMTRACE] alloc FAILED: %9.3f MiB %s" (no function)
    _shape("sycl_memtrace", r"^\s*\[SYCL-MEMTRACE\] alloc FAILED:\s*(?P<size>\d{1,15}(?:\.\d+)?) "
           r"MiB", _backend_failed("SYCL", MIB),
           "[SYCL-MEMTRACE] alloc FAILED:  4403.488 MiB buffer", on="message",
           hint="alloc FAILED"),
    # what stops llama-server's start; ggml_abort's "FILE:LINE: message" before a backtrace
    _shape("bad_arg", r'^\s*error(?:: invalid argument: (?P<flag>\S+)\s*| while handling '
           r'(?P<of>argument|environment variable) "(?P<name>[^"]+)":?(?P<why>.*))$', _bad_arg,
           'error while handling argument "-sm": invalid value', on="message", hint="error"),
    _shape("bind", r"couldn't bind HTTP server socket, hostname: (?P<host>\S+), port: "
           r"(?P<port>\d+)", lambda m, line: Fatal("bind", m["host"], m["port"]),
           "start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 8080",
           on="message", hint="couldn't bind"),
    _shape("rpc_connect", r"Failed to connect to (?P<at>\S+)",
           lambda m, line: Fatal("rpc", m["at"]), "Failed to connect to 192.168.1.2:50052",
           on="message", hint="Failed to connect"),
    _shape("gguf_open", r"failed to open GGUF file '(?P<path>.+)' \((?P<why>.+)\)",
           lambda m, line: Fatal("missing" if "No such file" in m["why"] else "file", m["path"],
                                 m["why"]),
           "gguf_init_from_file: failed to open GGUF file 'm.gguf' (No such file or directory)",
           on="message", hint="failed to open GGUF"),
    # after llama-server's signal handler ends its main loop (a second signal: at once)
    _shape("shutdown", r"cleaning up before exit", _flag("shutdown"),
           "operator(): cleaning up before exit...", on="message", hint="cleaning up"),
    _shape("second_interrupt", r"^\s*Received second interrupt", lambda m, line: Flag("shutdown",
           "second"), "Received second interrupt, terminating immediately.", on="message",
           hint="second interrupt"),
    _shape("abort_at", _BEHIND + r"\S+\.(?:c|cc|cpp|cu|cuh|h|hpp|m|mm):\d+: (?P<what>.+)$",
           _flag("abort_at", "what"), "ggml/src/ggml-cuda/ggml-cuda.cu:88: CUDA error",
           on="message", hint=(".c", ".h", ".m")),
    # ggml-cuda's ggml_cuda_error: GGML_CUDA_NAME " error: %s" (no function), then the device
    # (cuda_device), the call, and GGML_ABORT(GGML_CUDA_NAME " error") (abort_at); 2023's
    # CUDA_CHECK: "CUDA error %d at %s:%d: %s"
    _shape("backend_error", _BEHIND + rf"(?P<said>(?P<b>{_CUDA_NAMES}) error(?: \d{{1,6}} at "
           r"\S+:\d{1,9})?: (?P<why>.*\S))",
           lambda m, line: AllocFailure(0, m["said"], _error_kind(m["why"]), backend=m["b"]),
           "CUDA error: an illegal memory access was encountered", on="message",
           hint=" error"),
    # -- every function: the system, a build, a buffer, how --fit ended, a failure ---------------
    _shape("system_info", r"^.{0,29}system_info(?:: n_threads = (?P<t>\d{1,6})(?: "
           r"\(n_threads_batch = (?P<tb>\d{1,6})\))?)?", _system_info,
           "system_info: n_threads = 8 / 16 | CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 |", on="body",
           hint="system_info"),
    _shape("bench_build", r"^build: (?P<commit>[0-9a-f]{6,}) \((?P<n>\d+)\)\s*$",
           lambda m, line: Build(int(m["n"]), m["commit"], bench=True), "build: 9f912511 (4202)",
           ("build",), on="body"),
    _shape("build", r"\bbuild(?: =|:)? (?P<n>\d+) \((?P<commit>[\w.-]+)\)", _build,
           "common_param: common_params_print_info: build 6123 (abcdef0) with GNU 12.2.0 for Linux",
           ("build", "main", "common_init", "common_param"), on="body", hint="build"),
    _shape("old_version", r"^version: (?P<n>\d+) \((?P<commit>[\w.-]+)\)",
           lambda m, line: Build(int(m["n"]), m["commit"]), "version: 4202 (9f912511)",
           ("version",), on="body"),
    _shape("fit_failed", r"failed to fit params to free device memory", _fit_end("failed"),
           "common_fit_params: failed to fit params to free device memory: n_gpu_layers already "
           "set by user to 99, "
           "abort", _FIT_END),
    _shape("fit_error", r"encountered an error while trying to fit params", _fit_end("error"),
           "common_fit_params: encountered an error while trying to fit params to free device "
           "memory: out of range",
           _FIT_END),
    _shape("buffer", r"^\s*(?P<name>\S+)\s+(?P<kind>(?:[\w/-]+\s+)*?)buffer size\s*=\s*"
           r"(?P<mib>-?\d{1,15}(?:\.\d+)?)\s*MiB", _buffer,  # (no MiB too large to hold)
           "load_tensors:        CUDA0 model buffer size =  3577.56 MiB", hint="buffer size",
           formats=(
               ("kind", "model", LineFormat(3990, None, "model buffer lines")),
               ("name", "CPU_Mapped", LineFormat(3990, None, "CPU_Mapped buffers")),
               ("name", "CPU_AARCH64", _AARCH64), ("name", "CPU_REPACK", _REPACK),
               ("kind", "output", LineFormat(2413, None, "output buffer lines")),
               ("kind", "RS", LineFormat(5856, None, "RS buffer lines")))),
    # a host buffer refused pinned (page-locked) memory: the backend falls back to the host's
    # pageable memory and the load goes on (a warning, not a failure). ggml-cuda's
    # "%s: failed to allocate %.2f MiB of pinned memory: %s" (ggml_cuda_host_malloc; a debug
    # line in b11434) and "failed to register", ggml-sycl's and ggml-cann's; older builds'
    # (and ggml-vulkan's) "WARNING: failed to allocate %.2f MB of pinned memory[: %s]"
    _shape("pinned", r"failed to (?:allocate|register) \d{1,15}(?:\.\d+)? Mi?B of "
           r"pinned memory", _flag("pinned"),
           "ggml_cuda_host_malloc: failed to allocate 1024.00 MiB of pinned memory: out of memory",
           hint="pinned memory"),
    # ggml-vulkan's "Failed to allocate pinned memory (%s)" (the exception's what()); before,
    # "Failed to allocate pinned memory." and the what() on the line after it
    _shape("vulkan_pinned", r"^Failed to allocate pinned memory(?: \(|\.)", _flag("pinned"),
           "ggml_vulkan: Failed to allocate pinned memory (Requested buffer size exceeds device "
           "buffer size limit: ErrorOutOfDeviceMemory)", hint="pinned memory"),
    _shape("cuda_malloc", r"allocating (?P<mib>\d{1,15}(?:\.\d+)?) MiB on device (?P<dev>\d+): "
           r"(?P<said>\w+ failed: "
           r"(?P<why>.+))$", _cuda_malloc, "ggml_backend_cuda_buffer_type_alloc_buffer: "
           "allocating 1024.00 MiB on device 0: cudaMalloc failed: out of memory",
           hint="allocating"),
    # ggml-alloc.c's and ggml-backend.cpp's "failed to allocate %s buffer of size %zu" (the
    # buffer type), ggml-metal's "failed to allocate Metal buffer of %zu bytes (out of
    # memory)", llama-context.cpp's "failed to allocate output buffer of size %.2f MiB"
    _shape("failed_buffer", r"failed to allocate (?P<name>\S+) buffer of (?:size )?"
           r"(?P<bytes>\d{1,20})(?:(?P<mib>\.\d{1,6}) MiB)?(?![\d.])",
           _failed_buffer, "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1024",
           hint="failed to allocate"),
    _shape("host_failed", r"failed to allocate buffer of size (?P<bytes>\d{1,20})",
           lambda m, line: AllocFailure(0, line.body, "oom", "CPU", needed_bytes=int(m["bytes"])),
           "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 8192",
           hint="failed to allocate"),
    _shape("malloc_mb", r"insufficient memory \(attempted to allocate (?P<mb>\d{1,15}(?:\.\d+)?) "
           r"MB\)",
           lambda m, line: AllocFailure(
               0, line.body, "oom", "CPU", needed_bytes=round(float(m["mb"]) * MIB), rounded=True),
           "ggml_backend_cpu_buffer_type_alloc_buffer: insufficient memory (attempted to "
           "allocate 78125.00 MB)", hint="insufficient memory"),
    _shape("unable_buffer", r"unable to allocate (?P<name>\S+) buffer",
           lambda m, line: AllocFailure(0, line.body, "oom", m["name"], stage="weights"),
           "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
           hint="unable to allocate"),
    # ggml-vulkan's "Device memory allocation of size %zu failed." (a device buffer) and
    # "Memory allocation of size %zu failed." (ggml_vk_create_buffer_check's)
    _shape("vulkan_failed", r"(?:Device m|M)emory allocation of size (?P<size>\d{1,20}) failed",
           _backend_failed("Vulkan"),
           "ggml_vulkan: Device memory allocation of size 4294967296 failed.",
           hint="emory allocation of size"),
    # the Vulkan error on the line after (vk::SystemError's what(): "vk::Device::allocateMemory:
    # ErrorOutOfDeviceMemory", "Requested buffer size exceeds device memory allocation limit:
    # ErrorOutOfDeviceMemory", "... device buffer size limit: ..."), the end of its line (in
    # brackets it is a pinned-memory warning's)
    _shape("device_oom", r"(?:OutOfDeviceMemory|exceeds device (?:memory|buffer size)[^()]*)\s*$",
           _backend_failed("Vulkan"),
           "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
           hint=("OutOfDeviceMemory", "exceeds device")),
    # ggml-metal's "error: failed to allocate buffer, size = %8.2f MiB" (ggml_metal_buffer_init
    # and _map; ggml_backend_metal_buffer_type_alloc_buffer and _from_ptr before the split);
    # ggml_metal_add_buffer's "failed to allocate '%-16s' buffer, size = %8.2f MB" of 2023
    _shape("metal_failed", r"failed to allocate (?:'[^']*' )?buffer, size =\s*"
           r"(?P<size>\d{1,15}(?:\.\d+)?) Mi?B", _backend_failed(None, MIB),
           "ggml_metal_buffer_init: error: failed to allocate buffer, size =  4403.49 MiB",
           hint="buffer, size ="),
    # ggml-sycl's "can't allocate %zu Bytes of memory on device" (the buffer type; "on
    # device/GPU": its pool; "on host": host memory), "can't malloc %lu Bytes memory on
    # device" before b4000 (without its newline: the next line may follow on the same one)
    _shape("sycl_failed", r"can't (?:allocate|malloc) (?P<size>\d{1,20}) Bytes (?:of )?memory "
           r"on (?P<on>device|host)",
           lambda m, line: AllocFailure(0, line.body, "oom", "CPU" if m["on"] == "host" else None,
                                        needed_bytes=int(m["size"]),
                                        backend=None if m["on"] == "host" else "SYCL"),
           "ggml_backend_sycl_buffer_type_alloc_buffer: can't allocate 4617420800 Bytes of "
           "memory on device", hint="Bytes"),
    _shape("kv_failed", r"(?i)failed to allocate buffer for (?P<c>kv|rs) cache",
           lambda m, line: AllocFailure(0, line.body, "oom", stage=m["c"].lower()),
           "llama_init_from_model: failed to allocate buffer for kv cache", hint="to allocate"),
    _shape("compute_failed", r"(?i)failed to allocate compute", _fail("oom", "compute"),
           "llama_init_from_model: failed to allocate compute buffers", hint="to allocate"),
    _shape("abort", r"GGML_ASSERT|GGML_ABORT", _fail("abort"), "ggml_abort: ggml/src/ggml.c:1234:"
           " GGML_ASSERT(n_backends <= 16) failed", on="body", hint="GGML_A"),
    # ggml-cuda's error report names the device on the line after "CUDA error: ..."
    _shape("cuda_device", r"current device: (?P<dev>\d+), in function",
           _cuda_device,
           "  current device: 1, in function alloc at ggml/src/ggml-cuda/ggml-cuda.cu:399",
           on="message", hint="current device"),
    # Metal's command buffer out of memory: "error: Insufficient Memory (00000008:kIOGPU...)"
    _shape("cuda_error", r"(?i)(?P<cuda>cuda) error|out of memory|insufficient memory", _cuda_error,
           "ggml_cuda_compute_forward: CUDA error: an illegal memory access was encountered",
           on="body", hint=("error", "memory"), fallback=True),
    _shape("exiting", r"(?i)exiting due to (?P<why>.+?)\s*$", _flag("exiting", "why"),
           "llama_server: exiting due to model loading error", hint="exiting"),
    _shape("fit_tool_failed", r"failed to fit CLI arguments", _fail("error", "fit"),
           "llama_fit_params: failed to fit CLI arguments to free memory, exiting...",
           hint="failed to fit CLI"),
    # gguf's reason a file is not one it can read (not GGUF, cut short, a directory): the
    # loader's "failed to load model from X" on the line after it fails the load (a router's
    # scan of its models folder prints it too, with no load after it)
    _shape("gguf_reason", r"^\s*(?P<why>\S.*?)\s*$", _flag("gguf", "why"),
           "gguf_init_from_reader: invalid magic characters: 'hell', expected 'GGUF'",
           ("gguf_init_from_reader", "gguf_init_from_file_impl")),
    _shape("load_error", r"error loading model: (?P<why>.+)", _load_error,
           "llama_model_load: error loading model: error loading model vocabulary: unknown "
           "tokenizer: 'x'", hint="error loading model", fallback=True),
    # llama_init_from_model refusing the context's settings (the weights loaded; the lines
    # after it only say that the context was not created); "V cache quantization requires
    # flash_attn" before b5000; the context's constructor's refusal ("failed to initialize
    # the context: n_seq_max must be <= 256"; its allocations are compute_failed's)
    _shape("context_refused", r"^(?P<why>model does not support different K|(?:quantized V "
           r"cache|V cache quantization) requires flash_attn|[KV] cache type \S+ with block size"
           r"|SPLIT_MODE_TENSOR requires flash_attn|n_batch and n_ubatch cannot both be zero"
           r"|n_ctx and \S+ cannot both be zero|failed to initialize the context: )",
           lambda m, line: Fatal("load", why=line.rest.strip()),
           "llama_init_from_model: quantized V cache requires flash_attn to be enabled", _CTX),
    _shape("model_failed", r"(?i)failed to load model", lambda m, line: Fatal("load"),
           "common_init_from_params: failed to load model '/models/x.gguf'", hint="load model"),
    _shape("load_failed", r"(?i)error loading model|failed to load model|failed to create "
           r"context|failed to initialize the context", _fail("error", "load"),
           "common_init_from_params: failed to create context with model '/models/x.gguf'",
           hint=("model", "context"), fallback=True),
    # -- the weights ------------------------------------------------------------------------------
    _shape("tensors", r"^loading model tensors", _flag("tensors"),
           "load_tensors: loading model tensors, this can take a while... (mmap = true)",
           ("@tensors",)),
    _shape("offloaded", r"offloaded (\d+)/(\d+) layers to GPU",
           lambda m, line: Offloaded(int(m[1]), int(m[2])), "load_tensors: offloaded 33/33 layers "
           "to GPU",
           ("@tensors",)),
    _shape("layer_device", r"layer\s+(\d+) assigned to device (\S+?),",
           lambda m, line: LayerDevice(int(m[1]), m[2]),
           "load_tensors: layer   0 assigned to device CPU, is_swa = 0", ("@tensors",)),
    _shape("loader_path", r"tensors from (?P<path>.+?) \(version GGUF",
           _flag("loader_path", "path"), "llama_model_loader: loaded meta data with 24 key-value "
           "pairs and 291 "
           "tensors from m.gguf (version GGUF V3 (latest))", ("llama_model_loader",)),
    _shape("type_count", r"^\s*- type\s+(?P<t>\w+):\s+(?P<n>\d+) tensors",
           lambda m, line: Setting("types", m["t"], m["n"]), "llama_model_loader: - type  q4_K:  "
           "193 tensors",
           ("llama_model_loader",)),
    _shape("metadata", r"^\s*- kv\s+\d+:\s+(?P<key>[\w.]+)\s+(?:arr\[\w+,\d+\]|\w+)\s+= (?P<v>.*)$",
           lambda m, line: Setting("meta", m["key"], m["v"].strip()),
           "llama_model_loader: - kv   2:                          llama.block_count u32          "
           "    = 32",
           ("llama_model_loader",)),
    _shape("info", r"^(?P<key>[A-Za-z_][\w .]*?)\s*=\s*(?P<v>.*\S)\s*$",
           lambda m, line: Setting("info", m["key"].strip(), m["v"].strip()),
           "print_info: n_layer          = 32", ("@info",)),
    # -- the context and its KV cache -------------------------------------------------------------
    _shape("padded", r"^n_ctx = (\d+) \(padded\)", _flag("padded", 1), "create_memory: n_ctx = "
           "4096 (padded)",
           ("create_memory",)),
    _shape("expectation", r"matches expectation", _known,
           "~llama_context: CUDA0 compute buffer size is 300.0 MiB, matches expectation of 300.0 "
           "MiB", _CTX),
    _shape("pipeline", r"pipeline parallelism enabled(?: \(n_copies=(?P<copies>\d+)\))?",
           _flag("pipeline"), "llama_new_context_with_model: pipeline parallelism enabled "
           "(n_copies=4)", ("@context", "@reserve"),
           formats=(("copies", None, _N_COPIES),)),
    _shape("kv_self", r"KV self size\s*=\s*(?P<size>\d{1,15}(?:\.\d+)?) MiB, K "
           r"\((?P<kt>\w+)\):\s*(?P<k>\d{1,15}(?:\.\d+)?)"
           r" MiB, V \((?P<vt>\w+)\):\s*(?P<v>\d{1,15}(?:\.\d+)?) MiB", _kv_size,
           "llama_new_context_with_model: KV self size  = 1024.00 MiB, K (f16):  512.00 MiB, V "
           "(f16):  512.00 MiB",
           ("@context", "@kv")),
    # the value's trailing spaces are stripped by the reader, not by a lazy match (quadratic)
    _shape("context_value", r"^(?P<key>[a-z_][a-z0-9_]*)\s+= (?P<value>.*\S)",
           lambda m, line: Setting("context", m["key"], m["value"].strip()),
           "llama_context: n_ctx_seq             = 2048", _CTX, formats=(*_N_CTX_SEQ,
               ("key", "n_outputs_max", LineFormat(9460, None, "n_outputs_max")))),
    _shape("context_short", r"^(?P<key>n_ctx_per_seq|n_ctx_seq) \(\d+\) < n_ctx_train", _known,
           "llama_context: n_ctx_seq (1024) < n_ctx_train (4096) -- the full capacity of the "
           "model will not be "
           "utilized", _CTX, formats=_N_CTX_SEQ),
    _shape("swa_cache", r"creating\s+(?P<which>non-SWA|SWA) KV cache, size = (?P<cells>\d+) cells",
           lambda m, line: Flag("swa_cache", "swa" if m["which"] == "SWA" else "base"),
           "llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells", _KV,
           formats=(("which", "non-SWA", LineFormat(5429, None, "the iSWA cache")),)),
    _shape("kv_init", r"kv_size = (?P<kv_size>\d+), offload = (?P<offload>\d+), type_k = "
           r"'(?P<type_k>\w+)', type_v = '(?P<type_v>\w+)', n_layer = (?P<n_layer>\d+)",
           lambda m, line: KvInit(tuple(m.groupdict().items())),
           "llama_kv_cache_init: kv_size = 4096, offload = 1, type_k = 'f16', type_v = 'f16', "
           "n_layer = 32", _KV,
           formats=(("func", "init", LineFormat(4881, 5261, "the init: KV prefix")),)),
    _shape("kv_size", r"^size\s*=\s*(?P<size>\d{1,15}(?:\.\d+)?) MiB \(\s*(?P<cells>\d+) "
           r"cells,\s*(?P<layers>"
           r"\d+) layers,\s*(?P<seqs>\d+\s*(?:/\s*\d+)?) seqs[^)]*\)(?:,\s*(?P<a>[KR]) \((?P<kt>"
           r"\w+)\):\s*(?P<k>\d{1,15}(?:\.\d+)?) MiB)?(?:,\s*(?P<b>[VS]) "
           r"\((?P<vt>\w+)\):\s*(?P<v>\d{1,15}(?:\.\d+)?) "
           r"MiB)?",
           _kv_size, "llama_kv_cache: size =  256.00 MiB (  2048 cells,  32 layers,  1/1 seqs), K "
           "(f16):  128.00"
           " MiB, V (f16):  128.00 MiB", _KV),
    _shape("set_rows", r"LLAMA_SET_ROWS=0", _flag("set_rows_off"),
           "llama_kv_cache_unified: LLAMA_SET_ROWS=0, using old ggml_cpy() method for backwards "
           "compatibility", _KV),
    # -- compute reserves -------------------------------------------------------------------------
    _shape("reserving", r"^reserving \.\.\.", _flag("reserving"), "sched_reserve: reserving ...",
           ("@reserve",)),
    _shape("graph", r"graph(?: splits|: nodes| nodes)", _flag("reserved"),
           "sched_reserve: graph: nodes = 1030, splits = 3 (with bs=512), 3 (with bs=1)",
           ("@context", "@reserve")),
    _shape("flash_attn", r"Flash Attention (?:was auto, set to (?P<a>\w+)|(?P<b>enabled)|not "
           r"supported)", _flash_attn, "sched_reserve: Flash Attention was auto, set to enabled",
           ("@reserve",),
           formats=(("a", None, LineFormat(6325, None, "flash attention auto")),)),
    # -- devices ----------------------------------------------------------------------------------
    _shape("backend", r"found (\d+) (?P<b>CUDA|ROCm|MUSA) devices", _flag("backend", "b"),
           "ggml_cuda_init: found 2 ROCm devices:", ("ggml_cuda_init",)),
    # ggml-vulkan.cpp's "%zu = %s (%s) | uma: %d | ...": the device's name, then its driver's
    # (its description is the name alone, as "using device" prints it); no memory size
    _shape("vulkan_device", r"^(?P<i>\d+) = (?P<desc>.+) \([^()]*\) \| uma:",
           lambda m, line: DeviceSeen(f"Vulkan{m['i']}", m["desc"], None, None, "ggml_vulkan"),
           "ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) (radv) | uma: 0 | fp16: 1 |",
           ("ggml_vulkan",)),
    # ggml-metal-device.m's "GPU name:   %s (%s)" (the device MTL<i>, then its GPU); before
    # the MTL<i> names, ggml_metal_init's "GPU name:   %s" (the GPU alone; its buffers "Metal")
    _shape("metal_device", r"^GPU name:\s+(?:(?P<name>MTL\d+) \((?P<desc>.*)\)|(?P<gpu>.*\S))\s*$",
           lambda m, line: DeviceSeen(m["name"] or "Metal", m["desc"] or m["gpu"], None, None,
                                      "ggml_metal"),
           "ggml_metal_device_init: GPU name:   MTL0 (Apple M2 Max)", ("@metal",)),
    # the device's total as Metal counts it ("%8.2f MB": 1e6 bytes), what "using device"
    # subtracts the allocated from; of the GPU named just above
    _shape("metal_total", r"^recommendedMaxWorkingSetSize\s*=\s*(?P<mb>\d{1,15}(?:\.\d+)?) MB",
           _flag("metal_total", "mb"),
           "ggml_metal_device_init: recommendedMaxWorkingSetSize  = 22906.50 MB", ("@metal",)),
    # no two parts can take the same characters (a name has no space and no ": "; the
    # description runs greedily to the last "(N MiB,"): linear on a line of thousands of tabs
    _shape("device_info", r"^\s*(?:-\s+)?(?P<name>(?:[^\s:]|:(?!\s))+)\s*:\s(?P<desc>.*)"
           r"\((?P<total>\d{1,12}) MiB,\s*(?P<free>\d{1,12}) MiB free\)\s*$", _device_info,
           "common_param:   - CUDA0   : NVIDIA GeForce RTX 4090 (24080 MiB, 23500 MiB free)",
           ("common_param",)),
    _shape("breakdown", r"memory breakdown \[MiB\]", _flag("breakdown"),
           "common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   "
           "model   context   compute |",
           ("@breakdown",)),
    _shape("breakdown_row", r"^\s*\|\s+-\s+(?P<name>\S+)",
           lambda m, line: parse_breakdown_row(line.rest),
           "common_memory_breakdown_print: |   - CUDA0 (RTX 4090)   | 24080 = 1200 + (21000 = "
           "18000 + 2500 + 500) + 1880 |",
           ("@breakdown",), formats=(("name", "CPU_REPACK", _REPACK),
                                     ("name", "CPU_AARCH64", _AARCH64))),
    _shape("old_breakdown_row", r"^\s*-\s+(?P<name>\S+) "
           r"\((?P<desc>[^)]*)\):\s+(?P<total>\d{1,12}) =",
           lambda m, line: DeviceSeen(m["name"], m["desc"], None, int(m["total"]),
                                      "memory breakdown"),
           "llama_memory_breakdown_print:   - CUDA0 (RTX 4090):  24080 = 9436 + (14000 = 12000 + "
           "1500 + 500) + 644",
           ("@breakdown",)),
    _shape("bench_table", r"^\| (?:model|---)", _flag("bench"), "| model | size | params |",
           ("",), on="body"),
    # -- the server and its parts -----------------------------------------------------------------
    _shape("draft", r"loading draft model", _flag("draft"),
           "common_speculative_init_result: loading draft model '/models/draft.gguf'",
           ("common_speculative_init_result",)),
    _shape("model_path", r"^\s*(?:loading model '(?P<q>.+)'|loading model: (?P<p>.+?))\s*$",
           lambda m, line: Flag("model_path", m["q"] or m["p"]),
           "load_model: loading model '/models/7b.gguf'", ("load_model", "main", "@init")),
    _shape("clip_backend", r"CLIP using (?P<b>\S+) backend", _flag("mmproj_backend", "b"),
           "clip_ctx: CLIP using CUDA0 backend", ("@mmproj",)),
    # clip.cpp's clip_model_loader opens a projector file (its weights follow, once per modality)
    _shape("mmproj_file", r"^n_tensors:\s+\d+\s*$", _flag("mmproj_file"),
           "clip_model_loader: n_tensors:    439", ("@mmproj",)),
    # clip.cpp's load_hparams: the projector's weights (its tensors' bytes), allocated in the
    # CLIP backend's buffer (no buffer line of their own)
    _shape("mmproj_weights", r"^model size:\s+(?P<mib>\d{1,15}(?:\.\d+)?) MiB",
           _flag("mmproj_weights", "mib"), "load_hparams: model size:         811.79 MiB",
           ("@mmproj",)),
    _shape("mmproj_estimate", r"estimated worst-case memory usage of mmproj is "
           r"(?P<mib>\d{1,15}(?:\.\d+)?) MiB",
           _flag("mmproj_mib", "mib"), "load_model: estimated worst-case memory usage of mmproj "
           "is 0.38 MiB",
           ("load_model",)),
    _shape("slots", r"n_slots = (\d+), n_ctx_slot = (\d+)(?:, kv_unified = '(\w+)')?",
           lambda m, line: Slots(int(m[1]), int(m[2]), m[3]),
           "load_model: initializing, n_slots = 4, n_ctx_slot = 2048, kv_unified = 'true'",
           ("load_model",)),
    # the projector (--mmproj) did not load: the file a "failed to open GGUF file" names
    _shape("mmproj_failed", r"^failed to load multimodal model, '(?P<path>.+)'\s*$",
           _flag("mmproj_failed", "path"),
           "load_model: failed to load multimodal model, '/models/mmproj.gguf'", ("load_model",)),
    _shape("parts_end", r"initializing|loaded multimodal", _flag("parts_end"),
           "load_model: loaded multimodal model, '/models/mmproj.gguf'", ("load_model",),
           fallback=True),
    _shape("model_loaded", r"^model loaded\s*$", _flag("model_loaded"), "llama_server: model "
           "loaded",
           _SERVER),
    _shape("listening", r"listening on (?P<url>\S+?)(?: - starting the main loop)?\s*$",
           _flag("listening", "url"), "main: server is listening on http://127.0.0.1:8080 - "
           "starting the main "
           "loop", _SERVER),
    _shape("http_listening", r"HTTP server is listening, hostname: (\S+), port: (\d+)",
           lambda m, line: Flag("http_listening", f"http://{m[1]}:{m[2]}"),
           "main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 3",
           _SERVER),
    # -- --fit ------------------------------------------------------------------------------------
    _shape("fit_start", r"^(?:getting device memory data for initial parameters|fitting params "
           r"to device memory)", _flag("fit_start"), "common_init_: fitting params to device "
           "memory ...",
           ("@fit", "@init")),
    _shape("fit_projected", r"projected to use (-?\d+) MiB of (device|host) memory vs\. (-?\d+) "
           r"MiB of (?:free|total)", lambda m, line: FitProjected(int(m[1]), m[2], int(m[3])),
           "common_params_fit_impl: projected to use 46000 MiB of device memory vs. 46500 MiB of "
           "free device memory",
           _FIT),
    _shape("fit_projection", r"^\s*-\s+(?P<dev>.+?):\s+(?P<total>-?\d+) total,\s+(?P<used>-?\d+) "
           r"used,\s+(?P<free>-?\d+) free vs\. target of\s+(?P<target>-?\d+)", _fit_projection,
           "common_params_fit_impl:   - CUDA0 (RTX 4090):  24080 total,  26000 used,  -2500 free "
           "vs. target of   1024",
           _FIT),
    _shape("fit_layers", r"^\s*-\s+(?P<dev>.+?):\s+(?P<layers>\d+) layers(?:\s+\(\s*(?P<over>\d+)"
           r" overflowing\))?,\s+(?P<used>-?\d+) MiB used,\s+(?P<free>-?\d+) MiB free", _fit_layers,
           "common_params_fit_impl:   - CUDA0 (RTX 4090): 31 layers ( 1 overflowing),  22500 MiB "
           "used,    900 MiB free",
           _FIT),
    _shape("fit_target", r"cannot meet free memory target of (-?\d+) MiB, need to reduce device "
           r"memory by (-?\d+)", lambda m, line: FitTarget(int(m[1]), int(m[2])),
           "common_params_fit_impl: cannot meet free memory target of 1024 MiB, need to reduce "
           "device memory by 1548 MiB",
           _FIT),
    _shape("fit_context", r"context size reduced from (\d+) to (\d+)(?: -> need (-?\d+) MiB less "
           r"memory)?", lambda m, line: FitContext(int(m[1]), int(m[2]), _int(m[3])),
           "llama_params_fit_impl: context size reduced from 16777216 to 1399040 -> need 45053 "
           "MiB less memory in total",
           _FIT),
    _shape("fit_no_change", r"no changes needed", _flag("fit_no_change"),
           "common_params_fit_impl: the default parameters fit, no changes needed", _FIT),
    _shape("fit_ok", r"successfully fit params", _flag("fit_ok"),
           "common_fit_params: successfully fit params to free device memory", _FIT_END),
    _shape("fit_took", r"fitting params to free memory took (\d{1,15}(?:\.\d+)?) seconds",
           lambda m, line: FitEnd("took", seconds=float(m[1])),
           "common_fit_params: fitting params to free memory took 1.25 seconds", _FIT_END),
    # -- a router and its model servers (tools/server/server-models.cpp) ------------------------
    _shape("spawned", r"^spawning server instance with name=(?P<name>.+) on port (?P<port>\d+)\s*$",
           lambda m, line: Instance("spawned", m["name"], m["port"]),
           "load: spawning server instance with name=alpha on port 34497", ("load",)),
    _shape("spawn_args", r"^spawning server instance with args:", lambda m, line: Instance("args"),
           "load: spawning server instance with args:", ("load",)),
    _shape("exited", r"^instance name=(?P<name>.+) exited with status (?P<code>-?\d+)\s*$",
           lambda m, line: Instance("exited", m["name"], m["code"]),
           "run: instance name=broken exited with status 1", hint="instance name="),
    _shape("stopping", r"^stopping model instance name=(?P<name>.+?)\s*$",
           lambda m, line: Instance("stopping", m["name"]), "unload: stopping model instance "
           "name=beta",
           hint="stopping model instance"),
    _shape("killed", r"^(?:force-killing model instance name=(?P<a>.+) after timeout|model "
           r"name=(?P<b>.+) is still loading, force-killing)\s*$",
           lambda m, line: Instance("killed", m["a"] or m["b"]),
           "unload: force-killing model instance name=beta after timeout", hint="force-killing"),
    _shape("listing", r"Available models", lambda m, line: Instance("listing"),
           "operator(): Available models (3):", ("operator()",)),
    _shape("listed", r"^\s*\[\s*(?P<source>\w+)\] (?P<name>\S+)",
           lambda m, line: Instance("listed", m["name"], m["source"]), "operator():   "
           "[models_dir] alpha",
           ("operator()",)),
    # -- any function without shapes of its own ---------------------------------------------------
    _shape("meta_device", r"creating a Meta device (?:for tensor parallelism )?(?:with|from) "
           r"\d+ devices", _flag("meta_start"), "llama_prepare_model_devices: creating a Meta "
           "device for tensor parallelism from 2 devices:", hint="Meta device"),
    _shape("meta_member", r"^\s*- device \d+: (?P<name>\S+)(?: \((?P<desc>[^)]*)\))?\s*$",
           lambda m, line: MetaMember(m["name"], m["desc"] or ""),
           "llama_prepare_model_devices:   - device 0: CUDA0 (NVIDIA GeForce RTX 4090)",
           hint="- device"),
    _shape("using_device", r"using device (?P<name>\S+) \((?P<inner>.*)\) - (?P<free>\d{1,12}) "
           r"MiB free", _using_device, "llama_model_load_from_file_impl: using device CUDA0 "
           "(NVIDIA GeForce RTX 4090) (0000:01:00.0) - 23400 MiB free", hint="using device",
           formats=(("func", "llama_model_load_from_file_impl", _USING_DEVICE_OLD),)),
    # --moe-cache-mib N (after b11434; b11739's llama_moe_cache::impl, so "impl:"): a device
    # buffer of expert weights copied from the host, counted as context by the breakdown
    _shape("moe_cache", r"^\s*(?P<name>\S+) MoE cache size\s*=\s*(?P<mib>\d{1,15}(?:\.\d+)?) MiB"
           r" for ", lambda m, line: Buffer(m["name"], "moe_cache", m["mib"]),
           "impl:      CUDA0 MoE cache size =  8192.00 MiB for 16000.00 MiB of host experts",
           hint="MoE cache size",
           formats=(("name", None, LineFormat(11435, None, "MoE cache lines")),)),
    _shape("preferred_buffer", r"preferred buffer type (?P<bt>\w+)", _known,
           "load_tensors: tensor 'token_embd.weight' (q4_K) (and 0 others) cannot be used with "
           "preferred buffer type CPU_AARCH64, using CPU instead", hint="preferred buffer type",
           formats=(("bt", "CPU_AARCH64", _AARCH64), ("bt", "CPU_REPACK", _REPACK))),
    _shape("prompt_cache", r"prompt cache is enabled, size limit: (?P<limit>\d+(?:\.\d+)?) MiB",
           lambda m, line: PromptCache(float(m["limit"])),
           "load_model: prompt cache is enabled, size limit: 8192 MiB", hint="prompt cache"),
    _shape("cache_state", r"cache state: (?P<n>\d+) prompts, (?P<mib>\d+(?:\.\d+)?) MiB "
           r"\(limits: (?P<limit>\d+(?:\.\d+)?) MiB",
           lambda m, line: PromptCache(float(m["limit"]), int(m["n"]), float(m["mib"])),
           "update:  - cache state: 2 prompts, 3.125 MiB (limits: 8192.000 MiB, 2048 tokens, "
           "8589934592 est)", hint="cache state"),
)
# fmt: on


_NAMES = [s.name for s in SHAPES]
FAILURES = SHAPES[_NAMES.index("cuda_malloc") : _NAMES.index("load_failed") + 1]


def _index() -> tuple[tuple[Shape, ...], dict[str, tuple[Shape, ...]], tuple[Shape, ...]]:
    """(the whole-line shapes, each group's shapes in the order tried, those of a function
    of no group): the general shapes first (a build, a buffer, a failure: those listed
    before the weights'), then the group's own, then those of any function; a line without
    a function (group "") has only its own."""
    whole = tuple(s for s in SHAPES if s.on in ("text", "message"))
    rest = [s for s in SHAPES if s.on not in ("text", "message")]
    cut = next(i for i, s in enumerate(rest) if s.name == "tensors")
    general, later = rest[:cut], rest[cut:]
    anywhere = tuple(s for s in later if not s.groups)

    def shapes(g: str) -> tuple[Shape, ...]:
        own = tuple(s for s in later if g in s.groups)
        if g == "":
            return own
        return (*(s for s in general if not s.groups or g in s.groups), *own, *anywhere)

    names = {g for s in rest for g in s.groups}
    return whole, {g: shapes(g) for g in names}, shapes("-")


WHOLE_LINE, BY_GROUP, ANY_FUNCTION = _index()

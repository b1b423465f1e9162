"""What a llama.cpp log of any build says about memory, as frozen models: every buffer line
with its line number, the devices and their free memory, the settings the context printed,
the build, and the failure that ended a load. :mod:`.log_scan` fills them."""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.llama.builds import BuildRange
from lltui.core.units import MIB

KINDS = ("model", "kv", "rs", "compute", "output")
PARTS = ("model", "draft", "mmproj", "lora")


@dataclass(frozen=True, slots=True)
class BufferLine:
    """One ``<device> <kind> buffer size = <MiB> MiB`` line, as printed."""

    line: int  # 1-based, in the file
    device: str  # as llama.cpp names the buffer: CUDA0, CPU_Mapped, RPC0[host:port], CUDA_Host
    kind: str  # model, kv, rs, compute, output
    mib: float
    mib_text: str  # the number as printed ("3577.56")
    part: str = "model"  # whose buffer: the model, its draft, a projector (mmproj), a LoRA
    load: int = 1  # which load of the log it belongs to (fit probes, earlier runs first)
    cache: str | None = None  # KV lines of a two-cache model: "base" or "swa"; or its label
    function: str = ""  # the function that printed it

    @property
    def logged_bytes(self) -> int:
        """The bytes the printed MiB stand for (llama.cpp prints two decimals: +-5 KiB)."""
        return round(self.mib * MIB)


@dataclass(frozen=True, slots=True)
class DeviceSeen:
    """A device the log names, with what it says of its memory (MiB)."""

    name: str  # CUDA0, ROCm1, Vulkan0, RPC0[host:port]
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
    stage: str | None = None  # weights, kv, compute, output, context, load


@dataclass(frozen=True, slots=True)
class LogFacts:
    """Everything a scan of a log found. Empty fields: the log did not say."""

    lines: int = 0  # lines read
    recognised: int = 0  # lines that were llama.cpp's (any rule read them)
    build: int | None = None
    commit: str | None = None
    build_line: int | None = None
    build_note: str | None = None  # why a printed build number is not used
    build_range: BuildRange | None = None  # what the line formats imply
    tool: str | None = None  # server, cli, bench, mtmd
    command: tuple[str, ...] = ()  # a command line pasted with the log (its words)
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
    slots: tuple[int, int, str | None] | None = None  # llama-server: n_slots, n_ctx_slot, unified
    failures: tuple[AllocFailure, ...] = ()
    unparsed: tuple[tuple[int, str], ...] = ()  # lines about memory no rule could read
    unparsed_dropped: int = 0
    notes: tuple[str, ...] = ()

    def context_value(self, *keys: str) -> str | None:
        """The last printed value of the first of ``keys`` the context printed."""
        found = dict(self.context)
        for k in keys:
            if k in found:
                return found[k]
        return None

    def context_int(self, *keys: str) -> int | None:
        value = self.context_value(*keys)
        if value is None:
            return None
        head = value.split()[0] if value.split() else ""
        return int(head) if head.isdigit() else None

    def info(self, key: str) -> str | None:
        return dict(self.model_info).get(key)

    def last_load(self) -> tuple[BufferLine, ...]:
        """The buffer lines of the last load (the one that counts)."""
        return tuple(b for b in self.buffers if b.load == self.loads)

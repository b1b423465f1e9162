"""What one line of a llama.cpp log says, as a typed event. :mod:`.classify` makes them from
lines through the one pattern table (:mod:`.patterns`); the memory fold (:mod:`.memory`) and the
server's fold (:mod:`.server`) read them. Where a model of :mod:`.models` already says what a
line says (a device, a KV cache, a failure, a row of the breakdown table, a fit projection),
that model is the event, its line number filled in by the fold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lltui.core.llamalog.models import (
    AllocFailure,
    DeviceSeen,
    FitDeviceLayers,
    FitDeviceProjection,
    KvSizeLine,
    MemoryBreakdownRow,
    PromptCache,
)

# The facts a line's shape alone says (with a word of it as the value, where there is one):
# the table's shapes that make each show their lines.
Mark = Literal[
    "known", "tensors", "draft", "parts_end", "pipeline", "reserving", "reserved", "set_rows_off",
    "swa_cache", "meta_start", "backend", "flash_attn", "breakdown", "bench", "abort_at",
    "model_path", "loader_path", "mmproj_mib", "mmproj_backend", "padded", "model_loaded",
    "shutdown", "exiting", "listening", "http_listening", "fit_start", "fit_no_change", "fit_ok",
    "metal_total", "mmproj_weights", "pinned", "mmproj_file", "gguf",
    "mmproj_failed",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Flag:
    """A line whose shape is the fact (see :data:`Mark`)."""

    what: Mark
    value: str | None = None


KNOWN = Flag("known")


@dataclass(frozen=True, slots=True)
class Fatal:
    """Why llama-server cannot go on (a flag, a value, an environment variable, a port
    (``bind``: name the host), an rpc-server, a model file, the loader's error) and why."""

    what: Literal["flag", "value", "env", "bind", "rpc", "missing", "file", "damaged", "load"]
    name: str = ""
    why: str = ""


@dataclass(frozen=True, slots=True)
class Buffer:
    """``NAME KIND buffer size = X MiB``; ``part``: "lora" or "mmproj" where the line says
    whose it is (else the fold's part), ``cache`` a KV cache of its own kind."""

    device: str
    kind: str
    mib_text: str
    cache: str | None = None
    part: str | None = None


@dataclass(frozen=True, slots=True)
class Build:
    """The build the log says wrote it (a build number and its commit)."""

    number: int
    commit: str
    bench: bool = False  # llama-bench's ``build: COMMIT (N)``


@dataclass(frozen=True, slots=True)
class Command:
    """A command line pasted with the log."""

    tool: str  # server, cli, bench, mtmd
    words: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Setting:
    """``key = value``: ``table`` context (llama_context), info (print_info), meta (the
    loader's metadata), types (tensor types: the value a count)."""

    table: Literal["context", "info", "meta", "types"]
    key: str
    value: str


@dataclass(frozen=True, slots=True)
class KvInit:
    """``kv_size = N, offload = 1, type_k = 'f16', type_v = 'f16', n_layer = L`` (older)."""

    values: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Gpu:
    """ggml_cuda_init's ``Device N: NAME, compute capability X.Y, VMM: V[, VRAM: M MiB]``
    (CUDA, MUSA) or HIP's ``Device N: NAME, gfxNNNN (0xNNNN), VMM: V[, Wave Size: W][, VRAM:
    M MiB]``: named by the backend found before it."""

    index: int
    name: str
    vram_mib: int | None = None  # its memory (its share of one under GGML_CUDA_DEVICES)
    free_mib: int | None = None  # "(F MiB free)", printed for a few builds after the VRAM
    arch: str | None = None  # HIP's gcnArchName: gfx1151, gfx90a:sramecc+:xnack-


@dataclass(frozen=True, slots=True)
class Offloaded:
    """``offloaded N/M layers to GPU``."""

    layers: int
    of: int


@dataclass(frozen=True, slots=True)
class LayerDevice:
    """``layer N assigned to device X`` (-v)."""

    layer: int
    device: str


@dataclass(frozen=True, slots=True)
class MetaMember:
    """``- device I: NAME (DESCRIPTION)`` of a -sm tensor Meta device."""

    name: str
    description: str


@dataclass(frozen=True, slots=True)
class SystemInfo:
    """``system_info: n_threads = T (n_threads_batch = B) / N | CPU : AVX2 = 1 | ...``: the
    CPU's repack rules (x86, x86-avx512, arm; None where it says none) and the threads."""

    cpu: str | None
    threads: tuple[int, int] | None  # (-t, -tb) the run used


@dataclass(frozen=True, slots=True)
class Slots:
    """llama-server's ``n_slots = N, n_ctx_slot = C[, kv_unified = 'U']``."""

    n: int
    ctx: int
    unified: str | None


@dataclass(frozen=True, slots=True)
class BreakdownTable:
    """The whole memory breakdown table of a ``--log-jsonl`` object."""

    rows: tuple[MemoryBreakdownRow, ...]


@dataclass(frozen=True, slots=True)
class JsonRecord:
    """A line of the JSON log older llama-servers printed (build info, errors)."""

    build: int | None
    commit: str
    error: str | None


@dataclass(frozen=True, slots=True)
class FitProjected:
    """``projected to use U MiB of device memory vs. F MiB of free device memory``."""

    used_mib: int
    of: str
    free_mib: int


@dataclass(frozen=True, slots=True)
class FitTarget:
    """``cannot meet free memory target of T MiB, need to reduce device memory by R MiB``."""

    target_mib: int
    reduce_by_mib: int


@dataclass(frozen=True, slots=True)
class FitContext:
    """``context size reduced from A to B [-> need S MiB less memory in total]``."""

    ctx_from: int
    ctx_to: int
    saved_mib: int | None


@dataclass(frozen=True, slots=True)
class FitEnd:
    """How ``--fit`` ended: ``failed`` or ``error`` (with the reason printed, and the
    failure it names), or the time it took (``took``)."""

    status: Literal["failed", "error", "took"]
    reason: str | None = None
    seconds: float | None = None
    failure: AllocFailure | None = None


@dataclass(frozen=True, slots=True)
class Instance:
    """A router's line about one of its model servers: ``spawned`` (value: its port),
    ``args`` (its arguments follow, one a line), ``exited`` (value: the status), ``stopping``,
    ``killed`` (after a timeout); ``listing`` (the models follow), ``listed`` (value: where
    the router found it)."""

    what: Literal["spawned", "args", "exited", "stopping", "killed", "listing", "listed"]
    name: str = ""
    value: str = ""


Event = (
    Flag | Instance | Buffer | Build | Command | Setting | KvInit | Gpu | Offloaded | LayerDevice
    | MetaMember | Slots | SystemInfo | BreakdownTable | JsonRecord | FitProjected | FitTarget
    | FitContext | FitEnd | AllocFailure | DeviceSeen | KvSizeLine | MemoryBreakdownRow
    | FitDeviceProjection | FitDeviceLayers | PromptCache | Fatal
)  # fmt: skip

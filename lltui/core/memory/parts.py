"""Every part of a llama-server run besides the main model: the draft model of speculative
decoding (``-md``), the multimodal projector (``--mmproj``) and LoRA adapters (``--lora``).

- The draft is a second llama model and context, made as llama-server makes it
  (common_base_params_to_speculative): the main settings, with the draft's ``-ngld``, ``-devd``
  and ``-ctkd``/``-ctvd``, the main context's size (llama_n_ctx of the target), outputs for
  ``-np`` sequences and no embeddings. Its weights, KV, output and compute buffers are those of
  :func:`~lltui.core.memory.allocate.estimate_once` for that model: exact as the main model's are.
- The projector (clip.cpp) loads every tensor into one buffer of the first GPU (the host with
  ``--no-mmproj-offload`` or no GPU): exact. Its compute buffer is reserved for a warmup image;
  lltui approximates it from the vision tower's shapes (marked approximate).
- A LoRA adapter's tensors go to the buffer of the weight they modify (llama-adapter.cpp), on
  the host when that weight is repacked: exact.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.gguf.model import GgufModel
from lltui.core.gguf.values import as_int
from lltui.core.memory.common import CPU, CPU_ALIGNMENT, FitError, device_alloc_size, pad
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.results import FitOptions, FitResult, PartDevice, PartEstimate

PART_NAMES = ("model", "draft", "mmproj", "lora")
_LORA_SUFFIX = re.compile(r"\.lora_[ab]$")


@dataclass(frozen=True, slots=True)
class ExtraModels:
    """The headers of the other files a command line loads (read by the caller)."""

    draft: GgufModel | None = None
    mmproj: GgufModel | None = None
    loras: tuple[GgufModel, ...] = ()

    def __bool__(self) -> bool:
        return self.draft is not None or self.mmproj is not None or bool(self.loras)


def draft_settings(st: LlamaArgs, n_ctx: int) -> LlamaArgs:
    """The draft context's settings, as common_base_params_to_speculative derives them."""
    split_mode = st.split_mode
    if st.draft_devices is not None and len(st.draft_devices) == 1:
        split_mode = "layer"
    return replace(
        st,
        n_ctx=n_ctx,
        n_gpu_layers=st.draft_n_gpu_layers,
        devices=st.draft_devices if st.draft_devices is not None else st.devices,
        split_mode=split_mode,
        type_k=st.draft_type_k,
        type_v=st.draft_type_v,
        overrides=st.draft_overrides,  # -otd, -cmoed, -ncmoed: the draft's own
        embedding=False,
        pooling=None,
        reranking=False,
        draft_model=None,
        draft_hf_repo=None,
        mmproj=None,
        lora=(),
        spec_types=(),  # the draft context outputs one token per slot
    )


def _draft(
    main: FitResult,
    draft: GgufModel,
    st: LlamaArgs,
    all_devs: Sequence[DeviceSpec],
    opts: FitOptions,
) -> PartEstimate:
    from lltui.core.memory.allocate import estimate_once  # allocate imports this module's types
    from lltui.core.memory.problem import FitProblem

    dst = draft_settings(st, main.resolved.n_ctx)
    problem = FitProblem.of(draft, dst, all_devs, replace(opts, search=False))
    hp = problem.hp
    r = estimate_once(problem)
    rows = [
        PartDevice(d.name, d.weights_bytes, d.kv_bytes, d.compute_bytes)
        for d in r.devices
        if d.name != CPU
    ]
    rows.append(
        PartDevice(
            CPU,
            r.host.weights_bytes,
            r.host.kv_bytes,
            r.host.compute_bytes,
            r.host.output_bytes,
            mapped_bytes=r.host.mapped_bytes,
        )
    )
    notes = []
    if draft.metadata.get("general.architecture") != main.model.architecture:
        notes.append(
            f"draft architecture {hp.arch} differs from the main model's "
            f"({main.model.architecture})"
        )
    if hp.n_vocab != main.model.n_vocab:
        notes.append(
            f"draft vocabulary ({hp.n_vocab}) differs from the main model's "
            f"({main.model.n_vocab}): llama-server may refuse the pair"
        )
    return PartEstimate(
        part="draft",
        path=draft.path,
        devices=tuple(rows),
        buffers=r.buffers,
        approximate_compute=False,
        layers=tuple(r.layer_devices),
        n_ctx=r.resolved.n_ctx,
        notes=tuple(notes),
    )


def mmproj_device(st: LlamaArgs, all_devs: Sequence[DeviceSpec]) -> DeviceSpec | None:
    """clip.cpp's backend: -mmdev, else the first -dev (common/arg.cpp), else the first GPU
    llama.cpp registered (local GPUs before RPC servers); None (the host) with
    --no-mmproj-offload, ``-mmdev none``, ``-dev none`` or no GPU."""
    if not st.mmproj_offload or st.mmproj_device == "none":
        return None
    wanted = st.mmproj_device
    if wanted is None and st.devices is not None:
        if not st.devices:
            return None
        wanted = st.devices[0]
    if wanted is not None:
        for d in all_devs:
            if wanted in (d.device_name, d.name):
                return d
        known = ", ".join(d.device_name for d in all_devs) or "none"
        raise FitError(f"invalid device for the projector: {wanted} (devices: {known})")
    for kind in ("cuda", "rpc"):
        for d in all_devs:
            if d.kind == kind:
                return d
    return None


def _clip_int(md: Mapping[str, object], *keys: str) -> int:
    for k in keys:
        x = as_int(md.get(k))
        if x:
            return x
    return 0


def mmproj_compute_bytes(mm: GgufModel, flash_attn: bool, offloaded: bool) -> tuple[int, int]:
    """An approximation of clip.cpp's compute buffers for its warmup image: (on its device,
    on the host). The graph's peak is taken as the largest of three phases, in f32 values per
    patch position: the patch embedding (the image and its im2col), one vision block
    (4·n_embd + n_ff/2 + 0.3·n_embd, plus the attention scores beyond 2·n_embd when flash
    attention is off) and the projector into the text model's width (n_embd + 2.1·proj).
    Fitted to clip.cpp's buffers for LLaVA-style towers of 17 to 1025 positions: within
    about 10 % there (25 % for narrow towers over large images). Offloaded, the image
    waits in a host buffer of its own."""
    md = mm.metadata
    image = _clip_int(md, "clip.vision.image_size")
    patch = _clip_int(md, "clip.vision.patch_size") or 14
    n_embd = _clip_int(md, "clip.vision.embedding_length")
    n_ff = _clip_int(md, "clip.vision.feed_forward_length") or 4 * n_embd
    n_head = _clip_int(md, "clip.vision.attention.head_count") or 1
    proj = _clip_int(md, "clip.vision.projection_dim") or n_embd
    if not image or not n_embd:
        # audio encoders and dynamic-size towers: a block at the tensors' widest row
        widest = max((t.dims[0] for t in mm.tensors if t.dims), default=0)
        return 4 * 1500 * 4 * widest, 0
    n_pos = (image // patch) ** 2 + 1
    pixels = 4 * 3 * image * image
    im2col = 4 * n_pos * 3 * patch * patch
    block = 4 * n_pos * (4 * n_embd + n_ff // 2 + (3 * n_embd) // 10)
    if not flash_attn:
        block += max(0, 4 * n_pos * n_pos * n_head - 4 * n_pos * 2 * n_embd)
    projector = 4 * n_pos * (n_embd + (21 * proj) // 10)
    if offloaded:
        return pad(max(im2col, block, projector), CPU_ALIGNMENT), pad(pixels, CPU_ALIGNMENT)
    return pad(max(pixels + im2col, block, projector), CPU_ALIGNMENT), 0


def is_projector(mm: GgufModel) -> bool:
    """Whether a file is a multimodal projector: clip.cpp reads its clip.* keys."""
    return any(str(k).startswith("clip.") for k in mm.metadata)


def _mmproj(
    mm: GgufModel, st: LlamaArgs, main: FitResult, all_devs: Sequence[DeviceSpec]
) -> PartEstimate:
    if not is_projector(mm):
        raise FitError(
            f"--mmproj {mm.path}: not a multimodal projector (no clip.* keys): llama-server "
            "fails to load it"
        )
    dev = mmproj_device(st, all_devs)
    name = CPU if dev is None else dev.name
    weights = sum(device_alloc_size(dev, t.type, t.dims, t.nbytes) for t in mm.tensors)
    compute, host_compute = mmproj_compute_bytes(mm, main.resolved.flash_attn, dev is not None)
    buf = CPU if dev is None else dev.name
    notes = []
    proj_n_embd = _clip_int(mm.metadata, "clip.vision.projection_dim")
    if proj_n_embd and proj_n_embd != main.model.n_embd:
        notes.append(
            f"mmproj projects to {proj_n_embd} dimensions, the model has {main.model.n_embd}: "
            "llama-server refuses the pair"
        )
    rows = [PartDevice(name, weights, 0, compute)]
    buffers = [(buf, "model", weights), (buf, "compute", compute)]
    if host_compute:
        rows.append(PartDevice(CPU, 0, 0, host_compute))
        buffers.append((CPU, "compute", host_compute))
    return PartEstimate(
        part="mmproj",
        path=mm.path,
        devices=tuple(rows),
        buffers=tuple(buffers),
        approximate_compute=True,
        notes=tuple(notes),
    )


def _lora(adapter: GgufModel, main: FitResult, all_devs: Sequence[DeviceSpec]) -> PartEstimate:
    kind = adapter.metadata.get("general.type")
    if kind != "adapter":  # llama-adapter.cpp: "expect general.type to be 'adapter'"
        raise FitError(
            f"--lora {adapter.path}: not a LoRA adapter (general.type "
            f"{repr(kind) if kind is not None else 'missing'}): llama-server refuses it"
        )
    by_name = {p.name: p for p in main.placements if not p.duplicate}
    devs = {d.name: d for d in all_devs}
    per: dict[tuple[str, str], int] = {}  # (owner device, buffer) -> bytes
    missing = 0
    for t in adapter.tensors:
        base = by_name.get(_LORA_SUFFIX.sub("", t.name))
        if base is None:
            missing += 1
            continue
        # the weight's own buffer type; a repacked weight's adapter goes to a plain CPU buffer
        buffer = CPU if base.buffer.endswith("_REPACK") else base.buffer
        dev = None if base.device == CPU else devs.get(base.device)
        key = (base.device, buffer)
        per[key] = per.get(key, 0) + device_alloc_size(dev, t.type, t.dims, t.nbytes)
    notes = (f"{missing} adapter tensor(s) match no weight of the model",) if missing else ()
    owners: dict[str, int] = {}
    for (owner, _), b in per.items():
        owners[owner] = owners.get(owner, 0) + b
    return PartEstimate(
        part="lora",
        path=adapter.path,
        devices=tuple(PartDevice(n, b, 0, 0) for n, b in owners.items()),
        buffers=tuple((buf, "LoRA", b) for (_, buf), b in per.items()),
        approximate_compute=False,
        notes=notes,
    )


def estimate_parts(
    main: FitResult,
    extra: ExtraModels,
    st: LlamaArgs,
    all_devs: Sequence[DeviceSpec],
    opts: FitOptions,
) -> tuple[PartEstimate, ...]:
    """The draft, projector and adapters of ``st`` as llama-server allocates them."""
    out: list[PartEstimate] = []
    if extra.draft is not None:
        out.append(_draft(main, extra.draft, st, all_devs, opts))
    if extra.mmproj is not None:
        out.append(_mmproj(extra.mmproj, st, main, all_devs))
    out.extend(_lora(a, main, all_devs) for a in extra.loras)
    return tuple(out)


def with_parts(result: FitResult, parts: Sequence[PartEstimate]) -> FitResult:
    """``result`` with each part's bytes added to the devices (and host) that hold them, a
    per-device breakdown, and the verdicts made again."""
    if not parts:
        return result
    devices = []
    for d in result.devices:
        rows = [(p.part, pd) for p in parts for pd in p.devices if pd.device == d.name]
        # the breakdown sums to the row's total (the host row's output buffers too)
        breakdown: dict[str, int] = {"model": d.total_bytes}
        for part, pd in rows:
            breakdown[part] = breakdown.get(part, 0) + pd.total_bytes
        w = d.weights_bytes + sum(pd.weights_bytes for _, pd in rows)
        kv = d.kv_bytes + sum(pd.kv_bytes for _, pd in rows)
        c = d.compute_bytes + sum(pd.compute_bytes for _, pd in rows)
        out = d.output_bytes + sum(pd.output_bytes for _, pd in rows)
        total = d.total_bytes + sum(pd.total_bytes for _, pd in rows)
        fits = None if d.free_bytes is None else total + d.unaccounted_bytes <= d.free_bytes
        devices.append(
            replace(
                d,
                weights_bytes=w,
                kv_bytes=kv,
                compute_bytes=c,
                output_bytes=out,
                total_bytes=total,
                fits=fits,
                parts=tuple((k, breakdown[k]) for k in PART_NAMES if k in breakdown),
            )
        )
    host_rows = [pd for p in parts for pd in p.devices if pd.device == CPU]
    h = result.host
    host = replace(
        h,
        weights_bytes=h.weights_bytes + sum(pd.weights_bytes for pd in host_rows),
        mapped_bytes=h.mapped_bytes + sum(pd.mapped_bytes for pd in host_rows),
        kv_bytes=h.kv_bytes + sum(pd.kv_bytes for pd in host_rows),
        output_bytes=h.output_bytes + sum(pd.output_bytes for pd in host_rows),
        compute_bytes=h.compute_bytes + sum(pd.compute_bytes for pd in host_rows),
        total_bytes=h.total_bytes + sum(pd.total_bytes for pd in host_rows),
    )
    from lltui.core.memory.allocate import NOT_COUNTED

    counted = {NOT_COUNTED[p.part] for p in parts}
    notes = tuple(n for p in parts for n in p.notes)
    return replace(
        result,
        devices=tuple(devices),
        host=host,
        parts=tuple(parts),
        fits=all(e.fits is not False for e in devices),
        warnings=tuple(w for w in result.warnings if w not in counted) + notes,
    )


def less_free(
    devices: Sequence[DeviceSpec], parts: Sequence[PartEstimate]
) -> tuple[DeviceSpec, ...]:
    """``devices`` with what the parts take there subtracted from their free memory: the
    main model's search runs in what is left (the draft's KV at the context given)."""
    out = []
    for d in devices:
        taken = sum(p.bytes_on(d.name) for p in parts)
        if d.free_bytes is not None and taken:
            d = replace(d, free_bytes=max(0, d.free_bytes - taken))
        out.append(d)
    return tuple(out)

"""One estimate at fixed settings: every buffer llama.cpp allocates, summed per device and
for the host, against the free memory of each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache

from lltui.core.cmdline.flag_values import tensor_split_extra
from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.llama.builds import PINNED_BUILD
from lltui.core.memory.arch_table import known_to_llama_cpp
from lltui.core.memory.common import CPU, is_gpu
from lltui.core.memory.compute import ComputeBuffers, compute_buffers
from lltui.core.memory.compute_graph import ComputeLayout
from lltui.core.memory.context import Resolved, layer_devices, resolve_context
from lltui.core.memory.devices import DeviceSpec, host_buffer, mixed_vendors
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.kv import KvCache, kv_caches, output_buffer, rs_buffers
from lltui.core.memory.placement import TensorPlacement, place_tensors
from lltui.core.memory.problem import FitProblem
from lltui.core.memory.results import (
    DeviceEstimate,
    FitOptions,
    FitResult,
    HostEstimate,
    model_summary,
)

# What an estimate says when the file of a part was not read (estimate() with ExtraModels
# counts it and drops the line).
NOT_COUNTED = {
    "draft": "the draft model (-md, -hfd) is not included",
    "mmproj": "the multimodal projector (--mmproj) is not included",
    "lora": "the LoRA adapters (--lora) are not included",
}

# A placement already made: (placements, weights buffer sizes, device index of each layer).
Placed = tuple[Sequence[TensorPlacement], dict[str, int], tuple[int, ...]]
# Bytes per owner (a device name, or CPU for the host) and slot (weights, kv, output, compute).
_PerOwner = dict[str, dict[str, int]]


def pipeline_parallel(
    hp: Hparams, r: Resolved, st: LlamaArgs, devices: Sequence[DeviceSpec], enabled: bool = True
) -> bool:
    """llama_context turns pipeline parallelism on only for a full layer split (from b2413:
    ``enabled``)."""
    return (
        enabled
        and len(devices) > 1
        and r.n_gpu_layers > hp.n_layer_all
        and st.split_mode == "layer"
        and st.kv_offload
        and not st.overrides
    )


def estimate_once(
    p: FitProblem, placed: Placed | None = None, *, compute: str = "all"
) -> FitResult:
    """The estimate for exactly these settings (no search); ``placed`` reuses a placement
    made for the same layers and devices. ``compute`` "none" (no compute buffer, no graph
    planned) or "prompt" (the prompt batch's graph alone, not the token's): a floor of
    every device's total, where it does not fit, the estimate does not either."""
    model, hp, st, all_devs, devs, opts = p.model, p.hp, p.args, p.devices, p.used, p.options
    r = resolve_context(hp, st, server=opts.server, rules=opts.rules)
    devs = tuple(devs)
    placements: Sequence[TensorPlacement]
    meta: tuple[DeviceSpec, ...] = ()
    if st.split_mode == "tensor":  # (its module loads for -sm tensor alone)
        from lltui.core.memory.tensor_parallel import tensor_parallel_devices

        meta = tensor_parallel_devices(hp, st, devs)
    if meta:
        # one Meta device holds every offloaded layer; its tensors are cut per device below
        devs = devs[:1]
    if placed is None or meta:
        ts = () if meta else tuple(st.tensor_split)
        ldev = _layer_devices(hp.n_layer_all, r.n_gpu_layers, devs, ts)
        placements, wbufs = place_tensors(
            model, hp, st, devs, ldev, all_devices=all_devs, repack_profile=opts.repack_profile
        )
    else:
        placements, wbufs, ldev = placed
    kv = _kv_caches(hp, r, st, devs, tuple(ldev))
    pp = pipeline_parallel(hp, r, st, devs, opts.rules.pipeline_parallel)

    # every buffer as llama.cpp logs it: (name, kind, bytes)
    out_name, out_bytes = output_buffer(hp, r, st, devs, ldev[hp.n_layer_all])
    buffers: list[tuple[str, str, int]] = [(n, "model", b) for n, b in wbufs.items()]
    if r.output_rows != "none":  # before b2413 the logits lived outside any buffer
        buffers.append((out_name, "output", out_bytes))
    for cache in kv:
        buffers.extend((n, "KV", b) for n, b in cache.buffers)
    buffers.extend((n, "RS", b) for n, b in rs_buffers(hp, r, st, devs, ldev).items())
    # -sm tensor: the Meta device's graph is planned as one device's (its buffer type sizes
    # each tensor whole)
    st_c = replace(st, split_mode="layer") if meta else st
    layout = ComputeLayout(hp, r, st_c, devs, ldev, placements, pp, compute == "prompt")
    buffers_of = compute_buffers(layout) if compute != "none" else ComputeBuffers({}, False)
    buffers.extend((n, "compute", b) for n, b in buffers_of.sizes.items())
    if meta:
        from lltui.core.memory.tensor_parallel import split_over_meta

        buffers, kv = split_over_meta(model, hp, r, st, meta, buffers, kv, placements, ldev)
        devs = meta

    per = _per_owner(buffers, devs)
    dev_layers: dict[str, list[int]] = {}
    for il, di in enumerate(ldev):
        for d in devs if meta and di >= 0 else (devs[di],) if di >= 0 else ():
            dev_layers.setdefault(d.name, []).append(il)
        if di < 0:
            dev_layers.setdefault(CPU, []).append(il)
    estimates = _device_estimates(per, dev_layers, devs, ldev[hp.n_layer_all], opts)
    host = _host_estimate(per, wbufs)
    estimates.append(
        _cpu_estimate(
            host,
            dev_layers,
            ldev[hp.n_layer_all],
            host_margin(devs, opts),
            _shared_free(devs, estimates, opts.host_free_bytes),
        )
    )
    return FitResult(
        model=model_summary(model, hp),
        resolved=r,
        settings=st,
        devices=tuple(estimates),
        host=host,
        buffers=tuple(buffers),
        kv=tuple(kv),
        # the placements as made (a Placements keeps what is worked out from them)
        placements=placements if isinstance(placements, tuple) else tuple(placements),
        layer_devices=tuple(devs[i].name if i >= 0 else CPU for i in ldev),
        pipeline_parallel=pp,
        fits=all(e.fits is not False for e in estimates),
        max_ctx=None,
        warnings=_warnings(hp, r, st, devs, all_devs),
        compute_exact=buffers_of.exact,
        compute_note=buffers_of.note,
        meta_devices=tuple(d.name for d in meta),
    )


# Layers' devices and KV caches do not hang on the weights' types: worked out once for all
# the quants of a model at the same settings.
_layer_devices = lru_cache(maxsize=64)(layer_devices)


@lru_cache(maxsize=64)
def _kv_caches(
    hp: Hparams, r: Resolved, st: LlamaArgs, devs: tuple[DeviceSpec, ...], ldev: tuple[int, ...]
) -> tuple[KvCache, ...]:
    return tuple(kv_caches(hp, r, st, devs, ldev))


def _per_owner(buffers: Sequence[tuple[str, str, int]], devs: Sequence[DeviceSpec]) -> _PerOwner:
    """Buffer bytes summed per device (the host as CPU) and slot."""
    names = {d.name for d in devs}
    per: _PerOwner = {}
    for name, kind, nbytes in buffers:
        slot = {"model": "weights", "KV": "kv", "RS": "kv"}.get(kind, kind)
        slots = per.setdefault(name if name in names else CPU, {})
        slots[slot] = slots.get(slot, 0) + nbytes
    return per


def _device_estimates(
    per: _PerOwner,
    dev_layers: dict[str, list[int]],
    devs: Sequence[DeviceSpec],
    out_dev: int,
    opts: FitOptions,
) -> list[DeviceEstimate]:
    """Each offload device's totals; CUDA ones keep the margin free on top."""
    estimates = []
    for d in devs:
        p = per.get(d.name, {})
        total = p.get("weights", 0) + p.get("kv", 0) + p.get("compute", 0)
        margin = opts.margin_bytes if is_gpu(d) else 0
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
                fits=None if d.free_bytes is None else total + margin <= d.free_bytes,
                description=d.description,
                output_layer=out_dev >= 0 and devs[out_dev] is d,
                device_name=d.device_name,
            )
        )
    return estimates


def _host_estimate(per: _PerOwner, wbufs: dict[str, int]) -> HostEstimate:
    hostp = per.get(CPU, {})
    return HostEstimate(
        weights_bytes=hostp.get("weights", 0),
        mapped_bytes=wbufs.get("CPU_Mapped", 0),
        kv_bytes=hostp.get("kv", 0),
        output_bytes=hostp.get("output", 0),
        compute_bytes=hostp.get("compute", 0),
        total_bytes=(
            hostp.get("weights", 0)
            + hostp.get("kv", 0)
            + hostp.get("output", 0)
            + hostp.get("compute", 0)
        ),
    )


def host_margin(devs: Sequence[DeviceSpec], opts: FitOptions) -> int:
    """The room kept free on the host: llama.cpp's fit keeps its target (-fitt, 1024 MiB)
    there only where no device takes layers (common/fit.cpp, nd == 0); beside GPUs it
    keeps it on each GPU alone."""
    return 0 if devs else opts.margin_bytes


def _shared_free(
    devs: Sequence[DeviceSpec], estimates: Sequence[DeviceEstimate], host_free: int | None
) -> int | None:
    """The host's free memory beside an integrated GPU in use: one memory, what the GPU
    offers (the host's available, or the whole of the machine described) less what the GPU
    takes with its margin; else ``host_free``."""
    shared = [(d, e) for d, e in zip(devs, estimates, strict=False) if d.integrated]
    if not shared or shared[0][0].free_bytes is None:
        return host_free
    pool = shared[0][0].free_bytes or 0
    return max(0, pool - sum(e.total_bytes + e.unaccounted_bytes for _, e in shared))


def _cpu_estimate(
    host: HostEstimate,
    dev_layers: dict[str, list[int]],
    out_dev: int,
    margin: int,
    free: int | None,
) -> DeviceEstimate:
    """The host as the last device row, with ``free`` host memory: its total counts the
    output buffer (host memory, as the host line's does; llama.cpp's memory breakdown
    leaves it out)."""
    return DeviceEstimate(
        name=CPU,
        kind="cpu",
        layers=tuple(dev_layers.get(CPU, ())),
        weights_bytes=host.weights_bytes,
        kv_bytes=host.kv_bytes,
        compute_bytes=host.compute_bytes,
        output_bytes=host.output_bytes,
        total_bytes=host.total_bytes,
        unaccounted_bytes=margin,
        free_bytes=free,
        fits=None if free is None else host.total_bytes + margin <= free,
        description="host",
        output_layer=out_dev < 0,
    )


def _warnings(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devs: Sequence[DeviceSpec],
    all_devs: Sequence[DeviceSpec] = (),
) -> tuple[str, ...]:
    """What the estimate leaves out, llama.cpp may refuse at run time, or takes otherwise
    than the user may think."""
    warnings: list[str] = []
    left = integrated_left_out(devs, all_devs) if st.devices is None else None
    if left:
        warnings.append(left)
    igpu = next((d for d in devs if d.integrated), None)
    if igpu is not None and st.load_mode == "auto":  # (maps_weights)
        first = next((i for i, d in enumerate(devs) if d.kind == "cuda"), -1)
        where = (host_buffer(devs, first) if st.host_buffer else None) or "CPU buffers"
        warnings.append(
            f"{igpu.label}: integrated, and llama.cpp offers no mmap beside one: -lm auto "
            f"reads the weights kept on the host into {where}, not mapped from the file "
            "(-lm mmap maps them)"
        )
    mixed = mixed_vendors(devs)
    if mixed:
        warnings.append(mixed)
    if not known_to_llama_cpp(hp.arch):
        warnings.append(
            f"llama.cpp (b{PINNED_BUILD}) does not know the architecture {hp.arch!r}: its "
            "llama-server stops with 'unknown model architecture' (a newer build may know it)"
        )
    extra = tensor_split_extra(st.tensor_split, len(devs))
    if extra:
        warnings.append(extra)
    if st.draft_model or st.draft_hf_repo:
        warnings.append(NOT_COUNTED["draft"])
    if st.mmproj:
        warnings.append(NOT_COUNTED["mmproj"])
    if st.lora:
        warnings.append(NOT_COUNTED["lora"])
    if st.split_mode == "tensor":
        from lltui.core.memory.tensor_parallel import META_SCRATCH_NOTE, tensor_parallel_why_not

        why = tensor_parallel_why_not(hp, devs)
        if why:
            warnings.append(f"-sm tensor: {why}; estimated as a layer split")
        else:
            warnings.append(f"-sm tensor is experimental in llama.cpp; {META_SCRATCH_NOTE}")
    if hp.n_layer < hp.n_layer_all:
        warnings.append(f"{hp.n_layer_all - hp.n_layer} MTP layer(s) are not loaded (no MTP draft)")
    if 0 < hp.n_ctx_train < r.n_ctx_seq:
        warnings.append(_past_training(hp.n_ctx_train, r, st))
    return tuple(warnings)


def integrated_left_out(devs: Sequence[DeviceSpec], all_devs: Sequence[DeviceSpec]) -> str | None:
    """Where llama.cpp leaves an integrated GPU out beside a discrete one (no -dev), the
    warning that says so."""
    left = [d for d in all_devs if d.integrated and d not in devs]
    if not left:
        return None
    names = ",".join(
        d.device_name for d in all_devs if d.kind != "rpc" and (d in left or d in devs)
    )
    return (
        f"{', '.join(d.label for d in left)}: an integrated GPU, which llama.cpp uses only "
        f"where no other GPU is found: left out (-dev {names} uses it)"
    )


def _past_training(trained: int, r: Resolved, st: LlamaArgs) -> str:
    """A sequence's context past the model's trained one: llama.cpp warns (``n_ctx_seq >
    n_ctx_train``) and llama-server caps each slot at the trained context, unless RoPE
    scaling moves it."""
    said = (
        f"context {r.n_ctx_seq} per sequence is past the {trained} the model was trained on "
        f"(llama.cpp warns n_ctx_seq > n_ctx_train)"
    )
    if st.rope_scaling:
        return (
            f"{said}; RoPE scaling as asked ({' '.join(st.rope_scaling)}): llama.cpp reckons "
            "the trained context from it and llama-server caps each slot there"
        )
    useful = r.slots_ctx(trained)
    waste = f"; the KV cache past {useful} cells is never used" if r.n_ctx > useful else ""
    return (
        f"{said}: llama-server caps each slot at {trained}{waste}; to go further, scale "
        "RoPE (--rope-scaling yarn --rope-scale N) where the model supports it"
    )

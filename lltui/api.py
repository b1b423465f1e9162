"""The public Python API: thin functions over lltui's services.

    >>> from lltui.api import detect_gpus, MultiGPUConfig, SplitMode
    >>> cfg = MultiGPUConfig(n_gpu=2, split_mode=SplitMode.LAYER, tensor_split=[0.5, 0.5])
    >>> cfg.to_llama_args()
    ['-sm', 'layer', '-ts', '0.5,0.5', '-np', '1']

GPU functions read real GPUs through NVML by default and return empty results where there
are none; pass ``source="sim:PROFILE"`` to read a simulated rig instead, or any other
``--source`` (``smi:HOST``, ``replay:FILE``...): one that cannot be read raises ValueError.
An argument of a type a function does not take raises TypeError, in one line naming it.
"""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

from lltui.core.api_args import check_arg as _check
from lltui.core.api_args import check_indices
from lltui.core.cmdline.multigpu import MultiGPUConfig, SplitMode
from lltui.core.fit.rough import best_quant_for, estimate_vram_bytes
from lltui.core.monitor.models import RigSample  # (rig_sample's type, read at run time too)
from lltui.core.nccl.enums import NCCLDataType, NCCLResult
from lltui.services.nccl import (
    NCCLCommunicator,
    get_nccl_info,
    get_nccl_version,
    is_nccl_available,
    kaggle_nccl_config,
    print_nccl_info,
    setup_nccl_environment,
)
from lltui.services.rig import RigRequest, one_sample

if TYPE_CHECKING:
    from lltui.core.fit.quant_table import QuantFit
    from lltui.core.memory.results import FitResult
    from lltui.services.fit import FitRequest

__all__ = [
    "GPUInfo",
    "MultiGPUConfig",
    "NCCLCommunicator",
    "NCCLDataType",
    "NCCLResult",
    "SplitMode",
    "auto_config",
    "can_fit_model",
    "colab_t4_single_config",
    "detect_gpus",
    "estimate_model_vram",
    "explain_log",
    "get_cuda_version",
    "get_free_vram",
    "get_nccl_info",
    "get_nccl_version",
    "get_total_vram",
    "gpu_count",
    "is_nccl_available",
    "kaggle_nccl_config",
    "kaggle_t4_dual_config",
    "plan_models",
    "print_nccl_info",
    "recommend_quantization",
    "rig_sample",
    "setup_nccl_environment",
]


@dataclass(frozen=True)
class GPUInfo:
    """One GPU as the API reports it. ``index`` is the CUDA device index where known (an AMD
    GPU's: its place after the NVIDIA ones, as llama.cpp numbers its devices)."""

    index: int
    name: str
    total_memory: int | None  # bytes; None where the source does not say
    free_memory: int | None  # bytes, when read (total less used where only that is said)
    compute_capability: str  # "7.5"
    cuda_version: str  # the driver's CUDA version, "12.4"; "" for an AMD GPU or where unknown
    uuid: str = ""
    pci_bus_id: str = ""
    nvml_index: int = 0


_SOURCE = "a source such as 'nvml' or 'sim:PROFILE'"
_MODEL = "a GGUF path or a size in billions of parameters"
_TOKENS = "a number of tokens"


def rig_sample(source: str = "nvml") -> RigSample | None:
    """One quick read of a source; None where a source of this machine (nvml, smi, amd,
    auto) finds no GPU here. ValueError (one line, as ``lltui gpus`` says it) for a spec
    that does not parse or names several rigs (``smi:a,smi:b``), or another host, a file or
    a server that cannot be read."""
    from lltui.core.monitor.models import SourceUnavailable

    _check("source", source, (str,), _SOURCE)
    if RigRequest(source).is_fleet:  # (read as one spec, the rest was the first one's argument)
        raise ValueError(f"source {source}: a fleet is several rigs: give one source")
    try:
        return one_sample(source)
    except SourceUnavailable as exc:
        raise ValueError(f"source {source}: {exc}") from None


def detect_gpus(source: str = "nvml") -> list[GPUInfo]:
    """Every visible GPU in llama.cpp's order (CUDA's, AMD GPUs after); an empty list when
    there is none or no driver here (ValueError for a host, file or server ``source`` names
    that cannot be read)."""
    sample = rig_sample(source)
    return _gpu_infos(sample) if sample is not None else []


def _gpu_infos(sample: RigSample) -> list[GPUInfo]:
    out = []
    # NVIDIA GPUs CUDA_VISIBLE_DEVICES hides have no CUDA index: this process cannot use them
    # (an AMD GPU has none either way)
    cuda_known = any(g.info.cuda_index is not None for g in sample.gpus)
    # llama.cpp's order, as fit's: the NVIDIA GPUs, then the AMD ones (ggml lists CUDA's
    # devices before HIP's), numbered on from the last NVIDIA one, wherever they sit on the bus
    ordered = sorted(
        sample.gpus,
        key=lambda g: (
            g.info.vendor == "amd",
            g.info.cuda_index if g.info.cuda_index is not None else g.info.index,
        ),
    )
    index = 0
    for g in ordered:
        hidden = cuda_known and g.info.cuda_index is None and g.info.vendor != "amd"
        if g.lost or hidden:
            continue
        info = g.info
        cc = info.compute_capability
        index = info.cuda_index if info.cuda_index is not None else index
        out.append(
            GPUInfo(
                index=index,
                name=info.name,
                total_memory=info.memory_total,
                free_memory=g.free_bytes,  # (None: unknown, never 0)
                compute_capability=f"{cc[0]}.{cc[1]}" if cc else "",
                # (a mixed rig's CUDA version is its NVIDIA GPUs', none of an AMD one's)
                cuda_version="" if info.vendor == "amd" else sample.info.cuda_version or "",
                uuid=info.uuid,
                pci_bus_id=info.pci_bus_id,
                nvml_index=info.index,
            )
        )
        index += 1
    return out


def gpu_count(source: str = "nvml") -> int:
    """Number of visible GPUs; 0 on a machine without one."""
    return len(detect_gpus(source))


def get_cuda_version(source: str = "nvml") -> str | None:
    """The CUDA version the driver supports ("12.4"), or None without a driver."""
    sample = rig_sample(source)
    return sample.info.cuda_version if sample is not None else None


def _select(gpus: list[GPUInfo], gpu_indices: list[int] | None) -> list[GPUInfo]:
    check_indices("gpu_indices", gpu_indices)
    if gpu_indices is None:
        return gpus
    known = {g.index for g in gpus}
    missing = [i for i in gpu_indices if i not in known]
    if missing:
        raise ValueError(f"no GPU with index {missing[0]!r} (have {sorted(known)})")
    return [g for g in gpus if g.index in set(gpu_indices)]


def get_total_vram(gpu_indices: list[int] | None = None, source: str = "nvml") -> int:
    """Total VRAM in bytes over all GPUs or the CUDA indices given (0 without one).
    ValueError where a GPU does not report it, as get_free_vram: 0 would count it as none."""
    chosen = _select(detect_gpus(source), gpu_indices)
    unknown = [g.index for g in chosen if g.total_memory is None]
    if unknown:
        raise ValueError(f"GPU {unknown[0]} does not report its total memory")
    return sum(g.total_memory or 0 for g in chosen)


def get_free_vram(gpu_indices: list[int] | None = None, source: str = "nvml") -> int:
    """Free VRAM in bytes now over all GPUs or the CUDA indices given (0 without one).
    ValueError where a GPU does not report it (a vGPU's [N/A]): 0 would read as full."""
    return sum(g.free_memory or 0 for g in _known_free(detect_gpus(source), gpu_indices))


def _only(sample: RigSample, chosen: list[GPUInfo]) -> RigSample:
    """``sample`` with the GPUs chosen alone."""
    keep = {g.nvml_index for g in chosen}
    return replace(sample, gpus=tuple(g for g in sample.gpus if g.info.index in keep))


def _known_free(gpus: list[GPUInfo], gpu_indices: list[int] | None) -> list[GPUInfo]:
    """The GPUs chosen, each reporting its free memory (ValueError for one that does not)."""
    chosen = _select(gpus, gpu_indices)
    unknown = [g.index for g in chosen if g.free_memory is None]
    if unknown:
        raise ValueError(
            f"GPU {unknown[0]} does not report its free memory: give the memory to fit in"
        )
    return chosen


# -- the rough path: sizes in billions of parameters ----------------------------------------


ModelRef = float | str | os.PathLike[str]
ModelPath = str | os.PathLike[str]


# What a model needs on one GPU that takes every layer: the fit service's estimate for one
# device larger than any model
_ONE_BIG_GPU = "1048576GiB"


def _one_gpu(
    path: str | os.PathLike[str], context_size: int, sample: RigSample | None = None
) -> FitRequest:
    """Every layer on the GPUs at ``context_size`` with one slot: on one GPU larger than any
    model, or on the GPUs of ``sample`` as they are now (as the fit view fits the rig it
    watches)."""
    from lltui.core.cmdline.args import parse_llama_args, spell
    from lltui.core.cmdline.flag_values import NGL_ALL
    from lltui.services.fit import FitRequest

    words = spell("n_ctx", context_size) + spell("n_gpu_layers", NGL_ALL) + spell("n_parallel", 1)
    args = parse_llama_args(words)
    if sample is not None:
        return FitRequest(os.fspath(path), args, sample=sample, watch_rig=True)
    return FitRequest(os.fspath(path), args, gpus=_ONE_BIG_GPU)


def _on_gpus(result: FitResult) -> int:
    """What the GPUs need, with the margin fit keeps on each (CUDA context, cuBLAS, pool):
    the need its verdict compares with the free memory."""
    return sum(d.total_bytes + d.unaccounted_bytes for d in result.devices if d.kind != "cpu")


def _exact_vram(path: str | os.PathLike[str], context_size: int) -> int:
    from lltui.services.fit import FitFailed, fit

    try:
        return _on_gpus(fit(_one_gpu(path, context_size)).result)
    except FitFailed as exc:
        raise ValueError(str(exc)) from None


def _quant_rows(request: FitRequest) -> dict[str, QuantFit]:
    """Each llama-quantize type of the GGUF placed as ``request`` asks, by name."""
    from lltui.services.fit import FitFailed, quant_table

    try:
        rows = quant_table(request).rows
    except FitFailed as exc:
        raise ValueError(str(exc)) from None
    return {r.row.name.upper(): r for r in rows if r.result is not None}


def _quant_row(request: FitRequest, quantization: str) -> QuantFit:
    key = quantization.strip().upper().replace("-", "_")  # as normalize_quant reads it
    row = _quant_rows(request).get(key)
    if row is None:
        raise ValueError(f"llama-quantize has no type {quantization!r} for this model")
    return row


def _fits_on(
    path: str | os.PathLike[str], quantization: str | None, context_size: int, sample: RigSample
) -> bool:
    """Whether fit places every layer of the GGUF (or of its ``quantization``) on the GPUs of
    ``sample`` in their free memory, each GPU with its own margin and compute buffers."""
    from lltui.services.fit import FitFailed, fit

    request = _one_gpu(path, context_size, sample)
    if quantization:
        return bool(_quant_row(request, quantization).fits)
    try:
        return fit(request).result.fits
    except FitFailed as exc:
        raise ValueError(str(exc)) from None


# llama.cpp's -c: a count in an int32
_MAX_CONTEXT = 2**31 - 1


def _check_context(context_size: int, model: object = None) -> None:
    """The same context sizes for a GGUF path and a size in billions: what -c takes. 0 is
    the model's trained context, as -c 0 reads it, which only a GGUF says: refused for a
    size in billions (``model``), where it read as no KV cache at all."""
    _check("context_size", context_size, (Integral,), _TOKENS)
    if not 0 <= context_size <= _MAX_CONTEXT:
        raise ValueError(
            f"context_size: {context_size} is out of range (0 to {_MAX_CONTEXT}, as llama.cpp's -c)"
        )
    if context_size == 0 and isinstance(model, Real):
        raise ValueError(
            "context_size: 0 is the model's trained context (llama.cpp's -c 0), which a size "
            "in billions does not say: give the context in tokens"
        )


def _check_model(model_size_b: object, quantization: object, context_size: int) -> None:
    _check("model_size_b", model_size_b, (Real, str, os.PathLike), _MODEL)
    _check("quantization", quantization, (str, type(None)), "a type such as 'Q4_K_M', or None")
    _check_context(context_size, model_size_b)


def estimate_model_vram(
    model_size_b: ModelRef,
    quantization: str | None = "Q4_K_M",
    context_size: int = 4096,
    overhead_factor: float = 1.15,
) -> int:
    """VRAM in bytes to run a model fully on one GPU.

    Given a GGUF path, the exact estimator: what llama.cpp allocates (weights, KV cache,
    compute buffers) for that file at ``context_size``, or for its ``quantization`` as
    llama-quantize would write it (None or "": the file as it is); ``overhead_factor`` is not
    used. Given a size in billions of parameters, a rule of thumb: weights at the type's bits
    per weight (None or "": Q4_K_M, as a size has no file; every llama-quantize type but
    MXFP4_MOE) plus an f16 KV cache of a Llama-class shape, times ``overhead_factor``. Either way
    ValueError for a ``context_size`` llama.cpp's -c does not take (0 to 2**31 - 1); 0 is
    the model's trained context, as -c 0 reads it: a GGUF path's only (every function here
    refuses it for a size in billions, which says none)."""
    _check_model(model_size_b, quantization, context_size)
    _check("overhead_factor", overhead_factor, (Real,), "a number such as 1.15")
    if isinstance(model_size_b, str | os.PathLike):
        if not quantization:
            return _exact_vram(model_size_b, context_size)
        row = _quant_row(_one_gpu(model_size_b, context_size), quantization)
        assert row.result is not None  # (_quant_rows keeps the rows placed)
        return _on_gpus(row.result)
    return estimate_vram_bytes(
        model_size_b, quantization or "Q4_K_M", context_size, overhead_factor
    )


def can_fit_model(
    model_size_b: ModelRef,
    quantization: str | None = None,
    context_size: int = 4096,
    gpu_indices: list[int] | None = None,
    source: str = "nvml",
) -> bool:
    """Whether the model runs with every layer on the GPUs (all, or these CUDA indices, as
    llama.cpp sees them under ``CUDA_VISIBLE_DEVICES``) in their free memory now, with one
    slot of ``context_size`` tokens. For a GGUF path (the file as it is, or its
    ``quantization`` as llama-quantize would write it) the placement ``lltui fit -c N -ngl
    all -np 1`` makes on these GPUs: each keeps its own margin and compute buffers, and
    layers are whole. For a size in billions only a rough check: the rule of thumb of
    :func:`estimate_model_vram` at ``quantization`` (None: Q4_K_M) against the free memory
    summed over the GPUs, which no placement is. False where there is no GPU (a model that
    cannot be read, or a type it has not, is a ValueError all the same); ValueError where a
    GPU does not report its free memory."""
    _check_model(model_size_b, quantization, context_size)
    sample = rig_sample(source)
    chosen = _known_free(_gpu_infos(sample) if sample is not None else [], gpu_indices)
    if sample is None or not chosen:
        estimate_model_vram(model_size_b, quantization, context_size)  # (raises as with GPUs)
        return False
    if isinstance(model_size_b, str | os.PathLike):
        return _fits_on(model_size_b, quantization, context_size, _only(sample, chosen))
    free = sum(g.free_memory or 0 for g in chosen)
    return free > 0 and estimate_model_vram(model_size_b, quantization, context_size) <= free


def recommend_quantization(
    model_size_b: ModelRef,
    available_vram_gb: float | None = None,
    context_size: int = 4096,
    source: str = "nvml",
) -> str:
    """The highest-quality llama-quantize type that fits ``available_vram_gb`` (GB of 10^9
    bytes, as one GPU; None: the GPUs now, in their free memory): for a GGUF path, by the
    exact estimator, the largest file that fits (F16 included), as ``lltui quant`` marks it
    (on the GPUs now, placed as it places it: each GPU with its own margin and compute
    buffers, layers whole); for a size in billions, by the rule of thumb against the free
    memory summed, Q8_0 at most. Raises ValueError when none fits, or for a memory that is
    not a positive number."""
    _check_model(model_size_b, None, context_size)
    _check("available_vram_gb", available_vram_gb, (Real, type(None)), "a number of GB, or None")
    sample = rig_sample(source) if available_vram_gb is None else None
    chosen = _known_free(_gpu_infos(sample), None) if sample is not None else []
    if available_vram_gb is None:
        available = sum(g.free_memory or 0 for g in chosen)
    elif not 0 < available_vram_gb < 1e12:  # nan and inf too
        raise ValueError(f"available_vram_gb: {available_vram_gb!r} is not a memory size in GB")
    else:
        available = int(available_vram_gb * 1e9)
    if isinstance(model_size_b, str | os.PathLike):
        if sample is not None and chosen:  # on the GPUs, each with its margin, as quant
            rows = _quant_rows(_one_gpu(model_size_b, context_size, _only(sample, chosen)))
            fits = {name: r.fits is True for name, r in rows.items()}
        else:  # one GPU of the memory given
            rows = _quant_rows(_one_gpu(model_size_b, context_size))
            fits = {name: _on_gpus(r.result) <= available for name, r in rows.items() if r.result}
        fitting = [
            (r.row.file_bytes, name)
            for name, r in rows.items()
            if fits.get(name) and not r.row.above_source  # (F32 of an F16 file adds nothing)
        ]
        # the largest file; of two the same size, the first listed, as lltui quant marks it
        quant = max(fitting, key=lambda f: f[0])[1] if fitting else None
        what = os.fspath(model_size_b)
    else:
        quant = best_quant_for(model_size_b, available, context_size)
        what = f"a {model_size_b:g}B model"
    if quant is None:
        gb = math.floor(available / 1e7) / 100  # rounded down: never what would fit
        raise ValueError(
            f"no quantization of {what} fits in {gb:.2f} GB with a {context_size}-token context"
        )
    return quant


def kaggle_t4_dual_config(model_size_b: float = 7.0, n_parallel: int = 2) -> MultiGPUConfig:
    """Kaggle's two Tesla T4s on PCIe: layer split, even halves, main GPU 0; ``n_parallel``
    as :class:`MultiGPUConfig` takes it (TypeError for no whole number, ValueError below 1)."""
    _check("model_size_b", model_size_b, (Real,), "a size in billions of parameters")
    return MultiGPUConfig(
        n_gpu=2,
        split_mode=SplitMode.LAYER,
        main_gpu=0,
        tensor_split=[0.5, 0.5],
        gpu_layers=None,
        n_parallel=n_parallel,
    )


def colab_t4_single_config(model_size_b: float = 7.0, n_parallel: int = 1) -> MultiGPUConfig:
    """Colab's single Tesla T4: no split; ``n_parallel`` as :class:`MultiGPUConfig` takes it."""
    _check("model_size_b", model_size_b, (Real,), "a size in billions of parameters")
    return MultiGPUConfig(n_gpu=1, split_mode=SplitMode.NONE, n_parallel=n_parallel)


def auto_config(
    model_size_b: ModelRef | None = None,
    context_size: int = 4096,
    n_parallel: int = 1,
    source: str = "nvml",
) -> MultiGPUConfig:
    """Split settings for the GPUs here, as fit resolves them (llama.cpp's order, AMD GPUs
    after NVIDIA ones; an integrated GPU beside a discrete one left out, as llama.cpp leaves
    it). A model that fits on one GPU (by :func:`estimate_model_vram`: for a GGUF path the
    file as it is, for a size in billions the rough estimate at Q4_K_M) stays on the GPU with
    the most free memory, which decodes fastest; otherwise layers are split as llama.cpp
    splits them by default (by free memory), written out. No GPU: everything on the CPU.
    ``warnings``: what fit warns of these GPUs (NVIDIA and AMD GPUs in one server, an
    integrated GPU left out). A model that cannot be read is a ValueError, GPUs or not."""
    from lltui.services.devices import split_devices

    _check("model_size_b", model_size_b, (Real, str, os.PathLike, type(None)), _MODEL)
    _check_context(context_size, model_size_b)
    need = None if model_size_b is None else estimate_model_vram(model_size_b, None, context_size)
    sample = rig_sample(source)
    gpus, said = split_devices(sample) if sample is not None else ([], [])
    warnings = tuple(said)
    if not gpus:
        return MultiGPUConfig(
            n_gpu=1, split_mode=SplitMode.NONE, gpu_layers=0, n_parallel=n_parallel
        )
    if len(gpus) == 1:
        return MultiGPUConfig(
            n_gpu=1, split_mode=SplitMode.NONE, n_parallel=n_parallel, warnings=warnings
        )
    # (unknown free memory: no room counted)
    roomiest = max(range(len(gpus)), key=lambda i: gpus[i].free_bytes or 0)
    if need is not None and need <= (gpus[roomiest].free_bytes or 0):
        return MultiGPUConfig(
            n_gpu=len(gpus),
            split_mode=SplitMode.NONE,
            main_gpu=roomiest,
            n_parallel=n_parallel,
            warnings=warnings,
        )
    from lltui.core.memory.context import default_split

    split = default_split(gpus)
    shares = [round(x / sum(split), 3) for x in split]
    shares[-1] = round(1.0 - sum(shares[:-1]), 3)
    return MultiGPUConfig(
        n_gpu=len(gpus),
        split_mode=SplitMode.LAYER,
        main_gpu=0,
        tensor_split=shares,
        n_parallel=n_parallel,
        warnings=warnings,
    )


def explain_log(
    log: str | os.PathLike[str],
    model: str | os.PathLike[str] | None = None,
    build: int | str | None = None,
    model_from_log: bool = False,
) -> dict[str, Any]:
    """A llama.cpp log read back against lltui's prediction, as ``lltui explain LOG --json``
    prints it: ``build``, ``failed`` and one ``buffers`` entry per buffer line the log printed
    (``logged_bytes`` beside ``predicted_bytes``, null where no model header was read).
    ``model``: the GGUF; ``model_from_log``: read the model the log names instead (a log is
    data: it is not opened unless asked); ``build``: the llama.cpp build that wrote it,
    where the log does not say (5300 or "b5300"). Raises ValueError (one line) for a file
    that is not a llama.cpp log or cannot be read, a ``model`` path that does not exist (a
    model that is there but cannot be read is ``model.note``), or a build that is no build
    number."""
    from lltui.core.explain.report import report_to_json
    from lltui.core.llama.builds import parse_build
    from lltui.services.explain import ExplainFailed, ExplainRequest, explain

    _check("log", log, (str, os.PathLike), "a llama.cpp log's path")
    _check("model", model, (str, os.PathLike, type(None)), "a GGUF path or hf: reference, or None")
    _check("model_from_log", model_from_log, (bool,), "True or False")
    number = parse_build(build) if build is not None else None
    ref = os.fspath(model) if model is not None else None
    try:
        request = ExplainRequest(os.fspath(log), ref, number, model_from_log=model_from_log)
        report = explain(request)
    except ExplainFailed as exc:
        raise ValueError(str(exc)) from None
    return report_to_json(report)


Flags = Sequence[str | int | float] | str  # ["-c", 8192], or "-c 8192" as a shell splits it


def _words(flags: Flags) -> list[str]:
    """llama-server's flags as command-line words (a number as the command line writes it)."""
    _check(
        "flags",
        flags,
        (str, Sequence),
        "a list of llama-server's words, or one string",
        items=(str, Real),
    )
    if not isinstance(flags, str):
        return [str(w) for w in flags]
    try:
        return shlex.split(flags)
    except ValueError as exc:  # "No closing quotation"
        raise ValueError(f"flags {flags!r}: {exc}") from None


def plan_models(
    models: Sequence[ModelPath | tuple[ModelPath, Flags]],
    flags: Flags = (),
    gpus: str | None = None,
) -> dict[str, Any]:
    """A plan for several models resident together (llama-server's router, or one server
    each), as ``lltui fit A.gguf B.gguf ... --json`` prints it: each model is a path or
    reference, or ``(path, its own llama-server flags)``; ``flags`` apply to every model
    first (flags: a list of words, numbers too, ``["-c", 8192]``, or one string, ``"-c
    8192"``); with no model, ``--models-dir DIR`` or ``--models-preset FILE`` among them
    plans a router's models, as ``lltui fit --models-preset FILE`` does; ``gpus`` as
    ``--gpus`` (None: this machine's GPUs; where it has none, the CPU alone: the CLI shows a
    simulated rig there, the API does not). A folder's or preset's model that cannot be read
    is left out, with a note (as the router leaves it out). Raises ValueError (one line) for
    a model given that cannot be read, settings llama.cpp refuses or no model at all;
    TypeError for one path where a list of them belongs."""
    from lltui.services.fit import FitFailed
    from lltui.services.launch.router_prep import given_entries
    from lltui.services.plan import PlanRequest
    from lltui.services.plan import plan_models as plan

    if isinstance(models, str | os.PathLike):  # (a str is a sequence: of one-letter paths)
        raise TypeError(f"models: a list of models, not one path: [{os.fspath(models)!r}]")
    _check("models", models, (Sequence,), "a list of models")
    _check("gpus", gpus, (str, type(None)), "a --gpus spec such as '24GiB,24GiB', or None")
    words = _words(flags)
    pairs = []
    for m in models:
        pair = (m, ()) if isinstance(m, str | os.PathLike) else m
        _check("models", pair, (tuple, list), "each a path, or a (path, flags) pair")
        if len(pair) != 2:
            raise ValueError(f"models: each a path, or a (path, flags) pair, not {m!r}")
        _check("models", pair[0], (str, os.PathLike), "each a path, or a (path, flags) pair")
        pairs.append((os.fspath(pair[0]), _words(pair[1])))
    try:
        entries, notes = given_entries(pairs, words)
        report = plan(PlanRequest(entries, gpus=gpus, notes=notes))
    except FitFailed as exc:
        raise ValueError(str(exc)) from None
    return report.to_json()

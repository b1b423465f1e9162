"""What llama.cpp's own ``--fit`` (on by default in llama-server) would run for a command
that does not fit, and its predicted speed: shown beside ``--best``'s lines so the two can
be compared. After common/fit.cpp of the pinned llama.cpp, in its order of steps:

1. -sm tensor: it aborts, even where the command fits;
2. the command as given, if it fits;
3. where the memory is short in all (not only on one GPU) and ``-c`` was not given, a
   smaller context, down to ``-fitc`` (4096): the one the memory measured at the trained
   context and at -fitc says would fill what is free (on several GPUs less a guess at what
   whole layers waste); on one GPU, or none, it stops there unless even -fitc is too much;
4. with no GPU, it aborts; else where the user set -ngl (not auto: its default), (on
   several GPUs) -ts or -sm row, or -ot/--n-cpu-moe, it aborts: the load goes on as given,
   at the context it cut;
5. at that context, weights to the host: a dense model's layers from the front (``-ngl``
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

from lltui.core.cmdline.flag_values import NGL_AUTO, writable_split
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
    # why it then aborts, leaving the rest as given (flags: at most the context it cut)
    aborts: str = ""


def llama_fit_choice(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
    prompt_tokens: int | None = None,
) -> FitChoice | None:
    """llama.cpp's --fit for this command (see the module docstring); None when --fit is
    off or nothing it tries fits. ``prompt_tokens``: the prompt its speed is priced at, as
    the options it is compared with are (None: speed_of's)."""
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

    def _choice(
        res: FitResult, flags: tuple[str, ...], why: str, aborts: str = ""
    ) -> FitChoice | None:
        used = select_devices(tuple(devices), res.settings)
        try:  # (one that cannot be priced is no choice, as when run() priced every one)
            speed = speed_of(model, res, used, opts, prompt_tokens=prompt_tokens)
            priced = replace(res, speed=speed)
            return replace(_chosen(priced, flags, why), aborts=aborts)
        except (FitError, ValueError):
            return None

    first = run([])
    if first is None:
        return None
    if settings.split_mode == "tensor":  # (its first check: even where it fits)
        return _choice(first, (), "the command as given", TENSOR)
    if _fits(first):
        return _choice(first, (), "the command fits as given")
    n_gpus = sum(d.kind != "cpu" for d in first.devices)
    cut = None if settings.n_ctx else _cut_ctx(first, settings, n_gpus, run)
    ctx = cut[0] if cut else None
    at = ("-c", str(ctx)) if ctx is not None else ()
    if cut is not None and cut[1] and n_gpus <= 1:  # (it returns without measuring again)
        res = run(at)
        return None if res is None else _choice(res, at, f"context cut to {ctx}")
    stop = _placement_set(settings, n_gpus)
    if stop:  # (the context it cut stays)
        res = run(at) if at else first
        why = f"context cut to {ctx}" if at else "the command as given"
        return None if res is None else _choice(res, at, why, stop)
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

    def moe(k: int) -> tuple[str, ...]:
        return (*at, "--n-cpu-moe", str(k)) if k else at

    def dense(n: int) -> tuple[str, ...]:
        return (*at, "-ngl", str(n_all - n)) if n else at

    cut_to = f"context cut to {ctx}; " if at else ""
    if first.model.n_expert > 1:
        k = _smallest(0, n_all - 1, lambda k: place(moe(k)) is not None)
        found = place(moe(k)) if k is not None else None
        if found is not None and k is not None:
            where = f"experts of {counted(k, 'layer')} on the host" if k else "all on the GPUs"
            return _choice(found[1], found[0], cut_to + where)
    left = _smallest(0, n_all, lambda n: place(dense(n)) is not None)
    found = place(dense(left)) if left is not None else None
    if found is None or left is None:
        return None
    where = f"{left} of {n_all} layers on the host" if left else "all on the GPUs"
    return _choice(found[1], found[0], cut_to + where)


TENSOR = "it is not implemented for -sm tensor"


def fit_aborts(settings: LlamaArgs, choice: FitChoice | None = None) -> str | None:
    """Why llama.cpp's --fit stops short of placing the weights (it aborts and the load goes
    on as the command was given, at most with the context it cut, common/fit.cpp): -sm
    tensor, else a placement the user set where the command does not fit as given
    (``choice``: llama_fit_choice's, which says; without one, any such placement); None:
    --fit is free to act."""
    if not settings.fit:
        return None
    if choice is not None:
        return choice.aborts or None
    if settings.split_mode == "tensor":
        return TENSOR
    return _placement_set(settings, 2)


def _cut_ctx(
    first: FitResult,
    settings: LlamaArgs,
    n_gpus: int,
    run: Callable[[Sequence[str]], FitResult | None],
) -> tuple[int, bool] | None:
    """The context --fit's step 2 sets where the memory is short in all (not just on one
    GPU): from the memory at the trained context and at -fitc, the context that would use
    what is free less the targets (on several GPUs less about half a layer per GPU more, a
    sixth for MoE models), rounded down to 256 per stream, and True; -fitc and False where
    even that is over. None: it leaves the context as it is."""
    rows = [d for d in first.devices if d.kind != "cpu"] or list(first.devices)
    free = sum((d.free_bytes or 0) - d.unaccounted_bytes for d in rows)
    used = sum(d.total_bytes for d in rows)
    n_max, n_min = first.resolved.n_ctx, _min_ctx(first, settings)
    if free - used >= 0 or n_max <= n_min:
        return None
    low = run(["-c", str(n_min)])
    if low is None:
        return None
    used_min = sum(d.total_bytes for d in low.devices if d.name in {r.name for r in rows})
    if n_gpus > 1:
        ngl = settings.n_gpu_layers
        per_layer = sum(d.weights_bytes for d in rows) // max(
            1, min(ngl, first.model.n_layer) if ngl >= 0 else first.model.n_layer
        )
        free -= (n_gpus + 1) * per_layer // (6 if first.model.n_expert else 2)
    if free <= used_min:
        return n_min, False
    ctx = n_min + (n_max - n_min) * (free - used_min) // (used - used_min)
    align = _STEP * first.resolved.n_stream
    return max(ctx - ctx % align, n_min), True


def _min_ctx(first: FitResult, settings: LlamaArgs) -> int:
    return (settings.fit_ctx or 4096) * first.resolved.n_stream


def _placement_set(settings: LlamaArgs, n_gpus: int) -> str | None:
    """--fit's checks after the context, in its order (-ts and -sm row only count on
    several GPUs): what it will not change, so it aborts."""
    if n_gpus == 0:
        return "with no GPU it only cuts an unset context, and that is not enough"
    if settings.n_gpu_layers != NGL_AUTO:  # (-ngl auto, or -1, is its default)
        return "-ngl is set"
    if n_gpus > 1 and any(x != 0 for x in settings.tensor_split):
        return "-ts is set"
    if n_gpus > 1 and settings.split_mode == "row":
        return "it is not implemented for -sm row"
    if settings.overrides:
        return "-ot, --cpu-moe or --n-cpu-moe is set"
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

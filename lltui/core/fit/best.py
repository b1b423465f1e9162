"""``lltui fit --best GOAL``: llama-server command lines that fit, ranked for a goal.

Searched: the KV cache type (f16, q8_0, q4_0; quantized V needs flash attention), the
ubatch (-ub as given, 256), and where weights go: everything on the GPUs, else the fewest
layers' experts on the CPU (--n-cpu-moe, MoE models: experts go first) or the most layers
on the GPUs (-ngl, dense models). Each candidate is estimated like any fit (its largest
context, its speed); only what the estimator says fits is proposed. Goals:

- ``context``: the largest context, then speed;
- ``speed``: the fastest decode at the context asked for (-c, else -fitc's 4096);
- ``gpu-only``: nothing on the CPU, the largest context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lltui.core.fit.common import FitError
from lltui.core.fit.devices_spec import DeviceSpec
from lltui.core.fit.estimate import estimate
from lltui.core.fit.gguf_model import GgufModel
from lltui.core.fit.results import FitOptions, FitResult
from lltui.core.llama.flags import LlamaArgs, parse_llama_args

GOALS = ("context", "speed", "gpu-only")
_KV = (
    ((), ""),
    (("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"), "K/V cache in q8_0 (a little quality)"),
    (("-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"), "K/V cache in q4_0 (some quality)"),
)
_UB = (((), ""), (("-ub", "256"), "prompt batches of 256 (slower prompt processing)"))


@dataclass(frozen=True, slots=True)
class Candidate:
    """Flags added to the command line as given, and what they give."""

    flags: tuple[str, ...]
    max_ctx: int
    decode_tps: float
    prefill_tps: float
    fits_asked: bool  # fits at the context asked for
    gpu_only: bool  # no weights left on the CPU
    gives_up: str


def _estimate(
    model: GgufModel, argv: Sequence[str], devices: Sequence[DeviceSpec], opts: FitOptions
) -> FitResult | None:
    try:
        return estimate(model, parse_llama_args(list(argv)), devices, opts)
    except (FitError, ValueError):
        return None


def _smallest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The smallest k in [lo, hi] with ok(k), ok monotone; None when even hi fails."""
    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _tps_bucket(tps: float) -> int:
    """Speeds within 2 % of each other rank alike (then the one giving up less wins)."""
    return round(math.log(tps) / math.log(1.02)) if tps > 0 else -(10**6)


def _cost(c: Candidate) -> int:
    """How much a candidate gives up: the number of things, nothing first."""
    return 0 if c.gives_up == "nothing" else c.gives_up.count(";") + 1


def best_configs(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
    goal: str = "context",
    limit: int = 5,
) -> list[Candidate]:
    """Ranked command lines for ``goal`` (one of GOALS) that the estimator says fit."""
    if goal not in GOALS:
        raise ValueError(f"--best: expected one of {', '.join(GOALS)}, got {goal!r}")
    opts = replace(options or FitOptions(), suggest=False)
    base = [a for a in settings.memory_args if a]
    asked = settings.n_ctx or settings.fit_ctx or 4096
    at_ctx = ["-c", str(asked)]
    first = _estimate(model, base, devices, replace(opts, search=False))
    if first is None:
        return []
    n_all = first.model.n_layer + 1
    moe = first.model.n_expert > 1 and not any(
        a in ("--cpu-moe", "-cmoe", "--n-cpu-moe", "-ncmoe") for a in base
    )
    out: list[Candidate] = []
    for kv_flags, kv_why in _KV:
        for ub_flags, ub_why in _UB:
            extra = [*kv_flags, *ub_flags]
            options_tried: list[tuple[tuple[str, ...], str, bool]] = [(("-ngl", "all"), "", True)]

            def fits_with(flags: Sequence[str], extra: list[str] = extra) -> bool:
                res = _estimate(model, [*base, *flags, *extra, *at_ctx], devices, opts)
                return bool(res and res.fits)

            if not fits_with(("-ngl", "all")):
                if moe:
                    k = _smallest(
                        1, n_all - 1, lambda k: fits_with(("-ngl", "all", "--n-cpu-moe", str(k)))
                    )
                    if k is not None:
                        options_tried.append(
                            (
                                ("-ngl", "all", "--n-cpu-moe", str(k)),
                                f"experts of {k} layers on the CPU (slower decode)",
                                False,
                            )
                        )
                else:
                    # the most layers on the GPUs: the smallest number left on the CPU
                    left = _smallest(1, n_all, lambda n: fits_with(("-ngl", str(n_all - n))))
                    if left is not None and left < n_all:
                        options_tried.append(
                            (
                                ("-ngl", str(n_all - left)),
                                f"{left} of {n_all} layers on the CPU (slower)",
                                False,
                            )
                        )
            for place_flags, place_why, gpu_only in options_tried:
                flags = (*place_flags, *extra)
                res = _estimate(model, [*base, *flags, *at_ctx], devices, opts)
                if res is None or not res.max_ctx or res.speed is None:
                    continue
                why = "; ".join(w for w in (place_why, kv_why, ub_why) if w) or "nothing"
                out.append(
                    Candidate(
                        flags=flags,
                        max_ctx=res.max_ctx,
                        decode_tps=res.speed.decode_tps,
                        prefill_tps=res.speed.prefill_tps,
                        fits_asked=res.fits,
                        gpu_only=gpu_only,
                        gives_up=why,
                    )
                )
    if goal == "speed":
        ranked = sorted((c for c in out if c.fits_asked), key=lambda c: (-c.decode_tps, -c.max_ctx))
        ranked = [replace(c, flags=(*c.flags, "-c", str(asked))) for c in ranked]
    else:
        pool = [c for c in out if c.gpu_only] if goal == "gpu-only" else out
        ranked = sorted(pool, key=lambda c: (-c.max_ctx, -_tps_bucket(c.decode_tps), _cost(c)))
        ranked = [replace(c, flags=(*c.flags, "-c", str(c.max_ctx))) for c in ranked]
    # never propose what does not fit: each line as printed is estimated once more
    checked: list[Candidate] = []
    for c in ranked:
        if len(checked) >= limit:
            break
        res = _estimate(model, [*base, *c.flags], devices, replace(opts, search=False))
        if res is not None and res.fits:
            checked.append(c)
    return checked

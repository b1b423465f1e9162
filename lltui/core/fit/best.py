"""``lltui fit --best GOAL``: llama-server command lines that fit, ranked for a goal.

Searched: the KV cache type (f16, q8_0, q4_0; quantized V needs flash attention), the
ubatch (-ub as given, 256), where weights go (everything on the GPUs, else the fewest
layers' experts on the CPU with --n-cpu-moe for MoE models, experts first, or the most
layers on the GPUs with -ngl for dense ones), and on several GPUs the split: llama.cpp's
default (by free memory) and the layers sized to what each GPU has left after its fixed
costs (compute buffers, the output layer, the margin), which lets the largest context fit
(:func:`headroom_split`), and for the speed goal the most layers on the GPUs fastest per
layer (:func:`speed_split`: a mixed rig). A -ts line is proposed only where it fits where
the default does not, or fits more context, or runs faster. Speeds include the host CPU's
share (the options carry the host and this rig's calibration). Each candidate is estimated
like any fit (its largest context, its speed); only what the estimator says fits is
proposed. Goals:

- ``context``: the largest context, then speed;
- ``speed``: the fastest decode at the context asked for (-c, else -fitc's 4096), then
  the line giving up least;
- ``gpu-only``: nothing on the CPU, the largest context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from lltui.core.fit.estimate import estimate
from lltui.core.gguf.model import GgufModel
from lltui.core.llama.flags import LlamaArgs, parse_llama_args
from lltui.core.memory.common import CPU, FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.results import FitOptions, FitResult

GOALS = ("context", "speed", "gpu-only")
_KV = (
    ((), ""),
    (("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"), "K/V cache in q8_0 (a little quality)"),
    (("-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"), "K/V cache in q4_0 (some quality)"),
)
_UB_WHY = "prompt batches of 256"
_UB = (((), ""), (("-ub", "256"), _UB_WHY))
_CPU_MOE = ("--cpu-moe", "-cmoe", "--n-cpu-moe", "-ncmoe")


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
    gains: str = ""  # what a -ts split gives over llama.cpp's default split


@dataclass(frozen=True, slots=True)
class _Placement:
    flags: tuple[str, ...]
    why: str
    gpu_only: bool


@dataclass
class _Search:
    """One model on one set of devices: estimates of flag lists added to ``base``."""

    model: GgufModel
    base: list[str]
    devices: Sequence[DeviceSpec]
    opts: FitOptions
    at_ctx: list[str]
    goal: str = "context"
    splits: dict[tuple[tuple[str, ...], str], tuple[str, ...] | None] = field(default_factory=dict)

    def estimate(self, flags: Sequence[str], search: bool = True) -> FitResult | None:
        opts = self.opts if search else replace(self.opts, search=False)
        try:
            return estimate(self.model, parse_llama_args([*self.base, *flags]), self.devices, opts)
        except (FitError, ValueError):
            return None

    def fits(self, flags: Sequence[str]) -> bool:
        res = self.estimate([*flags, *self.at_ctx], search=False)
        return bool(res and res.fits)

    def split(self, flags: tuple[str, ...], kind: str = "room") -> tuple[str, ...] | None:
        """-ts sized for ``flags`` by :func:`headroom_split` (``kind`` "room") or
        :func:`speed_split` ("speed"); None where it changes nothing."""
        key = (flags, kind)
        if key not in self.splits:
            res = self.estimate([*flags, *self.at_ctx], search=False)
            counts = None
            if res is not None:
                split = speed_split if kind == "speed" else headroom_split
                counts = split(res, self.devices)
            self.splits[key] = ("-ts", ",".join(map(str, counts))) if counts else None
        return self.splits[key]


def check_goal(goal: str) -> None:
    if goal not in GOALS:
        raise ValueError(f"--best: expected one of {', '.join(GOALS)}, got {goal!r}")


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


def tps_bucket(tps: float) -> int:
    """Speeds within 2 % of each other rank alike (then the one giving up less wins)."""
    return round(math.log(tps) / math.log(1.02)) if tps > 0 else -(10**6)


def _cost(c: Candidate) -> int:
    """How much a candidate gives up: the number of things, nothing first."""
    return 0 if c.gives_up == "nothing" else c.gives_up.count(";") + 1


def headroom_split(res: FitResult, devices: Sequence[DeviceSpec]) -> tuple[int, ...] | None:
    """Layers per GPU (a -ts value) that let the largest context fit: each GPU first pays
    its fixed costs (compute buffers, margin, copies every GPU holds), then takes layers in
    order, weights plus KV at the context, while they fit. llama.cpp's default splits by
    free memory alone, so the GPU that also holds the output layer or a larger compute
    buffer fills first. None: one GPU, a free size unknown, or the same split as the result's."""
    free_by_name = {d.name: d.free_bytes for d in devices}
    gpus = [e for e in res.devices if e.kind != "cpu"]
    if len(gpus) < 2 or any(free_by_name.get(e.name) is None for e in gpus):
        return None
    layers = [il for il, dev in enumerate(res.layer_devices) if dev != CPU]
    weights = dict.fromkeys(layers, 0)
    for p in res.placements:
        if p.layer in weights and p.device != CPU and not p.duplicate:
            weights[p.layer] += p.alloc_bytes
    per_token = dict.fromkeys(layers, 0.0)  # KV bytes per token of context, full caches
    fixed_kv = dict.fromkeys(layers, 0)  # windowed caches: a size that does not grow
    if any(e.kv_bytes for e in gpus):
        for cache in res.kv:
            share = (cache.k_bytes + cache.v_bytes) // max(1, len(cache.layers))
            for il in (il for il in cache.layers if il in weights):
                if cache.swa:
                    fixed_kv[il] += share
                else:
                    per_token[il] += share / max(1, cache.cells)
    index = {e.name: i for i, e in enumerate(gpus)}
    held = [[il for il in layers if index.get(res.layer_devices[il]) == i] for i in index.values()]
    # what each GPU has for layers: its free memory less what it holds besides them
    room = [
        (free_by_name[e.name] or 0)
        - (e.total_bytes + e.unaccounted_bytes - e.kv_bytes - sum(weights[il] for il in h))
        for e, h in zip(gpus, held, strict=True)
    ]

    free = [free_by_name[e.name] or 0 for e in gpus]

    def fill(ctx: int, spare: float = 0.0) -> list[int] | None:
        """Layers in order, each GPU taking what fits in its room less ``spare`` of its memory."""
        counts, k = [0] * len(gpus), 0
        for i in range(len(gpus)):
            left = room[i] - spare * free[i]
            while k < len(layers):
                cost = weights[layers[k]] + fixed_kv[layers[k]] + per_token[layers[k]] * ctx
                if cost > left:
                    break
                left -= cost
                counts[i] += 1
                k += 1
        return counts if k == len(layers) else None

    top = max(res.model.n_ctx_train, res.resolved.n_ctx)
    ctx = _largest(top, lambda c: fill(c) is not None)
    if ctx is None:
        return None
    # at that context, the same share of each GPU's memory left spare: no GPU filled to the
    # brim while another has room (what the estimate does not model lands evenly)
    lo, hi = 0.0, 1.0
    for _ in range(14):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fill(ctx, mid) is not None else (lo, mid)
    counts = fill(ctx, lo)
    if counts is None or counts == [len(h) for h in held]:
        return None
    return tuple(counts)


def speed_split(res: FitResult, devices: Sequence[DeviceSpec]) -> tuple[int, ...] | None:
    """Layers per GPU (a -ts value) that decode fastest at the result's context: a layer
    split runs its GPUs one after another, so every layer costs its own GPU's time per layer
    (the speed model's, from each GPU's bandwidth and what it holds); the GPUs fastest per
    layer take as many layers as their memory has room for at that context, the slower
    ones the rest. None: one GPU, no speed, GPUs of one speed, a free size unknown, or the
    result's own split."""
    speed = res.speed
    gpus = [e for e in res.devices if e.kind != "cpu"]
    free = {d.name: d.free_bytes for d in devices}
    if speed is None or len(gpus) < 2 or any(free.get(e.name) is None for e in gpus):
        return None
    per_layer: dict[str, float] = {}
    for d in speed.devices:
        n = sum(1 for dev in res.layer_devices[:-1] if dev == d.name)
        if n:
            per_layer[d.name] = d.decode_ms / n
    if len(per_layer) < len(gpus) or max(per_layer.values()) < 1.05 * min(per_layer.values()):
        return None  # GPUs within 5 % of each other: the room split is as fast
    layers = [il for il, dev in enumerate(res.layer_devices) if dev != CPU]
    cost = dict.fromkeys(layers, 0)
    for p in res.placements:
        if p.layer in cost and p.device != CPU and not p.duplicate:
            cost[p.layer] += p.alloc_bytes
    for cache in res.kv:
        share = (cache.k_bytes + cache.v_bytes) // max(1, len(cache.layers))
        for il in cache.layers:
            if il in cost:
                cost[il] += share
    held = {e.name: [il for il in layers if res.layer_devices[il] == e.name] for e in gpus}
    room = {
        e.name: (free[e.name] or 0)
        - (e.total_bytes + e.unaccounted_bytes - sum(cost[il] for il in held[e.name]))
        for e in gpus
    }
    per_layer_bytes = sum(cost.values()) / max(1, len(layers))
    counts = dict.fromkeys(room, 0)
    left = len(layers)
    for name in sorted(room, key=lambda n: per_layer[n]):
        take = min(left, max(0, int(room[name] // max(1.0, per_layer_bytes))))
        counts[name] = take
        left -= take
    if left:
        return None  # the fastest-first fill does not hold every layer
    out = tuple(counts[e.name] for e in gpus)
    return None if list(out) == [len(held[e.name]) for e in gpus] else out


def _largest(hi: int, ok: Callable[[int], bool], step: int = 256) -> int | None:
    """The largest multiple of ``step`` up to ``hi`` with ok (monotone); None: not even ``step``."""
    top = max(1, hi // step)
    if ok(top * step):
        return top * step
    if not ok(step):
        return None
    lo, up = 1, top  # ok(lo * step), not ok(up * step)
    while up - lo > 1:
        mid = (lo + up) // 2
        if ok(mid * step):
            lo = mid
        else:
            up = mid
    return lo * step


def _placements(
    s: _Search, extra: tuple[str, ...], n_all: int, moe: bool, kind: str | None
) -> list[tuple[_Placement, tuple[str, ...]]]:
    """Where the weights go, with the -ts each is used with (``kind`` None: llama.cpp's
    default split; "room": :func:`headroom_split`, "speed": :func:`speed_split` for that
    placement, skipped where it is the same): everything on the GPUs, else the least on
    the CPU that fits at the context asked for."""

    def ts_for(place: tuple[str, ...]) -> tuple[str, ...] | None:
        return s.split((*place, *extra), kind) if kind else ()

    def fits_with(place: tuple[str, ...]) -> bool:
        return s.fits([*place, *(ts_for(place) or ()), *extra])

    out = [_Placement(("-ngl", "all"), "", True)]
    if not fits_with(out[0].flags):
        if moe:
            k = _smallest(1, n_all - 1, lambda k: fits_with(("-ngl", "all", "--n-cpu-moe", str(k))))
            if k is not None:
                why = f"experts of {k} layers on the CPU (slower decode)"
                out.append(_Placement(("-ngl", "all", "--n-cpu-moe", str(k)), why, False))
        else:
            # the most layers on the GPUs: the smallest number left on the CPU
            left = _smallest(1, n_all, lambda n: fits_with(("-ngl", str(n_all - n))))
            if left is not None and left < n_all:
                why = f"{left} of {n_all} layers on the CPU (slower)"
                out.append(_Placement(("-ngl", str(n_all - left)), why, False))
    with_ts = [(p, ts_for(p.flags)) for p in out]
    return [(p, ts) for p, ts in with_ts if ts is not None]


def _candidate(s: _Search, flags: tuple[str, ...], why: str, gpu_only: bool) -> Candidate | None:
    res = s.estimate([*flags, *s.at_ctx])
    if res is None or not res.max_ctx or res.speed is None:
        return None
    return Candidate(
        flags=flags,
        max_ctx=res.max_ctx,
        decode_tps=res.speed.decode_tps,
        prefill_tps=res.speed.prefill_tps,
        fits_asked=res.fits,
        gpu_only=gpu_only,
        gives_up=why,
    )


def _gain(b: Candidate, defaults: Sequence[Candidate], kind: str = "room") -> str | None:
    """What a -ts candidate gives over the same KV and ubatch with the default split; None
    when a default-split line is as good (then the -ts is not worth proposing)."""

    def as_good(a: Candidate) -> bool:
        return (
            a.max_ctx >= b.max_ctx
            and tps_bucket(a.decode_tps) >= tps_bucket(b.decode_tps)
            and (a.gpu_only or not b.gpu_only)
        )

    if any(as_good(a) for a in defaults):
        return None
    ts = b.flags[b.flags.index("-ts") + 1]
    what = f"-ts {ts} gives each GPU the layers its memory has room for after its fixed costs"
    if kind == "speed":
        what = f"-ts {ts} puts the most layers on the GPUs fastest per layer"
    if not defaults:
        return f"{what}: fits where llama.cpp's default split does not"
    if b.gpu_only and not any(a.gpu_only for a in defaults):
        return f"{what}: everything on the GPUs, where the default split needs the CPU"
    a = max([a for a in defaults if a.gpu_only == b.gpu_only] or defaults, key=lambda a: a.max_ctx)
    if b.max_ctx > a.max_ctx:
        return f"{what}: context {b.max_ctx}, the default split {a.max_ctx}"
    return f"{what}: decode ~{b.decode_tps:.0f} t/s, the default split ~{a.decode_tps:.0f}"


def _split_may_help(
    s: _Search, extra: tuple[str, ...], defaults: Sequence[Candidate], cap: int
) -> bool:
    """Worth searching with the headroom split: the default split does not reach the trained
    context on the GPUs alone, and the split for everything on the GPUs is another one."""
    if any(c.gpu_only and c.max_ctx >= cap for c in defaults):
        return False
    return s.split(("-ngl", "all", *extra), "room") is not None


def _search_all(s: _Search, n_all: int, moe: bool, split: bool, cap: int) -> list[Candidate]:
    """Every KV type and ubatch, each placement, with the default split and (``split``)
    the headroom split where it gives something."""
    out: list[Candidate] = []
    for kv_flags, kv_why in _KV:
        for ub_flags, ub_why in _UB:
            extra = (*kv_flags, *ub_flags)
            found: dict[str, list[Candidate]] = {"": [], "room": [], "speed": []}
            kinds = ["", "room", *(["speed"] if s.goal == "speed" and split else [])]
            for kind in kinds:
                if kind == "room" and not (split and _split_may_help(s, extra, found[""], cap)):
                    continue
                for place, ts in _placements(s, extra, n_all, moe, kind or None):
                    why = "; ".join(w for w in (place.why, kv_why, ub_why) if w) or "nothing"
                    c = _candidate(s, (*place.flags, *ts, *extra), why, place.gpu_only)
                    if c is not None:
                        found[kind].append(c)
            out += found[""]
            for kind in ("room", "speed"):
                for c in found[kind]:
                    gain = _gain(c, found[""], kind)
                    if gain is not None and c.flags not in {o.flags for o in out}:
                        out.append(replace(c, gains=gain))
    return out


def _say_slower_prompts(cands: Sequence[Candidate]) -> list[Candidate]:
    """-ub 256 lines whose prompts run slower than the same line's without it say so."""
    by_flags = {c.flags: c for c in cands}
    out = []
    for c in cands:
        if "-ub" in c.flags:
            i = c.flags.index("-ub")
            same = by_flags.get((*c.flags[:i], *c.flags[i + 2 :]))
            if same is None or c.prefill_tps < same.prefill_tps:
                slower = f"{_UB_WHY} (slower prompt processing)"
                c = replace(c, gives_up=c.gives_up.replace(_UB_WHY, slower))
        out.append(c)
    return out


def _rank(pool: list[Candidate], goal: str, asked: int) -> list[Candidate]:
    if goal == "speed":
        fits = [c for c in pool if c.fits_asked]
        ranked = sorted(fits, key=lambda c: (-tps_bucket(c.decode_tps), _cost(c), -c.max_ctx))
        return [replace(c, flags=(*c.flags, "-c", str(asked))) for c in ranked]
    if goal == "gpu-only":
        pool = [c for c in pool if c.gpu_only]
    ranked = sorted(pool, key=lambda c: (-c.max_ctx, -tps_bucket(c.decode_tps), _cost(c)))
    return [replace(c, flags=(*c.flags, "-c", str(c.max_ctx))) for c in ranked]


def best_configs(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
    goal: str = "context",
    limit: int = 5,
) -> list[Candidate]:
    """Ranked command lines for ``goal`` (one of GOALS) that the estimator says fit."""
    check_goal(goal)
    opts = replace(options or FitOptions(), suggest=False)
    base = [a for a in settings.memory_args if a]
    asked = settings.n_ctx or settings.fit_ctx or 4096
    s = _Search(model, base, devices, opts, ["-c", str(asked)], goal)
    first = s.estimate([], search=False)
    if first is None:
        return []
    n_all = first.model.n_layer + 1
    moe = first.model.n_expert > 1 and not any(a in _CPU_MOE for a in base)
    # a split of one's own or none to make: the one given stays
    split = not settings.tensor_split and settings.split_mode == "layer"
    cap = first.model.n_ctx_train
    found = _say_slower_prompts(_search_all(s, n_all, moe, split, cap))
    ranked = _rank(found, goal, asked)
    # never propose what does not fit: each line as printed is estimated once more
    checked: list[Candidate] = []
    for c in ranked:
        if len(checked) >= limit:
            break
        res = s.estimate(c.flags, search=False)
        if res is not None and res.fits:
            checked.append(c)
    return checked

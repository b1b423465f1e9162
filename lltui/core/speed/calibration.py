"""A rig's own measurements in the speed model: the scales of a :class:`Calibration`
applied to each device's predicted times, and fitted from measured points.

A measured point is a llama-bench result (or a served request's timing) beside the
uncalibrated prediction of the same command, split into the seconds the GPUs, the host, the
copies from host memory across the link (host experts for a prompt, ``-nkvo``'s KV), the
tensor split's all-reduces and the other links take. The scales are measured over predicted
time per kind of work (GPU or host, decode or prompt; copies; all-reduces), fitted in turn
on the points where that work takes part (a few rounds of a one-dimensional least squares in
log space), and clamped to a factor of 5; a point further off than that is left out
(:func:`far_off`): a measurement that far off is a wrong setup, not a faster card.

Any point counts only where the host was otherwise idle while it was measured: processes
other than lltui and what it measures took at most :data:`HOST_BUSY_MAX` of all the CPUs'
time (:func:`busy_host`), and none kept a GPU more than :data:`GPU_BUSY_MAX` % busy
(:func:`busy_gpu`); a busier rig's speeds are partly theirs. And only where the model
is large enough for the speed model to apply (:func:`too_small`): its fixed per-token costs
(kernel launches and syncs per layer, the host's op dispatch, hops between devices: the
speed model's own overhead terms) are at most :data:`FIXED_SHARE_MAX` of the predicted
time, so most of what was measured is work the scales cover. A toy model's decode times
its launches, not its bandwidth: kept, it would scale every later prediction on the rig.

llama-bench points are what the user ran to calibrate: they count as they are. A served
request is a measurement nobody set up (another request, a cold cache, a throttled card may
have slowed it), so served points are held until :data:`MIN_AGREE` of one kind of work agree
(within :data:`AGREE_WITHIN` of their median); those that agree then count, and each moves
its scale at most :data:`STEP` from where the llama-bench points alone put it. One outlier
changes nothing; a rig that really runs faster or slower gets there in a few launches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lltui.core.hardware.calibration import Calibration

SCALE_LIMIT = 5.0
MIN_AGREE = 3  # served points of one kind of work that must agree before any counts
AGREE_WITHIN = 1.25  # ... each within this factor of their median
STEP = 1.25  # how far each served point that counts may move its scale
HOST_BUSY_MAX = 0.10  # of all CPUs' time, taken by other processes while a point is measured
GPU_BUSY_MAX = 10.0  # % of a GPU's time another process's kernels took
FIXED_SHARE_MAX = 0.5  # of a point's predicted time, the speed model's fixed costs
SCALE_NAMES = {
    "gpu_decode": "GPU decode",
    "gpu_prefill": "GPU prompt",
    "host_decode": "host decode",
    "host_prefill": "host prompt",
    "copy": "copies from host memory",
    "reduce": "all-reduces",
}
_FIELDS = {
    (True, "gpu"): "gpu_decode",
    (False, "gpu"): "gpu_prefill",
    (True, "host"): "host_decode",
    (False, "host"): "host_prefill",
    (True, "copy"): "copy",
    (False, "copy"): "copy",
    (True, "reduce"): "reduce",
    (False, "reduce"): "reduce",
}


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    """One measurement: seconds per token (decode) or per prompt token (prefill) measured,
    and the uncalibrated prediction's share of the GPUs, the host and the rest."""

    decode: bool
    measured_s: float
    gpu_s: float
    host_s: float
    other_s: float = 0.0
    served: bool = False  # a served request's timing, not a llama-bench run
    date: str = ""  # YYYY-MM-DD it was measured
    copy_s: float = 0.0  # copies from host memory across the link
    reduce_s: float = 0.0  # -sm tensor's all-reduces and graph cuts

    @property
    def kind(self) -> str:
        """The scale it measures most: ``gpu_decode``, ``host_prefill``, ``copy`` ..."""
        side = max(self.sides(), key=lambda kv: kv[1])[0]
        return _FIELDS[(self.decode, side)]

    def sides(self) -> tuple[tuple[str, float], ...]:
        """(kind of work, predicted seconds) of each part a calibration scales."""
        return (
            ("gpu", self.gpu_s),
            ("host", self.host_s),
            ("copy", self.copy_s),
            ("reduce", self.reduce_s),
        )

    def part(self, side: str) -> float:
        """Its predicted seconds of one kind of work (gpu, host, copy, reduce)."""
        return dict(self.sides())[side]

    @property
    def usable(self) -> bool:
        """A measurement at all: a finite time above zero, a finite prediction above zero
        made of parts none of which is negative (NaN, infinity, 0 and negative speeds
        from a broken run or a damaged store are none)."""
        parts = (self.gpu_s, self.host_s, self.other_s, self.copy_s, self.reduce_s)
        return (
            0 < self.measured_s < math.inf
            and all(0 <= x < math.inf for x in parts)
            and 0 < sum(parts) < math.inf
        )


def far_off(p: MeasuredPoint) -> str | None:
    """Why a point cannot calibrate for how far it is from the uncalibrated prediction, in
    words (None: within a factor of :data:`SCALE_LIMIT`, as far as a scale may go). A miss
    that large is a wrong setup or what the speed model does not cover (a toy model, a
    busy machine, a throttled card), not this rig's speed: fitted, it set its scale to the
    clamp and every later prediction on the rig with it."""
    how = far_how(p)
    return None if how is None else far_text(how)


def far_how(p: MeasuredPoint) -> str | None:
    """``5.3x slower``: how far a point is from its prediction, where it is too far to
    calibrate (None: it is not)."""
    predicted = p.gpu_s + p.host_s + p.other_s + p.copy_s + p.reduce_s
    if not p.usable or 1 / SCALE_LIMIT <= p.measured_s / predicted <= SCALE_LIMIT:
        return None
    ratio = p.measured_s / predicted
    times = ratio if ratio > 1 else 1 / ratio  # 5.3x, past the 5x (not "5x, past the 5x")
    return f"{times:.{1 if times < 10 else 0}f}x " + ("slower" if ratio > 1 else "faster")


def far_text(how: str) -> str:
    """far_off's words around one or more far_how figures."""
    return (
        f"measured {how} than predicted, past the {SCALE_LIMIT:g}x a calibration may move: "
        "a wrong setup or what the speed model does not cover, not this rig's speed"
    )


def busy_host(share: float | None, over: str) -> str | None:
    """Why a speed measured over ``over`` (the request, the run) cannot calibrate this rig
    for what else used its CPUs, in words; None: the host was otherwise idle. ``share``:
    of all the CPUs' time, what other processes took (None: unknown)."""
    if share is None:
        # (it takes a CPU-second of all the CPUs' time: fewer ticks are noise)
        return (
            f"the host's load over {over} could not be told ({over} was too short to tell, "
            "or /proc could not be read)"
        )
    if share > HOST_BUSY_MAX:
        return busy_text(busy_how(share))
    return None


def busy_how(share: float) -> str:
    """``60%``: what other processes took of the CPUs."""
    return f"{100 * share:.0f}%"


def busy_text(how: str) -> str:
    """busy_host's words around one or more busy_how figures."""
    return (
        f"the host was busy (other processes took {how} of its CPUs; "
        f"at most {100 * HOST_BUSY_MAX:.0f}% calibrates)"
    )


def busy_gpu(util: float | None, when: str = "") -> str | None:
    """Why a speed measured while another process used a GPU cannot calibrate, in words
    (None: it did not, or nobody can tell). ``util``: the most of a GPU's time (%) another
    process took; ``when``: when that was seen, where it was not over the measurement."""
    if util is None or util <= GPU_BUSY_MAX:
        return None
    return f"another process kept a GPU {util:.0f}% busy{when}"


def too_small(fixed_share: float) -> str | None:
    """Why a speed measured on a model this small cannot calibrate, in words; None: the
    model is large enough. ``fixed_share``: of the predicted time, the fixed costs
    (:func:`lltui.core.speed.model.fixed_share`)."""
    if fixed_share <= FIXED_SHARE_MAX:
        return None
    return (
        f"the model is too small for the speed model to apply (fixed per-token costs are "
        f"{100 * fixed_share:.0f}% of its predicted time; at most "
        f"{100 * FIXED_SHARE_MAX:.0f}% calibrates)"
    )


def miss(measured: float, predicted: float) -> float | None:
    """A measurement relative to its prediction, less one: -0.96 is 96% slower than
    predicted, +0.5 half as fast again (None: no prediction to hold it against)."""
    if not (0 < predicted < math.inf and 0 <= measured < math.inf):
        return None
    return measured / predicted - 1


def miss_pct(measured: float, predicted: float) -> str:
    """``-96%``: measured relative to predicted, negative when slower (``n/a``: no prediction)."""
    m = miss(measured, predicted)
    return "n/a" if m is None else f"{round(100 * m):+d}%"


def miss_text(measured: float, predicted: float) -> str:
    """``measured -96% vs predicted``: how every miss of a prediction is printed."""
    return f"measured {miss_pct(measured, predicted)} vs predicted"


def predicted_s(cal: Calibration, p: MeasuredPoint) -> float:
    """The point's predicted seconds with ``cal``'s scales applied."""
    scaled = sum(getattr(cal, _FIELDS[(p.decode, side)]) * s for side, s in p.sides())
    return scaled + p.other_s


def _fit_one(cal: Calibration, field: str, points: Sequence[MeasuredPoint]) -> Calibration:
    """The scale of ``field`` that best matches the points it takes part in (log error,
    golden-section search over [1/5, 5])."""
    keys = [k for k, f in _FIELDS.items() if f == field]
    mine = [p for p in points if any(p.decode == d and p.part(side) for d, side in keys)]
    if not mine:
        return cal

    def loss(scale: float) -> float:
        c = cal.with_scale(field, scale)
        return sum(math.log(max(predicted_s(c, p), 1e-12) / p.measured_s) ** 2 for p in mine)

    lo, hi = math.log(1 / SCALE_LIMIT), math.log(SCALE_LIMIT)
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        a = hi - ratio * (hi - lo)
        b = lo + ratio * (hi - lo)
        if loss(math.exp(a)) <= loss(math.exp(b)):
            hi = b
        else:
            lo = a
    return cal.with_scale(field, round(math.exp((lo + hi) / 2), 4))


def fit_calibration(rig: str, date: str, points: Sequence[MeasuredPoint]) -> Calibration:
    """The scales that best match ``points`` (1.0 where no point measures that work):
    llama-bench points as they are, served points once several agree, each moving its
    scale a bounded step (see the module docstring). ``date``: where no point has one."""
    good = [p for p in points if p.usable]
    # (a served point that far off is held like any other that does not agree)
    bench = [p for p in good if not p.served and far_off(p) is None]
    served = [p for p in good if p.served]
    base = _fit(Calibration(rig=rig, date=date), bench)
    counted = _agreeing(base, served)
    cal = _bounded(base, _fit(base, [*bench, *counted]), counted) if counted else base
    dates = [p.date for p in (*bench, *counted) if p.date]
    return replace(
        cal,
        date=max(dates, default=date),
        points=len(bench) + len(counted),
        held=len(served) - len(counted),
    )


FIT_ROUNDS = 40  # at most; a round that moves no scale ends the fit


def _fit(cal: Calibration, points: Sequence[MeasuredPoint]) -> Calibration:
    """Each scale fitted in turn, round after round, until none moves (scales that share
    points, a GPU's prompt and the copies of a host-offload point, settle together)."""
    for _round in range(FIT_ROUNDS):
        before = cal
        for field in SCALE_NAMES:
            cal = _fit_one(cal, field, points)
        if all(abs(getattr(cal, f) - getattr(before, f)) < 1e-4 for f in SCALE_NAMES):
            break
    return cal


def _agreeing(base: Calibration, served: Sequence[MeasuredPoint]) -> list[MeasuredPoint]:
    """The served points that count: of each kind of work, those within AGREE_WITHIN of the
    median miss (against ``base``), where at least MIN_AGREE do."""
    out: list[MeasuredPoint] = []
    for kind in SCALE_NAMES:
        mine = [p for p in served if p.kind == kind]
        if len(mine) < MIN_AGREE:
            continue
        ratios = [p.measured_s / max(predicted_s(base, p), 1e-12) for p in mine]
        ordered = sorted(ratios)
        mid = math.sqrt(ordered[(len(ordered) - 1) // 2] * ordered[len(ordered) // 2])
        agree = [
            p for p, r in zip(mine, ratios, strict=True) if max(r / mid, mid / r) <= AGREE_WITHIN
        ]
        if len(agree) >= MIN_AGREE:
            out += agree
    return out


def _bounded(base: Calibration, cal: Calibration, counted: Sequence[MeasuredPoint]) -> Calibration:
    """Each scale at most STEP per served point of its kind away from ``base`` (a scale no
    served point measures stays where the llama-bench points put it)."""
    for field in SCALE_NAMES:
        n = sum(1 for p in counted if p.kind == field)
        was = getattr(base, field)
        lo, hi = max(was / STEP**n, 1 / SCALE_LIMIT), min(was * STEP**n, SCALE_LIMIT)
        cal = cal.with_scale(field, round(min(max(getattr(cal, field), lo), hi), 4))
    return cal

"""``lltui fit --best context|gpu-only`` and each quantization's line in ``quant --best``:
llama-server command lines that fit, ranked for a goal.

The space searched, and searched exactly (each answer is the best in it, not a guess):

- the K/V cache type: f16, q8_0, q4_0 (a quantized V needs flash attention: -fa on);
- the ubatch: as given, and 256;
- the split on several GPUs: llama.cpp's default (by free memory), the layers sized to
  what each GPU has left after its fixed costs (:func:`headroom_split`) and, for the speed
  goal, the most layers on the GPUs fastest per layer (:func:`speed_split`: a mixed rig);
- where the weights go, every amount of offload: for MoE models the experts of k layers on
  the CPU (--n-cpu-moe k, every k), for dense ones n layers on the GPUs (-ngl n, every n);
- the context: every multiple of 256 up to the trained context.

Memory on the GPUs only falls as more is offloaded, memory on the host only grows: for a
context, the lines that fit are one run of offload amounts, from the least the GPUs need to
the most the host takes. The search finds those two ends by bisection (a fit is never assumed
monotone across both, which is where host memory used to be missed), and for the largest
context the offload where the GPUs' limit and the host's cross. Goals:

- ``context``: the largest context, then quality (the K/V cache type), then speed;
- ``speed`` (``quant --best speed``; ``fit``'s is the planner's): the fastest decode at
  the context asked for (-c, else -fitc's 4096), then quality, then the line giving up least;
- ``gpu-only``: nothing on the CPU, the largest context, then quality.

Settings are changed as typed values (:class:`Change`) and spelled once, at the end, from
the one flag table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lltui.core.cmdline.args import LlamaArgs, cpu_moe_overrides, spell
from lltui.core.cmdline.flag_values import NGL_ALL, writable_split
from lltui.core.fit.estimate import speed_of
from lltui.core.gguf.model import GgufModel
from lltui.core.memory.allocate import Placed, estimate_once
from lltui.core.memory.common import CPU, KV_PAD, FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.problem import FitProblem
from lltui.core.memory.results import FitOptions, FitResult
from lltui.core.text import counted

GOALS = ("context", "speed", "gpu-only")
# other words for GOALS' goals: the fastest decode is "decode" to fit's planner (fit takes
# "speed" for it too); quant --best takes each
GOAL_WORDS = {"decode": "speed"}
KV_TYPES: tuple[tuple[str, str], ...] = (
    ("f16", ""),
    ("q8_0", "K/V cache in q8_0 (a little quality)"),
    ("q4_0", "K/V cache in q4_0 (some quality)"),
)
KV_LOSS = {kv: i for i, (kv, _why) in enumerate(KV_TYPES)}  # 0 f16, 1 q8_0, 2 q4_0
SMALL_UBATCH = 256
_UB_WHY = f"prompt batches of {SMALL_UBATCH}"
_CPU_MOE = ("cpu_moe", "n_cpu_moe")
# floors of an estimate, cheapest first: no compute buffer; the prompt batch's alone
_FLOORS = ("none", "prompt")

Progress = Callable[[int, int], None]  # (steps done, steps planned)


@dataclass(frozen=True, slots=True)
class Change:
    """What the search changes in the settings given, as typed values (None: as given)."""

    n_gpu_layers: int | None = None  # -ngl
    n_cpu_moe: int | None = None  # --n-cpu-moe: the experts of the first k layers on the CPU
    kv: str | None = None  # -ctk/-ctv (with -fa on when quantized)
    n_ubatch: int | None = None  # -ub
    tensor_split: tuple[int, ...] | None = None  # -ts, layers per GPU
    n_ctx: int | None = None  # -c
    split_mode: str | None = None  # -sm (the planner's layer or tensor)
    devices: tuple[str, ...] | None = None  # -dev, in the order given (llama.cpp's -ts by free)

    def apply(self, args: LlamaArgs) -> LlamaArgs:
        """The settings with this change made (typed: nothing is spelled or parsed)."""
        out: dict[str, Any] = {}  # (one replace: the settings have many fields)
        if self.split_mode is not None:
            out.update(split_mode=self.split_mode)
        if self.devices is not None:
            out.update(devices=self.devices, tensor_split=(), main_gpu=0)
        if self.n_gpu_layers is not None:
            out.update(n_gpu_layers=self.n_gpu_layers)
        if self.n_cpu_moe:
            out.update(overrides=args.overrides + tuple(cpu_moe_overrides(self.n_cpu_moe)))
        if self.kv is not None and self.kv != "f16":
            out.update(type_k=self.kv, type_v=self.kv, flash_attn="on")
        if self.n_ubatch is not None:
            out.update(n_ubatch=self.n_ubatch)
        if self.tensor_split is not None:
            out.update(tensor_split=tuple(float(x) for x in self.tensor_split))
        if self.n_ctx is not None:
            out.update(n_ctx=self.n_ctx, kv_unified_per_slot=0)
        return replace(args, **out) if out else args

    def flags(self) -> tuple[str, ...]:
        """The change as llama-server flags, spelled from the flag table."""
        out: list[str] = []
        if self.split_mode is not None:
            out += spell("split_mode", self.split_mode)
        if self.devices is not None:
            out += spell("devices", self.devices)
        if self.n_gpu_layers is not None:
            out += spell("n_gpu_layers", self.n_gpu_layers)
        if self.n_cpu_moe:
            out += spell("n_cpu_moe", self.n_cpu_moe)
        if self.tensor_split is not None:
            out += spell("tensor_split", self.tensor_split)
        if self.kv is not None and self.kv != "f16":
            out += spell("type_k", self.kv) + spell("type_v", self.kv)
            out += spell("flash_attn", "on")
        if self.n_ubatch is not None:
            out += spell("n_ubatch", self.n_ubatch)
        if self.n_ctx is not None:
            out += spell("n_ctx", self.n_ctx)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A command line that fits: the flags added to the ones given, and what it gives."""

    flags: tuple[str, ...]
    max_ctx: int
    decode_tps: float
    prefill_tps: float
    fits_asked: bool  # fits at the context asked for
    gpu_only: bool  # no weights left on the CPU
    gives: tuple[str, ...]  # what it gives up, each in words
    gains: str = ""  # what a -ts split gives over llama.cpp's default split
    split: str = ""  # the kind of -ts (see _Plan.split)
    kv: str = "f16"  # the K/V cache type, for ranking by quality
    change: Change = field(default_factory=Change, compare=False, repr=False)

    @property
    def gives_up(self) -> str:
        return "; ".join(self.gives) or "nothing"


def check_goal(goal: str) -> str:
    """The goal of GOALS ``goal`` names (decode: speed); ValueError for none."""
    if goal not in GOALS and goal not in GOAL_WORDS:
        words = ", ".join((*GOALS, *GOAL_WORDS))
        raise ValueError(f"--best: expected one of {words}, got {goal!r}")
    return GOAL_WORDS.get(goal, goal)


def speed_tier(tps: float, reference: float) -> int:
    """How many 2 % steps slower than ``reference`` (negative: faster). Speeds within 2 % of
    the reference (the fastest of those ranked) rank alike, then quality or fewer GPUs
    decide: steps counted from the reference, not from fixed points, so that two speeds
    0.1 % apart never fall on two sides of a step while one 1.9 % apart ties."""
    if tps <= 0:
        return 10**6
    return int(math.log(reference / tps) / math.log(1.02)) if reference > 0 else 0


# --- the one model, estimated ---------------------------------------------------------------


@dataclass
class _Space:
    """One model on one set of devices: estimates of changes to the settings given, kept."""

    problem: FitProblem  # the settings as given, no search
    moe: bool  # offload by experts (--n-cpu-moe) rather than layers (-ngl)
    n_offload: int  # the most that can be offloaded: layers (MoE) or layers + output
    cap: int  # the largest context: the trained one, in 256-cell steps of the streams
    unit: int
    given_kv: str = "f16"  # the K/V cache type given, for lines that keep it
    asked_units: int = 16  # the context asked for, in units
    progress: Progress | None = None
    done: int = 0
    planned: int = 1
    _results: dict[Change, FitResult | None] = field(default_factory=dict)
    _split: dict[tuple[Change, str], tuple[int, ...] | None] = field(default_factory=dict)
    # by change without -c, -ub or K/V type (the weights' routes read none of them)
    _placed: dict[Change, Placed] = field(default_factory=dict)
    # (the GPUs may fit, the host may) at each floor of _FLOORS made so far
    _floors: dict[Change, list[tuple[bool, bool]]] = field(default_factory=dict)

    def step(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, max(self.planned, self.done))

    def placement(self, base: Change, x: int) -> Change:
        """``base`` with ``x`` offloaded: experts of x layers, or x layers (x = 0: none)."""
        if self.moe:
            return replace(base, n_gpu_layers=NGL_ALL, n_cpu_moe=x or None)
        return replace(base, n_gpu_layers=self.n_offload - x if x else NGL_ALL)

    def estimate(self, change: Change) -> FitResult | None:
        """The estimate at exactly these settings; None where llama.cpp would refuse them.
        Placements are made once per layout and reused at every context, ubatch and K/V
        type (the weights do not move with -c, -ub, -ctk or -fa)."""
        if change not in self._results:
            if change not in self._floors:
                self.step()
            self._results[change] = self._estimate(change, "all")
        return self._results[change]

    def _estimate(self, change: Change, compute: str) -> FitResult | None:
        p = self.problem
        layout = replace(change, n_ctx=None, n_ubatch=None, kv=None)
        problem = p.with_args(change.apply(p.args))
        try:
            res: FitResult | None = estimate_once(
                problem, self._placed.get(layout), compute=compute
            )
        except (FitError, ValueError):
            res = None
        if res is not None and layout not in self._placed:
            self._placed[layout] = placed_of(res, problem.used)
        return res

    def _may_fit(self, change: Change, owners: tuple[int, ...]) -> bool:
        """Whether ``owners`` (0: the GPUs, 1: the host) may fit with these settings: False
        where one does not even with no compute buffer (no graph planned), or with the
        prompt batch's alone (the token's not planned); True where the estimate must say.
        Only what fits is estimated whole. The first floor is a step of the search, as an
        estimate is."""
        if change in self._results:
            return True
        floors = self._floors.setdefault(change, [])
        for compute in _FLOORS:
            if len(floors) <= _FLOORS.index(compute):
                if not floors:
                    self.step()
                res = self._estimate(change, compute)
                # (a refusal is left to the estimate, which says it)
                floors.append((True, True) if res is None else _owners_fit(res))
            floor = floors[_FLOORS.index(compute)]
            if not all(floor[i] for i in owners):
                return False
        return True

    def known(self, change: Change) -> FitResult | None:
        """The estimate of ``change`` where one was made already (None: none, or refused)."""
        return self._results.get(change)

    def fits(self, change: Change) -> tuple[bool, bool]:
        """(the GPUs fit, the host fits) with these settings."""
        res = self.estimate(change)
        if res is None:
            return False, False
        return _owners_fit(res)

    def gpus_fit(self, change: Change) -> bool:
        """Whether the GPUs fit with these settings (``fits``' first), estimated whole only
        where their floors fit (see :meth:`_may_fit`)."""
        return self._may_fit(change, (0,)) and self.fits(change)[0]

    def host_fits(self, change: Change) -> bool:
        """Whether the host fits with these settings (``fits``' second), likewise."""
        return self._may_fit(change, (1,)) and self.fits(change)[1]

    def all_fit(self, change: Change) -> bool:
        """Whether the GPUs and the host fit with these settings, likewise."""
        return self._may_fit(change, (0, 1)) and all(self.fits(change))

    def limits(self, at: Callable[[int], Change]) -> tuple[int, int]:
        """The largest contexts (in units) at which the GPUs fit and at which the host does,
        each alone, for one placement (``at``: units -> its settings at that context; 0: not
        even one unit); see :meth:`limit`."""
        return self.limit(at, gpus=True), self.limit(at, gpus=False)

    def limit(self, at: Callable[[int], Change], *, gpus: bool) -> int:
        """The largest context (in units) at which the GPUs (``gpus``) or the host fit, for
        one placement. Exact: memory grows about linearly with the context, so two
        estimates guess where the limit is and the search starts there (made only where it
        lies between them), but the answer is always checked on both sides. Where
        everything fits at the largest context, that is the limit (memory only grows with
        the context): the smallest is not estimated."""
        if self.all_fit(at(self.cap)):
            return self.cap
        fit = self.gpus_fit if gpus else self.host_fits

        def guess() -> int | None:
            lo, hi = self.estimate(at(1)), self.estimate(at(self.cap))
            return _guesses(lo, hi, self.cap)[0 if gpus else 1]

        return _largest(self.cap, lambda k: fit(at(k)), guess)

    def room(self, at: Callable[[int], Change]) -> int:
        """The largest context (in units) at which everything fits for one placement: the
        smaller limit (the host's not searched where the GPUs hold nothing)."""
        g = self.limit(at, gpus=True)
        return min(g, self.limit(at, gpus=False)) if g else 0

    def split(self, change: Change, kind: str = "room") -> tuple[int, ...] | None:
        """-ts for ``change``: sized to what each GPU has left (``kind`` "room", see
        :func:`headroom_split`) or the most layers on the fastest GPUs ("speed", see
        :func:`speed_split`), a tensor split's shares likewise (:func:`tensor_room_split`);
        None where it changes nothing or llama.cpp could not be given it."""
        key = (change, kind)
        if key not in self._split:
            res = self.estimate(change)
            counts = None
            p = self.problem
            # (the room split goes by memory alone)
            speed = None
            if res is not None and kind == "speed":
                speed = speed_of(p.model, res, p.used, p.options)
            if res is not None and change.split_mode == "tensor":
                from lltui.core.fit.search import tensor_room_split

                counts = tensor_room_split(res, p, speed)
            elif res is not None and speed is not None:
                counts = speed_split(replace(res, speed=speed), p.used)
            elif res is not None:
                other = self.estimate(replace(change, n_ctx=self.cap * self.unit))
                counts = headroom_split(res, p.used, other)
            self._split[key] = writable_split(counts) if counts else None
        return self._split[key]


def _owners_fit(res: FitResult) -> tuple[bool, bool]:
    """(the GPUs fit, the host fits) in an estimate."""
    gpus = all(d.fits is not False for d in res.devices if d.kind != "cpu")
    host = all(d.fits is not False for d in res.devices if d.kind == "cpu")
    return gpus, host


def _largest(
    top: int, ok: Callable[[int], bool], guessed: Callable[[], int | None] | None = None
) -> int:
    """The largest k in [1, top] with ok(k), ok monotone (true up to a point); 0: none.
    ``guessed``: where to look first (asked only where the answer lies between the ends);
    the bracket around it widens until it holds the answer."""
    if top < 1 or not ok(1):
        return 0
    if ok(top):
        return top
    lo, hi = 1, top  # ok(lo), not ok(hi)
    guess = guessed() if guessed is not None else None
    if guess is not None and lo < guess < hi:
        step = 1
        if ok(guess):
            lo = guess
            while lo + step < hi and ok(lo + step):
                lo, step = lo + step, step * 2
            hi = min(hi, lo + step)
        else:
            hi = guess
            while hi - step > lo and not ok(hi - step):
                hi, step = hi - step, step * 2
            lo = max(lo, hi - step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _guesses(lo: FitResult | None, hi: FitResult | None, top: int) -> tuple[int | None, int | None]:
    """Where the GPUs' and the host's limits are likely to be, in units of context, from
    estimates at 1 and ``top`` units: each owner's use drawn as a line between the two."""
    if lo is None or hi is None or top <= 1:
        return None, None
    guess: dict[bool, int | None] = {True: None, False: None}
    for a, b in zip(lo.devices, hi.devices, strict=False):
        if a.free_bytes is None or a.name != b.name:
            continue
        used_a = a.total_bytes + a.unaccounted_bytes
        slope = (b.total_bytes + b.unaccounted_bytes - used_a) / (top - 1)
        room = a.free_bytes - used_a
        k = top if slope <= 0 else 1 + int(room / slope)
        gpu = a.kind != "cpu"
        seen = guess[gpu]
        guess[gpu] = k if seen is None else min(seen, k)
    return guess[True], guess[False]


def _first(lo: int, hi: int, ok: Callable[[int], bool], guess: int | None = None) -> int | None:
    """The smallest x in [lo, hi] with ok(x), ok monotone (false up to a point); None: none.
    ``guess``: where to look first; the bracket around it widens until it holds the answer
    (the ends are asked only if the bracket reaches them)."""
    if lo > hi:
        return None
    if guess is None or not lo <= guess <= hi:
        if not ok(hi):
            return None
        if ok(lo):
            return lo
        bottom, top = lo, hi  # not ok(bottom), ok(top)
    elif ok(guess):
        top, step = guess, 1
        while True:
            if top - step <= lo:
                if ok(lo):
                    return lo
                bottom = lo
                break
            if not ok(top - step):
                bottom = top - step
                break
            top, step = top - step, step * 2
    else:
        bottom, step = guess, 1
        while True:
            if bottom + step >= hi:
                if not ok(hi):
                    return None
                top = hi
                break
            if ok(bottom + step):
                top = bottom + step
                break
            bottom, step = bottom + step, step * 2
    while top - bottom > 1:
        mid = (bottom + top) // 2
        bottom, top = (bottom, mid) if ok(mid) else (mid, top)
    return top


def _root(a: float, b: float, n: int) -> int | None:
    """Where a line from ``a`` (at 0) to ``b`` (at ``n``) crosses zero, rounded up."""
    if n <= 0 or a == b:
        return None
    x = a / (a - b) * n
    return max(0, min(n, math.ceil(x))) if 0 <= x <= n else None


# --- the searches ---------------------------------------------------------------------------


Layout = Callable[[int, int], Change]  # (offload, context units) -> the change to estimate


def least_offload(s: _Space, at: Layout, units: int, hint: int | None = None) -> int | None:
    """The least offload at which everything fits at ``units`` of context: the least the
    GPUs need, if the host takes that much (the host only fills as more is offloaded); None:
    no amount. ``hint``: where a like search ended (the same plan with another ubatch)."""
    n = s.n_offload
    guess = hint if hint is not None else _offload_guess(s, at, units)
    x = _first(0, n, lambda x: s.gpus_fit(at(x, units)), guess)
    if x is None or not s.host_fits(at(x, units)):
        return None
    return x


def _offload_guess(s: _Space, at: Layout, units: int) -> int | None:
    """How much offload the GPUs need, guessed from their use with none and with all: what
    each has over its free memory shrinks about linearly as layers leave."""
    none, full = s.estimate(at(0, units)), s.estimate(at(s.n_offload, units))
    if none is None or full is None:
        return None
    guesses = []
    for a, b in zip(none.devices, full.devices, strict=False):
        if a.kind == "cpu" or a.free_bytes is None or b.free_bytes is None or a.name != b.name:
            continue
        over_a = a.total_bytes + a.unaccounted_bytes - a.free_bytes
        over_b = b.total_bytes + b.unaccounted_bytes - b.free_bytes
        if over_a > 0:
            x = _root(over_a, over_b, s.n_offload)
            if x is not None:
                guesses.append(x)
    return max(guesses) if guesses else None


def most_context(s: _Space, at: Layout, hint: int | None = None) -> tuple[int, int] | None:
    """(offload, context units) with the largest context, the least offload among equals.

    The GPUs' limit rises with offload and the host's falls: the best is where they cross.
    ``hint``: where a like search ended (the same plan with another ubatch)."""

    def lim(x: int) -> tuple[int, int]:
        return s.limits(lambda units: at(x, units))

    def gpus_limit(x: int) -> int:
        return s.limit(lambda units: at(x, units), gpus=True)

    if s.n_offload == 0:
        best = s.room(lambda units: at(0, units))
        return (0, best) if best else None
    # the first offload at which the GPUs' limit reaches the host's (guessed as a line)
    guess = hint
    if guess is None:
        g0, h0 = lim(0)
        gn, hn = lim(s.n_offload)
        guess = _root(g0 - h0, gn - hn, s.n_offload)
    short = _Short(s, at)
    cross = _first(0, s.n_offload, short.crossed, guess)
    if cross is None:  # the GPUs bind everywhere: offload all there is
        best_x, best = s.n_offload, s.room(lambda units: at(s.n_offload, units))
    else:
        best_x, best = cross, s.room(lambda units: at(cross, units))
        if cross > 0 and gpus_limit(cross - 1) >= best:  # one step less: the GPUs' limit
            best = gpus_limit(cross - 1)
            if best:  # (0: nothing fits either way)
                best_x = _first(0, cross - 1, lambda x: short.gpus_hold(x, best), cross - 1) or 0
    return (best_x, best) if best else None


@dataclass
class _Short:
    """Where the GPUs cannot hold even one unit of context, one placement's search over
    offloads needs no limit there. GPU memory only falls as more is offloaded: past one
    offload where they cannot, none less can either (``upto``)."""

    s: _Space
    at: Layout
    upto: int = -1

    def gpus_hold(self, x: int, units: int) -> bool:
        """Whether the GPUs' limit at offload ``x`` is ``units`` or more: whether they fit
        there (memory only grows with the context): one estimate, no limit searched."""
        return x > self.upto and self.s.gpus_fit(self.at(x, units))

    def crossed(self, x: int) -> bool:
        """Whether the GPUs' limit at offload ``x`` reaches the host's. Where the GPUs do
        not hold one unit, theirs is 0: reached only where the host's is 0 too."""
        if x <= self.upto:
            return not self.s.host_fits(self.at(x, 1))
        g = self.s.limit(lambda units: self.at(x, units), gpus=True)
        if g == 0:  # (not even one unit: the host's limit is 0 where it does not hold one)
            self.upto = x
            return not self.s.host_fits(self.at(x, 1))
        # (no limit is past the largest context)
        return g == self.s.cap or g >= self.s.limit(lambda units: self.at(x, units), gpus=False)


@dataclass(frozen=True, slots=True)
class _Plan:
    """A point of the space to try: KV type, ubatch, split (None: llama.cpp's default)."""

    kv: str
    kv_why: str
    ubatch: int | None
    # "": llama.cpp's default; "room": each GPU's layers sized to its room; "speed": the
    # most layers on the GPUs fastest per layer
    split: str


def _plans(kv_types: Sequence[str] | None, split_allowed: bool, goal: str) -> list[_Plan]:
    """Every K/V cache type (``kv_types``; empty: the one given), each with llama.cpp's split,
    the headroom split and, for the speed goal, the speed split; a smaller ubatch is tried on
    what each plan finds (it moves the limits a little, not the plan)."""
    kinds = [(kv, why) for kv, why in KV_TYPES if kv_types is None or kv in kv_types]
    splits: tuple[str, ...] = ("",)
    if split_allowed:
        splits = ("", "room", "speed") if goal == "speed" else ("", "room")
    plans = [
        _Plan(kv, why, None, split)
        for kv, why in kinds or [("", "")]  # "": the K/V cache type as given
        for split in splits
    ]
    return plans


def _candidate(
    s: _Space, plan: _Plan, change: Change, x: int, asked: int, max_ctx: int
) -> Candidate | None:
    """The line ``change`` (offload ``x``) of ``plan``, the largest context of its placement,
    its speed at the context asked for where it fits there; None: it does not fit."""
    res = s.estimate(change)
    if res is None or not res.fits:
        return None
    at_asked = replace(change, n_ctx=asked)
    asked_fit = s.estimate(at_asked)
    fits_asked = bool(asked_fit and asked_fit.fits)
    speed = _speed(s, at_asked if fits_asked else change)
    gives = (_offload_why(s, x), plan.kv_why, _UB_WHY if plan.ubatch else "")
    return Candidate(
        flags=change.flags(),
        max_ctx=max(max_ctx, change.n_ctx or 0),
        decode_tps=speed[0],
        prefill_tps=speed[1],
        fits_asked=fits_asked,
        gpu_only=x == 0,
        gives=tuple(w for w in gives if w),
        kv=plan.kv or s.given_kv,
        split=plan.split if change.tensor_split is not None else "",
        change=change,
    )


def _speed(s: _Space, change: Change) -> tuple[float, float]:
    """Decode and prompt tokens/s of a line, by the speed model (at the line's context)."""
    res = s.estimate(change)
    if res is None:
        return 0.0, 0.0
    p = s.problem
    sp = speed_of(p.model, res, p.used, p.options)
    return (sp.decode_tps, sp.prefill_tps) if sp is not None else (0.0, 0.0)


def _offload_why(s: _Space, x: int) -> str:
    if x == 0:
        return ""
    if s.moe:
        return f"experts of {counted(x, 'layer')} on the CPU (slower decode)"
    return f"{x} of {s.n_offload} layers on the CPU (slower)"


def _search_plan(
    s: _Space, plan: _Plan, goal: str, asked: int, small_ub: bool, hint: int | None = None
) -> list[Candidate]:
    """The best line of one plan for the goal, and with a smaller ubatch (``small_ub``)
    where that gives something. ``hint``: the offload a like plan found (another K/V type
    with the same split), where the search starts."""
    found = _search_one(s, plan, goal, asked, hint)
    if not small_ub or not found:
        return found
    # the smaller ubatch moves the limits by a little: start there
    smaller = _search_one(s, replace(plan, ubatch=SMALL_UBATCH), goal, asked, _offload(s, found))
    return found + smaller


def _offload(s: _Space, found: Sequence[Candidate]) -> int | None:
    """The offload of a search's line (None: it found none)."""
    if not found:
        return None
    change = found[0].change
    return (change.n_cpu_moe or 0) if s.moe else _offload_of(s, change)


def _offload_of(s: _Space, change: Change) -> int:
    ngl = change.n_gpu_layers
    return 0 if ngl is None or ngl == NGL_ALL else s.n_offload - ngl


def _layout(s: _Space, plan: _Plan) -> Layout:
    """The settings of a plan at an offload and a context: for a split plan, the layers of
    that placement sized to each GPU's room (:func:`headroom_split`, worked out at the
    context asked for: the KV per token it reads does not depend on it), or llama.cpp's
    default split where that is the same or no -ts could say it."""
    base = Change(kv=plan.kv or None, n_ubatch=plan.ubatch)

    def at(x: int, units: int) -> Change:
        change = s.placement(base, x)
        if plan.split:
            ts = s.split(replace(change, n_ctx=s.asked_units * s.unit), plan.split)
            if ts is not None:
                change = replace(change, tensor_split=ts)
        return replace(change, n_ctx=units * s.unit)

    return at


def _search_one(
    s: _Space, plan: _Plan, goal: str, asked: int, hint: int | None = None
) -> list[Candidate]:
    """The best line of one plan for the goal (``hint``: an offload to start from)."""
    at = _layout(s, plan)
    units = s.asked_units
    found: tuple[int, int] | None
    if goal == "speed":
        x = least_offload(s, at, units, hint)
        room = s.room(lambda u: at(x, u)) if x is not None else 0
        found = (x, units) if x is not None else None
        max_units = max(room, units)
    elif goal == "gpu-only":
        room = s.room(lambda u: at(0, u))
        found = (0, room) if room else None
        max_units = room
    else:
        found = most_context(s, at, hint)
        max_units = found[1] if found else 0
    if found is None:
        return []
    c = _candidate(s, plan, at(found[0], found[1]), found[0], asked, max_units * s.unit)
    return [c] if c is not None else []


def _rank(pool: list[Candidate], goal: str) -> list[Candidate]:
    if goal == "speed":
        pool = [c for c in pool if c.fits_asked]
    elif goal == "gpu-only":
        pool = [c for c in pool if c.gpu_only]
    fastest = max((c.decode_tps for c in pool), default=0.0)

    def tier(c: Candidate) -> int:
        return speed_tier(c.decode_tps, fastest)

    # lines alike in all else: the faster prompt first (it had been the order they were found)
    if goal == "speed":
        return sorted(
            pool, key=lambda c: (tier(c), KV_LOSS.get(c.kv, 0), -c.max_ctx, -c.prefill_tps)
        )
    return sorted(pool, key=lambda c: (-c.max_ctx, KV_LOSS.get(c.kv, 0), tier(c), -c.prefill_tps))


def _with_gains(pool: list[Candidate]) -> list[Candidate]:
    """A -ts line is kept only where it gives something over the same KV type and ubatch
    with llama.cpp's default split, and says what."""
    out = []
    for c in pool:
        if c.change.tensor_split is None:
            out.append(c)
            continue
        defaults = [
            d
            for d in pool
            if d.change.tensor_split is None
            and d.kv == c.kv
            and d.change.n_ubatch == c.change.n_ubatch
        ]
        gain = _gain(c, defaults)
        if gain is not None:
            out.append(replace(c, gains=gain))
    return out


def _gain(b: Candidate, defaults: Sequence[Candidate]) -> str | None:
    """What a -ts candidate gives over the default split; None when one is as good."""

    def as_good(a: Candidate) -> bool:
        return (
            a.max_ctx >= b.max_ctx
            and speed_tier(a.decode_tps, b.decode_tps) <= 0  # as fast, within 2 %
            and (a.gpu_only or not b.gpu_only)
        )

    if any(as_good(a) for a in defaults):
        return None
    split = b.change.tensor_split or ()
    ts = ",".join(map(str, split))
    what = f"-ts {ts} gives each GPU the layers its memory has room for after its fixed costs"
    if 0 in split:  # what it does is leave GPUs out: no hop between them
        n = sum(1 for x in split if x)
        what = f"-ts {ts} puts every layer on {'one GPU' if n == 1 else f'{n} of the GPUs'}"
    elif b.split == "speed":
        what = f"-ts {ts} puts the most layers on the GPUs fastest per layer"
    if not defaults:
        return f"{what}: fits where llama.cpp's default split does not"
    if b.gpu_only and not any(a.gpu_only for a in defaults):
        return f"{what}: everything on the GPUs, where the default split needs the CPU"
    a = max([a for a in defaults if a.gpu_only == b.gpu_only] or defaults, key=lambda a: a.max_ctx)
    if b.max_ctx > a.max_ctx:
        return f"{what}: context {b.max_ctx}, the default split {a.max_ctx}"
    return f"{what}: decode ~{b.decode_tps:.0f} t/s, the default split ~{a.decode_tps:.0f}"


def _say_slower_prompts(s: _Space, cands: Sequence[Candidate]) -> list[Candidate]:
    """-ub 256 lines whose prompts run slower than the same line without it say so; those
    whose prompts do not (two ubatches let a layer split's GPUs overlap) give up nothing
    for it."""
    out = []
    for c in cands:
        if c.change.n_ubatch is not None:
            same = _speed(s, replace(c.change, n_ubatch=None))
            slower = c.prefill_tps < same[1]
            said = f"{_UB_WHY} (slower prompts)" if slower else ""
            gives = (g if g != _UB_WHY else said for g in c.gives)
            c = replace(c, gives=tuple(g for g in gives if g))
        out.append(c)
    return out


def best_configs(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
    goal: str = "context",
    limit: int = 5,
    *,
    progress: Progress | None = None,
    kv_types: Sequence[str] | None = None,
    small_ubatch: bool = True,
    splits: bool = True,
) -> list[Candidate]:
    """Ranked command lines for ``goal`` (one of GOALS) that the estimator says fit, best
    first; ValueError where llama.cpp refuses the -sm tensor given (none would load).
    ``progress`` is told (steps done, steps planned) as the search goes.
    ``kv_types``: the K/V cache types tried (None: all; empty: the one given);
    ``small_ubatch``: also try -ub 256; ``splits``: also try the split sized to the GPUs'
    room."""
    goal = check_goal(goal)
    if goal == "gpu-only" and (host_given := _host_weights_given(settings)):  # kept in every line
        raise ValueError(
            f"{host_given} given keeps weights on the CPU: every line --best gpu-only "
            "proposes keeps it; drop it"
        )
    if goal == "gpu-only" and not any(d.kind != "cpu" for d in devices):
        raise ValueError("--best gpu-only: no GPU to put the model on (only the host here)")
    made = make_space(model, settings, devices, options, progress)
    if made is None:
        return []
    s, asked = made
    p = s.problem
    tensor = settings.split_mode == "tensor"
    if tensor:
        from lltui.core.memory.common import FLOAT_KV
        from lltui.core.memory.tensor_parallel import sm_tensor_refused

        rules = p.options.rules
        refused = sm_tensor_refused(p.hp, settings, rules)
        if refused:  # every line would keep the -sm tensor given: llama.cpp loads none
            raise ValueError(
                f"{refused}: every line --best {goal} proposes keeps the -sm tensor given; "
                "drop it (lltui fit --best decode chooses the split itself)"
            )
        if not rules.sm_tensor_quant_kv:  # nor, before b9455, with a quantized K/V cache
            tried = kv_types if kv_types is not None else [kv for kv, _why in KV_TYPES]
            kv_types = [kv for kv in tried if kv in FLOAT_KV]
    if settings.flash_attn == "off" and "flash_attn" in settings.given:
        kv_types = []  # a quantized cache's lines turn -fa on: the -fa off given is kept
    if not tensor and not room_for_weights(s.estimate(Change())):
        return []  # no placement, K/V type, ubatch or context can fit: nothing to search
    # a split of one's own or none to make: the one given stays
    split_allowed = (
        splits and len(p.used) > 1 and not settings.tensor_split and settings.split_mode == "layer"
    )
    plans = _plans(kv_types, split_allowed, goal)
    small_ub = small_ubatch and settings.n_ubatch > SMALL_UBATCH
    s.planned = len(plans) * (2 if small_ub else 1) * (12 + int(math.log2(max(2, s.n_offload))) * 6)
    pool: list[Candidate] = []
    ended: dict[str, int | None] = {}  # per split kind, where the last K/V type's search ended
    for plan in plans:
        found = _search_plan(s, plan, goal, asked, small_ub, ended.get(plan.split))
        ended[plan.split] = _offload(s, found[:1]) if found else ended.get(plan.split)
        pool += found
    ranked = _rank(_say_slower_prompts(s, _with_gains(pool)), goal)
    unique: list[Candidate] = []
    for c in ranked:
        if c.flags not in {u.flags for u in unique}:
            unique.append(c)
    return [c for c in unique if not any(_cheaper(a, c) for a in unique)][:limit]


def _cheaper(a: Candidate, b: Candidate) -> bool:
    """``a`` gives all ``b`` gives for less quality: a K/V cache nearer f16, as much context,
    as fast (within 2 %) at decode and prompts, and the CPU kept out where ``b`` keeps it
    out. A q8_0 cache that buys nothing was listed beside the f16 line it equals."""
    return (
        KV_LOSS.get(a.kv, 0) < KV_LOSS.get(b.kv, 0)
        and a.max_ctx >= b.max_ctx
        and (a.fits_asked or not b.fits_asked)
        and (a.gpu_only or not b.gpu_only)
        and speed_tier(a.decode_tps, b.decode_tps) <= 0
        and speed_tier(a.prefill_tps, b.prefill_tps) <= 0
    )


def _host_weights_given(settings: LlamaArgs) -> str | None:
    """The flag given that puts weights on the CPU (--n-cpu-moe, --cpu-moe, an -ot to a CPU
    buffer), as the user spelled it; None where none does."""
    for g in settings.given_args:
        if g.key in _CPU_MOE:
            return " ".join([g.flag, *g.values])
    for o in settings.overrides:
        if o.buft.upper().startswith("CPU"):
            return f"-ot {o.pattern}={o.buft}"
    return None


def room_for_weights(res: FitResult | None) -> bool:
    """Whether the devices' free memory together could hold the weights at all. Each weight
    lies whole on one device (layer splits), taking at least its own bytes there, and a line
    fits only where every device's total and margin are within its free memory: where the
    sum falls short, no offload, split, K/V type, ubatch or context fits."""
    if res is None or any(d.free_bytes is None for d in res.devices):
        return True
    weights = sum(t.nbytes for t in res.placements if not t.duplicate)
    return weights <= sum((d.free_bytes or 0) - d.unaccounted_bytes for d in res.devices)


def make_space(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None,
    progress: Progress | None = None,
) -> tuple[_Space, int] | None:
    """The search space of a model on devices, and the context asked for (-c, else -fitc's
    4096); None where llama.cpp refuses the settings as given."""
    opts = replace(options or FitOptions(), search=False, suggest=False)
    p = FitProblem.of(model, settings, devices, opts)
    try:
        first = estimate_once(p)
    except FitError:
        return None
    hp = p.hp
    r = first.resolved
    unit = KV_PAD * r.n_stream
    moe = hp.n_expert > 1 and not any(k in settings.given for k in _CPU_MOE)
    s = _Space(
        problem=p,
        moe=moe,
        n_offload=hp.n_layer_all if moe else hp.n_layer_all + 1,
        cap=max(hp.n_ctx_train * r.n_stream, r.n_ctx) // unit,
        unit=unit,
        given_kv=max(settings.type_k, settings.type_v, key=lambda kv: KV_LOSS.get(kv, 0)),
        asked_units=max(1, -(-(settings.n_ctx or settings.fit_ctx or 4096) // unit)),
        progress=progress,
    )
    s._results[Change()] = first  # the settings as given: estimated already
    return s, settings.n_ctx or settings.fit_ctx or 4096


def placed_of(res: FitResult, devs: Sequence[DeviceSpec]) -> Placed:
    """A result's placement, to estimate the same layout at another context."""
    weights = {n: b for n, k, b in res.buffers if k == "model"}
    index = {d.name: i for i, d in enumerate(devs)}
    return res.placements, weights, tuple(index.get(n, -1) for n in res.layer_devices)


def headroom_split(
    res: FitResult, devices: Sequence[DeviceSpec], other: FitResult | None = None
) -> tuple[int, ...] | None:
    """Layers per GPU (a -ts value) that let the largest context fit: each GPU first pays
    its fixed costs (compute buffers, margin, copies every GPU holds), then takes layers in
    order, weights plus KV at the context, while they fit. llama.cpp's default splits by
    free memory alone, so the GPU that also holds the output layer or a larger compute
    buffer fills first. ``other``: the same layout at another context, from which each
    GPU's compute buffer is drawn as a line in the context (attention's scores grow with
    it) rather than taken as fixed. None: one GPU, a free size unknown, no split that holds
    the layers, or the same split as the result's."""
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
    # what each GPU has for layers: its free memory less what it holds besides them, at
    # the result's context; and how that changes per token of context (its compute buffer)
    room = [
        (free_by_name[e.name] or 0)
        - (e.total_bytes + e.unaccounted_bytes - e.kv_bytes - sum(weights[il] for il in h))
        for e, h in zip(gpus, held, strict=True)
    ]
    ctx0 = res.resolved.n_ctx
    growth = [0.0] * len(gpus)
    if other is not None and other.resolved.n_ctx != ctx0:
        by_name = {e.name: e for e in other.devices}
        span = other.resolved.n_ctx - ctx0
        for i, e in enumerate(gpus):
            o = by_name.get(e.name)
            if o is not None:
                growth[i] = max(0.0, (o.compute_bytes - e.compute_bytes) / span)

    free = [free_by_name[e.name] or 0 for e in gpus]

    def fill(ctx: int, spare: float = 0.0) -> list[int] | None:
        """Layers in order, each GPU taking what fits in its room less ``spare`` of its memory."""
        counts, k = [0] * len(gpus), 0
        for i in range(len(gpus)):
            left = room[i] - growth[i] * (ctx - ctx0) - spare * free[i]
            while k < len(layers):
                cost = weights[layers[k]] + fixed_kv[layers[k]] + per_token[layers[k]] * ctx
                if cost > left:
                    break
                left -= cost
                counts[i] += 1
                k += 1
        return counts if k == len(layers) else None

    top = max(res.model.n_ctx_train, res.resolved.n_ctx) // KV_PAD
    ctx_units = _largest(top, lambda c: fill(c * KV_PAD) is not None)
    if not ctx_units:
        return None
    ctx = ctx_units * KV_PAD
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
    names = {e.name for e in gpus}
    for d in speed.devices:
        n = sum(1 for dev in res.layer_devices[:-1] if dev == d.name)
        if n and d.name in names:
            per_layer[d.name] = d.decode_ms / n
    # a GPU holding no layer has no time per layer to go by
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

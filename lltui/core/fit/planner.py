"""``lltui fit --best decode|prompt|joules|fewest-gpus``: the fastest command line for a model
on these devices, chosen by the speed model among the ones that fit.

The space, bounded (each point's memory is the estimator's, per device, as ``lltui fit`` of
that command line shows it; its speed the speed model's):

- the split: ``-sm layer``, and ``-sm tensor`` where llama.cpp loads it (an architecture it
  implements, a K/V cache of floats, flash attention not off, two GPUs or more);
- which GPUs, in which order (``-dev``): GPUs alike (the same model and free memory to the
  GiB) stand in for each other, so a set is how many of each kind (:func:`device_sets`);
  each set in llama.cpp's order and, where its GPUs differ, fastest first; over a set,
  llama.cpp's own split by free memory, and for a layer split that needs the host, also
  ``-ts`` sized to each GPU's room after its fixed costs (:func:`headroom_split`: with host
  experts, llama.cpp's own split leaves the first GPU nearly empty, as ``--n-cpu-moe``
  takes the first layers' experts); over GPUs of several speeds, also ``-ts`` putting the
  most layers on the fastest (:func:`speed_split`);
- where the weights go: the least offload that fits at the context asked for, by bisection
  (MoE: the experts of the fewest layers, ``--n-cpu-moe``; dense: the fewest layers, -ngl);
- ``-ub``: the one given on every layout, then :data:`UBATCHES` on the best few;
- the K/V cache: where the best layer split needs the host and the K/V cache given is f16, the
  same layout with :data:`KV_OPTION` (half the bytes a token takes, so fewer experts or
  layers on the host) is offered beside the ranking, with its quality cost said, never
  ranked above the K/V cache given (``-sm tensor`` refuses a quantized one before b9455).

Goals: ``decode`` (tokens/s of one sequence; the default), ``prompt`` (a
:data:`PROMPT_TOKENS`-token prompt), ``joules`` (the GPUs' energy per decoded token) and
``fewest-gpus`` (the fewest GPUs within :data:`FEWEST_SHARE` of the fastest decode).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from lltui.core.cmdline.args import LlamaArgs, parse_llama_args
from lltui.core.fit.best import Change, Progress, _Space, least_offload, make_space, speed_tier
from lltui.core.fit.estimate import speed_of
from lltui.core.gguf.model import GgufModel
from lltui.core.hardware.gpus import find_gpu
from lltui.core.llama.builds import BuildRules
from lltui.core.memory.allocate import estimate_once
from lltui.core.memory.common import CPU, FitError
from lltui.core.memory.context import select_devices
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.results import FitOptions, FitResult, SpeedEstimate
from lltui.core.memory.tensor_parallel import not_modelled, sm_tensor_refused
from lltui.core.speed.params import PARAMS
from lltui.core.text import counted
from lltui.core.units import GIB

PLAN_GOALS = ("decode", "prompt", "joules", "fewest-gpus")
FEWEST_SHARE = 0.9  # fewest-gpus: within this share of the fastest decode
UBATCHES = (256, 1024, 2048)
UB_LAYOUTS = 2  # the best layouts tried again with each of UBATCHES (the prompt goal; else 1)
MAX_SETS = 8  # device sets tried, at most
PROMPT_TOKENS = 2048  # the prompt speed ranked (long enough for -ub beyond 512 to count)
# what the planner chooses itself: the user's own values of these are replaced (the experts
# on the host too: a --n-cpu-moe given was kept, and every option carried its offload)
_CHOSEN = frozenset(
    {"split_mode", "devices", "tensor_split", "main_gpu", "n_gpu_layers", "n_cpu_moe", "cpu_moe"}
)
KV_OPTION = "q8_0"  # the K/V cache type offered where f16's needs the host
KV_OPTION_COST = "a little quality"  # what KV_OPTION gives up (as --best context says it)


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """One device's memory with an option (as ``fit --json``'s devices)."""

    name: str
    total_bytes: int
    free_bytes: int | None
    fits: bool | None


@dataclass(frozen=True, slots=True)
class PlanOption:
    """One point of the space: a split, devices and -ub, at the least offload that fits."""

    split_mode: str  # layer or tensor
    devices: tuple[str, ...]  # -dev, in order
    n_ubatch: int
    fits: bool
    kv: str = ""  # the K/V cache type the planner chose ("": as given)
    # -ts: "" llama.cpp's own split by free memory, "room" sized to each GPU's room, "speed"
    # the most layers on the fastest GPUs
    ts: str = ""
    flags: tuple[str, ...] = ()  # added to the flags given
    argv: tuple[str, ...] = ()  # the whole command line's flags
    offload: str = ""  # what goes to the host ("" nothing)
    decode_tps: float = 0.0  # at depth 0
    # at the context asked for, full: as deep as llama-server's slots reach (fit's own)
    decode_tps_deep: float = 0.0
    prefill_tps: float = 0.0  # a PROMPT_TOKENS prompt
    joules_per_token: float | None = None  # the GPUs' energy per decoded token
    reduce_ms: float = 0.0  # of a token's decode, tensor's all-reduces
    link_ms: float = 0.0  # of a token's decode, everything between devices
    memory: tuple[DeviceUse, ...] = ()
    held_bytes: int = 0  # weights and K/V on the GPUs
    why_not: str = ""  # why it does not fit ("" where it does)
    lost: str = ""  # why it ranks below the first

    @property
    def n_gpus(self) -> int:
        return len(self.devices)

    @property
    def token_ms(self) -> float:
        return 1e3 / self.decode_tps if self.decode_tps > 0 else 0.0


@dataclass(frozen=True, slots=True)
class SplitAnswer:
    """Tensor or layer on this rig: the best option of each, and which wins and why."""

    winner: str  # layer or tensor
    layer: PlanOption
    tensor: PlanOption
    decode_gain: float  # the winner's decode over the other's, at depth 0 (0.12: 12 % faster)
    why: str


@dataclass(frozen=True, slots=True)
class PlanResult:
    goal: str
    context: int  # the context asked for
    options: tuple[PlanOption, ...]  # those that fit, best first, then those that do not
    split: SplitAnswer | None
    tensor_note: str  # why -sm tensor was not tried ("" where it was)
    estimates: int  # estimates made
    skipped: int = 0  # device sets not tried: they would put more on the host
    # the best layer split again with a KV_OPTION cache, where that is faster for the goal
    # (fewer on the host); a quality cost, so beside the ranking, not in it
    kv_option: PlanOption | None = None
    replaced: tuple[str, ...] = ()  # the user's own flags the planner chose anew (-ts 3,1)

    @property
    def best(self) -> PlanOption | None:
        return self.options[0] if self.options and self.options[0].fits else None


def check_plan_goal(goal: str) -> None:
    if goal not in PLAN_GOALS:
        raise ValueError(f"--best: expected one of {', '.join(PLAN_GOALS)}, got {goal!r}")


def tensor_refusal(hp: Hparams, args: LlamaArgs, n_gpus: int, rules: BuildRules) -> str:
    """Why -sm tensor is not a choice here ("": it is): what llama.cpp (of ``rules``'
    build) refuses to load, and what lltui does not estimate per device."""
    if n_gpus < 2:
        return "no GPU" if n_gpus == 0 else "one GPU: nothing to split"
    refused = sm_tensor_refused(hp, args, rules)
    if refused:
        return refused
    why = not_modelled(hp)
    return f"not estimated per device here: {why}" if why else ""


def device_sets(gpus: Sequence[DeviceSpec], need: int = 0) -> list[tuple[DeviceSpec, ...]]:
    """The sets of GPUs tried, each in llama.cpp's order, the whole rig first: how many of
    each kind (GPUs of one model and memory are alike), every count where that makes at
    most MAX_SETS sets, else 0, 1, 2, 4, half and all of each kind and the fewest of one
    kind whose free memory reaches ``need`` (bytes) and one more."""
    kinds: dict[tuple[str, int], list[DeviceSpec]] = {}
    for d in gpus:
        key = (d.description, round((d.free_bytes or d.total_bytes or 0) / GIB))
        kinds.setdefault(key, []).append(d)
    groups = list(kinds.values())
    counts: list[Sequence[int]] = [range(len(g) + 1) for g in groups]
    if math.prod(len(c) for c in counts) > MAX_SETS:
        counts = [_some_counts(g, need) for g in groups]
    order = {d.name: i for i, d in enumerate(gpus)}
    out = []
    for pick in itertools.product(*counts):
        chosen = [d for g, k in zip(groups, pick, strict=True) for d in g[:k]]
        if chosen:
            out.append(tuple(sorted(chosen, key=lambda d: order[d.name])))

    def first(devs: tuple[DeviceSpec, ...]) -> tuple[bool, bool, int, float]:
        # the whole rig; then the sets that hold what it holds, the fewest and fastest
        # GPUs first (the likeliest fastest: the cap cut them, largest kept); then the rest
        holds = sum(_free(d) for d in devs) >= need
        size = len(devs) if holds else -len(devs)
        return len(devs) < len(gpus), not holds, size, -sum(_bandwidth(d) for d in devs)

    out.sort(key=first)
    return out[:MAX_SETS]


def _some_counts(group: Sequence[DeviceSpec], need: int) -> list[int]:
    n = len(group)
    free = group[0].free_bytes or group[0].total_bytes or 1
    fewest = min(n, max(1, -(-need // free)))
    return sorted({0, 1, min(2, n), min(4, n), n // 2, n, fewest, min(n, fewest + 1)})


def _bandwidth(d: DeviceSpec) -> float:
    """A GPU's memory bandwidth, GB/s (what decode goes by): reported, else the catalog's."""
    if d.mem_bandwidth_gbs:
        return d.mem_bandwidth_gbs
    g = find_gpu(d.description, (d.total_bytes or 0) // 2**20 or None) if d.description else None
    return g.bandwidth_gbs if g is not None else 0.0


def _orders(devs: tuple[DeviceSpec, ...]) -> list[tuple[DeviceSpec, ...]]:
    """llama.cpp's order and, where the GPUs differ, the fastest first."""
    fastest = tuple(sorted(devs, key=lambda d: -_bandwidth(d)))
    return [devs] if fastest == devs else [devs, fastest]


# --- one option ---------------------------------------------------------------------------------


@dataclass
class _Search:
    s: _Space
    model: GgufModel
    settings: LlamaArgs
    goal: str
    every: tuple[str, ...]  # every GPU llama.cpp sees, in its order (no -dev: these)
    rpc_flags: tuple[str, ...] = ()  # --rpc for servers given as devices, where one is used

    def option(
        self,
        mode: str,
        devs: Sequence[DeviceSpec],
        ub: int | None,
        hint: int | None = None,
        kv: str | None = None,
        ts: str = "",
    ) -> tuple[PlanOption, int | None]:
        """The option of a split, devices, -ub and K/V type (None: as given): the least
        offload that fits (``hint``: where a like search ended), with its memory and speed;
        and that offload. ``ts``: a layer split's -ts at each offload tried, "room" (sized
        to each GPU's room, see best's headroom_split) or "speed" (see speed_split)."""
        s = self.s
        names = tuple(d.device_name for d in devs)
        # the whole rig in llama.cpp's order needs no -dev
        base = Change(
            split_mode=mode if names else None,  # no GPU: nothing to split
            devices=None if names == self.every else names,
            n_ubatch=ub,
            kv=kv,
        )
        units = s.asked_units

        def at(x: int, u: int) -> Change:
            change = s.placement(base, x)
            if ts:  # worked out at the context asked for, as --best's own splits
                counts = s.split(replace(change, n_ctx=units * s.unit), ts)
                # (a speed split that leaves a GPU empty is a smaller set's: -dev tries it)
                whole = ts == "room" or (counts and len(counts) == len(devs) and 0 not in counts)
                if counts is not None and whole:
                    change = replace(change, tensor_split=counts)
            return replace(change, n_ctx=u * s.unit)

        x = 0 if s.all_fit(at(0, units)) else least_offload(s, at, units, hint)
        ub_used = ub or self.settings.n_ubatch
        if x is None:
            why = self._why_not(at(0, units), at(s.n_offload, units))
            return PlanOption(mode, names, ub_used, False, why_not=why), None
        change = at(x, units)
        res = s.estimate(change)
        assert res is not None  # it fits
        made = self._option(mode, names, ub_used, change, res, x)
        return replace(made, kv=kv or "", ts=ts if change.tensor_split is not None else ""), x

    def _option(
        self, mode: str, names: tuple[str, ...], ub: int, change: Change, res: FitResult, x: int
    ) -> PlanOption:
        p = self.s.problem
        fast = speed_of(self.model, res, p.devices, p.options, prompt_tokens=PROMPT_TOKENS)
        if change.n_ctx == self.settings.n_ctx:
            change = replace(change, n_ctx=None)  # -c as given: not said again
        flags = change.flags()
        rpc = self.rpc_flags if any(n.startswith(RPC_PREFIX) for n in names) else ()
        command = self.settings.without(_CHOSEN).then(parse_llama_args([*rpc, *flags]))
        return PlanOption(
            split_mode=mode,
            devices=names,
            n_ubatch=ub,
            fits=True,
            flags=flags,
            argv=tuple(command.to_argv()),
            offload=_offload_text(self.s, x),
            decode_tps=fast.decode_tps,
            decode_tps_deep=fast.decode_tps_full,
            prefill_tps=fast.prefill_tps,
            joules_per_token=joules_per_token(fast, p.devices),
            reduce_ms=fast.reduce_decode_ms,
            link_ms=fast.link_decode_ms,
            memory=tuple(
                DeviceUse(d.name, d.total_bytes, d.free_bytes, d.fits)
                for d in res.devices
                if d.kind != "cpu"
            ),
            held_bytes=sum(d.weights_bytes + d.kv_bytes for d in res.devices if d.kind != "cpu"),
        )

    def _why_not(self, least: Change, most: Change) -> str:
        """Why nothing fits with a layout, from the estimates with the least and the most on
        the host: the host too small even for the least, the GPUs too small even with the
        most, or neither end fitting both."""
        p = self.s.problem
        over: list[list[tuple[str, float]]] = []
        for change in (least, most):
            # the search's own estimate where it made one (a refusal is made again, for
            # its words)
            res = self.s.known(change)
            try:
                res = res or estimate_once(p.with_args(change.apply(p.args)))
            except (FitError, ValueError) as exc:
                return f"llama.cpp refuses it: {exc}"
            over.append(
                [
                    (d.name, (d.total_bytes + d.unaccounted_bytes - (d.free_bytes or 0)) / GIB)
                    for d in res.devices
                    if d.fits is False
                ]
            )

        def said(found: list[tuple[str, float]]) -> str:
            return ", ".join(f"{n} by {gib:.1f} GiB" for n, gib in found)

        host_least = [o for o in over[0] if o[0] == CPU]
        gpus_most = [o for o in over[1] if o[0] != CPU]
        if host_least:
            return f"the host is over even with nothing offloaded ({said(host_least)})"
        if gpus_most:
            return f"the GPUs are over even with the most on the host ({said(gpus_most)})"
        return (
            f"what the GPUs cannot hold the host cannot take (the most offloaded: {said(over[1])})"
        )


def _offload_text(s: _Space, x: int) -> str:
    if x == 0:
        return ""
    if s.moe:
        return f"experts of {counted(x, 'layer')} on the host"
    return f"{x} of {s.n_offload} layers on the host"


def joules_per_token(speed: SpeedEstimate, devices: Sequence[DeviceSpec]) -> float | None:
    """The GPUs' energy per decoded token, J: each GPU used draws its static power the whole
    token and what a decode draws while its share runs (the speed model's power shares of
    its power limit). The host and the GPUs not used are not counted. None: a GPU's limit
    is not known."""
    if speed.decode_tps <= 0:
        return None
    token_s = 1.0 / speed.decode_tps
    by_name = {d.name: d for d in devices}
    total, counted = 0.0, 0
    for ds in speed.devices:
        d = by_name.get(ds.name)
        if d is None or d.kind == "cpu":
            continue
        g = find_gpu(ds.description) if ds.description else None
        limit = d.power_limit_w or (g.tdp_w if g is not None else None)
        if not limit:
            return None
        static = PARAMS.static_power * limit
        busy = min(token_s, ds.decode_ms / 1e3)
        total += static * token_s + (PARAMS.decode_power - PARAMS.static_power) * limit * busy
        counted += 1
    return total if counted else None


# --- ranking ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fastest:
    """The fastest decode and prompt of the options ranked, and the least energy per token:
    within 2 % of the best rank alike (:func:`speed_tier`)."""

    decode: float
    prompt: float
    tokens_per_joule: float = 0.0

    @classmethod
    def of(cls, options: Sequence[PlanOption]) -> _Fastest:
        return cls(
            max((o.decode_tps for o in options), default=0.0),
            max((o.prefill_tps for o in options), default=0.0),
            max((_per_joule(o) for o in options), default=0.0),
        )

    def energy_tier(self, o: PlanOption) -> int:
        return speed_tier(_per_joule(o), self.tokens_per_joule)

    def decode_tier(self, o: PlanOption) -> int:
        return speed_tier(o.decode_tps, self.decode)


def _per_joule(o: PlanOption) -> float:
    j = o.joules_per_token
    return 1 / j if j else 0.0


def _key(goal: str, o: PlanOption, fastest: _Fastest) -> tuple[float, ...]:
    """Smaller first. Speeds (and energy) within 2 % of the best rank alike; then fewer
    GPUs or the goal's next measure, then the other speed."""
    if goal == "prompt":
        return (speed_tier(o.prefill_tps, fastest.prompt), o.n_gpus, -o.decode_tps)
    if goal == "joules":
        return (fastest.energy_tier(o), fastest.decode_tier(o), -o.prefill_tps)
    if goal == "fewest-gpus":
        slow = o.decode_tps < FEWEST_SHARE * fastest.decode
        return (float(slow), o.n_gpus, fastest.decode_tier(o), -o.prefill_tps)
    return (fastest.decode_tier(o), o.n_gpus, -o.prefill_tps)


def rank(goal: str, options: Sequence[PlanOption]) -> list[PlanOption]:
    """Those that fit, best first, each saying why it lost to the first; then those that do
    not fit (their why_not)."""
    fit = [o for o in options if o.fits]
    fastest = _Fastest.of(fit)
    ranked = sorted(fit, key=lambda o: _key(goal, o, fastest))
    if ranked:
        first = ranked[0]
        ranked = [first] + [replace(o, lost=_lost(goal, first, o, fastest)) for o in ranked[1:]]
    return ranked + [replace(o, lost=o.why_not) for o in options if not o.fits]


def _slower(a: float, b: float, what: str) -> str:
    return f"{what} {100 * (1 - b / a):.0f}% slower ({b:.1f} against {a:.1f} t/s)" if a > 0 else ""


def _lost(goal: str, first: PlanOption, o: PlanOption, fastest: _Fastest) -> str:
    if goal == "prompt":
        tier = speed_tier(o.prefill_tps, fastest.prompt)
        if tier > speed_tier(first.prefill_tps, fastest.prompt):
            return _slower(first.prefill_tps, o.prefill_tps, "prompt")
    elif goal == "joules":
        a, b = first.joules_per_token, o.joules_per_token
        if a and b and fastest.energy_tier(o) > fastest.energy_tier(first):
            return f"{100 * (b / a - 1):.0f}% more energy per token ({b:.2f} against {a:.2f} J)"
    elif goal == "fewest-gpus" and o.decode_tps < FEWEST_SHARE * fastest.decode:
        return f"decode under {FEWEST_SHARE:.0%} of the fastest ({o.decode_tps:.1f} t/s)"
    if goal != "decode" and o.n_gpus > first.n_gpus and goal != "joules":
        return f"no better, on {o.n_gpus} GPUs against {first.n_gpus}"
    if goal != "prompt" and fastest.decode_tier(o) > fastest.decode_tier(first):
        return _slower(first.decode_tps, o.decode_tps, "decode")
    if o.n_gpus > first.n_gpus:
        return f"no better, on {o.n_gpus} GPUs against {first.n_gpus}"
    if goal == "prompt":
        return f"as fast a prompt; decode {o.decode_tps:.1f} against {first.decode_tps:.1f} t/s"
    return (
        f"as fast a decode (within 2%); prompt {o.prefill_tps:.0f} against "
        f"{first.prefill_tps:.0f} t/s"
    )


# --- the search ---------------------------------------------------------------------------------


def plan_best(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
    goal: str = "decode",
    *,
    progress: Progress | None = None,
) -> PlanResult:
    """Every option of the space (see the module docstring) ranked for ``goal``. The
    user's -sm, -dev, -ts, -mg and -ngl are replaced by the planner's choices (a -dev
    given names the GPUs it chooses among); the rest (-c, -np, K/V types, -ot, ...) are
    kept. ValueError for a goal not in PLAN_GOALS or
    settings llama.cpp refuses."""
    check_plan_goal(goal)
    base = settings.without(_CHOSEN)
    every = tuple(d.device_name for d in devices if d.kind != "cpu")
    if settings.devices is not None:  # -dev given: the GPUs to choose among
        devices = select_devices(devices, replace(settings, split_mode="layer"))
        # estimated in the order -dev gave: every option says its -dev (one without was
        # estimated in that order but run in llama.cpp's)
        every = ()
    made = make_space(model, base, devices, options, progress)
    if made is None:
        raise ValueError("llama.cpp refuses the command as given")
    s, asked = made
    search = _Search(s, model, base, goal, every, _rpc_flags(settings, devices))
    gpus = tuple(d for d in s.problem.devices if d.kind != "cpu")
    refusal = tensor_refusal(s.problem.hp, base, len(gpus), s.problem.options.rules)
    modes = ("layer",) if refusal else ("layer", "tensor")
    s.planned = 12 * len(modes) + UB_LAYOUTS * len(UBATCHES) * 2
    tried = _Tried(search)
    skipped = _try_sets(tried, modes, gpus)
    found = tried.found + _other_ubatches(search, rank(goal, tried.found), tried.offloads)
    ranked = rank(goal, found)
    return PlanResult(
        goal=goal,
        context=asked,
        options=tuple(ranked),
        split=split_answer(ranked, goal),
        tensor_note=refusal,
        estimates=s.done,
        skipped=skipped,
        # (a -dev given is kept: the GPUs to choose among)
        replaced=tuple(
            w
            for g in settings.given_args
            if g.key in _CHOSEN - {"devices"}
            for w in (g.flag, *g.values)
        ),
        kv_option=_kv_option(search, ranked, tried.offloads),
    )


@dataclass
class _Tried:
    """The options tried so far, and the offload each layout needed (a later -ub starts
    there). Called with a split mode and GPUs: that layout tried, and for a layer split of
    several GPUs the -ts sized to their room (where the host is needed) and the one with the
    most layers on the fastest (GPUs of several speeds); the offload it needed."""

    search: _Search
    found: list[PlanOption] = field(default_factory=list)
    offloads: dict[_Layout, int] = field(default_factory=dict)

    def __call__(self, mode: str, devs: Sequence[DeviceSpec]) -> int | None:
        opt, x = self.search.option(mode, devs, None)
        self._keep(opt, x)
        if len(devs) < 2:
            return x
        kinds = ["room"] if x != 0 else []  # the host needed: room for more?
        if len({_bandwidth(d) for d in devs}) > 1:  # several speeds
            kinds.append("speed")
        for kind in kinds:
            other, y = self.search.option(mode, devs, None, ts=kind)
            # (a -ts that changes nothing, or another -ts's same split, is not said twice)
            if other.ts and all(o.flags != other.flags for o in self.found if o.fits):
                self._keep(other, y)
                if y is not None and (x is None or y < x):
                    x = y  # what this set needs of the host at best
        return x

    def _keep(self, opt: PlanOption, x: int | None) -> None:
        self.found.append(opt)
        if x is not None:
            self.offloads[_layout(opt)] = x


def _try_sets(tried: _Tried, modes: Sequence[str], gpus: tuple[DeviceSpec, ...]) -> int:
    """The whole rig's layer split first, then each set of GPUs (and order) in each mode;
    how many smaller sets were not tried."""
    x_whole = {"layer": tried("layer", gpus)}
    need = tried.found[0].held_bytes
    sets = device_sets(gpus, need)
    skipped = 0
    for mode in modes:
        for devs in sets:
            if mode == "tensor" and (len(devs) < 2 or len({d.backend_name for d in devs}) > 1):
                continue  # one GPU, or GPUs of several backends (not tried: see the README)
            # fewer GPUs than the whole rig's, where the whole rig already needs the host or
            # theirs cannot hold what it holds: more on the host, slower (a tensor split of
            # a rig of several backends is not tried whole: its layer split's stands in)
            fewer = len(devs) < len(gpus)
            whole = x_whole.get(mode, x_whole["layer"])
            if fewer and (whole != 0 or sum(_free(d) for d in devs) < need):
                skipped += 1
                continue
            for order in _orders(devs) if mode == "layer" else [devs]:
                if (mode, order) == ("layer", gpus):
                    continue  # tried first
                x = tried(mode, order)
                if not fewer and order == devs:
                    x_whole[mode] = x
    return skipped


_Layout = tuple[str, tuple[str, ...], str]  # split mode, devices, -ts kind


RPC_PREFIX = "RPC"  # llama.cpp's name of an RPC server's device: RPC0, RPC1, ...


def _rpc_flags(settings: LlamaArgs, devices: Sequence[DeviceSpec]) -> tuple[str, ...]:
    """``--rpc`` for RPC servers given as devices (``--gpus rpc:HOST:PORT``), not as flags:
    a command with -dev RPCn runs only with them."""
    endpoints = [d.endpoint for d in devices if d.kind == "rpc" and d.endpoint]
    return ("--rpc", ",".join(endpoints)) if endpoints and not settings.rpc else ()


def _layout(o: PlanOption) -> _Layout:
    return (o.split_mode, o.devices, o.ts)


def _free(d: DeviceSpec) -> int:
    return d.free_bytes or d.total_bytes or 0


def _other_ubatches(
    search: _Search, ranked: Sequence[PlanOption], offloads: dict[_Layout, int]
) -> list[PlanOption]:
    """The best UB_LAYOUTS layouts again with each -ub of UBATCHES (up to -b), started from
    the offload each needed with the -ub given."""
    st = search.settings
    by_name = {d.device_name: d for d in search.s.problem.devices}
    out = []
    layouts = UB_LAYOUTS if search.goal == "prompt" else 1
    for o in [o for o in ranked if o.fits][:layouts]:
        devs = [by_name[n] for n in o.devices]
        hint = offloads.get(_layout(o))
        for ub in UBATCHES:
            if ub != st.n_ubatch and ub <= st.n_batch:
                out.append(search.option(o.split_mode, devs, ub, hint, ts=o.ts)[0])
    return out


def _kv_option(
    search: _Search, ranked: Sequence[PlanOption], offloads: dict[_Layout, int]
) -> PlanOption | None:
    """The best layer split with a KV_OPTION cache, where the K/V cache given is f16 and that
    layout needs the host: a token's K/V in half the bytes leaves room for more of the
    weights on the GPUs. None where it is no faster for the goal than the first option."""
    st = search.settings
    first = next((o for o in ranked if o.fits), None)
    # the best layer split at the -ub given (a larger one's compute buffer takes the room
    # the smaller cache leaves)
    layer = next(
        (o for o in ranked if o.fits and o.split_mode == "layer" and o.n_ubatch == st.n_ubatch),
        None,
    )
    if first is None or layer is None or not layer.offload or not layer.devices:
        return None
    if (st.type_k, st.type_v) != ("f16", "f16"):
        return None  # a K/V type of the user's own stays
    if st.flash_attn == "off" and "flash_attn" in st.given:
        return None  # a quantized V cache needs flash attention, which the user turned off
    by_name = {d.device_name: d for d in search.s.problem.devices}
    devs = [by_name[n] for n in layer.devices]
    hint = offloads.get(_layout(layer))
    option, _ = search.option("layer", devs, None, hint, kv=KV_OPTION, ts=layer.ts)
    # better by the goal's own measure (not by a tie-break): the speed it ranks by, or the
    # energy; fewest-gpus, by decode
    goal = "decode" if search.goal == "fewest-gpus" else search.goal
    fastest = _Fastest.of([o for o in ranked if o.fits])
    if not option.fits or _key(goal, option, fastest)[0] >= _key(goal, first, fastest)[0]:
        return None
    return replace(option, lost=KV_OPTION_COST)


def split_answer(ranked: Sequence[PlanOption], goal: str) -> SplitAnswer | None:
    """Tensor or layer: the best option of each for the goal (their first in ``ranked``),
    which decodes faster and why: a tensor split reads each layer's weights in parts on
    every GPU at once and pays two all-reduces per layer; a layer split's GPUs take turns
    and pay a hop per device boundary. None: one of the two fits nowhere."""
    layer = next((o for o in ranked if o.fits and o.split_mode == "layer"), None)
    tensor = next((o for o in ranked if o.fits and o.split_mode == "tensor"), None)
    if layer is None or tensor is None:
        return None
    prompt = goal == "prompt"

    def metric(o: PlanOption) -> float:
        return o.prefill_tps if prompt else o.decode_tps

    win_t = metric(tensor) > metric(layer)
    a, b = (tensor, layer) if win_t else (layer, tensor)
    gain = metric(a) / metric(b) - 1 if metric(b) > 0 else 0.0
    if abs(gain) < 0.02 and win_t != (ranked.index(tensor) < ranked.index(layer)):
        # about as fast: the one the ranking put first (fewer GPUs, the other speed)
        win_t, a, b, gain = not win_t, b, a, 0.0
    what = f"prompt ({PROMPT_TOKENS} tokens)" if prompt else "decode"
    reduce = (
        f"-sm tensor's two all-reduces per layer take {tensor.reduce_ms:.2f} of its "
        f"{tensor.token_ms:.2f} ms per token over {tensor.n_gpus} GPUs"
    )
    if abs(gain) < 0.02:
        why = (
            f"about as fast ({what}: layer {metric(layer):.1f} t/s, tensor "
            f"{metric(tensor):.1f}): {reduce}, about what reading each layer in parts saves"
        )
    elif prompt and win_t:
        why = (
            f"-sm tensor's prompt is {100 * gain:.0f}% faster: every GPU works on each "
            "ubatch at once, where a layer split's GPUs take turns (pipelined only within "
            "a -b batch)"
        )
    elif prompt:
        why = (
            f"-sm layer's prompt is {100 * gain:.0f}% faster: its GPUs pipeline the ubatches "
            "of a -b batch and hop once per device boundary, where -sm tensor all-reduces "
            "every layer of every ubatch"
        )
    elif win_t:
        why = (
            f"-sm tensor decodes {100 * gain:.0f}% faster: every GPU reads its part of each "
            f"layer at once, and {reduce}; -sm layer's GPUs take turns "
            f"({layer.token_ms:.2f} ms per token over {layer.n_gpus})"
        )
    else:
        hops = (
            f"-sm layer hops between its {layer.n_gpus} GPUs in {layer.link_ms:.2f} of "
            f"{layer.token_ms:.2f} ms per token"
            if layer.n_gpus > 1
            else f"-sm layer on one GPU takes {layer.token_ms:.2f} ms per token, with no hop"
        )
        why = (
            f"-sm layer decodes {100 * gain:.0f}% faster: {reduce}, more than reading each "
            f"layer in parts saves; {hops}"
        )
    other = "decode" if prompt else f"prompt ({PROMPT_TOKENS} tokens)"
    why += (
        f". {other[0].upper()}{other[1:]}: layer "
        f"{(layer.decode_tps if prompt else layer.prefill_tps):.0f} t/s, tensor "
        f"{(tensor.decode_tps if prompt else tensor.prefill_tps):.0f}"
    )
    return SplitAnswer("tensor" if win_t else "layer", layer, tensor, gain, why)

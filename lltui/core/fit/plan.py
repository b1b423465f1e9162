"""A plan for several models resident together on one rig (llama-server's router mode, or
several llama-servers): each model's estimate, the devices' free memory shared out, what is
left, which models fit together when all do not, and the largest context each can have with
the others loaded.

Every model runs in its own llama-server process, so what each allocates adds up on every
device it uses, and each keeps its own margin on a GPU (its own CUDA context, cuBLAS
workspaces and pool). Two things make a plan match what the servers then allocate:

- **Pinned settings.** llama.cpp splits layers in proportion to each device's free memory *at
  load time* and lowers an unset context to what fits then; in a router the second model
  would see what the first left. The plan fixes each model's context (``-c``), layers
  (``-ngl``), layer split (``-ts`` as layer counts, the form llama.cpp's own fitter writes)
  and turns llama-server's fit off (``-fit off``): the router's loads then allocate what the
  plan says, in any order.
- **Contexts shared out.** A model given ``-c`` keeps it. One without gets llama-server's
  default (its training context); when the set does not fit so, those contexts are lowered
  together, the same share of each default, no lower than ``-fitc`` (4096) as llama.cpp's
  fitter would for one model, until the set fits.

An RPC server (``rpc-server``) serves one client at a time (ggml-rpc.cpp: its accept loop
serves a connection to its end), and a llama-server given ``--rpc`` connects to every server
named, whatever ``-dev`` picks: two models naming the same RPC server cannot be resident
together (the second one's load waits until the first unloads). The plan says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

from lltui.core.cmdline.args import LlamaArgs, drop_flags, parse_llama_args
from lltui.core.cmdline.flag_values import NGL_AUTO
from lltui.core.gguf.model import GgufModel
from lltui.core.memory.common import CPU, KV_PAD, FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.parts import ExtraModels
from lltui.core.memory.results import FitOptions, FitResult

MAX_SUBSET_MODELS = 12  # every subset of up to this many models is tried (4096 sums)
CTX_STEPS = 12  # the shared context scale is searched to 1/4096
DEFAULT_FIT_CTX = 4096


@dataclass(frozen=True, slots=True)
class SetMember:
    """One model of the set, read: its name (the router's model id), header, settings,
    the devices its server would see, and the files it loads beside the model."""

    name: str
    model: GgufModel
    args: LlamaArgs
    devices: tuple[DeviceSpec, ...]
    extra: ExtraModels | None = None
    keep: bool = False
    ref: str = ""  # the model as given (a path, hf:OWNER/REPO:QUANT, a URL); "": its path


@dataclass(frozen=True, slots=True)
class PlannedModel:
    """A model of the plan at the settings the plan pins. ``usage``: bytes per device name
    (CPU: the host) it takes, a GPU's margin included; ``pinned``: the flags the plan adds
    to the model's own; ``max_ctx_shared``: its largest context with every other model of
    the set loaded (None: none fits, or it shares an RPC server with another)."""

    name: str
    path: str
    args: LlamaArgs  # the model's flags and the pinned ones
    pinned: tuple[str, ...]
    result: FitResult
    usage: tuple[tuple[str, int], ...]
    rpc: tuple[str, ...]  # the RPC servers its server connects to
    default_ctx: int  # llama-server's context without -c (the training context)
    ctx_given: bool
    max_ctx_alone: int | None
    max_ctx_shared: int | None
    keep: bool = False
    # RPC device names that change when servers it does not use are left out (old, new)
    rpc_renames: tuple[tuple[str, str], ...] = ()
    ref: str = ""  # the model as given

    def bytes_on(self, device: str) -> int:
        return dict(self.usage).get(device, 0)

    @property
    def n_ctx(self) -> int:
        return self.result.resolved.n_ctx

    @property
    def ctx_lowered(self) -> bool:
        return not self.ctx_given and self.n_ctx < self.default_ctx


@dataclass(frozen=True, slots=True)
class DeviceRoom:
    """One device (or the host, ``CPU``) shared by the set: the free memory before any model
    loads, what the models take, what is left."""

    name: str
    kind: str
    free_bytes: int | None
    used_bytes: int
    description: str = ""
    # the devices whose memory is this one's (an integrated GPU's is the host's), and that
    # memory's free bytes before any model loads: free is what they leave of it with every
    # model loaded, as a single model's estimate gives the host
    shares: tuple[str, ...] = ()
    pool_bytes: int | None = None

    @property
    def left_bytes(self) -> int | None:
        return None if self.free_bytes is None else self.free_bytes - self.used_bytes

    @property
    def fits(self) -> bool | None:
        left = self.left_bytes
        return None if left is None else left >= 0


@dataclass(frozen=True, slots=True)
class SetPlan:
    models: tuple[PlannedModel, ...]
    devices: tuple[DeviceRoom, ...]  # every device a model uses, the host last
    conflicts: tuple[tuple[str, str, str], ...]  # (model, model, RPC server) shared
    fit_together: tuple[tuple[str, ...], ...]  # the largest sets that fit (all: one set)
    subsets_tried: bool  # False: too many models to try every set

    @property
    def fits(self) -> bool:
        return not self.conflicts and all(d.fits is not False for d in self.devices)

    def model(self, name: str) -> PlannedModel:
        return next(m for m in self.models if m.name == name)

    def free_beside(self, room: DeviceRoom, names: Sequence[str]) -> int | None:
        """The room's free memory with only the models ``names`` loaded: of a memory it
        shares, what those models leave of it on the other devices."""
        if not room.shares or room.pool_bytes is None:
            return room.free_bytes
        usages = (dict(self.model(n).usage) for n in set(names))
        return room.pool_bytes - pool_bytes(usages, room.shares, host=False)

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)


# --- one model's usage ---------------------------------------------------------------------


def usage_of(result: FitResult) -> dict[str, int]:
    """Bytes per device (the host as CPU) a model's server takes: what llama.cpp allocates
    and, on a GPU, the margin its process keeps there."""
    out: dict[str, int] = {}
    for d in result.devices:
        if d.name == CPU:
            continue
        taken = d.total_bytes + (d.unaccounted_bytes if d.total_bytes else 0)
        if taken:
            out[d.name] = taken
    out[CPU] = result.host.total_bytes
    return out


def rpc_servers(
    args: LlamaArgs, result: FitResult, devices: Sequence[DeviceSpec]
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The RPC servers a model's server must connect to, and how its RPC devices are named
    then: the servers of the RPC devices it loads onto (``-dev`` picks them, or all), none
    when it puts nothing on any. A server left out renumbers the others' devices (``RPC1``
    becomes ``RPC0``): ``(old, new)`` for each device kept whose name changes."""
    from lltui.core.memory.context import select_devices

    rpc_devs = [d for d in devices if d.kind == "rpc"]
    holding = {d.name for d in result.devices if d.total_bytes}
    if not any(d.name in holding for d in rpc_devs):
        return (), ()
    chosen = {d.endpoint for d in select_devices(devices, args) if d.kind == "rpc"}
    chosen |= {d.endpoint for d in rpc_devs if d.name in holding}
    kept = tuple(ep for ep in dict.fromkeys(args.rpc) if ep in chosen)
    renames = []
    n = 0
    for d in rpc_devs:  # llama.cpp numbers RPC devices over the servers, in --rpc order
        if d.endpoint not in kept:
            continue
        if d.device_name != f"RPC{n}":
            renames.append((d.device_name, f"RPC{n}"))
        n += 1
    return kept, tuple(renames)


def layer_counts(result: FitResult, used: Sequence[DeviceSpec]) -> tuple[int, ...]:
    """Layers (the output layer counted) on each device used, in ``-ts`` order: as llama.cpp's
    fitter writes ``-ts``, the split it reproduces whatever memory is free at load time."""
    names = [d.name for d in used]
    counts = [0] * len(names)
    for dev in result.layer_devices:
        if dev in names:
            counts[names.index(dev)] += 1
    return tuple(counts)


def pinned_flags(member: SetMember, result: FitResult) -> tuple[str, ...]:
    """The flags that hold the estimate's context, layers and split whatever the router
    loads first: ``-c``, ``-ngl``, ``-ts`` and ``-fit off``, each unless given."""
    from lltui.core.memory.context import select_devices

    args, r = member.args, result.resolved
    out: list[str] = []
    if "n_ctx" not in args.given and args.kv_unified_per_slot == 0:
        out += ["-c", str(r.n_ctx)]
    if args.n_gpu_layers == NGL_AUTO:
        out += ["-ngl", "all" if r.n_gpu_layers > result.model.n_layer else str(r.n_gpu_layers)]
    used = select_devices(member.devices, args)
    if (
        "tensor_split" not in args.given
        and args.split_mode == "layer"
        and len(used) > 1
        and r.n_gpu_layers > 0
    ):
        out += ["-ts", ",".join(str(n) for n in layer_counts(result, used))]
    if "fit" not in args.given:
        out += ["-fit", "off"]
    return tuple(out)


# --- the set -------------------------------------------------------------------------------

Estimator = Callable[[SetMember, LlamaArgs, Sequence[DeviceSpec], FitOptions], FitResult]


def _estimate(
    member: SetMember, args: LlamaArgs, devices: Sequence[DeviceSpec], opts: FitOptions
) -> FitResult:
    from lltui.core.fit.estimate import estimate

    return estimate(member.model, args, devices, opts, member.extra)


def _ctx_given(args: LlamaArgs) -> bool:
    return "n_ctx" in args.given or args.kv_unified_per_slot > 0


def _with_ctx(args: LlamaArgs, n_ctx: int) -> LlamaArgs:
    return args.then(parse_llama_args(["-c", str(n_ctx)]))


def _scaled(default: int, floor: int, unit: int, scale: float) -> int:
    return max(floor, (int(default * scale) // unit) * unit)


def plan_set(
    members: Sequence[SetMember],
    options: FitOptions,
    *,
    estimator: Estimator = _estimate,
) -> SetPlan:
    """The plan for ``members`` resident together (see the module docstring). FitError for
    settings llama.cpp refuses, naming the model."""
    if len({m.name for m in members}) != len(members):
        raise FitError("two models of the set have the same name: give one --alias NAME")
    quick = replace(options, search=False, suggest=False)

    def est(m: SetMember, args: LlamaArgs, devs: Sequence[DeviceSpec], o: FitOptions) -> FitResult:
        try:
            return estimator(m, args, devs, o)
        except FitError as exc:
            raise FitError(f"{m.name}: {exc}") from None

    base = [est(m, m.args, m.devices, quick) for m in members]
    pool = _host_pool(members, options)
    defaults = [r.resolved.n_ctx for r in base]
    contexts = _share_contexts(members, base, defaults, options, pool, est)
    planned = [
        _pin(m, ctx, default, options, est)
        for m, ctx, default in zip(members, contexts, defaults, strict=True)
    ]
    planned = [
        _with_shared_ctx(p, m, planned, options, pool, est)
        for p, m in zip(planned, members, strict=True)
    ]
    devices = _rooms(members, planned, pool)
    conflicts = _conflicts(planned)
    fit_together, tried = _fit_together(planned, devices, conflicts)
    return SetPlan(tuple(planned), devices, conflicts, fit_together, tried)


def _share_contexts(
    members: Sequence[SetMember],
    base: Sequence[FitResult],
    defaults: Sequence[int],
    options: FitOptions,
    pool: HostPool,
    est: Estimator,
) -> list[int | None]:
    """Each model's context: None where ``-c`` was given, else its default or, when the set
    does not fit at the defaults, lowered where it helps: the models without ``-c`` on a
    device that is short, each group of them that share such a device by the same share of
    their defaults, as far as it takes for that device to fit (lowering a model elsewhere
    would free nothing there). A set two of whose models share an RPC server cannot be
    resident together however small their contexts: theirs stay at the defaults."""
    free = _free_by_device(members, pool)
    given = [None if _ctx_given(m.args) else defaults[i] for i, m in enumerate(members)]
    uses = [_pooled(usage_of(r), pool) for r in base]
    short = _short_devices(uses, free)
    servers = [
        set(rpc_servers(m.args, r, m.devices)[0]) for m, r in zip(members, base, strict=True)
    ]
    if not short or any(a & b for a, b in combinations(servers, 2)):
        return given
    open_ = [i for i, g in enumerate(given) if g is not None and any(uses[i].get(d) for d in short)]
    out = list(given)
    for group in _groups(open_, uses, short):
        lowered = _lowered(group, members, base, defaults, uses, free, options, pool, est)
        for i, ctx in lowered.items():
            out[i] = ctx
    return out


def _groups(
    open_: Sequence[int], uses: Sequence[Mapping[str, int]], short: set[str]
) -> list[list[int]]:
    """The models without -c, grouped by the short devices they share."""
    groups: list[tuple[set[str], list[int]]] = []
    for i in open_:
        devs = {d for d in short if uses[i].get(d)}
        joined = [g for g in groups if g[0] & devs]
        merged = (devs.union(*(g[0] for g in joined)), [*(j for g in joined for j in g[1]), i])
        groups = [g for g in groups if g not in joined] + [merged]
    return [sorted(members) for _, members in groups]


def _lowered(
    group: Sequence[int],
    members: Sequence[SetMember],
    base: Sequence[FitResult],
    defaults: Sequence[int],
    uses: Sequence[Mapping[str, int]],
    free: Mapping[str, int | None],
    options: FitOptions,
    pool: HostPool,
    est: Estimator,
) -> dict[int, int]:
    """The contexts of one group: the largest common share of their defaults (down to
    -fitc, as llama.cpp's fitter goes) at which the devices they use fit."""
    quick = replace(options, search=False, suggest=False)
    units = {i: KV_PAD * base[i].resolved.n_stream for i in group}
    floors = {
        i: min(defaults[i], max(units[i], members[i].args.fit_ctx or DEFAULT_FIT_CTX))
        for i in group
    }

    # the devices this group uses: another group's short devices are that group's to fit
    mine = {d: f for d, f in free.items() if any(uses[i].get(d) for i in group)}

    def fits_at(scale: float) -> bool:
        now = list(uses)
        for i in group:
            ctx = _scaled(defaults[i], floors[i], units[i], scale)
            args = _with_ctx(members[i].args, ctx)
            now[i] = _pooled(usage_of(est(members[i], args, members[i].devices, quick)), pool)
        return _set_fits([{d: b for d, b in u.items() if d in mine} for u in now], mine)

    lo, hi = 0.0, 1.0  # the set does not fit at hi; at lo (the floors) it may not either
    if fits_at(lo):
        for _ in range(CTX_STEPS):
            mid = (lo + hi) / 2
            if fits_at(mid):
                lo = mid
            else:
                hi = mid
    return {i: _scaled(defaults[i], floors[i], units[i], lo) for i in group}


def _pin(
    m: SetMember, ctx: int | None, default: int, options: FitOptions, est: Estimator
) -> PlannedModel:
    args = m.args if ctx is None else _with_ctx(m.args, ctx)
    quick = replace(options, search=False, suggest=False)
    first = est(m, args, m.devices, quick)
    pinned = pinned_flags(replace(m, args=args), first)
    if ctx is not None:
        pinned = ("-c", str(ctx), *drop_flags(pinned, ("-c",)))
    final_args = m.args.then(parse_llama_args(list(pinned)))
    alone = est(m, final_args, m.devices, replace(options, search=True, suggest=False))
    rpc, renames = rpc_servers(final_args, alone, m.devices)
    return PlannedModel(
        name=m.name,
        path=m.model.path,
        args=final_args,
        pinned=pinned,
        result=replace(alone, max_ctx=None),
        usage=tuple(usage_of(alone).items()),
        rpc=rpc,
        rpc_renames=renames,
        ref=m.ref or m.model.path,
        default_ctx=default,
        ctx_given=_ctx_given(m.args),
        max_ctx_alone=alone.max_ctx,
        max_ctx_shared=None,
        keep=m.keep,
    )


def _with_shared_ctx(
    p: PlannedModel,
    m: SetMember,
    planned: Sequence[PlannedModel],
    options: FitOptions,
    pool: HostPool,
    est: Estimator,
) -> PlannedModel:
    """The model's largest context with every other model loaded: searched in what they
    leave of each device and of the host (of the one memory an integrated GPU and the host
    share, what they take on either)."""
    others = [o for o in planned if o.name != p.name]
    if any(set(o.rpc) & set(p.rpc) for o in others):
        return p
    shares, host_free = pool

    def taken(name: str) -> int:
        if shares and name in (*shares, CPU):
            return pool_bytes((dict(o.usage) for o in others), shares)
        return sum(o.bytes_on(name) for o in others)

    devices = tuple(
        d if d.free_bytes is None else replace(d, free_bytes=max(0, d.free_bytes - taken(d.name)))
        for d in m.devices
    )
    if host_free is not None:
        host_free = max(0, host_free - taken(CPU))
    opts = replace(options, search=True, suggest=False, host_free_bytes=host_free)
    shared = est(m, p.args, devices, opts)
    return replace(p, max_ctx_shared=shared.max_ctx)


# the integrated GPUs the models load onto, whose memory is the host's, and that one
# memory's free bytes; ((), host's free) where no model loads onto one
HostPool = tuple[tuple[str, ...], int | None]


def _host_pool(members: Sequence[SetMember], options: FitOptions) -> HostPool:
    """One memory for an integrated GPU in use and the host, as a single model's estimate
    takes it: what the GPU offers (the host's available, or the whole of the machine
    described)."""
    from lltui.core.memory.context import select_devices

    shared: dict[str, int | None] = {}
    for m in members:
        for d in select_devices(m.devices, m.args):
            if d.integrated and d.free_bytes is not None:
                shared.setdefault(d.name, d.free_bytes)
    if not shared:
        return (), options.host_free_bytes
    return tuple(shared), next(iter(shared.values()))


def pool_bytes(
    usages: Iterable[Mapping[str, int]], shares: Sequence[str], *, host: bool = True
) -> int:
    """What the usages (bytes by device) take of the one memory the host shares with its
    integrated GPUs (``shares``): on those GPUs and, with ``host``, on the host."""
    return sum(u.get(n, 0) for u in usages for n in ((CPU, *shares) if host else shares))


def _pooled(use: Mapping[str, int], pool: HostPool) -> dict[str, int]:
    """A model's usage with what it takes on an integrated GPU counted on the host too
    (one memory)."""
    return {**use, CPU: pool_bytes([use], pool[0])}


def _free_by_device(members: Sequence[SetMember], pool: HostPool) -> dict[str, int | None]:
    free: dict[str, int | None] = {}
    for m in members:
        for d in m.devices:
            free.setdefault(d.name, d.free_bytes)
    free[CPU] = pool[1]
    return free


def _short_devices(uses: Sequence[Mapping[str, int]], free: Mapping[str, int | None]) -> set[str]:
    totals: dict[str, int] = {}
    for u in uses:
        for name, b in u.items():
            totals[name] = totals.get(name, 0) + b
    return {n for n, b in totals.items() if free.get(n) is not None and b > (free.get(n) or 0)}


def _set_fits(uses: Sequence[Mapping[str, int]], free: Mapping[str, int | None]) -> bool:
    totals: dict[str, int] = {}
    for u in uses:
        for name, b in u.items():
            totals[name] = totals.get(name, 0) + b
    return all(free.get(n) is None or b <= (free.get(n) or 0) for n, b in totals.items())


def _rooms(
    members: Sequence[SetMember], planned: Sequence[PlannedModel], pool: HostPool
) -> tuple[DeviceRoom, ...]:
    specs: dict[str, DeviceSpec] = {}
    for m in members:
        for d in m.devices:
            specs.setdefault(d.name, d)
    rooms = []
    for name, d in specs.items():
        used = sum(p.bytes_on(name) for p in planned)
        if used or any(name in dict(p.usage) for p in planned):
            rooms.append(DeviceRoom(name, d.kind, d.free_bytes, used, d.description))
    host_used = sum(p.bytes_on(CPU) for p in planned)
    shares, pool_free = pool
    host_free = pool_free
    if shares and pool_free is not None:  # the host has what the integrated GPUs leave
        host_free = max(
            0, pool_free - pool_bytes((dict(p.usage) for p in planned), shares, host=False)
        )
    rooms.append(DeviceRoom(CPU, "cpu", host_free, host_used, "host", shares, pool_free))
    return tuple(rooms)


def _conflicts(planned: Sequence[PlannedModel]) -> tuple[tuple[str, str, str], ...]:
    out = []
    for a, b in combinations(planned, 2):
        for ep in a.rpc:
            if ep in b.rpc:
                out.append((a.name, b.name, ep))
    return tuple(out)


def fits_with(plan: SetPlan, names: Sequence[str]) -> bool:
    """Whether the models ``names`` of the plan fit together (no RPC server shared, every
    device's free memory enough)."""
    chosen = set(names)
    for a, b, _ep in plan.conflicts:
        if a in chosen and b in chosen:
            return False
    for d in plan.devices:
        free = plan.free_beside(d, names)
        if free is not None and sum(plan.model(n).bytes_on(d.name) for n in chosen) > free:
            return False
    return True


def _fit_together(
    planned: Sequence[PlannedModel],
    devices: Sequence[DeviceRoom],
    conflicts: Sequence[tuple[str, str, str]],
) -> tuple[tuple[tuple[str, ...], ...], bool]:
    """The largest sets of models that fit together: every set that fits and is in no
    larger one that does, the biggest first (up to MAX_SUBSET_MODELS models)."""
    names = [p.name for p in planned]
    if len(names) > MAX_SUBSET_MODELS:
        return (), False
    plan = SetPlan(tuple(planned), tuple(devices), tuple(conflicts), (), True)
    found: list[tuple[str, ...]] = []
    for size in range(len(names), 0, -1):
        for combo in combinations(names, size):
            if any(set(combo) <= set(f) for f in found):
                continue
            if fits_with(plan, combo):
                found.append(combo)
    return tuple(found), True

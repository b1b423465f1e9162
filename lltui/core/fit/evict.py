"""Which models a router must unload before it loads another, decided by memory: the one
policy for the on-demand proxy's evictions and for the loads lltui is asked for (the launch
view's ``l``, ``lltui launch --load``), so the two never disagree.

What llama-server does itself (tools/server/server-models.cpp): with ``--models-max N``
(default 4; 0: no limit) a load that would make N+1 models running unloads one first, the
least recently used of the models that are loaded or sleeping, idle (no request in flight)
and not wanted by a queued request; a model still loading is never unloaded for another, and
when every model is busy the request waits. A model's last use is when its load started and
each POST request the router forwards to it (a GET is no use). It counts models, never memory,
and knows no priority or pin. lltui starts the router with ``--models-max 0`` and
``--no-models-autoload``, so llama-server unloads nothing by itself: every load and unload is
lltui's, by this policy.

What lltui adds: the memory. A request names a model; the plan (:mod:`lltui.core.fit.plan`)
says what it takes on each device and on the host. :func:`decide` answers one of:

- ``loaded``: it is already resident (loading, loaded or sleeping): nothing to do;
- ``load``: it fits beside the resident models: load it now;
- ``evict``: it fits once ``evict`` are unloaded: unload them, then load it;
- ``cannot``: it cannot load, ``code`` and ``reason`` say why: ``model_not_found``,
  ``does_not_fit`` (not even alone), ``pinned`` (only by unloading a pinned model),
  ``host_memory`` (the host's RAM would run out: the host would swap); ``final`` where no
  unload can change it (not found, or not even alone).

:func:`refusal` says the same decision as the one line a load lltui is asked for gets (None:
it loads): what is short, and the models to unload first.

The order: a pinned model is never unloaded; the candidates are ordered lowest priority
first, then least recently used (llama-server's order where priorities are equal); lltui
unloads along that order until the model fits, then keeps back each candidate (the most
valuable first) whose unloading turns out not to be needed, so no model goes that need not.
A model that shares an RPC server with the one asked for must go whatever its memory (an RPC
server serves one llama-server at a time). As llama-server, the order passes over a model that
is busy (requests in flight, or waiting at the proxy for it) or still loading: only when the
idle models cannot make room are busy ones named, and the proxy waits for them (a loading one
to load, then every model's requests in flight to be answered) before it unloads them
(:mod:`lltui.services.launch.ondemand`).

Pods: a model that runs on GPUs unloads only models that share one of its GPUs; a model
elsewhere keeps serving whatever its age.

Host memory counts what each model's server holds in RAM: the buffers the plan puts on the
host (weights not on a GPU, CPU experts, the host's KV and compute buffers), its prompt cache
(``--cache-ram``, 8192 MiB per server by default in llama.cpp, used as requests come) and the
process's own memory. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.fit.plan import SetPlan, pool_bytes
from lltui.core.gguf.ref_kind import is_remote_ref
from lltui.core.llama.router_api import RESIDENT_STATES
from lltui.core.memory.common import CPU
from lltui.core.text import counted
from lltui.core.units import MIB

# llama-server's prompt cache limit without --cache-ram (common.h: cache_ram_mib = 8192)
DEFAULT_CACHE_RAM_MIB = 8192
# a model server's own RAM besides its buffers (code, libraries, tokenizer, HTTP threads):
# the CPU build's server for a 2 MiB model holds 19 MiB resident, its buffers 11 of them; a
# GPU backend's runtime keeps more on the host: a round estimate between the two
SERVER_OVERHEAD_MIB = 96
CACHE_RAM_FLAGS = ("-cram", "--cache-ram")


@dataclass(frozen=True, slots=True)
class ModelNeed:
    """What one model's server takes: bytes per GPU-like device, bytes of host RAM (of which
    ``cache_bytes`` its prompt cache may fill), the RPC servers it holds; whether it is
    pinned and its priority (higher stays longer); the file its server loads ('' where the
    router downloads it)."""

    name: str
    devices: Mapping[str, int]
    host_bytes: int
    rpc: tuple[str, ...] = ()
    pinned: bool = False
    priority: int = 0
    path: str = ""
    cache_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Resident:
    """A model whose server runs now, when it last served (a monotonic time), the requests
    it is answering, those waiting at the proxy for it (their turn to be decided) and
    whether it is still loading."""

    name: str
    last_used: float = 0.0
    in_flight: int = 0
    loading: bool = False
    queued: int = 0

    @property
    def busy(self) -> bool:
        return self.in_flight > 0 or self.queued > 0 or self.loading


def residents(
    states: Mapping[str, str],
    last_used: Mapping[str, float],
    in_flight: Mapping[str, int],
    queued: Mapping[str, int] | None = None,
) -> list[Resident]:
    """The models a router lists resident (``states``: each model's state as it lists it),
    each with its last use, its requests in flight and waiting, and whether it is still
    loading."""
    waiting = queued or {}
    return [
        Resident(n, last_used.get(n, 0.0), in_flight.get(n, 0), s == "loading", waiting.get(n, 0))
        for n, s in states.items()
        if s in RESIDENT_STATES
    ]


@dataclass(frozen=True, slots=True)
class Room:
    """The memory the models share: each device's free bytes before any model loads (None:
    unknown, never binding) and the host's available RAM then."""

    devices: Mapping[str, int | None]
    host_bytes: int | None


@dataclass(frozen=True, slots=True)
class Decision:
    model: str
    action: str  # loaded | load | evict | cannot
    evict: tuple[str, ...] = ()
    code: str | None = None  # why not, for ``cannot``
    reason: str = ""
    # ``cannot`` whatever is unloaded (not found, or too big even alone): asking again never
    # helps, where a model in the way may go later
    final: bool = False

    @property
    def can_load(self) -> bool:
        return self.action != "cannot"

    def to_json(self) -> dict[str, object]:
        return {
            "action": self.action,
            "evict": list(self.evict),
            "code": self.code,
            "reason": self.reason,
        }


@dataclass(frozen=True, slots=True)
class Policy:
    """The models lltui may load and the memory they share."""

    needs: Mapping[str, ModelNeed]
    room: Room
    notes: tuple[str, ...] = field(default=())


def cache_ram_bytes(args: LlamaArgs) -> int:
    """The prompt cache a model's server may fill: ``--cache-ram`` (MiB; -1 no limit, counted
    as the default), else llama.cpp's default."""
    mib = DEFAULT_CACHE_RAM_MIB
    for g in args.given_args:
        if g.flag in CACHE_RAM_FLAGS and g.values:
            try:
                mib = int(g.values[0])
            except ValueError:
                continue
    if mib < 0:
        mib = DEFAULT_CACHE_RAM_MIB
    return mib * MIB


def policy_from_plan(
    plan: SetPlan,
    pinned: Sequence[str] = (),
    priority: Mapping[str, int] | None = None,
    *,
    overhead_bytes: int = SERVER_OVERHEAD_MIB * MIB,
) -> Policy:
    """Each planned model's needs (its usage by device; the host: its buffers there, its
    prompt cache and its process) and the room the plan shares out."""
    prio = priority or {}
    host_room = next((d for d in plan.devices if d.name == CPU), None)
    shares = host_room.shares if host_room is not None else ()
    needs = {}
    for m in plan.models:
        # what it takes on an integrated GPU is the host's memory too
        cache = cache_ram_bytes(m.args)
        host = pool_bytes([dict(m.usage)], shares) + cache + overhead_bytes
        needs[m.name] = ModelNeed(
            name=m.name,
            devices={d: b for d, b in m.usage if b and d != CPU},
            host_bytes=host,
            rpc=m.rpc,
            pinned=m.name in pinned or m.keep,
            priority=prio.get(m.name, 0),
            path="" if is_remote_ref(m.ref or m.path) else m.path,
            cache_bytes=cache,
        )
    devices = {d.name: d.free_bytes for d in plan.devices if d.name != CPU}
    host_free = None if host_room is None else host_room.free_bytes
    if shares and host_room is not None:  # the whole of the one memory, before any loads
        host_free = host_room.pool_bytes
    return Policy(needs, Room(devices, host_free))


def _mib(n: int) -> str:
    v = n / MIB
    return f"{v:.0f} MiB" if abs(v) >= 100 else f"{v:.2f} MiB"


def _label(device: str) -> str:
    return "the host" if device == CPU else device


def _needs(need: ModelNeed, device: str, want: int) -> str:
    """What ``need`` takes on ``device``; on the host, how much of it is the prompt cache
    (llama-server's 8192 MiB by default: the most of a small model's need)."""
    if device != CPU or not need.cache_bytes:
        return _mib(want)
    return (
        f"{_mib(want)}, {_mib(need.cache_bytes)} of it the prompt cache llama-server may "
        "fill (--cache-ram MIB sets it)"
    )


def _short(policy: Policy, name: str, staying: Sequence[str]) -> list[tuple[str, int, int]]:
    """(device, bytes left beside ``staying``, bytes ``name`` needs) where it does not fit;
    the host as CPU."""
    need = policy.needs[name]
    others = [policy.needs[n] for n in staying if n in policy.needs and n != name]
    out = []
    for dev, want in need.devices.items():
        free = policy.room.devices.get(dev)
        if free is None:
            continue
        left = free - sum(o.devices.get(dev, 0) for o in others)
        if want > left:
            out.append((dev, left, want))
    host = policy.room.host_bytes
    if host is not None:
        left = host - sum(o.host_bytes for o in others)
        if need.host_bytes > left:
            out.append((CPU, left, need.host_bytes))
    return out


def _shares_rpc(a: ModelNeed, b: ModelNeed) -> bool:
    return bool(set(a.rpc) & set(b.rpc))


def _in_pod(need: ModelNeed, other: ModelNeed) -> bool:
    """Whether unloading ``other`` is ``need``'s to do: it shares a GPU (a model on the host
    only may unload any)."""
    if not need.devices:
        return True
    return bool(set(need.devices) & set(other.devices))


def decide(policy: Policy, name: str, resident: Sequence[Resident]) -> Decision:
    """What to do for a request for ``name`` with ``resident`` running (see the module)."""
    need = policy.needs.get(name)
    if need is None:
        why = f"model '{name}' not found"
        return Decision(name, "cannot", code="model_not_found", reason=why, final=True)
    if any(r.name == name for r in resident):
        return Decision(name, "loaded")
    alone = _short(policy, name, ())
    if alone:
        code = "host_memory" if all(d == CPU for d, _, _ in alone) else "does_not_fit"
        why = "; ".join(
            f"{_label(d)} has {_mib(left)}, it needs {_needs(need, d, w)}" for d, left, w in alone
        )
        why = f"{name} does not fit even alone: {why}"
        return Decision(name, "cannot", code=code, reason=why, final=True)
    others = [r for r in resident if r.name in policy.needs and r.name != name]
    must = [r.name for r in others if _shares_rpc(need, policy.needs[r.name])]
    pinned_must = [n for n in must if policy.needs[n].pinned]
    if pinned_must:
        return Decision(
            name,
            "cannot",
            code="pinned",
            reason=f"{name} shares an RPC server with {', '.join(pinned_must)}, which is pinned",
        )
    order = sorted(
        (r for r in others if r.name not in must),
        key=lambda r: (policy.needs[r.name].priority, r.last_used),
    )
    running = [r.name for r in others]
    idle = [r for r in order if not r.busy]
    evict = _choose(policy, name, running, must, idle)
    if evict is None and len(idle) < len(order):  # only busy models make room: wait for them
        evict = _choose(policy, name, running, must, order)
    if evict is not None:
        if not evict:
            return Decision(name, "load")
        return Decision(
            name, "evict", tuple(evict), reason=f"unload {', '.join(evict)} to load {name}"
        )
    return _why_not(policy, name, running, must, order)


def _choose(
    policy: Policy, name: str, running: list[str], must: list[str], order: list[Resident]
) -> list[str] | None:
    """The models to unload: ``must``, then along ``order`` (not pinned, in the pod) until
    ``name`` fits, then each not needed kept back, the most valuable first. None: no way."""
    need = policy.needs[name]
    chosen = list(must)
    for r in order:
        if fits_without(policy, name, running, chosen):
            break
        other = policy.needs[r.name]
        if not other.pinned and _in_pod(need, other):
            chosen.append(r.name)
    if not fits_without(policy, name, running, chosen):
        return None
    for n in reversed(chosen):
        if n in must:
            continue
        trial = [c for c in chosen if c != n]
        if fits_without(policy, name, running, trial):
            chosen = trial
    ranked = {r.name: i for i, r in enumerate(order)}
    return sorted(chosen, key=lambda n: (n not in must, ranked.get(n, -1)))


def _why_not(
    policy: Policy, name: str, running: list[str], must: list[str], order: list[Resident]
) -> Decision:
    """Why no set of unloads lets ``name`` load: pinned models in the way, or the host."""
    need = policy.needs[name]
    movable = [r.name for r in order if _in_pod(need, policy.needs[r.name])]
    going = [*must, *movable]
    pinned = [r.name for r in order if policy.needs[r.name].pinned]
    # what is short with every model unloaded that may be (the pinned ones stay)
    short = _short(policy, name, [n for n in running if n not in going or n in pinned])
    why = "; ".join(
        f"{_label(d)} has {_mib(max(left, 0))} left, it needs {_needs(need, d, w)}"
        for d, left, w in short
    )
    if pinned and fits_without(policy, name, running, [*going, *pinned]):
        return Decision(
            name,
            "cannot",
            code="pinned",
            reason=f"{name} fits only if pinned models unload ({', '.join(pinned)}): {why}",
        )
    code = "host_memory" if short and all(d == CPU for d, _, _ in short) else "does_not_fit"
    return Decision(
        name,
        "cannot",
        code=code,
        reason=f"{name} does not fit beside the models it may not unload: {why}",
    )


def fits_without(policy: Policy, name: str, running: Sequence[str], going: Sequence[str]) -> bool:
    return not _short(policy, name, [n for n in running if n not in going])


def decide_all(policy: Policy, resident: Sequence[Resident]) -> dict[str, Decision]:
    """The decision for each model of the policy with ``resident`` running."""
    return {n: decide(policy, n, resident) for n in policy.needs}


def refusal(policy: Policy, name: str, resident: Sequence[Resident]) -> str | None:
    """:func:`decide`'s answer as the one line a load lltui is asked for gets: None when
    ``name`` loads (or is in already); else why it does not fit with ``resident`` and the
    models to unload first, or why none may go."""
    if name not in policy.needs:
        return f"{name} is not in the plan (lltui loads only the models it sized)"
    decision = decide(policy, name, resident)
    if decision.action in ("loaded", "load"):
        return None
    need = policy.needs[name]
    alone = _short(policy, name, ())
    if alone:
        why = ", ".join(
            f"{_label(d)} has {_mib(left)} free, it needs {_needs(need, d, w)}"
            for d, left, w in alone
        )
        return f"{name} does not fit on this rig even alone: {why}"
    loaded = [r.name for r in resident if r.name in policy.needs and r.name != name]
    reasons = [
        f"{other} holds the RPC server {ep}, which serves one llama-server at a time"
        for other in loaded
        for ep in need.rpc
        if ep in policy.needs[other].rpc
    ]
    reasons += [
        f"{_label(d)} has {_mib(max(left, 0))} left, {name} needs {_needs(need, d, w)}"
        for d, left, w in _short(policy, name, loaded)
    ]
    head = f"{name} does not fit with {', '.join(loaded)} loaded: {'; '.join(reasons)}"
    if decision.action == "evict":
        busy = [_busy(r, len(decision.evict)) for r in resident if r.name in decision.evict]
        doing = f" ({'; '.join(b for b in busy if b)})" if any(busy) else ""
        return f"{head}; unload {' and '.join(decision.evict)} first{doing}"
    if decision.code == "pinned":
        kept = [n for n in loaded if policy.needs[n].pinned]
        return f"{head}; the models in the way are kept ({', '.join(kept)}): unkeep one first"
    return decision.reason  # (what it is short of beside the models it may not unload)


def _busy(r: Resident, of: int) -> str:
    """What a model to unload is doing ('' when idle): "it is serving 2 requests"."""
    who = "it" if of == 1 else r.name
    if r.loading:
        return f"{who} is still loading"
    if r.in_flight:
        return f"{who} is serving {counted(r.in_flight, 'request')}"
    if r.queued:
        return f"{who} has {counted(r.queued, 'request')} waiting"
    return ""

"""What fits when the settings do not: the largest context, fewer GPU layers, a split sized
to each device's free memory."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from lltui.core.cmdline.args import LlamaArgs, spell
from lltui.core.cmdline.flag_values import writable_split
from lltui.core.memory.allocate import estimate_once, host_margin
from lltui.core.memory.common import CPU, KV_PAD, FitError, is_gpu
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.problem import FitProblem
from lltui.core.memory.results import FitOptions, FitResult, SpeedEstimate, Suggestion


def _with(st: LlamaArgs, **changes: Any) -> LlamaArgs:
    return replace(st, **changes)


def largest_context(p: FitProblem, base: FitResult) -> int | None:
    """The largest n_ctx (a multiple of 256 x streams, up to the trained context per slot,
    or the -c given past it with RoPE scaling) at which every device fits; None when not
    even the smallest does."""
    hp, st, devs, opts = p.hp, p.args, p.used, p.options
    r = base.resolved
    unit = KV_PAD * r.n_stream
    # past the trained context a slot is capped (llama-server), unless RoPE scaling was asked
    trained = r.slots_ctx(hp.n_ctx_train)
    cap = (max(trained, r.n_ctx) if st.rope_scaling else trained) // unit
    if cap < 1:
        return None
    if base.fits and st.n_ctx == cap * unit and st.kv_unified_per_slot == 0:
        return cap * unit  # the estimate at hand is the largest context already
    wbufs = _weights_sizes(base)
    if _weights_overflow(wbufs, devs, opts):
        return None  # KV, output and compute only add to the weights: no context fits
    placed = (base.placements, wbufs, _layer_indices(base, devs))

    def fits(k: int) -> bool:
        s = _with(st, n_ctx=k * unit, kv_unified_per_slot=0)
        return estimate_once(replace(p, args=s), placed).fits

    if fits(cap):
        return cap * unit
    if not fits(1):
        return None
    lo, hi = 1, cap  # fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo * unit


def _weights_sizes(res: FitResult) -> dict[str, int]:
    return {n: b for n, k, b in res.buffers if k == "model"}


def _weights_overflow(wbufs: dict[str, int], devs: Sequence[DeviceSpec], opts: FitOptions) -> bool:
    """Whether the weights alone (placed once, the same at every context) overfill a
    device with its margin, or the host; owners as estimate_once sums them."""
    names = {d.name for d in devs}
    host = sum(b for n, b in wbufs.items() if n not in names) + host_margin(devs, opts)
    if opts.host_free_bytes is not None and host > opts.host_free_bytes:
        return True
    for d in devs:
        margin = opts.margin_bytes if is_gpu(d) else 0
        if d.free_bytes is not None and wbufs.get(d.name, 0) + margin > d.free_bytes:
            return True
    return False


def _layer_indices(res: FitResult, devs: Sequence[DeviceSpec]) -> tuple[int, ...]:
    index = {d.name: i for i, d in enumerate(devs)}
    return tuple(index.get(n, -1) for n in res.layer_devices)


def tensor_room_split(
    res: FitResult, p: FitProblem, speed: SpeedEstimate | None = None
) -> tuple[int, ...] | None:
    """-ts for a tensor split, which cuts every tensor in these shares: each GPU's share
    sized to what it has left after its fixed costs (every GPU then fills alike); given the
    result's ``speed``, sized to each GPU's rate instead (its part of a token then takes as
    long on each), as far as its room allows. A layer split's counts filled back to front
    gave a 4090 9 parts of 81 beside another's 48. None: one GPU, a free size unknown, a
    GPU with no room, or llama.cpp's own even cut."""
    by_name = {d.name: d for d in p.used}
    gpus = [e for e in res.devices if e.kind != "cpu" and e.name in by_name]
    if len(gpus) < 2 or any(by_name[e.name].free_bytes is None for e in gpus):
        return None
    cut = [e.weights_bytes + e.kv_bytes for e in gpus]  # what the shares divide
    total = sum(cut)
    room = [
        (by_name[e.name].free_bytes or 0) - (e.total_bytes + e.unaccounted_bytes - c)
        for e, c in zip(gpus, cut, strict=True)
    ]
    if total <= 0 or min(room) <= 0:
        return None  # (a GPU with no room for any share: a smaller set, which -dev tries)
    caps = [r / total for r in room]  # the largest share each can hold
    weights = caps
    if speed is not None and sum(caps) >= 1:
        ms = {d.name: d.decode_ms - d.decode_fixed_ms for d in speed.devices}
        rates = [c / total / ms[e.name] if ms.get(e.name, 0) > 0 else 0.0
                 for e, c in zip(gpus, cut, strict=True)]  # fmt: skip
        if min(rates) > 0:
            weights = rates
    shares = _filled(weights, caps)
    counts = [max(1, round(100 * x)) for x in shares]
    g = math.gcd(*counts)
    counts = [c // g for c in counts]
    return None if len(set(counts)) == 1 else tuple(counts)


def _filled(weights: Sequence[float], caps: Sequence[float]) -> list[float]:
    """Shares summing to 1 in proportion to ``weights``, none above its cap (what one over it
    cannot take goes to the others, in proportion); in proportion to the caps where they
    sum to less than 1."""
    if sum(caps) < 1:
        return [c / sum(caps) for c in caps]
    shares = [0.0] * len(weights)
    free = set(range(len(weights)))
    left = 1.0
    while free:
        w = sum(weights[i] for i in free)
        over = [i for i in free if left * weights[i] / w > caps[i]]
        if not over:
            for i in free:
                shares[i] = left * weights[i] / w
            break
        for i in over:
            shares[i] = caps[i]
            left -= caps[i]
            free.discard(i)
    return shares


def suggest(p: FitProblem, base: FitResult, max_ctx: int | None) -> tuple[Suggestion, ...]:
    """When the settings do not fit: a smaller context, fewer GPU layers, a better split."""
    hp, st, devs, opts = p.hp, p.args, p.used, p.options
    if base.fits:
        return ()
    out: list[Suggestion] = []
    r = base.resolved
    if max_ctx:
        out.append(
            Suggestion(
                spell("n_ctx", max_ctx),
                f"all layers stay where they are with a context of {max_ctx} (not {r.n_ctx})",
            )
        )
    if not devs:
        return tuple(out)

    def fits(s: LlamaArgs) -> bool:
        q = replace(p, args=s)
        try:  # the compute graph is planned only where the rest fits (buffers only add)
            return estimate_once(q, compute="none").fits and estimate_once(q).fits
        except FitError:
            return False

    n_all = hp.n_layer_all + 1
    split = st.tensor_split
    # (split, its flags: empty for the split as given)
    candidates: list[tuple[tuple[float, ...], tuple[str, ...]]] = [(split, ())]
    tensor = st.split_mode == "tensor"
    if len(devs) > 1:
        if tensor:
            shares = tensor_room_split(base, p)
            counts = list(shares) if shares else None
        else:
            counts = balanced_counts(base, hp, devs, opts)
        # a split -ts cannot say (16 GPUs, the last with layers) is not proposed
        written = writable_split(tuple(counts)) if counts is not None else None
        if written is not None and tuple(float(c) for c in counts or ()) != tuple(split):
            candidates.insert(0, (tuple(float(c) for c in written), spell("tensor_split", written)))
    for ts, ts_flags in candidates:
        s_full = _with(st, n_gpu_layers=n_all, tensor_split=ts)
        if ts_flags and fits(s_full):
            out.append(
                Suggestion(
                    ts_flags,
                    "each device's share of every tensor sized to its free memory; everything "
                    "offloaded"
                    if tensor
                    else "layers per device sized to each one's free memory; everything offloaded",
                )
            )
            break
        lo, hi = 0, n_all
        if not fits(_with(st, n_gpu_layers=0, tensor_split=ts)):
            continue
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(_with(st, n_gpu_layers=mid, tensor_split=ts)):
                lo = mid
            else:
                hi = mid
        out.append(
            Suggestion(
                spell("n_gpu_layers", lo) + ts_flags,
                f"{lo} of {n_all} layers (output layer counted) on the GPUs, "
                f"{n_all - lo} on the CPU: slower, but it fits",
            )
        )
        break
    return tuple(out)


def balanced_counts(
    base: FitResult, hp: Hparams, devs: Sequence[DeviceSpec], opts: FitOptions
) -> list[int] | None:
    """Layers per device (summing to n_layer_all + 1) filled back to front by what each
    device has left after its fixed costs, as llama-fit-params writes -ts."""
    if any(d.free_bytes is None for d in devs):
        return None
    per_layer: dict[int, int] = {}
    for p in base.placements:
        if p.layer is not None and p.device != CPU:
            per_layer[p.layer] = per_layer.get(p.layer, 0) + p.alloc_bytes
        elif p.layer is not None:
            per_layer[p.layer] = per_layer.get(p.layer, 0) + p.nbytes
    kv_per_layer: dict[int, int] = {}
    for cache in base.kv:
        if not cache.layers:
            continue
        share = (cache.k_bytes + cache.v_bytes) // len(cache.layers)
        for il in cache.layers:
            kv_per_layer[il] = kv_per_layer.get(il, 0) + share
    n_all = hp.n_layer_all + 1
    cost = [per_layer.get(il, 0) + kv_per_layer.get(il, 0) for il in range(n_all)]
    budgets = []
    for d, e in zip(devs, base.devices, strict=False):
        fixed = e.compute_bytes + (opts.margin_bytes if is_gpu(d) else 0)
        budgets.append((d.free_bytes or 0) - fixed)
    counts = [0] * len(devs)
    il = n_all - 1
    for di in range(len(devs) - 1, -1, -1):
        room = budgets[di]
        while il >= 0 and cost[il] <= room:
            room -= cost[il]
            counts[di] += 1
            il -= 1
    if sum(counts) == 0:
        return None
    return counts

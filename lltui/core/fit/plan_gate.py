"""The gate a router's loads go through: whether one more model fits with the ones loaded
(or loading), by the plan, and if not, one line that says why and which models to unload
(never a kept one). Standard library only."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

from lltui.core.fit.plan import DeviceRoom, SetPlan, fits_with
from lltui.core.memory.common import CPU


def _short(plan: SetPlan, names: Sequence[str]) -> list[tuple[DeviceRoom, int, int]]:
    """The devices where ``names`` together do not fit: (device, bytes left for the last
    model, bytes it needs), the last name being the one to load."""
    *others, new = names
    out = []
    for d in plan.devices:
        free = plan.free_beside(d, names)
        if free is None:
            continue
        need = plan.model(new).bytes_on(d.name)
        left = free - sum(plan.model(n).bytes_on(d.name) for n in others)
        if need and need > left:
            out.append((d, left, need))
    return out


def _mib(n: int) -> str:
    v = n / (1024 * 1024)
    return f"{v:.0f} MiB" if abs(v) >= 100 else f"{v:.2f} MiB"


def _unload_choice(
    plan: SetPlan, name: str, resident: Sequence[str], kept: Sequence[str]
) -> tuple[str, ...] | None:
    """The fewest loaded models (not kept) whose unloading lets ``name`` load; of those, the
    ones holding the least memory. None when no such set exists."""
    free_to_go = [n for n in resident if n not in kept]
    for size in range(1, len(free_to_go) + 1):
        fitting = [
            combo
            for combo in combinations(free_to_go, size)
            if fits_with(plan, [*(n for n in resident if n not in combo), name])
        ]
        if fitting:
            return min(
                fitting, key=lambda c: sum(sum(b for _, b in plan.model(n).usage) for n in c)
            )
    return None


def load_refusal(
    plan: SetPlan, name: str, resident: Sequence[str], kept: Sequence[str] = ()
) -> str | None:
    """Why ``name`` must not load with the models ``resident`` already loaded (or loading),
    in one line that says what to unload; None when it fits."""
    names = {m.name for m in plan.models}
    if name not in names:
        return f"{name} is not in the plan (lltui loads only the models it sized)"
    loaded = [n for n in resident if n in names and n != name]
    if fits_with(plan, [*loaded, name]):
        return None
    if not fits_with(plan, [name]):
        why = ", ".join(
            f"{_device_name(d.name)} has {_mib(left)} free, it needs {_mib(need)}"
            for d, left, need in _short(plan, [name])
        )
        return f"{name} does not fit on this rig even alone: {why}"
    reasons = []
    for a, b, ep in plan.conflicts:
        if name in (a, b) and (b if a == name else a) in loaded:
            other = b if a == name else a
            reasons.append(
                f"{other} holds the RPC server {ep}, which serves one llama-server at a time"
            )
    reasons += [
        f"{_device_name(d.name)} has {_mib(max(left, 0))} left, {name} needs {_mib(need)}"
        for d, left, need in _short(plan, [*loaded, name])
    ]
    head = f"{name} does not fit with {', '.join(loaded)} loaded: {'; '.join(reasons)}"
    choice = _unload_choice(plan, name, loaded, kept)
    if choice is not None:
        return f"{head}; unload {' and '.join(choice)} first"
    blocking = [n for n in loaded if n in kept]
    return f"{head}; the models in the way are kept ({', '.join(blocking)}): unkeep one first"


def _device_name(name: str) -> str:
    return "the host" if name == CPU else name

"""Alert settings: every kind of alert (:data:`KINDS`), the numbers they are raised at
(:class:`AlertThresholds`) and the hooks run on them, as a config file's ``[alerts]`` table
gives them (:func:`alert_config_from_mapping`, which names the key it cannot use).

Apart from the tracker (``alerts``) so that reading a config, which every command does,
does not load what the tracker reads (samples, plans, logs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

# kind -> what it watches, in words (the help, the README and the exporter's label)
KINDS: dict[str, str] = {
    "gpu_temp": "GPU temperature at or over its threshold",
    "mem_temp": "memory (HBM) temperature at or over its threshold",
    "vram_full": "GPU memory nearly full",
    "power_cap": "power draw held at the enforced limit",
    "throttle": "clocks held down by a reason that costs speed (thermal, power brake)",
    "xid": "an XID error the driver reported",
    "ecc": "new ECC memory errors",
    "gpu_lost": "a GPU fell off the bus or stopped answering",
    "llama_down": "a llama-server that does not answer",
    "llama_not_ready": "a llama-server that answers but is not ready (loading, erroring)",
    "plan_growth": "a llama-server's memory on a GPU grown past its plan by a margin, for a while",
    "plan_placement": "a llama-server holding memory on a GPU its plan gave nothing",
    "host_down": "a fleet host that does not answer",
    "no_gpu": "no real GPU where one was expected: no driver or no GPU (a simulated rig stands "
    "in), or the GPU source failing",
}


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    """The numbers alerts are raised at; ``disabled`` kinds are never raised."""

    gpu_temp_warning: float = 83.0  # °C
    gpu_temp_critical: float = 90.0
    mem_temp_warning: float = 85.0  # °C; HBM throttles near 95
    mem_temp_critical: float = 95.0
    temp_clear_margin: float = 3.0  # °C under the threshold before a temperature clears
    vram_warning_pct: float = 95.0
    vram_critical_pct: float = 99.0
    power_cap_pct: float = 98.0  # of the enforced limit
    power_cap_for_s: float = 30.0
    throttle_for_s: float = 10.0
    event_hold_s: float = 600.0  # an XID or ECC alert stays this long after the last event
    llama_not_ready_for_s: float = 60.0
    plan_growth_mib: float = 512.0  # past the plan (and what it held over it at first)
    plan_growth_for_s: float = 60.0
    plan_placement_for_s: float = 10.0
    disabled: frozenset[str] = frozenset()


# -- thresholds from a config ----------------------------------------------------------------

_TEMPS = {"gpu_temp_warning", "gpu_temp_critical", "mem_temp_warning", "mem_temp_critical"}
_PCTS = {"vram_warning_pct", "vram_critical_pct", "power_cap_pct"}
_SECONDS = {
    "power_cap_for_s",
    "throttle_for_s",
    "event_hold_s",
    "llama_not_ready_for_s",
    "plan_growth_for_s",
    "plan_placement_for_s",
    "plan_growth_mib",
}


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def thresholds_from_mapping(data: Mapping[str, Any], where: str = "alerts") -> AlertThresholds:
    """Thresholds from a config's ``[alerts]`` table (hook keys are read elsewhere and
    skipped here). ValueError with one line naming the key."""
    known = {f.name for f in fields(AlertThresholds)}
    out = AlertThresholds()
    for key, value in data.items():
        name = f"{where}.{key}"
        if key in ("hook", "hooks", "hook_timeout_s"):
            continue
        if key not in known:
            choices = ", ".join(sorted(known | {"hook", "hooks", "hook_timeout_s"}))
            raise ValueError(f"{name}: unknown setting (known: {choices})")
        if key == "disabled":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f'{name} must be a list of alert kinds, e.g. ["power_cap"]')
            bad = [v for v in value if v not in KINDS]
            if bad:
                raise ValueError(f"{name}: {bad[0]!r} is no alert kind ({', '.join(KINDS)})")
            out = replace(out, disabled=frozenset(value))
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"{name} must be a number, got {value!r}")
        number = float(value)
        if key in _TEMPS and not 0 < number <= 150:
            raise ValueError(f"{name} must be a temperature in °C (1-150), got {value!r}")
        if key in _PCTS and not 0 < number <= 100:
            raise ValueError(f"{name} must be a percentage (1-100), got {value!r}")
        if (key in _SECONDS or key == "temp_clear_margin") and not 0 <= number <= 86400:
            raise ValueError(f"{name} must be 0 or more (seconds or °C), got {value!r}")
        numbers: dict[str, Any] = {key: number}
        out = replace(out, **numbers)
    for low, high in (
        ("gpu_temp_warning", "gpu_temp_critical"),
        ("mem_temp_warning", "mem_temp_critical"),
        ("vram_warning_pct", "vram_critical_pct"),
    ):
        if getattr(out, low) > getattr(out, high):
            raise ValueError(f"{where}.{low} ({getattr(out, low):g}) is above {where}.{high}")
    return out


@dataclass(frozen=True, slots=True)
class AlertHook:
    """A command run when an alert is raised, changes or clears (argv, no shell); ``kinds``
    empty: every kind."""

    argv: tuple[str, ...]
    kinds: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AlertConfig:
    """Thresholds and hooks, as a config file's ``[alerts]`` table gives them."""

    thresholds: AlertThresholds = field(default_factory=AlertThresholds)
    hooks: tuple[AlertHook, ...] = ()
    hook_timeout_s: float = 10.0

    def hooks_for(self, kind: str) -> tuple[AlertHook, ...]:
        return tuple(h for h in self.hooks if not h.kinds or kind in h.kinds)


def _argv(value: Any, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(
            f'{name} must be a command as a list of words (no shell), e.g. ["notify-send", "lltui"]'
        )
    if any("\0" in v for v in value):  # no command line can carry one
        raise ValueError(f"{name}: a word holds a NUL character (\\0); a command cannot take it")
    return tuple(value)


def alert_config_from_mapping(data: Mapping[str, Any], where: str = "alerts") -> AlertConfig:
    """The ``[alerts]`` table: thresholds, ``hook = [argv]`` for every alert, ``[alerts.hooks]``
    per kind, ``hook_timeout_s``. ValueError with one line naming the key."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a table of settings")
    thresholds = thresholds_from_mapping(data, where)
    hooks: list[AlertHook] = []
    if "hook" in data:
        hooks.append(AlertHook(_argv(data["hook"], f"{where}.hook")))
    per_kind = data.get("hooks", {})
    if not isinstance(per_kind, Mapping):
        raise ValueError(f'{where}.hooks must be a table: kind = ["command", "arg"]')
    for kind, argv in per_kind.items():
        if kind not in KINDS:
            raise ValueError(f"{where}.hooks.{kind}: no such alert kind ({', '.join(KINDS)})")
        hooks.append(AlertHook(_argv(argv, f"{where}.hooks.{kind}"), frozenset({kind})))
    timeout = data.get("hook_timeout_s", 10.0)
    if not _is_number(timeout) or not 0 < timeout <= 3600:
        raise ValueError(f"{where}.hook_timeout_s must be seconds (above 0, at most 3600)")
    return AlertConfig(thresholds, tuple(hooks), float(timeout))

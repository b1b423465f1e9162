"""A plan for several models (:mod:`lltui.core.fit.plan`) as ``fit --json`` and as text. JSON
is made here and nowhere else for a plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lltui.core.fit.plan import PlannedModel, SetPlan
from lltui.core.fit.report import layer_ranges as _layer_ranges
from lltui.core.fit.report import mib_text as _mib
from lltui.core.fit.report import result_to_json
from lltui.core.jsonout import fields_of
from lltui.core.memory.common import CPU
from lltui.core.text import counted

NAME_W = 10  # a model's column in the table
DEVICE_W = 26


def _signed(n: int) -> str:
    return f"-{_mib(-n)}" if n < 0 else _mib(n)


def _device_label(name: str) -> str:
    return "CPU (host)" if name == CPU else name


def _layers(p: PlannedModel) -> str:
    n_all = p.result.model.n_layer
    parts = [
        f"{_device_label(d.name)} {_layer_ranges(d.layers, n_all)}"
        for d in p.result.devices
        if d.layers
    ]
    return ", ".join(parts) or "-"


def verdict_reasons(plan: SetPlan) -> list[str]:
    """Why the set does not fit together, a phrase each."""
    out = []
    for d in plan.devices:
        left = d.left_bytes
        if left is not None and left < 0:
            out.append(f"{_device_label(d.name)} short by {_mib(-left)} MiB")
    for a, b, ep in plan.conflicts:
        out.append(
            f"{a} and {b} both use the RPC server {ep} (it serves one llama-server at a time)"
        )
    return out


def plan_to_text(plan: SetPlan, notes: Sequence[str] = ()) -> str:
    models = plan.models
    n = len(models)
    where = [d.name for d in plan.devices if d.name != CPU]
    lines = [
        f"{counted(n, 'model')} on {', '.join(where) + ' and ' if where else ''}the host: "
        + (
            ("it fits" if plan.fits else "it does not fit")
            if n == 1
            else ("they fit together" if plan.fits else "they do not all fit together")
        ),
        "",
        f"{'model':<{NAME_W + 2}} {'context':>8}  layers",
    ]
    for p in models:
        ctx = f"{p.n_ctx}"
        lines.append(f"{p.name[: NAME_W + 2]:<{NAME_W + 2}} {ctx:>8}  {_layers(p)}")
    lines.append("")
    width = min(DEVICE_W, max(len(_device_label(d.name)) for d in plan.devices))
    head = f"{'MiB':<{width}}" + "".join(f" {p.name[:NAME_W]:>{NAME_W}}" for p in models)
    lines.append(head + f" {'used':>9} {'free':>9} {'left':>9}  fits")
    for d in plan.devices:
        row = f"{_device_label(d.name)[:width]:<{width}}"
        for p in models:
            b = p.bytes_on(d.name)
            row += f" {_mib(b) if b else '-':>{NAME_W}}"
        fits = "-" if d.fits is None else ("yes" if d.fits else "NO")
        free = _mib(d.free_bytes) if d.free_bytes is not None else "-"
        left = _signed(d.left_bytes) if d.left_bytes is not None else "-"
        lines.append(row + f" {_mib(d.used_bytes):>9} {free:>9} {left:>9}  {fits}")
    lines.append(
        "(each model's weights, KV, compute and output buffers; on a GPU also the margin "
        "each server keeps for its own CUDA context)"
    )
    lowered = [p for p in models if p.ctx_lowered]
    if lowered:
        lines.append(
            "contexts lowered so that all fit (models sharing a device by the same share): "
            + ", ".join(f"{p.name} {p.default_ctx} -> {p.n_ctx}" for p in lowered)
        )
    lines.append("")
    shared = []
    in_conflict = {n for a, b, _ep in plan.conflicts for n in (a, b)}
    for p in models:
        with_others = "-" if p.max_ctx_shared is None else str(p.max_ctx_shared)
        if p.max_ctx_shared is None and p.name in in_conflict:
            with_others = "- (an RPC server shared)"
        alone = "-" if p.max_ctx_alone is None else str(p.max_ctx_alone)
        shared.append(f"{p.name} {with_others} (alone {alone})")
    lines.append("largest context with the others loaded: " + ", ".join(shared))
    lines.append("pinned, as lltui launch --models writes them for the router:")
    width_n = max(len(p.name) for p in models)
    for p in models:
        lines.append(f"  {p.name:<{width_n}}  {' '.join(p.pinned) or '-'}")
    lines.append("")
    if plan.fits:
        lines.append("verdict: they fit together")
    else:
        lines.append("verdict: they do NOT fit together: " + "; ".join(verdict_reasons(plan)))
        if plan.fit_together:
            lines.append("fit together: " + "; ".join(" + ".join(s) for s in plan.fit_together))
        elif not plan.subsets_tried:
            lines.append("(too many models to try every set of them)")
        else:
            lines.append("no model fits on its own")
    for note in notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def planned_to_json(p: PlannedModel) -> dict[str, Any]:
    return {
        **fields_of(p, "name path n_ctx default_ctx"),
        "context_lowered": p.ctx_lowered,
        "pinned": list(p.pinned),
        "args": p.args.to_argv(masked=True),
        "usage": [{"device": name, "bytes": b} for name, b in p.usage],
        "rpc": list(p.rpc),
        "max_ctx_alone": p.max_ctx_alone,
        "max_ctx_with_others": p.max_ctx_shared,
        "keep": p.keep,
        "fit": result_to_json(p.result),
    }


def plan_to_json(plan: SetPlan, notes: Sequence[str] = ()) -> dict[str, Any]:
    data: dict[str, Any] = {
        "models": [planned_to_json(p) for p in plan.models],
        "devices": [
            {
                **fields_of(d, "name kind free_bytes used_bytes left_bytes fits"),
                "models": {p.name: p.bytes_on(d.name) for p in plan.models if p.bytes_on(d.name)},
            }
            for d in plan.devices
        ],
        "fits": plan.fits,
        "reasons": verdict_reasons(plan),
        "conflicts": [{"models": [a, b], "rpc": ep} for a, b, ep in plan.conflicts],
        "fit_together": [list(s) for s in plan.fit_together] if plan.subsets_tried else None,
    }
    if notes:
        data["notes"] = list(notes)
    return data

"""``lltui fit --best decode|prompt|joules|fewest-gpus``: the planner's choice as text and JSON."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from lltui.core.jsonout import fields_of

if TYPE_CHECKING:
    from lltui.core.fit.llama_fit import FitChoice
    from lltui.core.fit.planner import PlanOption, PlanResult

SHOWN = 5  # options that fit, shown in the text
SHOWN_MISSING = 3  # and those that do not


def command_line(model: str, o: PlanOption) -> str:
    """The whole llama-server command of an option, the model first where the flags do not
    name it, as llama-server takes it (-hf for hf:, -mu for a URL, a split's first part);
    a URL's user, password and secret query values as *** (printed, never given)."""
    from lltui.core.gguf.refs import RefError, display_url, llama_model_flags

    argv = list(o.argv)
    if "-m" not in argv and "--model" not in argv:
        try:
            named = [display_url(w) for pair in llama_model_flags(model) for w in pair]
        except RefError:  # (a revision: llama-server cannot pin one; the ref as given)
            named = ["-m", model]
        argv = [*named, *argv]
    return shlex.join(["llama-server", *argv])


def option_json(model: str, o: PlanOption) -> dict[str, Any]:
    from lltui.core.fit.planner import PROMPT_TOKENS

    return {
        "command": command_line(model, o) if o.fits else None,
        "flags": list(o.flags),
        "split_mode": o.split_mode,
        "devices": list(o.devices),
        "n_ubatch": o.n_ubatch,
        "kv": o.kv or None,
        "fits": o.fits,
        "offload": o.offload or None,
        "decode_tps": round(o.decode_tps, 1),
        "decode_tps_at_context": round(o.decode_tps_deep, 1),
        "prefill_tps": round(o.prefill_tps, 1),
        "prompt_tokens": PROMPT_TOKENS,
        "joules_per_token": None if o.joules_per_token is None else round(o.joules_per_token, 3),
        "memory": [
            {
                **fields_of(m, "name total_bytes free_bytes fits"),
            }
            for m in o.memory
        ],
        "why_not": o.why_not or None,
        "lost": o.lost or None,
    }


def plan_json(
    model: str, plan: PlanResult, fit: FitChoice | None, aborts: str | None
) -> dict[str, Any]:
    split = plan.split
    return {
        "goal": plan.goal,
        "context": plan.context,
        "estimates": plan.estimates,
        "skipped_sets": plan.skipped,
        "replaced": list(plan.replaced),
        "winner": option_json(model, plan.best) if plan.best else None,
        "options": [option_json(model, o) for o in plan.options],
        "tensor_or_layer": None
        if split is None
        else {
            "winner": split.winner,
            "gain": round(split.decode_gain, 3),
            "why": split.why,
            "layer": option_json(model, split.layer),
            "tensor": option_json(model, split.tensor),
        },
        "tensor_not_tried": plan.tensor_note or None,
        "kv_option": option_json(model, plan.kv_option) if plan.kv_option else None,
        "llama_fit_aborts": aborts,
        "vs_llama_fit": _vs_fit(plan, fit),
    }


def _vs_fit(plan: PlanResult, fit: FitChoice | None) -> float | None:
    """The winner's speed for the goal (prompt for ``prompt``, else decode) over llama.cpp's
    --fit choice's (1.2: 20 % faster)."""
    best = plan.best
    if best is None or fit is None or fit.aborts:
        return None
    if plan.goal == "prompt":
        ours, theirs = best.prefill_tps, fit.prefill_tps
    else:
        ours, theirs = best.decode_tps, fit.decode_tps
    return round(ours / theirs, 3) if theirs > 0 else None


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f}"


def plan_text(model: str, plan: PlanResult, fit: FitChoice | None, aborts: str | None) -> str:
    from lltui.core.fit.planner import PROMPT_TOKENS
    from lltui.core.units import compact_names

    lines = [
        f"\nbest for {plan.goal} at context {plan.context} (the planner: {plan.estimates} "
        f"estimates; -sm, -dev, -ts, -mg, -ngl/--n-cpu-moe and -ub chosen):"
    ]
    if plan.replaced:
        lines.append(f"  ({' '.join(plan.replaced)} given: the planner chooses these itself)")
    fitting = [o for o in plan.options if o.fits]
    if not fitting:
        lines.append("  nothing this search tried fits")
    for i, o in enumerate(fitting[:SHOWN], 1):
        joules = f", {o.joules_per_token:.2f} J/token" if o.joules_per_token is not None else ""
        mem = ", ".join(f"{m.name} {_gib(m.total_bytes)}/{_gib(m.free_bytes)}" for m in o.memory)
        lines += [
            f"  {i}. {command_line(model, o)}",
            f"     decode ~{o.decode_tps:.1f} t/s ({o.decode_tps_deep:.1f} at a full context), "
            f"prompt ~{o.prefill_tps:.0f} t/s ({PROMPT_TOKENS} tokens){joules}",
        ]
        where = "; ".join(w for w in (f"GiB used/free: {mem}" if mem else "", o.offload) if w)
        if where:
            lines.append(f"     {where}")
        if o.lost:
            lines.append(f"     lost: {o.lost}")
    missing = [o for o in plan.options if not o.fits]
    for o in missing[:SHOWN_MISSING]:
        where = f"-sm {o.split_mode} on {compact_names(o.devices)}" if o.devices else "on the CPU"
        lines.append(f"  x {where}: {o.why_not}")
    if len(missing) > SHOWN_MISSING:
        lines.append(f"  ... and {len(missing) - SHOWN_MISSING} more that do not fit")
    lines += _kv_lines(model, plan)
    if plan.skipped == 1:
        lines.append("  (1 smaller set of GPUs not tried: it would put more on the host)")
    elif plan.skipped:
        lines.append(
            f"  ({plan.skipped} smaller sets of GPUs not tried: they would put more on the host)"
        )
    if plan.split is not None:
        lines.append(f"tensor or layer? {plan.split.winner}: {plan.split.why}")
    elif plan.tensor_note and any(o.devices for o in plan.options):
        lines.append(f"tensor or layer? layer: -sm tensor not tried ({plan.tensor_note})")
    lines += _fit_lines(plan, fit, aborts)
    return "\n".join(lines)


def _kv_lines(model: str, plan: PlanResult) -> list[str]:
    """The best layer split again with a q8_0 K/V cache, where that is faster."""
    o, first = plan.kv_option, plan.best
    if o is None or first is None:
        return []

    def gain(a: float, b: float) -> str:
        return f" ({100 * (a / b - 1):+.0f}% on 1.)" if b > 0 else ""

    where = o.offload or "everything on the GPUs"
    return [
        f"  faster with a {o.kv} K/V cache ({o.lost}): decode ~{o.decode_tps:.1f} t/s"
        f"{gain(o.decode_tps, first.decode_tps)}, prompt ~{o.prefill_tps:.0f} t/s"
        f"{gain(o.prefill_tps, first.prefill_tps)}; {where}",
        f"     {command_line(model, o)}",
    ]


def aborts_line(aborts: str, fit: FitChoice | None = None) -> str:
    """What llama.cpp's --fit does with a placement the user set: nothing, past the context
    it may have cut first."""
    if fit is not None and fit.flags:
        return (
            f"llama.cpp's own --fit cuts the context to {fit.n_ctx}, then aborts ({aborts}): "
            f"it loads with {' '.join(fit.flags)} and the rest as given, unfitted, and may "
            "run out of memory"
        )
    return (
        f"llama.cpp's own --fit aborts for the command given ({aborts}): it loads "
        "unfitted, and may run out of memory"
    )


def _fit_lines(plan: PlanResult, fit: FitChoice | None, aborts: str | None) -> list[str]:
    if aborts:
        return [aborts_line(aborts, fit)]
    if fit is None:
        return []
    flags = " ".join(fit.flags) or "(the flags as given)"
    out = [
        f"llama.cpp's own --fit would run: {flags} (context {fit.n_ctx}, decode "
        f"~{fit.decode_tps:.1f} t/s, prompt ~{fit.prefill_tps:.0f} t/s; {fit.why})"
    ]
    ratio = _vs_fit(plan, fit)
    does = "takes a prompt" if plan.goal == "prompt" else "decodes"
    if ratio is not None:
        out.append(f"  the planner's first {does} {ratio:.2f}x as fast as --fit's choice")
    return out

"""``lltui quant MODEL|hf:OWNER/REPO [flags] --best GOAL``: the quantizations ranked by the best
command line each has for the goal (the search of ``lltui fit --best``), with file sizes and
what each line gives up."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lltui.commands import print_json

if TYPE_CHECKING:
    from lltui.commands.fit import FitCommand
    from lltui.services.fit import QuantBest


def run_best(command: FitCommand) -> int:
    from lltui.commands.fit import refused
    from lltui.commands.progress import Progress
    from lltui.services.fit import FitFailed, quant_best

    assert command.best is not None
    try:
        with Progress(f"quant: ranking the quantizations for {command.best}") as progress:
            ranked = quant_best(command.request, command.best, progress=progress.step)
    except FitFailed as exc:
        return refused(exc, "quant", command.as_json)
    if command.as_json:
        print_json(_to_json(ranked))
    else:
        print("\n".join(_lines(ranked)))
    return 0


def _to_json(ranked: QuantBest) -> dict[str, Any]:
    from lltui.core.fit.report import offered_to_json
    from lltui.core.monitor.simulated import simulated_json

    rows = []
    for c in ranked.choices:
        b = c.best
        rows.append(
            {
                "quant": c.option.quant,
                "file": c.option.file or None,
                "bytes": c.option.file_bytes,
                "bits_per_weight": round(c.bits_per_weight, 3) if c.bits_per_weight else None,
                "fits": b is not None,
                "flags": [*ranked.model_flags(c), *b.flags] if b else None,
                "max_ctx": b.max_ctx if b else None,
                "decode_tps": round(b.decode_tps, 1) if b else None,
                "prefill_tps": round(b.prefill_tps, 1) if b else None,
                "gives_up": b.gives_up if b else None,
                "gains": (b.gains or None) if b else None,
                "error": c.error or None,
                "above_source": c.option.above_source,
            }
        )
    data: dict[str, Any] = {
        "model": ranked.setup.model_path,
        "goal": ranked.goal,
        "devices": offered_to_json(ranked.setup.devices),
        "quants": rows,
    } | simulated_json(ranked.setup.rig)
    if ranked.repo is not None:
        data["commit"] = ranked.repo.commit
    if ranked.setup.notes:
        data["notes"] = list(ranked.setup.notes)
    data["warnings"] = list(ranked.warnings)
    return data


def _lines(ranked: QuantBest) -> list[str]:
    from lltui.commands.fit import rig_lines
    from lltui.core.text import one_line
    from lltui.core.units import fmt_bytes

    what = "quantizations in the repository" if ranked.repo else "llama-quantize types"
    where = one_line(ranked.setup.device_label)
    lines = [
        *rig_lines(ranked.setup.rig, ranked.setup.device_label),
        f"{one_line(ranked.setup.model_path)}: {len(ranked.choices)} {what}, best for "
        f"{ranked.goal} on {where}",
        f"{'#':>3}  {'quant':<10} {'file':>10} {'bpw':>6} {'context':>8} {'t/s':>6}  command line",
    ]
    for i, c in enumerate(ranked.choices, 1):
        size = fmt_bytes(c.option.file_bytes) if c.option.file_bytes else "-"
        bpw = f"{c.bits_per_weight:.2f}" if c.bits_per_weight else "-"
        b = c.best
        # the repository's file and quant names are the hub's data: one line each
        quant = one_line(c.option.quant)
        if b is None:
            why = one_line(c.error or "nothing this search tried fits")
            lines.append(f"{'-':>3}  {quant:<10} {size:>10} {bpw:>6} {'-':>8} {'-':>6}  {why}")
            continue
        flags = one_line(" ".join((*ranked.model_flags(c), *b.flags)))
        lines.append(
            f"{i:>3}  {quant:<10} {size:>10} {bpw:>6} {b.max_ctx:>8} {b.decode_tps:>6.0f}  {flags}"
        )
        lines.append(f"{'':>5}gives up: {b.gives_up}" + (f"; gives: {b.gains}" if b.gains else ""))
        if c.option.above_source:
            lines.append(f"{'':>5}adds nothing: {c.option.above_source}")
    lines.append(
        "bpw: bits per weight; t/s: predicted decode speed; * needs an importance matrix; "
        "command line: what is added to the flags given"
    )
    lines += [f"note: {one_line(n)}" for n in ranked.setup.notes]
    lines += [f"warning: {one_line(w)}" for w in ranked.warnings]
    return lines

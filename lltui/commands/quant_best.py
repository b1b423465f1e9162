"""``lltui quant MODEL|hf:OWNER/REPO [flags] --best GOAL``: the quantizations ranked by the best
command line each has for the goal (the search of ``lltui fit --best``), with file sizes and
what each line gives up."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lltui.commands import CliError, print_json

if TYPE_CHECKING:
    from lltui.commands.fit import FitInputs
    from lltui.core.fit.quant_best import QuantChoice, QuantOption
    from lltui.sources.models.remote import RepoQuants


def _repo_options(repo: RepoQuants) -> list[QuantOption]:
    from lltui.core.fit.quant_best import QuantOption

    return [
        QuantOption(
            q.entry.quant or q.entry.path, q.entry.path, q.entry.size, q.model, q.error or ""
        )
        for q in repo.quants
    ]


def _model_flags(repo: RepoQuants | None, choice: QuantChoice) -> tuple[str, ...]:
    """How llama-server names the model: -hf REPO:QUANT where the tag picks this file alone."""
    if repo is None:
        return ()
    from lltui.core.gguf.refs import select_quant

    entries = [q.entry for q in repo.quants]
    opt = choice.option
    if opt.quant != opt.file and select_quant(entries, opt.quant) == [
        e for e in entries if e.path == opt.file
    ]:
        return ("-hf", f"{repo.ref.repo}:{opt.quant}")
    return ("-hf", repo.ref.repo, "-hff", opt.file)


def _room(inputs: FitInputs, options: list[QuantOption]) -> list[Any]:
    """The devices less what the draft, projector and adapters take (sized beside the first
    quantization read: they hardly depend on it), as ``fit --best`` searches."""
    first = next((o.model for o in options if o.model is not None), None)
    if inputs.extra is None or first is None:
        return list(inputs.devices)
    from dataclasses import replace

    from lltui.core.fit.estimate import FitError, estimate
    from lltui.core.memory.parts import less_free

    opts = replace(inputs.options, search=False)
    try:
        res = estimate(first, inputs.settings, inputs.devices, opts, inputs.extra)
    except FitError as exc:
        raise CliError(f"quant: {exc}", 2) from None
    return list(less_free(inputs.devices, res.parts))


def run_best(inputs: FitInputs) -> int:
    from lltui.core.fit.best import check_goal
    from lltui.core.fit.quant_best import computed_options, rank_quants
    from lltui.sources.models.remote import read_repo_quants
    from lltui.sources.models.remote_gguf import RemoteError

    goal = inputs.own["best"]
    try:
        check_goal(goal)
    except ValueError as exc:
        raise CliError(f"quant: {exc}", 2) from None
    repo: RepoQuants | None = None
    if inputs.model is None:
        try:
            repo = read_repo_quants(inputs.model_path)
        except RemoteError as exc:
            raise CliError(str(exc), exc.code) from None
        options = _repo_options(repo)
        if all(o.model is None for o in options):
            raise CliError(f"quant: no model of the repository could be read: {options[0].error}")
    else:
        options = computed_options(inputs.model)
    room = _room(inputs, options)
    choices = rank_quants(options, inputs.settings, room, inputs.options, goal)
    if inputs.own["json"]:
        print_json(_to_json(inputs, goal, repo, choices))
    else:
        print("\n".join(_lines(inputs, goal, repo, choices)))
    return 0


def _to_json(
    inputs: FitInputs, goal: str, repo: RepoQuants | None, choices: list[QuantChoice]
) -> dict[str, Any]:
    from lltui.sources.fit_devices import describe

    rows = []
    for c in choices:
        b = c.best
        rows.append(
            {
                "quant": c.option.quant,
                "file": c.option.file or None,
                "bytes": c.option.file_bytes,
                "bits_per_weight": round(c.bits_per_weight, 3) if c.bits_per_weight else None,
                "fits": b is not None,
                "flags": [*_model_flags(repo, c), *b.flags] if b else None,
                "max_ctx": b.max_ctx if b else None,
                "decode_tps": round(b.decode_tps, 1) if b else None,
                "prefill_tps": round(b.prefill_tps, 1) if b else None,
                "gives_up": b.gives_up if b else None,
                "gains": (b.gains or None) if b else None,
                "error": c.error or None,
            }
        )
    data: dict[str, Any] = {
        "model": inputs.model_path,
        "goal": goal,
        "devices": describe(inputs.devices),
        "quants": rows,
    }
    if repo is not None:
        data["commit"] = repo.commit
    if inputs.notes:
        data["notes"] = inputs.notes
    return data


def _lines(
    inputs: FitInputs, goal: str, repo: RepoQuants | None, choices: list[QuantChoice]
) -> list[str]:
    from lltui.core.text import one_line
    from lltui.core.units import fmt_bytes
    from lltui.sources.fit_devices import describe

    what = "quantizations in the repository" if repo else "llama-quantize types"
    where = one_line(describe(inputs.devices))
    lines = [
        f"{one_line(inputs.model_path)}: {len(choices)} {what}, best for {goal} on {where}",
        f"{'#':>3}  {'quant':<10} {'file':>10} {'bpw':>6} {'context':>8} {'t/s':>6}  command line",
    ]
    for i, c in enumerate(choices, 1):
        size = fmt_bytes(c.option.file_bytes) if c.option.file_bytes else "-"
        bpw = f"{c.bits_per_weight:.2f}" if c.bits_per_weight else "-"
        b = c.best
        # the repository's file and quant names are the hub's data: one line each
        quant = one_line(c.option.quant)
        if b is None:
            why = one_line(c.error or "nothing this search tried fits")
            lines.append(f"{'-':>3}  {quant:<10} {size:>10} {bpw:>6} {'-':>8} {'-':>6}  {why}")
            continue
        flags = one_line(" ".join((*_model_flags(repo, c), *b.flags)))
        lines.append(
            f"{i:>3}  {quant:<10} {size:>10} {bpw:>6} {b.max_ctx:>8} {b.decode_tps:>6.0f}  {flags}"
        )
        lines.append(f"{'':>5}gives up: {b.gives_up}" + (f"; gives: {b.gains}" if b.gains else ""))
    lines.append("bpw: bits per weight; t/s: predicted decode speed; * needs an importance matrix")
    lines += [f"note: {one_line(n)}" for n in inputs.notes]
    return lines

"""``lltui fit A.gguf [A's flags] B.gguf [B's flags] ...``: a plan for several models
resident together (see :mod:`lltui.commands.model_set` for how the flags are written)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lltui.commands import CliError, print_json

if TYPE_CHECKING:
    from lltui.commands.model_set import ModelSet
    from lltui.services.plan import PlanEntry, PlanRequest

OWN_VALUE = ("--gpus", "--margin", "--host-free", "--cpu", "--best")
OWN_FLAGS = ("--json", "--oracle", "-h", "--help")


def model_set(argv: list[str]) -> ModelSet | None:
    """The command line read as a set of models; None when it names one model or less (or
    does not read as a set: the one-model path then says why)."""
    from lltui.commands.model_set import split_model_set

    try:
        found = split_model_set(argv, OWN_VALUE, OWN_FLAGS, "fit")
    except CliError:
        return None
    return found if len(found.models) >= 2 else None


def entries(found: ModelSet, verb: str) -> tuple[PlanEntry, ...]:
    """Each model with the shared flags and then its own, read as llama-server reads them
    (LLAMA_ARG_* variables first)."""
    from lltui.core.llama.args import parse_llama_args
    from lltui.services.plan import PlanEntry

    if found.stray is not None:
        raise CliError(
            f"{verb}: unexpected argument {found.stray!r} (models are .gguf files, hf: "
            "references or URLs)",
            2,
        )
    out = []
    for model, words in found.models:
        try:
            args = parse_llama_args([*found.shared, *words], env=os.environ)
        except ValueError as exc:
            raise CliError(f"{verb}: {model}: {exc}", 2) from None
        if args.model_path is not None:
            raise CliError(
                f"{verb}: {model}: give each model as a word (A.gguf B.gguf), not with -m", 2
            )
        out.append(PlanEntry(model, args))
    return tuple(out)


def plan_request(found: ModelSet, verb: str) -> PlanRequest:
    from lltui.core.units import parse_size
    from lltui.services.plan import PlanRequest

    margin: float | None = None
    if (text := found.last("--margin")) is not None:
        try:
            margin = float(text)
        except ValueError:
            raise CliError(f"{verb}: --margin expects MiB, got {text!r}", 2) from None
    host_free: int | None = None
    if (size := found.last("--host-free")) is not None:
        try:
            host_free = parse_size(size)
        except ValueError as exc:
            raise CliError(f"{verb}: --host-free: {exc}", 2) from None
    return PlanRequest(
        entries(found, verb),
        gpus=found.last("--gpus"),
        margin_mib=margin,
        host_free_bytes=host_free,
        cpu_profile=found.last("--cpu") or "x86",
        verb=verb,
    )


def run_plan(found: ModelSet) -> int:
    from lltui.core.fit.plan_report import plan_to_json, plan_to_text
    from lltui.services.fit import FitFailed
    from lltui.services.plan import plan_models

    if found.switches & {"--oracle"} or found.values.get("--best"):
        raise CliError("fit: --best and --oracle are for one model at a time", 2)
    request = plan_request(found, "fit")
    try:
        report = plan_models(request)
    except FitFailed as exc:
        raise CliError(str(exc), exc.code) from None
    if "--json" in found.switches:
        print_json(plan_to_json(report.plan, report.notes))
    else:
        print(plan_to_text(report.plan, report.notes))
    return 0

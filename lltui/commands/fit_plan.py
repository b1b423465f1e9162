"""``lltui fit A.gguf [A's flags] B.gguf [B's flags] ...``: a plan for several models
resident together (see :mod:`lltui.commands.model_set` for how the flags are written)."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from lltui.commands import CliError

if TYPE_CHECKING:
    from lltui.commands.model_set import ModelSet
    from lltui.commands.own_options import Split
    from lltui.services.plan import PlanEntry, PlanReport, PlanRequest


def entries(found: ModelSet, verb: str) -> tuple[PlanEntry, ...]:
    """Each model with the shared flags and then its own, read as llama-server reads them
    (LLAMA_ARG_* variables first)."""
    from lltui.services.fit import FitFailed
    from lltui.services.plan import read_entry

    if found.stray is not None:
        raise CliError(
            f"{verb}: unexpected argument {found.stray!r} (models are .gguf files, hf: "
            "references or URLs)",
            2,
        )
    try:
        return tuple(
            read_entry(model, [*found.shared, *words], verb, os.environ)
            for model, words in found.models
        )
    except FitFailed as exc:
        raise CliError(str(exc), exc.code) from None


# llama-server's router mode: its models from a folder or a preset file, no model of its own
ROUTER_SOURCES = ("--models-dir", "--models-preset")
MODEL_FLAGS = frozenset(("-m", "--model", "-hf", "-hfr", "--hf-repo", "-mu", "--model-url"))


def router_source(found: ModelSet) -> str | None:
    """The folder or preset a router command line serves its models from (the last given);
    None for a command line of models (llama-server serves a model given, whatever else)."""
    shared = found.shared
    if found.models or any(w in MODEL_FLAGS for w in shared):
        return None
    got = [shared[i + 1] for i, w in enumerate(shared[:-1]) if w in ROUTER_SOURCES]
    return got[-1] if got else None


def router_entries(found: ModelSet, verb: str) -> tuple[tuple[PlanEntry, ...], tuple[str, ...]]:
    """The models a router would serve from ``--models-dir DIR`` or ``--models-preset FILE``,
    each read as ``lltui launch --models`` reads them (its section's flags after the shared
    ones), with a line for each one left out."""
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.core.cmdline.launch_spec import LaunchError
    from lltui.services.launch.router_prep import RouterRequest, read_models

    sources = [w for w in found.shared if w in ROUTER_SOURCES]
    if len(set(sources)) > 1:
        raise CliError(f"{verb}: give --models-dir or --models-preset, not both", 2)
    rest, skip = [], False
    for w in found.shared:
        if skip or w in ROUTER_SOURCES:
            skip = not skip
            continue
        rest.append(w)
    try:
        shared = parse_llama_args(rest, env=os.environ)
        read = read_models(RouterRequest(source=router_source(found)), shared)
    except (ValueError, LaunchError) as exc:
        raise CliError(f"{verb}: {exc}", 2) from None
    return read.entries, read.notes


def plan_request(
    words: Split,
    found: ModelSet,
    verb: str,
    source: str | None = None,
    served: tuple[PlanEntry, ...] | None = None,
) -> PlanRequest:
    """The plan asked for: of the models given, or ``served`` (a router's)."""
    from lltui.commands.own_options import memory_options
    from lltui.services.plan import PlanRequest

    margin, host_free = memory_options(words, verb)
    return PlanRequest(
        served if served is not None else entries(found, verb),
        gpus=words.last("--gpus"),
        margin_mib=margin,
        host_free_bytes=host_free,
        cpu_profile=words.last("--cpu") or "x86",
        verb=verb,
        use_rig=True,
        rig_source=source,
    )


def plan_set(words: Split, found: ModelSet, source: str | None = None) -> PlanReport:
    """The plan of the models given, for the rig in use (``source``) or --gpus."""
    from lltui.services.fit import FitFailed
    from lltui.services.plan import plan_models

    if words.switches & {"--oracle"} or words.last("--best"):
        raise CliError("fit: --best and --oracle are for one model at a time", 2)
    served: tuple[PlanEntry, ...] | None = None
    notes: tuple[str, ...] = ()
    if router_source(found) is not None:  # llama-server's router: a folder's or a preset's
        served, notes = router_entries(found, "fit")
    request = plan_request(words, found, "fit", source, served)
    try:
        report = plan_models(request)
    except FitFailed as exc:
        raise CliError(str(exc), exc.code) from None
    return replace(report, notes=(*notes, *report.notes)) if notes else report

"""``lltui fit A.gguf [A's flags] B.gguf [B's flags] ...``: a plan for several models
resident together (see :mod:`lltui.commands.model_set` for how the flags are written)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from lltui.commands import CliError

if TYPE_CHECKING:
    from lltui.commands.model_set import ModelSet
    from lltui.commands.own_options import Split
    from lltui.services.plan import PlanEntry, PlanReport, PlanRequest


def _no_stray(found: ModelSet, verb: str) -> None:
    if found.stray is not None:
        raise CliError(
            f"{verb}: unexpected argument {found.stray!r} (models are .gguf files, hf: "
            "references or URLs)",
            2,
        )


def entries(found: ModelSet, verb: str) -> tuple[PlanEntry, ...]:
    """Each model with the shared flags and then its own, read as llama-server reads them
    (LLAMA_ARG_* variables first)."""
    from lltui.services.fit import FitFailed
    from lltui.services.plan import read_entry

    _no_stray(found, verb)
    try:
        return tuple(
            read_entry(model, [*found.shared, *words], verb, os.environ)
            for model, words in found.models
        )
    except FitFailed as exc:
        raise CliError(str(exc), exc.code) from None


def router_source(found: ModelSet) -> str | None:
    """The folder or preset a router command line serves its models from (see
    :func:`lltui.services.plan.router_source`)."""
    if found.models:  # a model given is served, whatever else: no router (nor its import)
        return None
    from lltui.services.plan import router_source as source_of

    return source_of(found.shared)


def plan_request(
    words: Split, found: ModelSet, verb: str, source: str | None = None
) -> PlanRequest:
    """The plan asked for: of the models given, or of a router's (``--models-dir DIR``,
    ``--models-preset FILE``)."""
    from lltui.commands.own_options import memory_options
    from lltui.services.fit import FitFailed
    from lltui.services.launch.router_prep import given_entries
    from lltui.services.plan import PlanRequest

    _no_stray(found, verb)
    try:
        served, notes = given_entries(found.models, found.shared, verb, os.environ)
    except FitFailed as exc:
        raise CliError(str(exc), exc.code) from None
    margin, host_free = memory_options(words, verb)
    return PlanRequest(
        served,
        notes=notes,
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
    request = plan_request(words, found, "fit", source)
    try:
        return plan_models(request)
    except FitFailed as exc:
        raise CliError(str(exc), exc.code) from None

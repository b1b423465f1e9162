"""A plan for several models on one rig: ``lltui fit A.gguf B.gguf ...``, ``lltui launch
--models`` and the launch view's router all call :func:`plan_models` once.

Each model is read as ``lltui fit`` reads one (:func:`lltui.services.fit.prepare`: its header,
the files it loads beside it, the devices its server would see); the host's free memory is
measured once for all of them; :func:`lltui.core.fit.plan.plan_set` shares the devices out.
Failures are :class:`~lltui.services.fit.FitFailed`: one line and an exit code.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from lltui.core.cmdline.args import LlamaArgs, parse_llama_args
from lltui.core.fit.plan import SetMember, SetPlan, plan_set
from lltui.core.memory.common import FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.services.fit import FitFailed, FitRequest, FitSetup, estimate_setup, on_rig, prepare

if TYPE_CHECKING:
    from lltui.core.monitor.models import RigInfo

ALIAS_FLAGS = ("-a", "--alias")
# what a preset's section header or a request's model field cannot carry
_NAME_CHARS = re.compile(r"[\[\]\s\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class PlanEntry:
    """One model of the set: a path or reference, its own llama-server settings (the shared
    ones already applied), the name to serve it under (None: ``--alias``, else the file's
    name), and whether the user keeps it loaded. ``listed``: read from a folder or a
    preset, so left out (with a line) when it cannot be read, as the router leaves it out;
    a model typed on the command line is refused instead."""

    model: str
    args: LlamaArgs
    name: str | None = None
    keep: bool = False
    listed: bool = False


def read_entry(
    model: str, words: Sequence[str], verb: str = "fit", env: Mapping[str, str] | None = None
) -> PlanEntry:
    """One model of a set with its llama-server words (the shared ones first), read as
    llama-server reads them (``env``: its LLAMA_ARG_* variables). FitFailed (one line) for
    words it refuses, or a ``-m`` beside the model: each model is named once, as a word."""
    try:
        args = parse_llama_args(words, env=env)
    except ValueError as exc:
        raise FitFailed(f"{verb}: {model}: {exc}", 2) from None
    if args.model_path is not None:
        raise FitFailed(
            f"{verb}: {model}: give each model as a word (A.gguf B.gguf), not with -m", 2
        )
    return PlanEntry(model, args)


# llama-server's router mode: its models from a folder or a preset file, no model of its own
ROUTER_SOURCES = ("--models-dir", "--models-preset")
MODEL_FLAGS = frozenset(("-m", "--model", "-hf", "-hfr", "--hf-repo", "-mu", "--model-url"))


def router_source(shared: Sequence[str], models: bool = False) -> str | None:
    """The folder or preset a router command line serves its models from (the last given);
    None where ``models`` are given or a model flag is among ``shared`` (llama-server serves
    a model given, whatever else)."""
    if models or any(w in MODEL_FLAGS for w in shared):
        return None
    got = [shared[i + 1] for i, w in enumerate(shared[:-1]) if w in ROUTER_SOURCES]
    return got[-1] if got else None


@dataclass(frozen=True)
class PlanRequest:
    entries: tuple[PlanEntry, ...]
    gpus: str | None = None
    margin_mib: float | None = None
    host_free_bytes: int | None = None
    cpu_profile: str = "x86"
    verb: str = "fit"
    use_rig: bool = False  # gpus None: the rig in use (see FitRequest.use_rig)
    rig_source: str | None = None
    notes: tuple[str, ...] = ()  # lines on models left out before (given_entries)


@dataclass(frozen=True)
class PlanReport:
    plan: SetPlan
    setups: tuple[FitSetup, ...]  # one per model, in the plan's order
    notes: tuple[str, ...] = field(default=())
    left_out: tuple[tuple[str, str], ...] = ()  # (name, why) of models that could not be read
    rig: RigInfo | None = None  # the rig in use the plan is for (``use_rig``)

    @property
    def device_label(self) -> str:
        from lltui.services.devices import describe

        seen: dict[str, DeviceSpec] = {}
        for s in self.setups:
            for d in s.devices:
                seen.setdefault(d.name, d)
        return describe(list(seen.values()))

    def to_json(self) -> dict[str, Any]:
        """The ``lltui fit A.gguf B.gguf ... --json`` object (and the API's ``plan_models``):
        the plan, with whether its devices are a simulated rig's."""
        from lltui.core.fit.plan_report import plan_to_json
        from lltui.core.monitor.simulated import simulated_json

        return plan_to_json(self.plan, self.notes) | simulated_json(self.rig)


def alias_of(args: LlamaArgs) -> str | None:
    """The first name ``--alias`` gives (llama-server takes a comma list)."""
    for g in reversed(args.given_args):
        if g.flag in ALIAS_FLAGS and g.values:
            first = g.values[0].split(",")[0].strip()
            return first or None
    return None


def model_name(ref: str) -> str:
    """A model's name from its path or reference, as the router names a models-dir file:
    the file name without ``.gguf`` (``hf:owner/repo:Q4_K_M`` -> ``repo-Q4_K_M``)."""
    text = ref.strip()
    if text.startswith("hf:"):
        body = text[3:].split("@", 1)[0]
        repo, _, pick = body.partition(":")
        base = repo.rsplit("/", 1)[-1] + (f"-{pick.rsplit('/', 1)[-1]}" if pick else "")
    else:
        base = PurePosixPath(text.split("?", 1)[0]).name
    if base.lower().endswith(".gguf"):
        base = base[: -len(".gguf")]
    return safe_name(base)


def safe_name(name: str) -> str:
    """A name fit for a preset section and a request's ``model`` field: brackets, blanks
    and control characters become ``-``, and the tag after a ``:`` is upper-cased as
    llama-server names the section (``owner/repo:q4_k_m`` -> ``owner/repo:Q4_K_M``)."""
    from lltui.core.cmdline.preset import canonical_name

    cleaned = _NAME_CHARS.sub("-", name).strip("-")
    return canonical_name(cleaned) if cleaned else "model"


def unique_names(wanted: Sequence[str]) -> list[str]:
    """``wanted`` with repeats numbered (``tiny``, ``tiny-2``)."""
    out: list[str] = []
    for name in wanted:
        candidate, n = name, 1
        while candidate in out:
            n += 1
            candidate = f"{name}-{n}"
        out.append(candidate)
    return out


def _own_rpc(setup: FitSetup, rpc: Sequence[str]) -> FitSetup:
    """The setup with only the RPC devices the model's own ``--rpc`` names: ``--gpus
    rpc:HOST:PORT...`` describes servers (memory, backend); which model uses one is its
    flags' say, as the router passes each model its own flags."""
    kept = tuple(d for d in setup.devices if d.kind != "rpc" or d.endpoint in rpc)
    return setup if kept == setup.devices else replace(setup, devices=kept)


def named_entries(entries: Sequence[PlanEntry]) -> tuple[PlanEntry, ...]:
    """Each entry with the name it is served under: its own, else ``--alias``, else its
    file's name; repeats numbered."""
    wanted = [e.name or alias_of(e.args) or model_name(e.model) for e in entries]
    names = unique_names([safe_name(n) for n in wanted])
    return tuple(replace(e, name=n) for e, n in zip(entries, names, strict=True))


def left_out_line(name: str, why: str) -> str:
    return f"{name} left out: {why}"


def plan_models(request: PlanRequest) -> PlanReport:
    """Read every model of the set and plan them resident together. A ``listed`` model
    whose header cannot be read, or whose settings llama.cpp refuses, is left out (named
    in ``left_out`` and the notes, with why) rather than failing the whole plan."""
    from lltui.sources.gpu.meminfo import host_available

    if not request.entries:
        raise FitFailed(f"{request.verb}: no model given", 2)
    host_free = request.host_free_bytes
    if host_free is None:
        host_free = host_available()
    entries = named_entries(request.entries)
    members: list[SetMember] = []
    setups: list[FitSetup] = []
    left_out: list[tuple[str, str]] = []
    # the rig in use, opened once for every model
    wanted = FitRequest(
        "",
        LlamaArgs(),
        gpus=request.gpus,
        verb=request.verb,
        use_rig=request.use_rig,
        rig_source=request.rig_source,
    )
    on, rig = on_rig(wanted)
    for entry in entries:
        name = entry.name or "model"
        fit_request = FitRequest(
            model=entry.model,
            args=entry.args,
            gpus=on.gpus,
            sample=on.sample,
            watch_rig=on.watch_rig,
            margin_mib=request.margin_mib,
            host_free_bytes=host_free,
            host_free_read=request.host_free_bytes is None,
            cpu_profile=request.cpu_profile,
            verb=request.verb,
        )
        try:
            setup = prepare(fit_request)
            if entry.listed:  # settings llama.cpp refuses: found now, for this model alone
                estimate_setup(setup, replace(setup.options, search=False, suggest=False))
        except FitFailed as exc:
            if not entry.listed:
                raise
            left_out.append((name, str(exc).removeprefix(f"{request.verb}: ")))
            continue
        setup = _own_rpc(setup, entry.args.rpc)
        setups.append(setup)
        members.append(
            SetMember(
                name, setup.gguf, setup.args, setup.devices, setup.extra, entry.keep, entry.model
            )
        )
    if not members:
        why = "; ".join(f"{name}: {said}" for name, said in left_out)
        raise FitFailed(f"{request.verb}: no model could be read" + (f" ({why})" if why else ""), 2)
    try:
        plan = plan_set(members, setups[0].options)
    except FitError as exc:
        raise FitFailed(f"{request.verb}: {exc}", 2) from None
    dropped = (left_out_line(name, why) for name, why in left_out)
    notes = (*request.notes, *dropped, *(n for s in setups for n in s.notes))
    notes = tuple(dict.fromkeys(notes))
    return PlanReport(plan, tuple(setups), notes, tuple(left_out), rig)

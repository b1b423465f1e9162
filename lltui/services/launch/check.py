"""Before llama-server starts: fit's verdict on the very command that is about to run, on the
devices llama-server will see. A command line fit refuses (a draft model that is not there,
a device that does not exist, a K/V type the model cannot take) is refused by launch the same
way; one that does not fit is refused with the command that would, unless forced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lltui.core.cmdline.launch_spec import LaunchError, LaunchSpec
from lltui.core.units import fmt_bytes

if TYPE_CHECKING:
    from lltui.core.memory.results import FitResult
    from lltui.services.fit import FitSetup

FORCE_HINT = "add --force to start it anyway"
UNCHECKED = "the plan is not checked"


@dataclass(frozen=True)
class Verdict:
    """``fits``: True, False, or None when it could not be checked (``notes`` say why)."""

    fits: bool | None
    problem: str = ""  # one line: who runs out by how much, and the command that fits
    notes: tuple[str, ...] = ()
    hang: str = ""  # one line: an --rpc server llama-server would wait on without end


def _binary_sees_gpus(binary_path: str | None) -> bool:
    """Whether the llama-server about to run lists CUDA devices of its own (a CUDA build on a
    machine where NVML answered nothing: then lltui cannot say what it will see)."""
    if binary_path is None:
        return False
    from lltui.sources.llama.binary import LlamaBinaryError, list_devices

    try:
        return any(d.name.startswith("CUDA") for d in list_devices(binary_path))
    except (LlamaBinaryError, OSError):
        return False


def judge(
    spec: LaunchSpec, binary_path: str | None = None, host_free_bytes: int | None = None
) -> Verdict:
    """fit on this machine's GPUs (and the ``--rpc`` servers) for the command about to run,
    with ``host_free_bytes`` of host memory (None: what is free now). Raises LaunchError (2)
    for a command line fit refuses as llama-server would."""
    from lltui.services.fit import FitFailed, FitRequest, estimate_setup, prepare

    request = FitRequest(
        model=spec.model, args=spec.args, verb="launch", host_free_bytes=host_free_bytes
    )
    store: list[str] = []  # a calibration store set aside: fit's notes say it, launch here
    try:
        setup = prepare(request, say=store.append)
        result = estimate_setup(setup, verb="launch")
    except FitFailed as exc:
        said = str(exc).removeprefix("launch: ")  # the command line puts its own name first
        if exc.code == 2:
            raise LaunchError(said, 2) from None
        return Verdict(None, notes=(*store, f"{UNCHECKED}: {said}"))
    hang = _silent_rpc(setup)
    if hang:
        return Verdict(None, notes=tuple(store), hang=hang)
    gpus = any(d.kind == "cuda" for d in setup.devices)
    if not gpus and _binary_sees_gpus(binary_path):
        return Verdict(None, notes=(*store, f"llama-server sees GPUs NVML does not: {UNCHECKED}"))
    if result.fits is not False:
        return Verdict(True if result.fits else None, notes=tuple(store))
    problem = _problem(result, spec, setup)
    if not setup.devices:
        problem += " (no NVIDIA GPU here: all of it on the host)"
    return Verdict(False, problem, tuple(store))


def _silent_rpc(setup: FitSetup) -> str:
    """The first ``--rpc`` server that took fit's connection and never answered (busy with
    another client, or no rpc-server): llama-server would wait on it, loading without end.
    Empty where there is none. (fit has just asked: its answers are taken as they are.)"""
    from lltui.sources.llama.rpc_probe import RpcProbeError, probe_all

    asked = [d.endpoint for d in setup.devices if d.endpoint and d.total_bytes is None]
    for got in probe_all(asked, max_age_s=60.0) if asked else ():
        if isinstance(got, RpcProbeError) and got.silent:
            return f"{got}: llama-server would wait on it without end"
    return ""


def _problem(result: FitResult, spec: LaunchSpec, setup: FitSetup) -> str:
    """Who runs out, by how much, and the command that fits instead, in one line."""
    short = []
    for d in result.devices:
        if d.fits is False and d.free_bytes is not None:
            need = d.total_bytes + d.unaccounted_bytes
            where = "the host" if d.kind == "cpu" else d.name
            short.append(f"{where} needs {fmt_bytes(need)} of {fmt_bytes(d.free_bytes)} free")
    text = "does not fit: " + "; ".join(short or ["a device runs out of memory"])
    flags, why = _what_fits(result, setup)
    if flags:
        text += f"; try {' '.join(flags)} ({why}): {_command(spec, flags)}"
    elif result.max_ctx:
        text += f"; the largest context that fits is {result.max_ctx}"
    return text


def _what_fits(result: FitResult, setup: FitSetup) -> tuple[tuple[str, ...], str]:
    """The flags that make it fit, added to the given ones, and why: fit's first suggestion,
    else the first command line of fit's search for the largest context (none: empty)."""
    if result.suggestions:
        first = result.suggestions[0]
        return first.flags, first.reason
    from lltui.core.fit.best import best_configs

    found = best_configs(setup.gguf, setup.args, setup.devices, setup.options, limit=1)
    if not found:
        return (), ""
    return found[0].flags, f"context {found[0].max_ctx}; gives up: {found[0].gives_up}"


def _command(spec: LaunchSpec, flags: tuple[str, ...]) -> str:
    """The launch command with ``flags`` after the ones given (secrets left out: a key file
    or the environment still gives them; a key typed on the command line is asked for
    again, as it is never printed)."""
    import shlex

    from lltui.core.cmdline.args import parse_llama_args, spell
    from lltui.core.cmdline.flag_table import SECRET_FIELDS

    args = spec.args.without(frozenset(SECRET_FIELDS)).then(parse_llama_args(list(flags)))
    launch = [  # the address and key file given (the spec keeps them apart from the flags)
        w
        for name in ("host", "port", "api_key_file")
        if name in spec.given_launch
        for w in spell(name, getattr(spec, name))
    ]
    command = shlex.join(["lltui", "launch", *args.to_argv(), *launch])
    if spec.api_key and not spec.api_key_file:
        command += " (and your --api-key, which is not printed)"
    return command

"""``lltui fit MODEL.gguf [llama-server flags] [--gpus SPEC] [--json] [--oracle]``.

Reads the GGUF header (never the weights) and estimates, per device, what llama-server will
allocate with these flags: weights, KV cache, compute buffers, the host output buffer, and
whether it fits. Flags are llama-server's own, pasted as they are; the ones that do not
change memory are accepted and ignored.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError, print_json, source_spec
from lltui.commands.own_options import Split, memory_options, options_help, split_own
from lltui.core.jsonout import fields_of

if TYPE_CHECKING:
    from lltui.commands.model_set import ModelSet
    from lltui.core.monitor.models import RigInfo
    from lltui.services.fit import FitFailed, FitReport, FitRequest


def _memory_flags() -> str:
    """The flag table's flags that change memory, each by its shortest spelling."""
    import textwrap

    from lltui.core.cmdline.flag_table import FLAGS

    words = " ".join(
        min(f.spellings, key=len) + (f"/{min(f.neg, key=len)}" if f.neg else "")
        for f in FLAGS
        if f.memory
    )
    return textwrap.fill(
        f"{words} (long forms too)",
        90,
        initial_indent="  ",
        subsequent_indent="  ",
        break_on_hyphens=False,
        break_long_words=False,
    )


HELP = f"""\
usage: lltui fit MODEL.gguf [llama-server flags] [--gpus SPEC] [--json] [--oracle]
       lltui fit [shared flags] A.gguf [A's flags] B.gguf [B's flags] ... [--gpus SPEC] [--json]

Estimate, per device, the memory llama-server will allocate for MODEL.gguf with these
flags: weights, KV cache, compute buffers and the host output buffer, and whether it fits;
and the speed it will run at: decode and prompt tokens/s, per device and for the split, and
what bounds them (memory bandwidth, compute, a link). The GGUF header is read; the weights
are not. MODEL.gguf may also be hf:OWNER/REPO[:FILE|QUANT][@REV] or an https URL (the header
read by range requests).

llama-server flags that change memory (its spellings and defaults; the others are
accepted and change nothing here):
{_memory_flags()}
  --rpc HOST:PORT servers are asked for their devices' free memory (llama.cpp's RPC
  protocol, 3 s at most); llama.cpp RPC has no authentication: private networks only

Several models: a plan for them resident together (llama-server's router mode, or one
server each): flags before the first model apply to all, flags after a model to it alone
(--alias NAME names it). Each model's memory on each device, what is left, which models fit
together when all do not, the largest context each can have with the others loaded, and the
flags that pin each one's context and split (-c -ngl -ts -fit off), as lltui launch --models
writes them. Contexts not given are lowered where a device is short (models sharing it by
the same share, not below -fitc) until the set fits. An RPC server serves one llama-server
at a time: two models naming it cannot be loaded together.

lltui options:
{options_help("fit")}
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fit",
        help="per-device memory llama-server will use for a GGUF, and whether it fits",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        prefix_chars="\x00",  # no option prefix: every word, -c or +5, reaches run() as typed
    )
    p.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


@dataclass(frozen=True)
class FitCommand:
    """The fit and quant command line, read: the request for the service and lltui's own
    switches."""

    request: FitRequest
    as_json: bool = False
    oracle: bool = False
    best: str | None = None


def read_command(
    argv: Sequence[str] | Split,
    verb: str,
    help_text: str,
    source: Callable[[], str | None] | None = None,
) -> FitCommand | None:
    """The command line shared by ``fit`` and ``quant`` (or its words, already split),
    checked; None after --help. Without --gpus, the rig in use is estimated for: what
    ``source()`` (``--source``; None: auto) opens, as the monitor and the fit view see it
    (asked only then: it may read the config file). Bad input raises CliError (exit 2)
    with one line."""
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.services.fit import FitRequest

    words = argv if isinstance(argv, Split) else split_own(argv, verb)
    if words.help:
        sys.stdout.write(help_text)
        return None
    given, llama, stray = words.single()
    try:
        # LLAMA_ARG_* variables set llama-server's defaults: read them as it does; a flag's
        # bad value first (a value -fa took from -c leaves -c's as a stray word)
        args = parse_llama_args(llama, env=os.environ)
        if stray is not None:
            raise ValueError(f"unexpected argument {stray!r} (one model file only)")
        model = args.model_of(given)
    except ValueError as exc:
        raise CliError(f"{verb}: {exc}", 2) from None
    if not model:
        raise CliError(f"{verb}: no model: give MODEL.gguf (or -m MODEL.gguf)", 2)
    margin, host_free = memory_options(words, verb)
    gpus = words.last("--gpus")
    request = FitRequest(
        model=model,
        args=args,
        gpus=gpus,
        margin_mib=margin,
        host_free_bytes=host_free,
        cpu_profile=words.last("--cpu") or "x86",
        host=words.last("--host"),
        verb=verb,
        use_rig=True,
        rig_source=source() if source is not None and gpus is None else None,
    )
    goals = set(words.all("--best"))
    if len(goals) > 1:  # (the last was taken silently)
        raise CliError(f"{verb}: --best given twice ({', '.join(sorted(goals))}): give one", 2)
    return FitCommand(
        request,
        as_json="--json" in words.switches,
        oracle="--oracle" in words.switches,
        best=words.last("--best"),
    )


def refused(exc: FitFailed, verb: str, as_json: bool) -> int:
    """The service's refusal as the command's (CliError); a repository's models are listed
    first, and ``quant`` of a repository stops there: its exit code, 0."""
    from lltui.commands.remote import show_choices

    if exc.choice is not None and show_choices(exc.choice, verb, as_json):
        return 0
    raise CliError(str(exc), exc.code)


def run(args: argparse.Namespace) -> int:
    from lltui.commands.model_set import group_models
    from lltui.services.fit import FitFailed, fit

    words = split_own(list(args.argv), "fit")
    found = group_models(words.items)
    from lltui.commands.fit_plan import router_source

    several = len(found.models) >= 2 or router_source(found) is not None
    if several and not words.help:
        return _run_plan(words, found, source_spec(args))  # several models: a plan for them
    command = read_command(words, "fit", HELP, partial(source_spec, args))
    if command is None:
        return 0
    from lltui.commands.progress import Progress

    what = f"searching for --best {command.best}" if command.best else "placing the model"
    try:
        with Progress(f"fit: {what}", unit="estimates" if command.best else "") as progress:
            report = fit(
                command.request, best=command.best, oracle=command.oracle, progress=progress.step
            )
    except FitFailed as exc:
        return refused(exc, "fit", command.as_json)
    if command.as_json:
        print_json(_to_json(report))
    else:
        print(_to_text(report, command.best))
    return 0


def _run_plan(words: Split, found: ModelSet, source: str) -> int:
    from lltui.commands.fit_plan import plan_set
    from lltui.core.fit.plan_report import plan_to_text

    report = plan_set(words, found, source)
    if "--json" in words.switches:
        print_json(report.to_json())
    else:
        lines = rig_lines(report.rig, report.device_label)
        print("\n".join([*lines, plan_to_text(report.plan, report.notes)]))
    return 0


def rig_lines(rig: RigInfo | None, devices: str) -> list[str]:
    """The SIMULATED line, first, where the devices are a simulated rig's."""
    if rig is None or not rig.simulated:
        return []
    from lltui.core.monitor.simulated import simulated_line

    return [
        f"{simulated_line(rig)}; estimated for its GPUs ({devices}); --gpus cpu estimates "
        "for this machine's CPU alone, --gpus SPEC for other devices"
    ]


def _to_json(report: FitReport) -> dict[str, Any]:
    from lltui.core.fit.report import oracle_to_json, result_to_json
    from lltui.core.monitor.simulated import simulated_json

    data = result_to_json(report.result) | simulated_json(report.setup.rig)
    if report.setup.notes:
        data["notes"] = list(report.setup.notes)
    if report.oracle is not None:
        data["oracle"] = oracle_to_json(report.oracle)
    if report.setup.measured:
        data["measured"] = [
            {
                **fields_of(p, "config test measured_tps predicted_tps date source"),
            }
            for p in report.setup.measured
        ]
    if report.plan is not None:
        from lltui.commands.fit_best import plan_json

        data["planner"] = plan_json(
            report.setup.model_path, report.plan, report.llama_fit, report.fit_aborts
        )
    if report.best is not None:
        data["best"] = [
            {
                "flags": list(c.flags),
                "max_ctx": c.max_ctx,
                "decode_tps": round(c.decode_tps, 1),
                "prefill_tps": round(c.prefill_tps, 1),
                "gives_up": c.gives_up,
                "gains": c.gains or None,
            }
            for c in report.best
        ]
    if report.best is not None:
        data["llama_fit_aborts"] = report.fit_aborts
    if report.best is not None or report.plan is not None:
        lf = report.llama_fit
        data["llama_fit"] = (
            None
            if lf is None
            else {
                "flags": list(lf.flags),
                "n_ctx": lf.n_ctx,
                "decode_tps": round(lf.decode_tps, 1),
                "prefill_tps": round(lf.prefill_tps, 1),
                "why": lf.why,
            }
        )
    return data


def measured_lines(points: Any) -> list[str]:
    """This model measured on this rig beside what was predicted then (before calibrating)."""
    if not points:
        return []
    from lltui.core.speed.calibration import miss_text

    out = ["measured on this rig (uncalibrated prediction beside it):"]
    for p in points[-6:]:
        out.append(
            f"  {p.test} ({p.config}, {p.source}, {p.date}): {p.measured_tps:.1f} t/s, "
            f"predicted {p.predicted_tps:.1f}: {miss_text(p.measured_tps, p.predicted_tps)}"
        )
    return out


def _to_text(report: FitReport, goal: str | None) -> str:
    from lltui.core.fit.report import oracle_to_text, result_to_text
    from lltui.core.text import one_line

    lines = rig_lines(report.setup.rig, report.setup.device_label)
    text = "\n".join([*lines, result_to_text(report.result)])
    for line in measured_lines(report.setup.measured):
        text += f"\n{line}"
    for n in report.setup.notes:
        text += f"\nnote: {one_line(n)}"
    if report.oracle is not None:
        text += "\n\n" + oracle_to_text(report.oracle)
    if report.plan is not None:
        from lltui.commands.fit_best import plan_text

        text += "\n" + plan_text(
            report.setup.model_path, report.plan, report.llama_fit, report.fit_aborts
        )
    if report.best is not None:
        text += f"\n\nbest for {goal} (added to the flags given):"
        if not report.best:
            text += "\n  nothing this search tried fits"
        for i, c in enumerate(report.best, 1):
            text += (
                f"\n  {i}. {' '.join(c.flags)}\n     context {c.max_ctx}, "
                f"decode ~{c.decode_tps:.0f} t/s, prompt ~{c.prefill_tps:.0f} t/s; "
                f"gives up: {c.gives_up}"
            )
            if c.gains:
                text += f"\n     gives: {c.gains}"
        lf = report.llama_fit
        if report.fit_aborts:
            from lltui.commands.fit_best import aborts_line

            text += f"\n  {aborts_line(report.fit_aborts, lf)}"
        elif lf is not None:
            flags = " ".join(lf.flags) or "(the flags as given)"
            text += (
                f"\n  llama.cpp's own --fit would run: {flags}\n     context {lf.n_ctx}, "
                f"decode ~{lf.decode_tps:.0f} t/s, prompt ~{lf.prefill_tps:.0f} t/s ({lf.why})"
            )
    return text

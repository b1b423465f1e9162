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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError, print_json

if TYPE_CHECKING:
    from lltui.services.fit import FitFailed, FitReport, FitRequest

# lltui's own options, mixed freely with the llama-server flags
OWN_VALUE = ("--gpus", "--margin", "--host-free", "--cpu", "--best")
OWN_FLAGS = ("--json", "--oracle", "-h", "--help")

HELP = """\
usage: lltui fit MODEL.gguf [llama-server flags] [--gpus SPEC] [--json] [--oracle]
       lltui fit [shared flags] A.gguf [A's flags] B.gguf [B's flags] ... [--gpus SPEC] [--json]

Estimate, per device, the memory llama-server will allocate for MODEL.gguf with these
flags: weights, KV cache, compute buffers and the host output buffer, and whether it fits;
and the speed it will run at: decode and prompt tokens/s, per device and for the split, and
what bounds them (memory bandwidth, compute, a link). The GGUF header is read; the weights
are not. MODEL.gguf may also be hf:OWNER/REPO[:FILE|QUANT][@REV] or an https URL (the header
read by range requests).

llama-server flags (its spellings and defaults; other flags are accepted and ignored):
  -c -np -kvu/-no-kvu -ctk -ctv -fa -b -ub -ngl -sm -ts -mg -dev -ot --cpu-moe --n-cpu-moe
  -nkvo --swa-full -lm -nr --no-host --rpc (long forms too)
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
  --gpus SPEC      devices to estimate for instead of the local GPUs: 24GiB,24GiB | T4,T4 |
                   2xA100-80GB | "NVIDIA GeForce RTX 4090" | cpu | sim:PROFILE |
                   rpc:HOST:PORT[:cpu][=SIZE],...
  --margin MIB     memory kept per GPU for what llama.cpp does not count (CUDA context,
                   cuBLAS, the pool); default: -fitt, else 1024
  --host-free SIZE host memory available (default: what this machine has free)
  --cpu PROFILE    CPU weight repacking rules: x86 (default), x86-avx512, arm, none
  --host SPEC      the host CPU for the speed of what it runs (weights and KV left on it):
                   cores=16,isa=avx512,ghz=3.5,mem=2xDDR5-5600 (or mem=90 GB/s); default:
                   this machine's (cores, vector unit and clock from Linux; memory from
                   the DIMMs' records where readable) for local GPUs, else a desktop CPU
  --oracle         also run llama-fit-params with the same flags and show its numbers
  --best GOAL      also rank command lines that fit, searched over -ngl, --n-cpu-moe (MoE:
                   experts first), -ctk/-ctv, -ub, -c and on several GPUs -ts (each GPU's
                   layers sized to its memory after fixed costs, shown where it fits more
                   than llama.cpp's default split): context (the largest context), speed
                   (the fastest decode at -c) or gpu-only (nothing on the CPU)
  --json           print JSON
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


@dataclass
class _Words:
    model: str | None = None
    llama: list[str] = field(default_factory=list)
    values: dict[str, str] = field(default_factory=dict)  # lltui's own options with a value
    switches: set[str] = field(default_factory=set)
    stray: str | None = None


def split_args(argv: list[str], verb: str = "fit") -> _Words:
    """The model path, the llama-server flags and lltui's own options of the command line.

    A llama-server flag takes as many values as the flag table says; one it does not know
    is refused here, naming the flag (its value would otherwise read as a second model)."""
    from lltui.core.llama.flag_table import is_flag_token, pinned_arity, unknown_flag_message

    out = _Words()
    own_words = (*OWN_VALUE, *OWN_FLAGS)
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in OWN_FLAGS:
            out.switches.add(a)
            i += 1
            continue
        if a == "--host" and i + 1 < len(argv) and "=" in argv[i + 1]:
            # lltui's --host (cores=16,mem=...); llama-server's --host ADDRESS has no "="
            out.values[a] = argv[i + 1]
            i += 2
            continue
        if a in OWN_VALUE:
            if i + 1 >= len(argv):
                raise CliError(f"{verb}: {a} expects a value", 2)
            out.values[a] = argv[i + 1]
            i += 2
            continue
        if is_flag_token(a):
            n = pinned_arity(a)
            if n is None:
                raise CliError(f"{verb}: {unknown_flag_message(a)}", 2)
            values = argv[i + 1 : i + 1 + n]
            if any(w in own_words for w in values):
                values = []  # lltui's own option is not this flag's value: the parser says so
            out.llama += [a, *values]
            i += 1 + len(values)
            continue
        if out.model is not None:
            # reported after the flags are read: a flag's bad value may be why it is here
            out.stray = out.stray or a
            i += 1
            continue
        out.model = a
        i += 1
    return out


def read_command(argv: list[str], verb: str, help_text: str) -> FitCommand | None:
    """The command line shared by ``fit`` and ``quant``, checked; None after --help. Bad
    input raises CliError (exit 2) with one line."""
    from lltui.core.llama.args import parse_llama_args
    from lltui.core.units import parse_size
    from lltui.services.fit import FitRequest

    words = split_args(argv, verb)
    if words.switches & {"-h", "--help"}:
        sys.stdout.write(help_text)
        return None
    try:
        # LLAMA_ARG_* variables set llama-server's defaults: read them as it does
        args = parse_llama_args(words.llama, env=os.environ)
    except ValueError as exc:
        raise CliError(f"{verb}: {exc}", 2) from None
    if words.stray is not None:
        raise CliError(f"{verb}: unexpected argument {words.stray!r} (one model file only)", 2)
    model = words.model or args.model_path
    if not model:
        raise CliError(f"{verb}: no model: give MODEL.gguf (or -m MODEL.gguf)", 2)
    margin: float | None = None
    if "--margin" in words.values:
        text = words.values["--margin"]
        try:
            margin = float(text)
            int(margin * 1024 * 1024)
        except (ValueError, OverflowError):
            raise CliError(f"{verb}: --margin expects MiB, got {text!r}", 2) from None
    host_free: int | None = None
    if "--host-free" in words.values:
        try:
            host_free = parse_size(words.values["--host-free"])
        except ValueError as exc:
            raise CliError(f"{verb}: --host-free: {exc}", 2) from None
    request = FitRequest(
        model=model,
        args=args,
        gpus=words.values.get("--gpus"),
        margin_mib=margin,
        host_free_bytes=host_free,
        cpu_profile=words.values.get("--cpu") or "x86",
        host=words.values.get("--host"),
        verb=verb,
    )
    return FitCommand(
        request,
        as_json="--json" in words.switches,
        oracle="--oracle" in words.switches,
        best=words.values.get("--best"),
    )


def refused(exc: FitFailed, verb: str, as_json: bool) -> int:
    """The service's refusal as the command's (CliError); a repository's models are listed
    first, and ``quant`` of a repository stops there: its exit code, 0."""
    from lltui.commands.remote import show_choices

    if exc.choice is not None and show_choices(exc.choice, verb, as_json):
        return 0
    raise CliError(str(exc), exc.code)


def run(args: argparse.Namespace) -> int:
    from lltui.commands.fit_plan import model_set, run_plan
    from lltui.services.fit import FitFailed, fit

    found = model_set(list(args.argv))
    if found is not None and not found.switches & {"-h", "--help"}:
        return run_plan(found)  # several models: a plan for the set
    command = read_command(list(args.argv), "fit", HELP)
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


def _to_json(report: FitReport) -> dict[str, Any]:
    from lltui.core.fit.report import oracle_to_json, result_to_json

    data = result_to_json(report.result)
    if report.setup.notes:
        data["notes"] = list(report.setup.notes)
    if report.oracle is not None:
        data["oracle"] = oracle_to_json(report.oracle)
    if report.setup.measured:
        data["measured"] = [
            {
                "config": p.config,
                "test": p.test,
                "measured_tps": p.measured_tps,
                "predicted_tps": p.predicted_tps,
                "date": p.date,
                "source": p.source,
            }
            for p in report.setup.measured
        ]
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

    text = result_to_text(report.result)
    for line in measured_lines(report.setup.measured):
        text += f"\n{line}"
    for n in report.setup.notes:
        text += f"\nnote: {one_line(n)}"
    if report.oracle is not None:
        text += "\n\n" + oracle_to_text(report.oracle)
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
        if lf is not None:
            flags = " ".join(lf.flags) or "(the flags as given)"
            text += (
                f"\n  llama.cpp's own --fit would run: {flags}\n     context {lf.n_ctx}, "
                f"decode ~{lf.decode_tps:.0f} t/s, prompt ~{lf.prefill_tps:.0f} t/s ({lf.why})"
            )
    return text

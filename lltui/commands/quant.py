"""``lltui quant MODEL.gguf [llama-server flags] [--gpus SPEC] [--json]``: the size of every
llama-quantize type of this model (from its own per-tensor rules) and, for these flags and
devices, whether it fits and the largest context it leaves. Any GGUF of the model will do."""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from lltui.commands import print_json, source_spec
from lltui.commands.own_options import options_help

HELP = f"""\
usage: lltui quant MODEL.gguf [llama-server flags] [--gpus SPEC] [--json]

For every type llama-quantize makes that suits this model (Q8_0 ... IQ1_S): the exact file
size it would write, its bits per weight, whether it fits the devices with these
llama-server flags, the largest context that fits and the predicted decode speed. Any
quantization of the model can be the input: only its tensor names and shapes are used.
TQ1_0/TQ2_0 are listed only for ternary (BitNet) models and MXFP4_MOE only for MoE models.
MODEL.gguf may also be hf:OWNER/REPO[:FILE|QUANT][@REV] or an https URL; hf:OWNER/REPO alone
lists the repository's GGUF files and their sizes.

columns:
  type        llama-quantize's name for the type; * = needs an importance matrix
              (llama-quantize --imatrix FILE): it refuses to make the type without one
  file        the size of the file llama-quantize writes
  bpw         bits per weight: tensor bytes x 8 / parameters
  fits        yes: every device holds its share with these flags
  max ctx     the largest context (-c) that still fits; - when none does
  t/s         predicted decode tokens/s, one sequence, empty context (like llama-bench
              tg128), from each GPU's memory bandwidth (see lltui fit's speed line)
  per device  memory llama.cpp allocates on each GPU plus the margin kept for the CUDA
              context, against the memory free on it (GiB): CUDA0 13.3/15.0

lltui options:
{options_help("quant")}
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "quant",
        help="the size of every quant of a GGUF, and which fit the GPUs with what context",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        prefix_chars="\x00",  # every word reaches run() as typed (see fit)
    )
    p.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lltui.commands.fit import read_command, refused, rig_lines
    from lltui.commands.progress import Progress
    from lltui.core.fit.quant_table import best_fitting
    from lltui.core.gc_pause import gc_paused
    from lltui.core.gguf.ref_kind import display_url
    from lltui.services.fit import FitFailed, prepare, quant_table

    command = read_command(list(args.argv), "quant", HELP, partial(source_spec, args))
    if command is None:
        return 0
    if command.best is not None:
        from lltui.commands.quant_best import run_best

        return run_best(command)
    try:
        # the table (and reading a 150k-token vocabulary) makes some 10^5 small objects, none
        # in a cycle: the collector's passes over them cost more than a tenth of the run
        with gc_paused(), Progress(f"quant: reading {display_url(command.request.model)}"):
            setup = prepare(command.request)
        with gc_paused(), Progress("quant: placing each type") as progress:
            report = quant_table(command.request, setup, on_row=progress.step)
    except FitFailed as exc:
        return refused(exc, "quant", command.as_json)
    where = report.setup.device_label
    if command.as_json:
        from lltui.core.fit.report import model_to_json, offered_to_json
        from lltui.core.monitor.simulated import simulated_json

        # the model read: the input file itself (the rows are what-ifs, with no file yet)
        data: dict[str, Any] = {
            "model": model_to_json(report.summary),
            "devices": offered_to_json(setup.devices),
            "rows": [q.to_json() for q in report.rows],
            "skipped": [{"type": t, "reason": why} for t, why in report.skipped],
        } | simulated_json(setup.rig)
        if setup.notes:
            data["notes"] = list(setup.notes)
        data["warnings"] = list(report.warnings)
        print_json(data)
        return 0
    from lltui.core.text import one_line

    model_path = command.request.model
    for line in rig_lines(setup.rig, where):
        print(line)
    print("\n".join(quant_lines(model_path, where, report.rows, best_fitting(report.rows))))
    for t, why in report.skipped:
        print(f"not listed: {t} ({why})")
    for n in setup.notes:
        print(f"note: {one_line(n)}")
    for w in report.warnings:
        print(f"warning: {one_line(w)}")
    return 0


# the legend, a part each: the columns always, a mark only where a row shows it
LEGEND = (
    ("*", "* needs an importance matrix (llama-quantize --imatrix)"),
    ("", "t/s: predicted decode speed; per device: GiB allocated + margin / GiB free"),
    ("?", "fits ?: on a device whose free memory is not known"),
)


def quant_lines(model_path: str, where: str, table: Any, best: Any) -> list[str]:
    """The text table: one line per type, then the legend."""
    from lltui.core.gguf.ref_kind import display_url
    from lltui.core.units import GIB, fmt_bytes

    lines = [f"{display_url(model_path)}: every llama-quantize type on {where}"]
    lines.append(
        f"{'type':<10} {'file':>10} {'bpw':>6}  {'fits':<4} {'max ctx':>8} {'t/s':>6}  per device"
    )
    for q in table:
        row = q.row
        name = row.name + ("*" if row.requires_imatrix else "")
        if q.result is None:
            lines.append(f"{name:<10} {'-':>10} {'-':>6}  {'-':<4} {'-':>8} {'-':>6}  {q.error}")
            continue
        per_dev = "  ".join(
            f"{d.name} {(d.total_bytes + d.unaccounted_bytes) / GIB:.1f}"
            + (f"/{d.free_bytes / GIB:.1f}" if d.free_bytes is not None else "")
            for d in q.result.devices
            if d.kind != "cpu"
        )
        fits = q.fits_word
        ctx = str(q.max_ctx) if q.max_ctx else "-"
        tps = f"{q.decode_tps:.0f}" if q.decode_tps and q.fits else "-"
        mark = "  <- most bits that fit" if best is q else ""
        if row.above_source:
            mark = f"  (adds nothing: {row.above_source})"
        lines.append(
            f"{name:<10} {fmt_bytes(row.file_bytes):>10} {row.bits_per_weight:>6.2f}  "
            f"{fits:<4} {ctx:>8} {tps:>6}  {per_dev}{mark}"
        )
    marks = {"*": any(q.row.requires_imatrix for q in table)}
    marks["?"] = any(q.result is not None and q.fits_word == "?" for q in table)
    lines.append("; ".join(text for mark, text in LEGEND if marks.get(mark, True)))
    calibrated = next((q.result.speed.calibrated for q in table if q.result and
                       q.result.speed and q.result.speed.calibrated), None)  # fmt: skip
    if calibrated:
        lines.append(f"t/s {calibrated}")
    return lines

"""``lltui quant MODEL.gguf [llama-server flags] [--gpus SPEC] [--json]``: the size of every
llama-quantize type of this model (from its own per-tensor rules) and, for these flags and
devices, whether it fits and the largest context it leaves. Any GGUF of the model will do."""

from __future__ import annotations

import argparse
from typing import Any

from lltui.commands import print_json

HELP = """\
usage: lltui quant MODEL.gguf [llama-server flags] [--gpus SPEC] [--json]

For every type llama-quantize makes (Q8_0 ... IQ1_S): the exact file size it would write for
this model, its bits per weight, whether it fits the devices with these llama-server flags,
and the largest context that fits. Any quantization of the model can be the input: only its
tensor names and shapes are used. MODEL.gguf may also be hf:OWNER/REPO[:FILE|QUANT][@REV]
or an https URL; hf:OWNER/REPO alone lists the repository's GGUF files and their sizes.

lltui options: --gpus SPEC (as for lltui fit), --margin MIB, --json
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
    from lltui.commands.fit import read_inputs
    from lltui.core.fit.quant_fit import best_fitting, quant_table
    from lltui.core.fit.report import model_to_json
    from lltui.core.units import MIB, fmt_bytes
    from lltui.sources.fit_devices import describe

    inputs = read_inputs(list(args.argv), "quant", HELP)
    if inputs is None:
        return 0
    model_path, model, settings = inputs.model_path, inputs.model, inputs.settings
    devices, notes, own, opts = inputs.devices, inputs.notes, inputs.own, inputs.options
    table = quant_table(model, settings, devices, opts)
    summary = table[0].result.model if table and table[0].result else None
    if own["json"]:
        data: dict[str, Any] = {
            "model": model_to_json(summary) if summary else {"path": model_path},
            "devices": describe(devices),
            "rows": [q.to_json() for q in table],
        }
        if notes:
            data["notes"] = notes
        print_json(data)
        return 0
    best = best_fitting(table)
    lines = [f"{model_path}: every llama-quantize type on {describe(devices)}"]
    lines.append(f"{'type':<9} {'file':>10} {'bpw':>6}  {'fits':<5} {'max ctx':>8}  per device")
    for q in table:
        row = q.row
        if q.result is None:
            lines.append(f"{row.name:<9} {'-':>10} {'-':>6}  {'-':<5} {'-':>8}  {q.error}")
            continue
        per_dev = "  ".join(
            f"{d.name} {d.total_bytes / MIB:.0f}" for d in q.result.devices if d.kind != "cpu"
        )
        fits = "yes" if q.fits else "no"
        ctx = str(q.max_ctx) if q.max_ctx else "-"
        mark = "  <- most bits that fit" if best is q else ""
        lines.append(
            f"{row.name:<9} {fmt_bytes(row.file_bytes):>10} {row.bits_per_weight:>6.2f}  "
            f"{fits:<5} {ctx:>8}  {per_dev}{mark}"
        )
    for n in notes:
        lines.append(f"note: {n}")
    print("\n".join(lines))
    return 0

"""``lltui explain LOG [--model PATH|hf:...|--model-from-log] [--build N] [--json]``: a log beside
lltui's prediction for the same flags and build, and why a failed load failed."""

from __future__ import annotations

import argparse
from typing import Any

from lltui.commands import CliError, print_json

HELP = """\
Read a llama.cpp log (llama-server, llama-cli, llama-bench -v, llama-mtmd-cli; any build from
2024 on; timestamps, colour, cut or pasted with a prompt) and report, per device, what it
allocated (weights, KV cache, recurrent state, compute, output, host buffers), the free
memory it found, and, where the model's GGUF header can be read (--model PATH or
hf:OWNER/REPO[:QUANT], or with --model-from-log the path the log names), what lltui predicts
for the same flags and build, line by line. A failed load says which device ran out, by how
much, and a command line that fits. A log is data: the model it names is not opened unless
--model-from-log is given (it may be a URL, a hub reference, a pipe), and never a pipe or
device.

The build comes from --build, else the log's build line, else its line formats, else the
llama-server found here; the figures follow that build's memory rules, and the answer says
which of its rules lltui does not model. LOG may be - for standard input.
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="a llama.cpp log beside lltui's prediction; why a load failed",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("log", metavar="LOG", help="the log file (- for standard input)")
    p.add_argument(
        "--model",
        metavar="PATH|hf:REF",
        default=None,
        help="the model's GGUF (the log's own path is not opened without --model-from-log)",
    )
    p.add_argument(
        "--model-from-log",
        action="store_true",
        help="read the model file the log names (a local path, or a URL or hf: it names)",
    )
    p.add_argument(
        "--build",
        metavar="N",
        type=_build_number,
        default=None,
        help="the llama.cpp build that wrote the log (bNNNN or NNNN)",
    )
    p.add_argument("--json", action="store_true", help="print JSON (with the case to attach)")
    p.set_defaults(func=run)


def _build_number(text: str) -> int:
    from lltui.core.llama.builds import parse_build

    try:
        return parse_build(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    from lltui.core.explain.report import report_to_json, report_to_text
    from lltui.services.explain import ExplainFailed, ExplainRequest, explain

    request = ExplainRequest(
        log=args.log, model=args.model, build=args.build, model_from_log=args.model_from_log
    )
    try:
        report = explain(request)
    except ExplainFailed as exc:  # (with --json, the CLI prints it as {error, exit_code})
        raise CliError(str(exc), exc.code) from None
    if args.json:
        print_json(report_to_json(report))
    else:
        print(report_to_text(report))
    return 0

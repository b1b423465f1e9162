"""``lltui report``: one Markdown file for an issue thread (the rig, its topology, NCCL, the
llama-server's build, flags, load and speed beside lltui's prediction, the alerts raised now),
secrets and user names masked."""

from __future__ import annotations

import argparse
import os
from typing import Any

from lltui.commands import CliError, add_source_option, print_json, source_spec
from lltui.core.text import is_digits


def register(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="one Markdown file for an issue thread: rig, topology, NCCL, llama.cpp, alerts",
        description="Secrets (API keys, tokens), the user's name and other users' command "
        "lines are left out.",
    )
    p.add_argument("--server", metavar="URL|PID", help="the llama-server to report on")
    p.add_argument("--log", metavar="FILE", help="its log (else the one lltui launch left)")
    p.add_argument("--out", metavar="FILE", help="write the report here (else stdout)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_source_option(p, sub=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lltui.services.report import ReportRequest, build_report

    if args.log is not None and not os.path.isfile(args.log):
        what = "is a directory" if os.path.isdir(args.log) else "no such file"
        raise CliError(f"report: {args.log}: {what}", 2)
    if args.out and os.path.isdir(args.out):  # (said before the seconds of gathering)
        raise CliError(f"report: --out {args.out}: is a directory", 2)
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        raise CliError(f"report: --out {args.out}: no folder {os.path.dirname(args.out)}", 2)
    # the report would replace what it reads
    if args.out and args.log and os.path.exists(args.out) and os.path.samefile(args.out, args.log):
        raise CliError(f"report: --out {args.out} is the log being reported", 2)
    server = args.server
    if server is not None and (not server.strip() or server.startswith("-")):
        raise CliError(f"report: --server {server!r}: expected a URL, HOST:PORT or a pid", 2)
    if server is not None and not is_digits(server) and "://" not in server:
        server = "http://" + server
    source = source_spec(args)
    from lltui.services.rig import check_source

    try:  # a mistyped --source is bad input (2), as for gpus and topo; a dead one is a section
        check_source(source)
    except ValueError as exc:
        raise CliError(f"report: {exc}", 2) from None
    request = ReportRequest(
        source=source, server=server, log=args.log,
        api_key=os.environ.get("LLAMA_API_KEY"),
    )  # fmt: skip
    report = build_report(request)
    if args.json:
        if args.out:
            import json

            _write(args.out, json.dumps(report.to_json(), indent=2) + "\n")
        else:
            print_json(report.to_json())
        return 0
    text = report.to_markdown()
    if args.out:
        _write(args.out, text)
    else:
        print(text)
    return 0


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise CliError(f"report: cannot write {path}: {exc.strerror or exc}", 1) from None

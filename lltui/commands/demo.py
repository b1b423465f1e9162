"""``lltui demo [DIR|FILE.gguf] [--json]``: write a small model to try lltui on, offline, and
print the command lines to try with it."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from lltui.commands import CliError, print_json

HELP = (
    "Write a small GGUF of llama.cpp's llama architecture (4 layers, 5 MiB, random weights: "
    "llama-server loads and serves it, what it says is noise) into DIR (default: here) or to "
    "FILE.gguf, in a folder that is there already (none is made), and print the fit, quant "
    "and launch command lines to try on it. No network."
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo", help="write a small model to try lltui on, offline", description=HELP
    )
    p.add_argument("where", nargs="?", default=None, metavar="DIR|FILE.gguf")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def tries(path: str) -> list[tuple[list[str], str]]:
    """The command lines to try on the model at ``path``, each with what it shows."""
    return [
        (["lltui", "fit", path], "memory per device and speed, on the rig in use"),
        (
            ["lltui", "fit", path, "--gpus", "T4,T4", "-c", "4096", "--best", "context"],
            "on two T4s, and the command lines that fit best",
        ),
        (["lltui", "quant", path], "every quantization's size, fit and largest context"),
        (["lltui", "launch", path, "--dry-run"], "the exact llama-server command, nothing started"),
        (
            ["lltui", "launch", path, "-c", "2048"],
            "start it (llama-server: lltui llama install, or on PATH); Ctrl-C stops it",
        ),
        (["lltui"], "the app: 4 opens the fit view, 5 the launch view; type the path there"),
    ]


def run(args: argparse.Namespace) -> int:
    from lltui.core.units import fmt_bytes
    from lltui.services.demo import DemoError, make_demo

    try:
        demo = make_demo(args.where)
    except ValueError as exc:
        raise CliError(f"demo: {exc}", 2) from None
    except DemoError as exc:
        raise CliError(f"demo: {exc}", 1) from None
    path = str(demo.path)
    commands = tries(path)
    if args.json:
        print_json(
            {
                "path": path,
                "bytes": demo.size,
                "architecture": demo.architecture,
                "n_layer": demo.n_layer,
                "n_ctx_train": demo.n_ctx_train,
                "commands": [argv for argv, _what in commands],
            }
        )
        return 0
    print(
        f"wrote {path}: a {demo.architecture} model, {demo.n_layer} layers, trained context "
        f"{demo.n_ctx_train}, {fmt_bytes(demo.size)}, random weights (it loads and serves; "
        "what it says is noise)"
    )
    print("\ntry:")
    lines = [(" ".join(shlex.quote(w) for w in argv), what) for argv, what in commands]
    width = max(len(line) for line, _ in lines)
    for line, what in lines:
        print(f"  {line.ljust(width)}  # {what}")
    return 0

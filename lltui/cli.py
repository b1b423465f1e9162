"""Command line entry point. Subcommands print text or ``--json``; the app is imported lazily."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from lltui import __version__
from lltui.commands import CliError, add_replay_options, add_source_option
from lltui.commands.output import error_line, printable_output

# Each module exposes register(subparsers) and sets ``func`` on its parser.
COMMAND_MODULES: tuple[str, ...] = (
    "lltui.commands.gpus",
    "lltui.commands.doctor",
    "lltui.commands.nccl",
    "lltui.commands.topo",
    "lltui.commands.llama",
    "lltui.commands.launch",
    "lltui.commands.fit",
    "lltui.commands.quant",
    "lltui.commands.exporter",
)

# subcommands that sample the GPUs, and so can --record what they saw
RECORDING_COMMANDS = ("gpus",)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CliError(f"{self.prog}: {message}", 2)


def add_source_options(p: argparse.ArgumentParser) -> None:
    add_source_option(p)
    p.add_argument("--interval", type=float, default=None, help="seconds between samples")
    p.add_argument(
        "--hosts",
        metavar="FILE",
        default=None,
        help="a fleet: one ssh host a line ([user@]host[:port]), watched side by side "
        "(--source also takes a list: smi:h1,smi:h2,nvml)",
    )
    p.add_argument(
        "--host-timeout",
        type=float,
        metavar="S",
        default=None,
        help="a fleet host that has not answered one poll in S seconds is down (default 10)",
    )
    add_replay_options(p)


def command_names() -> tuple[str, ...]:
    """The subcommands, by the last part of their module's name."""
    return tuple(name.rsplit(".", 1)[1] for name in COMMAND_MODULES)


def wants_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` may name a subcommand or ask for help: only then are the subcommand
    modules imported (their imports cost the app's start about a fifth of its CPU time)."""
    names = set(command_names())
    return any(arg in names or arg in ("-h", "--help") for arg in argv)


def build_parser(with_commands: bool = True) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lltui",
        description="A terminal control room for llama.cpp on several NVIDIA GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"lltui {__version__}")
    add_source_options(parser)
    parser.add_argument("--theme", default=None, help="dark, light, high-contrast or a user theme")
    parser.add_argument(
        "--record",
        metavar="FILE",
        default=None,
        help="record samples as JSONL (a private file; secrets in command lines written as ***)",
    )
    parser.add_argument(
        "--record-full",
        action="store_true",
        help="with --record: keep command lines whole, secrets included",
    )
    parser.add_argument("--config", metavar="FILE", default=None, help="config file to read")
    parser.add_argument(
        "--screenshot", metavar="FILE.svg", default=None, help="save one screen as SVG and exit"
    )
    parser.add_argument("--size", default="120x40", help="terminal size for --screenshot, WxH")
    parser.add_argument("--view", default=None, help="view to open: monitor, ...")
    if not with_commands:
        parser.set_defaults(command=None)
        return parser
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = build_parser(with_commands=wants_command(args_list)).parse_args(args_list)
        except CliError:  # a usage error: the full parser says it (lists the subcommands)
            args = build_parser().parse_args(args_list)
        if args.record_full and not args.record:
            raise CliError("--record-full goes with --record FILE", 2)
        if args.command is None:
            from lltui.commands.ui import run_app

            return run_app(args)
        if args.record and args.command not in RECORDING_COMMANDS:
            raise CliError(
                f"--record keeps GPU samples: use it with the monitor or `lltui gpus`, "
                f"not `lltui {args.command}`",
                2,
            )
        with printable_output():
            return int(args.func(args))
    except CliError as exc:
        print(error_line(str(exc)), file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `lltui gpus | head`: the reader went away; say nothing.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as exc:  # a bug of ours: one line unless asked for the traceback
        if os.environ.get("LLTUI_DEBUG"):
            raise
        print(
            error_line(
                f"internal error: {type(exc).__name__}: {exc} (set LLTUI_DEBUG=1 for details)"
            ),
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())

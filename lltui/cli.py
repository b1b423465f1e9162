"""Command line entry point. Subcommands print text or ``--json``; the app is imported lazily."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from lltui import __version__
from lltui.commands import CliError, add_replay_options, add_source_option, check_global_values
from lltui.commands.output import error_line, internal_error_line, printable_output

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
    "lltui.commands.explain",
    "lltui.commands.bench",
    "lltui.commands.exporter",
    "lltui.commands.watch",
    "lltui.commands.serve",
    "lltui.commands.demo",
    "lltui.commands.report",
)

# what lltui runs and then exits, its objects living until then, next to none in a cycle
ONE_SHOT = ("fit", "quant")
VIEW_NAMES = ("monitor", "topology", "nccl", "fit", "launch", "fleet")  # the app's views
# subcommands that sample the GPUs, and so can --record what they saw
RECORDING_COMMANDS = ("gpus",)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exit code 2, and takes options
    only as spelled: an abbreviation (``--host`` for ``--hosts``) would swallow the
    llama-server flags the subcommands pass on."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # the width given: argparse's own default imports shutil (and with it bz2 and lzma:
        # 8 ms of every command's start) to ask the terminal's width
        formatter = self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]
        color = getattr(self, "color", None)  # Python 3.14: help in colour, as its own does
        if color is not None:
            formatter._set_color(color)  # type: ignore[attr-defined]
        return formatter

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CliError(f"{self.prog}: {message}", 2)


def _help_width() -> int:
    """The terminal's columns less two, as argparse takes them (COLUMNS, else the terminal
    standard output is, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


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
        help="a host over ssh (smi:HOST, amd:HOST, a fleet's) that has not answered one poll "
        "in S seconds is down (default 10 in a fleet, 20 alone)",
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


def named_command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` most likely names (its first word that is one), where no
    help is asked before it: the parser then registers that one alone (each module is an
    import). A guess only: a usage error is said by the full parser."""
    names = set(command_names())
    for arg in argv:
        if arg in ("-h", "--help"):
            return None
        if arg in names:
            return arg
    return None


def build_parser(with_commands: bool = True, only: str | None = None) -> argparse.ArgumentParser:
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
    # (spelled here: the views' table imports Textual; a test holds the two alike)
    parser.add_argument("--view", default=None, help=f"view to open: {', '.join(VIEW_NAMES)}")
    parser.add_argument(
        "--readonly",
        action="store_true",
        default=None,
        help="no signal, launch, stop or file written from the app (shared screens); also "
        "readonly = true in the config",
    )
    # set by `lltui serve` for the app each browser tab runs: launches from it carry no flag
    # that names a file unless the config allows it
    parser.add_argument("--served", action="store_true", default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--energy-price",
        type=float,
        default=None,
        metavar="PRICE",
        help="price of a kWh, to show what the GPUs' energy costs (config: energy_price)",
    )
    if not with_commands:
        parser.set_defaults(command=None)
        return parser
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        if only is None or name.endswith(f".{only}"):
            importlib.import_module(name).register(sub)
    return parser


def _before_command(
    parser: argparse.ArgumentParser, words: Sequence[str]
) -> tuple[int | None, str | None]:
    """Where the subcommand stands (the first command word no option takes as its value), and
    the first word before it that looks like an option lltui does not have (argparse would
    take the word after it for the subcommand and say that instead)."""
    names = set(command_names())
    i = 0
    while i < len(words):
        word = words[i]
        if word in names:
            return i, None
        action = parser._option_string_actions.get(word.split("=", 1)[0])
        if action is None:
            return None, word if word.startswith("--") else None
        takes = action.nargs if isinstance(action.nargs, int) else (0 if action.nargs == 0 else 1)
        i += 1 if "=" in word else 1 + takes
    return None, None


def _misplaced_option(parser: argparse.ArgumentParser, words: Sequence[str]) -> str | None:
    """The first word after the subcommand that is an option of lltui itself and not of
    that command (``lltui fit M.gguf --source sim:4xl4``): fit, quant and launch would blame
    llama-server for it, the others say only that they do not know it."""
    at, _unknown = _before_command(parser, words)
    subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    command = subs.choices.get(words[at]) if subs is not None and at is not None else None
    if command is None or at is None:
        return None
    for word in words[at + 1 :]:
        name = word.split("=", 1)[0]
        lltuis = name in parser._option_string_actions and name not in ("--help", "--version")
        if lltuis and name not in command._option_string_actions and name.startswith("--"):
            return (
                f"{words[at]}: {name} is an option of lltui itself: give it before "
                f"the command (lltui {name} ... {words[at]} ...)"
            )
    return None


def _json_error(line: str, code: int) -> None:
    """With --json, a failure is also a JSON object on standard output: scripts read one
    stream, and an empty one is not an answer."""
    import json

    message = line.removeprefix("lltui: ")
    with contextlib.suppress(OSError, ValueError):  # the reader went away: stderr stands
        print(json.dumps({"error": message, "exit_code": code}), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is not None or named_command(sys.argv[1:]) not in ONE_SHOT:
        return _main(list(sys.argv[1:] if argv is None else argv))
    # `lltui fit` or `lltui quant` as the program: the collector's passes over the modules
    # and estimates as they pile up, and the exit's full pass over all of them, cost close to
    # a tenth of a plain fit's CPU and find nothing to free. None while it runs; and frozen out
    # of the exit's pass (a caller's main([...]), a test's, collects as usual)
    gc.disable()
    try:
        return _main(sys.argv[1:])
    finally:
        gc.freeze()


def _main(args_list: list[str]) -> int:
    try:
        _at, unknown = _before_command(build_parser(with_commands=False), args_list)
        if unknown is not None:
            raise CliError(f"lltui: unknown option {unknown} (see lltui --help)", 2)
        parser = build_parser(wants_command(args_list), named_command(args_list))
        if (misplaced := _misplaced_option(parser, args_list)) is not None:
            raise CliError(misplaced, 2)
        try:
            args = parser.parse_args(args_list)
        except CliError:  # a usage error: the full parser says it (lists the subcommands)
            args = build_parser().parse_args(args_list)
        if args.record_full and not args.record:
            raise CliError("--record-full goes with --record FILE", 2)
        check_global_values(args)
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
        line = error_line(str(exc))
        print(line, file=sys.stderr)
        if "--json" in args_list and not exc.answered:
            _json_error(line, exc.code)
        return exc.code
    except KeyboardInterrupt as exc:  # Ctrl-C, or a stop signal raised as one (StopSignal)
        return int(getattr(exc, "exit_code", 130))
    except BrokenPipeError:
        # `lltui gpus | head`: the reader went away, which is no failure of ours: say
        # nothing, exit 0; what is left to flush at exit goes to /dev/null (no "Exception
        # ignored" line then)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:  # a bug of ours: one line unless asked for the traceback
        if os.environ.get("LLTUI_DEBUG"):
            raise
        line = internal_error_line(exc)
        print(line, file=sys.stderr)
        if "--json" in args_list:
            _json_error(line, 1)
        return 1


if __name__ == "__main__":
    sys.exit(main())

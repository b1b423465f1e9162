"""CLI subcommands: each module registers its parser and runs it.

Modules here import only the standard library at top level so ``lltui SUBCOMMAND --help``
and ``lltui fit --json`` start fast; heavy imports go inside ``run``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lltui.config import Settings
    from lltui.services.rig import ReplayOptions, RigRequest


class CliError(Exception):
    """One line for the user and an exit code (1 failure, 2 bad input or usage).
    ``answered``: standard output already holds the JSON answer (with --json, a failure is
    otherwise printed there as ``{"error": ..., "exit_code": ...}`` too)."""

    def __init__(self, message: str, code: int = 1, *, answered: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.answered = answered


def print_json(obj: Any, *, line: bool = False) -> None:
    """Strict JSON: a NaN or infinity (a reading no device gives) is null, never the
    ``NaN``/``Infinity`` tokens other tools' parsers refuse. ``line``: on one line (a
    command whose --json is JSON lines)."""
    json.dump(_finite(obj), sys.stdout, indent=None if line else 2, allow_nan=False)
    sys.stdout.write("\n")


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def add_replay_options(p: argparse.ArgumentParser, default: object = None) -> None:
    """``--replay-*``. A subcommand passes argparse.SUPPRESS so that, when not given there,
    it leaves what was given before the subcommand alone."""
    flag_default = False if default is None else default
    p.add_argument(
        "--replay-speed", type=float, default=default, metavar="X", help="replay at X times"
    )
    p.add_argument(
        "--replay-step",
        action="store_true",
        default=flag_default,
        help="replay one recorded sample per poll",
    )
    p.add_argument("--replay-loop", action="store_true", default=flag_default, help="loop a replay")


def add_fleet_options(p: argparse.ArgumentParser) -> None:
    """``--hosts`` and ``--host-timeout`` after a subcommand's name, as the global ones."""
    p.add_argument(
        "--hosts", dest="sub_hosts", metavar="FILE", default=None, help="as the global --hosts"
    )
    p.add_argument(
        "--host-timeout",
        dest="sub_host_timeout",
        type=float,
        metavar="S",
        default=None,
        help="as the global --host-timeout",
    )


def check_global_values(args: argparse.Namespace) -> None:
    """The global options' values, whatever the command (one that does not use them too):
    one line and exit 2 for a bad one, as the app says it."""
    interval = getattr(args, "interval", None)
    energy_price = getattr(args, "energy_price", None)
    host_timeout = getattr(args, "host_timeout", None)
    replay_speed = getattr(args, "replay_speed", None)
    try:
        if interval is not None:
            from lltui.config import check_interval

            check_interval(interval, "command line", bool(getattr(args, "replay_step", False)))
        if energy_price is not None:
            from lltui.config import check_values

            check_values({"energy_price": energy_price}, "command line")
        if host_timeout is not None or replay_speed is not None:
            from lltui.services.rig import check_host_timeout, check_replay_speed

            if host_timeout is not None:
                check_host_timeout(host_timeout)
            if replay_speed is not None:
                check_replay_speed(replay_speed)
    except ValueError as exc:  # (ConfigError is one)
        raise CliError(str(exc), 2) from None


def replay_options(args: argparse.Namespace) -> ReplayOptions:
    """The ``--replay-*`` options of a parsed command line (defaults where absent)."""
    from lltui.services.rig import ReplayOptions

    return ReplayOptions(
        speed=getattr(args, "replay_speed", None) or 1.0,
        stepped=bool(getattr(args, "replay_step", False)),
        loop=bool(getattr(args, "replay_loop", False)),
    )


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings of the config file (``--config``) and LLTUI_* variables; one line and
    exit 2 for a bad one."""
    from lltui.config import ConfigError, load_settings

    try:
        return load_settings(None, path=getattr(args, "config", None))
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


def command_interval(args: argparse.Namespace) -> float:
    """A command's ``--interval`` (its own, else the global one, else LLTUI_INTERVAL and the
    config file's, as the app resolves it; 1 s), under the one rule config.check_interval
    has for them all; else one line and exit 2."""
    from lltui.config import ConfigError, check_interval

    value = getattr(args, "sub_interval", None)
    if value is None:
        value = getattr(args, "interval", None)
    if value is None:
        value = settings_of(args).interval
    try:
        return check_interval(value, "command line", bool(getattr(args, "replay_step", False)))
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None


def check_llama_urls(urls: Sequence[str]) -> None:
    """``--llama`` URLs: http(s), with a host and a port that is a port (one line, exit 2)."""
    from lltui.core.cmdline.address import AddressError, check_server_url

    for url in urls:
        try:
            check_server_url(url)
        except AddressError as exc:
            raise CliError(f"--llama {exc}", 2) from None


def llama_api_key(path: str | None) -> str | None:
    """The key for ``--llama`` servers: the first line of ``--llama-api-key-file``, else
    LLAMA_API_KEY (one line and exit 2 for a file that cannot be read as text)."""
    import os

    from lltui.paths import NotASmallFile, read_small_file

    if not path:
        return os.environ.get("LLAMA_API_KEY") or None
    try:
        key = read_small_file(path).decode("utf-8").split("\n", 1)[0].strip()
    except OSError as exc:
        raise CliError(f"--llama-api-key-file {path}: {exc.strerror or exc}", 2) from None
    except NotASmallFile as exc:
        raise CliError(f"--llama-api-key-file {path}: {exc}", 2) from None
    except UnicodeDecodeError:
        raise CliError(f"--llama-api-key-file {path}: not text (UTF-8)", 2) from None
    return key or None


def rig_request(args: argparse.Namespace, interval_s: float | None = None) -> RigRequest:
    """The rig a command watches, from its options: the source, the fleet's hosts file and
    per-host timeout (a subcommand's own, else the global one), the replay options."""
    from lltui.services.rig import RigRequest

    timeout = getattr(args, "sub_host_timeout", None)
    if timeout is None:
        timeout = getattr(args, "host_timeout", None)
    return RigRequest(
        source=source_spec(args),
        hosts_file=getattr(args, "sub_hosts", None) or getattr(args, "hosts", None),
        host_timeout_s=timeout,
        interval_s=interval_s if interval_s is not None else RigRequest.interval_s,
        replay=replay_options(args),
    )


class _SourceForms:
    """The forms ``--source`` takes, from the table of source kinds, spelled when a help is
    printed (argparse fills ``%(forms)s`` from the option's attributes): the table is an
    import every command's start would otherwise pay to print nothing."""

    def __str__(self) -> str:
        from lltui.services.rig import source_help

        return source_help()


class _SourceAction(argparse.Action):
    """``--source SPEC``, stored as given; its help's forms are an attribute from the start
    (Python 3.14 expands each help as the option is added)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.forms = _SourceForms()

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def add_source_option(p: argparse.ArgumentParser, *, sub: bool = False, note: str = "") -> None:
    """``--source``, its help made from the table of source kinds. ``sub``: a subcommand's
    own, which wins over the one given before the subcommand."""
    where = "as the global --source: " if sub else ""
    tail = f"; {note}" if note else ("; also LLTUI_SOURCE" if not sub else "")
    p.add_argument(
        "--source",
        action=_SourceAction,
        dest="sub_source" if sub else "source",
        default=None,
        metavar="SPEC",
        help=f"{where}%(forms)s{tail}",
    )


def source_spec(args: argparse.Namespace) -> str:
    """The source a subcommand reads: its own --source, the global one, then LLTUI_SOURCE
    and the config file, as the app resolves it."""
    given = getattr(args, "sub_source", None) or getattr(args, "source", None)
    if given:
        return str(given)
    return settings_of(args).source


def open_recorder(path: str, source: str, *, full: bool = False) -> Any:
    """A Recorder writing ``path`` (``--record``), refused where it would overwrite the
    recording being replayed; a path that cannot be written is bad input. ``full``
    (``--record-full``) keeps the secrets of command lines."""
    from lltui.services.rig import start_recording

    try:
        return start_recording(path, source, full=full)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None

"""``lltui launch``: start llama-server in the foreground, say when it is ready, stop it cleanly.

Everything after the model that is not one of lltui's own options is a llama-server flag,
spelled as llama-server spells it, so ``argparse`` only collects the words and this module
reads them (``-c``, ``-ngl -1`` and the like would otherwise be taken for lltui's options).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError
from lltui.commands.launch_output import dry_run as _dry_run
from lltui.commands.launch_output import say as _say
from lltui.commands.launch_output import say_note as _say_note
from lltui.commands.own_options import ROUTER, memory_options, options_help, split_own

if TYPE_CHECKING:
    from lltui.services.launch.rpc_hosts import RpcHosts
    from lltui.services.launch.session import LaunchSession
    from lltui.services.launch.state import LaunchState

USAGE = (
    "lltui launch MODEL.gguf [llama-server flags] [--dry-run] [--json] [--profile NAME]\n"
    "                    [--save-profile NAME] [--host H] [--port P] [--api-key-file F]\n"
    "                    [--keep-running] [--force] [--rpc-host [USER@]HOST[:PORT] ...]\n"
    "                    [--rpc-bind ADDR] [--rpc-server PATH] [--host-free SIZE]\n"
    "       lltui launch --models DIR|PRESET.ini [flags for every model] [--pin NAME ...]\n"
    "                    [--load NAME ...] [--gpus SPEC] [--host-free SIZE] [--dry-run] [--json]\n"
    "       lltui launch [shared flags] A.gguf [A's flags] B.gguf [B's flags] ... (a router)"
)
HELP = f"""usage: {USAGE}

Start llama-server with MODEL.gguf and watch it in the foreground: one line when it is ready
(with --json, a JSON object with the URL, pid, argv and the memory each device holds, read from
the server's own log), a clean stop on Ctrl-C, SIGTERM or SIGHUP, and an exit line with the
exit code, the reason and the last log lines.

Any llama-server flag may follow the model (-c 8192 -ngl all -ts 3,1 --rpc HOST:PORT ...);
each is checked against the installed llama-server and spelled the way that build spells it.

options:
{options_help("launch")}

{ROUTER}:
{options_help("launch", ROUTER)}

exit codes: 0 stopped cleanly, 1 the server failed or a signal from outside lltui stopped it,
            2 bad input, 130 (143 for SIGTERM, 129 for SIGHUP) a second signal cut the
            server's shutdown short
"""


def register(sub: Any) -> None:
    # no option prefix (NUL): every word, -c or +5, passes untouched to run()
    p = sub.add_parser(
        "launch",
        help="start llama-server and watch it (--dry-run prints the command)",
        prefix_chars="\x00",
        add_help=False,
        usage=USAGE,
    )
    p.add_argument("words", nargs="*", help="MODEL.gguf, llama-server flags and lltui's options")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class _Own:
    """lltui's own switches; ``--profile``/``--save-profile`` stay among the words (the
    launch session reads them, as it does in the launch view)."""

    help: bool = False
    dry_run: bool = False
    json: bool = False
    keep_running: bool = False
    force: bool = False  # start what fit says will not fit
    rpc_hosts: tuple[str, ...] = ()
    rpc_bind: str | None = None
    rpc_server: str | None = None
    models: str | None = None  # router mode: a models directory or a preset file
    pin: tuple[str, ...] = ()
    load: tuple[str, ...] = ()
    priority: tuple[str, ...] = ()  # router mode: NAME=N
    on_demand: bool = True  # router mode: the proxy that loads models as requests ask
    gpus: str | None = None  # router mode: the devices the plan assumes
    host_free: int | None = None  # the host memory fit and the plan assume (--host-free)
    unknown: bool = False  # flags the pinned table lacks, left for the binary to judge


def _split_own(words: list[str]) -> tuple[_Own, list[str]]:
    """lltui's own options, and the other words left in order."""
    found = split_own(words, "launch", strict=False)
    own = _Own(
        help=found.help,
        dry_run="--dry-run" in found.switches,
        json="--json" in found.switches,
        keep_running="--keep-running" in found.switches,
        force="--force" in found.switches,
        rpc_hosts=found.all("--rpc-host"),
        rpc_bind=found.last("--rpc-bind"),
        rpc_server=found.last("--rpc-server"),
        models=found.last("--models"),
        pin=found.all("--pin"),
        load=found.all("--load"),
        priority=found.all("--priority"),
        on_demand="--no-on-demand" not in found.switches,
        gpus=found.last("--gpus"),
        host_free=memory_options(found, "launch")[1],
        unknown=bool(found.unknown),
    )
    return own, found.words


def _router_mode(own: _Own, words: list[str]) -> bool:
    """``--models``, or several models on the command line: llama-server's router."""
    if own.models is not None:
        return True
    if own.unknown:  # a flag of the llama-server found later: one server, which says
        return False
    from lltui.commands.model_set import group_models

    return len(group_models(split_own(words, "launch").items).models) >= 2


def _model_first(own: _Own, words: list[str]) -> list[str]:
    """One server's words with MODEL first, where the session reads it: the first bare word
    that is no flag's value, as fit takes it (``-c 512 X``; ``-m X X`` is the model given
    twice). Left as typed where a flag the pinned table lacks may take a value."""
    from lltui.core.cmdline.flag_table import is_flag_token

    if own.unknown:
        return words
    items = split_own(words, "launch").items
    at = next((i for i, item in enumerate(items) if not is_flag_token(item[0])), 0)
    return [*items[at], *(w for i, item in enumerate(items) if i != at for w in item)]


def run(args: argparse.Namespace) -> int:
    from lltui.core.cmdline.launch_spec import LaunchError
    from lltui.services.launch.request import LaunchRequest
    from lltui.services.launch.session import LaunchSession

    own, words = _split_own(list(args.words))
    if own.help:
        print(HELP.rstrip())
        return 0
    if own.rpc_hosts or own.rpc_bind or own.rpc_server:
        return _run_with_rpc_hosts(own, words)
    if _router_mode(own, words):
        return _run_router(own, words)
    if own.pin or own.load or own.gpus or own.priority or not own.on_demand:
        raise CliError(
            "launch: --pin, --load, --priority, --no-on-demand and --gpus are for a router "
            "(--models)",
            2,
        )
    request = LaunchRequest(words=tuple(_model_first(own, words)), host_free_bytes=own.host_free)
    session = LaunchSession(request, on_note=_say_note)
    try:
        with session:
            prepared = session.prepare(require_binary=not own.dry_run, plan=_plan(own))
            if own.dry_run:
                return _dry_run(prepared, session.environ, as_json=own.json)
            return _supervise(session, as_json=own.json, keep_running=own.keep_running)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None


def _plan(own: _Own) -> str:
    """What a command fit says will not fit does: refused, said (a dry run), or started."""
    return "warn" if own.dry_run else "force" if own.force else "refuse"


def _run_router(own: _Own, words: list[str], rpc: RpcHosts | None = None) -> int:
    from lltui.commands.launch_router import run_router

    profile = next((w for w in words if w.split("=")[0] in ("--profile", "--save-profile")), None)
    if own.keep_running or own.force or profile is not None:
        flag = "--keep-running" if own.keep_running else "--force" if own.force else profile
        flag = (flag or "").split("=")[0]
        raise CliError(f"launch: {flag} is for one server, not a router", 2)
    return run_router(
        own.models,
        words,
        keep=own.pin,
        load=own.load,
        priority=own.priority,
        on_demand=own.on_demand,
        gpus=own.gpus,
        host_free=own.host_free,
        dry=own.dry_run,
        as_json=own.json,
        rpc=rpc,
    )


def _run_with_rpc_hosts(own: _Own, words: list[str]) -> int:
    """rpc-server on each ``--rpc-host`` over ssh, then llama-server with their devices;
    every rpc-server and ssh session stopped on the way out, however lltui leaves."""
    import shlex

    from lltui.core.cmdline.launch_spec import LaunchError
    from lltui.core.stop_signals import raised_on_stop
    from lltui.services.launch.request import LaunchRequest
    from lltui.services.launch.rpc_hosts import RpcHosts, RpcStartError, read_rpc_hosts
    from lltui.services.launch.session import LaunchSession

    if not own.rpc_hosts:
        raise CliError("launch: --rpc-bind and --rpc-server go with --rpc-host HOST", 2)
    if own.keep_running:
        raise CliError("launch: --keep-running cannot keep the --rpc-host servers running", 2)
    if any(w == "--rpc" or w.startswith("--rpc=") for w in words):
        raise CliError("launch: give either --rpc HOST:PORT or --rpc-host HOST, not both", 2)
    try:
        specs, warnings = read_rpc_hosts(own.rpc_hosts, bind=own.rpc_bind, binary=own.rpc_server)
    except ValueError as exc:
        raise CliError(f"launch: {exc}", 2) from None
    for warning in warnings:  # loud, before anything starts (and in a dry run)
        _say(f"lltui: {warning}", err=True)

    # a stop while starting: the with-blocks stop what started
    try:
        with raised_on_stop(), RpcHosts(specs) as rpc:
            if _router_mode(own, words):
                # every model may use them; the plan asks them for their memory, so they
                # run first (an RPC server serves one model's server at a time)
                if not own.dry_run:
                    rpc.start()
                    for line in rpc.describe():
                        _say(f"lltui: {line}", err=True)
                return _run_router(own, ["--rpc", rpc.rpc_value(), *words], rpc)
            words = [*_model_first(own, words), "--rpc", rpc.rpc_value()]
            request = LaunchRequest(words=tuple(words), host_free_bytes=own.host_free)
            session = LaunchSession(request, on_note=_say_note)
            session.rpc_warned.update(rpc.exposed())  # the warning above said it
            with session:
                if not own.dry_run:  # fit asks them for their memory, so they run first
                    rpc.start()
                    for line in rpc.describe():
                        _say(f"lltui: {line}", err=True)
                prepared = session.prepare(require_binary=not own.dry_run, plan=_plan(own))
                if own.dry_run:
                    return _dry_run(prepared, session.environ, as_json=own.json, rpc=rpc)
                return _supervise(session, as_json=own.json, keep_running=False, rpc=rpc)
    except LaunchError as exc:
        # a command fit suggests names the hosts as given, not this run's ssh tunnels
        given = [w for h in own.rpc_hosts for w in ("--rpc-host", h)]
        given += ["--rpc-bind", own.rpc_bind] if own.rpc_bind else []
        given += ["--rpc-server", own.rpc_server] if own.rpc_server else []
        said = str(exc).replace(f"--rpc {rpc.rpc_value()}", shlex.join(given))
        raise CliError(f"launch: {said}", exc.code) from None
    except RpcStartError as exc:
        raise CliError(f"launch: {exc}", 1) from None


def _supervise(
    session: LaunchSession, *, as_json: bool, keep_running: bool, rpc: RpcHosts | None = None
) -> int:
    """One server in the foreground: its ready line (with the RPC hosts it uses), each
    served request, how it ended; ``keep_running``: left running once ready."""
    from lltui.commands.launch_output import (
        StatePrinter,
        foreground,
        ready_event,
        ready_lines,
        rpc_json,
    )

    def ready(st: LaunchState) -> list[str]:
        event = ready_event(st)
        if rpc is not None:
            event["rpc_hosts"] = rpc_json(rpc)
        if as_json:
            return [json.dumps(event)]
        hosts = rpc.describe() if rpc is not None else []  # which host each RPC device is
        return ready_lines(event) + [f"  {line}" for line in hosts]

    from lltui.services.launch.polls import ServerPoll

    printer = StatePrinter(ready, as_json=as_json)
    prepared = session.launch
    polls = []
    if prepared.url is not None and not keep_running:  # /slots for the KV fill, nothing more
        polls.append(ServerPoll(prepared.url, prepared.http_key, slots_only=True))
    return foreground(session, printer, as_json=as_json, keep_running=keep_running, polls=polls)

"""``lltui launch``: start llama-server in the foreground, say when it is ready, stop it cleanly.

Everything after the model that is not one of lltui's own options is a llama-server flag,
spelled as llama-server spells it, so ``argparse`` only collects the words and this module
reads them (``-c``, ``-ngl -1`` and the like would otherwise be taken for lltui's options).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError

if TYPE_CHECKING:
    import threading

    from lltui.sources.llama.rpc_hosts import RpcHosts
    from lltui.sources.llama.session import LaunchSession, Note, PreparedLaunch
    from lltui.sources.llama.supervisor import ServerExit

USAGE = (
    "lltui launch MODEL.gguf [llama-server flags] [--dry-run] [--json] [--profile NAME]\n"
    "                    [--save-profile NAME] [--host H] [--port P] [--api-key-file F]\n"
    "                    [--keep-running] [--rpc-host [USER@]HOST[:PORT] ...]\n"
    "                    [--rpc-bind ADDR] [--rpc-server PATH]"
)
HELP = f"""usage: {USAGE}

Start llama-server with MODEL.gguf and watch it in the foreground: one line when it is ready
(with --json, a JSON object with the URL, pid, argv and the memory each device holds, read from
the server's own log), a clean stop on Ctrl-C, SIGTERM or SIGHUP, and an exit line with the
exit code, the reason and the last log lines.

Any llama-server flag may follow the model (-c 8192 -ngl all -ts 3,1 --rpc HOST:PORT ...);
each is checked against the installed llama-server and spelled the way that build spells it.

options:
  --dry-run            print the exact command and environment, start nothing
  --json               JSON lines instead of text (ready, exit; or the dry-run command)
  --profile NAME       start from a saved profile; flags given here override it
  --save-profile NAME  save these settings as a profile, paths made absolute so it starts
                       from any folder (mode 0600 if it holds an API key)
  --host H             address to listen on (default 127.0.0.1: this machine only)
  --port P             port (default 8080; 0 picks a free one)
  --api-key-file F     file with the API key(s), one per line; the key is never printed
  --keep-running       leave the server running when lltui exits (log in a file)
  --rpc-host [USER@]HOST[:PORT]
                       (repeatable) start llama.cpp's rpc-server on HOST over ssh, listening
                       on PORT there (default 50052), and give llama-server its devices
                       (--rpc); all of them stop when lltui stops, however it stops
  --rpc-bind ADDR      the address rpc-server binds on each host (default 127.0.0.1 there:
                       llama-server reaches it through the ssh connection). RPC has no
                       authentication: any other address is for a private network only
  --rpc-server PATH    rpc-server's path on the hosts (default: rpc-server or
                       ggml-rpc-server on PATH there)
  -h, --help           show this help

exit codes: 0 stopped cleanly, 1 the server failed or a signal from outside lltui stopped it,
            2 bad input
"""

_OWN_SWITCHES = ("--dry-run", "--json", "--keep-running")
_OWN_VALUES = ("--rpc-host", "--rpc-bind", "--rpc-server")


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
    rpc_hosts: tuple[str, ...] = ()
    rpc_bind: str | None = None
    rpc_server: str | None = None


def _split_values(words: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """lltui's own options that take a value (``--rpc-host H`` or ``--rpc-host=H``)."""
    values: dict[str, list[str]] = {name: [] for name in _OWN_VALUES}
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        name, eq, value = word.partition("=")
        if name in _OWN_VALUES:
            if not eq:
                if i + 1 >= len(words):
                    raise CliError(f"launch: {name} needs a value", 2)
                value = words[i + 1]
                i += 1
            values[name].append(value)
        else:
            rest.append(word)
        i += 1
    return values, rest


def _split_own(words: list[str]) -> tuple[_Own, list[str]]:
    """lltui's own switches, and the other words left in order."""
    values, words = _split_values(words)
    seen = {w for w in words if w in (*_OWN_SWITCHES, "-h", "--help")}
    rest = [w for w in words if w not in seen]
    own = _Own(
        help=bool(seen & {"-h", "--help"}),
        dry_run="--dry-run" in seen,
        json="--json" in seen,
        keep_running="--keep-running" in seen,
        rpc_hosts=tuple(values["--rpc-host"]),
        rpc_bind=values["--rpc-bind"][-1] if values["--rpc-bind"] else None,
        rpc_server=values["--rpc-server"][-1] if values["--rpc-server"] else None,
    )
    return own, rest


def _say(text: str, *, err: bool = False) -> None:
    """Print one line; a terminal that went away (SSH drop) is not an error here. What it
    says carries paths, the environment, the server's log and its devices' names: a break in
    any of them is escaped, so it cannot print a line of its own."""
    from lltui.core.text import one_line

    with contextlib.suppress(OSError):
        print(one_line(text), file=sys.stderr if err else sys.stdout, flush=True)


def _say_note(note: Note) -> None:
    prefix = "lltui: " if note.level == "info" else f"lltui: {note.level}: "
    _say(prefix + note.text, err=True)


def _mib(x: object) -> str:
    return f"{x:.2f}" if isinstance(x, int | float) else "?"


def _ready_text(event: dict[str, Any]) -> str:
    parts = [f"llama-server ready at {event['url']} (pid {event['pid']})"]
    for d in event["devices"]:
        parts.append(
            f"{d['name']}: model {_mib(d['model_mib'])} MiB, KV {_mib(d['kv_mib'])} MiB, "
            f"compute {_mib(d['compute_mib'])} MiB"
        )
    return " | ".join(parts)


def run(args: argparse.Namespace) -> int:
    from lltui.core.llama.launch_spec import LaunchError
    from lltui.sources.llama.session import LaunchRequest, LaunchSession

    own, words = _split_own(list(args.words))
    if own.help:
        print(HELP.rstrip())
        return 0
    if own.rpc_hosts or own.rpc_bind or own.rpc_server:
        return _run_with_rpc_hosts(own, words)
    session = LaunchSession(LaunchRequest(words=tuple(words)), on_note=_say_note)
    try:
        with session:
            prepared = session.prepare(require_binary=not own.dry_run)
            if own.dry_run:
                return _dry_run(prepared, session.environ, as_json=own.json)
            return _supervise(session, as_json=own.json, keep_running=own.keep_running)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None


def _run_with_rpc_hosts(own: _Own, words: list[str]) -> int:
    """rpc-server on each ``--rpc-host`` over ssh, then llama-server with their devices;
    every rpc-server and ssh session stopped on the way out, however lltui leaves."""
    import signal

    from lltui.core.llama.launch_spec import LaunchError
    from lltui.core.llama.rpc_hosts import RpcHostError, exposure_warning, parse_rpc_host
    from lltui.sources.llama.rpc_hosts import RpcHosts, RpcStartError
    from lltui.sources.llama.session import LaunchRequest, LaunchSession

    if not own.rpc_hosts:
        raise CliError("launch: --rpc-bind and --rpc-server go with --rpc-host HOST", 2)
    if own.keep_running:
        raise CliError("launch: --keep-running cannot keep the --rpc-host servers running", 2)
    if any(w == "--rpc" or w.startswith("--rpc=") for w in words):
        raise CliError("launch: give either --rpc HOST:PORT or --rpc-host HOST, not both", 2)
    try:
        specs = [parse_rpc_host(h, bind=own.rpc_bind, binary=own.rpc_server) for h in own.rpc_hosts]
    except (RpcHostError, ValueError) as exc:
        raise CliError(f"launch: {exc}", 2) from None
    for spec in specs:
        warning = exposure_warning(spec)
        if warning:  # loud, before anything starts (and in a dry run)
            _say(f"lltui: {warning}", err=True)

    def note(level: str, text: str) -> None:
        _say(f"lltui: {text}" if level == "info" else f"lltui: {level}: {text}", err=True)

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # a stop while starting: the with-blocks stop what started

    handled = (signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, interrupt) for s in handled}
    try:
        with RpcHosts(specs) as rpc:
            words = [*words, "--rpc", rpc.rpc_value()]
            session = LaunchSession(LaunchRequest(words=tuple(words)), on_note=_say_note)
            with session:
                prepared = session.prepare(require_binary=not own.dry_run)
                if own.dry_run:
                    return _dry_run(prepared, session.environ, as_json=own.json, rpc=rpc)
                rpc.start()
                for line in rpc.describe():
                    note("info", line)
                return _supervise(session, as_json=own.json, keep_running=False, rpc=rpc)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None
    except RpcStartError as exc:
        raise CliError(f"launch: {exc}", 1) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _dry_run(
    prepared: PreparedLaunch,
    environ: Mapping[str, str],
    *,
    as_json: bool,
    rpc: RpcHosts | None = None,
) -> int:
    from lltui.commands import print_json
    from lltui.core.llama.launch_spec import relevant_inherited_env

    command, flags = prepared.command, prepared.flags
    inherited = relevant_inherited_env(environ, command)
    if as_json:
        print_json(
            {
                "argv": command.display_argv(),
                "env": command.display_env(),
                "env_unset": list(command.env_unset),
                "env_inherited": inherited,
                "url": prepared.spec.url,
                "binary": {
                    "path": command.argv[0],
                    "origin": prepared.origin,
                    "version": flags.version if flags is not None else None,
                    "flags_checked": flags is not None,
                },
            }
            | ({"rpc_hosts": _rpc_json(rpc, with_argv=True)} if rpc is not None else {})
        )
        return 0
    import shlex

    _say("argv: " + " ".join(shlex.quote(a) for a in command.display_argv()))
    for name, value in command.display_env().items():
        _say(f"env:  {name}={shlex.quote(value)}")
    for name in command.env_unset:
        _say(f"env:  unset {name}")
    for name, value in inherited.items():
        _say(f"env:  {name}={shlex.quote(value)} (inherited)")
    _say(f"url:  {prepared.spec.url}")
    for server in rpc.servers if rpc is not None else ():
        _say(f"rpc:  {server.spec.host}: " + " ".join(shlex.quote(a) for a in server.argv()))
    return 0


def _rpc_json(rpc: RpcHosts, *, with_argv: bool = False) -> list[dict[str, Any]]:
    out = []
    for server in rpc.servers:
        entry: dict[str, Any] = {
            "host": server.spec.host,
            "bind": server.spec.bind,
            "port": server.spec.port,
            "endpoint": server.endpoint,
            "tunnel": server.local_port is not None,
            "pid": server.pid,
            "devices": [{"name": n, "description": d} for n, d in server.devices],
        }
        if with_argv:
            entry["argv"] = server.argv()
        out.append(entry)
    return out


def _supervise(
    session: LaunchSession, *, as_json: bool, keep_running: bool, rpc: RpcHosts | None = None
) -> int:
    """Run the server in the foreground until it exits or a signal asks lltui to stop it."""
    import signal
    import threading

    signals_seen: list[int] = []
    wake = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        signals_seen.append(signum)
        if len(signals_seen) > 1:
            session.hurry()  # a second Ctrl-C: skip the waits
        wake.set()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        session.start(keep_running=keep_running)
        _watch(session, signals_seen, wake, as_json=as_json, rpc=rpc)
        if signals_seen and keep_running and not session.exited:
            return _detach(session, as_json=as_json)
        result = session.stop() if signals_seen else session.wait_exit(5.0)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        session.close()
    if result is None:
        _say("lltui: llama-server did not exit", err=True)
        return 1
    return _report_exit(result, as_json=as_json)


def _watch(
    session: LaunchSession,
    signals_seen: list[int],
    wake: threading.Event,
    *,
    as_json: bool,
    rpc: RpcHosts | None = None,
) -> None:
    """Say when the server is ready; return when it exits or a signal arrives."""
    announced = False
    while not signals_seen:
        if not announced and session.is_ready:
            announced = True
            event = session.ready_event()
            if rpc is not None:
                event["rpc_hosts"] = _rpc_json(rpc)
            _say(json.dumps(event) if as_json else _ready_text(event))
            if rpc is not None and not as_json:  # which host each RPC device is
                for line in rpc.describe():
                    _say(f"  {line}")
        if session.exited:
            return
        wake.wait(0.1)


def _detach(session: LaunchSession, *, as_json: bool) -> int:
    session.detach()
    url = session.prepared.spec.url
    detached = {"event": "detached", "pid": session.pid, "url": url, "log": str(session.log_file)}
    _say(
        json.dumps(detached)
        if as_json
        else f"llama-server left running: pid {session.pid}, {url}, log {session.log_file}"
    )
    return 0


def _report_exit(result: ServerExit, *, as_json: bool) -> int:
    from lltui.core.llama.exit_reason import exit_event
    from lltui.sources.llama.session import describe_exit

    if as_json:
        _say(
            json.dumps(
                exit_event(result.returncode, result.reason, result.log_tail, pid=result.pid)
            )
        )
    elif result.clean:
        _say(describe_exit(result))
    else:
        _say(f"lltui: {describe_exit(result)}", err=True)
        if result.was_ready or result.reason.startswith("llama-server exited with code"):
            for line in result.log_tail[-10:]:
                _say(f"  | {line}", err=True)
    return 0 if result.clean else 1

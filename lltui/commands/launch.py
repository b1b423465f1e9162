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

    from lltui.sources.llama.session import LaunchSession, Note, PreparedLaunch
    from lltui.sources.llama.supervisor import ServerExit

USAGE = (
    "lltui launch MODEL.gguf [llama-server flags] [--dry-run] [--json] [--profile NAME]\n"
    "                    [--save-profile NAME] [--host H] [--port P] [--api-key-file F]\n"
    "                    [--keep-running]"
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
  -h, --help           show this help

exit codes: 0 stopped cleanly, 1 the server failed or a signal from outside lltui stopped it,
            2 bad input
"""

_OWN_SWITCHES = ("--dry-run", "--json", "--keep-running")


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


def _split_own(words: list[str]) -> tuple[_Own, list[str]]:
    """lltui's own switches, and the other words left in order."""
    seen = {w for w in words if w in (*_OWN_SWITCHES, "-h", "--help")}
    rest = [w for w in words if w not in seen]
    own = _Own(
        help=bool(seen & {"-h", "--help"}),
        dry_run="--dry-run" in seen,
        json="--json" in seen,
        keep_running="--keep-running" in seen,
    )
    return own, rest


def _say(text: str, *, err: bool = False) -> None:
    """Print one line; a terminal that went away (SSH drop) is not an error here."""
    with contextlib.suppress(OSError):
        print(text, file=sys.stderr if err else sys.stdout, flush=True)


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
        _say(HELP.rstrip())
        return 0
    session = LaunchSession(LaunchRequest(words=tuple(words)), on_note=_say_note)
    try:
        with session:
            prepared = session.prepare(require_binary=not own.dry_run)
            if own.dry_run:
                return _dry_run(prepared, session.environ, as_json=own.json)
            return _supervise(session, as_json=own.json, keep_running=own.keep_running)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None


def _dry_run(prepared: PreparedLaunch, environ: Mapping[str, str], *, as_json: bool) -> int:
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
    return 0


def _supervise(session: LaunchSession, *, as_json: bool, keep_running: bool) -> int:
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
        _watch(session, signals_seen, wake, as_json=as_json)
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
    session: LaunchSession, signals_seen: list[int], wake: threading.Event, *, as_json: bool
) -> None:
    """Say when the server is ready; return when it exits or a signal arrives."""
    announced = False
    while not signals_seen:
        if not announced and session.is_ready:
            announced = True
            event = session.ready_event()
            _say(json.dumps(event) if as_json else _ready_text(event))
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

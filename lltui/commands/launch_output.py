"""What ``lltui launch`` prints, for one server and for a router: a line on the terminal
(never an error when the terminal went away), notes, the dry run, how the server ended."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lltui.services.launch import Note, PreparedLaunch
    from lltui.sources.llama.rpc_hosts import RpcHosts
    from lltui.sources.llama.supervisor import ServerExit


def say(text: str, *, err: bool = False) -> None:
    """Print one line; a terminal that went away (SSH drop) is not an error here. What it
    says carries paths, the environment, the server's log and its devices' names: a break in
    any of them is escaped, so it cannot print a line of its own."""
    from lltui.core.text import one_line

    with contextlib.suppress(OSError):
        print(one_line(text), file=sys.stderr if err else sys.stdout, flush=True)


def say_note(note: Note) -> None:
    prefix = "lltui: " if note.level == "info" else f"lltui: {note.level}: "
    say(prefix + note.text, err=True)


def dry_run(
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
            | ({"rpc_hosts": rpc_json(rpc, with_argv=True)} if rpc is not None else {})
        )
        return 0
    import shlex

    say("argv: " + " ".join(shlex.quote(a) for a in command.display_argv()))
    for name, value in command.display_env().items():
        say(f"env:  {name}={shlex.quote(value)}")
    for name in command.env_unset:
        say(f"env:  unset {name}")
    for name, value in inherited.items():
        say(f"env:  {name}={shlex.quote(value)} (inherited)")
    say(f"url:  {prepared.spec.url}")
    for server in rpc.servers if rpc is not None else ():
        say(f"rpc:  {server.spec.host}: " + " ".join(shlex.quote(a) for a in server.argv()))
    return 0


def rpc_json(rpc: RpcHosts, *, with_argv: bool = False) -> list[dict[str, Any]]:
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


def report_exit(result: ServerExit, *, as_json: bool) -> int:
    from lltui.core.llama.exit_reason import exit_event
    from lltui.services.launch import describe_exit

    if as_json:
        say(
            json.dumps(
                exit_event(result.returncode, result.reason, result.log_tail, pid=result.pid)
            )
        )
    elif result.clean:
        say(describe_exit(result))
    else:
        say(f"lltui: {describe_exit(result)}", err=True)
        if result.was_ready or result.reason.startswith("llama-server exited with code"):
            for line in result.log_tail[-10:]:
                say(f"  | {line}", err=True)
    return 0 if result.clean else 1

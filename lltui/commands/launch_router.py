"""``lltui launch --models DIR|PRESET.ini`` (or several models on the command line):
llama-server in router mode in the foreground, its models loaded by the plan.

Prints one line when the router is ready, then a line each time a model's state changes
(loading, loaded with its memory per device from its server's log, failed with the line
that says why, unloaded); with ``--json``, one JSON object per event. Ctrl-C, SIGTERM and
SIGHUP stop the router and every model server with it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError
from lltui.commands.launch_output import say as _say
from lltui.core.text import counted

if TYPE_CHECKING:
    from lltui.core.fit.evict import Decision
    from lltui.services.launch.router import PreparedRouter, RouterSession
    from lltui.services.launch.rpc_hosts import RpcHosts
    from lltui.services.launch.state import LaunchState

POLL_S = 0.5


def dry_run(
    prepared: PreparedRouter,
    environ: dict[str, str],
    *,
    as_json: bool,
    rpc: RpcHosts | None = None,
) -> int:
    """The router's command, its preset and what on demand would do; ``rpc``: the
    ``--rpc-host`` servers it would start first (their ssh commands)."""
    from lltui.commands import print_json
    from lltui.commands.launch_output import dry_run as _dry_run
    from lltui.commands.launch_output import rpc_json
    from lltui.core.fit.plan_report import plan_to_json

    if as_json:
        from lltui.core.cmdline.launch_spec import relevant_inherited_env

        command = prepared.launch.command
        print_json(
            {
                "argv": command.display_argv(),
                "env": command.display_env(),
                "env_unset": list(command.env_unset),
                "env_inherited": relevant_inherited_env(environ, command),
                "url": prepared.url,
                "router_url": prepared.launch.spec.url,
                "preset_path": prepared.preset_path,
                "preset": prepared.preset,
                "keep": list(prepared.kept),
                "load": list(prepared.load),
                "load_refused": prepared.at_start()[1],
                "on_demand": _on_demand_json(prepared),
                "plan": plan_to_json(prepared.report.plan, prepared.report.notes),
            }
            | ({"rpc_hosts": rpc_json(rpc, with_argv=True)} if rpc is not None else {}),
            line=True,
        )
        return 0
    _dry_run(prepared.launch, environ, as_json=False, url=prepared.url, rpc=rpc)
    _say(f"preset: {prepared.preset_path}")
    for line in prepared.preset.rstrip().splitlines():
        _say(f"  {line}")
    for line in prepared.at_start()[1].values():  # (as the run says them, once ready)
        _say(f"refused at start: {line}")
    if prepared.proxy_url is not None:
        _say(f"on demand at {prepared.proxy_url} (the router at {prepared.launch.spec.url}):")
        for name, d in prepared.on_demand().items():
            _say(f"  {name}: {_decision_text(d)}")
    return 0


def _decision_text(d: Decision) -> str:
    if d.action == "loaded":
        return "loaded at start"
    if d.action == "load":
        return "would load now"
    if d.action == "evict":
        return f"would unload {', '.join(d.evict)}, then load"
    return f"cannot load: {d.reason}"


def _on_demand_json(prepared: PreparedRouter) -> dict[str, Any] | None:
    """For each model: what a request for it would do once the start's loads are done."""
    if prepared.proxy_url is None:
        return None
    decisions = prepared.on_demand()
    return {
        "url": prepared.proxy_url,
        "models": {name: d.to_json() for name, d in decisions.items()},
    }


def _ready_line(prepared: PreparedRouter, st: LaunchState, as_json: bool) -> str:
    names = [f"{n} (kept)" if n in prepared.kept else n for n in prepared.names]
    if as_json:
        return json.dumps(
            {
                "event": "ready",
                "url": prepared.url,
                "router_url": prepared.launch.spec.url,
                "pid": st.pid,
                "argv": list(st.argv),
                "preset": prepared.preset_path,
                "models": list(prepared.names),
                "kept": list(prepared.kept),
            }
        )
    demand = ""
    if prepared.proxy_url is not None:
        demand = f"; loaded on demand (the router itself at {prepared.launch.spec.url})"
    return (
        f"llama-server router ready at {prepared.url} (pid {st.pid}): "
        f"{counted(len(names), 'model')}: {', '.join(names)}; "
        f"preset {prepared.preset_path}{demand}"
    )


def supervise(session: RouterSession, *, as_json: bool) -> int:
    """The router in the foreground: its ready line, the loads the plan refused, each
    model's state as it changes, how it ended."""
    from lltui.commands.launch_output import StatePrinter, foreground
    from lltui.services.launch.polls import RouterPoll

    prepared = session.prepared
    printer = StatePrinter(lambda st: [_ready_line(prepared, st, as_json)], as_json=as_json)
    polls = [RouterPoll(session, interval_s=POLL_S, per_model=False)]
    return foreground(session, printer, as_json=as_json, polls=polls)


def run_router(
    source: str | None,
    entries_words: list[str],
    *,
    keep: tuple[str, ...],
    load: tuple[str, ...],
    priority: tuple[str, ...] = (),
    on_demand: bool = True,
    gpus: str | None = None,
    host_free: int | None = None,
    dry: bool,
    as_json: bool,
    rpc: RpcHosts | None = None,
) -> int:
    """``source``: ``--models DIR|PRESET.ini``; else ``entries_words`` names the models;
    ``rpc``: the ``--rpc-host`` servers (started already, unless ``dry``)."""
    from lltui.commands.launch_output import say_note as _say_note
    from lltui.core.cmdline.launch_spec import LaunchError
    from lltui.services.launch.router import RouterSession
    from lltui.services.launch.router_prep import RouterRequest

    shared, entries = _split(source, entries_words)
    request = RouterRequest(
        source=source,
        entries=entries,
        words=tuple(shared),
        keep=keep,
        load=load,
        gpus=gpus,
        host_free_bytes=host_free,
        on_demand=on_demand,
        priority=_priorities(priority),
    )
    session = RouterSession(request, on_note=_say_note)
    if rpc is not None:
        session.rpc_warned.update(rpc.exposed())  # --rpc-host's own warning said it
    try:
        with session:
            prepared = session.prepare(require_binary=not dry)
            if dry:
                return dry_run(prepared, session.environ, as_json=as_json, rpc=rpc)
            return supervise(session, as_json=as_json)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None


def _priorities(given: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    """``--priority NAME=N`` values (CliError naming the bad one)."""
    out = []
    for item in given:
        name, eq, value = item.rpartition("=")
        try:
            number = int(value)
        except ValueError:
            number = None
        if not eq or not name or number is None:
            raise CliError(f"launch: --priority {item}: expected NAME=N (N an integer)", 2)
        out.append((name, number))
    return tuple(out)


def _split(source: str | None, words: list[str]) -> tuple[list[str], tuple[Any, ...]]:
    """The shared flags, and the models given on the command line with their own flags."""
    from lltui.commands.fit_plan import entries
    from lltui.commands.model_set import group_models
    from lltui.commands.own_options import split_own

    found = group_models(split_own(words, "launch").items)
    if source is not None:
        if found.models:
            raise CliError("launch: give the models either with --models or on the command line", 2)
        if found.stray is not None:
            raise CliError(f"launch: unexpected argument {found.stray!r}", 2)
        return found.shared, ()
    # the router's address, keys and log level may stand anywhere: they are the router's
    launch_only, found.shared = _launch_words(found.shared)
    for i, (model, words) in enumerate(found.models):
        own, rest = _launch_words(words)
        launch_only += own
        found.models[i] = (model, rest)
    return launch_only, entries(found, "launch")


def _launch_words(words: list[str]) -> tuple[list[str], list[str]]:
    """The router's own flags (address, keys, log level) out of the shared ones."""
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.core.cmdline.launch_spec import LAUNCH_KEYS

    try:
        args = parse_llama_args(words)
    except ValueError as exc:
        raise CliError(f"launch: {exc}", 2) from None
    mine = LAUNCH_KEYS - {"model_path"}  # -m among a model's flags is refused later
    own = [w for g in args.given_args if g.key in mine for w in g.tokens]
    rest = [w for g in args.given_args if g.key not in mine for w in g.tokens]
    return own, rest

"""``lltui launch --models DIR|PRESET.ini`` (or several models on the command line):
llama-server in router mode in the foreground, its models loaded by the plan.

Prints one line when the router is ready, then a line each time a model's state changes
(loading, loaded with its memory per device from its server's log, failed with the line
that says why, unloaded); with ``--json``, one JSON object per event. Ctrl-C, SIGTERM and
SIGHUP stop the router and every model server with it.
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError

if TYPE_CHECKING:
    from lltui.core.llamalog.models import DevicePlacement
    from lltui.services.router import ModelRow, PreparedRouter, RouterSession

POLL_S = 0.5
PLACEMENT_WAIT_S = 2.0  # a model's buffer lines may trail the router's word that it loaded


def _say(text: str, *, err: bool = False) -> None:
    from lltui.commands.launch_output import say

    say(text, err=err)


def device_label(p: DevicePlacement) -> str:
    """A device as the plan names it: an RPC device with its server (``RPC0[host:port]``),
    as each model's server numbers its own RPC devices from 0."""
    if p.name.startswith("RPC"):
        return next((b for b in p.buffers if b.startswith("RPC") and "[" in b), p.name)
    return p.name


def devices_json(row: ModelRow) -> list[dict[str, Any]]:
    return [
        {
            "name": device_label(p),
            "model_mib": p.model_mib,
            "kv_mib": p.kv_mib,
            "compute_mib": p.compute_mib,
            "output_mib": p.output_mib,
        }
        for p in row.placement
    ]


def _row_text(row: ModelRow) -> str:
    text = f"{row.name}: {row.state}"
    if row.state == "loaded" and row.placement:
        text += (
            " ("
            + "; ".join(
                f"{device_label(p)} model {p.model_mib:.2f} MiB, KV {p.kv_mib:.2f}, "
                f"compute {p.compute_mib:.2f}"
                for p in row.placement
            )
            + ")"
        )
    if row.problem:
        text += f": {row.problem}"
    return text


def _event(row: ModelRow) -> dict[str, Any]:
    return {
        "event": "model",
        "name": row.name,
        "state": row.state,
        "kept": row.kept,
        "devices": devices_json(row),
        "problem": row.problem,
    }


def dry_run(prepared: PreparedRouter, environ: dict[str, str], *, as_json: bool) -> int:
    from lltui.commands import print_json
    from lltui.commands.launch_output import dry_run as _dry_run
    from lltui.core.fit.plan_report import plan_to_json

    if as_json:
        from lltui.core.llama.launch_spec import relevant_inherited_env

        command = prepared.launch.command
        print_json(
            {
                "argv": command.display_argv(),
                "env": command.display_env(),
                "env_inherited": relevant_inherited_env(environ, command),
                "url": prepared.launch.spec.url,
                "preset_path": prepared.preset_path,
                "preset": prepared.preset,
                "keep": list(prepared.kept),
                "load": list(prepared.load),
                "plan": plan_to_json(prepared.report.plan, prepared.report.notes),
            }
        )
        return 0
    _dry_run(prepared.launch, environ, as_json=False)
    _say(f"preset: {prepared.preset_path}")
    for line in prepared.preset.rstrip().splitlines():
        _say(f"  {line}")
    return 0


def _ready_line(session: RouterSession, as_json: bool) -> str:
    prepared = session.prepared
    names = [f"{n} (kept)" if n in prepared.kept else n for n in prepared.names]
    if as_json:
        return json.dumps(
            {
                "event": "ready",
                "url": session.url,
                "pid": session.pid,
                "argv": prepared.launch.command.display_argv(),
                "preset": prepared.preset_path,
                "models": list(prepared.names),
                "kept": list(prepared.kept),
            }
        )
    return (
        f"llama-server router ready at {session.url} (pid {session.pid}): "
        f"{len(names)} models: {', '.join(names)}; preset {prepared.preset_path}"
    )


def supervise(session: RouterSession, *, as_json: bool) -> int:
    """Run the router in the foreground until it exits or a signal asks lltui to stop."""
    import signal

    from lltui.commands.launch_output import report_exit as _report_exit

    signals_seen: list[int] = []
    wake = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        signals_seen.append(signum)
        if len(signals_seen) > 1:
            session.hurry()
        wake.set()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        session.start()
        _watch(session, signals_seen, wake, as_json=as_json)
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
    session: RouterSession, signals_seen: list[int], wake: threading.Event, *, as_json: bool
) -> None:
    from lltui.services.router import RouterRefused

    while not signals_seen and not session.exited and not session.is_ready:
        wake.wait(0.05)
    if signals_seen or session.exited:
        return
    _say(_ready_line(session, as_json))
    for line in session.load_at_start():
        _refused(line, as_json)
    import time

    news = RowNews()
    while not signals_seen and not session.exited:
        try:
            rows = session.rows(session.models())
        except RouterRefused:
            rows = []
        for row in news.changed(rows, time.monotonic()):
            _say(json.dumps(_event(row)) if as_json else _row_text(row))
        wake.wait(POLL_S)


class RowNews:
    """Which models' rows are news: a state (or its problem) other than the one last said,
    each said once. A model the router's listing left out for a moment (``unknown``) is no
    news: said, it came back as a second line of the state it had. A model just loaded
    waits a little for its buffer lines."""

    def __init__(self) -> None:
        self._said: dict[str, tuple[str, str | None]] = {}
        self._waiting: dict[str, float] = {}

    def changed(self, rows: list[ModelRow], now: float) -> list[ModelRow]:
        out = []
        for row in rows:
            said = self._said.get(row.name, ("unloaded", None))
            if row.state == "unknown" or (row.state, row.problem) == said:
                continue
            if row.state == "loaded" and not row.placement:
                first = self._waiting.setdefault(row.name, now)
                if now - first < PLACEMENT_WAIT_S:
                    continue
            self._waiting.pop(row.name, None)
            self._said[row.name] = (row.state, row.problem)
            out.append(row)
        return out


def _refused(line: str, as_json: bool) -> None:
    if as_json:
        _say(json.dumps({"event": "refused", "message": line}))
    else:
        _say(f"lltui: refused: {line}", err=True)


def run_router(
    source: str | None,
    entries_words: list[str],
    *,
    keep: tuple[str, ...],
    load: tuple[str, ...],
    gpus: str | None = None,
    dry: bool,
    as_json: bool,
) -> int:
    """``source``: ``--models DIR|PRESET.ini``; else ``entries_words`` names the models."""
    from lltui.commands.launch_output import say_note as _say_note
    from lltui.core.llama.launch_spec import LaunchError
    from lltui.services.router import RouterSession
    from lltui.services.router_prep import RouterRequest

    shared, entries = _split(source, entries_words)
    request = RouterRequest(
        source=source, entries=entries, words=tuple(shared), keep=keep, load=load, gpus=gpus
    )
    session = RouterSession(request, on_note=_say_note)
    try:
        with session:
            prepared = session.prepare(require_binary=not dry)
            if dry:
                return dry_run(prepared, session.environ, as_json=as_json)
            return supervise(session, as_json=as_json)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None


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
    from lltui.core.llama.args import parse_llama_args
    from lltui.core.llama.launch_spec import LAUNCH_KEYS

    try:
        args = parse_llama_args(words)
    except ValueError as exc:
        raise CliError(f"launch: {exc}", 2) from None
    mine = LAUNCH_KEYS - {"model_path"}  # -m among a model's flags is refused later
    own = [w for g in args.given_args if g.key in mine for w in g.tokens]
    rest = [w for g in args.given_args if g.key not in mine for w in g.tokens]
    return own, rest

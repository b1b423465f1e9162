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
from lltui.commands.launch_output import report_exit as _report_exit
from lltui.commands.launch_output import rpc_json as _rpc_json
from lltui.commands.launch_output import say as _say
from lltui.commands.launch_output import say_note as _say_note
from lltui.commands.own_options import ROUTER, options_help, split_own

if TYPE_CHECKING:
    import threading

    from lltui.services.launch import LaunchSession
    from lltui.sources.llama.rpc_hosts import RpcHosts
    from lltui.sources.llama.supervisor import ServerStatus

USAGE = (
    "lltui launch MODEL.gguf [llama-server flags] [--dry-run] [--json] [--profile NAME]\n"
    "                    [--save-profile NAME] [--host H] [--port P] [--api-key-file F]\n"
    "                    [--keep-running] [--force] [--rpc-host [USER@]HOST[:PORT] ...]\n"
    "                    [--rpc-bind ADDR] [--rpc-server PATH]\n"
    "       lltui launch --models DIR|PRESET.ini [flags for every model] [--pin NAME ...]\n"
    "                    [--load NAME ...] [--gpus SPEC] [--dry-run] [--json]\n"
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
            2 bad input
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
    gpus: str | None = None  # router mode: the devices the plan assumes
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
        gpus=found.last("--gpus"),
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


def _mib(x: object) -> str:
    return f"{x:.2f}" if isinstance(x, int | float) else "?"


def _ready_lines(event: dict[str, Any]) -> list[str]:
    """The ready line and the prediction's line under it (each printed as one line)."""
    parts = [f"llama-server ready at {event['url']} (pid {event['pid']})"]
    for d in event["devices"]:
        text = (
            f"{d['name']}: model {_mib(d['model_mib'])} MiB, KV {_mib(d['kv_mib'])} MiB, "
            f"compute {_mib(d['compute_mib'])} MiB"
        )
        p = d.get("predicted")
        if p:  # lltui's prediction for the same flags, beside what the server allocated
            text += (
                f" (predicted {_mib(p['model_mib'])}, {_mib(p['kv_mib'])}, "
                f"{_mib(p['compute_mib'])})"
            )
        parts.append(text)
    lines = [" | ".join(parts)]
    pred = event.get("prediction")
    if pred:
        lines.append(
            f"  lltui's prediction ({pred['rules']}): {pred['exact']} of {pred['compared']} "
            f"buffer lines exact, {pred['within_1pct']} within 1%"
            + (f"; {pred['note']}" if pred.get("note") else "")
        )
    return lines


def run(args: argparse.Namespace) -> int:
    from lltui.core.llama.launch_spec import LaunchError
    from lltui.services.launch import LaunchRequest, LaunchSession

    own, words = _split_own(list(args.words))
    if own.help:
        print(HELP.rstrip())
        return 0
    if own.rpc_hosts or own.rpc_bind or own.rpc_server:
        return _run_with_rpc_hosts(own, words)
    if _router_mode(own, words):
        return _run_router(own, words)
    if own.pin or own.load or own.gpus:
        raise CliError("launch: --pin, --load and --gpus are for a router (--models)", 2)
    speed = _SpeedLines(as_json=own.json)
    session = LaunchSession(
        LaunchRequest(words=tuple(words)), on_note=_say_note, on_line=speed.feed
    )
    try:
        with session:
            prepared = session.prepare(require_binary=not own.dry_run, plan=_plan(own))
            if own.dry_run:
                return _dry_run(prepared, session.environ, as_json=own.json)
            speed.watch_command(prepared.spec.args, lambda: session.pid)
            return _supervise(session, as_json=own.json, keep_running=own.keep_running)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None


def _plan(own: _Own) -> str:
    """What a command fit says will not fit does: refused, said (a dry run), or started."""
    return "warn" if own.dry_run else "force" if own.force else "refuse"


def _run_router(own: _Own, words: list[str]) -> int:
    from lltui.commands.launch_router import run_router

    if own.keep_running or own.force:
        flag = "--keep-running" if own.keep_running else "--force"
        raise CliError(f"launch: {flag} is for one server, not a router", 2)
    return run_router(
        own.models,
        words,
        keep=own.pin,
        load=own.load,
        gpus=own.gpus,
        dry=own.dry_run,
        as_json=own.json,
    )


class _SpeedLines:
    """Each served request's speed beside the prediction, one line (or JSON event) each."""

    def __init__(self, *, as_json: bool) -> None:
        self._as_json = as_json
        self._watch: Any = None
        self._told = 0

    def watch_command(self, args: Any, pid: Any) -> None:
        from lltui.services.devices import local_devices
        from lltui.services.launch_speed import SpeedWatch

        devices, _why = local_devices()  # none: the server runs on the host
        self._watch = SpeedWatch.for_command(args, devices, pid=pid)

    def feed(self, line: str) -> None:
        watch = self._watch
        if watch is None:
            return
        check = watch.feed(line)
        if check is None:
            return
        kept = watch.stored[self._told :]
        self._told = len(watch.stored)
        if self._as_json:
            event = {
                "event": "speed",
                "kind": "prompt" if check.prompt else "generation",
                "tokens": check.tokens,
                "depth": check.depth,
                "measured_tps": round(check.measured_tps, 2),
                "predicted_tps": round(check.predicted_tps, 2),
                "diff": round(check.diff, 4),
                "kept": bool(kept),
                "calibration": check.calibration,
            }
            _say(json.dumps(event))
            return
        _say(f"served {check.line()}" + (f"; {check.calibration}" if check.calibration else ""))


def _run_with_rpc_hosts(own: _Own, words: list[str]) -> int:
    """rpc-server on each ``--rpc-host`` over ssh, then llama-server with their devices;
    every rpc-server and ssh session stopped on the way out, however lltui leaves."""
    import signal

    from lltui.core.llama.launch_spec import LaunchError
    from lltui.core.llama.rpc_hosts import RpcHostError, exposure_warning, parse_rpc_host
    from lltui.services.launch import LaunchRequest, LaunchSession
    from lltui.sources.llama.rpc_hosts import RpcHosts, RpcStartError

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
            if _router_mode(own, words):
                # every model may use them; the plan asks them for their memory, so they
                # run first (an RPC server serves one model's server at a time)
                if not own.dry_run:
                    rpc.start()
                    for line in rpc.describe():
                        note("info", line)
                return _run_router(own, ["--rpc", rpc.rpc_value(), *words])
            words = [*words, "--rpc", rpc.rpc_value()]
            session = LaunchSession(LaunchRequest(words=tuple(words)), on_note=_say_note)
            with session:
                prepared = session.prepare(require_binary=not own.dry_run, plan=_plan(own))
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
        _watch(session, signals_seen, wake, as_json=as_json, rpc=rpc, until_ready=keep_running)
        if keep_running and not session.exited:  # ready (or stopped watching while it loaded)
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
    until_ready: bool = False,
) -> None:
    """Say how loading goes and when the server is ready; return when it exits or a signal
    arrives (``until_ready``: once it is ready, too)."""
    import time

    announced = False
    progress = _LoadProgress(time.monotonic())
    while not signals_seen:
        if not announced and session.is_ready:
            announced = True
            event = session.ready_event()
            if rpc is not None:
                event["rpc_hosts"] = _rpc_json(rpc)
            for line in [json.dumps(event)] if as_json else _ready_lines(event):
                _say(line)
            if rpc is not None and not as_json:  # which host each RPC device is
                for line in rpc.describe():
                    _say(f"  {line}")
            if until_ready:
                return
        elif not announced:
            status = session.status()
            for line in progress.lines(status, time.monotonic()) if status else ():
                _say(f"lltui: {line}", err=True)
        if session.exited:
            return
        wake.wait(0.1)


class _LoadProgress:
    """What the server's log says while it loads, each step once, and how long it has been
    at it every so often: a big model takes minutes and must not look hung."""

    EVERY_S = 10.0

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.said: set[str] = set()
        self.last = t0

    def lines(self, status: ServerStatus, now: float) -> list[str]:
        log = status.log
        out = []
        steps = [
            ("loading", log.memory.loads > 0, "loading the model's weights"),
            ("weights", any(b.model_mib for b in log.buffers), self._weights(status)),
            ("context", any(b.kv_mib or b.compute_mib for b in log.buffers), self._context(status)),
            ("loaded", log.model_loaded, "model loaded; warming up"),
        ]
        for key, seen, text in steps:
            if seen and key not in self.said:
                self.said.add(key)
                out.append(text)
        if not out and now - self.last >= self.EVERY_S:
            out.append(f"still loading ({now - self.t0:.0f} s)")
        if out:
            self.last = now
        return out

    @staticmethod
    def _weights(status: ServerStatus) -> str:
        parts = [f"{b.name} {b.model_mib:.0f} MiB" for b in status.log.buffers if b.model_mib]
        return "weights placed: " + ", ".join(parts)

    @staticmethod
    def _context(status: ServerStatus) -> str:
        parts = [
            f"{b.name} KV {b.kv_mib:.0f} + compute {b.compute_mib:.0f} MiB"
            for b in status.log.buffers
            if b.kv_mib or b.compute_mib
        ]
        return "context allocated: " + ", ".join(parts)


def _detach(session: LaunchSession, *, as_json: bool) -> int:
    session.detach()
    url = session.prepared.spec.url
    stop = f"kill {session.pid}"
    detached = {
        "event": "detached",
        "pid": session.pid,
        "url": url,
        "log": str(session.log_file),
        "stop": stop,
    }
    _say(
        json.dumps(detached)
        if as_json
        else f"llama-server left running: pid {session.pid}, {url}, log {session.log_file}; "
        f"stop it with: {stop}"
    )
    return 0

"""``lltui watch``: alerts without a screen, for cron, CI and a terminal left open.

Without ``--once`` it prints one line per alert change (raised, changed, cleared) until
stopped, or until an alert at ``--fail-on`` or above is raised. With ``--once`` it looks
once and prints the alerts raised now. Exit codes: 0 nothing at ``--fail-on`` or above, 3 a
warning, 4 a critical alert, 1 the source failed, 2 bad input; ``--once`` stopped before its
look finished (Ctrl-C, SIGTERM) 130 or 143.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

from lltui.commands import (
    CliError,
    add_fleet_options,
    add_replay_options,
    add_source_option,
    check_llama_urls,
    command_interval,
    llama_api_key,
    print_json,
    rig_request,
)
from lltui.core.stop_signals import raised_on_stop, signal_exit_code
from lltui.core.units import fmt_time

if TYPE_CHECKING:
    from lltui.services.alerts import HookResult

STAMP = "%Y-%m-%d %H:%M:%S"  # when an alert was raised or changed
EXIT_CODES_HELP = "exit 0 nothing at --fail-on or above, 3 a warning, 4 critical, 1 failure"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "watch",
        help="alerts without a screen: one line per change, or --once and an exit code",
        description=(
            "Samples the source every --interval and raises alerts on thresholds (config "
            f"[alerts]): one line per change, or with --once the alerts now. {EXIT_CODES_HELP}."
        ),
    )
    add_source_option(p, sub=True, note="what to watch (a list watches a fleet)")
    add_fleet_options(p)
    p.add_argument(
        "--interval",
        dest="sub_interval",
        type=float,
        default=None,
        metavar="S",
        help="seconds between samples (default 1)",
    )
    p.add_argument("--once", action="store_true", help="look once; the exit code says the worst")
    p.add_argument("--json", action="store_true", help="JSON: one object per line (or --once)")
    p.add_argument(
        "--fail-on",
        choices=("warning", "critical"),
        default=None,
        help="exit (3 or 4) once an alert this severe or worse is raised (--once: warning)",
    )
    p.add_argument(
        "--llama",
        action="append",
        default=[],
        metavar="URL",
        help="a llama-server whose health to watch (down, not ready); repeatable",
    )
    p.add_argument(
        "--llama-api-key-file",
        default=None,
        metavar="FILE",
        help="API key for the llama-servers (else $LLAMA_API_KEY)",
    )
    p.add_argument(
        "--no-hooks", action="store_true", help="do not run the [alerts] hooks of the config"
    )
    add_replay_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lltui.commands import settings_of
    from lltui.core.monitor.alerts import alerts_to_json, change_to_json, exit_code
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.services.alerts import AlertWatch, HookRunner, WatchRequest

    settings = settings_of(args)
    interval = command_interval(args)
    check_llama_urls(args.llama)
    fail_on = args.fail_on or ("warning" if args.once else None)
    request = WatchRequest(
        rig=rig_request(args, interval),
        llama=tuple(args.llama),
        api_key=llama_api_key(args.llama_api_key_file) if args.llama else None,
        config=settings.alerts,
        once=args.once,
    )
    try:
        watch = AlertWatch(request)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except SourceUnavailable as exc:
        raise CliError(f"source {request.rig.source or 'auto'}: {exc}", exc.exit_code) from None
    said = _say_simulated(watch)  # (a fleet's hosts: once they answered)
    hooks = None
    if not args.no_hooks and settings.alerts.hooks:
        hooks = HookRunner(settings.alerts, say_hook)
    try:
        if args.once:
            with raised_on_stop():  # SIGTERM, SIGHUP: as Ctrl-C (the polls in flight stop)
                result = watch.round()
                said = said or _say_simulated(watch)
                if hooks is not None:
                    hooks.fire(result.changes)
                    hooks.wait()  # each bounded by its timeout
            if args.json:
                from lltui.core.monitor.simulated import simulated_json

                alerts = alerts_to_json(result.active)
                print_json(
                    {"alerts": alerts, "error": result.error, "source": watch.source}
                    | {"servers": [_server_json(s) for s in result.servers]}
                    | simulated_json(watch.simulated_info)
                )
            else:
                for alert in result.active:
                    print(f"{alert.line} (since {fmt_time(alert.since, STAMP)})")
                if not result.active:
                    print("no alerts" + (f" (source: {result.error})" if result.error else ""))
                for server in result.servers:
                    print(_server_text(server))
            return exit_code(result.active, fail_on or "warning")
        return _loop(watch, hooks, interval, args.json, fail_on, change_to_json, said)
    except KeyboardInterrupt as exc:
        if not args.once:
            return 0  # a watch that goes on ends so
        # exit 0 would say nothing is at --fail-on or above: nothing was looked at
        code = getattr(exc, "exit_code", signal_exit_code(signal.SIGINT))
        raise CliError(
            "watch: stopped before its look finished: no alert was checked", code
        ) from None
    finally:
        if hooks is not None:
            hooks.close()  # those waiting are dropped (said), those running end by their timeout
        watch.close()


def _say_simulated(watch: Any) -> bool:
    """The SIMULATED line, on stderr (where a person looks, whatever stdout is for), where
    the rig is simulated; whether it was said."""
    info = watch.simulated_info
    if info is not None:
        from lltui.core.monitor.simulated import simulated_line

        print(f"lltui watch: {simulated_line(info)}", file=sys.stderr, flush=True)
    return info is not None


def _loop(
    watch: Any,
    hooks: Any,
    interval: float,
    as_json: bool,
    fail_on: str | None,
    to_json: Any,
    said: bool = False,
) -> int:
    """One line per change until stopped (SIGINT, SIGTERM, SIGHUP: the hooks running are
    stopped too), the source ends, or ``fail_on`` is reached."""
    import json

    from lltui.commands.output import check_reader
    from lltui.core.monitor.alerts import exit_code
    from lltui.core.periodic import Periodic

    last_error: list[str | None] = [None]
    outcome: list[int] = []

    simulated = [said]

    def one_round() -> None:
        check_reader()  # a reader gone while no alert changed ends the watch as a write would
        for result in watch.rounds():  # a replay's every sample since the last, in turn
            simulated[0] = simulated[0] or _say_simulated(watch)
            if result.error != last_error[0] and result.error:
                print(f"source: {result.error}", file=sys.stderr, flush=True)
            last_error[0] = result.error
            if hooks is not None:
                hooks.fire(result.changes)
            for change in result.changes:
                if as_json:
                    print(json.dumps(to_json(change)), flush=True)
                else:
                    print(f"{fmt_time(change.at, STAMP)} {change.line}", flush=True)
            code = exit_code(result.active, fail_on) if fail_on is not None else 0
            if code or result.ended:
                if hooks is not None:  # every alert printed pages too (Ctrl-C: said, unrun)
                    hooks.drain()  # at most one hook's timeout more
                outcome.append(code)
                rounds.stop()
                return

    rounds = Periodic(one_round, interval, name="lltui-watch")
    with raised_on_stop():
        rounds.run()  # on this thread: SIGINT and SIGTERM stop it here
    return outcome[0] if outcome else 0


def _server_json(s: Any) -> dict[str, Any]:
    """A watched server's plan and KV fill (``--once --json``)."""
    from lltui.commands.launch_output import kv_to_json
    from lltui.core.monitor.plan_reality import plan_to_json

    f = s.follow
    return {
        "server": s.server,
        "pid": f.pid,
        "plan_source": f.plan_source,
        "plan": plan_to_json(f.plan) if f.plan is not None else None,
        "kv": kv_to_json(f.kv, f.layout) if f.kv is not None else None,
        "prompt_cache": f.prompt_cache.to_json() if f.prompt_cache is not None else None,
    }


def _server_text(s: Any) -> str:
    """A watched server in one line: its plan beside its process, its KV fill."""
    from lltui.core.memory.kv_fill import fill_line
    from lltui.core.monitor.plan_reality import plan_line

    f = s.follow
    parts = [f"{s.server}" + (f" (pid {f.pid})" if f.pid and "pid" not in s.server else "")]
    if f.plan is not None:
        parts.append(plan_line(f.plan) + f" (plan: {f.plan_source})")
    elif f.plan_source is None:
        parts.append("no plan: neither its log nor its command line could be read")
    else:
        parts.append("its process holds no GPU memory lltui can see")
    if f.kv is not None:
        parts.append(fill_line(f.kv))
    if f.prompt_cache is not None:
        parts.append(f.prompt_cache.line)
    return "; ".join(parts)


def say_hook(result: HookResult) -> None:
    """A hook's failure on stderr in one write: hooks end on several threads at once, and
    print's text and newline, written apart, ran two lines into one."""
    sys.stderr.write(f"{result.line}\n")
    sys.stderr.flush()

"""``lltui gpus``: one snapshot of every GPU and the host."""

from __future__ import annotations

import argparse
import shutil
from typing import TYPE_CHECKING, Any

from lltui.commands import (
    CliError,
    add_fleet_options,
    add_replay_options,
    add_source_option,
    open_recorder,
    print_json,
    rig_request,
)

if TYPE_CHECKING:
    from lltui.core.monitor.alerts import Alert, HostStatus
    from lltui.core.monitor.models import RigSample
    from lltui.services.rig import RigRequest


def register(sub: Any) -> None:
    p = sub.add_parser("gpus", help="one snapshot of every GPU (and host CPU/RAM)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_source_option(p, sub=True)
    add_fleet_options(p)
    add_replay_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lltui.core.monitor.alerts import alerts_to_json
    from lltui.core.monitor.gpus_report import alert_lines, rig_to_json, rig_to_text
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.services.rig import sample_once

    request = rig_request(args)
    spec = request.source
    if request.is_fleet:
        return _run_fleet(args, request)
    try:
        sample = sample_once(request)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except SourceUnavailable as exc:  # cannot open, an ssh drop, a broken recording line
        raise CliError(f"source {spec}: {exc}", exc.exit_code) from None
    if getattr(args, "record", None):
        # opened only once the source worked: a failed start must not empty the file
        try:
            with open_recorder(args.record, spec or "auto", full=args.record_full) as recorder:
                recorder.write(sample)
        except OSError as exc:  # a full disk, a file system gone read-only
            raise CliError(f"--record {args.record}: {exc.strerror or exc}", 1) from None
    alerts = _alerts({None: sample}, args, source=spec or "auto")
    if args.json:
        print_json({**rig_to_json(sample), "alerts": alerts_to_json(alerts)})
    else:
        # a terminal's width, from COLUMNS or the terminal itself; a pipe gets the full table
        columns = shutil.get_terminal_size(fallback=(0, 0)).columns
        print(rig_to_text(sample, width=columns or None))
        if alerts:
            print(alert_lines(alerts, columns or None))
    return 0


def _alerts(
    rigs: dict[str | None, RigSample],
    args: argparse.Namespace,
    source: str | None = None,
    hosts: list[HostStatus] | None = None,
) -> tuple[Alert, ...]:
    """The alerts these samples raise now, on the config's thresholds (one look: a condition
    that must last counts as it is now). ``source``: the one rig's ``--source``, whose
    simulated stand-in for a missing GPU is an alert (as in ``lltui watch``)."""
    import time

    from lltui.commands import settings_of
    from lltui.core.monitor.alerts import AlertTracker
    from lltui.services.rig import source_statuses

    tracker = AlertTracker(settings_of(args).alerts.thresholds, instant=True)
    sources = None if source is None else source_statuses(source, rigs[None].info)
    tracker.update(time.time(), rigs=rigs, sources=sources, hosts=hosts)
    return tracker.active


def _run_fleet(args: argparse.Namespace, request: RigRequest) -> int:
    """Several sources: each polled once, side by side, within the per-host timeout; each
    host's GPUs under it (JSON) or its own table (text). 1 when no host answered."""
    from lltui.core.monitor.fleet import alert_inputs, fleet_to_json, status_of
    from lltui.core.monitor.gpus_report import alert_lines, rig_to_text
    from lltui.services.rig import poll_fleet_once

    if getattr(args, "record", None):
        raise CliError("--record keeps one source's samples: give a single --source", 2)
    try:
        snapshot = poll_fleet_once(request)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    from lltui.core.monitor.alerts import alerts_to_json

    up, hosts = alert_inputs(snapshot, request.interval_s, once=True)
    alerts = _alerts(up, args, hosts=hosts)
    if args.json:
        print_json({**fleet_to_json(snapshot), "alerts": alerts_to_json(alerts)})
    else:
        from lltui.core.text import one_line

        columns = shutil.get_terminal_size(fallback=(0, 0)).columns
        blocks = []
        for state in snapshot.hosts:
            label = one_line(state.label)
            if state.sample is None or status_of(state, snapshot.t, 1.0, once=True) == "down":
                blocks.append(f"== {label}: down: {one_line(state.error or 'no answer')}")
            else:
                blocks.append(f"== {label}\n" + rig_to_text(state.sample, width=columns or None))
        print("\n\n".join(blocks))
        if alerts:
            print(alert_lines(alerts, columns or None))
    return 0 if snapshot.reachable else 1

"""``lltui gpus``: one snapshot of every GPU and the host."""

from __future__ import annotations

import argparse
import shutil
from typing import Any

from lltui.commands import (
    CliError,
    add_replay_options,
    add_source_option,
    open_recorder,
    print_json,
    source_spec,
)


def register(sub: Any) -> None:
    p = sub.add_parser("gpus", help="one snapshot of every GPU (and host CPU/RAM)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_source_option(p, sub=True)
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
    add_replay_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.gpu.kinds import open_source, replay_options

    spec = source_spec(args)
    hosts_file = getattr(args, "sub_hosts", None) or getattr(args, "hosts", None)
    from lltui.sources.gpu.kinds import is_fleet

    if hosts_file or is_fleet(spec):
        return _run_fleet(args, spec, hosts_file)
    try:
        source, info = open_source(spec, replay=replay_options(args))
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    except SourceUnavailable as exc:
        raise CliError(f"source {spec}: {exc}", _code(exc)) from None
    try:
        if not info.simulated:
            time.sleep(0.1)  # give host CPU% (and rate counters) an interval to measure
        sample = source.poll()
    except SourceUnavailable as exc:  # an ssh drop, a broken recording line
        raise CliError(f"source {spec}: {exc}", _code(exc)) from None
    finally:
        source.close()
    if getattr(args, "record", None):
        # opened only once the source worked: a failed start must not empty the file
        with open_recorder(args.record, spec, full=args.record_full) as recorder:
            recorder.write(sample)
    if args.json:
        print_json(rig_to_json(sample))
    else:
        # a terminal's width, from COLUMNS or the terminal itself; a pipe gets the full table
        columns = shutil.get_terminal_size(fallback=(0, 0)).columns
        print(rig_to_text(sample, width=columns or None))
    return 0


def _run_fleet(args: argparse.Namespace, spec: str, hosts_file: str | None) -> int:
    """Several sources: each polled once, side by side, within the per-host timeout; each
    host's GPUs under it (JSON) or its own table (text). 1 when no host answered."""
    from lltui.core.monitor.fleet import fleet_to_json, status_of
    from lltui.core.monitor.gpus_report import rig_to_text
    from lltui.sources.gpu.fleet import HOST_TIMEOUT_S, Fleet, fleet_specs

    if getattr(args, "record", None):
        raise CliError("--record keeps one source's samples: give a single --source", 2)
    try:
        specs = fleet_specs(spec, hosts_file)
        from lltui.sources.gpu.kinds import parse_source_spec

        for one in specs:
            parse_source_spec(one)
        timeout = getattr(args, "sub_host_timeout", None)
        if timeout is None:
            timeout = getattr(args, "host_timeout", None)
        if timeout is not None and not 0 < timeout <= 3600:
            raise ValueError(f"--host-timeout {timeout:g} is out of range (0-3600 s)")
        fleet = Fleet(specs, timeout=timeout or HOST_TIMEOUT_S)
    except ValueError as exc:
        raise CliError(str(exc), 2) from None
    try:
        snapshot = fleet.poll_once()
    finally:
        fleet.close()
    if args.json:
        print_json(fleet_to_json(snapshot))
    else:
        from lltui.core.text import one_line

        columns = shutil.get_terminal_size(fallback=(0, 0)).columns
        blocks = []
        for state in snapshot.hosts:
            status = status_of(state, snapshot.t, 1.0)
            label = one_line(state.label)
            if state.sample is None or status == "down":
                blocks.append(f"== {label}: down: {one_line(state.error or 'no answer')}")
            else:
                blocks.append(f"== {label}\n" + rig_to_text(state.sample, width=columns or None))
        print("\n\n".join(blocks))
    return 0 if snapshot.reachable else 1


def _code(exc: Exception) -> int:
    """2 for a file that is not a recording (bad input), 1 for a source that failed."""
    from lltui.sources.gpu.replay import RecordingUnreadable

    return 2 if isinstance(exc, RecordingUnreadable) else 1

"""``lltui gpus``: one snapshot of every GPU and the host."""

from __future__ import annotations

import argparse
import shutil
from typing import Any

from lltui.commands import CliError, add_replay_options, open_recorder, print_json, source_spec


def register(sub: Any) -> None:
    p = sub.add_parser("gpus", help="one snapshot of every GPU (and host CPU/RAM)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--source", dest="sub_source", default=None, help="as the global --source")
    add_replay_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import time

    from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.registry import open_source, replay_options

    spec = source_spec(args)
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
        with open_recorder(args.record, spec) as recorder:
            recorder.write(sample)
    if args.json:
        print_json(rig_to_json(sample))
    else:
        # a terminal's width, from COLUMNS or the terminal itself; a pipe gets the full table
        columns = shutil.get_terminal_size(fallback=(0, 0)).columns
        print(rig_to_text(sample, width=columns or None))
    return 0


def _code(exc: Exception) -> int:
    """2 for a file that is not a recording (bad input), 1 for a source that failed."""
    from lltui.sources.replay import RecordingUnreadable

    return 2 if isinstance(exc, RecordingUnreadable) else 1

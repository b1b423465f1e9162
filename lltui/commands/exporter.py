"""``lltui exporter``: Prometheus metrics of what the monitor samples."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lltui.commands import (
    CliError,
    add_replay_options,
    add_source_option,
    check_llama_urls,
    command_interval,
    llama_api_key,
    rig_request,
)

DEFAULT_LISTEN = "127.0.0.1:9400"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "exporter",
        help="serve Prometheus metrics of the GPUs (and llama-servers) lltui samples",
        description=(
            "Samples the source every --interval in one thread and serves the last sample "
            "as Prometheus text on http://LISTEN/metrics. Binds loopback unless "
            "--allow-remote is given."
        ),
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN})",
    )
    add_source_option(p, sub=True, note="what to sample")
    p.add_argument(
        "--interval",
        dest="sub_interval",
        type=float,
        default=None,
        metavar="S",
        help="seconds between samples (default 1)",
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --listen address that is not loopback (anyone reaching it reads the metrics)",
    )
    p.add_argument(
        "--llama",
        action="append",
        default=[],
        metavar="URL",
        help="a llama-server to follow (its /health, /metrics, /slots, /props); repeatable",
    )
    p.add_argument(
        "--llama-log",
        action="append",
        default=[],
        metavar="FILE",
        help="the log of the Nth --llama server, for per-device placement; repeatable",
    )
    p.add_argument(
        "--llama-api-key-file",
        default=None,
        metavar="FILE",
        help="API key for the llama-servers (else $LLAMA_API_KEY)",
    )
    p.add_argument(
        "--host-label",
        default=None,
        metavar="NAME",
        help="value of the host label (default: the source's host name, else this machine's)",
    )
    p.add_argument(
        "--max-processes",
        type=int,
        default=16,
        metavar="N",
        help="processes per GPU in lltui_gpu_process_memory_bytes, the largest first (16)",
    )
    add_replay_options(p, argparse.SUPPRESS)
    p.set_defaults(func=run)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (loopback); raises CliError (exit 2)."""
    value = text.strip()
    if value.startswith("["):
        host, sep, rest = value[1:].partition("]")
        port_s = rest[1:] if rest.startswith(":") else ""
        if not sep:
            port_s = ""
    else:
        host, _, port_s = value.rpartition(":")
    host = host or "127.0.0.1"
    try:
        port = int(port_s)
    except ValueError:
        raise CliError(f"--listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}", 2) from None
    if not 0 <= port <= 65535:
        raise CliError(f"--listen {text!r}: port must be 0..65535", 2)
    return host, port


def run(args: argparse.Namespace) -> int:
    import signal
    import threading
    from pathlib import Path

    from lltui.commands import settings_of
    from lltui.core.cmdline.address import is_loopback
    from lltui.services.exporter import ExportFailed, ExportRequest, LlamaFollow, Serving, export

    host, port = parse_listen(args.listen)
    if not is_loopback(host):
        if not args.allow_remote:
            raise CliError(
                f"--listen {host}: not a loopback address; add --allow-remote to serve GPU "
                "metrics beyond this machine",
                2,
            )
        print(
            f"warning: serving on {host}: anyone who can reach this port can read the metrics",
            file=sys.stderr,
        )
    if args.max_processes < 0:
        raise CliError("--max-processes must be 0 or more", 2)
    interval = command_interval(args)
    if len(args.llama_log) > len(args.llama):
        raise CliError("--llama-log FILE needs a --llama URL for each FILE", 2)
    api_key = llama_api_key(args.llama_api_key_file)
    check_llama_urls(args.llama)
    thresholds = settings_of(args).alerts.thresholds
    logs = [Path(p) for p in args.llama_log]
    request = ExportRequest(
        rig_request(args),
        host,
        port,
        interval_s=interval,
        llama=tuple(
            LlamaFollow(url, logs[i] if i < len(logs) else None, api_key)
            for i, url in enumerate(args.llama)
        ),
        host_label=args.host_label,
        max_processes=args.max_processes,
        thresholds=thresholds,
    )

    def serving(now: Serving) -> None:
        simulated = " (SIMULATED rig)" if now.info.simulated else ""
        print(
            f"lltui exporter: serving {now.url}, source {now.source}{simulated}, "
            f"every {interval:g} s",
            flush=True,
        )
        if now.info.simulated and now.info.simulated_reason:
            print(f"lltui exporter: {now.info.simulated_reason}", file=sys.stderr, flush=True)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda _signum, _frame: stop.set())
    try:
        export(
            request,
            stop,
            on_serving=serving,
            on_error=lambda line: print(f"lltui exporter: {line}", file=sys.stderr, flush=True),
        )
    except ExportFailed as exc:
        raise CliError(str(exc), exc.code) from None
    return 0

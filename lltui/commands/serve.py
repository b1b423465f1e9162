"""``lltui serve``: the app in a browser, for whoever cannot keep a terminal open."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from typing import Any

from lltui.commands import CliError, add_source_option

DEFAULT_LISTEN = "127.0.0.1:8765"
TOKEN_BYTES = 24
MAX_SESSIONS = 4  # browser tabs at once, each an lltui of its own


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the app to a browser (each tab runs its own lltui)",
        description=(
            "Serves the same app to a web browser on http://LISTEN/lltui/. A token is always "
            "needed (given with --token-file, or made up and printed once): the browser "
            "passes it as ?token=... the first time and keeps it in a cookie. Only the names "
            "of this machine (and --allow-host names) reach it."
        ),
    )
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"address to serve on (default {DEFAULT_LISTEN})",
    )
    add_source_option(p, sub=True, note="what the app watches")
    p.add_argument(
        "--interval", dest="sub_interval", type=float, default=None, metavar="S", help="seconds"
    )
    p.add_argument(
        "--token-file",
        default=None,
        metavar="FILE",
        help="the token browsers must give (its first line; the file readable by you alone); "
        "else one is made up and printed",
    )
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name browsers may reach this server by besides this machine's own (a proxy's, "
        "a DNS alias); repeatable",
    )
    p.add_argument(
        "--max-sessions",
        type=int,
        default=MAX_SESSIONS,
        metavar="N",
        help=f"browser tabs served at once, each its own lltui (default {MAX_SESSIONS})",
    )
    p.add_argument(
        "--readonly",
        dest="sub_readonly",
        action="store_true",
        help="no signal, launch, stop or file written from the page",
    )
    p.set_defaults(func=run)


def _token(path: str | None) -> str | None:
    if path is None:
        return None
    from lltui.paths import NotASmallFile, read_small_file

    try:
        mode = os.stat(path).st_mode
        token = read_small_file(path).decode("utf-8").split("\n", 1)[0].strip()
    except (OSError, UnicodeDecodeError, NotASmallFile) as exc:
        raise CliError(f"--token-file {path}: {getattr(exc, 'strerror', None) or exc}", 2) from None
    if mode & 0o077:
        raise CliError(
            f"--token-file {path}: others may read it (mode {stat.S_IMODE(mode):o}); "
            f"chmod 600 {path}",
            2,
        )
    if len(token) < 16 or not token.isascii() or not token.isprintable():
        raise CliError(
            f"--token-file {path}: the token must be 16 printable ASCII characters or more", 2
        )
    return token


def _check_app_options(args: argparse.Namespace) -> None:
    """What each tab's app would refuse (its source, its interval), said once here: one
    line and exit 2 (1 for a source that cannot be opened), not a page that fails."""
    from lltui.commands import rig_request, source_spec
    from lltui.config import ConfigError, check_values
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.services.rig import check_rig

    interval = getattr(args, "sub_interval", None)
    try:
        if interval is not None:
            check_values({"interval": interval}, "--interval")
        spec = source_spec(args)
        check_rig(rig_request(args))
    except (ConfigError, ValueError) as exc:
        raise CliError(str(exc), 2) from None
    except SourceUnavailable as exc:
        raise CliError(f"source {spec}: {exc}", exc.exit_code) from None


def app_options(args: argparse.Namespace) -> list[str]:
    """The options each browser's app is started with (what was given here)."""
    options: list[str] = []
    source = getattr(args, "sub_source", None) or getattr(args, "source", None)
    if source:
        options += ["--source", source]
    interval = getattr(args, "sub_interval", None) or getattr(args, "interval", None)
    if interval:
        options += ["--interval", f"{interval:g}"]
    for flag, attr in (("--theme", "theme"), ("--config", "config"), ("--hosts", "hosts")):
        value = getattr(args, attr, None)
        if value:
            options += [flag, value]
    for flag, attr in (
        ("--host-timeout", "host_timeout"),
        ("--replay-speed", "replay_speed"),
        ("--energy-price", "energy_price"),
    ):
        value = getattr(args, attr, None)
        if value is not None:
            options += [flag, f"{value:g}"]
    for flag, attr in (("--replay-step", "replay_step"), ("--replay-loop", "replay_loop")):
        if getattr(args, attr, False):
            options.append(flag)
    if getattr(args, "sub_readonly", False) or getattr(args, "readonly", False):
        options.append("--readonly")
    options.append("--served")
    return options


def run(args: argparse.Namespace) -> int:
    import secrets

    from lltui.commands.exporter import parse_listen
    from lltui.core.cmdline.address import is_loopback

    host, port = parse_listen(args.listen)
    if port == 0:
        raise CliError("--listen needs a port (the browser is told where to connect)", 2)
    if args.max_sessions < 1:
        raise CliError("--max-sessions must be 1 or more", 2)
    given = _token(args.token_file)
    _check_app_options(args)
    token = given or secrets.token_urlsafe(TOKEN_BYTES)
    try:
        from lltui.app.web.server import LltuiWebServer, ServeOptions, app_argv, browser_urls
    except ImportError as exc:
        raise CliError(f"the browser view needs aiohttp and textual-serve ({exc})", 1) from None

    def ready() -> None:
        query = "" if given else f"?token={token}"
        for url in browser_urls(host, port):
            print(f"lltui serve: open {url}{query} (each tab runs its own lltui)", flush=True)
        if given:
            print("lltui serve: add ?token=... (from --token-file) the first time", flush=True)
        if not is_loopback(host):
            print(
                "lltui serve: anyone with the token can drive the app (and start servers and "
                "signal processes unless --readonly); plain HTTP: put TLS in front beyond a "
                "private network",
                file=sys.stderr,
                flush=True,
            )

    options = ServeOptions(
        host, port, token, frozenset(args.allow_host), max_sessions=args.max_sessions
    )
    server = LltuiWebServer(app_argv(app_options(args)), options, on_ready=ready)
    try:
        server.serve()
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", 1) from None
    return 0

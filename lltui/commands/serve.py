"""``lltui serve``: the app in a browser, for whoever cannot keep a terminal open."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lltui.commands import CliError, add_source_option

DEFAULT_LISTEN = "127.0.0.1:8765"
TOKEN_BYTES = 24


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve the app to a browser (each tab runs its own lltui)",
        description=(
            "Serves the same app to a web browser on http://LISTEN/. Loopback by default; any "
            "other address needs a token (given, or made up and printed once), which the "
            "browser passes as ?token=... the first time."
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
        help="the token browsers must give (its first line); else one is made for a "
        "non-loopback address",
    )
    p.add_argument(
        "--readonly", dest="sub_readonly", action="store_true", help="no signalling from the page"
    )
    p.set_defaults(func=run)


def _token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as exc:
        raise CliError(f"--token-file {path}: {exc.strerror or exc}", 2) from None
    if len(token) < 16:
        raise CliError(f"--token-file {path}: the token must be 16 characters or more", 2)
    return token


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
    if getattr(args, "sub_readonly", False) or getattr(args, "readonly", False):
        options.append("--readonly")
    return options


def run(args: argparse.Namespace) -> int:
    import secrets

    from lltui.commands.exporter import parse_listen
    from lltui.core.llama.address import is_loopback

    host, port = parse_listen(args.listen)
    if port == 0:
        raise CliError("--listen needs a port (the browser is told where to connect)", 2)
    token = _token(args.token_file)
    made = False
    if token is None and not is_loopback(host):
        token, made = secrets.token_urlsafe(TOKEN_BYTES), True
    try:
        from lltui.app.web.server import LltuiWebServer, app_argv
    except ImportError as exc:
        raise CliError(f"the browser view needs textual-serve ({exc})", 1) from None

    def ready(url: str) -> None:
        where = f"{url}/?token={token}" if made else f"{url}/"
        print(f"lltui serve: open {where} (each tab runs its own lltui)", flush=True)
        if token is not None and not made:
            print("lltui serve: add ?token=... (from --token-file) the first time", flush=True)
        if not is_loopback(host):
            print(
                "lltui serve: anyone with the token can drive the app (and signal processes "
                "unless --readonly); plain HTTP: put TLS in front beyond a private network",
                file=sys.stderr,
                flush=True,
            )

    server = LltuiWebServer(app_argv(app_options(args)), host, port, token=token, on_ready=ready)
    try:
        server.serve()
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}", 1) from None
    return 0

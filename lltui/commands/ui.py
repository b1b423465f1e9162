"""Starting the app (and ``--screenshot``) from the command line; Textual is imported here."""

from __future__ import annotations

import argparse
import gc
import re
import sys

from lltui.commands import CliError, open_recorder
from lltui.core.jsonout import fields_of


def _size(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text or "")
    if not m:
        raise CliError(f"--size must look like 120x40, got {text!r}", 2)
    w, h = int(m.group(1)), int(m.group(2))
    if not (20 <= w <= 1000 and 8 <= h <= 500):
        raise CliError(f"--size {w}x{h} is out of range (20..1000 x 8..500)", 2)
    return w, h


def run_app(args: argparse.Namespace) -> int:
    # Textual and the app's modules allocate some 40k objects that live as long as lltui:
    # the collector would go through them again and again while they load and the first
    # screen is built (about a tenth of the start). No collection while they load; then
    # they are frozen out of every later one (gc.freeze), and collection goes on as usual.
    gc.disable()
    try:
        return _run_app(args)
    finally:
        gc.enable()


def _start_collecting() -> None:
    gc.freeze()
    gc.enable()


def _run_app(args: argparse.Namespace) -> int:
    from lltui.config import ConfigError, load_settings
    from lltui.core.monitor.models import SourceUnavailable

    try:
        settings = load_settings(
            {
                **fields_of(args, "interval theme source readonly"),
                "served": getattr(args, "served", None),
                "energy_price": args.energy_price,
            },
            path=args.config,
        )
    except ConfigError as exc:
        raise CliError(str(exc), 2) from None
    size = _size(args.size) if args.screenshot else None
    view = args.view or "monitor"

    from lltui.app.app import LltuiApp, create_app
    from lltui.commands import replay_options

    if view not in LltuiApp.MODES:
        raise CliError(f"unknown view {view!r}; views: {', '.join(LltuiApp.MODES)}", 2)
    recorder = None
    try:
        try:
            app = create_app(
                settings,
                replay=replay_options(args),
                poll_limit=1 if args.screenshot else None,
                view=view,
                hosts_file=getattr(args, "hosts", None),
                host_timeout=getattr(args, "host_timeout", None),
            )
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
        except SourceUnavailable as exc:
            raise CliError(f"source {settings.source}: {exc}", exc.exit_code) from None
        from lltui.core.stop_signals import loop_stops_on_signal

        # SIGTERM and SIGHUP (a dropped SSH session) end the app as Ctrl-Q does: its
        # sources, ssh masters and recording closed (their default left the masters running)
        with loop_stops_on_signal(app.exit_when_ready):
            if args.record:
                # only once the source is open: a failed start must not empty the file
                recorder = open_recorder(args.record, settings.source, full=args.record_full)
                app.set_sample_listener(recorder.write)
            if recorder is not None:
                recorder.start(app.model.info)
            _start_collecting()
            if args.screenshot:
                assert size is not None
                return _screenshot(app, args.screenshot, size, view)
            app.run()
        return app.return_code or 0
    finally:
        if recorder is not None:
            recorder.close()


def _screenshot(app: object, path: str, size: tuple[int, int], view: str) -> int:
    import asyncio
    import os

    from lltui.app.app import LltuiApp

    assert isinstance(app, LltuiApp)

    async def shoot() -> None:
        async with app.run_test(size=size) as pilot:
            for _ in range(2000):  # up to ~10 s for the first sample
                if app.samples_applied or app.model.error:
                    break
                await asyncio.sleep(0.005)
            for _ in range(3000):  # and for what the view reads once, such as the topology
                if not app.view_loading():
                    break
                await asyncio.sleep(0.005)
            await pilot.pause()
            # a private file (the monitor shows other users' processes): see the app's own
            folder, name = os.path.split(os.path.abspath(path))
            app.save_screenshot(filename=name, path=folder)

    try:
        asyncio.run(shoot())
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc}", 1) from None
    for failure in app.theme_failures:  # the app's notice, which no one sees here
        print(f"lltui: warning: {failure}", file=sys.stderr)
    print(path)
    return 0

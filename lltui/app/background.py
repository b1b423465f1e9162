"""Blocking work off the UI thread, awaited from a screen's own (async) Textual worker.

The work runs on a daemon thread, not in asyncio's default executor (where Textual's thread
workers run): those threads are joined at exit, and a hung nvidia-smi or all-reduce must not
keep lltui from quitting. Cancelling the awaiting worker (a newer request, the screen going
away, the app quitting) drops the result; the thread finishes or dies with the process."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from lltui.core.text import error_text

if TYPE_CHECKING:
    from textual.dom import DOMNode

T = TypeVar("T")


async def off_thread(work: Callable[[], T], name: str) -> T:
    """Run ``work`` on a daemon thread named ``lltui-<name>`` and return (or raise) what it
    does, back on the event loop."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:  # raised again in the awaiting worker
            _deliver(loop, partial(_reject, future, exc))
        else:
            _deliver(loop, partial(_resolve, future, result))

    threading.Thread(target=run, name=f"lltui-{name}", daemon=True).start()
    return await future


def _resolve(future: asyncio.Future[T], result: T) -> None:
    if not future.done():  # the awaiting worker may have been cancelled meanwhile
        future.set_result(result)


def _reject(future: asyncio.Future[T], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _deliver(loop: asyncio.AbstractEventLoop, settle: Callable[[], None]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
        loop.call_soon_threadsafe(settle)


async def off_thread_reported(node: DOMNode, work: Callable[[], T], name: str) -> T | None:
    """``off_thread``, telling the user (and returning None) when the work raises: a bug in
    a loader must cost its answer, not the app."""
    try:
        return await off_thread(work, name)
    except Exception as exc:
        node.app.notify(f"{name} failed: {error_text(exc)}", severity="error")
        return None

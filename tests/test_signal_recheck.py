"""After SIGTERM the signal dialog looks again before it offers SIGKILL: a process that
exited is said to have exited, and nothing more is sent (real child processes, listed as GPU
processes by the fake NVML, as in test_process_signals.py)."""

from __future__ import annotations

import signal
import subprocess

from support.app_helpers import wait_for
from support.nvml_helpers import close_nvml_sources  # noqa: F401 (an autouse fixture)
from test_process_signals import STUBBORN, children, nvml_app, select, spawn  # noqa: F401

from lltui.app.screens.signal_dialog import SignalDialog

# exits after SIGTERM (as a server that stops cleanly does), but only once the test has seen
# the dialog in its "termed" state: it waits for a line on its stdin, so the order holds
# however busy the machine is
SLOW_TO_STOP = (
    "import signal, sys, time\n"
    "def stop(*_):\n"
    "    sys.stdin.readline(); sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


async def test_no_kill_is_offered_once_the_process_exited(monkeypatch, children):  # noqa: F811
    child = spawn(children, SLOW_TO_STOP, stdin=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    assert child.stdin is not None
    app = nvml_app(monkeypatch, child.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        await pilot.press("K")
        dialog = app.screen
        assert isinstance(dialog, SignalDialog)
        await pilot.press("t")
        assert dialog.state == "termed"  # still there a moment after TERM: KILL offered
        assert dialog.query_one("#signal-kill").display
        child.stdin.write(b"stop\n")
        child.stdin.flush()  # now it may finish stopping
        await wait_for(lambda: child.poll() is not None)
        await wait_for(lambda: dialog.state == "exited")
        await pilot.pause()
        assert not dialog.query_one("#signal-kill").display
        assert "exited after SIGTERM" in str(dialog.query_one("#signal-text").render())
        await pilot.press("k")  # nothing to send
        assert app.screen is dialog and child.returncode == 0
        await pilot.press("escape")
        assert not isinstance(app.screen, SignalDialog)


async def test_a_process_that_ignores_term_is_still_offered_kill(monkeypatch, children):  # noqa: F811
    child = spawn(children, STUBBORN)
    app = nvml_app(monkeypatch, child.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        await pilot.press("K")
        dialog = app.screen
        await pilot.press("t")
        await wait_for(lambda: dialog.rechecks >= 3)  # looked again twice after the first
        await pilot.pause()
        assert dialog.state == "termed" and dialog.query_one("#signal-kill").display
        assert "still running" in str(dialog.query_one("#signal-text").render())
        await pilot.press("k")
        await wait_for(lambda: child.poll() is not None)
        assert child.returncode == -signal.SIGKILL

"""The quiet terminal driver (app/patches/driver.py): its input thread sleeps until a key or the
stop comes, a lone ESC still gets through, and the app picks it only where Textual would
use its Linux driver. The last tests run a real Textual app on it in a real pseudo-terminal."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest
from support.pty_helpers import spawn_in_pty
from textual.drivers.headless_driver import HeadlessDriver
from textual.drivers.linux_driver import LinuxDriver
from textual.drivers.web_driver import WebDriver

from lltui.app.patches.driver import InputWaits, QuietLinuxDriver, WakingEvent, quiet

ROOT = Path(__file__).resolve().parents[1]


# -- the wait policy ---------------------------------------------------------------------
def test_waits_sleep_for_ever_until_a_key_comes() -> None:
    waits = InputWaits(0.1)
    assert waits.timeout(100.0) is None
    waits.after(False, 100.0)  # a wake-up without input (the stop pipe, say)
    assert waits.timeout(100.5) is None


def test_waits_time_out_after_a_key_so_a_lone_escape_is_let_through() -> None:
    waits = InputWaits(0.1)
    waits.after(True, 10.0)
    first = waits.timeout(10.0)
    assert first is not None and 0.1 < first < 0.12
    assert waits.timeout(10.05) == pytest.approx(first - 0.05)
    waits.after(False, 10.05)  # woke early (another key's bytes, the stop): still timed
    assert waits.timeout(10.05) is not None
    assert waits.timeout(11.0) == 0.0  # overdue: do not wait at all
    waits.after(False, 10.2)  # the delay has run out and the parser was ticked
    assert waits.timeout(10.2) is None


def test_waits_restart_the_delay_on_every_key() -> None:
    waits = InputWaits(0.2)
    waits.after(True, 1.0)
    waits.after(True, 1.15)
    waits.after(False, 1.25)  # past the first key's delay, not the second's
    timeout = waits.timeout(1.25)
    assert timeout is not None and timeout == pytest.approx(0.105, abs=1e-6)


# -- the stop that wakes -----------------------------------------------------------------
def test_waking_event_makes_its_pipe_readable_and_drains() -> None:
    event = WakingEvent()
    try:
        assert select.select([event.fileno], [], [], 0)[0] == []
        event.set()
        event.set()  # twice: still one readable pipe, no error
        assert event.is_set()
        assert select.select([event.fileno], [], [], 0)[0] == [event.fileno]
        event.drain()
        assert select.select([event.fileno], [], [], 0)[0] == []
        event.clear()
        assert not event.is_set()
    finally:
        event.close()
    event.clear()
    event.set()  # after close: still an Event, and nothing is written to a closed number
    assert event.is_set() and event.fileno == -1
    event.close()  # twice: nothing to close


# -- which driver ------------------------------------------------------------------------
def test_quiet_replaces_only_textuals_linux_driver() -> None:
    assert quiet(LinuxDriver) is QuietLinuxDriver
    assert quiet(HeadlessDriver) is HeadlessDriver
    assert quiet(WebDriver) is WebDriver  # the browser view (textual-serve) keeps its own


def test_app_picks_the_quiet_driver_unless_one_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from textual import constants

    from lltui.app.app import create_app
    from lltui.config import Settings

    monkeypatch.setattr(constants, "DRIVER", None)
    assert create_app(Settings(), start_polling=False).driver_class is QuietLinuxDriver
    monkeypatch.setattr(constants, "DRIVER", "textual.drivers.web_driver:WebDriver")
    assert create_app(Settings(), start_polling=False).driver_class is WebDriver


# -- a real app in a real terminal ---------------------------------------------------------
# The probe logs its events to a file: mounted, each key, and how often the input thread
# woke over one idle second.
PROBE = """
import sys
from textual.app import App
from textual.widgets import Static
from lltui.app.patches.driver import QuietLinuxDriver

log = open(sys.argv[1], "a", buffering=1, encoding="utf-8")

class Probe(App):
    BINDINGS = [("q", "quit", "Quit")]

    def compose(self):
        yield Static("probe")

    def on_mount(self):
        log.write("mounted\\n")
        self.set_timer(0.3, self.idle_start)

    def idle_start(self):
        self.wakes = self._driver.input_wakes
        self.set_timer(1.0, self.idle_end)

    def idle_end(self):
        log.write(f"idle-wakes {self._driver.input_wakes - self.wakes}\\n")

    def on_key(self, event):
        log.write(f"key {event.key} {event.character!r}\\n")

Probe(driver_class=QuietLinuxDriver).run()
log.write("exited\\n")
"""


class Terminal:
    """A child process on a new pseudo-terminal; its output drained so it never blocks."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.child, self.master = spawn_in_pty(argv, env, (80, 24))

    def drain(self, seconds: float) -> None:
        ready, _, _ = select.select([self.master], [], [], seconds)
        if ready:
            with contextlib.suppress(OSError):  # the child closed its side
                os.read(self.master, 65536)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def close(self) -> None:
        if self.child.poll() is None:
            os.killpg(self.child.pid, signal.SIGKILL)
            self.child.wait()
        os.close(self.master)


def wait_for_line(
    term: Terminal, log: Path, line: str, timeout: float = 20.0, contains: str = ""
) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
        if any(x.startswith(line) and contains in x for x in lines):
            return lines
        if term.child.poll() is not None and line != "exited":
            break
        term.drain(0.05)
    raise AssertionError(f"no {line!r} in {log.read_text() if log.exists() else '(no log)'}")


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pseudo-terminal")
def test_a_real_terminal_app_sleeps_gets_a_lone_escape_and_quits_at_once(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    log = tmp_path / "events.log"
    env = dict(os.environ, TERM="xterm-256color", PYTHONPATH=str(ROOT), ESCDELAY="100")
    env.pop("TEXTUAL_DRIVER", None)
    term = Terminal([sys.executable, str(probe), str(log)], env)
    try:
        wait_for_line(term, log, "mounted")
        lines = wait_for_line(term, log, "idle-wakes")
        wakes = int(next(x for x in lines if x.startswith("idle-wakes")).split()[1])
        assert wakes <= 1  # Textual's own driver wakes ten times in that second
        term.type(b"\x1b")  # ESC alone: no sequence follows, so it is the escape key
        wait_for_line(term, log, "key escape")
        # a character whose bytes come in two reads: the first read decodes to nothing,
        # which is not the end of the input
        term.type(b"\xc3")
        term.drain(0.3)
        term.type(b"\xa9")
        wait_for_line(term, log, "key ", contains="'é'")
        term.type(b"a")
        wait_for_line(term, log, "key a")
        started = time.monotonic()
        term.type(b"q")
        wait_for_line(term, log, "exited")
        assert term.child.wait(10) == 0
        # the stop woke the sleeping input thread: no wait for a timeout that never comes
        assert time.monotonic() - started < 5.0
    finally:
        term.close()


@pytest.mark.skipif(sys.platform == "win32", reason="a POSIX pseudo-terminal")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_the_app_as_quitting_does(tmp_path: Path, sig: int) -> None:
    """SIGHUP is a dropped SSH session: its default killed the app there and then (exit
    -1), its sources and ssh masters left running; now it closes them and exits 0."""
    record = tmp_path / "rig.jsonl"
    env = dict(os.environ, TERM="xterm-256color", PYTHONPATH=str(ROOT))
    env.pop("TEXTUAL_DRIVER", None)
    argv = [sys.executable, "-m", "lltui", "--source", "sim:kaggle-2xt4", "--record", str(record)]
    term = Terminal(argv, env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (record.exists() and record.stat().st_size):
            term.drain(0.1)  # (the app is up once it records)
        assert record.stat().st_size > 0
        term.child.send_signal(sig)
        deadline = time.monotonic() + 30
        while term.child.poll() is None and time.monotonic() < deadline:
            term.drain(0.1)
        assert term.child.returncode == 0
    finally:
        term.close()

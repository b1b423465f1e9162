"""Signalling a GPU process from the monitor, driven by Pilot, on real child processes.

The children are listed as GPU processes by the fake NVML (tests/support/fake_pynvml.py), so the
real NVML source joins them with the host's facts and the real signalling code sends to
them. A simulated rig signals nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from support.app_helpers import feed, sim_app, wait_for
from support.fake_pynvml import MIB, FakeNvml, make_gpus
from support.nvml_helpers import close_nvml_sources  # noqa: F401 (an autouse fixture)

from lltui.app.app import LltuiApp, create_app
from lltui.app.screens.signal_dialog import SignalDialog
from lltui.app.widgets.process_table import ProcessTable
from lltui.config import Settings
from lltui.core.monitor.models import RigInfo
from lltui.core.monitor.signals import ProcessIdentity, may_signal
from lltui.services.signals import signal_refusal
from lltui.sources.gpu import signals
from lltui.sources.gpu.nvml import NvmlSource
from lltui.sources.gpu.sim import StepClock

SLEEPER = "import time; time.sleep(60)"
# ignores SIGTERM, says when it does
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('ready', flush=True); time.sleep(60)"
)


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(10)


def spawn(children: list, code: str = SLEEPER, **kwargs) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, **kwargs)
    return started(children, child, code)


def started(children: list, child: subprocess.Popen[bytes], code: str = "") -> subprocess.Popen:
    children.append(child)
    if code == STUBBORN:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    return child


def nvml_app(monkeypatch, *pids: int) -> LltuiApp:
    """The app on the NVML source, with ``pids`` on GPU 0 of a fake driver."""
    gpus = make_gpus(2)
    gpus[0].compute_procs = [(pid, (1000 + i) * MIB) for i, pid in enumerate(pids)]
    FakeNvml(gpus).install(monkeypatch)
    clock = StepClock(1000.0, step=0.0)
    source = NvmlSource(clock=clock, env={}, event_wait_s=0.002)
    return create_app(Settings(source="nvml"), source=source, clock=clock, start_polling=False)


def notes(app: LltuiApp) -> list[str]:
    return [n.message for n in app._notifications]


async def select(app: LltuiApp, pilot, pid: int) -> ProcessTable:
    feed(app, 1)
    await pilot.pause()
    table = app.screen.query_one(ProcessTable)
    assert app.focused is table
    table.move_cursor(row=table.get_row_index(str(pid)))
    await pilot.pause()
    return table


async def test_term_is_confirmed_then_sent(monkeypatch, children):
    child = spawn(children)
    app = nvml_app(monkeypatch, child.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        await pilot.press("K")
        dialog = app.screen
        assert isinstance(dialog, SignalDialog)
        text = str(dialog.query_one("#signal-text").render())
        assert str(child.pid) in text and "time.sleep(60)" in text
        assert signals.identify(child.pid).user in text
        assert child.poll() is None  # nothing sent before the confirmation
        await pilot.press("t")
        await wait_for(lambda: child.poll() is not None)
        assert child.returncode == -signal.SIGTERM
        await wait_for(lambda: any(f"SIGTERM sent to pid {child.pid}" in n for n in notes(app)))
        await pilot.press("escape")
        assert not isinstance(app.screen, SignalDialog)


async def test_kill_only_after_term_and_a_second_confirmation(monkeypatch, children):
    child = spawn(children, STUBBORN)
    app = nvml_app(monkeypatch, child.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        await pilot.press("f9")
        dialog = app.screen
        assert isinstance(dialog, SignalDialog)
        await pilot.press("k")  # KILL is not offered before TERM
        assert app.screen is dialog and dialog.state == "ask" and child.poll() is None
        await pilot.press("t")
        assert dialog.state == "termed" and child.poll() is None  # it ignores TERM
        assert "SIGKILL" in str(dialog.query_one("#signal-text").render())
        await pilot.click("#signal-kill")
        await wait_for(lambda: child.poll() is not None)
        assert child.returncode == -signal.SIGKILL
        assert not isinstance(app.screen, SignalDialog)


async def test_cancel_leaves_the_process_alone(monkeypatch, children):
    child = spawn(children)
    app = nvml_app(monkeypatch, child.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        await pilot.press("K")
        assert isinstance(app.screen, SignalDialog)
        await pilot.click("#signal-cancel")
        assert not isinstance(app.screen, SignalDialog)
        await pilot.press("K", "escape")
        assert not isinstance(app.screen, SignalDialog)
        assert child.poll() is None and not notes(app)


async def test_a_pid_that_is_gone_is_one_line(monkeypatch, children):
    child = spawn(children)
    app = nvml_app(monkeypatch, child.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        child.kill()
        child.wait(10)
        await pilot.press("K")
        await wait_for(lambda: bool(notes(app)))
        assert notes(app) == [f"pid {child.pid} is gone: it has exited"]
        assert not isinstance(app.screen, SignalDialog)


async def test_a_pid_gone_while_the_dialog_was_open_is_not_signalled(monkeypatch, children):
    child = spawn(children)
    app = nvml_app(monkeypatch, child.pid)
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(signals, "deliver", lambda pid, sig: sent.append((pid, sig)))
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        await pilot.press("K")
        child.kill()
        child.wait(10)
        await pilot.press("t")
        await wait_for(lambda: bool(notes(app)))
        assert notes(app) == [f"pid {child.pid} is gone: it has exited"]
        assert sent == [] and not isinstance(app.screen, SignalDialog)


def _nobody_uid() -> int:
    import pwd

    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        return 65534


async def test_another_users_process_is_not_offered(monkeypatch, children):
    if os.geteuid() == 0:
        # root may signal anyone: run the child as another uid, and be a plain user here
        # (the check reads the child's real owner from the kernel either way)
        sleep = shutil.which("sleep")  # one that user can run (lltui's python may be root's)
        assert sleep is not None
        child = started(children, subprocess.Popen([sleep, "60"], user=_nobody_uid()))
        monkeypatch.setattr(signals, "caller_ids", lambda: (1000, 1000))
        pid = child.pid
    else:
        pid = 1  # init is root's
    owner = signals.identify(pid).user
    app = nvml_app(monkeypatch, pid)
    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, pid)
        await pilot.press("K")
        await wait_for(lambda: bool(notes(app)))
        assert notes(app) == [f"not permitted: pid {pid} belongs to {owner}"]
        assert not isinstance(app.screen, SignalDialog)
    if os.geteuid() == 0:
        assert child.poll() is None


async def test_permission_refused_by_the_kernel_is_one_line(monkeypatch, children):
    child = spawn(children)
    app = nvml_app(monkeypatch, child.pid)

    def refuse(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    async with app.run_test(size=(120, 30)) as pilot:
        await select(app, pilot, child.pid)
        await pilot.press("K")
        monkeypatch.setattr(signals, "deliver", refuse)
        await pilot.press("t")
        await wait_for(lambda: bool(notes(app)))
        owner = signals.identify(child.pid).user
        assert notes(app) == [f"not permitted: pid {child.pid} belongs to {owner}"]
        assert child.poll() is None and not isinstance(app.screen, SignalDialog)


async def test_a_simulated_rig_signals_nothing(monkeypatch):
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(signals, "deliver", lambda pid, sig: sent.append((pid, sig)))
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(120, 30)) as pilot:
        feed(app, 20)
        await pilot.pause()
        table = app.screen.query_one(ProcessTable)
        table.move_cursor(row=table.get_row_index("41234"))
        await pilot.pause()
        await pilot.press("K")
        dialog = app.screen
        assert isinstance(dialog, SignalDialog)
        text = str(dialog.query_one("#signal-text").render())
        assert "41234" in text and "simulated" in text
        await pilot.press("t", "k")
        assert app.screen is dialog and sent == []
        await pilot.press("escape")
        assert not isinstance(app.screen, SignalDialog) and sent == []


def test_only_local_sources_signal():
    assert signal_refusal(RigInfo(source="nvml")) is None
    assert signal_refusal(RigInfo(source="smi")) is None
    assert "simulated" in (signal_refusal(RigInfo(source="sim:4xl4", simulated=True)) or "")
    assert "simulated" in (signal_refusal(RigInfo(source="replay:/tmp/r.jsonl")) or "")
    assert "not on this machine" in (signal_refusal(RigInfo(source="smi:gpu-box")) or "")
    assert signal_refusal(RigInfo(source="amd")) is None  # AMD's driver: this machine's pids
    assert "not on this machine" in (signal_refusal(RigInfo(source="amd:gpu-box")) or "")
    assert "not on this machine" in (signal_refusal(RigInfo(source="scrape:http://h/m")) or "")


def test_kill_rule_is_the_kernels():
    def target(real: int, saved: int) -> ProcessIdentity:
        return ProcessIdentity(1, "u", "c", uid_real=real, uid_saved=saved, started=0.0)

    assert may_signal(1000, 0, target(5, 5))  # root
    assert may_signal(1000, 1000, target(1000, 1000))
    assert may_signal(1000, 1001, target(1001, 7))  # effective uid is the target's
    assert may_signal(1000, 1000, target(7, 1000))  # the target's saved uid
    assert not may_signal(1000, 1000, target(1001, 1001))


def test_send_signal_refuses_an_unknown_signal_name():
    me = signals.identify(os.getpid())
    assert me is not None
    with pytest.raises(ValueError, match="unknown signal"):
        signals.send_signal(me, "HUP")


def test_a_reused_pid_is_not_signalled(children):
    from dataclasses import replace

    child = spawn(children)
    shown = signals.identify(child.pid)
    assert shown is not None and shown.uid_real == os.getuid()
    earlier = replace(shown, started=shown.started - 100.0)  # the process that was shown
    outcome = signals.send_signal(earlier, "TERM")
    assert not outcome.sent and outcome.gone
    assert outcome.message == f"pid {child.pid} is now another process: not signalled"
    assert child.poll() is None
    outcome = signals.send_signal(shown, "TERM")
    assert outcome.sent and child.wait(10) == -signal.SIGTERM


async def test_tagged_processes_are_offered_kill_while_any_of_them_is_left(monkeypatch, children):
    """The first tagged process exited on TERM, another ignored it: the dialog said "Send
    SIGTERM to the 2 tagged processes" with only Close, and the one left ran on."""
    quick, stubborn = spawn(children), spawn(children, STUBBORN)
    app = nvml_app(monkeypatch, quick.pid, stubborn.pid)
    async with app.run_test(size=(120, 30)) as pilot:
        table = await select(app, pilot, quick.pid)
        await pilot.press("t")
        table.move_cursor(row=table.get_row_index(str(stubborn.pid)))
        await pilot.press("t", "K")
        dialog = app.screen
        assert isinstance(dialog, SignalDialog) and len(dialog.group) == 2
        await pilot.press("t")
        await wait_for(lambda: quick.poll() is not None)
        # looked again since the first exited (or gave up looking)
        await wait_for(lambda: dialog.state != "termed" or dialog.rechecks >= 3)
        assert dialog.state == "termed" and stubborn.poll() is None
        assert "SIGKILL to those left" in str(dialog.query_one("#signal-text").render())
        await pilot.press("k")
        await wait_for(lambda: stubborn.poll() is not None)
        assert stubborn.returncode == -signal.SIGKILL

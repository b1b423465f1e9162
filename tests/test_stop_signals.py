"""SIGTERM and SIGHUP stop a command as Ctrl-C does, and lltui exits as the shell says a
process ended by that signal does (128 + its number)."""

from __future__ import annotations

import signal

import pytest

from lltui.cli import main
from lltui.commands import demo
from lltui.core.stop_signals import raised_on_stop


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_command_stopped_by_a_signal_exits_128_plus_its_number(monkeypatch, signum):
    # (launch --rpc-host stops on them as on Ctrl-C, and exited 130 for every one)
    def stopped(_args: object) -> int:
        with raised_on_stop():
            signal.raise_signal(signum)
        return 0

    monkeypatch.setattr(demo, "run", stopped)
    assert main(["demo"]) == 128 + signum


def test_ctrl_c_exits_130(monkeypatch):
    def interrupted(_args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run", interrupted)
    assert main(["demo"]) == 130


def test_the_handlers_before_are_back_after_the_block():
    before = signal.getsignal(signal.SIGTERM)
    with raised_on_stop():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before

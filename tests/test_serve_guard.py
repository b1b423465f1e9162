"""What the browser view lets a client do: another user on the same machine without the
token reaches nothing; a client with it, on a read-only server, starts, stops and signals
nothing; and from any served app a launch carries no flag that serves or writes files unless
the config allows it. The server runs for real; the clients speak its websocket as the
page's script does (keys as text), or plain HTTP as another user (``nobody``)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
from pathlib import Path

import aiohttp
import pytest
from support.llama_fixture import port_open, write_tiny_llama
from test_serve import Served, free_port, serving

from lltui.core.cmdline.flag_table import FILE_FLAGS, pinned_arity
from lltui.core.cmdline.launch_spec import LaunchError, LaunchPolicy

SYSTEM_PYTHON = "/usr/bin/python3"  # one another user may run (the venv's may be under /root)

# A client of another user: every path it tries, with no token, and the status it got.
NOBODY_CLIENT = r"""
import http.client, sys
port = int(sys.argv[1])
for path, upgrade in (("/", False), ("/lltui/", False), ("/lltui/ws", True),
                      ("/lltui/static/js/textual.js", False)):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    headers = {"Host": f"127.0.0.1:{port}"}
    if upgrade:
        headers.update({"Connection": "Upgrade", "Upgrade": "websocket",
                        "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZQ=="})
    c.request("GET", path, headers=headers)
    print(path, c.getresponse().status)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another user")
@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no /usr/bin/python3 for nobody")
def test_another_user_without_the_token_reaches_nothing():
    with serving("--source", "sim:kaggle-2xt4") as served:
        run = subprocess.run(
            [SYSTEM_PYTHON, "-c", NOBODY_CLIENT, str(served.port)],
            user="nobody",
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
    assert run.returncode == 0, run.stderr
    answers = dict(line.split() for line in run.stdout.splitlines())
    assert answers == {
        "/": "403",
        "/lltui/": "403",
        "/lltui/ws": "403",
        "/lltui/static/js/textual.js": "403",
    }


async def _drive_launch(served: Served, model: Path, flags: str, until: str) -> str:
    """In a tab of the served app: the launch view, a model and flags typed into its form,
    Start pressed; the app's output until it shows ``until``. Keys typed ahead of a focus
    change go to the field that had the focus (Textual forwards each key to the focused
    widget as it arrives), so each key that moves the focus waits for the field it moves to
    to be drawn anew."""
    seen = b""
    async with aiohttp.ClientSession(headers=served.cookie()) as http:
        ws = await http.ws_connect(f"{served.url}/lltui/ws?width=120&height=40")

        async def read_until(pattern: bytes) -> None:
            nonlocal seen
            async with asyncio.timeout(90):
                while not re.search(pattern, seen):
                    msg = await ws.receive()
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        seen += msg.data
                    elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                        raise AssertionError(f"the tab closed before {pattern!r}")

        async def keys(text: str, drawn: bytes) -> None:
            """``text`` typed, then the app's frames until they draw ``drawn`` (a pattern)."""
            nonlocal seen
            seen = b""
            await ws.send_str(json.dumps(["stdin", text]))
            await read_until(drawn)

        await read_until(b"GPU")  # the monitor is drawn
        await keys("5", b"Start")  # the launch view; its model field has the focus
        await keys(str(model), re.escape(model.name.encode()))
        await keys("\t", re.escape(b"127.0.0.1:8080"))  # the address field
        # the flags field: its placeholder drawn with the cursor on its first letter
        await keys("\t", rb"[^l]lama-server flags")
        await keys(flags, re.escape(flags.split()[-1].encode()))
        await keys("\t", b"Start")  # the Start button
        await keys("\r", re.escape(until.encode()))
        await ws.close()
    return seen.decode("utf-8", "replace")


def test_a_read_only_server_starts_no_llama_server_from_the_page(tmp_path):
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    port = free_port()
    log = tmp_path / "written-by-the-server.log"
    flags = f"--port {port} --path / --log-file {log}"
    with serving("--source", "sim:kaggle-2xt4", "--readonly") as served:
        asyncio.run(_drive_launch(served, model, flags, "read-only"))
    assert not port_open(port), "a llama-server listens: the read-only page started it"
    assert not log.exists(), "a file was written from a read-only page"


def test_a_served_app_launches_no_flag_that_serves_files_unless_the_config_allows(tmp_path):
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    port = free_port()
    flags = f"--port {port} --path /"
    with serving("--source", "sim:kaggle-2xt4") as served:
        asyncio.run(_drive_launch(served, model, flags, "refused from the browser view"))
    assert not port_open(port)


def test_the_policy_refuses_what_it_says():
    read_only = LaunchPolicy(allowed=False)
    assert "read-only" in (read_only.refusal(["-c", "8192"]) or "")
    served = LaunchPolicy(served=True)
    assert served.refusal(["-c", "8192", "-ngl", "all"]) is None
    for words in (["--path", "/"], ["--log-file=/tmp/x"], ["--slot-save-path", "/"], ["-lcd", "x"]):
        assert served.refusal(words) is not None, words
    allowed = LaunchPolicy(served=True, file_flags_allowed=frozenset({"--log-file"}))
    assert allowed.refusal(["--log-file", "/tmp/x"]) is None
    assert allowed.refusal(["--path", "/"]) is not None
    assert LaunchPolicy().refusal(["--path", "/"]) is None  # a terminal's own user: as typed
    with pytest.raises(LaunchError):
        served.check(["--path", "/"])


def test_every_file_flag_is_a_flag_of_the_pinned_llama_server():
    assert all(pinned_arity(f) == 1 for f in FILE_FLAGS), sorted(
        f for f in FILE_FLAGS if pinned_arity(f) != 1
    )


def test_the_launch_session_applies_the_policy_before_anything_starts(tmp_path):
    from lltui.services.launch.request import LaunchRequest
    from lltui.services.launch.session import LaunchSession

    model = write_tiny_llama(tmp_path / "tiny.gguf")
    request = LaunchRequest(words=(str(model), "--slot-save-path", str(tmp_path)))
    session = LaunchSession(request, policy=LaunchPolicy(served=True))
    with pytest.raises(LaunchError, match="--slot-save-path is refused"):
        session.prepare(require_binary=False)
    assert session.pid is None


def test_a_router_preset_cannot_carry_a_refused_flag(tmp_path):
    from lltui.services.launch.router import RouterSession
    from lltui.services.launch.router_prep import RouterRequest

    write_tiny_llama(tmp_path / "a.gguf")
    preset = tmp_path / "models.ini"
    preset.write_text(f"[a]\nmodel = {tmp_path / 'a.gguf'}\nlog-file = {tmp_path / 'x.log'}\n")
    session = RouterSession(
        RouterRequest(source=str(preset), gpus="cpu"), policy=LaunchPolicy(served=True)
    )
    with pytest.raises(LaunchError, match="--log-file is refused"):
        session.prepare(require_binary=False)


def test_the_config_names_the_flags_a_served_app_may_pass(tmp_path):
    from lltui.config import ConfigError, load_settings

    good = tmp_path / "good.toml"
    good.write_text('serve_allow_flags = ["--log-file", "--slot_save_path"]\n')
    settings = load_settings(path=good, environ={})
    assert settings.serve_allow_flags == ("--log-file", "--slot-save-path")
    bad = tmp_path / "bad.toml"
    bad.write_text('serve_allow_flags = ["-c"]\n')
    with pytest.raises(ConfigError, match="not a flag that names a file"):
        load_settings(path=bad, environ={})
    served = tmp_path / "served.toml"
    served.write_text("served = true\n")  # only lltui serve says so, never a file
    with pytest.raises(ConfigError, match="unknown setting"):
        load_settings(path=served, environ={})


def test_the_signal_dialog_sends_nothing_in_a_read_only_app(monkeypatch):
    """The read-only check is where the signal is sent, not only where the key is shown."""
    from support.app_helpers import sim_app

    from lltui.app.screens import signal_dialog
    from lltui.core.monitor.signals import ProcessIdentity

    sent: list[object] = []
    monkeypatch.setattr(signal_dialog, "send_signal", lambda *a: sent.append(a))

    async def run() -> None:
        app = sim_app(readonly=True)
        async with app.run_test() as pilot:
            me = ProcessIdentity(os.getpid(), "root", "python", os.getuid(), os.getuid(), 0.0)
            dialog = signal_dialog.SignalDialog(os.getpid(), "root", "python", me)
            await app.push_screen(dialog)
            await pilot.pause()
            dialog.action_term()
            await pilot.pause()

    asyncio.run(run())
    assert sent == []


def test_a_file_is_neither_written_nor_delivered_from_a_read_only_app(tmp_path, monkeypatch):
    from support.app_helpers import sim_app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DOWNLOAD_DIR", str(tmp_path))

    async def run() -> object:
        app = sim_app(readonly=True)
        async with app.run_test():
            return app.deliver_screenshot(path=str(tmp_path))

    assert asyncio.run(run()) is None
    assert not list(tmp_path.iterdir())

"""``lltui serve``: the app in a browser. The server runs for real on 127.0.0.1; the page is
opened in a real headless Chromium (Debian's package; skipped with one line where it is not
installed), the dashboard drawn and a key switching views."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from browser import chromium, chromium_path, count_colour, free_port, png_pixels

ROOT = Path(__file__).resolve().parents[1]
VRAM_BAR = (0x5F, 0xAF, 0xFF)  # the dark theme's bar-vram: drawn only by the monitor
SCREENSHOT = ROOT / "screenshots" / "browser.png"


@contextlib.contextmanager
def serving(*args: str, procs: list[subprocess.Popen[str]] | None = None) -> Iterator[str]:
    """``lltui serve`` on a free loopback port; its URL. Its whole group is stopped after."""
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "lltui", "serve", "--listen", f"127.0.0.1:{port}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        text=True,
        start_new_session=True,
    )
    if procs is not None:
        procs.append(proc)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "lltui serve: open http://127.0.0.1" in line, line
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _status(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers.get("Set-Cookie", "")
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def test_a_token_is_asked_for_and_kept_in_a_same_site_cookie(tmp_path):
    token = "s3cret-token-for-tests-0123456789"
    path = tmp_path / "token"
    path.write_text(token + "\n")
    with serving("--source", "sim:kaggle-2xt4", "--token-file", str(path)) as url:
        assert _status(f"{url}/")[0] == 403
        assert _status(f"{url}/?token=wrong-token-wrong-token")[0] == 403
        code, cookie = _status(f"{url}/?token={token}")
        assert code == 200
        assert "lltui_token=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        # the cookie stands for the token on later requests (the websocket, the files)
        assert _status(f"{url}/static/js/textual.js", {"Cookie": f"lltui_token={token}"})[0] == 200


def test_the_page_loads_nothing_from_another_site():
    with (
        serving("--source", "sim:kaggle-2xt4") as url,
        urllib.request.urlopen(url, timeout=10) as r,
    ):
        page = r.read().decode()
    assert "googleapis" not in page and "ws://127.0.0.1" in page
    assert not [w for w in page.split('"') if w.startswith(("http://", "https://")) and
                "127.0.0.1" not in w and "w3.org" not in w]  # fmt: skip


def test_a_websocket_from_another_site_is_refused():
    async def attempt(url: str, origin: str) -> int:
        async with aiohttp.ClientSession() as http:
            try:
                async with http.ws_connect(f"{url}/ws", headers={"Origin": origin}) as ws:
                    await ws.close()
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    with serving("--source", "sim:kaggle-2xt4") as url:
        assert asyncio.run(attempt(url, "http://evil.example")) == 403
        assert asyncio.run(attempt(url, url)) == 101


def test_a_tabs_lltui_stops_with_the_server_even_a_killed_one():
    import psutil

    async def connect(server: subprocess.Popen[str], url: str) -> list[psutil.Process]:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(f"{url}/ws?width=100&height=30")
            async with asyncio.timeout(30):  # the app's first bytes: it runs
                while (await ws.receive()).type != aiohttp.WSMsgType.BINARY:
                    pass
            apps = psutil.Process(server.pid).children(recursive=True)
            server.send_signal(signal.SIGKILL)  # no clean shutdown at all
            server.wait(10)
            await ws.close()
            return apps

    procs: list[subprocess.Popen[str]] = []
    with serving("--source", "sim:kaggle-2xt4", procs=procs) as url:
        apps = asyncio.run(connect(procs[0], url))
    assert apps, "the tab started no lltui"
    _gone, alive = psutil.wait_procs(apps, timeout=5)  # the kernel signals at once
    assert not alive, f"a tab's lltui outlived its server: {alive}"


def test_a_non_loopback_address_without_a_token_file_gets_a_made_up_token(monkeypatch, capsys):
    from lltui.app.web.server import LltuiWebServer
    from lltui.cli import main

    made: list[LltuiWebServer] = []

    def serve(self: LltuiWebServer, debug: bool = False) -> None:  # binds nothing here
        made.append(self)
        assert self._on_ready is not None
        self._on_ready(self.public_url)

    monkeypatch.setattr(LltuiWebServer, "serve", serve)
    assert main(["serve", "--listen", "10.1.2.3:8765", "--source", "sim:4xl4"]) == 0
    (server,) = made
    assert server.token is not None and len(server.token) >= 24
    out = capsys.readouterr()
    assert f"http://10.1.2.3:8765/?token={server.token}" in out.out
    assert "anyone with the token" in out.err
    assert main(["serve", "--listen", "127.0.0.1:8766"]) == 0
    assert made[1].token is None  # loopback: no token unless a file gives one


def test_each_tab_runs_lltui_with_the_options_given_to_serve():
    from lltui.cli import build_parser
    from lltui.commands.serve import app_options

    args = build_parser().parse_args(
        ["--theme", "light", "serve", "--source", "sim:4xl4", "--readonly", "--interval", "2"]
    )
    assert app_options(args) == [
        "--source", "sim:4xl4", "--interval", "2", "--theme", "light", "--readonly",
    ]  # fmt: skip


@pytest.mark.skipif(chromium_path() is None, reason="no chromium (apt install chromium)")
def test_the_dashboard_in_a_real_browser_and_a_key_switches_views():
    async def run(url: str) -> tuple[int, int, bytes]:
        async with chromium(1200, 760) as page:
            await page.call("Page.navigate", url=f"{url}/")
            deadline = time.monotonic() + 40
            before = 0
            shot = b""
            while time.monotonic() < deadline:  # until the monitor's bars are drawn
                await asyncio.sleep(0.5)
                shot = await page.screenshot()
                before = count_colour(png_pixels(shot)[2], VRAM_BAR)
                if before > 500:
                    break
            await page.press("2")  # the topology view
            after = before
            while time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                after = count_colour(png_pixels(await page.screenshot())[2], VRAM_BAR)
                if after < before // 10:
                    break
            return before, after, shot

    with serving("--source", "sim:mixed-4090-3090") as url:
        before, after, shot = asyncio.run(run(url))
    assert before > 500, "the monitor's VRAM bars were never drawn in the browser"
    assert after < before // 10, "the key press did not leave the monitor"
    if os.environ.get("LLTUI_UPDATE_SCREENSHOTS"):
        SCREENSHOT.write_bytes(shot)

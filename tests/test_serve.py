"""``lltui serve``: the app in a browser. The server runs for real on 127.0.0.1; the page is
opened in a real headless Chromium (Debian's package; skipped with one line where it is not
installed), the dashboard drawn and a key switching views."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from support.browser import chromium, chromium_path, count_colour, free_port, png_pixels

ROOT = Path(__file__).resolve().parents[1]
VRAM_BAR = (0x5F, 0xAF, 0xFF)  # the dark theme's bar-vram: drawn only by the monitor
SCREENSHOT = ROOT / "screenshots" / "browser.png"


@dataclass(frozen=True)
class Served:
    """A running ``lltui serve``: its base URL, the token it printed, its process."""

    url: str
    token: str
    proc: subprocess.Popen[str]

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def app(self, query: str = "") -> str:
        """The app's page, with the token in the query as the printed link has it."""
        return f"{self.url}/lltui/?token={self.token}{query}"

    def cookie(self) -> dict[str, str]:
        return {"Cookie": f"lltui_token={self.token}"}


@contextlib.contextmanager
def serving(
    *args: str, env: dict[str, str] | None = None, files: int | None = None
) -> Iterator[Served]:
    """``lltui serve`` on a free loopback port (``files``: its RLIMIT_NOFILE). Its whole
    group is stopped after."""
    port = free_port()
    environ = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "lltui", "serve", "--listen", f"127.0.0.1:{port}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environ,
        text=True,
        start_new_session=True,
        preexec_fn=None if files is None else lambda: _limit_files(files),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"open (http://127\.0\.0\.1:\d+)/lltui/(?:\?token=(\S+))?", line)
        assert found, line
        yield Served(found.group(1), found.group(2) or "", proc)
    finally:
        stop_group(proc)


def _limit_files(n: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def stop_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(status, Set-Cookie, body) of a GET; redirects are not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with opener.open(request, timeout=20) as r:
            return r.status, r.headers.get("Set-Cookie", ""), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Set-Cookie", ""), exc.read().decode()


def _raw(port: int, request: bytes) -> bytes:
    """A request written as bytes (headers no client library would send); the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


async def _ws_status(served: Served, *, host: str | None = None, origin: str | None = None,
                     token: bool = True) -> int:  # fmt: skip
    headers = {}
    if host is not None:
        headers["Host"] = host
    if origin is not None:
        headers["Origin"] = origin
    url = f"{served.url}/lltui/ws" + (f"?token={served.token}" if token else "")
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(url, headers=headers) as ws:
                await ws.close()
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def test_a_token_is_needed_even_on_loopback_and_kept_in_a_cookie_of_the_apps_path():
    with serving("--source", "sim:kaggle-2xt4") as served:
        assert len(served.token) >= 24, "loopback got no token"
        assert _get(f"{served.url}/lltui/")[0] == 403
        assert _get(f"{served.url}/lltui/?token=wrong-token-wrong-token")[0] == 403
        assert _get(f"{served.url}/lltui/static/js/textual.js")[0] == 403
        code, cookie, _page = _get(served.app())
        assert code == 200
        assert "lltui_token=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert "Path=/lltui/" in cookie  # other services on the host are not sent it
        # the cookie stands for the token on later requests (the websocket, the files)
        assert _get(f"{served.url}/lltui/static/js/textual.js", served.cookie())[0] == 200
        # the printed link's root sends the token on to the app's path
        code, _cookie, _body = _get(f"{served.url}/?token={served.token}")
        assert code == 302


def test_a_token_file_is_used_and_one_others_may_read_is_refused(tmp_path):
    token = "s3cret-token-for-tests-0123456789"
    path = tmp_path / "token"
    path.write_text(token + "\n")
    path.chmod(0o644)
    run = subprocess.run(
        [sys.executable, "-m", "lltui", "serve", "--token-file", str(path)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert run.returncode == 2 and "chmod 600" in run.stderr and "Traceback" not in run.stderr
    path.chmod(0o600)
    with serving("--source", "sim:kaggle-2xt4", "--token-file", str(path)) as served:
        assert served.token == ""  # not printed: the user has it
        assert _get(f"{served.url}/lltui/?token={token}")[0] == 200


def test_another_site_is_refused_by_its_host_name_or_its_origin():
    with serving("--source", "sim:kaggle-2xt4") as served:
        port = served.port
        # DNS rebinding: a page of attacker.example whose name now points here
        rebound = {"Host": f"attacker.example:{port}"}
        assert _get(served.app(), rebound)[0] == 403
        status = asyncio.run(
            _ws_status(served, host=f"attacker.example:{port}",
                       origin=f"http://attacker.example:{port}")
        )  # fmt: skip
        assert status == 403
        # another site's page in the same browser
        assert asyncio.run(_ws_status(served, origin="http://evil.example")) == 403
        assert asyncio.run(_ws_status(served, origin=served.url)) == 101
        # an SSH tunnel arrives as localhost on another port: a loopback name, its own origin
        tunnel = "localhost:9999"
        assert _get(served.app(), {"Host": tunnel})[0] == 200
        assert asyncio.run(_ws_status(served, host=tunnel, origin=f"http://{tunnel}")) == 101


def test_a_name_given_with_allow_host_reaches_it():
    with serving("--source", "sim:kaggle-2xt4", "--allow-host", "gpu-box.lan") as served:
        assert _get(served.app(), {"Host": f"gpu-box.lan:{served.port}"})[0] == 200
        assert _get(served.app(), {"Host": f"other.lan:{served.port}"})[0] == 403


def test_the_page_loads_nothing_from_another_site_and_its_urls_are_relative():
    with serving("--source", "sim:kaggle-2xt4") as served:
        _code, _cookie, page = _get(served.app())
    assert "googleapis" not in page and "127.0.0.1" not in page
    assert not [w for w in page.split('"') if w.startswith(("http://", "https://", "ws://")) and
                "w3.org" not in w]  # fmt: skip
    assert 'src="static/js/textual.js"' in page


def test_the_static_folder_lists_nothing():
    with serving("--source", "sim:kaggle-2xt4") as served:
        for folder in ("static/", "static/js/", "static/js"):
            code, _c, body = _get(f"{served.url}/lltui/{folder}", served.cookie())
            assert code in (403, 404), (folder, code)
            assert "textual.js" not in body


def test_bad_requests_get_an_answer_and_no_traceback():
    with serving("--source", "sim:kaggle-2xt4") as served:
        port = served.port
        cookie = f"lltui_token={served.token}".encode()
        # a websocket path asked for without an upgrade
        bad_upgrade = _raw(port, b"GET /lltui/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: " +
                           cookie + b"\r\nConnection: close\r\n\r\n")  # fmt: skip
        assert bad_upgrade.startswith(b"HTTP/1.1 400"), bad_upgrade[:80]
        # a cookie that is not ASCII
        odd = _raw(port, "GET /lltui/ HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: lltui_token=é\r\n"
                   "Connection: close\r\n\r\n".encode())  # fmt: skip
        assert odd.startswith(b"HTTP/1.1 403"), odd[:80]
        # no Host at all
        hostless = _raw(port, b"GET /lltui/ HTTP/1.0\r\n\r\n")
        assert hostless.startswith((b"HTTP/1.0 403", b"HTTP/1.1 403")), hostless[:80]
        # what aiohttp's parser refuses (each had a traceback printed on serve's terminal): an
        # HTTP/1.1 request without Host, a header past 8 KiB, a request line that does not read
        for request in (
            b"GET /lltui/ HTTP/1.1\r\nConnection: close\r\n\r\n",
            b"GET /lltui/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n",
            b"GET @elsewhere/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        ):
            answer = _raw(port, request)
            assert answer.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400")), answer[:80]

        async def malformed() -> list[str]:
            closed = []
            async with aiohttp.ClientSession(headers=served.cookie()) as http:
                for message in ("not json", '["resize", "big"]', "[1, 2]", '["stdin", 7]', "{}"):
                    async with http.ws_connect(f"{served.url}/lltui/ws") as ws:
                        await ws.send_str(message)
                        async with asyncio.timeout(30):
                            while (await ws.receive()).type not in (
                                aiohttp.WSMsgType.CLOSE,
                                aiohttp.WSMsgType.CLOSED,
                            ):
                                pass
                        closed.append(message)
            return closed

        assert len(asyncio.run(malformed())) == 5
        assert _get(served.app())[0] == 200  # the server still serves
    err = served.proc.stderr.read() if served.proc.stderr else ""
    assert "Traceback" not in err, err


def test_sessions_are_capped():
    async def run(served: Served) -> int:
        async with aiohttp.ClientSession(headers=served.cookie()) as http:
            first = await http.ws_connect(f"{served.url}/lltui/ws")
            try:
                async with http.ws_connect(f"{served.url}/lltui/ws"):
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status
            finally:
                await first.close()

    with serving("--source", "sim:kaggle-2xt4", "--max-sessions", "1") as served:
        assert asyncio.run(run(served)) == 503


def test_idle_connections_neither_take_every_file_descriptor_nor_keep_the_page_out():
    """aiohttp kept a connection that sent nothing open for an hour and took every one: 600
    of them took serve's file descriptors (ulimit -n 256 here), asyncio printed a traceback
    per accept that failed, and the page no longer opened. Now the oldest connection still
    sending its request is let go for a new one."""
    with serving("--source", "sim:kaggle-2xt4", files=256) as served:
        idle: list[socket.socket] = []
        try:
            for _ in range(600):
                try:
                    idle.append(socket.create_connection(("127.0.0.1", served.port), timeout=2))
                except OSError:
                    break  # no longer accepted
            assert _get(served.app())[0] == 200
            idle[0].settimeout(10)
            assert idle[0].recv(1) == b""  # the oldest, let go
        finally:
            for s in idle:
                s.close()
        assert len(idle) == 600
    err = served.proc.stderr.read() if served.proc.stderr else ""
    assert "Traceback" not in err and "Too many open files" not in err, err[:2000]


def _app_of(server: subprocess.Popen[str]) -> Any:
    import psutil

    async def wait_for_one() -> Any:
        async with asyncio.timeout(60):
            while True:
                found = [p for p in psutil.Process(server.pid).children(recursive=True)
                         if "--served" in " ".join(p.cmdline())]  # fmt: skip
                if found:
                    return found[-1]
                await asyncio.sleep(0.1)

    return wait_for_one()


def test_a_huge_terminal_is_bounded_and_a_tab_that_leaves_unread_ends_its_app():
    import psutil

    async def run(served: Served) -> tuple[int, Any]:
        async with aiohttp.ClientSession(headers=served.cookie()) as http:
            ws = await http.ws_connect(f"{served.url}/lltui/ws?width=20000&height=20000")
            async with asyncio.timeout(60):  # the app's first frame: it runs
                while (await ws.receive()).type != aiohttp.WSMsgType.BINARY:
                    pass
            await ws.send_str(json.dumps(["resize", {"width": 20000, "height": 20000}]))
            app = await _app_of(served.proc)
            got = 0  # frames of the resized screen
            async with asyncio.timeout(60):
                while got < 3:
                    if (await ws.receive()).type == aiohttp.WSMsgType.BINARY:
                        got += 1
            rss = app.memory_info().rss
            # the tab goes without reading what the app still writes
            ws._response.connection.transport.abort()  # type: ignore[union-attr]
            return rss, app

    with serving("--source", "sim:8xh100-sxm") as served:
        rss, app = asyncio.run(run(served))
        assert rss < 400 * 2**20, f"the app took {rss / 2**20:.0f} MiB for one terminal"
        _gone, alive = psutil.wait_procs([app], timeout=30)
        assert not alive, "a tab's app outlived its tab"


def test_a_tabs_lltui_stops_with_the_server_even_a_killed_one():
    import psutil

    async def connect(served: Served) -> list[psutil.Process]:
        async with aiohttp.ClientSession(headers=served.cookie()) as http:
            ws = await http.ws_connect(f"{served.url}/lltui/ws?width=100&height=30")
            async with asyncio.timeout(30):  # the app's first bytes: it runs
                while (await ws.receive()).type != aiohttp.WSMsgType.BINARY:
                    pass
            apps = psutil.Process(served.proc.pid).children(recursive=True)
            served.proc.send_signal(signal.SIGKILL)  # no clean shutdown at all
            served.proc.wait(10)
            await ws.close()
            return apps

    with serving("--source", "sim:kaggle-2xt4") as served:
        apps = asyncio.run(connect(served))
    assert apps, "the tab started no lltui"
    _gone, alive = psutil.wait_procs(apps, timeout=5)  # the kernel signals at once
    assert not alive, f"a tab's lltui outlived its server: {alive}"


def test_a_wildcard_address_prints_this_machines_names_not_0000(monkeypatch, capsys):
    from lltui.app.web.server import LltuiWebServer
    from lltui.cli import main

    made: list[LltuiWebServer] = []

    def serve(self: LltuiWebServer) -> None:  # binds nothing here
        made.append(self)
        assert self._on_ready is not None
        self._on_ready()

    monkeypatch.setattr(LltuiWebServer, "serve", serve)
    monkeypatch.setattr("lltui.app.web.server.machine_names", lambda: {"gpu-box", "10.1.2.3",
                        "127.0.0.1", "fd00::2", "fe80::1", "::1"})  # fmt: skip
    assert main(["serve", "--listen", "0.0.0.0:8765", "--source", "sim:4xl4"]) == 0
    (server,) = made
    token = server.options.token
    assert len(token) >= 24
    out = capsys.readouterr()
    assert f"http://gpu-box:8765/lltui/?token={token}" in out.out
    assert f"http://10.1.2.3:8765/lltui/?token={token}" in out.out
    assert "0.0.0.0" not in out.out and "127.0.0.1" not in out.out
    # 0.0.0.0 is IPv4 alone, :: IPv6 alone; a link-local IPv6 address opens in no browser
    assert "fd00::2" not in out.out and "fe80" not in out.out and "::1" not in out.out
    assert "anyone with the token" in out.err
    assert main(["serve", "--listen", "[::]:8765", "--source", "sim:4xl4"]) == 0
    out = capsys.readouterr()
    assert "http://[fd00::2]:8765/lltui/?token=" in out.out and "gpu-box" in out.out
    assert "10.1.2.3" not in out.out and "fe80" not in out.out and "::1]" not in out.out


def test_each_tab_runs_lltui_with_the_options_given_to_serve():
    from lltui.cli import build_parser
    from lltui.commands.serve import app_options

    args = build_parser().parse_args(
        ["--theme", "light", "serve", "--source", "sim:4xl4", "--readonly", "--interval", "2"]
    )
    assert app_options(args) == [
        "--source", "sim:4xl4", "--interval", "2", "--theme", "light", "--readonly", "--served",
    ]  # fmt: skip
    # a replay's pace, the fleet's timeout and the energy price reach each tab too
    args = build_parser().parse_args(
        ["--replay-speed", "5", "--replay-loop", "--host-timeout", "3", "--energy-price",
         "0.3", "serve", "--source", "replay:k.jsonl"]
    )  # fmt: skip
    assert app_options(args) == [
        "--source", "replay:k.jsonl", "--host-timeout", "3", "--replay-speed", "5",
        "--energy-price", "0.3", "--replay-loop", "--served",
    ]  # fmt: skip


@pytest.mark.skipif(chromium_path() is None, reason="no chromium (apt install chromium)")
def test_the_dashboard_in_a_real_browser_and_a_key_switches_views():
    async def run(url: str) -> tuple[int, int, bytes]:
        async with chromium(1200, 760) as page:
            await page.call("Page.navigate", url=url)
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

    with serving("--source", "sim:mixed-4090-3090") as served:
        before, after, shot = asyncio.run(run(served.app()))
    assert before > 500, "the monitor's VRAM bars were never drawn in the browser"
    assert after < before // 10, "the key press did not leave the monitor"
    if os.environ.get("LLTUI_UPDATE_SCREENSHOTS"):
        SCREENSHOT.write_bytes(shot)

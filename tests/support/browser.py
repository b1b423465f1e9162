"""A real headless Chromium (Debian's package) driven over its DevTools protocol, for the
browser view's tests: 127.0.0.1 only (every other host name resolves to nothing), bounded
in time, the browser stopped at the end. And a small PNG reader for its screenshots."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Page:
    """One tab, spoken to over the DevTools websocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._next = 0

    async def call(self, method: str, timeout: float = 20.0, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        async with asyncio.timeout(timeout):
            while True:
                msg = await self.ws.receive_json()
                if msg.get("id") == ident:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error']}")
                    return dict(msg.get("result", {}))

    async def screenshot(self) -> bytes:
        got = await self.call("Page.captureScreenshot", format="png")
        return base64.b64decode(got["data"])

    async def press(self, key: str) -> None:
        """A key typed into the focused terminal (a printable one: its character)."""
        await self.call(
            "Runtime.evaluate",
            expression="(document.querySelector('textarea') || document.body).focus()",
        )
        code = f"Digit{key}" if key.isdigit() else f"Key{key.upper()}"
        for kind in ("keyDown", "keyUp"):
            params: dict[str, Any] = {
                "type": kind,
                "key": key,
                "code": code,
                "windowsVirtualKeyCode": ord(key.upper()),
            }
            if kind == "keyDown":
                params["text"] = key
            await self.call("Input.dispatchKeyEvent", **params)


@contextlib.asynccontextmanager
async def chromium(width: int = 1400, height: int = 900) -> AsyncIterator[Page]:
    """A headless Chromium with one blank tab; stopped (its whole group) on the way out."""
    binary = chromium_path()
    assert binary is not None
    port = free_port()
    profile = tempfile.mkdtemp(prefix="lltui-chromium-")
    argv = [
        binary,
        "--headless",
        "--no-sandbox",  # tests run as root in a container
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        f"--remote-debugging-port={port}",
        "--remote-debugging-address=127.0.0.1",
        "--remote-allow-origins=*",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        # nothing beyond this machine: every name but 127.0.0.1 resolves to nothing
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "about:blank",
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        async with aiohttp.ClientSession() as http:
            tabs: list[dict[str, Any]] = []
            async with asyncio.timeout(30):
                while not tabs:
                    try:
                        async with http.get(f"http://127.0.0.1:{port}/json") as r:
                            tabs = [t for t in await r.json() if t.get("type") == "page"]
                    except aiohttp.ClientError:
                        await asyncio.sleep(0.1)
            async with http.ws_connect(tabs[0]["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                yield page
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit RGB or RGBA PNG, as Chromium writes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        kind, cur = line[0], bytearray(line[1:])
        for x in range(stride):
            a = cur[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if kind == 1:
                cur[x] = (cur[x] + a) & 0xFF
            elif kind == 2:
                cur[x] = (cur[x] + b) & 0xFF
            elif kind == 3:
                cur[x] = (cur[x] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[x] = (cur[x] + pred) & 0xFF
        prev = cur
        rgb = bytes(cur) if channels == 3 else bytes(v for i, v in enumerate(cur) if i % 4 != 3)
        rows.append(rgb)
    return width, height, rows


def count_colour(rows: list[bytes], rgb: tuple[int, int, int], tolerance: int = 24) -> int:
    """Pixels within ``tolerance`` of ``rgb`` on each channel."""
    r0, g0, b0 = rgb
    n = 0
    for row in rows:
        for i in range(0, len(row), 3):
            if (
                abs(row[i] - r0) <= tolerance
                and abs(row[i + 1] - g0) <= tolerance
                and abs(row[i + 2] - b0) <= tolerance
            ):
                n += 1
    return n

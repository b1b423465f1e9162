"""Helpers for tests of llama-server in router mode: tiny models to serve, the processes of a
router's group, bounded waits, and ``lltui launch --models`` as a child process."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from support.llama_fixture import free_port, write_tiny_llama

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 90.0
GONE_WITHIN_S = 20.0


def write_models(root: Path) -> dict[str, Path]:
    """Three tiny llama models of different shapes, and one llama.cpp refuses to load."""
    root.mkdir(parents=True, exist_ok=True)
    return {
        "alpha": write_tiny_llama(root / "alpha.gguf", layers=4, seed=1),
        "beta": write_tiny_llama(root / "beta.gguf", layers=6, embd=256, ff=512, seed=2),
        "gamma": write_tiny_llama(root / "gamma.gguf", layers=5, embd=192, ff=256, seed=3),
        "faulty": write_tiny_llama(root / "faulty.gguf", layers=2, tokenizer="no-such-tokenizer"),
    }


def wait_for(check: Callable[[], object], seconds: float = WAIT_S, what: str = "") -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"not within {seconds:.0f} s: {what}")


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie waiting to be reaped counts as gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def group_members(pgid: int) -> list[int]:
    """The live processes of a process group (a router and its model servers)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return out


def all_gone(pids: list[int], seconds: float = GONE_WITHIN_S) -> list[int]:
    """The pids still alive after ``seconds`` (empty when every one is gone)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if pid_alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if pid_alive(p)]


def models_state(url: str) -> dict[str, str]:
    import httpx

    try:
        data = httpx.get(f"{url}/models", timeout=2.0).json()
    except (httpx.HTTPError, ValueError):
        return {}
    return {m["id"]: m["status"]["value"] for m in data["data"]}


@contextlib.contextmanager
def launched_router(
    env: dict[str, str], *args: str
) -> Iterator[tuple[subprocess.Popen[str], int, list[int]]]:
    """``lltui launch`` (router mode: ``args`` hold ``--models`` or models) with --json, as a
    login shell would start it; the test adds the router's pid to the list it is given, and
    that group is killed when the block ends, whatever happened."""
    port = free_port()
    argv = [sys.executable, "-m", "lltui", "launch", *args, "--port", str(port), "--json"]
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    routers: list[int] = []
    assert proc.stdout is not None
    _pending.pop(proc.stdout.fileno(), None)
    try:
        yield proc, port, routers
    finally:
        for pgid in [proc.pid, *routers]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        proc.wait(timeout=30)


_pending: dict[int, bytes] = {}


def read_event(proc: subprocess.Popen[str], seconds: float = WAIT_S) -> dict:
    """The next JSON line lltui prints, within ``seconds`` (read from the pipe itself: lines
    that arrive together are not left in a reader's buffer while select waits)."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + seconds
    while True:
        buf = _pending.get(fd, b"")
        if b"\n" in buf:
            line, _, rest = buf.partition(b"\n")
            _pending[fd] = rest
            return json.loads(line)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], min(0.2, left))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            _pending[fd] = buf + chunk
    stderr = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
    raise AssertionError(f"no event from lltui launch in {seconds:.0f} s; stderr: {stderr}")


def events_until(proc: subprocess.Popen[str], done: Callable[[dict], bool]) -> list[dict]:
    """Events up to and including the first ``done`` says is the one."""
    out = []
    while True:
        event = read_event(proc)
        out.append(event)
        if done(event):
            return out

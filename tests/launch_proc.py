"""`lltui launch` as a child process, in its own process group as a login shell would start
it, and the JSON events it prints (used by the launch CLI and the RPC-host tests)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from llama_fixture import free_port

READY_TIMEOUT_S = 90.0
REPO = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def launched(
    model: Path, env: dict[str, str], *extra: str, as_json: bool = True
) -> Iterator[subprocess.Popen[str]]:
    argv = [sys.executable, "-m", "lltui", "launch", str(model), "--port", str(free_port())]
    argv += ["-c", "512", "-t", "1", *extra] + (["--json"] if as_json else [])
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # its own group, as a login shell would give it
    )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def read_event(proc: subprocess.Popen[str], seconds: float = READY_TIMEOUT_S) -> dict:
    """The next JSON line lltui prints, within ``seconds``."""
    assert proc.stdout is not None
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            return json.loads(line)
    stderr = proc.stderr.read() if proc.poll() is not None and proc.stderr else ""
    raise AssertionError(f"no event from lltui launch in {seconds:.0f} s; stderr: {stderr}")

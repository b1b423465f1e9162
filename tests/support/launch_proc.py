"""`lltui launch` as a child process, in its own process group as a login shell would start
it, and the JSON events it prints (used by the launch CLI and the RPC-host tests); a stand-in
for the supervisor and the HTTP polls where no server can run (the launch view's tests)."""

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
from typing import Any, ClassVar

from lltui.core.cmdline.launch_spec import LaunchCommand
from lltui.core.llamalog.reader import parse_log
from lltui.sources.llama.supervisor import ServerExit, ServerStatus
from support.llama_fixture import free_port

READY_TIMEOUT_S = 90.0
REPO = Path(__file__).resolve().parents[2]


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


class FakeSupervisor:
    """Stands in for the Supervisor where no server can run (the launch view's own logic):
    records what it was given and what was asked of it (``events``, shared), starts nothing
    (``start_s``: a start that takes that long), and says the server is loading until it is
    stopped."""

    made: ClassVar[list[FakeSupervisor]] = []
    events: ClassVar[list[str]] = []
    start_s = 0.0

    def __init__(self, command: LaunchCommand, **kw: Any) -> None:
        self.command, self.kw = command, kw
        self.pid = 4343
        self.stops = 0
        self.is_ready = False
        self.result: ServerExit | None = None
        FakeSupervisor.made.append(self)

    def start(self) -> None:
        FakeSupervisor.events.append("start begins")
        time.sleep(self.start_s)
        FakeSupervisor.events.append("start ends")

    def stop(self, **_waits: float) -> ServerExit:
        FakeSupervisor.events.append("stop")
        self.stops += 1
        self.result = ServerExit(0, "stopped", (), stopped=True, was_ready=False, pid=self.pid)
        self.kw["on_event"]("exited")
        return self.result

    @property
    def exited(self) -> bool:
        return self.result is not None

    def status(self) -> ServerStatus:
        state = "exited" if self.result is not None else "loading"
        return ServerStatus(state, self.pid, self.kw["url"] or "", None, parse_log(""), self.result)


class RecordedPoll:
    """Stands in for a watch's HTTP poll: records where it would ask, asks nothing."""

    made: ClassVar[list[tuple[str, str | None]]] = []
    interval_s = 1.0

    def __init__(self, url: str, api_key: str | None, **_kw: Any) -> None:
        RecordedPoll.made.append((url, api_key))

    def update(self, state: object, now: float) -> None:
        return None

    def close(self) -> None:
        pass


def no_server(monkeypatch: Any, start_s: float = 0.0) -> None:
    """The launch view's controller with the fakes above in place of a server and its polls."""
    FakeSupervisor.made.clear()
    FakeSupervisor.events.clear()
    RecordedPoll.made.clear()
    monkeypatch.setattr(FakeSupervisor, "start_s", start_s)
    monkeypatch.setattr("lltui.sources.llama.supervisor.Supervisor", FakeSupervisor)
    monkeypatch.setattr("lltui.services.launch.controller.ServerPoll", RecordedPoll)

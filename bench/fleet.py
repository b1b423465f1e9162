"""Fleet costs.

1. CPU per tick of the fleet view with 32 simulated hosts x 8 GPUs: the polls of all hosts
   (their own threads in the app; here one after another on this thread) and the UI thread's
   update of the table, each as process CPU time, against an idle frame in the same run and
   against the single-host monitor on one of those 8-GPU rigs.
2. ssh connections opened per minute per host, with the persistent connection (the
   default) and, as the baseline, a new connection for every command, over a real sshd on
   127.0.0.1 (tests/support/ssh_fixture.py; skipped with one line when sshd is missing); also the
   wall time of one poll in each mode.

    .venv/bin/python bench/fleet.py [--ticks N] [--seconds S]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lltui.app.app import create_app
from lltui.config import Settings
from lltui.sources.gpu.fleet import Fleet, FleetFocus
from lltui.sources.gpu.sim import SimSource, StepClock

HOSTS = 32
PROFILE = "8xh100-sxm"


def cpu() -> float:
    return time.process_time() * 1000.0


async def fleet_view(ticks: int, size: tuple[int, int]) -> tuple[float, float, float]:
    """Median CPU ms: polling 32 hosts, updating the view, an idle frame."""
    from lltui.app.screens.fleet import FleetScreen

    def make(spec: str, index: int) -> SimSource:
        return SimSource(PROFILE, seed=index, clock=StepClock(step=1.0), start=0.0)

    fleet = Fleet([f"sim:{PROFILE}"] * HOSTS, interval=1.0, make=make)
    source = FleetFocus(fleet)
    for i in range(HOSTS):
        fleet.poll_host(i)
    app = create_app(
        Settings(interval=1.0, source=f"sim:{PROFILE}"),
        source=source,
        info=source.open(),
        start_polling=False,
        view="fleet",
    )
    app._fleet = fleet
    polls, renders, idles = [], [], []
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        for _ in range(ticks):
            t0 = cpu()
            for i in range(HOSTS):
                fleet.poll_host(i)
            t1 = cpu()
            screen.show_fleet()
            await pilot.pause()
            t2 = cpu()
            await pilot.pause()
            t3 = cpu()
            polls.append(t1 - t0)
            renders.append(t2 - t1)
            idles.append(t3 - t2)
    fleet.close()
    return statistics.median(polls), statistics.median(renders), statistics.median(idles)


async def one_monitor(ticks: int, size: tuple[int, int]) -> tuple[float, float]:
    """Median CPU ms of one 8-GPU monitor tick (poll + render) and an idle frame."""
    source = SimSource(PROFILE, seed=0, clock=StepClock(step=1.0), start=0.0)
    app = create_app(Settings(interval=1.0), source=source, start_polling=False)
    ticks_ms, idles = [], []
    async with app.run_test(size=size) as pilot:
        app.poll_sync(5)
        await pilot.pause()
        for _ in range(ticks):
            t0 = cpu()
            app.model.apply(source.poll(), 0.0)
            app.render_model()
            await pilot.pause()
            t1 = cpu()
            await pilot.pause()
            t2 = cpu()
            ticks_ms.append(t1 - t0)
            idles.append(t2 - t1)
    return statistics.median(ticks_ms), statistics.median(idles)


def children_cpu_ms() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000.0


def master_cpu_ms(source: object) -> float:
    """CPU time of a host's control master so far (it is not our child once detached)."""
    import re
    import subprocess

    target = getattr(source, "ssh", None)
    if target is None or target.control_path() is None:
        return 0.0
    check = subprocess.run(
        ["ssh", *target.options(), "-O", "check", "--", target.host],
        capture_output=True,
        text=True,
        timeout=5,
    )
    m = re.search(r"pid=(\d+)", check.stderr + check.stdout)
    if m is None:
        return 0.0
    try:
        with open(f"/proc/{m.group(1)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def _maker(multiplex: bool, made: list[Any]) -> Callable[[str, int], Any]:
    """SmiSources for a fleet, with or without the persistent connection, kept in ``made``."""
    from lltui.sources.gpu.smi import SmiSource

    def make(spec: str, index: int) -> SmiSource:
        source = SmiSource(spec.partition(":")[2], timeout=10)
        assert source.ssh is not None
        source.ssh.multiplex = multiplex
        made.append(source)
        return source

    return make


def ssh_connections(seconds: float) -> None:
    from tests.support.ssh_fixture import missing, ssh_server

    why = missing()
    if why is not None:
        print(f"ssh: skipped: {why}")
        return
    from lltui.sources.gpu.smi import SmiSource
    from lltui.sources.ssh import SSH_CONFIG_ENV

    root = Path(tempfile.mkdtemp(prefix="lltui-bench-"))
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="lr-")
    with ssh_server(root / "sshd") as server:
        os.environ[SSH_CONFIG_ENV] = str(server.config)
        hosts = ["smi:fleet-a", "smi:fleet-b"]
        for multiplex in (True, False):
            made: list[SmiSource] = []
            tracked = _maker(multiplex, made)
            fleet = Fleet(hosts, interval=0.25, make=tracked)
            start = server.connections()
            fleet.start()
            deadline = time.monotonic() + 30
            while min(fleet.state(i).polls for i in range(len(hosts))) < 1:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            first = server.connections()
            polls0 = sum(fleet.state(i).polls for i in range(len(hosts)))
            masters0 = sum(master_cpu_ms(s) for s in made)
            children0 = children_cpu_ms()
            t0 = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - t0
            polls = sum(fleet.state(i).polls for i in range(len(hosts))) - polls0
            later = server.connections() - first
            masters = sum(master_cpu_ms(s) for s in made) - masters0
            local_ms = children_cpu_ms() - children0 + masters
            fleet.close()
            per_min = later / len(hosts) / elapsed * 60
            per_poll = elapsed * len(hosts) / polls * 1000 if polls else float("nan")
            mode = "persistent connection" if multiplex else "baseline: ssh per command"
            print(
                f"ssh {mode:26s}: first poll opened {first - start} for {len(hosts)} hosts; "
                f"then {per_min:6.1f} connections/min/host over {elapsed:.0f} s "
                f"({polls} polls, {per_poll:.0f} ms per poll at most 250 ms apart); "
                f"local ssh CPU {local_ms / polls if polls else float('nan'):.1f} ms per poll"
            )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-ssh", action="store_true")
    args = parser.parse_args()
    size = (160, 50)
    poll, render, idle = asyncio.run(fleet_view(args.ticks, size))
    mon, mon_idle = asyncio.run(one_monitor(args.ticks, size))
    view = max(0.0, render - idle)
    mon_cost = max(0.0, mon - mon_idle)
    print(
        f"fleet view {HOSTS} hosts x 8 GPUs {size[0]}x{size[1]}: polls {poll:.2f} ms CPU/tick "
        f"(all hosts), view update {view:.2f} ms CPU/tick (frame {render:.2f} - idle {idle:.2f})"
    )
    print(
        f"one 8-GPU monitor: {mon_cost:.2f} ms CPU/tick (poll + render - idle); "
        f"fleet view / one monitor: {view / mon_cost if mon_cost else float('nan'):.2f}x"
    )
    if not args.no_ssh:
        ssh_connections(args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

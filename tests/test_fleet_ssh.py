"""Fleets over a real OpenSSH server on 127.0.0.1 (see ssh_fixture.py): nvidia-smi through
one persistent connection per host, hosts that refuse or hang shown down while the others
update, ``lltui gpus`` over ssh, and no ssh process of ours left afterwards."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.ssh_fixture import SshServer, ssh_children_of_us, ssh_server

from lltui.core.monitor.fleet import host_row
from lltui.sources.gpu.fleet import Fleet
from lltui.sources.gpu.smi import SmiSource
from lltui.sources.ssh import SSH_CONFIG_ENV


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with ssh_server(tmp_path_factory.mktemp("sshd")) as server:
        yield server


@pytest.fixture
def ssh_env(sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshServer]:
    # a short runtime folder: a control socket's path must stay under ~100 bytes
    runtime = tempfile.mkdtemp(prefix="lr-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv(SSH_CONFIG_ENV, str(sshd.config))
    yield sshd
    deadline = time.monotonic() + 10
    while ssh_children_of_us() and time.monotonic() < deadline:
        threading.Event().wait(0.05)
    left = ssh_children_of_us()
    shutil.rmtree(runtime, ignore_errors=True)
    assert not left, f"ssh processes left running: {left}"


def wait_until(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        threading.Event().wait(0.02)


def sockets(runtime: str) -> list[str]:
    folder = Path(runtime) / "lltui" / "ssh"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_smi_over_ssh_opens_one_connection_and_closes_it(ssh_env: SshServer):
    before = ssh_env.connections()
    src = SmiSource("fleet-a", timeout=20)
    info = src.open()
    assert len(info.gpus) == 4 and info.gpus[0].name == "NVIDIA A100-SXM4-40GB"
    for _ in range(5):
        sample = src.poll()
    assert sample.gpus[0].memory_total == 40960 * 1024 * 1024
    assert len(ssh_env.calls()) >= 7  # every command reached the stand-in over ssh
    # one TCP connection for open + 5 polls: the master; the rest were sessions on it
    assert ssh_env.connections() - before == 1
    runtime = os.environ["XDG_RUNTIME_DIR"]
    assert len(sockets(runtime)) == 1
    assert ssh_children_of_us()  # the master runs while the source is open
    src.close()
    assert sockets(runtime) == []  # ssh -O exit removed the socket; the fixture checks procs


def test_a_close_racing_a_login_still_stops_the_master_it_makes(ssh_env: SshServer):
    import subprocess

    from lltui.sources.ssh import CONNECT_TIMEOUT_S, SshTarget

    target = SshTarget("fleet-a")
    login = subprocess.Popen(target.argv("true"), stdin=subprocess.DEVNULL)
    target.close()  # before the login made its master: -O exit finds none
    assert login.wait(timeout=20) == 0  # the racing command still runs to its end
    # the master that login left is stopped once it is up, well before ControlPersist (30 s)
    wait_until(lambda: not ssh_children_of_us(), timeout=CONNECT_TIMEOUT_S + 4)
    assert sockets(os.environ["XDG_RUNTIME_DIR"]) == []


def test_a_master_an_exit_missed_is_stopped_after_the_close(
    ssh_env: SshServer, monkeypatch: pytest.MonkeyPatch
):
    """An ``-O exit`` that timed out (a loaded machine) leaves the master up: the close's
    watcher stops it, rather than ControlPersist (30 s) later."""
    import subprocess

    from lltui.sources import ssh
    from lltui.sources.ssh import LATE_WATCH_S, SshTarget

    target = SshTarget("fleet-a")
    assert subprocess.run(target.argv("true"), stdin=subprocess.DEVNULL).returncode == 0
    assert target.master_running()
    real = ssh._quiet
    missed: list[list[str]] = []

    def first_exit_times_out(argv: list[str], timeout: float) -> int:
        if "exit" in argv and not missed:
            missed.append(argv)
            return 255  # as _quiet answers a TimeoutExpired
        return real(argv, timeout)

    monkeypatch.setattr(ssh, "_quiet", first_exit_times_out)
    target.close()
    assert missed and ssh_children_of_us()  # the exit did nothing: the master is still up
    wait_until(lambda: not ssh_children_of_us(), timeout=LATE_WATCH_S + 4)
    assert sockets(os.environ["XDG_RUNTIME_DIR"]) == []


def test_closing_a_target_leaves_a_newer_one_of_the_same_host_alone(ssh_env: SshServer):
    """The close's watcher stops masters at its own target's path only: a target opened
    again for the same host (a view reopened) keeps its master past the watch."""
    import subprocess

    from lltui.sources.ssh import LATE_WATCH_S, SshTarget

    old = SshTarget("fleet-a")
    assert subprocess.run(old.argv("true"), stdin=subprocess.DEVNULL).returncode == 0
    old.close()
    new = SshTarget("fleet-a")
    assert new.control_path() != old._control_path
    assert subprocess.run(new.argv("true"), stdin=subprocess.DEVNULL).returncode == 0
    threading.Event().wait(LATE_WATCH_S + 1.0)  # the old target's watch has run its course
    assert new.master_running()
    new.close()


def test_fleet_two_hosts_update_while_one_refuses_and_one_hangs(ssh_env: SshServer):
    before = ssh_env.connections()
    fleet = Fleet(
        ["smi:fleet-a", "smi:fleet-b", "smi:fleet-down", "smi:fleet-hang"],
        interval=0.2,
        timeout=4.0,
    )
    started = time.monotonic()
    fleet.start()
    try:
        # the down host is down, the hung one is shown down within 3 intervals (min 3 s)
        def shown_down(label: str) -> bool:
            snap = fleet.snapshot()
            state = next(s for s in snap.hosts if s.label == label)
            return host_row(state, snap.t, fleet.interval).status == "down"

        wait_until(lambda: shown_down("fleet-down") and shown_down("fleet-hang"), 15)
        assert time.monotonic() - started < 10
        wait_until(lambda: fleet.state(0).polls >= 3 and fleet.state(1).polls >= 3)
        first = ssh_env.connections() - before
        polls = fleet.state(0).polls + fleet.state(1).polls
        wait_until(lambda: fleet.state(0).polls + fleet.state(1).polls >= polls + 8)
        # the others kept updating; no new connection per tick: one master per live host
        assert first == 2
        assert ssh_env.connections() - before == 2
        snap = fleet.snapshot()
        a, b, down, _hang = snap.hosts
        assert a.reachable and b.reachable and a.sample and len(a.sample.gpus) == 4
        assert down.reachable is False and "ssh: connect to host 127.0.0.1" in (down.error or "")
        assert "refused" in (down.error or "").lower()
        wait_until(lambda: fleet.state(3).reachable is False, 15)
        assert fleet.state(0).polls > polls // 2
    finally:
        fleet.close()


def test_gpus_over_ssh_lists_each_hosts_gpus(ssh_env: SshServer, tmp_path, capsys):
    from lltui.cli import main

    hosts = tmp_path / "hosts"
    hosts.write_text("# two aliases of one sshd, one refusing\nfleet-a\nfleet-b\nfleet-down\n")
    code = main(["gpus", "--json", "--hosts", str(hosts)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(h["name"], h["reachable"], len(h["gpus"])) for h in out["hosts"]] == [
        ("fleet-a", True, 4),
        ("fleet-b", True, 4),
        ("fleet-down", False, 0),
    ]
    assert out["hosts"][0]["gpus"][0]["uuid"] == "GPU-stand-in-0"
    # the host that did not answer is the alert watch raises for it, its host named (it was
    # null, the host only in the subject's words)
    alerts = [(a["kind"], a["subject"], a["host"]) for a in out["alerts"]]
    assert alerts == [("host_down", "host fleet-down", "fleet-down")]


def test_watch_takes_the_host_timeout_given(ssh_env: SshServer, capsys):
    from lltui.cli import main

    argv = ["--host-timeout", "1", "watch", "--once", "--json"]
    main([*argv, "--source", "smi:fleet-a,smi:fleet-hang"])
    alerts = json.loads(capsys.readouterr().out)["alerts"]
    # (fleet-a may be slow to log in on a loaded machine: only the host that hangs is sure)
    down = [a for a in alerts if a["kind"] == "host_down" and "fleet-hang" in a["subject"]]
    assert len(down) == 1 and "within 1 s" in down[0]["message"], alerts


def test_an_ssh_a_poll_gave_up_on_ends_with_lltui(ssh_env: SshServer):
    import subprocess
    import sys

    argv = [sys.executable, "-m", "lltui", "--host-timeout", "2", "gpus"]
    done = subprocess.run(
        [*argv, "--source", "smi:fleet-a,smi:fleet-hang"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
    )
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    # the ssh to the host that never answers is gone with lltui (ps straight after: no wait)
    out = subprocess.run(["ps", "-eww", "-o", "stat,args"], capture_output=True, text=True)
    hung = [ln for ln in out.stdout.splitlines() if "fleet-hang" in ln and not ln.startswith("Z")]
    assert hung == []


def test_a_master_its_owner_forgot_is_stopped_when_lltui_exits(ssh_env: SshServer):
    import subprocess
    import sys

    code = (
        "from lltui.sources.gpu.smi import SmiSource\n"
        "s = SmiSource('fleet-a', timeout=20)\n"
        "s.open(); s.poll()\n"
        "import os; print(os.getpid())\n"  # no close(): the exit handler stops the master
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1])),
    )
    assert done.returncode == 0, done.stderr
    pid = done.stdout.strip()
    out = subprocess.run(["ps", "-eww", "-o", "stat,args"], capture_output=True, text=True)
    masters = [
        line
        for line in out.stdout.splitlines()
        if f"/ssh/{pid}-" in line and not line.startswith("Z")
    ]
    assert masters == []
    assert sockets(os.environ["XDG_RUNTIME_DIR"]) == []


def test_a_poll_given_up_on_leaves_no_nvidia_smi_running_on_the_host(ssh_env: SshServer):
    """A poll past its timeout kills the local ssh; without a terminal sshd does not signal
    the remote command, so nvidia-smi bounds its own run there (coreutils ``timeout``)."""
    import subprocess

    from lltui.core.monitor.models import SourceUnavailable

    def running(pid: int) -> bool:
        out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
        return bool(out.stdout.strip()) and not out.stdout.strip().startswith("Z")

    src = SmiSource("fleet-a", timeout=5)
    src.open()  # the master is up: the poll's session opens well within its timeout
    src.poll()  # (the first poll takes the GPU rows open read)
    ssh_env.hang.touch()
    try:
        with pytest.raises(SourceUnavailable, match="did not answer within 5 s"):
            src.poll()
        wait_until(lambda: ssh_env.hung_pids() != [])
        (pid,) = ssh_env.hung_pids()
        # the stand-in sleeps ten minutes; its own bound (5 s) ends it long before that
        wait_until(lambda: not running(pid), timeout=30)
    finally:
        ssh_env.hang.unlink()
        for pid in ssh_env.hung_pids():  # (what a failed run of this test left)
            subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
        src.close()


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_watch_once_stopped_while_its_hosts_answer_says_nothing_was_checked(
    ssh_env: SshServer, sig: str, code: int
):
    """Ctrl-C while every host's poll was in flight: `watch --once` exited 0 with nothing
    printed, the exit that tells cron nothing is at --fail-on or above (SIGTERM: killed
    outright, the ssh masters left up); it says nothing was checked, and stops its ssh."""
    import signal
    import subprocess
    import sys

    seen = len(ssh_env.hung_pids())
    argv = [sys.executable, "-m", "lltui", "--host-timeout", "60", "watch", "--once", "--json"]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    pipe = subprocess.PIPE
    ssh_env.hang.touch()

    def ctrl_c_as_a_terminal_gives_it() -> None:  # (a test worker may set SIGINT aside)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [*argv, "--source", "smi:fleet-a,smi:fleet-b"],
        env=env,
        stdout=pipe,
        stderr=pipe,
        text=True,
        preexec_fn=ctrl_c_as_a_terminal_gives_it,
    )
    try:
        wait_until(lambda: len(ssh_env.hung_pids()) >= seen + 2)  # both hosts' polls in flight
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=30)
    finally:
        ssh_env.hang.unlink()
        proc.kill()
        for pid in ssh_env.hung_pids()[seen:]:
            subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    line = "watch: stopped before its look finished: no alert was checked"
    assert proc.returncode == code, err
    assert err.splitlines() == [f"lltui: {line}"]
    assert json.loads(out) == {"error": line, "exit_code": code}

    def masters() -> list[str]:
        ps = subprocess.run(["ps", "-eww", "-o", "stat,args"], capture_output=True, text=True)
        return [ln for ln in ps.stdout.splitlines() if f"/ssh/{proc.pid}-" in ln and ln[0] != "Z"]

    wait_until(lambda: masters() == [], 15)


@pytest.mark.parametrize(
    "argv",
    [
        ["gpus", "--source", "smi:bob:hunter2@fleet-a"],
        ["gpus", "--json", "--source", "smi:fleet-b,smi:bob:hunter2@fleet-a:22"],
        ["watch", "--once", "--json", "--source", "smi:fleet-b,amd:bob:hunter2@fleet-a"],
        ["gpus", "--hosts", "HOSTS"],
    ],
)
def test_a_password_in_a_host_is_refused_and_never_printed(
    ssh_env: SshServer, tmp_path, capsys, argv
):
    """``user:password@host`` was taken as ssh's user name: the password was the host's label
    and was in its error line, --json and ssh's own message. ssh takes no password on its
    command line; the form is refused in one line that does not repeat it."""
    from lltui.cli import main

    hosts = tmp_path / "hosts"
    hosts.write_text("fleet-b\nbob:hunter2@fleet-a\n")
    assert main([str(hosts) if a == "HOSTS" else a for a in argv]) == 2
    out, err = capsys.readouterr()
    assert "hunter2" not in out + err
    assert "holds a password" in err and "with a key" in err


def test_a_host_that_answers_within_the_timeout_is_up(ssh_env: SshServer, tmp_path, capsys):
    """A poll ran four nvidia-smi calls in turn (query-gpu at open, --version, query-gpu
    again, compute-apps), each allowed the whole --host-timeout while the poll was too: a
    host answering each in 4 s was 'did not answer within 15.5 s' (four calls take 16 s,
    whatever ssh adds). The poll's calls now share its timeout, and its first poll takes the
    GPU rows its open read: three calls, 12 s and ssh's time (room for a loaded machine)."""
    from lltui.cli import main

    hosts = tmp_path / "hosts"
    hosts.write_text("fleet-a\n")
    ssh_env.slow.write_text("4")
    try:
        code = main(["--host-timeout", "15.5", "gpus", "--json", "--hosts", str(hosts)])
    finally:
        ssh_env.slow.unlink()
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    host = out["hosts"][0]
    assert (host["reachable"], host["error"], len(host["gpus"])) == (True, None, 4), host
    assert host["cuda_version"] == "12.3"


@pytest.mark.parametrize("kind", ["smi", "amd"])
def test_one_host_takes_the_host_timeout_given(ssh_env: SshServer, capsys, kind: str):
    """--host-timeout was a fleet's only: one slow host (--source smi:HOST or amd:HOST) kept
    its source's 20 s, whatever was given."""
    from lltui.cli import main

    ssh_env.slow.write_text("10")
    try:
        code = main(["--host-timeout", "2", "gpus", "--json", "--source", f"{kind}:fleet-a"])
    finally:
        ssh_env.slow.unlink()
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and "did not answer within 2 s" in out["error"], out


@pytest.mark.parametrize(
    ("host", "timeout", "said"),
    [
        ("fleet-a", 5, "nvidia-smi on fleet-a did not answer within 5 s (its ssh connection "
         "is up)"),
        # (it never logged in; under ssh's own 5 s ConnectTimeout, whose banner-exchange
        # error would otherwise race lltui's on a loaded machine)
        ("fleet-hang", 3, "ssh did not answer within 3 s"),
    ],
)  # fmt: skip
def test_a_host_that_does_not_answer_says_whether_ssh_or_the_tool_hung(
    ssh_env: SshServer, capsys, host: str, timeout: int, said: str
):
    """A host whose nvidia-smi hung (ssh had logged in) was 'ssh did not answer within 5 s',
    as one whose ssh never connected: the host's connection being up tells them apart."""
    import subprocess

    from lltui.cli import main

    seen = len(ssh_env.hung_pids())
    ssh_env.hang.touch()
    try:
        code = main(["--host-timeout", str(timeout), "gpus", "--json", "--source", f"smi:{host}"])
    finally:
        ssh_env.hang.unlink()
        for pid in ssh_env.hung_pids()[seen:]:
            subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    out = json.loads(capsys.readouterr().out)
    assert (code, out["error"]) == (1, f"source smi:{host}: {said}"), out


@pytest.mark.parametrize(
    ("host", "said"),
    [
        ("fleet-a", "nvidia-smi topo -m on fleet-a did not answer within 3 s (its ssh "
         "connection is up)"),
        ("fleet-hang", "ssh did not answer within 3 s"),  # (it never logged in)
    ],
)  # fmt: skip
def test_a_topology_read_that_hangs_says_whether_ssh_or_nvidia_smi_did(
    ssh_env: SshServer, host: str, said: str
):
    """topo over a host whose nvidia-smi hung said 'nvidia-smi topo -m on HOST did not
    answer' whether or not ssh had logged in; it tells them apart as gpus does."""
    import subprocess

    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.gpu.topo import run_smi
    from lltui.sources.ssh import SshTarget, split_host_port

    seen = len(ssh_env.hung_pids())
    ssh = SshTarget(*split_host_port(host))
    ssh_env.hang.touch()
    try:
        with pytest.raises(SourceUnavailable) as raised:
            run_smi(["topo", "-m"], ssh=ssh, timeout=3)
    finally:
        ssh_env.hang.unlink()
        ssh.close()
        for pid in ssh_env.hung_pids()[seen:]:
            subprocess.run(["kill", "-KILL", str(pid)], capture_output=True)
    assert str(raised.value) == said


def test_a_jump_host_that_fails_says_why(
    ssh_env: SshServer, tmp_path, capsys, monkeypatch: pytest.MonkeyPatch
):
    """A host reached through a jump host (ProxyJump) that refuses, or will not take the
    user, was down with ssh's generic last line, "kex_exchange_identification: Connection
    closed by remote host": a master (ControlPersist) sends the jump's own error to
    /dev/null. That error now reaches the host's error and its host_down alert."""
    from lltui.cli import main

    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host via-down via-baduser\n  HostName 127.0.0.1\n  Port {ssh_env.port}\n"
        "Host via-down\n  ProxyJump fleet-down\n"
        "Host via-baduser\n  ProxyJump nosuchuser@fleet-a\n" + ssh_env.config.read_text()
    )
    monkeypatch.setenv(SSH_CONFIG_ENV, str(config))
    code = main(
        ["--host-timeout", "20", "gpus", "--json", "--source", "smi:via-down,smi:via-baduser"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 1
    down, baduser = (h["error"] for h in out["hosts"])
    jump = "failed at its jump host (ProxyJump/ProxyCommand)"
    assert f"ssh to via-down {jump}: ssh: connect to host 127.0.0.1 port" in down, down
    assert down.endswith("Connection refused")
    assert (
        baduser
        == f"ssh to via-baduser {jump}: nosuchuser@127.0.0.1: Permission denied (publickey)."
    ), baduser
    assert [a["message"] for a in out["alerts"]] == [down, baduser]


def test_amd_topology_over_ssh_reaches_the_port_given(ssh_env: SshServer, capsys):
    """topo --source amd:HOST:PORT sent 'HOST:PORT' to ssh as the host's name ('Could not
    resolve hostname fleet-down:PORT'); smi: split the port off."""
    from lltui.cli import main

    # fleet-down's own port has nothing listening: only the port given reaches the sshd
    assert main(["topo", "--json", "--source", f"amd:fleet-down:{ssh_env.port}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["links"] == {"GPU0-GPU1": "PHB"}, out


def test_smi_topology_over_ssh_takes_the_hosts_ssh_config(ssh_env: SshServer, capsys):
    """topo --source smi:HOST ran a plain ssh of its own, without LLTUI_SSH_CONFIG's -F
    ('Could not resolve hostname fleet-a') while gpus and amd: reached the host; it runs
    through the host's one connection now, as the smi source does."""
    from lltui.cli import main

    before = ssh_env.connections()
    assert main(["topo", "--json", "--source", "smi:fleet-a"]) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    assert out["links"]["GPU0-GPU3"] == "NV12", out
    assert ssh_env.connections() - before == 1  # topo -m, -p2p and the GPU query: one login


@pytest.mark.parametrize("stage", ["open", "poll"])
def test_closing_a_fleet_stops_an_amd_hosts_ssh_mid_command(ssh_env: SshServer, stage: str):
    """Fleet.close closed a host busy in a command only if it was an smi: one: an amd:
    host's ssh master ran on for ControlPersist (30 s) past the command's end, and one still
    opening could not be reached by its close at all."""
    fleet = Fleet(["amd:fleet-a"], interval=60, timeout=30)
    if stage == "poll":
        assert fleet.poll_host(0).reachable
    ssh_env.slow.write_text("5")
    try:
        fleet.start()
        word = "static" if stage == "open" else "metric"
        wait_until(lambda: any(f"amd-smi {word}" in line for line in ssh_children_of_us()))
    finally:
        ssh_env.slow.unlink()
    fleet.close()
    wait_until(lambda: not ssh_children_of_us(), timeout=10)

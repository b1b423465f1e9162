"""A real OpenSSH server on 127.0.0.1 for the fleet tests.

``sshd`` starts ``/usr/sbin/sshd -D -f <config>`` on a free port with a throwaway host key,
a throwaway user key in its authorized_keys and ``LogLevel VERBOSE`` (each connection that
logs in is an ``Accepted publickey`` line in its log, which the tests count). The client side
is a generated ssh_config, handed to lltui through ``LLTUI_SSH_CONFIG``, with aliases:

- ``fleet-a``, ``fleet-b``: two hosts, both this sshd;
- ``fleet-down``: a port nothing listens on (connection refused);
- ``fleet-hang``: a TCP listener that accepts and never says a word.

The sshd's sessions have ``stand-in-bin`` first on PATH, holding ``nvidia-smi``: a clearly
named stand-in (``STAND-IN nvidia-smi``) answering ``--query-gpu`` with the GPUs of a real
capture (tests/fixtures/real/smi/C01..., 4x A100) in the fields asked for, nothing for
``--query-compute-apps``, ``--version``, and ``topo -m`` (the four GPUs NVLinked, NV12).
Each call is one line in ``calls.log``. While the file ``SshServer.hang`` exists, it hangs
instead (a slow host): it writes its pid as one line of ``hang.pids`` and sleeps ten
minutes. While the file ``SshServer.slow`` exists, each call first sleeps the seconds it
holds. Beside it, a stand-in ``amd-smi`` (``STAND-IN
amd-smi``) answers ``static``, ``metric`` and ``topology`` with recorded output
(tests/fixtures/amd/amd-smi, an MI210) and fails everything else; it is slow alike.

Without sshd or ssh the tests skip with one line saying what is missing (scripts/test
installs openssh-server when it runs as root on a machine with apt).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.topo_fixtures import render

SSHD = "/usr/sbin/sshd"
FIXTURE = (
    Path(__file__).resolve().parents[1]
    / "fixtures/real/smi/C01-query-gpu-csv-noheader-looped-4xA100-timestamped.txt"
)
CAPTURE_FIELDS = (
    "timestamp,name,pci.bus_id,driver_version,pstate,pcie.link.gen.max,pcie.link.gen.current,"
    "temperature.gpu,utilization.gpu,utilization.memory,memory.total,memory.free,memory.used"
)

STAND_IN = '''\
#!{python}
"""STAND-IN nvidia-smi for lltui's tests: answers from a real capture, not a driver."""
import os
import sys
import time

CAPTURE = {capture!r}
FIELDS = {fields!r}.split(",")
with open({log!r}, "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if os.path.exists({hang!r}):
    with open({hang!r} + ".pids", "a") as pids:
        pids.write("%d\\n" % os.getpid())
    time.sleep(600)
if os.path.exists({slow!r}):
    time.sleep(float(open({slow!r}).read()))
args = sys.argv[1:]
if args == ["topo", "-m"]:
    print({topo!r})
    sys.exit(0)
if args[:1] == ["topo"]:
    sys.exit("STAND-IN nvidia-smi: no answer for this")
if args == ["--version"]:
    print("NVIDIA-SMI version  : 545.23.08")
    print("DRIVER version      : 545.23.08")
    print("CUDA Version        : 12.3")
    sys.exit(0)
flag, _, wanted = args[0].partition("=")
if flag == "--query-compute-apps":
    sys.exit(0)
rows = {{}}
for line in open(CAPTURE):
    cells = [c.strip() for c in line.split(",")]
    row = dict(zip(FIELDS, cells))
    rows.setdefault(row["pci.bus_id"], row)
for index, row in enumerate(sorted(rows.values(), key=lambda r: r["pci.bus_id"])):
    row = dict(row, index=str(index), uuid="GPU-stand-in-%d" % index)
    out = []
    for field in wanted.split(","):
        value = row.get(field, "[N/A]")
        out.append(value.replace(" MiB", "").replace(" %", ""))
    print(", ".join(out))
'''

AMD_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/amd/amd-smi"
AMD_STAND_IN = '''\
#!{python}
"""STAND-IN amd-smi for lltui's tests: answers from recorded output, not a driver."""
import os
import sys
import time

ANSWERS = {answers!r}
if os.path.exists({slow!r}):
    time.sleep(float(open({slow!r}).read()))
answer = ANSWERS.get(" ".join(sys.argv[1:]))
if answer is None:
    sys.exit("STAND-IN amd-smi: no answer for this")
print(open(answer).read())
'''
AMD_ANSWERS = {
    "static --json": str(AMD_FIXTURES / "static-mi210-gpu_data.json"),
    "metric --json": str(AMD_FIXTURES / "metric-power-rocm6.1.0.json"),
    "topology --json": str(AMD_FIXTURES / "topology-2gpu-pcie-rocm6.1.0.json"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing() -> str | None:
    """What this machine lacks for the ssh tests, in one line (None: nothing)."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing: install openssh-server (scripts/test does, as root with apt)"
    if shutil.which("ssh") is None:
        return "the ssh client is missing: install openssh-client"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing: install openssh-client"
    return None


class HangingListener:
    """A TCP port that accepts connections and never answers (a host that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = self.sock.accept()
                self._held.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        for conn in self._held:
            conn.close()
        self.sock.close()


@dataclass
class SshServer:
    port: int
    config: Path  # the ssh_config for clients (LLTUI_SSH_CONFIG)
    log: Path
    calls_log: Path
    bin_dir: Path
    proc: subprocess.Popen[bytes]

    def connections(self) -> int:
        """ssh connections sshd accepted (authenticated) so far."""
        return self.log.read_text(errors="replace").count("Accepted publickey")

    @property
    def hang(self) -> Path:
        """While this file exists, the stand-in nvidia-smi hangs (see the module's doc)."""
        return self.calls_log.with_name("hang")

    @property
    def slow(self) -> Path:
        """While this file exists, the stand-in nvidia-smi sleeps the seconds it holds
        before it answers (a host that is slow, not hung)."""
        return self.calls_log.with_name("slow")

    def hung_pids(self) -> list[int]:
        """The pids of the stand-ins that hung so far."""
        pids = self.calls_log.with_name("hang.pids")
        return [int(p) for p in pids.read_text().split()] if pids.exists() else []

    def calls(self) -> list[str]:
        if not self.calls_log.exists():
            return []
        return self.calls_log.read_text().splitlines()


def _wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"sshd exited with {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise AssertionError(f"sshd did not listen on {port} in {timeout:.0f} s")


@contextlib.contextmanager
def ssh_server(root: Path, remote_path: str = "") -> Iterator[SshServer]:
    """The server; ``remote_path``: folders put on its sessions' PATH after the stand-in."""
    why = missing()
    if why is not None:
        pytest.skip(why)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    subprocess.run([*keygen, "-f", str(root / "host_key")], check=True)
    subprocess.run([*keygen, "-f", str(root / "user_key")], check=True)
    auth = root / "authorized_keys"
    auth.write_text((root / "user_key.pub").read_text())
    auth.chmod(0o600)
    bin_dir = root / "stand-in-bin"
    bin_dir.mkdir()
    calls_log = root / "calls.log"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        STAND_IN.format(
            python=sys.executable,
            capture=str(FIXTURE),
            fields=CAPTURE_FIELDS,
            log=str(calls_log),
            hang=str(root / "hang"),
            slow=str(root / "slow"),
            topo=render({(a, b): "NV12" for a in range(4) for b in range(a + 1, 4)}, 4),
        )
    )
    smi.chmod(0o755)
    amd = bin_dir / "amd-smi"
    amd.write_text(
        AMD_STAND_IN.format(python=sys.executable, answers=AMD_ANSWERS, slow=str(root / "slow"))
    )
    amd.chmod(0o755)
    path = ":".join(p for p in (str(bin_dir), remote_path, "/usr/bin:/bin") if p)
    port = free_port()
    pid_file = root / "sshd.pid"
    config = root / "sshd_config"
    config.write_text(
        textwrap.dedent(
            f"""\
            Port {port}
            ListenAddress 127.0.0.1
            HostKey {root / "host_key"}
            AuthorizedKeysFile {auth}
            PidFile {pid_file}
            PasswordAuthentication no
            KbdInteractiveAuthentication no
            UsePAM no
            StrictModes no
            PermitRootLogin prohibit-password
            LogLevel VERBOSE
            MaxStartups 100:30:200
            MaxSessions 100
            SetEnv PATH={path}
            """
        )
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    log = root / "sshd.log"
    proc = subprocess.Popen(
        [SSHD, "-D", "-f", str(config), "-E", str(log)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    hang = HangingListener()
    try:
        _wait_port(port, proc)
        user = (
            os.environ.get("USER")
            or subprocess.run(
                ["id", "-un"], capture_output=True, text=True, check=True
            ).stdout.strip()
        )
        client = root / "ssh_config"
        common = textwrap.dedent(
            f"""\
              HostName 127.0.0.1
              User {user}
              IdentityFile {root / "user_key"}
              IdentitiesOnly yes
              StrictHostKeyChecking no
              UserKnownHostsFile /dev/null
              LogLevel ERROR
            """
        )
        client.write_text(
            f"Host fleet-a fleet-b\n  Port {port}\n{common}"
            f"Host fleet-down\n  Port {free_port()}\n{common}"
            f"Host fleet-hang\n  Port {hang.port}\n{common}"
        )
        yield SshServer(port, client, log, calls_log, bin_dir, proc)
    finally:
        hang.close()
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def ssh_children_of_us() -> list[str]:
    """ssh processes still running that lltui started in this test process (masters
    included: they are re-parented but keep our control-socket folder in their argv)."""
    out = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True).stdout
    mark = f"/ssh/{os.getpid()}-"
    return [line for line in out.splitlines() if " ssh" in line and mark in line]

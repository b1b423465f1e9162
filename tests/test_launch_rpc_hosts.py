"""``lltui launch --rpc-host``: rpc-server started over real ssh (the sshd of ssh_fixture.py,
whose sessions find the cached build's ggml-rpc-server on PATH), llama-server launched with
their devices through ssh tunnels, and every process stopped afterwards, however lltui
stops."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.launch_proc import launched, read_event
from support.llama_fixture import free_port, llama_bins, tiny_model
from support.proc_helpers import wait_for
from support.ssh_fixture import SshServer, ssh_server

from lltui.cli import main
from lltui.core.cmdline.rpc_hosts import (
    RpcHostError,
    device_line,
    exposure_warning,
    parse_rpc_host,
    remote_command,
)
from lltui.sources.ssh import SSH_CONFIG_ENV

__all__ = ["llama_bins", "tiny_model"]  # session fixtures used by name

REPO = Path(__file__).resolve().parents[1]
READY_TIMEOUT_S = 120.0
GONE_WITHIN_S = 20.0

# --- words ---------------------------------------------------------------------------------------


def test_rpc_host_forms():
    assert parse_rpc_host("gpu2") == parse_rpc_host("gpu2:50052")
    spec = parse_rpc_host("root@gpu2:6000", bind="10.0.0.2")
    assert (spec.host, spec.port, spec.bind) == ("root@gpu2", 6000, "10.0.0.2")
    assert not spec.loopback
    assert spec.direct_endpoint() == "10.0.0.2:6000"
    assert parse_rpc_host("gpu2", bind="0.0.0.0").direct_endpoint() == "gpu2:50052"
    for bad in ("-oProxyCommand=x", "gpu2:0", "gpu2:x", "a b", ""):
        with pytest.raises(RpcHostError):
            parse_rpc_host(bad)
    with pytest.raises(RpcHostError, match="not an IP"):
        parse_rpc_host("gpu2", bind="gpu2; rm -rf /")


def test_remote_command_quotes_what_the_user_gave():
    cmd = remote_command(parse_rpc_host("gpu2:6000", binary="/opt/my llama/rpc-server"))
    words = shlex.split(cmd)
    assert words[:3] == ["exec", "sh", "-c"] and len(words) == 4
    script = words[3]
    assert "b='/opt/my llama/rpc-server'" in script
    assert script.endswith('exec "$b" -H 127.0.0.1 -p 6000')
    # what the host runs: sh says its pid, then becomes the binary
    done = subprocess.run(
        ["sh", "-c", script.replace('exec "$b"', "echo")], capture_output=True, text=True
    )
    assert "is not an executable file on gpu2" in done.stdout and done.returncode == 127
    assert "command -v rpc-server || command -v ggml-rpc-server" in remote_command(
        parse_rpc_host("gpu2")
    )


def test_exposure_warning_only_beyond_loopback():
    assert exposure_warning(parse_rpc_host("gpu2")) is None
    loud = exposure_warning(parse_rpc_host("gpu2", bind="0.0.0.0"))
    assert loud and "NO authentication" in loud and "private network" in loud


def test_device_lines():
    assert device_line("  CPU: AMD EPYC (24105 MiB, 24105 MiB free)") == (
        "CPU",
        "AMD EPYC (24105 MiB, 24105 MiB free)",
    )
    assert device_line("  endpoint       : 127.0.0.1:50052") is None


def test_each_host_is_named_as_llama_server_names_its_devices():
    """The line named a host RPC<host index>[endpoint]: a name llama.cpp gives nothing (its
    buffers are RPC<i>[endpoint] counted within a server, its -dev names RPC<n> counted over
    every server's devices), so the second host of two was 'RPC1[...]', and after a host
    with two GPUs its devices' names were off by one."""
    from lltui.sources.llama.rpc_hosts import RpcHosts

    rpc = RpcHosts([parse_rpc_host("gpu2"), parse_rpc_host("gpu3", bind="10.0.0.3")])
    two, one = rpc.servers
    two.devices = [("CUDA0", "RTX 4090"), ("CUDA1", "RTX 4090")]
    one.devices = [("CUDA0", "RTX 3090")]
    first, second = rpc.describe()
    assert first.startswith(f"RPC0,RPC1 ({two.endpoint}) = rpc-server on gpu2 "), first
    assert second.startswith("RPC2 (10.0.0.3:50052) = rpc-server on gpu3 "), second


def test_rpc_and_rpc_host_together_is_bad_input(tiny_model, capsys):
    code = main(["launch", str(tiny_model), "--rpc", "a:1", "--rpc-host", "b", "--dry-run"])
    assert code == 2 and "not both" in capsys.readouterr().err


# --- over real ssh -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, llama_bins) -> Iterator[SshServer]:
    with ssh_server(tmp_path_factory.mktemp("sshd"), str(llama_bins.bin_dir)) as server:
        yield server


@pytest.fixture
def env(sshd, llama_bins, monkeypatch) -> Iterator[dict[str, str]]:
    runtime = tempfile.mkdtemp(prefix="lr-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv(SSH_CONFIG_ENV, str(sshd.config))
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    yield dict(os.environ)
    shutil.rmtree(runtime, ignore_errors=True)


def processes(*needles: str) -> list[str]:
    """Running processes whose command line holds every needle (zombies excluded)."""
    ps = ["ps", "-eww", "-o", "pid,stat,args"]
    out = subprocess.run(ps, capture_output=True, text=True).stdout
    lines = []
    for line in out.splitlines()[1:]:
        _pid, stat, args = [*line.split(None, 2), "", ""][:3]
        if "Z" not in stat and all(n in args for n in needles) and "ps -eww" not in args:
            lines.append(line)
    return lines


def leftovers(ports: list[int]) -> list[str]:
    left = []
    for port in ports:
        left += processes("rpc-server", f"-p {port}")
        left += processes("ssh", f":{port}")
    return left


def wait_no_leftovers(ports: list[int], seconds: float = GONE_WITHIN_S) -> list[str]:
    deadline = time.monotonic() + seconds
    while leftovers(ports) and time.monotonic() < deadline:
        time.sleep(0.05)
    return leftovers(ports)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_rpc_hosts_over_ssh_serve_llama_server_and_all_stop(env, tiny_model, sig):
    ports = [free_port(), free_port()]
    hosts = ["--rpc-host", f"fleet-a:{ports[0]}", "--rpc-host", f"fleet-b:{ports[1]}"]
    with launched(tiny_model, env, *hosts, "-ngl", "all", "-ts", "1,1") as proc:
        ready = read_event(proc, READY_TIMEOUT_S)
        assert ready["event"] == "ready", ready
        server_pid = ready["pid"]
        rpc = ready["argv"][ready["argv"].index("--rpc") + 1].split(",")
        assert all(r.startswith("127.0.0.1:") for r in rpc) and len(rpc) == 2
        devices = {d["name"]: d for d in ready["devices"]}
        assert {"RPC0", "RPC1"} <= set(devices), devices
        assert devices["RPC0"]["model_mib"] > 0 and devices["RPC1"]["model_mib"] > 0
        hosts_seen = [(h["host"], h["port"], h["tunnel"]) for h in ready["rpc_hosts"]]
        assert hosts_seen == [("fleet-a", ports[0], True), ("fleet-b", ports[1], True)]
        assert all(h["devices"] and h["pid"] for h in ready["rpc_hosts"])
        # each rpc-server runs there, bound to loopback
        for port in ports:
            assert processes("rpc-server", f"-H 127.0.0.1 -p {port}")
        proc.send_signal(sig)
        end = read_event(proc, GONE_WITHIN_S)
        assert proc.wait(timeout=GONE_WITHIN_S) == 0
        assert end["event"] == "exit" and end["code"] == 0
    assert wait_no_leftovers(ports) == []
    assert not processes(str(server_pid), "llama-server")
    assert not processes("ssh", f"/ssh/{proc.pid}-")  # its control connections closed


@pytest.mark.slow
def test_a_host_that_refuses_stops_the_others_and_is_one_line(env, tiny_model):
    ports = [free_port(), free_port()]
    hosts = ["--rpc-host", f"fleet-a:{ports[0]}", "--rpc-host", f"fleet-down:{ports[1]}"]
    with launched(tiny_model, env, *hosts) as proc:
        assert proc.wait(timeout=60) == 1
        assert proc.stderr is not None
        err = proc.stderr.read().strip().splitlines()
    assert len(err) == 1 and "rpc-server on fleet-down did not start" in err[0], err
    assert "refused" in err[0].lower()
    assert wait_no_leftovers(ports) == []


@pytest.mark.slow
def test_the_plan_is_checked_on_the_hosts_memory_and_names_the_hosts(env, tiny_model):
    """fit's check ran before the rpc-servers started, so their memory was unknown and never
    judged, and the command it suggested named this run's ssh tunnel (--rpc 127.0.0.1:N, a
    port gone once lltui exits) where the user gave --rpc-host."""
    ports = [free_port()]
    # a context no machine holds: on the rpc-server (and the host)
    huge = ["-c", str(2**30), "-np", "1"]
    with launched(tiny_model, env, "--rpc-host", f"fleet-a:{ports[0]}", *huge) as proc:
        assert proc.wait(timeout=60) == 1
        assert proc.stderr is not None
        err = proc.stderr.read().strip().splitlines()[-1]
    assert "does not fit: RPC0[127.0.0.1:" in err and " GiB free; " in err, err
    assert f"--rpc-host fleet-a:{ports[0]} " in err and "--rpc " not in err, err
    assert wait_no_leftovers(ports) == []


@pytest.mark.slow
def test_sigkill_of_lltui_takes_the_rpc_servers_with_it(env, tiny_model):
    ports = [free_port()]
    with launched(tiny_model, env, "--rpc-host", f"fleet-a:{ports[0]}") as proc:
        assert read_event(proc, READY_TIMEOUT_S)["event"] == "ready"
        assert leftovers(ports)
        proc.kill()
        proc.wait(timeout=GONE_WITHIN_S)
    assert wait_no_leftovers(ports) == []


def test_dry_run_shows_the_ssh_commands_and_warns_beyond_loopback(
    env, tiny_model, tmp_path, capsys
):
    words = ["launch", str(tiny_model), "--rpc-host", "fleet-a:6000", "--rpc-bind", "0.0.0.0"]
    code = main([*words, "--rpc-server", "/opt/llama/rpc-server", "--dry-run", "--json"])
    captured = capsys.readouterr()
    assert code == 0
    assert "NO authentication" in captured.err and "WARNING" in captured.err
    # one warning: llama-server's --rpc fleet-a:6000 (beyond loopback) was warned of again
    assert captured.err.lower().count("authentication") == 1
    out = json.loads(captured.out)
    assert out["argv"][out["argv"].index("--rpc") + 1] == "fleet-a:6000"
    (host,) = out["rpc_hosts"]
    assert host["endpoint"] == "fleet-a:6000" and host["tunnel"] is False
    assert "-tt" in host["argv"] and "fleet-a" in host["argv"]
    assert "b=/opt/llama/rpc-server" in shlex.split(host["argv"][-1])[-1]
    b = tmp_path / "b.gguf"
    b.write_bytes(tiny_model.read_bytes())
    assert main([*words, str(b), "--dry-run"]) == 0  # two models: a router
    assert capsys.readouterr().err.lower().count("authentication") == 1


@pytest.mark.slow
def test_a_router_over_rpc_hosts_puts_each_model_on_its_own_host(env, tmp_path):
    """Two models, each on the rpc-server of one host (-dev picks it): the router's preset
    names only that server for each, so both are loaded at once; all of it stops with lltui."""
    from support.router_helpers import all_gone, group_members, launched_router, write_models
    from support.router_helpers import read_event as router_event

    models = write_models(tmp_path / "models")
    ports = [free_port(), free_port()]
    args = [
        "--rpc-host", f"fleet-a:{ports[0]}", "--rpc-host", f"fleet-b:{ports[1]}", "-t", "1",
        str(models["alpha"]), "-c", "512", "-dev", "RPC1",
        str(models["beta"]), "-c", "512", "-dev", "RPC0",
        "--load", "alpha", "--load", "beta",
    ]  # fmt: skip
    env = dict(env, XDG_STATE_HOME=str(tmp_path / "state"))
    with launched_router(env, *args) as (proc, _port, routers):
        ready = router_event(proc, READY_TIMEOUT_S)
        routers.append(ready["pid"])
        loaded: dict[str, str] = {}
        while len(loaded) < 2:
            event = router_event(proc, READY_TIMEOUT_S)
            assert event["event"] != "refused", event
            if event.get("state") == "loaded":
                loaded[event["name"]] = event["devices"][0]["name"]
        assert loaded["alpha"].startswith("RPC0[127.0.0.1:") and loaded["beta"].startswith("RPC0[")
        assert loaded["alpha"] != loaded["beta"]  # one server each
        members = group_members(ready["pid"])
        assert len(members) == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=GONE_WITHIN_S) == 0
    assert all_gone(members) == []
    assert wait_no_leftovers(ports) == []


def test_servers_never_started_are_not_waited_for(monkeypatch):
    """A dry run, or a bad model, leaves the --rpc-host servers unstarted: leaving the
    with-block waited STOP_WAIT_S for each (5 s a host before any error line)."""
    from lltui.services.launch import rpc_hosts as service
    from lltui.sources.llama import rpc_hosts

    monkeypatch.setattr(rpc_hosts, "STOP_WAIT_S", 120.0)
    specs, _ = service.read_rpc_hosts(["h1:6000", "h2:6001"], bind=None, binary=None)
    t0 = time.monotonic()
    with service.RpcHosts(specs):
        pass
    assert time.monotonic() - t0 < 60  # not the 2 x 120 s a wait for each would take


def test_stopping_while_a_host_still_connects_does_not_wait_for_it(monkeypatch, tmp_path):
    """Ctrl-C while ssh was still connecting waited STOP_WAIT_S for an rpc-server that never
    started (about 4.5 s of silence)."""
    import threading

    from lltui.services.launch import rpc_hosts as service
    from lltui.sources.llama import rpc_hosts

    config = tmp_path / "ssh_config"
    # a server that says its banner and nothing more: ssh waits in its key exchange until
    # its own connect timeout (some 10 s)
    banner = "printf 'SSH-2.0-OpenSSH_9.0\\r\\n'; exec sleep 120"
    config.write_text(f'Host hang\n  ProxyCommand sh -c "{banner}"\n')
    monkeypatch.setenv("LLTUI_SSH_CONFIG", str(config))
    monkeypatch.setattr(rpc_hosts, "STOP_WAIT_S", 60.0)
    specs, _ = service.read_rpc_hosts(["hang:6000"], bind=None, binary=None)
    hosts = service.RpcHosts(specs)

    def start() -> None:
        with contextlib.suppress(Exception):  # (its RpcStartError once stopped)
            hosts.start()

    starting = threading.Thread(target=start)
    starting.start()
    try:
        assert wait_for(lambda: all(s.proc is not None for s in hosts.servers), 30)
        t0 = time.monotonic()
        hosts.stop()
        assert time.monotonic() - t0 < 6  # not until ssh gives up on its own
        assert all(s.proc is not None and s.proc.poll() is not None for s in hosts.servers)
    finally:
        hosts.stop()
        starting.join(60)

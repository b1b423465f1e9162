"""The supervisor against the real llama-server CPU build and tiny generated models.

Every server binds 127.0.0.1 on a free port; every wait has a deadline; every process a test
starts is stopped (its whole group) in a ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from support.llama_fixture import free_port, llama_bins, rpc_servers, tiny_model, write_tiny_llama

from lltui.core.cmdline.launch_spec import LaunchError, LaunchSpec, build_command
from lltui.core.llama.metrics import parse_metrics
from lltui.sources.llama.binary import probe
from lltui.sources.llama.supervisor import (
    Supervisor,
    SupervisorError,
    binary_flags,
    check_port_free,
)

__all__ = ["llama_bins", "tiny_model"]  # session fixtures used by name

pytestmark = pytest.mark.slow
READY_TIMEOUT_S = 90.0
MIB = 1024 * 1024
KEY = "sk-test-9d81e2c4"


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie waiting to be reaped counts as gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def kill_group(pid: int | None) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


@contextlib.contextmanager
def supervised(bins, spec: LaunchSpec, **kw) -> Iterator[Supervisor]:
    server = bins.binaries["llama-server"]
    command = build_command(spec, str(server), binary_flags(probe(server)))
    sup = Supervisor(command, url=spec.url, host=spec.host, port=spec.port, **kw)
    try:
        yield sup
    finally:
        try:
            sup.stop(grace_s=5.0, second_grace_s=2.0)
        finally:
            kill_group(sup.pid)


def tiny_spec(model: Path, *flags: str, **launch) -> LaunchSpec:
    launch.setdefault("port", free_port())
    return LaunchSpec.of(str(model), ["-c", "512", "-t", "1", *flags], **launch)


def test_start_ready_complete_measure_and_stop(llama_bins, tiny_model):
    spec = tiny_spec(tiny_model)
    with supervised(llama_bins, spec) as sup:
        sup.start()
        assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
        status = sup.status()
        assert status.state == "ready" and status.health == 200
        assert status.log.ready and status.log.model_loaded

        # Placement from the log: everything on the CPU; KV is 512 cells x 8 layers x
        # (64 K + 64 V) x 2 bytes = 1 MiB, and the weights are the file's tensor data.
        devices = sup.summary().ready_devices()
        assert [d["name"] for d in devices] == ["CPU"]
        assert devices[0]["kv_mib"] == pytest.approx(1.0)
        assert devices[0]["model_mib"] == pytest.approx(tiny_model.stat().st_size / MIB, abs=0.1)
        assert devices[0]["compute_mib"] > 0

        with httpx.Client(base_url=spec.url, timeout=30.0, trust_env=False) as client:
            before = parse_metrics(client.get("/metrics").text)
            done = client.post(
                "/completion", json={"prompt": "hello world, the gpu", "n_predict": 24, "seed": 1}
            ).json()
            after = parse_metrics(client.get("/metrics").text)
        predicted = done["tokens_predicted"]
        assert predicted > 0 and done["timings"]["predicted_per_second"] > 0
        d_tokens = after.tokens_predicted_total - (before.tokens_predicted_total or 0)
        d_seconds = after.tokens_predicted_seconds_total - (
            before.tokens_predicted_seconds_total or 0
        )
        assert d_tokens == predicted
        assert d_seconds > 0 and d_tokens / d_seconds > 0  # tokens/s from the counters

        pid = sup.pid
        assert pid is not None
        result = sup.stop()
        assert result is not None
        assert result.returncode == 0 and result.stopped and result.reason == "stopped"
        assert result.was_ready and result.clean
        assert not pid_alive(pid)
        assert any("cleaning up before exit" in ln for ln in result.log_tail)


def test_server_runs_in_its_own_group_and_session(llama_bins, tiny_model):
    with supervised(llama_bins, tiny_spec(tiny_model)) as sup:
        sup.start()
        assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
        pid = sup.pid
        assert pid is not None
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid
        assert os.getpgid(pid) != os.getpgrp()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv0 = f.read().split(b"\0")[0]
        assert argv0.endswith(b"llama-server")  # the shim became llama-server, no shell


def test_rpc_devices_and_their_buffers_are_in_the_placement(llama_bins, tiny_model, tmp_path):
    with rpc_servers(llama_bins, 2, tmp_path) as rpcs:
        hosts = tuple(f"127.0.0.1:{r.port}" for r in rpcs)
        spec = tiny_spec(tiny_model, "--rpc", ",".join(hosts), "-ts", "3,1", "-ngl", "all")
        with supervised(llama_bins, spec) as sup:
            sup.start()
            assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
            devices = {d["name"]: d for d in sup.summary().ready_devices()}
            used = [d.name for d in sup.facts().devices if d.source == "using device"]
    # The devices as llama-server lists them, one per RPC server, in --rpc order.
    assert used == ["RPC0", "RPC1"]
    assert set(used) <= set(devices), devices
    first, second = devices["RPC0"], devices["RPC1"]
    for dev in (first, second):
        assert dev["model_mib"] > 0 and dev["kv_mib"] > 0
    # -ts 3,1: the first RPC device holds about three times the layers of the second.
    assert first["kv_mib"] > 2 * second["kv_mib"]
    assert first["model_mib"] > 1.5 * second["model_mib"]


def test_a_server_killed_mid_run_is_reported_with_code_and_log_tail(llama_bins, tiny_model):
    with supervised(llama_bins, tiny_spec(tiny_model)) as sup:
        sup.start()
        assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
        assert sup.pid is not None
        os.kill(sup.pid, signal.SIGKILL)
        result = sup.wait_exit(15.0)
    assert result is not None
    assert result.returncode == -signal.SIGKILL and result.signal == "SIGKILL"
    assert result.reason == "llama-server was killed by SIGKILL"
    assert not result.stopped and not result.clean and result.was_ready
    assert any("listening on" in ln for ln in result.log_tail)


def test_port_in_use_is_refused_before_anything_starts(llama_bins, tiny_model):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        spec = LaunchSpec.of(str(tiny_model), port=port)
        with pytest.raises(SupervisorError) as err:
            check_port_free(spec.host, port)
        assert str(err.value) == f"port {port} on 127.0.0.1 is already in use"
        with supervised(llama_bins, spec) as sup:
            with pytest.raises(SupervisorError, match="already in use"):
                sup.start()
            assert sup.pid is None


def test_server_side_failures_get_their_reason(llama_bins, tiny_model, tmp_path):
    missing = tmp_path / "nowhere.gguf"
    with supervised(llama_bins, tiny_spec(missing)) as sup:
        sup.start()
        assert not sup.wait_ready(READY_TIMEOUT_S)
        result = sup.wait_exit(15.0)
    assert result is not None and result.returncode == 1
    assert result.reason == f"model not found: {missing}"

    # lltui refuses a flag the pinned llama-server lacks before anything starts...
    spec = tiny_spec(tiny_model, "--no-such-flag")
    with pytest.raises(LaunchError, match="--no-such-flag"):
        build_command(spec, str(llama_bins.binaries["llama-server"]))
    # ...and when one reaches the server anyway, its refusal is the reason given
    spec = tiny_spec(tiny_model)
    built = build_command(spec, str(llama_bins.binaries["llama-server"]))
    command = replace(built, argv=(*built.argv, "--no-such-flag"))
    sup = Supervisor(command, url=spec.url, host=spec.host, port=spec.port)
    try:
        sup.start()
        result = sup.wait_exit(15.0)
    finally:
        kill_group(sup.pid)
    assert result is not None and result.returncode == 1
    assert result.reason == "llama-server does not accept the flag --no-such-flag"


def test_a_model_that_does_not_fit_says_so(llama_bins, tiny_model):
    # 40 M cells of KV cache: some 78 GB, more than this machine will hand out.
    spec = LaunchSpec.of(str(tiny_model), ["-c", "40000000", "-t", "1"], port=free_port())
    with supervised(llama_bins, spec) as sup:
        sup.start()
        assert not sup.wait_ready(120.0)
        result = sup.wait_exit(30.0)
    assert result is not None and result.returncode == 1 and not result.was_ready
    assert result.reason.startswith("the model does not fit in memory: ")


def test_the_key_goes_by_environment_and_never_into_the_log(llama_bins, tiny_model, tmp_path):
    spec = tiny_spec(tiny_model, api_key=KEY)
    with supervised(llama_bins, spec) as sup:
        sup.start()
        assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
        pid = sup.pid
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            assert KEY.encode() not in f.read()
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert f"LLAMA_API_KEY={KEY}".encode() in f.read().split(b"\0")
        with httpx.Client(base_url=spec.url, timeout=10.0, trust_env=False) as client:
            assert client.get("/v1/models").status_code == 401
            auth = {"Authorization": f"Bearer {KEY}"}
            assert client.get("/v1/models", headers=auth).status_code == 200

    # A log line carrying the key (here: in the model path) is scrubbed before it is kept.
    leaky = tmp_path / f"{KEY}.gguf"
    with supervised(llama_bins, tiny_spec(leaky, api_key=KEY)) as sup:
        sup.start()
        result = sup.wait_exit(15.0)
        lines = sup.log_tail(10_000)
    assert result is not None
    assert any("***" in ln for ln in lines)
    assert not any(KEY in ln for ln in lines)
    assert KEY not in result.reason and result.reason.startswith("model not found: ")


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Big enough that generating 2000 tokens on a CPU takes seconds, not milliseconds."""
    path = tmp_path_factory.mktemp("slow") / "slow-llama.gguf"
    return write_tiny_llama(path, layers=16, embd=512, ff=1536, heads=8, heads_kv=4, ctx=4096)


def test_stop_escalates_when_an_open_stream_holds_shutdown(llama_bins, slow_model):
    # one thread and a long context: generating until the context is full takes many
    # seconds, far past the 1 s grace, however fast the machine
    spec = LaunchSpec.of(str(slow_model), ["-c", "32768", "-np", "1", "-t", "1"], port=free_port())
    with supervised(llama_bins, spec) as sup:
        sup.start()
        assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
        with httpx.Client(base_url=spec.url, timeout=60.0, trust_env=False) as client:
            body = {
                "prompt": "the gpu",
                "n_predict": -1,  # until the context is full
                "ignore_eos": True,
                "stream": True,
                "seed": 3,
            }
            with client.stream("POST", "/completion", json=body) as resp:
                chunks = resp.iter_lines()
                for _ in range(5):  # the stream is flowing
                    next(chunks)
                # llama-server may wait for its SSE ping (30 s) before a clean exit, or not:
                # either way stop() returns within its bounds with the server gone
                result = sup.stop(grace_s=1.0, second_grace_s=10.0)
    assert result is not None and result.stopped
    if result.returncode == 0:
        assert result.reason == "stopped"
    else:
        assert result.returncode == 1
        assert result.reason.startswith("stopped (still busy after the first stop signal")


def test_stop_sends_a_second_signal_then_kills_a_server_that_holds_on(tmp_path):
    """A process that ignores SIGTERM: stop() escalates to a second signal, then SIGKILL."""
    import sys

    from lltui.core.cmdline.launch_spec import LaunchCommand

    script = tmp_path / "stubborn.py"
    script.write_text(
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('not yet', flush=True))\n"
        "print('main: server is listening on http://127.0.0.1:1', flush=True)\n"
        "while True:\n    time.sleep(0.1)\n"
    )
    command = LaunchCommand(argv=(sys.executable, str(script)))
    sup = Supervisor(command, url=None, check_port=False)
    try:
        sup.start()
        # its SIGTERM handler is in place once it has printed its line
        deadline = time.monotonic() + 10
        while not any("listening" in line for line in sup.log_tail(10)):
            assert time.monotonic() < deadline, "the script did not start"
            time.sleep(0.02)
        started = time.monotonic()
        result = sup.stop(grace_s=0.5, second_grace_s=0.5)
        took = time.monotonic() - started
        assert result is not None and result.stopped
        assert result.returncode == -signal.SIGKILL
        assert sum("not yet" in line for line in sup.log_tail(100)) == 2  # two SIGTERMs
        assert took < 10
    finally:
        kill_group(sup.pid)


def test_a_hurried_stop_still_records_the_exit(llama_bins, tiny_model):
    """A second signal cuts every wait of a stop short (timeout -s INT signals lltui and
    then its group): the server is killed, and its exit is still recorded, not lost as
    "did not exit" (the wait after SIGKILL was cut short too)."""
    with supervised(llama_bins, tiny_spec(tiny_model)) as sup:
        sup.start()
        assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
        pid = sup.pid
        sup.hurry()  # as a second Ctrl-C would, before the stop begins
        result = sup.stop()
        assert result is not None and result.stopped
        assert pid is not None and not pid_alive(pid)


def test_keep_running_leaves_the_server_and_its_log(llama_bins, tiny_model, tmp_path):
    log = tmp_path / "server.log"
    log.write_text("a line from an earlier run\n")
    spec = tiny_spec(tiny_model)
    server = llama_bins.binaries["llama-server"]
    command = build_command(spec, str(server), binary_flags(probe(server)))
    with pytest.raises(ValueError, match="log_file"):
        Supervisor(command, url=spec.url, keep_running=True)
    sup = Supervisor(command, url=spec.url, port=spec.port, keep_running=True, log_file=log)
    try:
        sup.start()
        assert sup.wait_ready(READY_TIMEOUT_S), sup.log_tail()
        assert not any("earlier run" in ln for ln in sup.log_tail(10_000))
        assert sup.summary().ready_devices()[0]["kv_mib"] == pytest.approx(1.0)
        sup.detach()
        pid = sup.pid
        assert pid is not None
        # detached, it keeps serving: it answers /health, then is still there
        with httpx.Client(timeout=5) as client:
            assert client.get(f"{spec.url}/health").status_code == 200
        assert pid_alive(pid)
        assert "listening on" in log.read_text()
    finally:
        kill_group(sup.pid)

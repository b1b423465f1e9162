"""``lltui launch``: the dry run, bad input, and the foreground supervisor run as a real
subprocess that is stopped or killed by SIGINT, SIGTERM, SIGHUP and SIGKILL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import gguf_factory as gf
from support.launch_proc import launched, read_event
from support.llama_fixture import llama_bins, rpc_servers, tiny_model

from lltui.cli import main
from lltui.core.stop_signals import SIGNAL_BURST_S

__all__ = ["llama_bins", "tiny_model"]  # session fixtures used by name

pytestmark = pytest.mark.slow
KEY = "sk-cli-5be07d"
GONE_WITHIN_S = 15.0
READY_TIMEOUT_S = 90.0
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def server_env(llama_bins, monkeypatch) -> dict[str, str]:
    """This process and its children use the test build of llama-server, and no stray key."""
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    monkeypatch.delenv("GGML_CUDA_P2P", raising=False)
    return dict(os.environ)


@pytest.fixture
def servers() -> Iterator[list[int]]:
    """Pids of llama-servers a test saw; their groups are killed when it ends, whatever happened."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie waiting to be reaped counts as gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid: int, seconds: float = GONE_WITHIN_S) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


# --- dry run ----------------------------------------------------------------------------


def test_dry_run_json_is_the_exact_command(server_env, tiny_model, capsys):
    server = server_env["LLTUI_LLAMA_SERVER"]
    rc = main(
        ["launch", str(tiny_model), "-c", "512", "-lm", "none", "--port", "18555", "--jinja",
         "--dry-run", "--json"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert len(out.splitlines()) == 1  # JSON lines, as --json says (it was one indented object)
    data = json.loads(out)
    assert data["argv"] == [
        server, "-lv", "4", "-m", str(tiny_model), "--host", "127.0.0.1", "--port", "18555",
        "--metrics", "-c", "512", "-lm", "none", "--jinja",
    ]  # fmt: skip
    assert data["env"] == {}  # CUDA_DEVICE_ORDER is the user's: the plan numbers by it too
    assert set(data["env_unset"]) == {"LLAMA_API_KEY"}  # an exported GGML_CUDA_P2P stays
    assert data["url"] == "http://127.0.0.1:18555"
    assert data["binary"]["flags_checked"] is True


def test_the_model_may_follow_flags_as_fit_takes_it(server_env, tiny_model, capsys):
    """launch -c 512 MODEL said 'no model given' where fit -c 512 MODEL plans MODEL."""
    assert main(["launch", "-c", "512", str(tiny_model), "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("-m") + 1] == str(tiny_model) and "512" in argv


def test_a_dry_run_open_to_the_network_warns_as_the_real_run_does(server_env, tiny_model, capsys):
    assert main(["launch", str(tiny_model), "--host", "0.0.0.0", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "warning: listening on 0.0.0.0 with no API key" in err
    assert main(["launch", str(tiny_model), "--dry-run"]) == 0
    assert "no API key" not in capsys.readouterr().err


def test_an_rpc_server_beyond_loopback_is_warned_of(
    server_env, tiny_model, tmp_path, capsys, monkeypatch
):
    """launch --rpc 10.0.0.5:50052 said nothing of RPC's missing authentication (fit did):
    fit's note went into the plan check, whose notes a launch that fits never shows."""
    from lltui.sources.llama import rpc_probe

    def refused(endpoints, *_a, **_k):  # no network in a test: every server is down
        return [rpc_probe.RpcProbeError(f"rpc-server {ep}: cannot connect") for ep in endpoints]

    monkeypatch.setattr(rpc_probe, "probe_all", refused)
    far = "no authentication and no encryption"
    assert main(["launch", str(tiny_model), "--rpc", "10.0.0.5:50052", "--dry-run"]) == 0
    assert f"warning: --rpc 10.0.0.5:50052: llama.cpp RPC has {far}" in capsys.readouterr().err
    (tmp_path / "b.gguf").write_bytes(tiny_model.read_bytes())
    two = [str(tiny_model), "-c", "512", str(tmp_path / "b.gguf")]
    assert main(["launch", "--rpc", "10.0.0.5:50052", *two, "--dry-run"]) == 0  # a router
    assert capsys.readouterr().err.count(far) == 1
    assert main(["launch", str(tiny_model), "--rpc", "127.0.0.1:50052", "--dry-run"]) == 0
    assert main(["launch", str(tiny_model), "--rpc", "localhost:50052", "--dry-run"]) == 0
    assert far not in capsys.readouterr().err


def test_a_later_part_of_a_split_model_is_launched_from_its_first(server_env, tmp_path, capsys):
    """llama-server refuses any part but the first ("illegal split file idx"): part 2 was
    passed as given."""
    parts = gf.write_model(tmp_path / "s.gguf", gf.llama_spec(), "Q8_0", split_max_tensors=20)
    assert len(parts) >= 2
    assert main(["launch", str(parts[1]), "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("-m") + 1] == str(parts[0])


def test_the_documented_host_option_is_not_taken_for_an_abbreviation(
    server_env, tiny_model, capsys
):
    # --host is launch's (llama-server's) own, not an abbreviation of lltui's --hosts
    rc = main(["launch", str(tiny_model), "--host", "127.0.0.1", "--dry-run", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    argv = json.loads(out)["argv"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv.count("--host") == 1
    assert main(["--host", "x", "gpus"]) == 2  # and the top level takes none either
    assert "--host" in capsys.readouterr().err


def test_dry_run_text_masks_the_key(server_env, tiny_model, capsys):
    rc = main(["launch", str(tiny_model), "--api-key", KEY, "--port", "18556", "--dry-run"])
    captured = capsys.readouterr()
    assert rc == 0
    assert KEY not in captured.out and KEY not in captured.err
    lines = captured.out.splitlines()
    assert "env:  LLAMA_API_KEY='***'" in lines
    assert lines[0].startswith("argv: ") and "--api-key" not in lines[0]
    assert "shows in `ps`" in captured.err  # a key typed on the command line is visible there


def test_dry_run_of_a_saved_profile_with_overrides(server_env, tiny_model, capsys, tmp_path):
    key_file = tmp_path / "keys"
    key_file.write_text(f"# a comment\n{KEY}\n")
    saving = ["launch", str(tiny_model), "-c", "1024", "-np", "2"]
    saving += ["--api-key-file", str(key_file), "--save-profile", "small", "--dry-run", "--json"]
    assert main(saving) == 0
    capsys.readouterr()
    assert main(["launch", "--profile", "small", "-c", "256", "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("-c") + 1] == "256"  # the command line wins over the profile
    assert argv[argv.index("-np") + 1] == "2"
    assert argv[argv.index("--api-key-file") + 1] == str(key_file)
    assert KEY not in " ".join(argv)


# --- bad input: one line, no traceback ------------------------------------------------------


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


def test_missing_model(server_env, tmp_path, capsys):
    assert main(["launch", str(tmp_path / "none.gguf"), "--dry-run"]) == 2
    assert one_line_error(capsys) == f"lltui: launch: model not found: {tmp_path / 'none.gguf'}"


def test_a_flag_the_binary_lacks(server_env, tiny_model, capsys):
    assert main(["launch", str(tiny_model), "--no-such-flag"]) == 2
    err = one_line_error(capsys)
    assert err.endswith("has no --no-such-flag flag") and server_env["LLTUI_LLAMA_SERVER"] in err


def test_bad_values_and_usage(server_env, tiny_model, capsys):
    assert main(["launch", str(tiny_model), "-sm", "sideways"]) == 2
    assert "unknown split mode 'sideways'" in one_line_error(capsys)
    assert main(["launch", "-c", "512"]) == 2
    assert "no model given" in one_line_error(capsys)
    assert main(["launch", str(tiny_model), "--profile", "nope"]) == 2
    assert "no launch profile 'nope'" in one_line_error(capsys)


def test_port_in_use(server_env, tiny_model, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["launch", str(tiny_model), "--port", str(port)]) == 1
    assert one_line_error(capsys) == f"lltui: launch: port {port} on 127.0.0.1 is already in use"


def test_help_lists_the_options(capsys):
    assert main(["launch", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--dry-run", "--json", "--profile", "--save-profile", "--api-key-file"):
        assert option in out


# --- the foreground supervisor as a real process ----------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_signals_stop_the_server_cleanly(server_env, tiny_model, sig, servers):
    with launched(tiny_model, server_env) as proc:
        ready = read_event(proc)
        assert ready["event"] == "ready"
        server_pid = ready["pid"]
        servers.append(server_pid)
        assert pid_alive(server_pid)
        assert ready["url"].startswith("http://127.0.0.1:")
        assert ready["argv"][1:3] == ["-lv", "4"]
        assert [d["name"] for d in ready["devices"]] == ["CPU"]
        assert ready["devices"][0]["kv_mib"] == pytest.approx(1.0)
        proc.send_signal(sig)
        end = read_event(proc, GONE_WITHIN_S)
        assert proc.wait(timeout=GONE_WITHIN_S) == 0
    assert end["event"] == "exit" and end["code"] == 0 and end["reason"] == "stopped"
    assert any("cleaning up before exit" in ln for ln in end["log_tail"])
    assert wait_gone(server_pid)


def _pending(pid: int) -> int:
    """The signals sent to ``pid``'s process that wait for it (a stopped process's)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        return next(int(ln.split()[1], 16) for ln in f if ln.startswith("ShdPnd:"))


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_second_signal_that_cuts_the_stop_short_says_so(
    server_env, tiny_model, sig, code, servers
):
    """A second signal while the server shuts down kills it at once: that was said as
    'killed after it did not exit in time' and lltui exited 0 (``timeout`` sends its signal
    twice); it says what ended it and exits as the first signal says (130, 143)."""
    with launched(tiny_model, server_env) as proc:
        server_pid = read_event(proc)["pid"]
        servers.append(server_pid)
        os.kill(server_pid, signal.SIGSTOP)  # a server slow to stop: lltui's SIGTERM waits
        proc.send_signal(sig)
        first = time.monotonic()
        deadline = first + GONE_WITHIN_S
        while not _pending(server_pid) & (1 << (signal.SIGTERM - 1)):
            assert time.monotonic() < deadline, "lltui sent no SIGTERM"
            time.sleep(0.02)
        while time.monotonic() - first < SIGNAL_BURST_S:  # (sooner is the same ask)
            time.sleep(0.02)
        proc.send_signal(sig)  # the second: no more waiting
        end = read_event(proc, GONE_WITHIN_S)
        assert proc.wait(timeout=GONE_WITHIN_S) == code
    assert end["event"] == "exit" and end["code"] == -9
    assert end["reason"] == "stopped at once: a second signal to lltui cut its shutdown short"
    assert wait_gone(server_pid)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_the_same_signal_twice_at_once_is_one_stop(
    server_env, tiny_model, sig, monkeypatch, capsys
):
    """``timeout 8 lltui launch`` sends SIGTERM to lltui, then to its whole group: the copy
    that came as lltui began to stop the server was taken as a second signal and the server
    was killed (-9, 'a second signal to lltui cut its shutdown short'). A burst of one
    signal is one ask; the same signal again a moment later still cuts the stop short (the
    test above)."""
    from lltui.commands.launch_output import foreground
    from lltui.services.launch.request import LaunchRequest
    from lltui.services.launch.session import LaunchSession

    words = (str(tiny_model), "-t", "1", "--port", "0", "--no-warmup")
    with LaunchSession(LaunchRequest(words=words)) as session:
        session.prepare()
        stop = session.stop

        def stop_in_a_burst() -> object:
            os.kill(os.getpid(), sig)  # the group's copy, as lltui begins to stop
            return stop()

        monkeypatch.setattr(session, "stop", stop_in_a_burst)
        asked: list[int] = []

        def printer(st: object) -> None:
            if getattr(st, "ready_at", None) is not None and not asked:
                asked.append(sig)
                os.kill(os.getpid(), sig)

        code = foreground(session, printer, as_json=True)
    end = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert asked and end["event"] == "exit"
    assert (end["code"], end["reason"], code) == (0, "stopped", 0)


def test_sigkill_of_lltui_takes_the_server_with_it(server_env, tiny_model, servers):
    with launched(tiny_model, server_env) as proc:
        server_pid = read_event(proc)["pid"]
        servers.append(server_pid)
        proc.kill()
        proc.wait(timeout=GONE_WITHIN_S)
        assert wait_gone(server_pid), "llama-server outlived a SIGKILLed lltui"


def test_keep_running_returns_once_ready_and_leaves_the_server(
    server_env, tiny_model, tmp_path, servers
):
    env = {**server_env, "XDG_STATE_HOME": str(tmp_path / "state")}
    with launched(tiny_model, env, "--keep-running") as proc:
        ready = read_event(proc)
        server_pid = ready["pid"]
        servers.append(server_pid)
        # lltui gives the terminal back by itself, saying how to stop the server
        detached = read_event(proc)
        assert proc.wait(timeout=GONE_WITHIN_S) == 0
        assert detached["event"] == "detached" and detached["pid"] == server_pid
        assert detached["stop"] == f"kill {server_pid}"
        # with lltui gone, the server still answers (a death signal would have ended it)
        with httpx.Client(timeout=5) as client:
            assert client.get(f"{ready['url']}/health").status_code == 200
        assert pid_alive(server_pid)
    logs = list((tmp_path / "state" / "lltui").glob("llama-server-*.log"))
    assert len(logs) == 1 and "listening on" in logs[0].read_text()


def _child_pids(pid: int) -> list[int]:
    """``pid``'s children, whichever of its threads started them."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            out += [int(p) for p in (task / "children").read_text().split()]
    return out


def test_ctrl_c_while_a_server_meant_to_keep_running_loads_stops_it(server_env, tmp_path, servers):
    from support import gguf_factory as gf

    # an 8B shape whose weights are a hole in a sparse file: its warm-up takes seconds
    model = gf.write_sparse(tmp_path / "big-F16.gguf", gf.llama_8b_spec(), "F16")
    env = {**server_env, "XDG_STATE_HOME": str(tmp_path / "state")}
    # (--force: whether the host could hold 15 GiB of weights does not matter to a hole)
    with launched(model, env, "--keep-running", "--force", as_json=False) as proc:
        assert proc.stderr is not None
        said = [proc.stderr.readline()]  # a warning (not enough host memory), the first phase
        while "loading" not in said[-1] and len(said) < 3:
            said.append(proc.stderr.readline())
        assert "loading" in said[-1], said  # started, not ready
        server_pids = _child_pids(proc.pid)
        servers.extend(server_pids)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=GONE_WITHIN_S)
    assert "left running" not in out and "stopped by SIGTERM (still loading" in out
    assert server_pids and all(wait_gone(pid) for pid in server_pids)


def test_a_server_killed_mid_run_is_reported(server_env, tiny_model, servers):
    with launched(tiny_model, server_env) as proc:
        server_pid = read_event(proc)["pid"]
        servers.append(server_pid)
        os.kill(server_pid, signal.SIGKILL)
        end = read_event(proc, GONE_WITHIN_S)
        assert proc.wait(timeout=GONE_WITHIN_S) == 1
    assert end["event"] == "exit" and end["code"] == -9 and end["signal"] == "SIGKILL"
    assert end["reason"] == "llama-server was killed by SIGKILL"
    assert end["log_tail"] and any("listening on" in ln for ln in end["log_tail"])


def test_text_mode_ready_line_and_a_model_that_does_not_fit(server_env, tiny_model):
    with launched(tiny_model, server_env, as_json=False) as proc:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("llama-server ready at http://127.0.0.1:")
        assert "CPU: model " in line and "KV 1.00 MiB" in line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=GONE_WITHIN_S) == 0
        assert "stopped (exit code 0)" in proc.stdout.read()

    # Too large a context: lltui's plan says so before anything starts, with what fits
    with launched(tiny_model, server_env, "-c", "999999999", as_json=False) as proc:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("lltui: launch: does not fit: the host needs ")
    assert "try -c " in lines[0] and "--force" in lines[0]

    # forced: llama-server itself tries, and its own refusal is the one line of the exit
    with launched(tiny_model, server_env, "-c", "40000000", "--force", as_json=False) as proc:
        _, err = proc.communicate(timeout=180)
    assert proc.returncode == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("lltui: warning: forced: does not fit")
    # how loading went, then the one line of why it ended
    assert "lltui: loading the model's weights" in lines
    assert lines[-1].startswith("lltui: llama-server exited (code 1): the model does not fit")


def test_the_plan_refuses_what_fit_refuses_and_a_dry_run_says_it(server_env, tiny_model, capsys):
    # a file the command names that is not there: refused as fit refuses it, dry run or not
    for extra in ([], ["--dry-run"]):
        rc = main(["launch", str(tiny_model), "-md", "/nonexistent/draft.gguf", *extra])
        err = capsys.readouterr().err
        assert rc == 2 and "-md" in err and "Traceback" not in err, err
    # what does not fit: a dry run says so and still prints the command
    assert main(["launch", str(tiny_model), "-c", "999999999", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "warning: does not fit" in captured.err and captured.out.startswith("argv: ")


def test_keys_from_the_key_file_never_reach_the_output(server_env, tiny_model, tmp_path, servers):
    key_file = tmp_path / "keys"
    key_file.write_text(f"{KEY}\n")
    leaky = tmp_path / f"model-{KEY}.gguf"  # a key that also turns up in a path and the log
    leaky.write_bytes(tiny_model.read_bytes())
    with launched(leaky, server_env, "--api-key-file", str(key_file)) as proc:
        ready = read_event(proc)
        servers.append(ready["pid"])
        assert str(key_file) in ready["argv"]
        assert ready["argv"][ready["argv"].index("-m") + 1] == str(tmp_path / "model-***.gguf")
        proc.send_signal(signal.SIGTERM)
        end = read_event(proc, GONE_WITHIN_S)
        out, err = proc.communicate(timeout=GONE_WITHIN_S)
    assert end["event"] == "exit" and end["code"] == 0
    assert KEY not in json.dumps([ready, end]) + out + err


def test_ready_line_shows_both_rpc_devices_and_their_buffers(
    server_env, llama_bins, tiny_model, tmp_path, servers
):
    with rpc_servers(llama_bins, 2, tmp_path) as rpcs:
        hosts = ",".join(f"127.0.0.1:{r.port}" for r in rpcs)
        with launched(tiny_model, server_env, "--rpc", hosts, "-ts", "3,1", "-ngl", "all") as proc:
            ready = read_event(proc)
            servers.append(ready["pid"])
            proc.send_signal(signal.SIGINT)
            assert read_event(proc, GONE_WITHIN_S)["code"] == 0
    assert ready["argv"][ready["argv"].index("--rpc") + 1] == hosts
    devices = {d["name"]: d for d in ready["devices"]}
    assert {"RPC0", "RPC1"} <= set(devices), devices
    rpc0, rpc1 = devices["RPC0"], devices["RPC1"]
    assert min(rpc0["model_mib"], rpc1["model_mib"], rpc0["kv_mib"], rpc1["kv_mib"]) > 0
    assert rpc0["kv_mib"] > 2 * rpc1["kv_mib"]  # -ts 3,1


def test_an_rpc_server_that_does_not_answer_is_named(server_env, tiny_model, capsys):
    # a port nothing listens on: llama-server aborts in ggml-rpc before it loads anything
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        assert main(["launch", str(tiny_model), "-c", "512", "--rpc", f"127.0.0.1:{port}"]) == 1
    assert one_line_error(capsys).endswith(
        f"no rpc-server answered at 127.0.0.1:{port} (start rpc-server there, or leave it out "
        "of --rpc)"
    )


def test_an_rpc_server_that_takes_the_connection_and_says_nothing_is_refused(
    server_env, tiny_model, capsys
):
    """A port that is no rpc-server, or one busy with another llama-server (it serves one
    client at a time): llama-server waited on it for ever, and launch said 'still loading'
    every 10 s; fit's probe had already found it silent."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)  # the kernel takes the connection; nothing ever answers
        port = held.getsockname()[1]
        words = ["launch", str(tiny_model), "-c", "512", "--rpc", f"127.0.0.1:{port}"]
        assert main(words) == 1
        assert one_line_error(capsys).endswith(
            f"rpc-server 127.0.0.1:{port}: no answer within 3 s (it serves one client at a "
            "time: is a llama-server using it?): llama-server would wait on it without end; "
            "add --force to start it anyway"
        )
        assert main([*words, "--dry-run"]) == 0
        assert "warning: rpc-server" in capsys.readouterr().err


def test_a_saved_profile_holds_what_was_given_not_the_environment(
    server_env, tiny_model, capsys, monkeypatch
):
    from lltui.sources.llama.profiles import load_profile, spec_to_dict

    monkeypatch.setenv("LLAMA_API_KEY", "from-the-environment-123")
    argv = ["launch", str(tiny_model), "--port", "0", "--save-profile", "p0", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "from-the-environment-123" not in out.out + out.err
    data = spec_to_dict(load_profile("p0"))
    assert data.get("api_key") is None  # a key lltui was never given is not written down
    assert data.get("port") == 0  # "pick a free port" stays that, not one random port


def test_a_server_stopped_by_someone_elses_sigterm_is_not_a_clean_exit(
    server_env, tiny_model, servers
):
    with launched(tiny_model, server_env) as proc:
        server_pid = read_event(proc)["pid"]
        servers.append(server_pid)
        os.kill(server_pid, signal.SIGTERM)  # not lltui's doing
        end = read_event(proc, GONE_WITHIN_S)
        assert proc.wait(timeout=GONE_WITHIN_S) == 1
    assert end["event"] == "exit" and end["code"] == 0
    assert end["reason"].startswith("stopped by a signal from outside lltui")

    with launched(tiny_model, server_env, as_json=False) as proc:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("llama-server ready at")
        server_pid = int(ready.split("(pid ", 1)[1].split(")", 1)[0])
        servers.append(server_pid)
        os.kill(server_pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=GONE_WITHIN_S)
    assert proc.returncode == 1
    assert "llama-server llama-server" not in out + err
    # the load's progress lines may come first, when loading takes a moment
    said = [line for line in err.strip().splitlines() if "exited" in line]
    assert said and said[0].startswith(
        "lltui: llama-server exited (code 0): stopped by a signal from outside"
    )


def test_a_profile_saved_here_starts_from_elsewhere(
    server_env, tiny_model, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tiny_model.parent)
    saving = ["launch", tiny_model.name, "-c", "512", "--save-profile", "here", "--dry-run"]
    assert main(saving) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert main(["launch", "--profile", "here", "--dry-run", "--json"]) == 0
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert argv[argv.index("-m") + 1] == str(tiny_model.resolve())


def test_a_profile_whose_model_is_gone_is_one_line(server_env, tiny_model, tmp_path, capsys):
    model = tmp_path / "soon-gone.gguf"
    model.write_bytes(tiny_model.read_bytes())
    assert main(["launch", str(model), "--save-profile", "gone", "--dry-run"]) == 0
    capsys.readouterr()
    model.unlink()
    assert main(["launch", "--profile", "gone", "--dry-run"]) == 2
    err = one_line_error(capsys)
    assert "profile 'gone'" in err and str(model) in err


def test_a_crash_log_tail_shows_its_tabs_as_spaces(capsys):
    """gdb's backtrace lines read `360\\u0009../csu/libc-start.c` under a crash."""
    from lltui.commands.launch_output import report_exit
    from lltui.sources.llama.supervisor import ServerExit

    tail = ("#3  0x7f in __libc_start_main ()", "360\t../csu/libc-start.c: No such file")
    crashed = ServerExit(-11, "llama-server exited with code -11", tail, False, True)
    assert report_exit(crashed, as_json=False) == 1
    err = capsys.readouterr().err
    assert "  | 360 ../csu/libc-start.c: No such file" in err and "\\u0009" not in err


def test_host_free_sets_the_host_memory_the_check_assumes(server_env, tiny_model, capsys):
    """As fit's --host-free: a dry run and the real run judge the same host, not whatever
    was free at each moment (launch had no --host-free)."""
    free = ["--host-free", "1MiB"]
    assert main(["launch", str(tiny_model), *free, "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "warning: does not fit: the host needs " in err and "of 1.0 MiB free" in err, err
    assert main(["launch", str(tiny_model), *free]) == 1  # refused before anything starts
    err = capsys.readouterr().err.strip()
    assert err.startswith("lltui: launch: does not fit: the host needs ") and "1.0 MiB" in err
    assert main(["launch", str(tiny_model), "--host-free", "64GiB", "--dry-run"]) == 0
    assert "does not fit" not in capsys.readouterr().err
    assert main(["launch", str(tiny_model), "--host-free", "lots", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == "lltui: launch: --host-free: not a size: 'lots'"

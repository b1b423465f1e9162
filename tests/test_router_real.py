"""llama-server's router mode, real: the pinned CPU build on 127.0.0.1, tiny generated models,
loopback rpc-servers as devices. The plan must match what each model's server allocates (its
own log's buffer lines), a load the plan refuses is one line, bad input leaves the other
models serving, and no process of the router's outlives lltui, however it stops."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import httpx
import pytest
from support.llama_fixture import llama_bins, rpc_servers
from support.router_helpers import (
    all_gone,
    events_until,
    group_members,
    launched_router,
    models_state,
    read_event,
    wait_for,
    write_models,
)
from test_fit_real import context_mismatches, mismatches

from lltui.core.cmdline.args import parse_llama_args
from lltui.core.llama.served_model import served_model
from lltui.services.launch.router import RouterRefused, RouterSession
from lltui.services.launch.router_prep import RouterRequest
from lltui.services.plan import PlanEntry

__all__ = ["llama_bins"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models(tmp_path_factory.mktemp("router-models"))


@pytest.fixture
def server_env(llama_bins, monkeypatch, tmp_path) -> dict[str, str]:
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # the preset goes here
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    return dict(os.environ)


def entry(path: Path, *flags: str, name: str | None = None) -> PlanEntry:
    return PlanEntry(str(path), parse_llama_args(["-t", "1", "--no-warmup", *flags]), name=name)


def wait_states(session: RouterSession, want: dict[str, str]) -> dict[str, str]:
    def check() -> dict[str, str] | None:
        now = {m.name: m.state for m in session.models()}
        return now if all(now.get(k) == v for k, v in want.items()) else None

    return wait_for(check, what=f"router states {want}")  # type: ignore[return-value]


def check_against_log(session: RouterSession, name: str) -> list[str]:
    """The plan's buffers for ``name`` against its server's own buffer lines."""
    planned = session.prepared.report.plan.model(name)
    inst = wait_for(
        lambda: (i := session.log().latest(name)) is not None and i.log.ready and i,
        what=f"{name}'s ready line",
    )
    return mismatches(planned.result, inst.log) + context_mismatches(planned.result, inst.log)


# no prompt cache: the policy counts 8 GiB of it per server, more than a small host has for three
NO_CACHE = ("--cache-ram", "0")


def test_the_plan_matches_what_each_load_allocates(models, server_env, llama_bins, tmp_path):
    with rpc_servers(llama_bins, 2, tmp_path) as rpcs:
        ep1, ep2 = (f"127.0.0.1:{r.port}" for r in rpcs)
        request = RouterRequest(
            entries=(
                entry(models["alpha"], "-c", "512", *NO_CACHE),  # on the host
                entry(models["beta"], "-c", "1024", "-np", "1", "--rpc", ep1, *NO_CACHE),
                entry(models["gamma"], "--rpc", ep2, *NO_CACHE),  # no -c: the plan pins one
                entry(
                    models["beta"], "-c", "768", "--rpc", f"{ep1},{ep2}", *NO_CACHE, name="split"
                ),
            ),
            words=("--port", "0"),
            gpus=f"rpc:{ep1}:cpu,rpc:{ep2}:cpu",  # the servers run the CPU backend
        )
        with RouterSession(request) as session:
            prepared = session.prepare()
            plan = prepared.report.plan
            assert plan.conflicts == (("beta", "split", ep1), ("gamma", "split", ep2))
            split = plan.model("split")
            assert "-ts" in split.pinned and plan.model("gamma").pinned[0] == "-c"
            session.start()
            assert session.supervisor and session.supervisor.wait_ready(60)
            for name in ("alpha", "beta", "gamma"):
                session.load(name)
            wait_states(session, {"alpha": "loaded", "beta": "loaded", "gamma": "loaded"})
            for name in ("alpha", "beta", "gamma"):
                assert check_against_log(session, name) == [], name
            # the model sharing both RPC servers is refused, in one line naming what to unload
            with pytest.raises(RouterRefused) as refused:
                session.load("split")
            line = str(refused.value)
            assert "\n" not in line
            assert line.startswith("split does not fit with alpha, beta, gamma loaded: ")
            assert line.endswith("unload beta and gamma first")
            assert models_state(session.url)["split"] == "unloaded"  # nothing was asked
            session.unload("beta")
            session.unload("gamma")
            wait_states(session, {"beta": "unloaded", "gamma": "unloaded"})
            # an unloaded model holds nothing: its last log's placement is not shown as its
            wait_for(
                lambda: (
                    not [
                        r
                        for r in session.rows(session.models())
                        if r.name in ("beta", "gamma") and r.placement
                    ]
                ),
                what="no placement for unloaded models",
            )
            session.load("split")  # split over both servers with the pinned -ts
            wait_states(session, {"split": "loaded", "alpha": "loaded"})
            assert check_against_log(session, "split") == []
            inst = session.log().latest("split")
            assert inst is not None and "--tensor-split" in inst.args
            assert Path(prepared.preset_path).exists()
        # the preset it wrote goes with it (one was left a run, router-PORT.ini by the dozen)
        assert not Path(prepared.preset_path).exists()


def test_a_refused_load_and_a_load_through_the_api(models, server_env, llama_bins, tmp_path):
    with rpc_servers(llama_bins, 1, tmp_path) as rpcs:
        ep = f"127.0.0.1:{rpcs[0].port}"
        preset = tmp_path / "models.ini"
        preset.write_text(
            "version = 1\n[*]\nc = 512\nthreads = 1\nno-warmup = true\n\n"
            f"[one]\nmodel = {models['alpha']}\nrpc = {ep}\nload-on-startup = true\n\n"
            f"[two]\nmodel = {models['beta']}\nrpc = {ep}\n\n"
            f"[three]\nmodel = {models['gamma']}\n"
        )
        args = ("--models", str(preset), "--load", "two", "--gpus", f"rpc:{ep}:cpu")
        with launched_router(server_env, *args) as (proc, port, routers):
            ready = read_event(proc)
            assert ready["event"] == "ready" and ready["models"] == ["one", "two", "three"]
            routers.append(ready["pid"])
            got = events_until(proc, lambda e: e["event"] == "refused")
            refused = got[-1]["message"]
            # (the plan's line, as the dry run says it: one may still be loading then)
            assert refused == (
                f"two does not fit with one loaded: one holds the RPC server {ep}, which "
                "serves one llama-server at a time; unload one first"
            )
            # a load through the router's own API shows up as a model event
            url = f"http://127.0.0.1:{port}"
            httpx.post(f"{url}/models/load", json={"model": "three"}, timeout=10)
            loaded = events_until(
                proc, lambda e: e.get("name") == "three" and e["state"] == "loaded"
            )[-1]
            assert loaded["devices"] and loaded["devices"][0]["name"] == "CPU"
            assert models_state(url) == {"one": "loaded", "two": "unloaded", "three": "loaded"}
            proc.send_signal(signal.SIGINT)
            assert read_event(proc)["event"] == "exit"
            assert proc.wait(30) == 0


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"])
def test_no_process_outlives_lltui_however_it_stops(models, server_env, tmp_path, sig):
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    for name in ("alpha", "beta"):
        (models_dir / f"{name}.gguf").symlink_to(models[name])
    args = ("--models", str(models_dir), "-c", "512", "-t", "1", "--pin", "alpha")
    with launched_router(server_env, *args, "--load", "beta") as (proc, _port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        events_until(proc, lambda e: e.get("name") == "beta" and e["state"] == "loaded")
        members = group_members(ready["pid"])
        assert ready["pid"] in members and len(members) == 3  # the router and two servers
        os.kill(proc.pid, getattr(signal, sig))
        proc.wait(30)
        assert all_gone(members) == []


def test_bad_input_leaves_the_other_models_serving(models, server_env, tmp_path):
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    for name in ("alpha", "faulty"):
        (models_dir / f"{name}.gguf").symlink_to(models[name])
    (models_dir / "notes.txt").write_text("not a model")
    (models_dir / "broken.gguf").write_bytes(b"garbage, not GGUF")
    args = ("--models", str(models_dir), "-c", "512", "-t", "1", "--load", "faulty")
    with launched_router(server_env, *args, "--load", "alpha") as (proc, port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        assert ready["models"] == ["alpha", "faulty"]
        got = events_until(proc, lambda e: e.get("name") == "faulty" and e["state"] == "failed")
        assert "unknown tokenizer: 'no-such-tokenizer'" in got[-1]["problem"]
        wait_for(lambda: models_state(f"http://127.0.0.1:{port}").get("alpha") == "loaded")
        answer = httpx.post(
            f"http://127.0.0.1:{port}/completion",
            json={"model": "alpha", "prompt": "hello", "n_predict": 4},
            timeout=30,
        )
        assert answer.status_code == 200 and answer.json()["tokens_predicted"] > 0
        proc.send_signal(signal.SIGTERM)
        end = events_until(proc, lambda e: e["event"] == "exit")[-1]
        assert proc.wait(30) == 0
        err = proc.stderr.read() if proc.stderr else ""
    # stopped as asked: faulty's failed load in the router's log is faulty's, not the router's
    assert (end["code"], end["reason"]) == (0, "stopped")
    lines = [line for line in err.splitlines() if line.startswith("lltui: warning:")]
    assert lines == [
        f"lltui: warning: {models_dir}: 1 not a model: notes.txt",
        f"lltui: warning: broken left out: {models_dir}/broken.gguf: not a GGUF file "
        "(17 bytes, too small)",
    ]


def test_a_preset_with_an_unknown_key_leaves_that_model_out(models, server_env, tmp_path):
    preset = tmp_path / "models.ini"
    preset.write_text(
        f"[good]\nmodel = {models['alpha']}\nc = 512\nthreads = 1\n\n"
        f"[bad]\nmodel = {models['beta']}\nctx_size = 512\n"
    )
    with launched_router(server_env, "--models", str(preset), "--load", "good") as (
        proc,
        port,
        routers,
    ):
        ready = read_event(proc)
        routers.append(ready["pid"])
        assert ready["models"] == ["good"]
        events_until(proc, lambda e: e.get("name") == "good" and e["state"] == "loaded")
        # the router lltui started serves the model whose section it could read
        assert models_state(f"http://127.0.0.1:{port}") == {"good": "loaded"}
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        err = proc.stderr.read() if proc.stderr else ""
    assert err.strip() == (
        f"lltui: warning: {preset}:8: [bad] left out: llama-server has no option 'ctx_size'"
    )


def test_the_monitor_names_each_model_server(models, server_env):
    """The model servers' own argv (read from /proc as the monitor's host source reads it)
    names the model each serves; the router names itself."""
    import psutil

    request = RouterRequest(
        entries=(entry(models["alpha"], "-c", "512"), entry(models["gamma"], "-c", "512")),
        words=("--port", "0"),
    )
    with RouterSession(request) as session:
        session.prepare()
        session.start()
        assert session.supervisor and session.supervisor.wait_ready(60)
        session.load("alpha")
        session.load("gamma")
        wait_states(session, {"alpha": "loaded", "gamma": "loaded"})
        pids = group_members(session.pid or 0)
        named = {served_model(psutil.Process(p).cmdline()) for p in pids}
        assert named == {"router", "alpha", "gamma"}
        with contextlib.suppress(Exception):
            session.stop()
    assert all_gone(pids) == []


def test_a_router_with_a_key_is_locked_and_the_key_is_never_shown(models, server_env, tmp_path):
    key = "sk-router-7f3a"
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (models_dir / "alpha.gguf").symlink_to(models["alpha"])
    args = ("--models", str(models_dir), "-c", "512", "-t", "1", "--api-key-file", str(key_file))
    with launched_router(server_env, *args, "--load", "alpha") as (proc, port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        loaded = events_until(proc, lambda e: e.get("name") == "alpha")
        assert loaded[-1]["state"] in ("loading", "loaded")  # lltui's own requests carry it
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/models", timeout=5).status_code == 401
        headers = {"Authorization": f"Bearer {key}"}
        assert httpx.get(f"{url}/models", headers=headers, timeout=5).status_code == 200
        preset = Path(ready["preset"]).read_text()
        mode = Path(ready["preset"]).stat().st_mode & 0o777
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        out = (proc.stdout.read() if proc.stdout else "") + (
            proc.stderr.read() if proc.stderr else ""
        )
    assert key not in preset and key not in out and key not in json_dump(ready)
    assert oct(mode) == "0o600"
    assert not Path(ready["preset"]).exists()  # gone with the router


def json_dump(obj: object) -> str:
    import json

    return json.dumps(obj)

"""Models served on demand, real: ``lltui launch --models DIR`` with the pinned CPU build of
llama-server in router mode on 127.0.0.1, tiny generated models, and a simulated GPU budget
(``--gpus``) on which two of the three fit and three do not. Requests go to lltui's address;
lltui loads the model a request names, unloading what the eviction policy says must go."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path

import httpx
import pytest
from support.llama_fixture import llama_bins
from support.router_helpers import (
    all_gone,
    events_until,
    group_members,
    launched_router,
    models_state,
    read_event,
    write_models,
)

__all__ = ["llama_bins"]

pytestmark = pytest.mark.slow

# each tiny model takes about 1030 MiB on a simulated GPU (its buffers and the process's
# margin there): two fit in 2600 MiB, three do not; one fits in 1500 MiB
TWO_FIT = "2600MiB"
ONE_FITS = "1500MiB"
FLAGS = ("-c", "512", "-t", "1", "--no-warmup", "--cache-ram", "0")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ondemand")
    made = write_models(root / "all")
    folder = root / "models"
    folder.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (folder / f"{name}.gguf").symlink_to(made[name])
    return folder


@pytest.fixture(scope="module")
def with_faulty(models: Path) -> Path:
    """alpha and a model llama.cpp refuses to load (an unknown tokenizer)."""
    folder = models.parent / "with-faulty"
    folder.mkdir()
    (folder / "alpha.gguf").symlink_to(models / "alpha.gguf")
    (folder / "faulty.gguf").symlink_to(models.parent / "all" / "faulty.gguf")
    return folder


@pytest.fixture
def server_env(llama_bins, monkeypatch, tmp_path) -> dict[str, str]:
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    return dict(os.environ)


def chat(url: str, model: str, **extra: object) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(f"{url}/v1/chat/completions", json={**body, **extra}, timeout=120)


def loaded(router: str) -> set[str]:
    return {n for n, s in models_state(router).items() if s == "loaded"}


def test_requests_load_and_evict_by_the_plan(models, server_env):
    args = ("--models", str(models), *FLAGS, "--gpus", TWO_FIT)
    with launched_router(server_env, *args) as (proc, port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        url, router = ready["url"], ready["router_url"]
        assert url == f"http://127.0.0.1:{port}" and router != url
        # the router itself still refuses a model that is not loaded; lltui loads it
        assert chat(router, "alpha").status_code == 400
        answer = chat(url, "alpha")
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] is not None
        assert chat(url, "beta").status_code == 200
        assert loaded(router) == {"alpha", "beta"}
        # gamma needs room: alpha, used least recently, is the one that goes
        assert chat(url, "gamma").status_code == 200
        assert models_state(router) == {"alpha": "unloaded", "beta": "loaded", "gamma": "loaded"}
        # streaming passes through as it comes
        with httpx.stream(
            "POST",
            f"{url}/v1/chat/completions",
            json={
                "model": "beta",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8,
                "stream": True,
            },
            timeout=120,
        ) as streamed:
            assert streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("text/event-stream")
            lines = [line for line in streamed.iter_lines() if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]" and len(lines) >= 3
        first = json.loads(lines[0].removeprefix("data: "))
        assert first["object"] == "chat.completion.chunk" and first["model"] == "beta"
        # bad input: the API's own error, and the models keep serving
        unknown = chat(url, "nope")
        assert unknown.status_code == 404
        assert unknown.json() == {
            "error": {
                "message": "model 'nope' not found",
                "type": "invalid_request_error",
                "code": "model_not_found",
            }
        }
        bad = httpx.post(f"{url}/v1/chat/completions", content=b"{not json", timeout=10)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
        # a client that leaves mid-stream
        with httpx.stream(
            "POST",
            f"{url}/v1/completions",
            json={"model": "gamma", "prompt": "a", "max_tokens": 64, "stream": True},
            timeout=120,
        ) as left:
            next(left.iter_lines())
        assert chat(url, "gamma").status_code == 200
        assert chat(url, "beta").status_code == 200
        # a client's own load goes through the policy: gamma served before beta last
        loaded_by_api = httpx.post(f"{url}/models/load", json={"model": "alpha"}, timeout=120)
        assert loaded_by_api.json() == {"success": True}
        assert models_state(router) == {"alpha": "loaded", "beta": "loaded", "gamma": "unloaded"}
        # everything else passes through
        listed = httpx.get(f"{url}/v1/models", timeout=10).json()
        assert {m["id"] for m in listed["data"]} == {"alpha", "beta", "gamma"}
        proc.send_signal(signal.SIGTERM)
        assert events_until(proc, lambda e: e["event"] == "exit")[-1]["code"] == 0
        err = proc.stderr.read() if proc.stderr else ""
    # lltui said each unload it decided: only alpha, for gamma
    said = [line for line in err.splitlines() if "unloading" in line]
    assert said == [
        "lltui: unloading alpha to load gamma",
        "lltui: unloading gamma to load alpha",
    ]


def test_each_models_served_speed_is_held_against_its_own_plan(models, server_env):
    args = ("--models", str(models), *FLAGS, "--gpus", TWO_FIT)
    body = {"prompt": [1] + [100 + i for i in range(80)], "max_tokens": 24, "ignore_eos": True}
    with launched_router(server_env, *args) as (proc, _, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        seen: list[dict] = []
        for name in ("alpha", "beta"):
            answer = httpx.post(
                f"{ready['url']}/v1/completions", json={**body, "model": name}, timeout=120
            )
            assert answer.status_code == 200, answer.text
            seen += events_until(
                proc, lambda e, name=name: e["event"] == "speed" and e["model"] == name
            )
        proc.send_signal(signal.SIGTERM)
        events_until(proc, lambda e: e["event"] == "exit")
    speeds = [e for e in seen if e["event"] == "speed"]
    assert {e["model"] for e in speeds} == {"alpha", "beta"}
    assert all(e["predicted_tps"] > 0 and e["measured_tps"] > 0 for e in speeds)
    assert not any(e["kept"] for e in speeds)  # a router's requests calibrate nothing


def test_a_pinned_model_is_never_evicted(models, server_env):
    args = ("--models", str(models), *FLAGS, "--gpus", TWO_FIT, "--pin", "alpha")
    with launched_router(server_env, *args) as (proc, _port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        url, router = ready["url"], ready["router_url"]
        events_until(proc, lambda e: e.get("name") == "alpha" and e["state"] == "loaded")
        assert chat(url, "beta").status_code == 200
        assert chat(url, "alpha").status_code == 200  # beta now the least recently used
        # gamma: alpha is pinned, so beta goes although alpha was used before it
        assert chat(url, "beta").status_code == 200
        assert chat(url, "gamma").status_code == 200
        assert models_state(router) == {"alpha": "loaded", "beta": "unloaded", "gamma": "loaded"}


def test_two_models_that_cannot_be_resident_together_are_served_in_turn(models, server_env):
    args = ("--models", str(models), *FLAGS, "--gpus", ONE_FITS)
    with launched_router(server_env, *args) as (proc, _port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        url, router = ready["url"], ready["router_url"]
        answers: dict[str, list[int]] = {"alpha": [], "beta": []}

        def ask(name: str) -> None:
            for _ in range(2):
                answers[name].append(chat(url, name).status_code)

        threads = [threading.Thread(target=ask, args=(n,)) for n in ("alpha", "beta", "alpha")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        assert answers == {"alpha": [200] * 4, "beta": [200, 200]}
        states = models_state(router)
        assert sorted(states.values()) == ["loaded", "unloaded", "unloaded"]
        # a stream in flight ends whole before its model is unloaded for another
        first = next(n for n, s in states.items() if s == "loaded")
        other = "beta" if first == "alpha" else "alpha"
        body = {"model": first, "prompt": "a", "max_tokens": 200, "stream": True}
        got: list[int] = []
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as streamed:
            lines = streamed.iter_lines()
            assert next(lines).startswith("data: ")
            waiter = threading.Thread(target=lambda: got.append(chat(url, other).status_code))
            waiter.start()
            rest = [line for line in lines if line.startswith("data: ")]
        waiter.join(300)
        assert rest[-1] == "data: [DONE]" and got == [200]
        # no load failed: the router never saw two at once
        proc.send_signal(signal.SIGTERM)
        events = events_until(proc, lambda e: e["event"] == "exit")
        assert not [e for e in events if e.get("state") == "failed"]


def test_lltui_killed_leaves_no_process(models, server_env):
    args = ("--models", str(models), *FLAGS, "--gpus", TWO_FIT)
    with launched_router(server_env, *args) as (proc, _port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        assert chat(ready["url"], "alpha").status_code == 200
        members = group_members(ready["pid"])
        assert len(members) == 2  # the router and alpha's server
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert all_gone(members) == []


def test_a_model_that_fails_to_load_is_the_apis_error(with_faulty, server_env):
    args = ("--models", str(with_faulty), *FLAGS, "--gpus", TWO_FIT)
    with launched_router(server_env, *args) as (proc, _port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        url = ready["url"]
        assert chat(url, "alpha").status_code == 200
        failed = chat(url, "faulty")
        assert failed.status_code == 503
        assert failed.json()["error"] == {
            "message": "model 'faulty' failed to load (the router's log says why)",
            "type": "unavailable_error",
            "code": "load_failed",
        }
        assert chat(url, "alpha").status_code == 200


def test_a_locked_router_loads_nothing_for_a_client_without_the_key(models, server_env, tmp_path):
    key = "sk-ondemand-51c2"
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    args = ("--models", str(models), *FLAGS, "--gpus", TWO_FIT, "--api-key-file", str(key_file))
    with launched_router(server_env, *args) as (proc, _port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        url, router = ready["url"], ready["router_url"]
        refused = chat(url, "alpha")
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        headers = {"Authorization": f"Bearer {key}"}
        states = httpx.get(f"{router}/models", headers=headers, timeout=10).json()["data"]
        assert {m["id"]: m["status"]["value"] for m in states}["alpha"] == "unloaded"
        answer = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}],
                  "max_tokens": 2},
            headers=headers,
            timeout=120,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        out = (proc.stdout.read() if proc.stdout else "") + (
            proc.stderr.read() if proc.stderr else ""
        )
    assert key not in out


def test_stopping_lltui_mid_stream_leaves_no_process(models, server_env):
    args = ("--models", str(models), *FLAGS, "--gpus", TWO_FIT)
    with launched_router(server_env, *args) as (proc, _port, routers):
        ready = read_event(proc)
        routers.append(ready["pid"])
        body = {"model": "alpha", "prompt": "a", "max_tokens": 400, "stream": True}
        with httpx.stream(
            "POST", f"{ready['url']}/v1/completions", json=body, timeout=120
        ) as streamed:
            lines = streamed.iter_lines()
            assert next(lines).startswith("data: ")
            members = group_members(ready["pid"])
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(httpx.HTTPError):
                for _line in lines:
                    pass
        assert proc.wait(30) == 0
        assert all_gone(members) == []


@pytest.mark.parametrize("serve", [[], ["--no-on-demand"]])
def test_a_taken_port_is_one_line_before_anything_is_written_or_started(
    models, server_env, capsys, serve
):
    """lltui's proxy (or, not on demand, the router) takes --port: where that is taken, the
    launch says so in one line before it writes the router's preset (named after the port:
    a running router's own) or starts a router (which then left an unclosed client behind)."""
    import socket

    from lltui.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["launch", "--models", str(models), "-t", "1", "--port", str(port), *serve]
        assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"port {port} on 127.0.0.1 is already in use" in err[0], err
    state = Path(server_env["XDG_STATE_HOME"])
    assert not list(state.rglob(f"router-{port}.ini"))

"""The KV fill of a real llama-server (the pinned build, a tiny llama, two loopback
rpc-servers as its devices, three slots) serving requests of known lengths: at every sample
``lltui launch --json`` gives, each device's bytes are the tokens ``/slots`` says the slots
hold times the bytes one token takes there, and those per-token bytes add up to what the
GGUF's shapes say a token takes (each layer's K and V rows, F16) and, per device, match
the KV buffer the server's own log printed."""

from __future__ import annotations

import contextlib
import os
import signal
import time

import httpx
import pytest
from support.launch_proc import launched, read_event
from support.llama_fixture import llama_bins, rpc_servers, tiny_model, token_bytes
from support.proc_helpers import wait_for

from lltui.core.units import MIB

__all__ = ["llama_bins", "tiny_model"]

# (prompt tokens, tokens to generate) per slot
REQUESTS = ((40, 100), (90, 60), (17, 120))  # each slot a stream of its own


@pytest.fixture
def server_env(llama_bins, monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    return dict(os.environ)


def ask(url: str, slot: int, prompt: int, predict: int) -> dict:
    """A completion of ``prompt`` tokens and ``predict`` more, pinned to ``slot``."""
    body = {
        "prompt": [1] + [100 + (slot * 7 + i) % 200 for i in range(prompt - 1)],
        "n_predict": predict,
        "id_slot": slot,
        "ignore_eos": True,
        "cache_prompt": True,
    }
    return dict(httpx.post(f"{url}/completion", json=body, timeout=60.0).json())


def test_kv_fill_per_device_is_slot_tokens_times_gguf_bytes_per_token(
    server_env, llama_bins, tiny_model, tmp_path
):
    per_token = token_bytes(tiny_model)
    with rpc_servers(llama_bins, 2, tmp_path) as rpcs:
        hosts = ",".join(f"127.0.0.1:{r.port}" for r in rpcs)
        # a cache per slot: with a unified one the server moves an idle slot's tokens to
        # its host prompt cache when another slot starts (/slots, and the fill, say 0 then)
        extra = ("--rpc", hosts, "-ts", "3,1", "-ngl", "all", "-np", "3", "-no-kvu")
        with launched(tiny_model, server_env, *extra) as proc:
            ready = read_event(proc)
            try:
                url = ready["url"]
                events: list[dict] = []
                answers: list[dict] = []
                # one request after another, each in a slot of its own: the slots hold
                # them all at once, and the fill is said each time the tokens change
                for slot, (prompt, predict) in enumerate(REQUESTS):
                    answers.append(ask(url, slot, prompt, predict))
                    deadline = time.monotonic() + 30
                    while not (events and _settled(events[-1], answers)):
                        said = [[x["tokens"] for x in e["slots"]] for e in events]
                        assert time.monotonic() < deadline, (said, answers[-1])
                        event = next_event(proc)
                        if event is not None and event["event"] == "kv":  # speeds besides
                            assert "note" not in event, event
                            events.append(event)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(ready["pid"], signal.SIGTERM)
                proc.send_signal(signal.SIGINT)
    assert len(events) >= len(REQUESTS)
    for event in events:
        tokens = sum(s["tokens"] for s in event["slots"])
        assert event["tokens"] == tokens
        assert sum(d["bytes_per_token"] for d in event["devices"]) == per_token
        for d in event["devices"]:
            assert d["used_bytes"] == tokens * d["bytes_per_token"], (event, d)
            assert d["used_bytes"] + d["free_bytes"] == d["capacity_bytes"]
    last = events[-1]
    cache = last["prompt_cache"]  # its limit from the load; what it holds after a task
    assert cache is None or cache["limit_bytes"] == 8192 * MIB
    held = {s["id"]: s["tokens"] for s in last["slots"]}
    assert len(answers) == len(REQUESTS)
    for answer in answers:
        assert held[answer["id_slot"]] == _kept(answer), (answer, held)
    # the split is the server's: each device's share of a token, times the cells, is the KV
    # buffer its log printed
    logged = {d["name"]: d["kv_mib"] for d in ready["devices"]}
    for d in last["devices"]:
        if d["name"] in logged:
            cells = last["capacity_tokens"]
            assert abs(d["bytes_per_token"] * cells / MIB - logged[d["name"]]) < 0.01, d
    assert {d["name"] for d in last["devices"]} >= {"RPC0", "RPC1"}


def next_event(proc) -> dict | None:
    """The next event, or None when none came in a second."""
    try:
        return read_event(proc, 1.0)
    except AssertionError:
        if proc.poll() is not None:
            raise
        return None


def _settled(event: dict, answers: list[dict]) -> bool:
    """Every request answered, and the last fill holds what each put in its slot."""
    held = {s["id"]: s["tokens"] for s in event["slots"]}
    return all(held.get(a["id_slot"]) == _kept(a) for a in answers)


def _kept(answer: dict) -> int:
    """What a finished request leaves in its slot: its prompt and every generated token but
    the last (sampled, never decoded)."""
    return answer["tokens_evaluated"] + answer["tokens_predicted"] - 1


def test_the_exporter_serves_each_devices_kv_fill_of_a_followed_server(
    llama_bins, tiny_model, tmp_path
):
    from support.llama_fixture import llama_server

    from lltui.services.exporter import LlamaFollow, Sampler
    from lltui.sources.gpu.sim import SimSource

    per_token = token_bytes(tiny_model)
    log = tmp_path / "server.log"
    with llama_server(llama_bins, tiny_model, log, ("-np", "2", "-no-kvu")) as run:
        answer = ask(run.url, 1, 33, 20)
        src = SimSource("colab-t4", seed=1)
        src.open()
        sampler = Sampler(src, host="h", llama=[LlamaFollow(run.url, log=log)])

        def families() -> dict:
            sampler.sample_once()
            return {f.name: f for f in sampler.families()}

        try:  # the layout is worked out aside: a scrape never waits on a header read
            assert wait_for(lambda: families()["lltui_llama_kv_tokens"].samples, 60)
            fams = families()
        finally:
            sampler.stop()
    (tokens,) = fams["lltui_llama_kv_tokens"].samples
    assert tokens[1] == _kept(answer)
    used = {dict(lb)["device"]: v for lb, v in fams["lltui_llama_kv_used_bytes"].samples}
    assert sum(used.values()) == _kept(answer) * per_token, used
    capacity = fams["lltui_llama_kv_capacity_bytes"].samples
    assert all(v > 0 for _lb, v in capacity)


def test_a_server_started_with_no_slots_says_why_there_is_no_fill(
    server_env, llama_bins, tiny_model
):
    with launched(tiny_model, server_env, "--no-slots") as proc:
        ready = read_event(proc)
        try:
            event = next(e for e in iter(lambda: read_event(proc, 30), None) if e["event"] == "kv")
        finally:
            proc.send_signal(signal.SIGINT)
    assert ready["event"] == "ready"
    assert "--no-slots" in event["note"] and "devices" not in event


def test_a_log_level_that_hides_the_buffer_lines_fills_by_lltui_s_own_prediction(
    server_env, tiny_model
):
    """``-lv 1`` hides the buffer lines lltui compares with: it said 'no KV fill: no
    prediction of this server's caches to size the tokens by' though it had a plan for the
    command. It says the level hides them, and the KV fill follows its own prediction."""
    per_token = token_bytes(tiny_model)
    with launched(tiny_model, server_env, "-lv", "1", "-np", "1") as proc:
        ready = read_event(proc)
        try:
            answer = ask(ready["url"], 0, 40, 20)
            event: dict = {}
            while not event.get("tokens"):
                event = next(
                    e for e in iter(lambda: read_event(proc, 30), None) if e["event"] == "kv"
                )
                assert "note" not in event, event
        finally:
            proc.send_signal(signal.SIGINT)
    assert ready["prediction"]["note"].startswith("-lv 1 hides the buffer lines lltui reads")
    assert event["tokens"] == _kept(answer)
    assert sum(d["bytes_per_token"] for d in event["devices"]) == per_token

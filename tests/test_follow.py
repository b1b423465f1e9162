"""A llama-server lltui did not launch, held against its plan: the real pinned llama-server
(CPU device, its log a file) found on the GPUs of the fake pynvml, which says the server's
process holds memory on a GPU its plan gave nothing. ``lltui watch``, the exporter and the
monitor's model each find it (by its port, or as a llama-server of this user's on the
GPUs), make its plan from its own log, raise the placement mismatch, and give its KV fill:
the tokens ``/slots`` says each slot holds times what a token takes, from the GGUF."""

from __future__ import annotations

import json

import httpx
import pytest
from support.fake_pynvml import DRIVER_R535, FakeNvml, make_gpus
from support.llama_fixture import llama_bins, llama_server, tiny_model, token_bytes
from support.nvml_helpers import close_nvml_sources
from support.proc_helpers import wait_for

from lltui.cli import main
from lltui.core.monitor.alert_settings import AlertThresholds
from lltui.core.units import MIB
from lltui.services.follow import plan_of_argv

__all__ = ["close_nvml_sources", "llama_bins", "tiny_model"]

HELD = 300 * MIB  # what the fake driver says the server holds on GPU 1
PROMPT, PREDICT = 40, 24


@pytest.fixture(scope="module")
def server(llama_bins, tiny_model, tmp_path_factory):
    """A real llama-server of two slots with two requests served in slot 0."""
    log = tmp_path_factory.mktemp("follow") / "server.log"
    with llama_server(llama_bins, tiny_model, log, ("-np", "2", "-no-kvu")) as run:
        # two different prompts in slot 0: the first goes to the host prompt cache
        for first in (100, 50):
            body = {
                "prompt": [1] + [first + i for i in range(PROMPT - 1)],
                "n_predict": PREDICT,
                "id_slot": 0,
                "ignore_eos": True,
                "cache_prompt": True,
            }
            httpx.post(f"{run.url}/completion", json=body, timeout=60.0).raise_for_status()
        yield run


@pytest.fixture
def rig(monkeypatch, server):
    """The fake driver: two GPUs, the real server's pid holding memory on GPU 1."""
    gpus = make_gpus(2)
    gpus[1].compute_procs = [(server.proc.pid, HELD)]
    FakeNvml(gpus, driver=DRIVER_R535).install(monkeypatch)
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    return gpus


def slot_tokens(url: str) -> list[int]:
    return [s.get("n_prompt_tokens") or 0 for s in httpx.get(f"{url}/slots", timeout=10).json()]


def test_watch_holds_a_server_named_by_url_against_its_logs_plan(rig, server, tiny_model, capsys):
    code = main(["watch", "--once", "--json", "--source", "nvml", "--llama", server.url])
    data = json.loads(capsys.readouterr().out)
    assert code == 3  # a warning: the placement mismatch
    [s] = data["servers"]
    assert s["pid"] == server.proc.pid  # found by its port among the GPUs' processes
    assert s["plan_source"] == f"log {server.log_path}"  # its stdout is a file
    assert s["plan"]["gpus"] == [
        {"gpu": 1, "device": None, "planned_bytes": None, "held_bytes": HELD, "growth_bytes": None}
    ]
    [alert] = [a for a in data["alerts"] if a["kind"] == "plan_placement"]
    assert alert["gpu"] == 1 and alert["server"] == server.url
    # the KV fill: what /slots says the slots hold, times the GGUF's bytes per token
    kv = s["kv"]
    tokens = slot_tokens(server.url)
    assert tokens[0] >= PROMPT and [x["tokens"] for x in kv["slots"]] == tokens
    [cpu] = kv["devices"]
    assert cpu["bytes_per_token"] == token_bytes(tiny_model)
    assert cpu["used_bytes"] == sum(tokens) * token_bytes(tiny_model)
    # the prompt cache in host memory, as the log's last "cache state" line says
    cache = s["prompt_cache"]
    assert cache["limit_bytes"] == 8192 * MIB and cache["prompts"] == 1, cache
    assert cache["bytes"] > 0


def test_watch_finds_a_server_no_one_named_and_says_it_in_text(rig, server, capsys):
    code = main(["watch", "--once", "--source", "nvml"])
    out = capsys.readouterr().out
    assert code == 3
    # named by the address its command line listens on
    assert f"warning llama {server.url} GPU1: pid {server.proc.pid} holds 300 MiB here" in out
    assert f"{server.url} (pid {server.proc.pid}); held/planned: GPU1 300/- MiB (plan: log " in out


def test_the_exporter_serves_the_plan_and_raises_the_mismatch(rig, server):
    from lltui.services.exporter import LlamaFollow, Sampler
    from lltui.sources.gpu.nvml import NvmlSource

    src = NvmlSource(env={})
    src.open()
    th = AlertThresholds(plan_placement_for_s=0)
    sampler = Sampler(src, host="h", llama=[LlamaFollow(server.url)], thresholds=th)

    def families() -> dict:
        sampler.sample_once()  # the first round has no GPU sample for the server's poll
        return {f.name: f for f in sampler.families()}

    try:
        # the plan is made on a thread of its own: a scrape never waits on a header read
        assert wait_for(lambda: families()["lltui_llama_gpu_held_bytes"].samples, 60)
        assert wait_for(lambda: families()["lltui_alert_active"].samples, 60)
        fams = families()
    finally:
        sampler.stop()
        src.close()
    [(labels, value)] = fams["lltui_llama_gpu_held_bytes"].samples
    assert dict(labels)["gpu"] == "1" and dict(labels)["pid"] == str(server.proc.pid)
    assert value == HELD
    assert fams["lltui_llama_gpu_planned_bytes"].samples == ()
    kinds = {dict(lb)["kind"] for lb, v in fams["lltui_alert_active"].samples if v}
    assert "plan_placement" in kinds
    [(_, prompts)] = fams["lltui_llama_prompt_cache_prompts"].samples
    [(_, limit)] = fams["lltui_llama_prompt_cache_limit_bytes"].samples
    assert (prompts, limit) == (1, 8192 * MIB)


def test_the_monitors_model_raises_the_mismatch_of_a_found_server(rig, server):
    from lltui.app.rig_model import RigModel
    from lltui.core.monitor.alerts import AlertTracker
    from lltui.core.monitor.history import RigHistory
    from lltui.services.follow import FoundServers
    from lltui.sources.gpu.nvml import NvmlSource

    src = NvmlSource(env={})
    info = src.open()
    model = RigModel(
        info=info,
        interval=1.0,
        history=RigHistory(),
        alerts=AlertTracker(AlertThresholds(plan_placement_for_s=0)),
        found=FoundServers(background=True),  # as the app makes it
    )
    try:  # the plan is made aside: the poll goes on meanwhile
        assert wait_for(lambda: model.apply(src.poll()) and model.plans, 60)
    finally:
        src.close()
    [plan] = model.plans
    assert plan.pid == server.proc.pid
    assert {(a.kind, a.gpu_index) for a in model.alerts.active} >= {("plan_placement", 1)}


def test_a_servers_own_command_line_is_planned_where_no_log_is_found(tiny_model):
    plan = plan_of_argv(("llama-server", "-m", str(tiny_model), "-c", "512", "-np", "2"), {}, None)
    assert plan is not None and plan.source == "prediction"
    assert plan.kv is not None
    assert sum(d.full_bytes_per_token for d in plan.kv.devices) == token_bytes(tiny_model)
    assert plan_of_argv(("llama-server", "--no-such-flag-x"), {}, None) is None
    assert plan_of_argv(("llama-server", "--port", "9"), {}, None) is None  # a router


def test_a_server_followed_in_the_launch_view_gets_its_plan_and_kv_fill(rig, server):
    from lltui.services.follow import ServerFollow
    from lltui.services.launch.polls import ServerPoll
    from lltui.services.launch.state import LaunchState
    from lltui.sources.gpu.nvml import NvmlSource

    src = NvmlSource(env={})
    src.open()
    try:
        sample = src.poll()
    finally:
        src.close()
    follow = ServerFollow(server.url, background=True)  # as the launch view makes it
    poll = ServerPoll(server.url, None, rig=lambda: sample, follow=follow)
    start = LaunchState(phase="following", url=server.url)
    states = []
    try:
        assert wait_for(lambda: states.append(poll.update(start, 0.0)) or states[-1].plan, 60)
        st = states[-1]
    finally:
        poll.close()
    assert st.pid is None and not st.running  # followed, not ours to stop
    assert st.plan is not None and st.plan.pid == server.proc.pid
    assert [(r.gpu_index, r.held_bytes) for r in st.plan.rows] == [(1, HELD)]
    assert st.kv is not None and st.kv.used_tokens == sum(slot_tokens(server.url))


def test_a_server_whose_process_is_not_seen_still_gets_its_kv_fill_from_its_log(server):
    """A server on no GPU source: its log still gives the layout, so the KV fill is known
    though no plan can be held against a process (found by the port it listens on)."""
    from lltui.services.follow import ServerFollow

    tokens = slot_tokens(server.url)
    slots = [type("Slot", (), {"n_prompt_tokens": n, "n_ctx": 512})() for n in tokens]
    state = ServerFollow(server.url, log=server.log_path).fold(None, slots, 1.0)
    assert state.pid == server.proc.pid and state.plan is None
    assert state.plan_source == f"log {server.log_path}"
    assert state.kv is not None and state.kv.used_tokens == sum(tokens)


def test_report_puts_the_servers_memory_now_beside_its_plan(rig, server, capsys):
    assert main(["report", "--server", server.url, "--source", "nvml", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    held = data["memory_now_against_the_plan"]
    assert held["plan_source"].endswith("/server.log")  # the user's home may be masked
    [gpu] = held["plan"]["gpus"]
    assert (gpu["gpu"], gpu["held_bytes"], gpu["planned_bytes"]) == (1, HELD, None)
    assert held["kv_tokens"] == sum(slot_tokens(server.url))


def test_a_plan_made_aside_stands_while_the_log_grows(tmp_path):
    """A server logs a line or more each request: the plan a thread made of its log is
    taken though the log has grown since (before, each new size asked for a new plan and
    none was ever taken)."""
    from pathlib import Path

    from lltui.services.follow import ServerFollow

    fixture = Path(__file__).parent / "fixtures" / "llama-server" / "server_lv4_full.log"
    log = tmp_path / "server.log"
    log.write_bytes(fixture.read_bytes())
    follow = ServerFollow(log=log, background=True, kv=False)
    lines = []

    def grown_and_planned() -> bool:
        with log.open("a") as f:  # a request's line between two samples
            f.write(f"0.00.{len(lines):03d}.000 I srv  update_slots: all slots are idle\n")
        lines.append(follow.fold(None, None, 0.0))
        return lines[-1].plan_source is not None

    assert wait_for(grown_and_planned, 30)
    assert lines[-1].plan_source == f"log {log}"


def test_a_load_read_before_its_end_is_read_again_until_it_is_whole(tmp_path, monkeypatch):
    """A log read while the server still loads (its model buffers logged, its KV and
    compute buffers not yet) gives a plan that is read again as the log grows, until the
    load is whole; then not again while the server serves."""
    from pathlib import Path

    from lltui.services import follow as fw

    fixture = Path(__file__).parent / "fixtures" / "llama-logs" / "01-pr6122-2gpu-pipeline-2024.log"
    lines = fixture.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "KV buffer size" in line)
    log = tmp_path / "server.log"
    log.write_text("".join(lines[:cut]))
    reads = []
    real = fw.plan_of_log
    monkeypatch.setattr(fw, "plan_of_log", lambda path, **kw: reads.append(1) or real(path, **kw))
    monkeypatch.setattr(fw, "RETRY_S", 0.0)  # read again at once, not a few seconds later
    follow = fw.ServerFollow(log=log, kv=False)

    def kv_mib(state: fw.FollowState) -> float:
        return sum(p.kv_mib + p.compute_mib for p in state.placement)

    loading = follow.fold(None, None, 0.0)
    assert loading.placement and kv_mib(loading) == 0, "the model's buffers alone, so far"
    assert follow.fold(None, None, 0.0).placement == loading.placement and len(reads) == 1
    log.write_text("".join(lines))  # the load goes on to its end
    loaded = follow.fold(None, None, 0.0)
    assert kv_mib(loaded) > 0 and len(reads) == 2
    with log.open("a") as f:  # serving: the log grows, the load stays
        f.write("0.09.000.000 I srv  update_slots: all slots are idle\n" * 20)
    assert follow.fold(None, None, 0.0).placement == loaded.placement and len(reads) == 2


def test_a_load_with_the_hosts_buffers_alone_so_far_is_no_plan_yet(tmp_path):
    """Read between a load's host and GPU buffer lines, a log is not yet a plan that puts
    nothing on a GPU (the process would be held to it, and its GPU memory called a
    misplacement); read whole, it is."""
    from pathlib import Path

    from lltui.services.follow import plan_of_log

    # a 2024 build logs the host's model buffer first, then each GPU's
    fixture = Path(__file__).parent / "fixtures" / "llama-logs" / "01-pr6122-2gpu-pipeline-2024.log"
    lines = fixture.read_text().splitlines(keepends=True)
    gpu = next(i for i, line in enumerate(lines) if "CUDA0 buffer size" in line)
    log = tmp_path / "server.log"
    log.write_text("".join(lines[:gpu]))  # the host's buffer alone
    assert plan_of_log(log, kv=False) is None
    log.write_text("".join(lines))
    plan = plan_of_log(log, kv=False)
    assert plan is not None and set(plan.planned) == {"CUDA0", "CUDA1"} and plan.complete

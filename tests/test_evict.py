"""The eviction policy of on-demand loading: which models go so that a requested one loads,
decided by each model's memory per device and on the host (lltui.core.fit.evict)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from lltui.core.cmdline.args import parse_llama_args
from lltui.core.fit.evict import (
    DEFAULT_CACHE_RAM_MIB,
    ModelNeed,
    Policy,
    Resident,
    Room,
    cache_ram_bytes,
    decide,
    decide_all,
    policy_from_plan,
    refusal,
)
from lltui.core.fit.plan import DeviceRoom
from lltui.core.memory.common import CPU
from lltui.core.units import MIB

GIB = 1024 * MIB


def need(name: str, gpu0: int = 0, gpu1: int = 0, host: int = 0, **kw: Any) -> ModelNeed:
    devices = {d: b * GIB for d, b in (("CUDA0", gpu0), ("CUDA1", gpu1)) if b}
    return ModelNeed(name, devices, host * GIB, **kw)


def policy(*needs: ModelNeed, gpu0: int = 24, gpu1: int = 24, host: int | None = 64) -> Policy:
    room = Room({"CUDA0": gpu0 * GIB, "CUDA1": gpu1 * GIB}, None if host is None else host * GIB)
    return Policy({n.name: n for n in needs}, room)


def running(*names: str) -> list[Resident]:
    """Resident models, the first the least recently used."""
    return [Resident(n, float(i)) for i, n in enumerate(names)]


def test_a_model_that_fits_beside_the_others_loads_now():
    p = policy(need("a", 10), need("b", 10))
    assert decide(p, "b", running("a")).action == "load"
    assert decide(p, "a", running("a")).action == "loaded"


def test_the_least_recently_used_goes_first():
    p = policy(need("a", 10), need("b", 10), need("c", 10))
    got = decide(p, "c", running("b", "a"))  # b served longest ago
    assert (got.action, got.evict) == ("evict", ("b",))
    got = decide(p, "c", running("a", "b"))
    assert got.evict == ("a",)


def test_a_busy_or_loading_model_is_passed_over_while_an_idle_one_makes_room():
    """A model answering requests, or still loading, was the first to go when it was the
    least recently used (the proxy then waited up to 10 minutes for it, or killed its load);
    llama-server passes over both."""
    p = policy(need("a", 10), need("b", 10), need("c", 10))
    for busy in (
        Resident("a", 0.0, in_flight=2),
        Resident("a", 0.0, loading=True),
        Resident("a", 0.0, queued=1),  # a request waits at the proxy for it
    ):
        assert decide(p, "c", [busy, Resident("b", 1.0)]).evict == ("b",)
        assert refusal(p, "c", [busy, Resident("b", 1.0)]) == (
            "c does not fit with a, b loaded: CUDA0 has 4096 MiB left, c needs 10240 MiB; "
            "unload b first"
        )


def test_only_busy_models_in_the_way_are_named_and_the_gate_says_so():
    p = policy(need("a", 10), need("b", 10, pinned=True), need("c", 10))
    got = decide(p, "c", [Resident("a", 0.0, in_flight=2), Resident("b", 1.0)])
    assert (got.action, got.evict) == ("evict", ("a",))  # the proxy waits for its requests
    said = refusal(p, "c", [Resident("a", 0.0, in_flight=2), Resident("b", 1.0)])
    assert said is not None and said.endswith("; unload a first (it is serving 2 requests)")
    said = refusal(p, "c", [Resident("a", 0.0, loading=True), Resident("b", 1.0)])
    assert said is not None and said.endswith("; unload a first (it is still loading)")
    said = refusal(p, "c", [Resident("a", 0.0, queued=1), Resident("b", 1.0)])
    assert said is not None and said.endswith("; unload a first (it has 1 request waiting)")


def test_lower_priority_goes_before_an_older_one():
    p = policy(need("a", 10, priority=5), need("b", 10), need("c", 10))
    assert decide(p, "c", running("a", "b")).evict == ("b",)


def test_the_smallest_set_that_frees_enough():
    # a (oldest) frees too little alone; b alone is enough: only b goes
    p = policy(need("a", 4), need("b", 12), need("c", 14))
    got = decide(p, "c", running("a", "b"))
    assert got.evict == ("b",)
    # both must go when neither alone frees enough
    p = policy(need("a", 8), need("b", 8), need("c", 20))
    assert decide(p, "c", running("a", "b")).evict == ("a", "b")


def test_a_pinned_model_is_never_evicted():
    p = policy(need("a", 10, pinned=True), need("b", 10), need("c", 10))
    assert decide(p, "c", running("a", "b")).evict == ("b",)
    p = policy(need("a", 10, pinned=True), need("b", 10, pinned=True), need("c", 10))
    got = decide(p, "c", running("a", "b"))
    assert (got.action, got.code) == ("cannot", "pinned")
    assert "pinned models unload (a, b)" in got.reason
    # and what it is short of with them loaded (the reason ended in ': ' before)
    assert not got.reason.endswith(": ") and " left, it needs " in got.reason


def test_a_model_too_big_even_alone_is_refused_with_the_device():
    p = policy(need("a", 10), need("huge", 30))
    got = decide(p, "huge", running("a"))
    assert (got.action, got.code) == ("cannot", "does_not_fit")
    assert got.reason == "huge does not fit even alone: CUDA0 has 24576 MiB, it needs 30720 MiB"


def test_an_unknown_model_is_named():
    got = decide(policy(need("a", 1)), "nope", [])
    assert (got.action, got.code, got.reason) == (
        "cannot",
        "model_not_found",
        "model 'nope' not found",
    )


def test_host_memory_binds_like_a_gpu():
    # nothing on a GPU: each takes 20 GiB of RAM, the host has 48
    p = policy(need("a", host=20), need("b", host=20), need("c", host=20), host=48)
    assert decide(p, "b", running("a")).action == "load"
    assert decide(p, "c", running("a", "b")).evict == ("a",)
    got = decide(policy(need("big", host=50), host=48), "big", [])
    assert (got.action, got.code) == ("cannot", "host_memory")
    assert "the host has 49152 MiB, it needs 51200 MiB" in got.reason


def test_host_memory_with_pinned_models_is_refused_as_pinned():
    p = policy(need("a", host=30, pinned=True), need("b", host=30), host=48)
    got = decide(p, "b", running("a"))
    assert (got.action, got.code) == ("cannot", "pinned")


def test_a_pod_evicts_only_models_on_its_own_gpus():
    # coder holds GPU0; chat models swap on GPU1: a chat request never unloads the coder,
    # even when the coder is the least recently used
    p = policy(need("coder", gpu0=20), need("chat1", gpu1=16), need("chat2", gpu1=16))
    got = decide(p, "chat2", running("coder", "chat1"))
    assert got.evict == ("chat1",)
    # a model on GPU0 and GPU1 may evict on both
    p = policy(need("coder", gpu0=20), need("chat1", gpu1=16), need("wide", gpu0=10, gpu1=10))
    assert decide(p, "wide", running("coder", "chat1")).evict == ("coder", "chat1")


def test_a_pod_that_cannot_free_enough_says_so():
    # host short and the only other model is on another GPU: the pod may not unload it
    p = policy(need("coder", gpu0=20, host=30), need("chat", gpu1=10, host=30), host=48)
    got = decide(p, "chat", running("coder"))
    assert (got.action, got.code) == ("cannot", "host_memory")


def test_a_shared_rpc_server_forces_its_holder_out():
    p = policy(need("a", 1, rpc=("h:1",)), need("b", 1), need("c", 1, rpc=("h:1",)))
    assert decide(p, "c", running("a", "b")).evict == ("a",)
    p = policy(need("a", 1, rpc=("h:1",), pinned=True), need("c", 1, rpc=("h:1",)))
    assert decide(p, "c", running("a")).code == "pinned"


def test_decide_all_says_for_each_model():
    p = policy(need("a", 10), need("b", 10), need("c", 10))
    got = decide_all(p, running("a", "b"))
    assert {n: d.action for n, d in got.items()} == {"a": "loaded", "b": "loaded", "c": "evict"}


def test_the_prompt_cache_is_counted_unless_set():
    assert cache_ram_bytes(parse_llama_args([])) == DEFAULT_CACHE_RAM_MIB * MIB
    assert cache_ram_bytes(parse_llama_args(["--cache-ram", "0"])) == 0
    assert cache_ram_bytes(parse_llama_args(["-cram", "512"])) == 512 * MIB
    assert cache_ram_bytes(parse_llama_args(["-cram", "-1"])) == DEFAULT_CACHE_RAM_MIB * MIB


def test_the_policy_from_a_plan_counts_host_buffers_cache_and_process():
    def planned(name: str, gpu: int, host: int, flags: list[str], keep: bool = False) -> Any:
        usage = (("CUDA0", gpu), (CPU, host))
        args = parse_llama_args(flags)
        path = f"/m/{name}.gguf"
        return SimpleNamespace(
            name=name, usage=usage, args=args, rpc=(), keep=keep, path=path, ref=""
        )

    plan: Any = SimpleNamespace(
        models=(
            planned("a", 5 * GIB, 100 * MIB, ["-cram", "1024"]),
            planned("b", 6 * GIB, 0, [], keep=True),
        ),
        devices=(
            DeviceRoom("CUDA0", "cuda", 10 * GIB, 11 * GIB),
            DeviceRoom(CPU, "cpu", 32 * GIB, 100 * MIB),
        ),
    )
    got = policy_from_plan(plan, priority={"a": 3}, overhead_bytes=50 * MIB)
    assert got.room == Room({"CUDA0": 10 * GIB}, 32 * GIB)
    assert got.needs["a"] == ModelNeed(
        "a", {"CUDA0": 5 * GIB}, 1174 * MIB, (), False, 3, path="/m/a.gguf", cache_bytes=1024 * MIB
    )
    assert got.needs["b"].host_bytes == (DEFAULT_CACHE_RAM_MIB + 50) * MIB
    assert got.needs["b"].pinned
    assert decide(got, "b", running("a")).evict == ("a",)


def test_a_host_short_for_the_prompt_cache_says_so():
    """A 5 MiB model on a host with 8000 MiB available: the router's on-demand plan said
    'the host has 8000 MiB, it needs 8307 MiB', naming neither the 8192 MiB prompt cache
    counted for it nor the flag that sets it."""
    usage = (("CUDA0", 0), (CPU, 19 * MIB))
    plan: Any = SimpleNamespace(
        models=(
            SimpleNamespace(
                name="a",
                usage=usage,
                args=parse_llama_args([]),
                rpc=(),
                keep=False,
                ref="a",
                path="/m/a.gguf",
            ),
        ),
        devices=(DeviceRoom(CPU, "cpu", 8000 * MIB, 8000 * MIB),),
    )
    p = policy_from_plan(plan)
    said = "8192 MiB of it the prompt cache llama-server may fill (--cache-ram MIB sets it)"
    got = decide(p, "a", [])
    assert (got.code, got.reason) == (
        "host_memory",
        f"a does not fit even alone: the host has 8000 MiB, it needs 8307 MiB, {said}",
    )
    assert said in (refusal(p, "a", []) or "")
    # a GPU short says nothing of it; a --cache-ram 0 host nothing either
    assert "prompt cache" not in decide(policy(need("big", gpu0=30)), "big", []).reason
    got = decide(policy(need("big", host=50), host=48), "big", [])
    assert got.reason == "big does not fit even alone: the host has 49152 MiB, it needs 51200 MiB"


def test_the_gate_and_the_eviction_agree(tmp_path):
    """A load lltui is asked for (the view's l, --load) went through a policy of its own:
    the fewest models, the smallest first, blind to --priority, last use and each server's
    prompt cache and process. Asked to load beta beside alpha (priority 5) and gamma, it
    said 'unload alpha first' where a request for beta unloads gamma. Both now decide by
    one policy, and say the same."""
    from support.llama_fixture import write_tiny_llama

    from lltui.core.llama.router_api import RouterModel
    from lltui.services.launch.router import RouterSession
    from lltui.services.launch.router_prep import RouterRequest

    write_tiny_llama(tmp_path / "alpha.gguf", layers=4, ctx=32768, seed=1)  # 5.8 MiB
    write_tiny_llama(tmp_path / "beta.gguf", layers=6, embd=256, ff=512, ctx=32768)  # 13.9
    write_tiny_llama(tmp_path / "gamma.gguf", layers=5, ctx=2048, seed=3)  # 6.3
    request = RouterRequest(
        source=str(tmp_path),
        words=("-c", "512", "-cram", "0"),
        gpus="21MiB",  # any two fit, not three
        margin_mib=0,
        priority=(("alpha", 5),),
    )
    listed = (
        RouterModel("alpha", "loaded"),
        RouterModel("beta", "unloaded"),
        RouterModel("gamma", "loaded"),
    )
    with RouterSession(request) as session:
        policy = session.prepare(require_binary=False).policy()
        assert policy.needs["beta"].path == str(tmp_path / "beta.gguf")  # (checked to load)
        resident = [Resident("alpha"), Resident("gamma")]
        assert decide(policy, "beta", resident).evict == ("gamma",)
        line = session.refusal("beta", listed)
        assert line is not None and line.endswith("; unload gamma first")
        assert line.startswith("beta does not fit with alpha, gamma loaded: CUDA0 has ")
        from lltui.core.fit.evict import refusal

        assert line == refusal(policy, "beta", resident)
        # for each state the two say the same: a line exactly where a load is not 'load'
        for name in ("alpha", "beta", "gamma"):
            for state in ([], ["alpha"], ["gamma"], ["alpha", "gamma"], ["beta"]):
                res = [Resident(n, float(i)) for i, n in enumerate(state)]
                d = decide(policy, name, res)
                said = refusal(policy, name, res)
                assert (said is None) == (d.action in ("load", "loaded")), (name, state)
                if d.action == "evict":
                    assert (said or "").endswith(f"unload {' and '.join(d.evict)} first")


def test_a_load_lltui_asked_for_counts_as_a_use(tmp_path):
    """llama-server's router counts a load as a use; lltui's loads (the view's l, --load)
    went straight to the router, unseen by the proxy, so their last use stayed 0 and the
    model loaded last was the first to go."""
    from support.llama_fixture import write_tiny_llama

    from lltui.core.llama.router_api import RouterModel
    from lltui.services.launch.router import RouterSession
    from lltui.services.launch.router_prep import RouterRequest

    write_tiny_llama(tmp_path / "alpha.gguf", layers=4, ctx=32768, seed=1)
    write_tiny_llama(tmp_path / "beta.gguf", layers=5, ctx=2048, seed=2)
    write_tiny_llama(tmp_path / "gamma.gguf", layers=5, ctx=2048, seed=3)
    request = RouterRequest(
        source=str(tmp_path), words=("-c", "512", "-cram", "0"), gpus="14MiB", margin_mib=0
    )
    states = {"alpha": "unloaded", "beta": "unloaded", "gamma": "unloaded"}

    class Router:  # the router's load and list, as far as the session asks them
        def load(self, name: str) -> None:
            states[name] = "loaded"

        def models(self) -> list[RouterModel]:
            return [RouterModel(n, s) for n, s in states.items()]

    with RouterSession(request) as session:
        session.prepare(require_binary=False)
        session._client = Router()
        session.load("beta")  # first: the older use
        session.load("alpha")
        line = session.refusal("gamma", tuple(Router().models()))
    assert line is not None and line.endswith("; unload beta first"), line


def test_a_load_refused_at_start_says_what_the_dry_run_says(tmp_path, monkeypatch, capsys):
    """--load alpha --load beta where one fits: the real start asked for beta while alpha
    was still loading, and its line added '(it is still loading)'; the dry run said nothing
    of beta's refusal. Both now give the plan's line for it."""
    import json

    from support.llama_fixture import write_tiny_llama

    from lltui.cli import main
    from lltui.core.llama.router_api import RouterModel
    from lltui.services.launch.router import RouterSession
    from lltui.services.launch.router_prep import RouterRequest

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    models = tmp_path / "models"
    models.mkdir()
    write_tiny_llama(models / "alpha.gguf", layers=4, ctx=32768, seed=1)
    write_tiny_llama(models / "beta.gguf", layers=5, ctx=2048, seed=2)
    words = ("-c", "512", "-cram", "0")
    states = {"alpha": "unloaded", "beta": "unloaded"}

    class Router:  # a load is listed loading until its server is ready
        def load(self, name: str) -> None:
            states[name] = "loading"

        def models(self) -> list[RouterModel]:
            return [RouterModel(n, s) for n, s in states.items()]

    request = RouterRequest(source=str(models), words=words, gpus="1034MiB", load=("alpha", "beta"))
    with RouterSession(request) as session:
        session.prepare(require_binary=False)
        session._client = Router()
        said = session.load_at_start()
    assert states == {"alpha": "loading", "beta": "unloaded"}
    assert len(said) == 1 and said[0].startswith("beta does not fit with alpha loaded: ")
    assert said[0].endswith("; unload alpha first")
    argv = ["launch", "--models", str(models), *words, "--gpus", "1034MiB",
            "--load", "alpha", "--load", "beta", "--dry-run"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["load_refused"].values()) == said
    assert main(argv) == 0
    assert f"refused at start: {said[0]}\n" in capsys.readouterr().out

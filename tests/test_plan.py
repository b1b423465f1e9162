"""A plan for several models on one rig (``lltui fit A B ...``): each model's estimate at the
settings the plan pins, devices shared out, contexts lowered together, the sets that fit, the
largest context with the others loaded, and the gate a router's loads go through."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.llama_fixture import write_tiny_llama

from lltui.cli import main
from lltui.core.cmdline.args import parse_llama_args
from lltui.core.fit.estimate import estimate
from lltui.core.fit.evict import SERVER_OVERHEAD_MIB, Resident, policy_from_plan, refusal
from lltui.core.fit.plan import SetMember, fits_with, plan_set
from lltui.core.fit.report import result_to_text
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory.devices import DeviceSpec, rpc_device
from lltui.core.memory.results import FitOptions
from lltui.core.units import MIB
from lltui.services.fit import FitRequest, fit
from lltui.services.plan import PlanEntry, PlanRequest, plan_models

GIB = 1024 * MIB
HOST = 64 * GIB


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plan-models")
    return {
        "alpha": write_tiny_llama(root / "alpha.gguf", layers=4, ctx=32768, seed=1),
        "beta": write_tiny_llama(root / "beta.gguf", layers=6, embd=256, ff=512, ctx=32768),
        "gamma": write_tiny_llama(root / "gamma.gguf", layers=5, ctx=2048, seed=3),
    }


def load_refusal(plan, name: str, resident, kept=(), priority=None):
    """The gate's line, the least recently used of ``resident`` first."""
    policy = policy_from_plan(plan, kept, priority)
    return refusal(policy, name, [Resident(n, float(i)) for i, n in enumerate(resident)])


def gpu(name: str, mib: float) -> DeviceSpec:
    size = int(mib * MIB)
    return DeviceSpec(name=name, kind="cuda", total_bytes=size, free_bytes=size)


def member(models, name: str, flags=(), devices=(), keep=False) -> SetMember:
    return SetMember(
        name, read_gguf(str(models[name])), parse_llama_args(list(flags)), tuple(devices), keep=keep
    )


OPTS = FitOptions(margin_bytes=0, host_free_bytes=HOST)


def test_each_model_is_its_own_estimate_and_the_devices_add_them_up(models):
    devs = [gpu("CUDA0", 2048), gpu("CUDA1", 1024)]
    plan = plan_set(
        [member(models, "alpha", ["-c", "4096"], devs), member(models, "gamma", [], devs)],
        replace(OPTS, margin_bytes=100 * MIB),
    )
    for p in plan.models:
        own = estimate(read_gguf(p.path), p.args, devs, replace(OPTS, margin_bytes=100 * MIB))
        assert [(d.name, d.total_bytes) for d in p.result.devices] == [
            (d.name, d.total_bytes) for d in own.devices
        ]
        for d in own.devices:
            if d.name != "CPU" and d.total_bytes:
                # each server keeps its own margin on a GPU it uses
                assert p.bytes_on(d.name) == d.total_bytes + 100 * MIB
    for room in plan.devices:
        assert room.used_bytes == sum(p.bytes_on(room.name) for p in plan.models)
    assert plan.fits and plan.fit_together == (("alpha", "gamma"),)
    # the plan pins what llama-server would otherwise decide at load time
    alpha, gamma = plan.model("alpha"), plan.model("gamma")
    assert "-c" not in alpha.pinned and alpha.pinned[-2:] == ("-fit", "off")
    assert gamma.pinned[:2] == ("-c", "2048") and "-ts" in gamma.pinned


def test_the_pinned_split_holds_whatever_is_free_at_load_time(models):
    """llama.cpp splits by the free memory it sees when it loads; -ts as layer counts (as
    its fitter writes) gives the plan's split on devices another model has half filled."""
    devs = [gpu("CUDA0", 3000), gpu("CUDA1", 1000)]
    plan = plan_set([member(models, "beta", ["-c", "1024"], devs)], OPTS)
    beta = plan.model("beta")
    ts = beta.pinned[beta.pinned.index("-ts") + 1]
    assert ts == "6,1"  # layers 0-5 below 3/4 of the way, the output layer on CUDA1
    later = [replace(devs[0], free_bytes=900 * MIB), devs[1]]
    at_load = estimate(read_gguf(beta.path), beta.args, later, OPTS)
    assert at_load.layer_devices == beta.result.layer_devices
    unpinned = estimate(read_gguf(beta.path), parse_llama_args(["-c", "1024"]), later, OPTS)
    assert unpinned.layer_devices != beta.result.layer_devices


def test_contexts_not_given_are_lowered_together_as_far_as_needed(models):
    devs = [gpu("CUDA0", 48)]
    members = [member(models, "alpha", [], devs), member(models, "beta", [], devs)]
    plan = plan_set(members, OPTS)
    alpha, beta = plan.model("alpha"), plan.model("beta")
    assert plan.fits
    assert alpha.ctx_lowered and beta.ctx_lowered
    assert 4096 <= alpha.n_ctx < 32768 and 4096 <= beta.n_ctx < 32768
    # the same share of each default: the two differ by less than one 256-cell step
    assert abs(alpha.n_ctx - beta.n_ctx) <= 256
    # and no further than needed: both one step up do not fit
    bigger = [
        replace(m, args=parse_llama_args(["-c", str(p.n_ctx + 256)]))
        for m, p in zip(members, (alpha, beta), strict=True)
    ]
    up = plan_set(bigger, OPTS)
    assert not up.fits


def test_the_sets_that_fit_when_all_do_not(models):
    devs = [gpu("CUDA0", 60)]
    members = [
        member(models, "alpha", ["-c", "4096"], devs),
        member(models, "beta", ["-c", "8192"], devs),
        member(models, "gamma", ["-c", "2048"], devs),
    ]
    plan = plan_set(members, OPTS)
    assert not plan.fits
    sizes = {p.name: p.bytes_on("CUDA0") for p in plan.models}
    expected = []
    for combo in (("alpha", "beta"), ("alpha", "gamma"), ("beta", "gamma")):
        if sum(sizes[n] for n in combo) <= 60 * MIB:
            expected.append(combo)
    assert expected and list(plan.fit_together) == expected
    # with the others loaded a model has less room than alone
    a = plan.model("alpha")
    assert a.max_ctx_shared is None or a.max_ctx_shared < (a.max_ctx_alone or 0)


def test_two_models_naming_one_rpc_server_cannot_be_loaded_together(models):
    ep = "127.0.0.1:50052"
    rpc = [rpc_device(ep, 8 * GIB, 0, backend="cpu")]
    plan = plan_set(
        [
            member(models, "alpha", ["-c", "512", "--rpc", ep], rpc),
            member(models, "gamma", ["-c", "512", "--rpc", ep], rpc),
            member(models, "beta", ["-c", "512"], ()),
        ],
        OPTS,
    )
    assert plan.conflicts == (("alpha", "gamma", ep),)
    assert not plan.fits
    assert plan.fit_together == (("alpha", "beta"), ("gamma", "beta"))
    assert plan.model("beta").rpc == ()  # it uses no RPC device: no --rpc for it
    line = load_refusal(plan, "gamma", ["alpha", "beta"])
    assert line is not None
    assert "alpha holds the RPC server 127.0.0.1:50052" in line
    assert line.endswith("unload alpha first")


def test_the_gate_names_what_to_unload(models):
    devs = [gpu("CUDA0", 40)]
    plan = plan_set(
        [
            member(models, "alpha", ["-c", "4096"], devs),
            member(models, "beta", ["-c", "4096"], devs),
            member(models, "gamma", ["-c", "2048"], devs),
        ],
        OPTS,
    )
    sizes = {p.name: p.bytes_on("CUDA0") for p in plan.models}
    assert sizes["beta"] > sizes["gamma"]
    assert fits_with(plan, ["alpha", "gamma"]) and not fits_with(plan, ["alpha", "beta", "gamma"])
    assert load_refusal(plan, "gamma", ["alpha"]) is None
    assert load_refusal(plan, "gamma", ["alpha", "gamma"]) is None  # already in: no change
    line = load_refusal(plan, "beta", ["alpha", "gamma"])
    assert line is not None and line.startswith("beta does not fit with alpha, gamma loaded: ")
    assert "CUDA0 has " in line and "beta needs " in line
    # only alpha's going lets beta in: gamma, the least recently used, is kept back
    assert fits_with(plan, ["gamma", "beta"]) and not fits_with(plan, ["alpha", "beta"])
    assert line.endswith("; unload alpha first")
    assert (load_refusal(plan, "beta", ["gamma", "alpha"]) or "").endswith("; unload alpha first")
    kept = load_refusal(plan, "beta", ["alpha", "gamma"], kept=["alpha", "gamma"])
    assert kept is not None and kept.endswith("kept (alpha, gamma): unkeep one first")
    assert load_refusal(plan, "delta", []) == (
        "delta is not in the plan (lltui loads only the models it sized)"
    )
    small = plan_set([member(models, "beta", ["-c", "4096"], [gpu("CUDA0", 2)])], OPTS)
    alone = load_refusal(small, "beta", [])
    assert alone is not None and alone.startswith("beta does not fit on this rig even alone:")


# --- the command line ----------------------------------------------------------------------


def test_one_model_prints_what_it_always_printed(models, capsys):
    path = str(models["alpha"])
    args = ["fit", "-c", "512", path, "-np", "1", "--gpus", "T4", "--host-free", "64GiB"]
    assert main(args) == 0
    out = capsys.readouterr().out
    report = fit(
        FitRequest(
            model=path,
            args=parse_llama_args(["-c", "512", "-np", "1"]),
            gpus="T4",
            host_free_bytes=HOST,
        )
    )
    assert out == result_to_text(report.result) + "\n"


def test_flags_before_the_first_model_are_shared_and_after_a_model_its_own(models, capsys):
    a, b = str(models["alpha"]), str(models["beta"])
    argv = ["fit", "-np", "1", a, "-c", "1024", b, "-c", "2048", "--alias", "bee"]
    assert main([*argv, "--gpus", "24GiB", "--host-free", "64GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by_name = {m["name"]: m for m in data["models"]}
    assert set(by_name) == {"alpha", "bee"}
    assert by_name["alpha"]["fit"]["settings"]["n_ctx"] == 1024
    assert by_name["bee"]["fit"]["settings"]["n_ctx"] == 2048
    assert {m["fit"]["settings"]["n_parallel"] for m in data["models"]} == {1}
    assert data["fits"] is True and data["fit_together"] == [["alpha", "bee"]]
    assert [d["name"] for d in data["devices"]] == ["CUDA0", "CPU"]
    cuda = data["devices"][0]
    assert cuda["used_bytes"] == sum(cuda["models"].values())
    assert cuda["left_bytes"] == cuda["free_bytes"] - cuda["used_bytes"]


def test_the_text_says_the_verdict_and_what_fits(models, capsys):
    a, b, g = (str(models[n]) for n in ("alpha", "beta", "gamma"))
    argv = ["fit", a, "-c", "8192", b, "-c", "8192", g, "--gpus", "1100MiB"]
    assert main([*argv, "--host-free", "64GiB"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 models on CUDA0 and the host: they do not all fit together")
    assert "verdict: they do NOT fit together: CUDA0 short by" in out
    assert "\nfit together: " in out
    assert "pinned, as lltui launch --models writes them for the router:" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--best", "context"], "fit: --best and --oracle are for one model at a time"),
        (["--bogus-flag"], "has no --bogus-flag flag"),
        (["-m", "x.gguf"], "give each model as a word"),
    ],
)
def test_bad_input_is_one_line(models, capsys, extra, message):
    a, b = str(models["alpha"]), str(models["beta"])
    assert main(["fit", a, b, *extra, "--gpus", "T4"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_model_that_cannot_be_read_is_named(models, tmp_path, capsys):
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    assert main(["fit", str(models["alpha"]), str(junk), "--gpus", "T4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "junk.gguf" in err and len(err.splitlines()) == 1
    report = plan_models(
        PlanRequest(
            (
                PlanEntry(str(models["alpha"]), parse_llama_args([])),
                PlanEntry(str(junk), parse_llama_args([]), listed=True),
            ),
            gpus="T4",
        ),
    )
    assert [m.name for m in report.plan.models] == ["alpha"]
    assert report.left_out[0][0] == "junk"


def test_a_model_on_one_rpc_server_connects_to_that_one_only(models):
    """-dev picks one of two RPC servers: the preset names only that server (its server
    would connect to each one named, and each serves one at a time), renumbering -dev."""
    from lltui.services.launch.router_prep import section_for

    a, b = "127.0.0.1:50052", "127.0.0.1:50053"
    rpc = [rpc_device(a, 8 * GIB, 0, backend="cpu"), rpc_device(b, 8 * GIB, 1, backend="cpu")]
    rpc[1] = replace(rpc[1], dev_name="RPC1")
    flags = ["-c", "512", "--rpc", f"{a},{b}"]
    plan = plan_set(
        [
            member(models, "alpha", [*flags, "-dev", "RPC1"], rpc),
            member(models, "gamma", [*flags, "-dev", "RPC0"], rpc),
        ],
        OPTS,
    )
    alpha, gamma = plan.model("alpha"), plan.model("gamma")
    assert (alpha.rpc, alpha.rpc_renames) == ((b,), (("RPC1", "RPC0"),))
    assert (gamma.rpc, gamma.rpc_renames) == ((a,), ())
    assert plan.fits and not plan.conflicts
    section = dict(section_for(alpha, None))
    assert section["rpc"] == b and section["dev"] == "RPC0"


def test_the_python_api_gives_the_plan_as_fit_json_does(models):
    from lltui.api import plan_models as api_plan

    got = api_plan(
        [str(models["alpha"]), (str(models["gamma"]), ["-c", "1024"])],
        flags=["-np", "1"],
        gpus="24GiB",
    )
    assert [m["name"] for m in got["models"]] == ["alpha", "gamma"]
    assert got["models"][1]["n_ctx"] == 1024 and got["fits"] is True
    with pytest.raises(ValueError, match=r"nope\.gguf"):
        api_plan(["/nope.gguf", str(models["alpha"])], gpus="T4")


def test_models_on_different_devices_are_lowered_each_as_its_device_allows(models):
    devs = [gpu("CUDA0", 24), gpu("CUDA1", 40)]
    alpha = member(models, "alpha", ["-dev", "CUDA0"], devs)
    beta = member(models, "beta", ["-dev", "CUDA1"], devs)
    gamma = member(models, "gamma", ["-dev", "none"], devs)  # on the host: nothing to lower
    plan = plan_set([alpha, beta, gamma], OPTS)
    assert plan.fits
    a, b, g = (plan.model(n) for n in ("alpha", "beta", "gamma"))
    assert a.ctx_lowered and b.ctx_lowered and not g.ctx_lowered
    # each as far as its own device allows: one step more does not fit there
    for p, m in ((a, alpha), (b, beta)):
        assert p.n_ctx == p.max_ctx_alone or p.n_ctx + 256 > (p.max_ctx_alone or 0)
        up = plan_set(
            [replace(m, args=parse_llama_args([*m.args.to_argv(), "-c", str(p.n_ctx + 256)]))], OPTS
        )
        assert not up.fits


def test_a_key_among_the_flags_is_never_printed(models, capsys):
    key = "sk-plan-7d1e"
    a, b = str(models["alpha"]), str(models["beta"])
    for out in ("--json", None):
        argv = ["fit", "--api-key", key, a, b, "--gpus", "24GiB", "--host-free", "64GiB"]
        assert main([*argv, *([out] if out else [])]) == 0
        printed = capsys.readouterr()
        assert key not in printed.out + printed.err
    assert main([*argv, "--json"]) == 0
    args = json.loads(capsys.readouterr().out)["models"][0]["args"]
    assert args[args.index("--api-key") + 1] == "***"


def test_an_integrated_gpu_and_the_host_are_one_memory_for_the_set(tmp_path, capsys):
    """Two models at -ngl 20 on a Strix Halo with 10 GiB free: 3965 MiB each on ROCm0 and
    2049 each on the host, 12028 in all; the plan offered ROCm0 10 GiB and the host 10 GiB
    again, and said they fit together. As a single fit, the host has what the GPU leaves."""
    from support import gguf_factory as gf

    from lltui.core.fit.evict import Resident, decide, policy_from_plan

    a, b = (gf.write_sparse(tmp_path / f"{n}.gguf", gf.llama_8b_spec(), "Q4_K") for n in "ab")
    flags = ["-ngl", "20", "-c", "4096", str(a), str(b), "--gpus", "Strix Halo"]
    assert main(["fit", *flags, "--host-free", "10GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpu, host = data["devices"]
    assert gpu["name"] == "ROCm0" and gpu["free_bytes"] == 10 * GIB
    assert host["free_bytes"] == 10 * GIB - gpu["used_bytes"]
    assert data["fits"] is False and data["fit_together"] == [["a"], ["b"]]
    assert any("its memory is the host's" in n for n in data["notes"])

    # three such models: the gate and the router's evictions count the one memory too
    args = parse_llama_args(["-ngl", "20", "-c", "4096", "-cram", "0"])  # (no prompt cache)
    entries = tuple(PlanEntry(str(a), args, name=n) for n in ("a", "b", "c"))
    plan = plan_models(PlanRequest(entries, gpus="Strix Halo", host_free_bytes=10 * GIB)).plan
    assert plan.fit_together == (("a",), ("b",), ("c",))
    one = plan.model("a")
    # a model's server takes its ROCm0 and CPU buffers and its process of the one memory
    takes = one.bytes_on("ROCm0") + one.bytes_on("CPU") + SERVER_OVERHEAD_MIB * MIB
    left = 10 * GIB - takes
    assert load_refusal(plan, "b", []) is None
    assert f"the host has {left / MIB:.0f} MiB left, b needs {takes / MIB:.0f} MiB" in (
        load_refusal(plan, "b", ["a"]) or ""
    )
    decision = decide(policy_from_plan(plan, overhead_bytes=0), "b", [Resident("a")])
    assert decision.evict == ("a",)


@pytest.mark.parametrize(("total_gib", "free_gib"), [(24, 128), (128, 110)])
def test_a_named_integrated_gpu_has_the_single_fits_memory_in_a_set(
    tmp_path, capsys, monkeypatch, total_gib, free_gib
):
    """The plan read this machine's available memory and passed it on as given: a 24 GiB
    laptop planning two models on a 128 GiB Strix Halo was told the APU offers 110 GiB
    ("as given", where nothing was), where ``lltui fit`` of either model says 128."""
    from support import gguf_factory as gf

    from lltui.sources.gpu import meminfo

    monkeypatch.setattr(meminfo, "host_memory", lambda: (total_gib * GIB, 110 * GIB))
    monkeypatch.setattr(meminfo, "host_available", lambda: 110 * GIB)
    a, b = (gf.write_sparse(tmp_path / f"{n}.gguf", gf.llama_8b_spec(), "Q4_0") for n in "ab")
    assert main(["fit", str(a), "--gpus", "Strix Halo", "--json"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert main(["fit", str(a), str(b), "--gpus", "Strix Halo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpu = next(d for d in single["devices"] if d["kind"] == "cuda")
    room = next(d for d in data["devices"] if d["kind"] == "cuda")
    assert room["free_bytes"] == gpu["free_bytes"] == free_gib * GIB
    said = [n for n in data["notes"] if "its memory is the host's" in n]
    assert said == [n for n in single["notes"] if "its memory is the host's" in n]

"""fit --best decode|prompt|...: the planner's choice among splits, GPU sets, host experts and -ub,
on simulated rigs and real-size sparse models (no GPU needed)."""

import itertools
import json
from dataclasses import replace

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.cmdline.args import spell
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.best import Candidate, _rank, best_configs, speed_tier
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.fit.planner import PLAN_GOALS, plan_best, rank
from lltui.core.gguf.reader import read_gguf
from lltui.core.hardware.links import RigLinks
from lltui.core.llama.builds import rules_for
from lltui.core.memory.common import FitError
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.units import GIB
from lltui.services.devices import sim_devices

# a 3B-shaped dense model: small enough that -sm tensor's all-reduces are what decides
DENSE_3B = gf.llama_spec(
    n_embd=3072, n_ff=8192, n_head=24, n_head_kv=8, head_dim=128, n_layer=28, n_vocab=32000
)
DENSE_8B = gf.llama_8b_spec(n_vocab=32000)
MOE = gf.qwen3moe_30b_a3b_spec(n_vocab=32000, n_ctx_train=32768)
DENSE_8B_128K = gf.llama_8b_spec(n_vocab=32000, n_ctx_train=131072)
HOST = 256 * GIB
C4K = ["-c", "4096"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("planner")
    return {
        "3b": str(gf.write_sparse(d / "dense3b.gguf", DENSE_3B, "Q4_0")),
        "8b": str(gf.write_sparse(d / "dense8b.gguf", DENSE_8B, "F16")),
        "moe": str(gf.write_sparse(d / "moe.gguf", MOE, "Q8_0")),
        "8b-128k": str(gf.write_sparse(d / "dense8b-128k.gguf", DENSE_8B_128K, "F16")),
    }


def _pair(nvlink: bool) -> tuple[list, FitOptions]:
    """Two RTX 3090s bridged by NVLink, or each on PCIe 3.0 x4 with no peer access."""
    devs = parse_gpus_spec("RTX 3090,RTX 3090").devices
    if nvlink:
        devs = [replace(d, nvlink_active=4, pcie_gen=4, pcie_width=16) for d in devs]
    else:
        devs = [replace(d, nvlink_active=0, pcie_gen=3, pcie_width=4) for d in devs]
    links = RigLinks(nvlink=nvlink, p2p=nvlink)
    return devs, FitOptions(host_free_bytes=HOST, links=links)


def _best_of(plan, mode):
    return max(
        (o for o in plan.options if o.fits and o.split_mode == mode), key=lambda o: o.decode_tps
    )


def test_tensor_on_nvlink_layer_on_pcie_x4(models):
    model = read_gguf(models["3b"])
    fast_devs, fast = _pair(nvlink=True)
    slow_devs, slow = _pair(nvlink=False)
    on_nvlink = plan_best(model, parse_llama_args(C4K), fast_devs, fast)
    on_x4 = plan_best(model, parse_llama_args(C4K), slow_devs, slow)
    # the speed model decides, and the planner follows it both ways
    assert _best_of(on_nvlink, "tensor").decode_tps > _best_of(on_nvlink, "layer").decode_tps
    assert _best_of(on_x4, "layer").decode_tps > _best_of(on_x4, "tensor").decode_tps
    assert on_nvlink.best.split_mode == "tensor"
    assert spell("split_mode", "tensor") == tuple(on_nvlink.best.flags[:2])
    assert on_x4.best.split_mode == "layer"
    assert on_nvlink.split.winner == "tensor" and "faster" in on_nvlink.split.why
    assert on_x4.split.winner == "layer" and "all-reduces" in on_x4.split.why
    # the runner-up says why it lost
    assert "slower" in next(o for o in on_x4.options if o.split_mode == "tensor").lost


@pytest.mark.parametrize("goal", ["decode", "prompt"])
def test_tensor_or_layer_within_2_percent_names_the_one_ranked_first(goal):
    """Decodes 0.1 % apart tie, and the ranking puts first the one with the faster other
    speed; the answer named the other (a 30B-A3B F16 on a 4090 and a 3090: '1. -sm layer',
    then 'tensor or layer? tensor: about as fast', tensor's prompt a third of layer's)."""
    from lltui.core.fit.planner import PlanOption, split_answer

    layer = PlanOption("layer", ("CUDA0", "CUDA1"), 512, True, decode_tps=43.40)
    tensor = PlanOption("tensor", ("CUDA0", "CUDA1"), 512, True, decode_tps=43.45)
    if goal == "decode":
        layer, tensor = replace(layer, prefill_tps=3306.0), replace(tensor, prefill_tps=931.0)
    else:  # prompts 0.1 % apart: the faster decode ranks first
        layer = replace(layer, decode_tps=45.0, prefill_tps=931.0)
        tensor = replace(tensor, decode_tps=40.0, prefill_tps=931.5)
    ranked = rank(goal, [tensor, layer])
    assert ranked[0].split_mode == "layer"
    answer = split_answer(ranked, goal)
    assert answer.winner == "layer" and "about as fast" in answer.why
    assert answer.layer.split_mode == "layer" and answer.decode_gain == 0.0


def test_a_brute_force_agrees_with_the_first_choice(models):
    """Every split, set, order and -ub through the public estimate: none decodes faster
    than the planner's first (to the 2 % the ranking treats as equal)."""
    model = read_gguf(models["3b"])
    devs, opts = _pair(nvlink=True)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts)
    best = 0.0
    names = [d.name for d in devs]
    sets = [p for k in (1, 2) for p in itertools.permutations(names, k)]
    for mode, chosen, ub in itertools.product(("layer", "tensor"), sets, (256, 512, 1024, 2048)):
        if mode == "tensor" and len(chosen) < 2:
            continue
        argv = [*C4K, "-sm", mode, "-dev", ",".join(chosen), "-ub", str(ub)]
        res = estimate(model, parse_llama_args(argv), devs, opts)
        if res.fits:
            best = max(best, res.speed.decode_tps)
    assert speed_tier(plan.best.decode_tps, best) <= 0  # as fast, within 2 %


def test_a_brute_force_over_host_experts_and_ubatches_agrees(tmp_path):
    """Every --n-cpu-moe and -ub through the public estimate, on a GPU too small for the
    experts: none that fits decodes faster than the planner's first."""
    spec = gf.qwen3moe_30b_a3b_spec(n_vocab=32000, n_layer=12)
    model = read_gguf(gf.write_sparse(tmp_path / "moe12.gguf", spec, "Q8_0"))
    devs = parse_gpus_spec("4GiB").devices
    opts = FitOptions(host_free_bytes=HOST)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts)
    assert plan.best is not None and "host" in plan.best.offload
    best = 0.0
    for k, ub in itertools.product(range(13), (256, 512, 1024, 2048)):
        argv = [*C4K, "--n-cpu-moe", str(k), "-ub", str(ub)]
        res = estimate(model, parse_llama_args(argv), devs, opts)
        if res.fits:
            best = max(best, res.speed.decode_tps)
    assert best > 0 and speed_tier(plan.best.decode_tps, best) <= 0


def test_leaves_out_the_slower_gpus_of_a_mixed_rig(models):
    model = read_gguf(models["8b"])
    devs = sim_devices("2x4090-2x7900xtx")
    plan = plan_best(model, parse_llama_args(C4K), devs, FitOptions(host_free_bytes=HOST))
    first = plan.best
    whole = next(o for o in plan.options if o.fits and o.n_gpus == len(devs))
    assert 0 < first.n_gpus < len(devs)
    assert all(n.startswith("CUDA") for n in first.devices)  # the 4090s, not the 7900 XTXs
    assert "-dev" in first.flags
    assert first.decode_tps > whole.decode_tps
    # mixed backends are not split by tensor
    assert not any(
        o.split_mode == "tensor" and len({n[:4] for n in o.devices}) > 1 for o in plan.options
    )


def test_a_tensor_split_is_tried_over_the_gpus_of_one_backend_of_a_mixed_rig(tmp_path):
    """4090+3090+7900 XTX: tensor over all three is not tried (two backends), so its layer
    split stands for the whole rig; the two CUDA GPUs are still tried with -sm tensor
    (before, no tensor split was tried at all, and the 70B's first was a slower layer
    split). A 70B's shape, its weights a hole."""
    spec = gf.llama_spec(
        n_embd=8192, n_ff=28672, n_head=64, n_head_kv=8, head_dim=128, n_layer=80, n_vocab=32000
    )
    model = read_gguf(gf.write_sparse(tmp_path / "70b.gguf", spec, "Q4_0"))
    devs = parse_gpus_spec("4090,3090,7900xtx").devices
    opts = FitOptions(host_free_bytes=HOST)
    plan = plan_best(model, parse_llama_args(["-c", "8192"]), devs, opts)
    tensor = [o for o in plan.options if o.fits and o.split_mode == "tensor"]
    assert [o.devices for o in tensor] and all(o.devices == ("CUDA0", "CUDA1") for o in tensor)
    assert plan.best is not None and plan.best.decode_tps >= max(o.decode_tps for o in tensor)


def test_dev_given_names_the_gpus_to_choose_among(models):
    model = read_gguf(models["8b"])
    devs = sim_devices("2x4090-2x7900xtx")
    pool = [d.device_name for d in devs[2:]]  # the 7900 XTXs only
    args = parse_llama_args([*C4K, "-dev", ",".join(pool)])
    plan = plan_best(model, args, devs, FitOptions(host_free_bytes=HOST))
    assert all(set(o.devices) <= set(pool) for o in plan.options)
    assert "-dev" in plan.best.argv  # never the whole rig by default
    res = estimate(model, parse_llama_args(list(plan.best.argv)), devs, FitOptions())
    assert [d.name for d in res.devices if d.kind != "cpu"] == list(plan.best.devices)


def test_a_dev_given_out_of_order_keeps_every_option_what_fit_says(models):
    """-dev CUDA1,CUDA0 on a 4090+3060 rig: an option in llama.cpp's own order was printed
    without -dev but estimated in the -dev order (fit of its command did not fit)."""
    model = read_gguf(models["moe"])
    devs = parse_gpus_spec("4090,3060").devices
    opts = FitOptions(host_free_bytes=HOST)
    plan = plan_best(model, parse_llama_args([*C4K, "-dev", "CUDA1,CUDA0"]), devs, opts)
    fitting = [o for o in plan.options if o.fits]
    assert fitting
    for o in fitting:
        res = estimate(model, parse_llama_args(list(o.argv)), devs, opts)
        assert res.fits, o.argv
        gpus = [(d.name, d.total_bytes) for d in res.devices if d.kind != "cpu"]
        assert gpus == [(m.name, m.total_bytes) for m in o.memory], o.argv


def test_on_a_rig_of_three_kinds_the_fastest_gpu_alone_is_tried(models):
    """4090, 3090 and two 3060s make more sets than are tried: the largest were kept, and
    the 4090 alone (the fastest that holds the model) never came up."""
    model = read_gguf(models["3b"])
    devs = parse_gpus_spec("4090,3090,3060,3060").devices
    plan = plan_best(model, parse_llama_args(C4K), devs, FitOptions(host_free_bytes=HOST))
    assert plan.best.devices == ("CUDA0",), plan.best.argv


def test_servers_given_as_devices_are_in_the_commands_that_use_them(models):
    """--gpus rpc:HOST:PORT: a command with -dev RPC0 lacked --rpc (llama-server: invalid
    device RPC0)."""
    model = read_gguf(models["3b"])
    devs = parse_gpus_spec("4090,rpc:127.0.0.1:50052=24GiB").devices
    plan = plan_best(model, parse_llama_args(C4K), devs, FitOptions(host_free_bytes=HOST))
    fitting = [o for o in plan.options if o.fits]
    assert any("RPC0" in o.devices for o in fitting)
    for o in fitting:
        uses = any(n.startswith("RPC") for n in o.devices)
        assert ("--rpc" in o.argv) == uses, o.argv
        if uses:
            assert o.argv[o.argv.index("--rpc") + 1] == "127.0.0.1:50052"


def test_a_tensor_split_of_unequal_gpus_is_sized_to_their_room(models):
    """12 + 6 GiB: the tensor split fits only with -ts sized to each GPU's room (as fit
    suggests it); the planner tried none and offered tensor only with layers on the host."""
    model = read_gguf(models["8b"])
    devs = parse_gpus_spec("12GiB,6GiB").devices
    opts = FitOptions(host_free_bytes=HOST)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts)
    tensor = [o for o in plan.options if o.fits and o.split_mode == "tensor" and "-ts" in o.argv]
    assert any(o.offload == "" for o in tensor), [o.argv for o in tensor]
    for o in tensor:
        assert estimate(model, parse_llama_args(list(o.argv)), devs, opts).fits, o.argv


def test_moe_puts_the_fewest_experts_on_the_host(models):
    model = read_gguf(models["moe"])
    devs = parse_gpus_spec("16GiB").devices
    opts = FitOptions(host_free_bytes=HOST)
    plan = plan_best(model, parse_llama_args(["-c", "8192"]), devs, opts)
    first = plan.best
    ncmoe = spell("n_cpu_moe", 1)[0]
    assert ncmoe in first.argv and "host" in first.offload
    k = int(first.argv[first.argv.index(ncmoe) + 1])
    fewer = list(first.argv)
    fewer[fewer.index(ncmoe) + 1] = str(k - 1)
    assert estimate(model, parse_llama_args(list(first.argv)), devs, opts).fits
    assert not estimate(model, parse_llama_args(fewer), devs, opts).fits
    assert plan.split is None and "one GPU" in plan.tensor_note


@pytest.mark.parametrize("given", [["--n-cpu-moe", "20"], ["--cpu-moe"]])
def test_experts_given_to_the_host_are_the_planners_to_choose(models, given):
    """A --n-cpu-moe given was kept: every option carried its experts on the host, though
    the planner says it chooses them (the same plan as without it)."""
    model = read_gguf(models["moe"])
    devs = parse_gpus_spec("16GiB").devices
    opts = FitOptions(host_free_bytes=HOST)
    without = plan_best(model, parse_llama_args(["-c", "8192"]), devs, opts)
    plan = plan_best(model, parse_llama_args(["-c", "8192", *given]), devs, opts)
    assert plan.best.argv == without.best.argv
    assert "--cpu-moe" not in plan.best.argv


@pytest.fixture(scope="module")
def moe_f16(tmp_path_factory):
    """The 30B MoE in F16 (57 GiB): on two 24 GiB GPUs over PCIe 3.0 x4, experts go to the host."""
    path = gf.write_sparse(tmp_path_factory.mktemp("moe16") / "moe.gguf", MOE, "F16")
    devs, opts = _pair(nvlink=False)
    return read_gguf(str(path)), devs, opts


def test_a_layer_split_with_host_experts_sizes_ts_to_the_gpus_room(moe_f16):
    """--n-cpu-moe takes the first layers' experts, so llama.cpp's own split by free memory
    leaves the first GPU nearly empty: -ts sized to each GPU's room holds far more."""
    model, devs, opts = moe_f16
    plan = plan_best(model, parse_llama_args(["-c", "8192"]), devs, opts)
    layer = [o for o in plan.options if o.fits and o.split_mode == "layer" and o.n_ubatch == 512]
    own = next(o for o in layer if o.ts != "room")
    roomy = next(o for o in layer if o.ts == "room")
    ts, ncmoe = spell("tensor_split", (1,))[0], spell("n_cpu_moe", 1)[0]
    assert ts in roomy.argv and ts not in own.argv

    def experts(o):
        return int(o.argv[o.argv.index(ncmoe) + 1])

    assert experts(roomy) < experts(own) and roomy.decode_tps > own.decode_tps
    # what it says is what fit says of its command, and one expert fewer does not fit
    res = estimate(model, parse_llama_args(list(roomy.argv)), devs, opts)
    assert res.fits and res.speed.decode_tps == pytest.approx(roomy.decode_tps)
    fewer = list(roomy.argv)
    fewer[fewer.index(ncmoe) + 1] = str(experts(roomy) - 1)
    assert not estimate(model, parse_llama_args(fewer), devs, opts).fits
    assert plan.best.ts == "room" or plan.best.split_mode == "tensor"


def test_a_q8_0_kv_cache_is_offered_where_it_moves_experts_to_the_gpus(moe_f16):
    model, devs, opts = moe_f16
    plan = plan_best(model, parse_llama_args(["-c", "32768"]), devs, opts)
    kv = plan.kv_option
    assert kv is not None and kv.kv == "q8_0" and kv.fits
    for flag, value in (("type_k", "q8_0"), ("type_v", "q8_0"), ("flash_attn", "on")):
        i = kv.argv.index(spell(flag, value)[0])
        assert kv.argv[i + 1] == value
    assert kv.split_mode == "layer" and kv.decode_tps > plan.best.decode_tps
    assert kv.lost == "a little quality"
    res = estimate(model, parse_llama_args(list(kv.argv)), devs, opts)
    assert res.fits and res.speed.decode_tps == pytest.approx(kv.decode_tps)
    # never ranked among the options (a quality cost), never where the user chose a K/V type
    assert all(o.kv == "" for o in plan.options)
    given = ["-c", "32768", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"]
    assert plan_best(model, parse_llama_args(given), devs, opts).kv_option is None


def test_no_kv_option_where_nothing_goes_to_the_host(models):
    model = read_gguf(models["3b"])
    devs, opts = _pair(nvlink=False)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts)
    assert plan.best is not None and not plan.best.offload and plan.kv_option is None


@pytest.mark.parametrize("goal", PLAN_GOALS)
def test_each_option_is_what_fit_says_of_its_command(models, goal):
    """Memory per device of every option equals `fit` of its whole command line; speed too."""
    model = read_gguf(models["3b"])
    devs, opts = _pair(nvlink=True)
    plan = plan_best(model, parse_llama_args(["-c", "4096", "-np", "1"]), devs, opts, goal)
    fitting = [o for o in plan.options if o.fits]
    assert len(fitting) >= 4
    for o in fitting:
        res = estimate(model, parse_llama_args(list(o.argv)), devs, opts)
        assert res.fits
        gpus = [d for d in res.devices if d.kind != "cpu"]
        assert [(d.name, d.total_bytes) for d in gpus] == [
            (m.name, m.total_bytes) for m in o.memory
        ]
        assert res.speed.decode_tps == pytest.approx(o.decode_tps)


def test_what_fits_nowhere_says_which_side_is_short(models):
    model = read_gguf(models["8b"])
    args = parse_llama_args(C4K)
    no_host = plan_best(model, args, parse_gpus_spec("4GiB").devices, FitOptions(host_free_bytes=0))
    assert no_host.best is None and "host is over" in no_host.options[0].why_not
    small = FitOptions(host_free_bytes=4 * GIB)
    both = plan_best(model, args, parse_gpus_spec("4GiB").devices, small)
    assert both.best is None and "host cannot take" in both.options[0].why_not


def test_never_tensor_where_llama_cpp_refuses_it(models):
    model = read_gguf(models["3b"])
    devs, opts = _pair(nvlink=True)
    old = replace(opts, rules=rules_for(9454))  # before b9455 (#23792): no quantized K/V
    quantized = ["-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"]
    for argv, why, options in ((quantized, "quantized", old), (["-fa", "off"], "-fa off", opts)):
        plan = plan_best(model, parse_llama_args([*C4K, *argv]), devs, options)
        assert plan.options and all(o.split_mode == "layer" for o in plan.options)
        assert why in plan.tensor_note and plan.split is None
    # from b9455 llama.cpp splits a quantized K/V cache too
    plan = plan_best(model, parse_llama_args([*C4K, *quantized]), devs, opts)
    assert not plan.tensor_note and any(o.split_mode == "tensor" for o in plan.options)
    given = parse_llama_args([*C4K, *quantized, "-sm", "tensor"])
    assert estimate(model, given, devs, opts).fits
    with pytest.raises(FitError, match="before b9455"):  # the estimate of an older build's
        estimate(model, given, devs, old)


def test_no_gpu_plans_for_the_host_alone(models):
    model = read_gguf(models["3b"])
    plan = plan_best(model, parse_llama_args(C4K), (), FitOptions(host_free_bytes=HOST))
    assert plan.best is not None and plan.best.devices == () and plan.best.memory == ()
    assert "-sm" not in plan.best.flags and plan.best.joules_per_token is None
    assert plan.split is None and plan.tensor_note == "no GPU"


def test_no_gpu_and_nothing_fits_says_the_cpu(models, capsys):
    """The layout that did not fit read 'x -sm layer on : the host is over ...'."""
    argv = ["fit", models["3b"], *C4K, "--gpus", "cpu", "--host-free", "1GiB", "--best", "decode"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "  x on the CPU: the host is over even with nothing offloaded" in out
    assert " on :" not in out


def test_never_tensor_for_an_architecture_llama_cpp_does_not_split(tmp_path):
    path = tmp_path / "ds2.gguf"
    gf.write_model(path, gf.deepseek2_spec())
    model = read_gguf(path)
    devs, opts = _pair(nvlink=True)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts)
    assert plan.best is not None and all(o.split_mode == "layer" for o in plan.options)
    assert "does not implement -sm tensor for deepseek2" in plan.tensor_note


def test_best_keeps_a_given_tensor_split_only_where_llama_cpp_loads_it(tmp_path, capsys, models):
    """--best context and gpu-only add to the flags given: with -sm tensor, never a
    quantized K/V cache (llama.cpp refuses it), and for an architecture it does not split,
    one line saying so rather than lines none of which would load."""
    devs, opts = _pair(nvlink=True)
    old = replace(opts, rules=rules_for(9454))  # before b9455 (#23792)
    model = read_gguf(models["3b"])
    for goal in ("context", "gpu-only"):
        found = best_configs(model, parse_llama_args([*C4K, "-sm", "tensor"]), devs, old, goal)
        assert found and all(c.kv in ("f16", "") for c in found)
        assert not any("q8_0" in c.flags or "q4_0" in c.flags for c in found)
    # the newest builds take it (asked alone: beside f16 here it buys nothing, not listed)
    tensor = parse_llama_args([*C4K, "-sm", "tensor"])
    found = best_configs(model, tensor, devs, opts, "context", kv_types=["q8_0"])
    assert any(c.kv == "q8_0" for c in found)
    before = best_configs(model, tensor, devs, old, "context", kv_types=["q8_0"])
    assert all(c.kv != "q8_0" for c in before)
    path = tmp_path / "ds2.gguf"
    gf.write_model(path, gf.deepseek2_spec())
    argv = ["fit", str(path), *C4K, "-sm", "tensor", "--gpus", "3090,3090", "--best", "context"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not implement -sm tensor for deepseek2" in err[0]


@pytest.mark.parametrize(("one", "two"), [(173.1, 176.3), (100.0, 101.9), (102.0, 102.1)])
def test_within_2_percent_of_the_fastest_the_fewest_gpus_come_first(models, one, two):
    """Ties are counted from the fastest, not from fixed steps: a GPU 1.8 % slower than
    two ranks first (steps of log 1.02 put 173.1 and 176.3 on two sides of one)."""
    model = read_gguf(models["3b"])
    devs, opts = _pair(nvlink=True)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts)
    base = next(o for o in plan.options if o.fits)
    single = replace(base, decode_tps=one, devices=("CUDA0",))
    pair = replace(base, decode_tps=two, devices=("CUDA0", "CUDA1"))
    first, second = rank("decode", [pair, single])
    assert first is single and second.lost == "no better, on 2 GPUs against 1"
    assert speed_tier(one, two) == 0 and speed_tier(two * 0.979, two) == 1


def test_goals_rank_by_their_own_measure(models):
    model = read_gguf(models["3b"])
    devs, opts = _pair(nvlink=True)
    args = parse_llama_args(C4K)
    prompt = plan_best(model, args, devs, opts, "prompt")
    fits = [o for o in prompt.options if o.fits]
    assert speed_tier(fits[0].prefill_tps, max(o.prefill_tps for o in fits)) == 0
    joules = plan_best(model, args, devs, opts, "joules")
    fits = [o for o in joules.options if o.fits]
    assert fits[0].joules_per_token == min(o.joules_per_token for o in fits)
    fewest = plan_best(model, args, devs, opts, "fewest-gpus")
    fastest = max(o.decode_tps for o in fewest.options if o.fits)
    assert fewest.best.n_gpus == 1 and fewest.best.decode_tps >= 0.9 * fastest


def test_cli_json_and_text(models, capsys):
    argv = ["fit", models["8b"], *C4K, "--gpus", "sim:2x4090-2x7900xtx", "--best", "decode"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    plan = data["planner"]
    assert plan["goal"] == "decode" and plan["context"] == 4096
    win = plan["winner"]
    assert win["command"].startswith(f"llama-server -m {models['8b']} -c 4096 -sm ")
    assert win["fits"] and win["decode_tps"] > 0 and win["prefill_tps"] > 0
    assert {"name", "total_bytes", "free_bytes", "fits"} <= set(win["memory"][0])
    assert all(isinstance(m["total_bytes"], int) for m in win["memory"])
    assert plan["options"][0] == win
    assert all(o["lost"] for o in plan["options"][1:])
    assert "llama_fit" in data and "vs_llama_fit" in plan and "tensor_or_layer" in plan
    assert "kv_option" in plan  # null: the 8B fits the GPUs whole
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "best for decode at context 4096" in text
    assert "  1. llama-server -m " in text and "lost: " in text
    assert "llama.cpp's own --fit" in text


def test_the_flags_the_planner_replaces_are_said(models, capsys):
    """A -ts, -mg or -ncmoe given was dropped without a word (the header named neither)."""
    argv = ["fit", models["8b"], *C4K, "-ts", "3,1", "-mg", "1", "--gpus", "4090,3060"]
    assert main([*argv, "--best", "decode", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["planner"]["replaced"] == ["-ts", "3,1", "-mg", "1"]
    assert main([*argv, "--best", "decode"]) == 0
    assert "(-ts 3,1 -mg 1 given: the planner chooses these itself)" in capsys.readouterr().out
    assert main(["fit", models["8b"], *C4K, "--gpus", "4090,3060", "--best", "decode"]) == 0
    assert "given: the planner chooses" not in capsys.readouterr().out


def test_cli_bad_goal_is_one_line(models, capsys):
    assert main(["fit", models["3b"], "--gpus", "24GiB", "--best", "fastest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fastest" in err[0] and "decode" in err[0]


@pytest.mark.parametrize(
    ("model", "given", "why"),
    [
        ("8b", ["-ngl", "99"], "-ngl"),
        ("8b", ["-ts", "1,1"], "-ts"),
        ("moe", ["--n-cpu-moe", "4"], "--n-cpu-moe"),
        ("3b", ["-sm", "tensor"], "-sm tensor"),  # (--fit's first check: even where it fits)
        ("8b", ["-sm", "tensor", "-ngl", "99"], "-sm tensor"),
        ("8b", [], None),
        ("8b", ["-ngl", "99", "--fit", "off"], None),
        # -ngl auto is llama.cpp's default (-1): --fit places the layers as without it
        ("8b", ["-ngl", "auto"], None),
        ("8b", ["-ngl", "-1"], None),
        ("8b", ["-ngl", "all"], "-ngl"),
        # a placement of the user's that fits as given: --fit has nothing to change and
        # returns before it looks at -ngl, -ts or -ot (it said 'aborts' for these)
        ("3b", ["-ngl", "20"], None),
        ("3b", ["-ts", "1,1"], None),
        ("moe", ["--n-cpu-moe", "40"], None),
    ],
)
def test_says_when_llama_cpp_fit_aborts(models, capsys, model, given, why):
    gpus = "24GiB,24GiB" if model == "3b" else "8GiB,8GiB"
    argv = ["fit", models[model], *C4K, *given, "--gpus", gpus, "--best", "decode"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    aborts = data["planner"]["llama_fit_aborts"]
    assert (aborts is None) if why is None else (why in aborts)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert ("--fit aborts for the command given" in out) == (why is not None)
    if why is None and "--fit" not in given:
        assert "llama.cpp's own --fit would run:" in out


@pytest.mark.parametrize(("goal", "does"), [("prompt", "takes a prompt"), ("decode", "decodes")])
def test_the_planners_first_is_held_to_llama_fits_choice_at_the_goal(models, capsys, goal, does):
    """--best prompt compared the decode speeds (2.00x where the prompt's was 1.00x)."""
    argv = ["fit", models["8b"], "-c", "65536", "--gpus", "RTX 3060,RTX 3060", "--best", goal]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    key = "prefill_tps" if goal == "prompt" else "decode_tps"
    ours, theirs = data["planner"]["winner"][key], data["llama_fit"][key]
    assert data["planner"]["vs_llama_fit"] == pytest.approx(ours / theirs, abs=0.01)
    assert main(argv) == 0
    ratio = data["planner"]["vs_llama_fit"]
    assert f"the planner's first {does} {ratio:.2f}x as fast as --fit's choice" in (
        capsys.readouterr().out
    )


@pytest.mark.parametrize(
    ("gpus", "margin", "given", "ctx", "aborts", "flags"),
    [
        # llama-fit-params of the pinned build, on loopback RPC devices of 24105 MiB free
        # with --fit-target 3625: '-c 53760 -ngl 99' (one device: it stops at the cut)
        ("24105MiB", 3625, ["-ngl", "99"], 53760, None, ["-c", "53760"]),
        # two devices, --fit-target 11817 each: 'context size reduced from 131072 to 75008',
        # then 'n_gpu_layers already set by user to 99, abort'; without -ngl
        # '-c 75008 -ngl 33 -ts 16,17' (lltui's CUDA compute buffers leave 256 more)
        ("24105MiB,24105MiB", 11817, ["-ngl", "99"], 75264, "-ngl is set", ["-c", "75264"]),
        ("24105MiB,24105MiB", 11817, [], 75264, None, ["-c", "75264", "-ts", "16,17"]),
    ],
)
def test_llama_fit_cuts_an_unset_context_before_it_aborts(
    models, capsys, gpus, margin, given, ctx, aborts, flags
):
    """--fit cuts a context the user did not set first, then aborts on -ngl (several
    GPUs; the cut context stays) or stops there (one GPU); lltui said it aborts outright."""
    argv = ["fit", models["8b-128k"], "-np", "1", *given, "--gpus", gpus]
    argv += ["--margin", str(margin), "--best", "decode"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["planner"]["llama_fit_aborts"] == aborts
    assert data["llama_fit"]["flags"] == flags and data["llama_fit"]["n_ctx"] == ctx
    assert main(argv) == 0
    out = capsys.readouterr().out
    if aborts:
        assert f"--fit cuts the context to {ctx}, then aborts (-ngl is set)" in out
    else:
        assert f"--fit would run: {' '.join(flags)} (context {ctx}," in out


def test_the_most_layers_on_the_faster_gpu_of_a_mixed_pair(tmp_path):
    """A model that needs both GPUs of a 3090 and a 3060 (tensor refused: a q8_0 K/V cache
    before b9455):
    the layer split with the most layers on the faster card is searched, and the first
    choice (fit --best speed's) decodes no slower than the speed goal's own search did."""
    from lltui.core.fit.best import best_configs

    spec = gf.llama_spec(n_embd=5120, n_ff=13824, n_head=40, n_head_kv=40, n_layer=52)
    model = read_gguf(gf.write_sparse(tmp_path / "dense13b.gguf", spec, "F16"))
    devs = parse_gpus_spec("RTX 3090,RTX 3060").devices
    opts = FitOptions(host_free_bytes=HOST, rules=rules_for(9454))
    args = parse_llama_args([*C4K, "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])
    plan = plan_best(model, args, devs, opts)
    assert plan.tensor_note and plan.best is not None and plan.best.n_gpus == 2
    fast = next(o for o in plan.options if o.fits and o.ts == "speed")
    own = next(o for o in plan.options if o.fits and not o.ts and o.n_gpus == 2)
    assert fast.decode_tps > own.decode_tps and "-ts" in fast.flags
    res = estimate(model, parse_llama_args(list(fast.argv)), devs, opts)  # its whole command
    assert res.fits and res.speed.decode_tps == pytest.approx(fast.decode_tps)
    assert plan.best.decode_tps == max(o.decode_tps for o in plan.options if o.fits)
    old = best_configs(model, args, devs, opts, "speed")[0]
    assert speed_tier(plan.best.decode_tps, old.decode_tps) <= 0


@pytest.mark.parametrize("goal", ["joules", "fewest-gpus"])
def test_ties_break_on_prompt_and_each_lost_says_what_is_true(models, goal):
    """Within 2 % on the goal (and on decode), the faster prompt first; "as fast a decode"
    is said only of a decode within 2 % of the first's."""
    model = read_gguf(models["8b"])
    devs, opts = _pair(nvlink=True)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts, goal)
    fits = [o for o in plan.options if o.fits]
    first, fastest = fits[0], max(o.decode_tps for o in fits)
    for o in fits[1:]:
        if o.lost.startswith("as fast a decode"):
            assert speed_tier(o.decode_tps, fastest) == speed_tier(first.decode_tps, fastest)
            assert o.prefill_tps <= first.prefill_tps, (o.lost, o.flags)
        if o.lost.startswith("decode "):
            assert o.decode_tps < first.decode_tps


@pytest.mark.parametrize("given", [["--n-cpu-moe", "20"], ["-ot", "exps=CPU"]])
def test_gpu_only_with_weights_given_to_the_cpu_is_one_line(models, capsys, given):
    """--best gpu-only adds to the flags given: with these, its first line held GBs on the
    CPU while the goal says nothing is there."""
    argv = ["fit", str(models["moe"]), *given, "--best", "gpu-only", "--gpus", "16GiB"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "keeps weights on the CPU" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("verb", ["fit", "quant"])
def test_gpu_only_with_no_gpu_is_one_line(models, capsys, verb):
    """--gpus cpu --best gpu-only printed -ngl all, "gives up: nothing", all on the host."""
    assert main([verb, str(models["3b"]), "--best", "gpu-only", "--gpus", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no GPU" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("verb", "goals"), [("fit", ("decode", "prompt")), ("quant", ("context", "speed"))]
)
def test_two_goals_are_one_line(models, capsys, verb, goals):
    """--best decode --best prompt took the last silently."""
    argv = [verb, str(models["3b"]), "--gpus", "4090", "--best", goals[0], "--best", goals[1]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--best given twice" in err and len(err.splitlines()) == 1


def test_llama_fits_own_choice_is_priced_with_the_threads_given(models, capsys):
    """--fit's choice left -t out: on a CPU-only rig with -t 1 it was priced with every
    thread, 1.4-1.8x faster than the same command, and the comparison skewed with it."""
    argv = ["fit", models["8b"], *C4K, "--gpus", "cpu", "-t", "1", "--best", "speed", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["llama_fit"]["decode_tps"] == pytest.approx(data["speed"]["decode_tps"], rel=0.1)


def test_one_layer_and_one_thread_are_said_in_the_singular(models, capsys):
    """'experts of 1 layers on the host' (the planner's and --fit's choice), '... on the
    CPU' (--best context's trade) and 'a desktop CPU: 1 threads'."""
    said = ""
    for gib, goal in (("31500MiB", "decode"), ("31500MiB", "context"), ("32800MiB", "context")):
        argv = ["fit", models["moe"], *C4K, "--gpus", f"4090={gib}", "-t", "1", "--best", goal]
        assert main(argv) == 0
        said += capsys.readouterr().out
    assert "experts of 1 layer on the host" in said and "experts of 1 layer on the CPU" in said
    assert "(experts of 1 layer on the host)" in said  # llama.cpp's --fit's choice
    assert ": 1 thread," in said
    assert " 1 layers" not in said and " 1 threads" not in said


@pytest.mark.parametrize(
    ("name", "gpus", "ctx", "host_gib", "expect"),
    [
        # the default split by free memory overfills the 8 GiB GPUs until the experts of
        # 38 layers are on the host; --fit sets each GPU's layers itself
        ("moe", "16GiB,8GiB,8GiB", 4096, 256, ("--n-cpu-moe", "4", "-ts", "27,11,11")),
        # every expert on the host is more than it has: --fit does not look at the host
        ("moe", "16GiB,8GiB,8GiB", 4096, 8, ("--n-cpu-moe", "4", "-ts", "27,11,11")),
        ("8b", "RTX 3060,RTX 3060", 65536, 8, ("-ngl", "32")),
        ("8b", "RTX 3060,RTX 3060", 65536, 0.5, ("-ngl", "32")),  # said short of memory
    ],
)
def test_llama_fits_own_choice_fills_each_gpu_and_leaves_the_host_alone(
    models, name, gpus, ctx, host_gib, expect
):
    """--fit's choice was sought with llama.cpp's default split and had to fit the host
    too: on a mixed rig it was priced with 38 layers' experts on the host (3x too slow), or
    was not shown at all where the host could not take every expert or layer."""
    from lltui.core.fit.llama_fit import llama_fit_choice

    model = read_gguf(models[name])
    devs = parse_gpus_spec(gpus).devices
    opts = FitOptions(host_free_bytes=int(host_gib * GIB))
    args = parse_llama_args(["-c", str(ctx)])
    choice = llama_fit_choice(model, args, devs, opts)
    assert choice is not None and choice.flags == expect
    res = estimate(model, parse_llama_args(["-c", str(ctx), *expect]), devs, opts)
    assert all(d.fits for d in res.devices if d.kind != "cpu")
    assert choice.decode_tps == pytest.approx(res.speed.decode_tps)
    host_fits = all(d.fits for d in res.devices if d.kind == "cpu")
    assert ("GiB short of memory for it" in choice.why) is not host_fits


LLAMA_70B = gf.llama_spec(
    n_embd=8192, n_ff=28672, n_head=64, n_head_kv=8, head_dim=128, n_layer=80, n_vocab=32000
)


def _ts(option) -> list[int]:
    argv = list(option.argv)
    return [int(x) for x in argv[argv.index("-ts") + 1].split(",")] if "-ts" in argv else []


def test_a_tensor_split_shares_every_tensor_by_room_or_speed_and_smaller_sets_are_tried(
    tmp_path,
):
    """70B Q4_0 on 4090, 4090, 3060: the even cut overflows the 3060. The room split was a
    layer split's counts filled back to front (-ts 9,48,24: one 4090 a fifth of the other's
    share, 5 layers on the host), so the whole rig's tensor split needed the host and the
    two 4090s alone were never tried in tensor mode, though they decode fastest."""
    model = read_gguf(str(gf.write_sparse(tmp_path / "l70.gguf", LLAMA_70B, "Q4_0")))
    devs = parse_gpus_spec("RTX 4090,RTX 4090,RTX 3060").devices
    opts = FitOptions(host_free_bytes=HOST)
    plan = plan_best(model, parse_llama_args(C4K), devs, opts)
    best = plan.options[0]
    assert (best.split_mode, best.devices) == ("tensor", ("CUDA0", "CUDA1")), best.argv
    whole = [o for o in plan.options if o.split_mode == "tensor" and len(o.devices) == 3 and _ts(o)]
    assert whole and all(o.fits and o.offload == "" for o in whole), [o.argv for o in whole]
    for o in whole:
        a, b, c = _ts(o)
        assert a == b > c, o.argv  # the 4090s alike, the slower and smaller 3060 less
        assert estimate(model, parse_llama_args(list(o.argv)), devs, opts).fits, o.argv


def test_an_even_tensor_split_is_not_offered_again_as_a_ts(tmp_path):
    """-sm tensor's default cut is even: -ts 17,17 was the same command said twice (two
    GPUs of one size, experts on the host: the room split tried is the even one)."""
    spec = gf.qwen3moe_235b_a22b_spec()
    model = read_gguf(str(gf.write_sparse(tmp_path / "q235.gguf", spec, "Q4_0")))
    devs = parse_gpus_spec("RTX 4090,RTX 3090").devices
    plan = plan_best(model, parse_llama_args(C4K), devs, FitOptions(host_free_bytes=HOST))
    for o in plan.options:
        ts = _ts(o)
        assert not ts or len(set(ts)) > 1, o.argv


@pytest.mark.parametrize("goal", ["context", "speed"])
def test_lines_alike_but_for_their_prompt_rank_the_faster_prompt_first(goal):
    def line(flag: str, prefill: float) -> Candidate:
        return Candidate((flag,), 8192, 40.0, prefill, True, True, ())

    slow, fast = line("-ub 256", 900.0), line("-ub 512", 1500.0)
    assert [c.flags for c in _rank([slow, fast], goal)] == [fast.flags, slow.flags]


def test_decode_at_the_context_stops_where_llama_server_caps_the_slots(tmp_path, capsys):
    """--best's 'decode at the context' is fit's 'at a full context': -c 1000000 -np 1 on a
    model trained at 4096 reads no more than the slot's 4096 cells; the planner priced a
    million cells deep (1.8 t/s on a CPU against fit's 367)."""
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(n_ctx_train=4096))
    for flags in (["-c", "1000000", "-np", "1"], ["-c", "8192", "-np", "2"], ["-c", "1000000"]):
        argv = ["fit", str(path), "--gpus", "cpu", *flags, "--best", "decode", "--json"]
        assert main(argv) == 0
        out = json.loads(capsys.readouterr().out)
        deep = {o["decode_tps_at_context"] for o in out["planner"]["options"] if o["fits"]}
        assert deep == {out["speed"]["decode_tps_full_ctx"]}, flags
    # and the text says so: a full context, not the -c asked (1000000 cells were not priced)
    assert main(["fit", str(path), "--gpus", "cpu", "-c", "1000000", "--best", "decode"]) == 0
    text = capsys.readouterr().out
    assert "at a full context), prompt" in text and "at 1000000)" not in text


def test_llama_fits_prompt_is_priced_as_the_planners(models, capsys):
    """--best prompt held the planner's 2048-token prompt to --fit's 512-token one: on one
    RTX 3060 --fit's own -ngl 24, ranked third by the planner, read as faster than the
    planner's first ('takes a prompt 0.86x as fast')."""
    argv = ["fit", models["8b"], *C4K, "--gpus", "RTX 3060", "--best", "prompt", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    fit = data["llama_fit"]
    said = " -sm layer " + " ".join(fit["flags"])  # (--fit's -ngl, the planner's -ub unset)
    same = [o for o in data["planner"]["options"] if o["command"].endswith(said)]
    assert same and same[0]["prefill_tps"] == pytest.approx(fit["prefill_tps"], rel=0.01)
    assert data["planner"]["vs_llama_fit"] >= 1.0

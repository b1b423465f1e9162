"""The speed model's shape: MoE, layer split, host experts, links, depth, bounds, and the
GPU table behind it (every NVML name). Its numbers against published llama-bench results
are in test_speed_published.py."""

import json
from itertools import pairwise

import pytest
from support import gguf_factory as gf
from support import speed_published as sp

from lltui.cli import main
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.hardware.gpus import all_gpus, find_gpu
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.speed.model import estimate_speed

# llama-bench's models, as shapes (the data is a hole in a sparse file)
LLAMA7B = sp.SHAPES["llama2-7b"]
LLAMA8B = gf.llama_8b_spec(n_ctx_train=131072)  # Llama 3.1 8B: deep contexts are real ones
LLAMA3B = sp.SHAPES["llama3.2-3b"]
SHAPES = {
    "llama 7B Q4_0": (LLAMA7B, "Q4_0"),
    "llama 7B Q8_0": (LLAMA7B, "Q8_0"),
    "llama 7B F16": (LLAMA7B, "F16"),
    "llama 8B Q4_0": (LLAMA8B, "Q4_0"),
    "llama 3B Q4_K_M": (LLAMA3B, "Q4_K"),
}
MOE = gf.qwen3moe_30b_a3b_spec(n_vocab=32000)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("speed")
    out = {}
    for name, (spec, wtype) in SHAPES.items():
        out[name] = read_gguf(gf.write_sparse(d / f"{name.replace(' ', '-')}.gguf", spec, wtype))
    out["moe"] = read_gguf(gf.write_sparse(d / "moe.gguf", MOE, "Q4_K"))
    return out


def _speed(model, gpus, *flags):
    devs = parse_gpus_spec(gpus).devices
    res = estimate(model, parse_llama_args(["-c", "4096", *flags]), devs, FitOptions(search=False))
    assert res.speed is not None
    return res


def test_moe_decode_reads_only_the_experts_used(models):
    res = _speed(models["moe"], "h100", "-ngl", "99")
    cuda = res.speed.devices[0]
    total = sum(d.weights_bytes for d in res.devices if d.name == "CUDA0")
    # 8 of 128 experts: far less than the weights on the device is read per token
    assert cuda.decode_bytes < 0.25 * total
    assert res.speed.bound == "memory" and res.speed.decode_tps > 50


def test_experts_on_the_host_slow_decode_and_make_prompts_link_bound(models):
    on_gpu = _speed(models["moe"], "4090,4090", "-ngl", "99").speed
    host = _speed(models["moe"], "4090,4090", "-ngl", "99", "--n-cpu-moe", "24").speed
    assert host.decode_tps < on_gpu.decode_tps / 2
    cpu = next(d for d in host.devices if d.name == "CPU")
    assert cpu.decode_ms > 1 and cpu.prefill_bound == "link"


def test_a_layer_split_adds_device_times_and_hops(models):
    one = _speed(models["llama 8B Q4_0"], "h100", "-ngl", "99").speed
    two = _speed(models["llama 8B Q4_0"], "h100,h100", "-ngl", "99").speed
    assert [d.name for d in two.devices][:2] == ["CUDA0", "CUDA1"]
    assert two.link_decode_ms > 0
    assert two.decode_tps < one.decode_tps  # same bytes, plus a hop
    assert two.decode_tps == pytest.approx(one.decode_tps, rel=0.1)
    pcie = _speed(models["llama 8B Q4_0"], "4090,4090", "-ngl", "99").speed
    assert pcie.link_decode_ms > two.link_decode_ms  # PCIe hop slower than NVLink


def test_depth_costs_kv_reads(models):
    res = _speed(models["llama 8B Q4_0"], "4090", "-ngl", "99", "-c", "32768")
    deep = estimate_speed(models["llama 8B Q4_0"], res, depth=32000)
    assert deep.decode_tps < res.speed.decode_tps
    assert res.speed.decode_tps_full < res.speed.decode_tps


def test_a_sequence_reads_only_its_own_stream_of_the_kv_cache(models):
    """-np 4 without -kvu: four streams of 4096 cells, and a sequence's decode reads its
    own. Each cell was priced at the bytes of all four streams (-c 16384 -np 4 decoded at
    a full context as slowly as one sequence 16384 deep)."""
    m = models["llama 8B Q4_0"]
    four = _speed(m, "4090", "-ngl", "99", "-c", "16384", "-np", "4").speed
    one = _speed(m, "4090", "-ngl", "99", "-c", "4096", "-np", "1").speed
    deep = _speed(m, "4090", "-ngl", "99", "-c", "16384", "-np", "1").speed
    assert four.decode_tps_full == pytest.approx(one.decode_tps_full, rel=0.01)
    assert four.decode_tps_full > deep.decode_tps_full * 1.05


def test_a_full_context_stops_where_llama_server_caps_the_slots(tmp_path, capsys):
    """-c 1000000 on a model trained at 4096: llama-server caps each slot at 4096, so no
    token reads more cells than the slots reach; decode "at a full context" was priced a
    million cells deep (~18 t/s for the demo model on a CPU, ~1447 at 4096)."""
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(n_ctx_train=4096))

    def full(*flags):
        assert main(["fit", str(path), "--gpus", "cpu", "--json", *flags]) == 0
        return json.loads(capsys.readouterr().out)["speed"]["decode_tps_full_ctx"]

    trained = full("-c", "4096", "-np", "1")
    assert full("-c", "1000000", "-np", "1") == trained  # one slot: the trained context
    assert full("-c", "1000000", "-np", "2") == trained  # a stream a slot
    assert full("-c", "1000000") == full("-c", "16384")  # one unified cache of 4 slots
    # RoPE scaling asked for: the context asked is what a slot reaches
    assert full("-c", "1000000", "-np", "1", "--rope-scaling", "yarn") < trained / 10


@pytest.mark.parametrize("flags", [("-nkvo",), ("-fa", "off"), ("-sm", "tensor")])
def test_decode_at_a_full_context_is_the_estimate_at_that_depth(models, flags):
    """The "at a full context" figure priced the KV past depth at memory bandwidth alone:
    -nkvo's copies over PCIe, -fa off's reads per query head and a tensor split's shares
    were left out (132 t/s shown, 17 at that depth with -nkvo)."""
    res = _speed(models["llama 8B Q4_0"], "4090,4090", "-ngl", "99", "-c", "8192", *flags)
    full = estimate_speed(models["llama 8B Q4_0"], res, depth=8192)
    assert res.speed.decode_tps_full == pytest.approx(full.decode_tps)
    if flags == ("-nkvo",):
        on_gpu = _speed(models["llama 8B Q4_0"], "4090,4090", "-ngl", "99", "-c", "8192")
        assert res.speed.decode_tps_full < 0.5 * on_gpu.speed.decode_tps_full


def test_a_tensor_split_runs_each_gpu_s_share_of_the_weights(models):
    """-sm tensor's speed split the work evenly whatever -ts gave each GPU: -ts 9,1 and
    -ts 1,3 on a 4090 and a 3060 were both 93 t/s."""
    m = models["llama 8B Q4_0"]
    more_on_fast = _speed(m, "4090,3060", "-ngl", "99", "-sm", "tensor", "-ts", "9,1").speed
    even = _speed(m, "4090,3060", "-ngl", "99", "-sm", "tensor").speed
    more_on_slow = _speed(m, "4090,3060", "-ngl", "99", "-sm", "tensor", "-ts", "1,3").speed
    assert more_on_fast.decode_tps > even.decode_tps > more_on_slow.decode_tps
    cuda0, cuda1 = more_on_fast.devices[:2]
    assert cuda0.decode_ms > 1.5 * cuda1.decode_ms  # the 4090 holds 9 tenths


def test_an_unknown_gpu_is_assumed_and_said(models):
    s = _speed(models["llama 7B Q4_0"], "24GiB", "-ngl", "99").speed
    assert s.devices[0].assumed and any("assumed" in n for n in s.notes)


NVML_NAMES = [
    "NVIDIA GeForce RTX 4090",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA A100 80GB PCIe",
    "NVIDIA RTX 6000 Ada Generation",
    "Tesla V100-PCIE-16GB",
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
    "NVIDIA H100 80GB HBM3",
    "NVIDIA H100 PCIe",
    "NVIDIA GeForce RTX 3090",
    "Tesla P40",
    "Tesla T4",
    "NVIDIA L4",
    "NVIDIA L40S",
    "NVIDIA H200",
    "NVIDIA B200",
    "NVIDIA GeForce RTX 5090",
    "NVIDIA A100-SXM4-40GB",
    "Tesla V100-SXM2-32GB",
    "NVIDIA A10",
    "NVIDIA GH200 480GB",
    "NVIDIA H100 NVL",
    "NVIDIA L40",
    "NVIDIA RTX A6000",
    "Quadro RTX 6000",
    "NVIDIA GeForce RTX 4080 SUPER",
    "NVIDIA GeForce RTX 4070 Ti SUPER",
    "NVIDIA GeForce RTX 4090 D",
    "NVIDIA GeForce RTX 5070",
    "NVIDIA GeForce RTX 5060 Ti",
    "NVIDIA RTX PRO 4000 Blackwell",
    "NVIDIA GeForce GTX 1080 Ti",
    "NVIDIA GeForce RTX 2080 Ti",
    "NVIDIA GeForce RTX 3060",
]


@pytest.mark.parametrize("name", NVML_NAMES)
def test_every_nvml_name_is_known(name):
    hit = find_gpu(name)
    assert hit is not None
    assert parse_gpus_spec(name).devices[0].description == hit.name


@pytest.mark.parametrize(
    ("short", "full"),
    [
        ("4090", "NVIDIA GeForce RTX 4090"),
        ("a100-80g", "NVIDIA A100-SXM4-80GB"),
        ("a100-40gb", "NVIDIA A100-SXM4-40GB"),
        ("h100", "NVIDIA H100 80GB HBM3"),
        ("RTX 4090", "NVIDIA GeForce RTX 4090"),
        ("2xT4", "Tesla T4"),
        ("P40", "Tesla P40"),
        ("l40s", "NVIDIA L40S"),
        ("a10", "NVIDIA A10"),
        ("h200", "NVIDIA H200"),
        ("gh200", "NVIDIA GH200 480GB"),
        ("b200", "NVIDIA B200"),
        ("5090", "NVIDIA GeForce RTX 5090"),
        ("pro6000", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"),
        ("6000 Ada", "NVIDIA RTX 6000 Ada Generation"),
        ("v100-pcie-16gb", "Tesla V100-PCIE-16GB"),
        ("A100 80GB PCIe", "NVIDIA A100 80GB PCIe"),
        ("4080 super", "NVIDIA GeForce RTX 4080 SUPER"),
    ],
)
def test_short_names(short, full):
    assert parse_gpus_spec(short).devices[0].description == full


def test_the_table_has_one_row_per_name_and_sane_numbers():
    names = [g.name for g in all_gpus()]
    assert len(names) == len(set(names))
    for g in all_gpus():
        # from a 2 GB GTX 1050 or a Jetson's shared LPDDR to a B300
        assert g.mib >= 2048 and 30 < g.bandwidth_gbs < 10000, g.name
        assert g.fp16_tflops > 0.5 and g.int8_tops > 1, g.name
        # a unified-memory device has no PCIe link to the host; CMP mining cards run Gen 1
        assert (g.unified and g.pcie_gen == 0) or 1 <= g.pcie_gen <= 6, g.name
        assert g.source, g.name
    assert find_gpu("24GiB") is None and find_gpu("banana") is None


def test_fit_json_and_text_carry_speed(tmp_path, capsys):
    path = gf.write_sparse(tmp_path / "m.gguf", LLAMA7B, "Q4_0")
    assert main(["fit", str(path), "--gpus", "4090,3090", "--json"]) == 0
    speed = json.loads(capsys.readouterr().out)["speed"]
    assert {"decode_tps", "prefill_tps", "bound", "devices"} <= set(speed)
    assert speed["bound"] in ("memory", "compute", "link")
    for d in speed["devices"]:
        assert {"name", "decode_ms", "prefill_ms", "bound"} <= set(d)
    assert [d["name"] for d in speed["devices"]][:2] == ["CUDA0", "CUDA1"]
    assert main(["fit", str(path), "--gpus", "4090"]) == 0
    out = capsys.readouterr().out
    assert "speed: decode ~" in out and "(512 tokens, " in out  # how long a prompt it priced


def test_a_ubatch_past_512_is_priced_on_a_prompt_it_fills(models):
    """fit priced every prompt at 512 tokens, so a -ub 2048 the user gave read as -ub 512,
    at 512's speed (and --best priced the same command on 2048 tokens)."""
    plain = _speed(models["moe"], "h100", "-ngl", "99").speed
    big = _speed(models["moe"], "h100", "-ngl", "99", "-ub", "2048").speed
    assert (plain.prompt_tokens, plain.n_ubatch) == (512, 512)
    assert (big.prompt_tokens, big.n_ubatch) == (2048, 2048)
    assert big.prefill_tps != plain.prefill_tps
    capped = _speed(models["moe"], "h100", "-ngl", "99", "-ub", "2048", "-b", "1024").speed
    assert capped.prompt_tokens == 1024  # a ubatch is at most a batch


def test_the_fit_view_shows_the_speed_line_and_quant_speeds(tmp_path):
    from lltui.app.screens.fit import QUANT_COLUMNS, render_verdict
    from lltui.app.state.fit import FitRequest, compute

    path = gf.write_sparse(tmp_path / "m.gguf", LLAMA7B, "Q4_0")
    out = compute(FitRequest(1, str(path), {"ctx": "2048"}, "", "sim:4xl4"), None)
    assert out.error is None and out.result.speed is not None
    assert "speed: decode ~" in render_verdict(out)
    assert "t/s" in [heading for _k, heading, _w, _n in QUANT_COLUMNS]
    assert all(q.decode_tps for q in out.quants if q.result is not None)


def test_the_fit_view_says_if_it_fit_of_settings_that_do_not(tmp_path):
    """The CLI said "speed (if it fit)", the view a plain "speed:" under "does not fit"."""
    from lltui.app.screens.fit import render_verdict
    from lltui.app.state.fit import FitRequest, compute_estimate

    path = gf.write_sparse(tmp_path / "m.gguf", LLAMA8B, "F16")
    out = compute_estimate(
        FitRequest(1, str(path), {"ctx": "4096"}, "-sm none -ngl 999", "sim:kaggle-2xt4"), None
    )
    assert out.result is not None and not out.result.fits and out.result.speed is not None
    shown = render_verdict(out)
    assert "speed (if it fit): decode ~" in shown and "speed: " not in shown


def test_the_fit_views_fastest_command_keeps_each_flag_with_its_value():
    """The view dropped the words the user had typed anywhere: "-sm tensor all -ub 2048"
    for -ngl 999, "tensor -ngl all" for -sm none."""
    from lltui.app.state.fit import plan_text
    from lltui.core.fit.planner import PlanOption, PlanResult

    best = PlanOption(
        "tensor", ("CUDA0", "CUDA1"), 2048, True,
        flags=("-sm", "tensor", "-ngl", "all", "-ub", "2048", "-c", "4096"), decode_tps=90.0,
    )  # fmt: skip
    (line, *_) = plan_text(PlanResult("decode", 4096, (best,), None, "", 10))
    assert line.startswith("fastest (decode): -sm tensor -ngl all -ub 2048 -c 4096: ~90 t/s")


def test_a_present_gpu_reports_its_own_pcie_link(models):
    from dataclasses import replace as dc_replace

    from lltui.core.hardware.gpus import GpuSpec

    model = models["llama 8B Q4_0"]
    devs = parse_gpus_spec("4090,4090").devices
    narrow = tuple(dc_replace(d, pcie_gen=3, pcie_width=4) for d in devs)
    st = parse_llama_args(["-c", "4096", "-ngl", "99"])
    wide = estimate(model, st, devs, FitOptions(search=False)).speed
    slow = estimate(model, st, narrow, FitOptions(search=False)).speed
    assert slow.link_prefill_ms > wide.link_prefill_ms * 4
    assert GpuSpec.__dataclass_fields__["pcie_width"].default == 16
    assert find_gpu("4060 Ti").pcie_width == 8


def _sim_sample(profile: str):
    from lltui.sources.gpu.kinds import SourceSpec, make_source

    source = make_source(SourceSpec("sim", profile))
    source.open()
    try:
        return source.poll()
    finally:
        source.close()


def test_devices_from_a_sample_carry_the_pcie_link():
    from lltui.services.devices import devices_from_sample

    sample = _sim_sample("kaggle-2xt4")
    devs = devices_from_sample(sample)
    gens = sorted(g.info.pcie_gen_max or 0 for g in sample.gpus)
    assert devs and sorted(d.pcie_gen or 0 for d in devs) == gens


def test_devices_from_a_sample_carry_power_limits_and_nvlink():
    from dataclasses import replace as dc_replace

    from lltui.services.devices import devices_from_sample

    sample = _sim_sample("2x3090-nvlink")
    devs = devices_from_sample(sample)
    assert [d.power_limit_w for d in devs] == [g.power_limit_w for g in sample.gpus]
    assert all(d.power_default_w and d.max_sm_clock_mhz for d in devs)
    capped = dc_replace(sample, gpus=tuple(dc_replace(g, power_limit_w=150.0) for g in sample.gpus))
    assert all(d.power_limit_w == 150.0 for d in devices_from_sample(capped))


def test_a_rig_is_on_nvlink_where_every_gpu_reports_links_up():
    from lltui.core.fit.estimate import rig_links
    from lltui.core.hardware.links import RigLinks
    from lltui.core.memory.devices import DeviceSpec

    up = [DeviceSpec(f"CUDA{i}", "cuda", nvlink_active=4) for i in range(2)]
    assert rig_links(up, None) == RigLinks(nvlink=True)
    down = [up[0], DeviceSpec("CUDA1", "cuda", nvlink_active=0)]
    assert rig_links(down, None) == RigLinks(nvlink=False)
    unknown = [up[0], DeviceSpec("CUDA1", "cuda")]
    assert rig_links(unknown, None) is None
    measured = RigLinks(allreduce_gbs=9.0)
    assert rig_links(up, measured) == RigLinks(nvlink=True, allreduce_gbs=9.0)


def test_a_gpu_reporting_a_low_power_limit_is_predicted_slower(models):
    from dataclasses import replace as dc_replace

    from lltui.core.fit.estimate import speed_of

    devs = parse_gpus_spec("RTX 4090").devices
    res = estimate(
        models["llama 8B Q4_0"], parse_llama_args(["-c", "4096"]), devs, FitOptions(search=False)
    )
    full = speed_of(models["llama 8B Q4_0"], res, devs, FitOptions(search=False))
    capped = [dc_replace(devs[0], power_limit_w=150.0, power_default_w=450.0)]
    held = speed_of(models["llama 8B Q4_0"], res, capped, FitOptions(search=False))
    assert held.prefill_tps < 0.8 * full.prefill_tps and held.decode_tps < full.decode_tps


@pytest.mark.parametrize(
    ("mem_mhz", "bus", "gbs"),
    [
        (10501, 384, 1008),  # RTX 4090 (GDDR6X), as nvidia-smi -q reports its clocks
        (9751, 384, 936),  # RTX 3090
        (2619, 5120, 3352),  # H100 SXM (HBM3)
        (1593, 5120, 2039),  # A100-SXM4-80GB
        (877, 4096, 898),  # V100
        (14001, 512, 1792),  # RTX 5090 (GDDR7)
        (3615, 384, 347),  # Tesla P40
    ],
)
def test_bandwidth_from_nvml_clocks_and_bus_matches_the_spec_sheets(mem_mhz, bus, gbs):
    from lltui.core.memory.devices import memory_bandwidth_gbs

    assert memory_bandwidth_gbs(mem_mhz, bus) == pytest.approx(gbs, rel=0.005)
    assert memory_bandwidth_gbs(None, bus) is None and memory_bandwidth_gbs(mem_mhz, 0) is None


def test_a_present_gpu_decodes_at_its_own_memory_bandwidth(models):
    from dataclasses import replace as dc_replace

    model = models["llama 8B Q4_0"]
    st = parse_llama_args(["-c", "4096", "-ngl", "99"])
    table = parse_gpus_spec("4090").devices
    # a card whose memory runs 20% below its model's (a power-capped or downclocked board)
    slower = tuple(dc_replace(d, mem_bandwidth_gbs=1008 * 0.8) for d in table)
    odd = tuple(dc_replace(d, mem_bandwidth_gbs=1008 * 5) for d in table)  # a driver's odd answer
    base = estimate(model, st, table, FitOptions(search=False)).speed
    own = estimate(model, st, slower, FitOptions(search=False)).speed
    ignored = estimate(model, st, odd, FitOptions(search=False)).speed
    assert own.decode_tps < base.decode_tps * 0.9
    assert ignored.decode_tps == base.decode_tps
    # an unknown card: its measured bandwidth is used, the rest assumed and said so
    unknown = tuple(
        dc_replace(d, mem_bandwidth_gbs=500.0) for d in parse_gpus_spec("24GiB").devices
    )
    guess = estimate(model, st, unknown, FitOptions(search=False)).speed
    assert guess.devices[0].assumed and any("compute assumed" in n for n in guess.notes)
    plain = _speed(model, "24GiB", "-ngl", "99").speed
    assert guess.decode_tps != plain.decode_tps


def test_fake_nvml_gpus_carry_their_memory_bandwidth(monkeypatch):
    from support import fake_pynvml as fp

    from lltui.services.devices import devices_from_sample
    from lltui.sources.gpu.nvml.source import NvmlSource

    gpus = fp.make_gpus(2)
    gpus[1].mem_bus_width = None  # a driver that does not say
    fp.FakeNvml(gpus).install(monkeypatch)
    source = NvmlSource(env={}, event_wait_s=0.002)
    source.open()
    try:
        sample = source.poll()
    finally:
        source.close()
    assert [g.info.mem_bus_width_bits for g in sample.gpus] == [384, None]
    devs = devices_from_sample(sample)
    assert devs[0].mem_bandwidth_gbs == pytest.approx(936, rel=0.005)  # a 3090's 9751 MHz
    assert devs[1].mem_bandwidth_gbs is None


def test_the_max_q_edition_is_its_own_row():
    # same memory, lower clocks: a distinct NVML name, not the 600 W card's row
    maxq = find_gpu("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition")
    full = find_gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition")
    assert maxq is not None and full is not None and maxq != full
    assert maxq.bandwidth_gbs == full.bandwidth_gbs and maxq.int8_tops < full.int8_tops


def test_bounds_are_named_for_every_device_and_the_split(models):
    for gpus, flags in (("4090", ()), ("4090,3090", ()), ("4090", ("--n-cpu-moe", "40"))):
        model = models["moe"] if flags else models["llama 8B Q4_0"]
        s = _speed(model, gpus, "-ngl", "99", *flags).speed
        assert s.bound in ("memory", "compute", "link")
        assert s.prefill_bound in ("memory", "compute", "link")
        for d in s.devices:
            assert d.bound in ("memory", "compute")
            assert d.prefill_bound in ("memory", "compute", "link")


def test_decode_slows_with_depth_and_never_speeds_up(models):
    model = models["llama 8B Q4_0"]
    res = _speed(model, "3090", "-ngl", "99", "-c", "32768")
    tps = [estimate_speed(model, res, depth=d).decode_tps for d in (0, 512, 4096, 16384, 32000)]
    assert all(a >= b for a, b in pairwise(tps)) and tps[0] > tps[-1]
    pre = [estimate_speed(model, res, depth=d).prefill_tps for d in (0, 4096, 16384)]
    assert pre[0] > pre[1] > pre[2]


@pytest.mark.parametrize("gpus", ["4090,4090", "3090,3090,3090,3090", "4090,3090", "a100,a100"])
def test_a_layer_split_never_decodes_faster_than_its_fastest_gpu(models, gpus):
    model = models["llama 8B Q4_0"]
    split = _speed(model, gpus, "-ngl", "99").speed
    fastest = max(_speed(model, g, "-ngl", "99").speed.decode_tps for g in set(gpus.split(",")))
    assert split.decode_tps <= fastest
    assert split.link_decode_ms > 0


def test_moe_prompts_run_below_the_dense_rate_per_active_weight(models):
    # an expert sees ub * 8 / 128 tokens of a ubatch: its matmuls fill fewer tiles
    moe = _speed(models["moe"], "4090", "-ngl", "99").speed
    dense = _speed(models["llama 3B Q4_K_M"], "4090", "-ngl", "99").speed
    assert moe.prefill_tps < dense.prefill_tps
    assert moe.decode_tps > dense.decode_tps / 2


def test_volta_runs_quantized_prompts_on_fp16_tensor_cores(models):
    # no INT8 tensor cores: llama.cpp dequantizes and uses cuBLAS, far above DP4A
    v100 = _speed(models["llama 7B Q4_0"], "v100", "-ngl", "99").speed
    p40 = _speed(models["llama 7B Q4_0"], "p40", "-ngl", "99").speed
    assert v100.prefill_tps > 2 * p40.prefill_tps


def test_amd_gpus_run_with_hip_graphs():
    """llama.cpp's HIP build runs HIP graphs on every AMD GPU (GGML_HIP_GRAPHS is on by
    default); an AMD row's cc (0, 0) was read as a GPU before Volta, and every token paid
    the no-graphs cost per layer (a 7900 XTX's 8B decode 14% slower)."""
    from lltui.core.speed.gpu import overhead_s
    from lltui.core.speed.params import PARAMS
    from lltui.core.speed.parts import Part

    part = Part(layers=32)
    graphs = overhead_s(find_gpu("4090"), part, PARAMS)  # type: ignore[arg-type]
    for name in ("7900 XTX", "MI300X", "MI50", "Strix Halo"):
        assert overhead_s(find_gpu(name), part, PARAMS) == graphs, name  # type: ignore[arg-type]
    assert overhead_s(find_gpu("p40"), part, PARAMS) > graphs  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("gpus", "dev"),
    [
        ("Strix Halo,7900 XTX", "ROCm0,ROCm1"),
        ("gb10,4090", "CUDA0,CUDA1"),
        ("Strix Halo,Strix Halo", ""),
    ],
)
@pytest.mark.parametrize("split", ["layer", "tensor"])
def test_a_unified_memory_gpu_beside_another_is_priced(models, gpus, dev, split):
    """An APU (or a GB10) has no PCIe link of its own: a hop to a GPU beside it divided by
    its width 0 (ZeroDivisionError: lltui fit --gpus "Strix Halo,7900xtx" failed with an
    internal error). The hop now goes over the other GPU's link. (-dev: beside a discrete
    GPU, llama.cpp uses an integrated one only where named.)"""
    flags = ("-dev", dev) if dev else ()
    res = _speed(models["llama 8B Q4_0"], gpus, "-ngl", "99", "-sm", split, "-fa", "on", *flags)
    link_ms = res.speed.link_decode_ms + res.speed.reduce_decode_ms
    assert res.speed.decode_tps > 0 and 0 < link_ms < 100


def test_a_simulated_profile_s_nvlink_prices_the_tensor_split(models):
    """sim:2x3090-nvlink was priced as 3090,3090 over PCIe: its topology has NV4."""
    from lltui.services.devices import sim_devices

    m = models["llama 7B Q8_0"]
    args = parse_llama_args(["-c", "4096", "-ngl", "99", "-sm", "tensor"])
    linked = estimate(m, args, sim_devices("2x3090-nvlink"), FitOptions(search=False)).speed
    pcie = _speed(m, "3090,3090", "-ngl", "99", "-sm", "tensor").speed
    assert all(d.nvlink_active for d in sim_devices("2x3090-nvlink"))
    assert linked.reduce_decode_ms < pcie.reduce_decode_ms


def test_ngl_0_on_a_gpu_still_sends_big_ubatches_to_it(models):
    """llama.cpp copies host weights to the GPU for ubatches of 32 tokens and more, -ngl 0
    too: the prompt was priced on the CPU (15 t/s against 815 with -ngl 1)."""
    m = models["llama 8B Q4_0"]
    none = _speed(m, "3060", "-ngl", "0").speed
    one = _speed(m, "3060", "-ngl", "1").speed
    assert none.prefill_tps == pytest.approx(one.prefill_tps, rel=0.2)
    cpu_only = _speed(m, "cpu", "-ngl", "0").speed
    assert cpu_only.prefill_tps < 0.2 * none.prefill_tps


@pytest.mark.parametrize(
    ("gpus", "flags", "used"),
    [
        ("Strix Halo,7900 XTX", (), ["ROCm1"]),  # beside a discrete GPU: left out
        ("7900 XTX,Strix Halo", (), ["ROCm0"]),
        ("Strix Halo,7900 XTX", ("-dev", "ROCm0,ROCm1"), ["ROCm0", "ROCm1"]),  # named: used
        ("Strix Halo", (), ["ROCm0"]),  # alone: used
        ("gb10,rpc:127.0.0.1:50052=24GiB", (), ["RPC0[127.0.0.1:50052]", "CUDA0"]),  # RPC: none
    ],
)
def test_an_integrated_gpu_is_used_only_where_no_discrete_one_is(models, gpus, flags, used):
    """llama_prepare_model_devices adds integrated GPUs (CUDA's and HIP's ``integrated``)
    only where it found no other GPU: "Strix Halo,7900xtx" was planned with 28 of 32 layers
    on the 8060S, which llama-server leaves idle."""
    res = _speed(models["llama 8B Q4_0"], gpus, "-ngl", "99", *flags)
    assert [d.name for d in res.devices if d.kind != "cpu"] == used
    said = [w for w in res.warnings if "an integrated GPU" in w]
    assert len(said) == (len(parse_gpus_spec(gpus).devices) > len(used))


@pytest.mark.parametrize(
    ("gpus", "flags", "said"),
    [
        ("4090,7900 XTX", (), True),
        ("gb10,7900 XTX,4090", (), True),
        ("4090,7900 XTX", ("-dev", "CUDA0"), False),  # only the NVIDIA one used
        ("4090,Strix Halo", (), False),  # the APU is left out
        ("7900 XTX,7900 XTX", (), False),
    ],
)
def test_nvidia_and_amd_gpus_in_one_server_name_the_build_that_sees_both(models, gpus, flags, said):
    """A CUDA build of llama.cpp cannot see the AMD GPU, nor a HIP build the NVIDIA one:
    --gpus 4090,7900xtx was planned as one llama-server with no word of it."""
    res = _speed(models["llama 8B Q4_0"], gpus, "-ngl", "99", *flags)
    lines = [w for w in res.warnings if "NVIDIA and AMD GPUs" in w]
    assert len(lines) == said
    assert not said or "-DGGML_BACKEND_DL=ON -DGGML_CUDA=ON -DGGML_HIP=ON" in lines[0]

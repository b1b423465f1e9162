"""The host side of the speed model and what it is told: this machine's CPU and memory read
from Linux (a copied tree), ``--host``, the CPU's share of a split (experts and layers left
on it, ``-nkvo``), prompts at depth and in small ubatches, unified memory, ``-sm tensor``,
and a rig's calibration."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.hardware.calibration import Calibration
from lltui.core.hardware.host import HostSpec, parse_host_spec, parse_memory
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.speed.model import estimate_speed
from lltui.sources.gpu.cpu import read_host

# --- this machine, as Linux tells it -------------------------------------------------------------


def _dimm(kind: int, mts: int, size_mb: int = 16384) -> bytes:
    raw = bytearray(0x28)
    raw[0] = 17
    raw[1] = len(raw)
    struct.pack_into("<H", raw, 0x0C, size_mb)
    raw[0x12] = kind
    struct.pack_into("<H", raw, 0x15, mts + 400)  # the rated speed
    struct.pack_into("<H", raw, 0x20, mts)  # the configured one, which counts
    return bytes(raw)


def _tree(root: Path, cpuinfo: str, cores: int, smt: int, dimms: list[bytes]) -> Path:
    (root / "proc").mkdir(parents=True)
    (root / "proc" / "cpuinfo").write_text(cpuinfo)
    cpu = root / "sys" / "devices" / "system" / "cpu"
    for i in range(cores * smt):
        topo = cpu / f"cpu{i}" / "topology"
        topo.mkdir(parents=True)
        core = i % cores
        (topo / "thread_siblings").write_text(f"{1 << core | 1 << (core + cores):x}\n")
    freq = cpu / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    (freq / "cpuinfo_max_freq").write_text("5400000\n")
    for i, raw in enumerate(dimms):
        entry = root / "sys" / "firmware" / "dmi" / "entries" / f"17-{i}"
        entry.mkdir(parents=True)
        (entry / "raw").write_bytes(raw)
    return root


X86 = """processor\t: 0
model name\t: AMD Ryzen 9 7950X 16-Core Processor
cpu MHz\t\t: 3000.000
flags\t\t: fpu sse2 sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni
"""


def test_a_desktop_is_read_cores_vector_unit_clock_and_dimms(tmp_path):
    empty = _dimm(0x22, 5600, size_mb=0)  # an empty slot
    root = _tree(tmp_path, X86, 16, 2, [_dimm(0x22, 5600), empty, _dimm(0x22, 5600)])
    host = read_host(str(root))
    assert (host.cores, host.isa, host.ghz) == (16, "avx512vnni", 5.4)
    assert host.mem_gbs == pytest.approx(89.6) and host.mem_source == "2 x DDR5-5600 (SMBIOS)"
    assert host.source == "this machine" and not host.assumed and not host.lpddr


def test_an_intel_hybrid_counts_its_performance_cores_as_llama_cpp_does(tmp_path):
    # 8 P-cores with two threads each (cpu0-15) and 16 E-cores (cpu16-31): llama.cpp's
    # default threads on x86 Linux skip the E-cores
    root = _tree(tmp_path, X86, 16, 2, [])
    cpu = root / "sys" / "devices" / "system" / "cpu"
    for i in range(16):
        sib = f"{1 << (i // 2 * 2) | 1 << (i // 2 * 2 + 1):x}\n"
        (cpu / f"cpu{i}" / "topology" / "thread_siblings").write_text(sib)
    for i in range(16, 32):
        topo = cpu / f"cpu{i}" / "topology"
        topo.mkdir(parents=True, exist_ok=True)
        (topo / "thread_siblings").write_text(f"{1 << i:x}\n")
    assert read_host(str(root)).cores == 24  # no hybrid split told: every physical core
    (root / "sys" / "devices" / "cpu_core").mkdir(parents=True)
    (root / "sys" / "devices" / "cpu_core" / "cpus").write_text("0-15\n")
    host = read_host(str(root))
    assert (host.cores, host.hw_threads, host.workers) == (8, 32, 8)
    assert host.with_threads(24).workers == 24  # -t 24: P- and E-cores, as asked
    # without SMT llama.cpp still skips the CPU after each P-core (taken for its sibling)
    (root / "sys" / "devices" / "cpu_core" / "cpus").write_text("0-7\n")
    assert read_host(str(root)).cores == 4
    for bad in ("bogus\n", "0-99999999999\n", "7-3\n"):
        (root / "sys" / "devices" / "cpu_core" / "cpus").write_text(bad)
        assert read_host(str(root)).cores == 24


def test_soldered_lpddr_is_read_as_lpddr(tmp_path):
    root = _tree(tmp_path, X86, 8, 2, [_dimm(0x23, 6400), _dimm(0x23, 6400)])
    host = read_host(str(root))
    assert host.lpddr and host.mem_source == "2 x LPDDR5-6400 (SMBIOS)"


def test_an_arm_board_without_firmware_tables_says_its_memory_is_assumed(tmp_path):
    info = "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm sve\nCPU part\t: 0xd81\n"
    host = read_host(str(_tree(tmp_path, info, 12, 1, [])))
    assert (host.cores, host.isa) == (12, "i8mm")
    assert host.assumed and "assumed" in host.describe()


def test_no_cpuinfo_is_the_default_host(tmp_path):
    assert read_host(str(tmp_path)).source == "assumed"


# --- --host ------------------------------------------------------------------------------------


def test_host_override_reads_keys_and_memory():
    host = parse_host_spec("cores=16, isa=avx512, ghz=3.5, mem=4xDDR4-3200")
    assert (host.cores, host.isa, host.ghz) == (16, "avx512", 3.5)
    assert host.mem_gbs == pytest.approx(102.4) and "4 x DDR4-3200" in host.mem_source
    assert parse_host_spec("mem=273", host).mem_gbs == 273
    assert parse_host_spec("unified", host).unified
    assert parse_memory("2x LPDDR5X-8533")[:3:2] == (pytest.approx(136.5, abs=0.1), True)
    assert not host.lpddr and not parse_host_spec("mem=90", host).lpddr
    lp = parse_host_spec("mem=1xLPDDR5X-8400", host)
    assert lp.lpddr and parse_host_spec("mem=128", lp).lpddr  # a bandwidth keeps the kind


def test_the_cpu_cores_stream_less_of_an_lpddr_peak():
    # the same peak: DDR's few wide channels give the cores more of it than LPDDR's many
    # narrow ones, at a longer latency and shared with the GPU and NPU
    from lltui.core.speed.host_offload import host_stream_gbs
    from lltui.core.speed.params import PARAMS

    ddr = parse_host_spec("cores=16,mem=2xDDR5-6400")
    lp = parse_host_spec("cores=16,mem=2xLPDDR5-6400")
    assert ddr.mem_gbs == lp.mem_gbs
    assert host_stream_gbs(ddr, PARAMS) == pytest.approx(ddr.mem_gbs * PARAMS.host_bw_eff)
    assert host_stream_gbs(lp, PARAMS) == pytest.approx(lp.mem_gbs * PARAMS.host_lpddr_eff)
    assert host_stream_gbs(lp, PARAMS) < host_stream_gbs(ddr, PARAMS)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty"),
        ("cores", "key=value"),
        ("cores=0", "core count"),
        ("isa=sse9", "one of"),
        ("ghz=40", "clock"),
        ("mem=fast", "expected GB/s"),
        ("colour=blue", "unknown key"),
    ],
)
def test_a_bad_host_override_is_one_line(text, why):
    with pytest.raises(ValueError, match=why):
        parse_host_spec(text)


def test_fit_takes_host_and_keeps_llama_servers_own_host_flag(tmp_path, capsys):
    from lltui.cli import main

    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    args = ["fit", str(model), "--gpus", "cpu", "--host", "cores=32,mem=300", "--json"]
    assert main(args) == 0
    import json

    speed = json.loads(capsys.readouterr().out)["speed"]
    assert "32 threads" in speed["host"] and "300 GB/s" in speed["host"]
    # llama-server's --host ADDRESS (no "=") is its listen address, accepted and ignored
    assert main(["fit", str(model), "--gpus", "cpu", "--host", "0.0.0.0", "--json"]) == 0
    assert main(["fit", str(model), "--gpus", "cpu", "--host", "cores=x"]) == 2
    assert "cores=" in capsys.readouterr().err


# --- the model on the host -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("host-speed")
    return {
        "8b": read_gguf(gf.write_sparse(d / "8b.gguf", gf.llama_8b_spec(), "Q4_0")),
        "moe": read_gguf(gf.write_sparse(d / "moe.gguf", gf.qwen3moe_30b_a3b_spec(), "Q4_0")),
    }


DESKTOP = HostSpec(name="desktop", cores=8, isa="avx2", ghz=4.0, mem_gbs=60.0, source="t")


def _speed(model, flags, gpus="cpu", host=DESKTOP, depth=0, prompt=512, cal=None):
    devs = parse_gpus_spec(gpus).devices
    opts = FitOptions(search=False, host=host, calibration=cal)
    res = estimate(model, parse_llama_args(["-c", "40000", *flags]), devs, opts)
    return estimate_speed(model, res, depth=depth, prompt_tokens=prompt, host=host, calibration=cal)


def test_a_cpu_only_rig_is_predicted_from_its_cores_and_memory(models):
    base = _speed(models["8b"], [])
    assert 0 < base.decode_tps < 20 and base.prefill_tps < 200  # a desktop, not a GPU
    more_cores = _speed(models["8b"], [], host=replace(DESKTOP, cores=32))
    assert more_cores.prefill_tps > 2 * base.prefill_tps  # prompts are compute
    more_bw = _speed(models["8b"], [], host=replace(DESKTOP, cores=32, mem_gbs=300))
    assert more_bw.decode_tps > 1.5 * more_cores.decode_tps  # decode is memory
    one_thread = _speed(models["8b"], ["-t", "1"])
    assert one_thread.decode_tps < base.decode_tps and one_thread.prefill_tps < base.prefill_tps
    assert base.devices[0].name == "CPU" and "desktop" in base.host


def test_a_cpus_decode_at_depth_pays_for_every_cell_it_visits(tmp_path):
    """ggml's CPU flash attention visits a token's cells one by one (an expf and the
    softmax's bookkeeping a cell and query head, K and V converted from F16): llama-bench
    on this project's machine (tests/fixtures/cpu_bench_measured.json, one thread) decoded
    the 18-layer dense shape 3.8x slower at 4096 cells than at none, and the 64-wide MoE
    shape 8.5x at 4096; lltui priced the cells by their flops alone (1.7x and 2.2x)."""
    dense = gf.llama_spec(
        n_layer=18, n_embd=1536, n_ff=5632, n_head=12, n_head_kv=4, head_dim=128, n_vocab=32000
    )
    model = read_gguf(gf.write_sparse(tmp_path / "dense.gguf", dense, "Q4_0"))
    epyc = HostSpec(name="epyc", cores=2, isa="avx512vnni", ghz=2.6, mem_gbs=89.6, source="t")
    at = {d: _speed(model, ["-t", "1"], host=epyc, depth=d).decode_tps for d in (32, 4128)}
    assert 3.8 / 1.25 < at[32] / at[4128] < 3.8 * 1.25, at
    # a ubatch's tiled path is far cheaper a cell: the prompt slows by much less
    pp = {d: _speed(model, ["-t", "1"], host=epyc, depth=d).prefill_tps for d in (0, 2048)}
    assert 81.4 / 59.7 / 1.25 < pp[0] / pp[2048] < 81.4 / 59.7 * 1.25, pp
    # but ggml tiles only an F16 or F32 cache: a q8_0 one visits each query's cells one by
    # one, and the prompt at 2048 cells ran at 25.3 t/s where the F16 cache's ran at 59.7
    q8 = ["-t", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"]
    q8_pp = _speed(model, q8, host=epyc, depth=2048).prefill_tps
    assert 25.3 / 1.25 < q8_pp < 25.3 * 1.25, q8_pp


def test_experts_on_the_host_cost_the_hosts_bandwidth_and_the_pcie_copy(models):
    on_gpu = _speed(models["moe"], [], "RTX 4090")
    host = _speed(models["moe"], ["--n-cpu-moe", "40"], "RTX 4090")
    assert host.decode_tps < on_gpu.decode_tps / 2
    cpu = next(d for d in host.devices if d.name == "CPU")
    assert cpu.prefill_bound == "link"  # -ub 512: the experts cross PCIe
    bigger_ub = _speed(models["moe"], ["--n-cpu-moe", "40", "-ub", "2048"], "RTX 4090", prompt=4096)
    small_ub = _speed(models["moe"], ["--n-cpu-moe", "40", "-ub", "256"], "RTX 4090", prompt=4096)
    assert bigger_ub.prefill_tps > 3 * small_ub.prefill_tps  # one copy per ubatch
    faster_host = _speed(
        models["moe"], ["--n-cpu-moe", "40"], "RTX 4090", host=replace(DESKTOP, mem_gbs=200)
    )
    assert faster_host.decode_tps > host.decode_tps


def test_nkvo_with_flash_attention_copies_the_kv_to_the_gpu_every_token(models):
    on_gpu = _speed(models["8b"], ["-fa", "on"], "RTX 4090", depth=8192)
    nkvo = _speed(models["8b"], ["-fa", "on", "-nkvo"], "RTX 4090", depth=8192)
    gpu = next(d for d in nkvo.devices if d.name == "CUDA0")
    # the attention stays on the GPU and reads the cells it copies from host memory
    assert gpu.copy_decode_ms > 0 and gpu.bound == "link"
    assert nkvo.decode_tps < 0.8 * on_gpu.decode_tps
    # a ubatch copies them once for all its tokens: the prompt loses far less than decode
    assert nkvo.prefill_tps / on_gpu.prefill_tps > 2 * nkvo.decode_tps / on_gpu.decode_tps
    assert not any(d.name == "CPU" and d.prefill_ms > 1 for d in nkvo.devices)
    deeper = _speed(models["8b"], ["-fa", "on", "-nkvo"], "RTX 4090", depth=16384)
    assert deeper.decode_tps < 0.75 * nkvo.decode_tps  # the copy grows with the depth


def test_nkvo_without_flash_attention_runs_the_attention_on_the_host(models):
    on_gpu = _speed(models["8b"], ["-fa", "off"], "RTX 4090", depth=8192)
    nkvo = _speed(models["8b"], ["-fa", "off", "-nkvo"], "RTX 4090", depth=8192)
    assert nkvo.prefill_tps < 0.5 * on_gpu.prefill_tps
    assert any(d.name == "CPU" and d.prefill_ms > 0 for d in nkvo.devices)
    assert all(d.copy_decode_ms == 0 for d in nkvo.devices)


def test_host_weights_in_page_locked_memory_copy_faster(models):
    flags = ["--n-cpu-moe", "40", "-ub", "2048"]
    mapped = _speed(models["moe"], flags, "RTX 4090", prompt=4096)
    pinned = _speed(models["moe"], [*flags, "-lm", "none"], "RTX 4090", prompt=4096)
    copies = [
        next(d.copy_prefill_ms for d in s.devices if d.name == "CPU") for s in (mapped, pinned)
    ]
    assert copies[1] < 0.9 * copies[0] and pinned.prefill_tps > mapped.prefill_tps
    assert mapped.decode_tps == pytest.approx(pinned.decode_tps)  # a token copies nothing


def test_a_long_prompt_pipelines_only_within_a_batch(models):
    big = _speed(models["8b"], ["-ub", "512", "-b", "4096"], "2xRTX 3090", prompt=4096)
    small = _speed(models["8b"], ["-ub", "512", "-b", "512"], "2xRTX 3090", prompt=4096)
    one = _speed(models["8b"], ["-ub", "512", "-b", "4096"], "2xRTX 3090", prompt=512)
    assert big.prefill_tps > 1.3 * small.prefill_tps
    assert small.prefill_tps == pytest.approx(one.prefill_tps, rel=0.15)  # ubatch after ubatch


def test_prompts_slow_at_depth_and_in_small_ubatches(models):
    shallow = _speed(models["8b"], ["-fa", "on"], "RTX 4090")
    deep = _speed(models["8b"], ["-fa", "on"], "RTX 4090", depth=32768)
    assert deep.prefill_tps < 0.7 * shallow.prefill_tps and deep.depth == 32768
    no_fa = _speed(models["8b"], ["-fa", "off"], "RTX 4090", depth=32768)
    assert no_fa.prefill_tps < deep.prefill_tps  # the scores go through memory
    small = _speed(models["8b"], ["-ub", "16", "-b", "16"], "RTX 4090")
    assert small.prefill_tps < 0.5 * shallow.prefill_tps and small.n_ubatch == 16


def test_a_unified_memory_device_copies_nothing(models):
    gb10 = _speed(models["moe"], ["--n-cpu-moe", "40"], "GB10")
    cpu = next(d for d in gb10.devices if d.name == "CPU")
    assert cpu.prefill_bound != "link"
    # --host unified says so of a GPU the catalog does not know as sharing the host's memory
    flags = ["--n-cpu-moe", "40", "-ub", "512"]
    apart = _speed(models["moe"], flags, "RTX 4090")
    shared = _speed(models["moe"], flags, "RTX 4090", host=parse_host_spec("unified"))
    cpu_apart, cpu_shared = (next(d for d in e.devices if d.name == "CPU") for e in (apart, shared))
    assert cpu_apart.copy_prefill_ms > 0 and cpu_shared.copy_prefill_ms == 0


def test_tensor_split_divides_the_work_and_pays_all_reduces(models):
    layer = _speed(models["8b"], ["-sm", "layer"], "2xRTX 3090")
    tensor = _speed(models["8b"], ["-sm", "tensor", "-fa", "on"], "2xRTX 3090")
    single = _speed(models["8b"], [], "RTX 3090")
    assert layer.decode_tps <= single.decode_tps
    assert tensor.decode_tps > layer.decode_tps and tensor.reduce_decode_ms > 0
    assert tensor.reduce_decode_ms == pytest.approx(tensor.link_decode_ms)  # no hops
    from lltui.core.speed.model import speed_to_json

    assert speed_to_json(tensor)["reduce_decode_ms"] > 0
    # a ubatch gains nothing: the GPUs' shares are taken one after another
    assert tensor.prefill_tps <= 1.05 * single.prefill_tps


def _reduce_ms(model, gpus, links, tokens=1):
    from lltui.core.speed.model import estimate_speed as speed

    devs = parse_gpus_spec(gpus).devices
    args = parse_llama_args(["-c", "8192", "-sm", "tensor", "-fa", "on"])
    res = estimate(model, args, devs, FitOptions(search=False, host=DESKTOP))
    est = speed(model, res, host=DESKTOP, links=links, prompt_tokens=max(tokens, 1))
    return est.reduce_decode_ms, est.reduce_prefill_ms


def test_all_reduces_cost_by_the_path_and_the_link(models):
    from lltui.core.hardware.links import RigLinks

    m = models["8b"]
    geforce = _reduce_ms(m, "2xRTX 3090", None)  # no peer access: NCCL through the host
    peers = _reduce_ms(m, "2xRTX 3090", RigLinks(p2p=True))  # llama.cpp's own kernel
    assert peers[0] < geforce[0] and peers[1] < geforce[1]
    fallback = _reduce_ms(m, "2xRTX 3090", RigLinks(allreduce="none"))
    assert fallback[0] > geforce[0]  # peer copies and adds, staged through host memory
    nvlink = _reduce_ms(m, "2xA100-80GB", RigLinks(nvlink=True), tokens=512)
    pcie = _reduce_ms(m, "2xA100-80GB", RigLinks(nvlink=False), tokens=512)
    assert nvlink[1] < pcie[1]  # a ubatch's reduce is bandwidth
    measured = _reduce_ms(m, "4xRTX 3090", RigLinks(allreduce_gbs=2.0, allreduce_us=100.0))
    assert measured[0] > _reduce_ms(m, "4xRTX 3090", None)[0]  # what nccl bench measured


def test_a_power_cap_slows_prompts_first(models):
    from lltui.core.speed.model import Clocks

    base = _speed(models["8b"], [], "RTX 4090")

    def capped(clocks):
        devs = parse_gpus_spec("RTX 4090").devices
        res = estimate(
            models["8b"], parse_llama_args(["-c", "40000"]), devs, FitOptions(search=False)
        )
        return estimate_speed(models["8b"], res, host=DESKTOP, clocks={"CUDA0": clocks})

    mild = capped(Clocks(power_limit_w=300))  # of 450 W
    assert mild.prefill_tps < 0.95 * base.prefill_tps
    assert mild.decode_tps == pytest.approx(base.decode_tps)  # a decode draws less than 300 W
    hard = capped(Clocks(power_limit_w=150))
    assert hard.decode_tps < 0.9 * base.decode_tps and hard.prefill_tps < mild.prefill_tps
    locked = capped(Clocks(max_sm_mhz=1260))  # half its boost clock
    assert locked.prefill_tps < 0.7 * base.prefill_tps
    assert capped(Clocks(power_limit_w=450)).prefill_tps == pytest.approx(base.prefill_tps)


def test_a_calibration_scales_the_prediction_and_says_so(models):
    base = _speed(models["8b"], [], "RTX 4090")
    cal = Calibration("rig", "2026-11-27", gpu_decode=2.0, gpu_prefill=0.5, points=6)
    got = _speed(models["8b"], [], "RTX 4090", cal=cal)
    assert got.decode_tps == pytest.approx(base.decode_tps / 2, rel=0.05)
    assert got.prefill_tps > 1.5 * base.prefill_tps
    assert got.calibrated == "calibrated on this rig from 6 points, 2026-11-27"
    assert base.calibrated is None


def test_a_calibration_of_the_offload_paths_scales_only_their_part(models):
    flags = ["--n-cpu-moe", "40"]
    base = _speed(models["moe"], flags, "RTX 4090")
    slow_copies = Calibration("rig", "2026-11-27", copy=2.0, points=2)
    got = _speed(models["moe"], flags, "RTX 4090", cal=slow_copies)
    cpu, cpu0 = (next(d for d in s.devices if d.name == "CPU") for s in (got, base))
    assert cpu.copy_prefill_ms == pytest.approx(2 * cpu0.copy_prefill_ms)
    assert cpu.prefill_ms - cpu.copy_prefill_ms == pytest.approx(
        cpu0.prefill_ms - cpu0.copy_prefill_ms
    )
    assert got.decode_tps == pytest.approx(base.decode_tps)  # a token copies nothing
    tensor = ["-sm", "tensor", "-fa", "on"]
    plain = _speed(models["8b"], tensor, "2xRTX 3090")
    reduced = _speed(models["8b"], tensor, "2xRTX 3090", cal=Calibration("r", "d", reduce=3.0))
    assert reduced.reduce_decode_ms == pytest.approx(3 * plain.reduce_decode_ms)


def test_an_unknown_gpu_with_its_memory_is_estimated_and_named(models):
    got = _speed(models["8b"], [], "RTX 4070 Laptop=8GiB")
    note = " ".join(got.notes)
    assert "'RTX 4070 Laptop' is not in the GPU catalog" in note
    assert "NVIDIA GeForce RTX 4070's numbers assumed" in note  # the same model number
    with pytest.raises(ValueError, match="nearest known: NVIDIA GeForce RTX 4070"):
        parse_gpus_spec("RTX 4070 Laptop")

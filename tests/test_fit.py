"""The fit estimator on generated models: llama.cpp's placement, sizing and context rules.

Expected numbers are derived here from the model's shapes and llama.cpp's rules, never
copied from the estimator's output. tests/test_fit_real.py checks the same against the
real llama-server.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitError, FitOptions, FitResult, estimate
from lltui.core.fit.report import (
    oracle_compare,
    oracle_to_json,
    oracle_to_text,
    oracle_unavailable,
    result_to_json,
)
from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.types import GgmlType, tensor_nbytes, type_info
from lltui.core.memory.context import layer_devices, resolve_context
from lltui.core.memory.devices import DeviceSpec, parse_gpus_spec, rpc_device
from lltui.core.memory.hparams import read_hparams
from lltui.core.units import GIB, MIB
from lltui.sources.llama.fit_oracle import OracleResult, OracleRow, oracle_args, parse_fit_print

NO_SEARCH = FitOptions(search=False)


def make(tmp_path: Path, spec: gf.ModelSpec, wtype: str = "F16", name: str = "m") -> Path:
    path = tmp_path / f"{name}.gguf"
    gf.write_model(path, spec, wtype)
    return path


def cuda(n: int, gib: float = 16) -> tuple[DeviceSpec, ...]:
    size = int(gib * GIB)
    return tuple(
        DeviceSpec(name=f"CUDA{i}", kind="cuda", total_bytes=size, free_bytes=size)
        for i in range(n)
    )


def est(path: Path, argv: list[str], devices=(), options=NO_SEARCH) -> FitResult:
    return estimate(read_gguf(path), parse_llama_args(argv), devices, options)


# -- hyperparameters ------------------------------------------------------------------------


def test_gemma3_sliding_window_layers_are_dense_last(tmp_path):
    spec = gf.gemma3_spec(n_layer=12)
    hp = read_hparams(read_gguf(make(tmp_path, spec)))
    # gemma3: period 6, the last layer of each period has the full context
    assert hp.is_swa == tuple(il % 6 != 5 for il in range(12))
    assert hp.n_swa == spec.sliding_window


def test_moe_and_heads(tmp_path):
    spec = gf.qwen3moe_spec()
    hp = read_hparams(read_gguf(make(tmp_path, spec)))
    assert (hp.n_expert, hp.n_expert_used, hp.n_ff_exp) == (8, 2, spec.n_ff_exp)
    assert hp.n_embd_k_gqa(0) == spec.n_head_kv * spec.head_dim
    assert hp.n_vocab == spec.n_vocab


# -- context rules ----------------------------------------------------------------------------


def test_context_is_padded_and_streams_round_up(tmp_path):
    hp = read_hparams(read_gguf(make(tmp_path, gf.llama_spec())))
    r = resolve_context(hp, parse_llama_args(["-c", "5000", "-np", "3", "-no-kvu"]))
    # n_ctx pads to 256, then each of the 3 streams pads to 256 again
    assert r.n_ctx_seq == -(-(-(-5000 // 256) * 256 // 3) // 256) * 256
    assert r.n_ctx == 3 * r.n_ctx_seq and r.n_stream == 3
    u = resolve_context(hp, parse_llama_args(["-c", "5000", "-np", "3", "-kvu"]))
    assert u.n_ctx == u.n_ctx_seq == 5120 and u.n_stream == 1


def test_batch_is_capped_by_the_context_before_padding(tmp_path):
    hp = read_hparams(read_gguf(make(tmp_path, gf.llama_spec())))
    r = resolve_context(hp, parse_llama_args(["-c", "200"]))
    assert (r.n_batch, r.n_ubatch, r.n_ctx) == (200, 200, 256)


def test_unset_context_is_trained_context_per_stream(tmp_path):
    spec = gf.llama_spec(n_ctx_train=2048)
    hp = read_hparams(read_gguf(make(tmp_path, spec)))
    assert resolve_context(hp, parse_llama_args(["-np", "2"])).n_ctx == 2 * 2048
    assert resolve_context(hp, parse_llama_args(["-np", "2", "-kvu"])).n_ctx == 2048
    assert resolve_context(hp, parse_llama_args(["-np", "2", "--fit", "off"])).n_ctx == 2048


def test_server_outputs_are_slots_not_batch(tmp_path):
    hp = read_hparams(read_gguf(make(tmp_path, gf.llama_spec())))
    st = parse_llama_args(["-np", "3"])
    assert resolve_context(hp, st).n_outputs_max == 3
    assert resolve_context(hp, st, server=False).n_outputs_max == 2048


def test_quantized_v_needs_flash_attention(tmp_path):
    path = make(tmp_path, gf.llama_spec())
    with pytest.raises(FitError, match="flash attention"):
        est(path, ["-ctv", "q8_0", "-fa", "off"])


# -- layers -------------------------------------------------------------------------------------


def test_output_layer_is_offloaded_first():
    devs = cuda(1)
    n = 8
    # -ngl 1: only the output layer (index n) goes to the GPU
    assert layer_devices(n, 1, devs, ()) == (-1,) * n + (0,)
    # -ngl 3: the output layer and the last two blocks
    assert layer_devices(n, 3, devs, ()) == (-1,) * 6 + (0, 0, 0)
    assert layer_devices(n, 0, devs, ()) == (-1,) * (n + 1)


def test_tensor_split_points():
    devs = cuda(2)
    # 9 layers (8 + output) at 1:2 -> the first third to device 0
    got = layer_devices(8, 9, devs, (1.0, 2.0))
    assert got == (0, 0, 0, 1, 1, 1, 1, 1, 1)
    # without -ts, free memory decides: 3 GiB and 1 GiB free
    mixed = (
        DeviceSpec("CUDA0", "cuda", 3 * GIB, 3 * GIB),
        DeviceSpec("CUDA1", "cuda", 1 * GIB, 1 * GIB),
    )
    split = layer_devices(7, 8, mixed, ())
    assert split.count(0) == 6 and split.count(1) == 2


# -- weights ------------------------------------------------------------------------------------


def test_cpu_weights_mapped_span_and_repack(tmp_path):
    path = make(tmp_path, gf.qwen3_spec(), "Q4_K")
    model = read_gguf(path)
    res = est(path, ["-ngl", "0"])
    sizes = {n: b for n, k, b in res.buffers if k == "model"}
    repacked = [t for t in model.tensors if t.type == GgmlType.Q4_K and len(t.dims) == 2]
    # Q4_K matrices whose rows come in multiples of 8 go to CPU_REPACK; the tied output is
    # a second copy there (the embedding itself is read by get_rows from the mapped file)
    embd = model.tensor("token_embd.weight")
    assert embd is not None and embd in repacked
    expected_repack = sum(-(-t.nbytes // 32) * 32 for t in repacked)
    assert sizes["CPU_REPACK"] == expected_repack
    rest = [t for t in model.tensors if t not in repacked or t.name == "token_embd.weight"]
    span = max(t.file_offset + t.nbytes for t in rest) - min(t.file_offset for t in rest)
    assert sizes["CPU_Mapped"] == span
    no_repack = est(path, ["-ngl", "0", "-nr"])
    assert "CPU_REPACK" not in {n for n, k, _ in no_repack.buffers}


def test_no_mmap_weights_are_padded_sums(tmp_path):
    path = make(tmp_path, gf.llama_spec(), "Q8_0")
    model = read_gguf(path)
    res = est(path, ["-ngl", "0", "-lm", "none", "-nr"])
    assert res.buffer_bytes("CPU", "model") == sum(-(-t.nbytes // 32) * 32 for t in model.tensors)
    assert res.host.mapped_bytes == 0


def test_cuda_pads_quantized_rows_and_aligns(tmp_path):
    spec = gf.llama_spec(n_embd=384, n_ff=640, n_head=12, n_head_kv=2, head_dim=32)
    path = make(tmp_path, spec, "Q8_0")
    model = read_gguf(path)
    res = est(path, [], cuda(1))
    on_gpu = [p for p in res.placements if p.device == "CUDA0"]
    q = type_info(GgmlType.Q8_0)
    for p in on_gpu:
        t = model.tensor(p.name)
        assert t is not None
        size = t.nbytes
        if t.type == GgmlType.Q8_0 and t.dims[0] % 512:
            size += (512 - t.dims[0] % 512) // q.block_size * q.type_size
        assert p.alloc_bytes == -(-size // 128) * 128
    assert res.devices[0].weights_bytes == sum(p.alloc_bytes for p in on_gpu)


def test_tied_output_is_copied_to_the_output_device(tmp_path):
    path = make(tmp_path, gf.qwen3_spec(), "Q8_0")
    model = read_gguf(path)
    embd = model.tensor("token_embd.weight")
    assert embd is not None and model.tensor("output.weight") is None
    res = est(path, [], cuda(1))
    copies = [p for p in res.placements if p.name == "token_embd.weight"]
    assert {p.device for p in copies} == {"CPU", "CUDA0"}  # input on the CPU, head on the GPU
    assert sum(p.duplicate for p in copies) == 1
    # all on the CPU with mmap: one mapped tensor, no copy
    cpu = est(path, ["-ngl", "0", "-nr"])
    assert len([p for p in cpu.placements if p.name == "token_embd.weight"]) == 1


def test_overrides_and_cpu_moe(tmp_path):
    path = make(tmp_path, gf.qwen3moe_spec(), "Q8_0")
    res = est(path, ["--cpu-moe"], cuda(1))
    for p in res.placements:
        if "_exps" in p.name:
            assert p.device == "CPU"
        elif p.name.startswith("blk."):
            assert p.device == "CUDA0"
    ot = est(path, ["-ot", r"blk\.1\.=CPU"], cuda(1))
    assert all(p.device == "CPU" for p in ot.placements if p.name.startswith("blk.1."))
    with pytest.raises(FitError, match="unknown buffer type"):
        est(path, ["-ot", "ffn=CUDA7"], cuda(1))


def test_mtp_layers_are_not_loaded(tmp_path):
    spec = gf.llama_spec(
        n_layer=5, extra_kv={"llama.nextn_predict_layers": (1, gf.gguf.GGUFValueType.UINT32)}
    )
    path = make(tmp_path, spec)
    res = est(path, [])
    assert not any(p.name.startswith("blk.4.") for p in res.placements)
    assert sum(len(c.layers) for c in res.kv) == 4
    assert any("MTP" in w for w in res.warnings)


# -- KV cache ------------------------------------------------------------------------------------


def test_kv_bytes_from_heads_cells_and_type(tmp_path):
    spec = gf.llama_spec()
    path = make(tmp_path, spec)
    kv_dim = spec.n_head_kv * spec.head_dim
    res = est(path, ["-c", "4096", "-np", "1", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"])
    (cache,) = res.kv
    per_layer = tensor_nbytes(GgmlType.Q8_0, (kv_dim, 4096))
    assert cache.k_bytes == cache.v_bytes == spec.n_layer * per_layer
    assert cache.cells == 4096
    split = est(path, ["-c", "4096", "-np", "4", "-no-kvu"])
    (c2,) = split.kv
    assert c2.cells == 1024  # each of the 4 streams gets its share
    assert c2.k_bytes == spec.n_layer * tensor_nbytes(GgmlType.F16, (kv_dim, 1024, 4))


def test_swa_cache_is_the_window_plus_a_batch(tmp_path):
    spec = gf.gemma3_spec()
    path = make(tmp_path, spec)
    res = est(path, ["-c", "8192", "-np", "2", "-kvu", "-ub", "1024"])
    full, swa = res.kv
    assert not full.swa and full.cells == 8192 and len(full.layers) == 1
    assert swa.swa and len(swa.layers) == spec.n_layer - 1
    # pad256(min(8192, window * slots + ubatch))
    assert swa.cells == -(-(spec.sliding_window * 2 + 1024) // 256) * 256
    full_swa = est(path, ["-c", "8192", "-np", "2", "-kvu", "--swa-full"])
    assert all(c.cells == 8192 for c in full_swa.kv)


def test_kv_follows_its_layer_unless_nkvo(tmp_path):
    path = make(tmp_path, gf.llama_spec(n_layer=4))
    res = est(path, ["-ts", "1,1", "-c", "1024"], cuda(2))
    kv_bufs = {n for c in res.kv for n, _ in c.buffers}
    assert kv_bufs == {"CUDA0", "CUDA1"}
    off = est(path, ["-ts", "1,1", "-c", "1024", "-nkvo"], cuda(2))
    assert {n for c in off.kv for n, _ in c.buffers} == {"CPU"}
    assert off.host.kv_bytes == sum(d.kv_bytes for d in res.devices if d.kind == "cuda")


def test_output_buffer_is_logits_per_slot_in_host_memory(tmp_path):
    spec = gf.llama_spec()
    path = make(tmp_path, spec)
    res = est(path, ["-np", "3"], cuda(1))
    assert res.buffer_bytes("CUDA_Host", "output") == 4 * spec.n_vocab * 3
    assert res.host.output_bytes == 4 * spec.n_vocab * 3
    assert all(d.kind == "cpu" or d.weights_bytes for d in res.devices)
    # the host's row counts it as the host line does (its total was 16 KiB short of it)
    (cpu,) = [d for d in res.devices if d.kind == "cpu"]
    assert cpu.total_bytes == res.host.total_bytes


def test_without_a_gpu_the_fit_target_is_kept_on_the_host(tmp_path):
    """llama.cpp's fit with no device keeps its target (1024 MiB, -fitt) free on the host
    (common/fit.cpp): the largest context leaves it, as llama-fit-params' -c does."""
    path = make(tmp_path, gf.llama_spec(n_ctx_train=1 << 20))
    host = 2 * GIB
    opts = FitOptions(host_free_bytes=host, search=True)
    res = est(path, [], (), opts)
    cpu = res.devices[-1]
    assert cpu.unaccounted_bytes == opts.margin_bytes and res.max_ctx is not None
    kept = est(path, ["-c", str(res.max_ctx)], (), replace(opts, search=False))
    assert kept.fits and kept.host.total_bytes + opts.margin_bytes <= host
    over = est(path, ["-c", str(res.max_ctx + 256)], (), replace(opts, search=False))
    assert not over.fits and over.host.total_bytes <= host  # only the target is crossed
    # beside a GPU the target is that GPU's alone
    assert (
        est(path, ["-c", str(res.max_ctx + 256)], cuda(1), NO_SEARCH).devices[-1].unaccounted_bytes
        == 0
    )


# -- devices and split modes ----------------------------------------------------------------------


def test_split_mode_none_keeps_the_main_gpu_and_row_fails(tmp_path):
    path = make(tmp_path, gf.llama_spec())
    res = est(path, ["-sm", "none", "-mg", "1"], cuda(2))
    assert [d.name for d in res.devices] == ["CUDA1", "CPU"]
    with pytest.raises(FitError, match="main_gpu"):
        est(path, ["-sm", "none", "-mg", "2"], cuda(2))
    with pytest.raises(FitError, match="split buffers"):
        est(path, ["-sm", "row"], cuda(2))


def test_split_mode_tensor_is_flagged(tmp_path):
    path = make(tmp_path, gf.llama_spec())
    res = est(path, ["-sm", "tensor", "-ctk", "q8_0", "-ctv", "q8_0"], cuda(2))
    text = " ".join(res.warnings)
    assert "experimental" in text and "layer split" not in text
    assert res.resolved.flash_attn  # -fa auto: llama.cpp turns it on for -sm tensor
    assert res.meta_devices == ("CUDA0", "CUDA1")
    with pytest.raises(FitError, match="flash attention"):
        est(path, ["-sm", "tensor", "-fa", "off"], cuda(2))


def test_device_selection(tmp_path):
    path = make(tmp_path, gf.llama_spec())
    devs = (rpc_device("10.0.0.2:50052", 8 * GIB, 0), *cuda(2))
    res = est(path, ["-dev", "CUDA1,RPC0"], devs)
    assert [d.name for d in res.devices] == ["CUDA1", "RPC0[10.0.0.2:50052]", "CPU"]
    with pytest.raises(FitError, match="invalid device"):
        est(path, ["-dev", "CUDA9"], devs)
    none = est(path, ["-dev", "none"], devs)
    assert [d.kind for d in none.devices] == ["cpu"]


def test_pipeline_parallel_only_for_full_layer_splits(tmp_path):
    path = make(tmp_path, gf.llama_spec())
    assert est(path, [], cuda(2)).pipeline_parallel
    assert not est(path, ["-ngl", "3"], cuda(2)).pipeline_parallel
    assert not est(path, ["-nkvo"], cuda(2)).pipeline_parallel
    assert not est(path, ["-ot", "ffn_up=CPU"], cuda(2)).pipeline_parallel
    assert not est(path, [], cuda(1)).pipeline_parallel
    # the input copies make the first device's compute buffer larger than on its own
    pp = est(path, ["-ts", "1,0"], cuda(2))
    alone = est(path, ["-sm", "none"], cuda(2))
    assert pp.pipeline_parallel and not alone.pipeline_parallel
    assert pp.devices[0].layers == alone.devices[0].layers
    assert pp.devices[0].compute_bytes > alone.devices[0].compute_bytes


def test_compute_grows_with_ubatch_and_context_and_quadratic_without_fa(tmp_path):
    path = make(tmp_path, gf.llama_spec())

    def compute(argv: list[str]) -> int:
        return est(path, argv).buffer_bytes("CPU", "compute")

    assert compute(["-c", "4096", "-ub", "1024"]) > compute(["-c", "4096", "-ub", "512"])
    assert compute(["-c", "8192", "-fa", "on"]) > compute(["-c", "2048", "-fa", "on"])
    grow_on = compute(["-c", "8192", "-fa", "on"]) - compute(["-c", "4096", "-fa", "on"])
    grow_off = compute(["-c", "8192", "-fa", "off"]) - compute(["-c", "4096", "-fa", "off"])
    assert grow_off > 4 * grow_on  # the KQ scores of every head vs an F16 mask


# -- fitting --------------------------------------------------------------------------------------


def test_fits_margin_and_largest_context(tmp_path):
    path = make(tmp_path, gf.llama_spec(n_ctx_train=65536))
    model = read_gguf(path)
    st = parse_llama_args(["-c", "65536", "-np", "1"])
    small = (DeviceSpec("CUDA0", "cuda", 40 * MIB, 40 * MIB),)
    res = estimate(model, st, small, FitOptions(margin_bytes=0))
    assert not res.fits
    assert res.max_ctx is not None and res.max_ctx % 256 == 0
    at_max = estimate(
        model,
        parse_llama_args(["-c", str(res.max_ctx), "-np", "1"]),
        small,
        FitOptions(margin_bytes=0, search=False),
    )
    over = estimate(
        model,
        parse_llama_args(["-c", str(res.max_ctx + 256), "-np", "1"]),
        small,
        FitOptions(margin_bytes=0, search=False),
    )
    assert at_max.fits and not over.fits
    assert res.suggestions and res.suggestions[0].flags == ("-c", str(res.max_ctx))
    # the margin counts against the free memory
    margin = estimate(model, st, small, FitOptions(margin_bytes=39 * MIB))
    assert margin.max_ctx is None or margin.max_ctx < res.max_ctx


def test_suggests_fewer_gpu_layers_when_weights_do_not_fit(tmp_path):
    path = make(tmp_path, gf.llama_spec(n_layer=8))
    model = read_gguf(path)
    weights = sum(t.nbytes for t in model.tensors)
    dev = (DeviceSpec("CUDA0", "cuda", weights // 2, weights // 2),)
    # small batches (under op offload's 32 rows): the GPU computes only its own layers; with
    # big ones it would run every layer's matmuls on copies of the host's weights
    res = estimate(
        model, parse_llama_args(["-c", "512", "-ub", "16"]), dev, FitOptions(margin_bytes=0)
    )
    assert not res.fits
    ngl = [s for s in res.suggestions if s.flags[0] == "-ngl"]
    assert ngl
    n = int(ngl[0].flags[1])
    assert 0 < n < 9
    check = estimate(
        model,
        parse_llama_args(["-c", "512", "-ub", "16", "-ngl", str(n)]),
        dev,
        FitOptions(margin_bytes=0, search=False),
    )
    assert check.fits


def test_an_estimate_without_compute_buffers_is_a_lower_bound(tmp_path):
    # the -ngl search asks first without the compute graph: what does not fit then cannot
    # fit with it, and the graph is planned only for settings that may fit
    from lltui.core.memory.allocate import estimate_once
    from lltui.core.memory.compute_graph import clear_plans, planned_peak
    from lltui.core.memory.problem import FitProblem

    path = make(tmp_path, gf.llama_spec(n_layer=8))
    model = read_gguf(path)
    weights = sum(t.nbytes for t in model.tensors)
    dev = (DeviceSpec("CUDA0", "cuda", weights // 2, weights // 2),)
    for ngl in range(10):
        args = parse_llama_args(["-c", "512", "-ub", "16", "-ngl", str(ngl)])
        p = FitProblem.of(model, args, dev, FitOptions(margin_bytes=0))
        clear_plans()
        low = estimate_once(p, compute="none")
        assert planned_peak.cache_info().misses == 0  # no graph planned
        full = estimate_once(p)
        assert low.fits >= full.fits
        assert not any(k == "compute" for _, k, _ in low.buffers)
        for a, b in zip(low.devices, full.devices, strict=True):
            assert a.total_bytes == b.total_bytes - b.compute_bytes


def test_balanced_split_for_unequal_gpus(tmp_path):
    path = make(tmp_path, gf.llama_spec(n_layer=8))
    model = read_gguf(path)
    # a small batch keeps compute buffers small next to the layers being moved around
    base = ["-c", "256", "-ub", "32", "-b", "32", "-np", "1"]
    roomy = (DeviceSpec("CUDA0", "cuda", GIB, GIB), DeviceSpec("CUDA1", "cuda", GIB, GIB))
    even = estimate(model, parse_llama_args([*base, "-ts", "1,1"]), roomy, NO_SEARCH)
    t0, t1 = (d.total_bytes for d in even.devices[:2])
    # the second GPU holds a bit over half of its even share; the first has room for the rest
    devs = (
        DeviceSpec("CUDA0", "cuda", t0 + t1, t0 + t1),
        DeviceSpec("CUDA1", "cuda", t1 * 6 // 10, t1 * 6 // 10),
    )
    opts = FitOptions(margin_bytes=0)
    res = estimate(model, parse_llama_args([*base, "-ts", "1,1"]), devs, opts)
    assert not res.fits
    ts = [s for s in res.suggestions if "-ts" in s.flags]
    assert ts, res.suggestions
    check = estimate(
        model, parse_llama_args([*base, *ts[0].flags]), devs, replace(opts, search=False)
    )
    assert check.fits
    counts = [int(x) for x in ts[0].flags[ts[0].flags.index("-ts") + 1].split(",")]
    assert counts[0] > counts[1]


# -- reports and the command ---------------------------------------------------------------------


def test_json_contract(tmp_path):
    path = make(tmp_path, gf.qwen3_spec())
    data = result_to_json(estimate(read_gguf(path), parse_llama_args([]), cuda(2)))
    assert set(data) >= {"model", "settings", "devices", "host", "fits", "max_ctx"}
    assert set(data["settings"]) >= {
        "n_ctx",
        "n_ctx_seq",
        "n_parallel",
        "kv_unified",
        "type_k",
        "type_v",
        "flash_attn",
        "n_batch",
        "n_ubatch",
        "n_gpu_layers",
        "split_mode",
        "tensor_split",
    }
    for d in data["devices"]:
        assert set(d) >= {
            "name",
            "kind",
            "layers",
            "weights_bytes",
            "kv_bytes",
            "compute_bytes",
            "total_bytes",
            "free_bytes",
            "fits",
        }
        for k in ("weights_bytes", "kv_bytes", "compute_bytes", "total_bytes"):
            assert isinstance(d[k], int)
        parts = ("weights_bytes", "kv_bytes", "compute_bytes", "output_bytes")
        assert d["total_bytes"] == sum(d[k] for k in parts)
    assert [d["name"] for d in data["devices"]] == ["CUDA0", "CUDA1", "CPU"]
    assert set(data["host"]) >= {
        "weights_bytes",
        "kv_bytes",
        "output_bytes",
        "compute_bytes",
        "total_bytes",
    }
    json.dumps(data)


def test_cli_json_and_text(tmp_path, capsys):
    path = make(tmp_path, gf.llama_spec())
    assert main(["fit", str(path), "-c", "2048", "--port", "8080", "--gpus", "2xT4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["n_ctx"] == 2048
    assert [d["kind"] for d in data["devices"]] == ["cuda", "cuda", "cpu"]
    assert data["devices"][0]["free_bytes"] == parse_gpus_spec("T4").devices[0].free_bytes
    assert main(["fit", "-c", "1024", "-m", str(path), "--gpus", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "CPU (host)" in out and "verdict" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-such-flag"],
        ["--gpus", "12 parsecs"],
        ["-ctk", "q4_K"],
        ["--gpus", "sim:no-such-rig"],
        ["-sm", "row", "--gpus", "T4,T4"],
    ],
)
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, argv):
    path = make(tmp_path, gf.llama_spec())
    assert main(["fit", str(path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err


def test_a_model_given_as_a_word_and_with_m_is_refused_as_launch_refuses_it(
    tmp_path, capsys, monkeypatch
):
    """fit X -m Y (or -m X X) planned X and dropped -m without a word, where launch says the
    model is given twice (launch -m X X said X was an unexpected argument); a model in
    LLAMA_ARG_MODEL is still one a word overrides."""
    path = make(tmp_path, gf.llama_spec())
    for verb, argv in [
        ("fit", ["fit", "-m", str(path), str(path), "--gpus", "T4"]),
        ("fit", ["fit", str(path), "-m", str(tmp_path / "other.gguf"), "--gpus", "T4"]),
        ("launch", ["launch", str(path), "-m", str(path), "--dry-run"]),
        ("launch", ["launch", "-m", str(path), str(path), "--dry-run"]),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"lltui: {verb}: the model is given twice (MODEL and -m)"
    monkeypatch.setenv("LLAMA_ARG_MODEL", str(tmp_path / "other.gguf"))
    assert main(["fit", str(path), "--gpus", "T4", "--json"]) == 0
    capsys.readouterr()


@pytest.mark.parametrize(
    "item",
    ["4091", "40", "2x4091", "T4=4091", "rpc:127.0.0.1:50052=4091", "24e9", "1e10", "T4=24e9"],
)
def test_a_number_with_no_unit_is_no_memory_size(item):
    """A GPU model mistyped (4091) was a device of 4091 bytes: 'does NOT fit', exit 0; 24e9
    too (its letter was taken for a unit)."""
    with pytest.raises(
        ValueError, match=r"^--gpus: '[^']+'(: a memory size needs| is (neither|not))"
    ):
        parse_gpus_spec(item)
    assert parse_gpus_spec("4091B").devices[0].total_bytes == 4091  # with its unit, a size
    assert parse_gpus_spec("24 gib").devices[0].total_bytes == 24 * GIB


def _gpus_refused(tmp_path, capsys, gpus: str) -> str:
    """The one line (exit 2) fit answers a --gpus it cannot take with."""
    path = make(tmp_path, gf.llama_spec())
    assert main(["fit", str(path), "--gpus", gpus]) == 2
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize(
    ("item", "number", "example", "near"),
    [
        ("24", "24", "24GiB", ""),
        ("0", "0", "24GiB", ""),
        ("-5", "-5", "24GiB", ""),
        ("80", "80", "80GiB", ""),  # (not the RTX 8000, H800 and 5080)
        ("2x80", "80", "2x80GiB", ""),
        ("288", "288", "288GiB", ""),  # a GB300's
        ("289", "289", "289MiB", ""),
        (
            "4091",
            "4091",
            "4091MiB",  # (more GiB than any GPU has: not 4091GiB)
            " (nearest known: NVIDIA GeForce RTX 4090, NVIDIA GeForce RTX 4090 D)",
        ),
    ],
)
def test_a_bare_number_is_told_it_needs_its_unit(tmp_path, capsys, item, number, example, near):
    """--gpus 24 offered '24=24GiB' and the T4, P4 and L4 as nearest; --gpus 0 said a
    device's memory must be more than 0, as if 0 were a size; 2x80 was told to write
    '2x80=24GiB' (two 24 GiB GPUs); --gpus 4091 was told 4091GiB (4 TiB, no GPU's), where
    the README wrote 4091B: a number more GiB than any GPU has is told MiB, nvidia-smi's."""
    err = _gpus_refused(tmp_path, capsys, f"T4,{item}")
    want = f"--gpus: '{item}': a memory size needs its unit (e.g. {example}); no GPU model is "
    assert err.endswith(f"{want}named {number}{near}"), err


@pytest.mark.parametrize(
    ("item", "want"),
    [
        ("3080M", "'3080M': 3080 MiB or a laptop RTX 3080? write 3080MiB, or 'RTX 3080 Laptop="),
        ("2x4070m", "'4070m': 4070 MiB or a laptop RTX 4070? write 4070MiB, or 'RTX 4070 Laptop="),
        ("4090G", "'4090G': 4090 GiB or the RTX 4090? write 4090GiB, or 'RTX 4090'"),
    ],
)
def test_a_size_whose_number_is_a_gpu_model_is_asked_about(tmp_path, capsys, item, want):
    """--gpus 3080M (a laptop RTX 3080, as laptops are written) was a GPU of 3080 MiB."""
    err = _gpus_refused(tmp_path, capsys, item)
    assert "\n" not in err and f"--gpus: {want}" in err, err
    for size, mib in (("16000M", 16000), ("24G", 24 * 1024), ("3080MiB", 3080), ("24GiB", 24576)):
        assert parse_gpus_spec(size).devices[0].total_bytes == mib * 2**20


def test_cli_corrupt_or_missing_model(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert main(["fit", str(bad)]) == 2
    assert main(["fit", str(tmp_path / "nope.gguf")]) == 2
    assert main(["fit"]) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 3


def test_cli_sim_profile_rpc_and_help(tmp_path, capsys):
    path = make(tmp_path, gf.llama_spec())
    assert main(["fit", str(path), "--gpus", "sim:kaggle-2xt4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data["devices"]] == ["CUDA0", "CUDA1", "CPU"]
    # --rpc servers come first in llama.cpp's device list
    assert main(["fit", str(path), "--gpus", "T4", "--rpc", "10.0.0.9:50052", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in data["devices"]] == ["RPC0[10.0.0.9:50052]", "CUDA0", "CPU"]
    assert data["devices"][0]["free_bytes"] is None
    assert main(["fit", "--help"]) == 0
    assert "--gpus" in capsys.readouterr().out


def test_hostile_layer_count_is_refused(tmp_path):
    spec = gf.llama_spec()
    path = make(tmp_path, spec)
    model = read_gguf(path)
    md = dict(model.metadata)
    md["llama.block_count"] = 10**9
    hostile = replace(model, files=(replace(model.files[0], metadata=md),))
    with pytest.raises(FitError, match="layers"):
        read_hparams(hostile)


def test_oracle_helpers():
    text = "RPC0 1 0 12 \nRPC1 0 0 10 \nHost 3 4 5 \nnoise line\n"
    assert parse_fit_print(text) == (
        OracleRow("RPC0", 1, 0, 12),
        OracleRow("RPC1", 0, 0, 10),
        OracleRow("Host", 3, 4, 5),
    )
    # llama-fit-params refuses the unified-KV switches
    given = parse_llama_args(["-c", "512", "-kvu", "--kv-unified-per-slot", "9", "-fa", "on"])
    assert oracle_args(given) == ["-c", "512", "-fa", "on", "-np", "4"]
    # the slots given are kept as given; flags that change no memory are left out
    given = parse_llama_args(["--parallel", "2", "--jinja", "--ctx-size", "64"])
    assert oracle_args(given) == ["--parallel", "2", "--ctx-size", "64"]


MODEL_KEYS = [
    "path",
    "name",
    "architecture",
    "file_type",
    "file_bytes",
    "tensor_bytes",
    "n_params",
    "n_layer",
    "n_embd",
    "n_head",
    "n_head_kv",
    "head_dim",
    "n_ff",
    "n_vocab",
    "n_ctx_train",
    "n_expert",
    "n_expert_used",
    "sliding_window",
    "swa_layers",
    "recurrent_layers",
    "tied_embeddings",
    "split_files",
    "quantization_version",
    "causal",
    "pooling",
]


def test_model_summary_is_typed_and_its_json_keeps_every_key_in_order(tmp_path):
    spec = gf.gemma3_spec()
    model = read_gguf(make(tmp_path, spec))
    res = estimate(model, parse_llama_args(["-c", "1024"]), (), NO_SEARCH)
    m = res.model
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(m, "n_layer", 1)  # noqa: B010 (the assignment itself is what is tested)
    assert (m.architecture, m.n_layer, m.n_embd) == ("gemma3", spec.n_layer, spec.n_embd)
    assert m.file_bytes == model.file_size and m.n_params == model.n_params
    assert m.sliding_window is not None and 0 < m.swa_layers < m.n_layer
    data = result_to_json(res)["model"]
    assert list(data) == MODEL_KEYS
    assert data == {k: getattr(m, k) for k in MODEL_KEYS}
    assert json.loads(json.dumps(data)) == data


def test_a_crashed_oracle_is_told_by_its_assert_not_its_backtrace(tmp_path):
    """llama-fit-params aborting on an assert prints a backtrace after it: --oracle quoted
    the backtrace's last line ('360\t../csu/libc-start.c: No such file or directory')."""
    from lltui.sources.llama.fit_oracle import OracleError, run_oracle

    fake = tmp_path / "llama-fit-params"
    fake.write_text(
        "#!/bin/sh\n"
        "echo 'llama_context: n_ctx = 4096' >&2\n"
        "echo 'ggml.c:1234: GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) failed' >&2\n"
        "echo '#0  0x00007f in __libc_start_call_main' >&2\n"
        "printf '360\\t../csu/libc-start.c: No such file or directory\\n' >&2\n"
        "exit 134\n"
    )
    fake.chmod(0o755)
    model = tmp_path / "m.gguf"
    gf.write_model(model, gf.SPECS["llama"](), "F16")
    with pytest.raises(OracleError) as err:
        run_oracle(str(model), parse_llama_args([]), binary=fake)
    assert str(err.value) == (
        "llama-fit-params failed (exit 134): "
        "ggml.c:1234: GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max) failed"
    )


def test_oracle_comparison_is_typed_and_keeps_its_json(tmp_path):
    model = read_gguf(make(tmp_path, gf.qwen3_spec()))
    devs = [rpc_device(f"127.0.0.1:{5000 + i}", None, i, backend="cpu") for i in range(2)]
    opts = FitOptions(server=False, search=False)
    ours = estimate(model, parse_llama_args(["-c", "1024"]), devs, opts)
    rows = (OracleRow("RPC0", 1, 0, 12), OracleRow("RPC7", 1, 2, 3), OracleRow("Host", 3, 4, 5))
    cmp = oracle_compare(ours, OracleResult("/bin/llama-fit-params", ("-c", "1024"), rows))
    assert [r.name for r in cmp.rows] == ["RPC0", "RPC7", "Host"]
    rpc0, unknown, host = cmp.rows
    dev0 = ours.devices[0]
    assert rpc0.ours is not None and rpc0.ours.model == dev0.weights_bytes // MIB
    assert rpc0.diff is not None and rpc0.diff.compute == dev0.compute_bytes // MIB - 12
    assert unknown.ours is None and unknown.diff is None
    assert host.ours is not None and host.ours.context == ours.host.kv_bytes // MIB
    data = oracle_to_json(cmp)
    assert list(data) == ["available", "path", "argv", "rows"]
    assert data["argv"] == ["-c", "1024"]
    assert data["rows"][1] == {
        "name": "RPC7",
        "llama_fit_params_mib": {"model": 1, "context": 2, "compute": 3},
        "lltui_mib": None,
        "diff_mib": None,
    }
    assert list(data["rows"][0]) == ["name", "llama_fit_params_mib", "lltui_mib", "diff_mib"]
    text = oracle_to_text(cmp)
    assert "RPC7" in text and "? / 1" in text
    # each cell says whose number is whose, and what "context" counts
    assert "each cell: lltui's estimate under those rules / llama-fit-params', MiB" in text
    assert "(context: the\nKV cache and the output buffer" in text
    gone = oracle_unavailable("no llama-fit-params here")
    assert oracle_to_json(gone) == {"available": False, "error": "no llama-fit-params here"}
    assert oracle_to_text(gone) == "llama-fit-params: no llama-fit-params here"


def test_a_split_over_sixteen_gpus_is_never_one_llama_cpp_refuses(tmp_path, capsys):
    from lltui.core.cmdline.flag_values import writable_split

    # -ts takes at most 15 values (llama.cpp refuses as many as its 16 devices)
    assert writable_split((1,) * 15) == (1,) * 15
    assert writable_split((1,) * 16) is None
    assert writable_split((2,) * 15 + (0,)) == (2,) * 15  # the last gets nothing anyway
    assert writable_split((0, 0)) is None
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_0")
    for gpus in ("16x24GiB", "16x3GiB", "sim:16xv100-dgx2"):
        for extra in ([], ["--best", "context"], ["--json"]):
            rc = main(["fit", str(path), "--host-free", "0", "--gpus", gpus, *extra])
            out, err = capsys.readouterr()
            assert rc == 0 and "internal error" not in err, (gpus, extra, err)
            for line in out.splitlines():
                if "-ts " in line:  # any split proposed is one llama-server takes
                    ts = line.split("-ts ", 1)[1].split()[0]
                    assert len(ts.split(",")) <= 15, line


def test_a_largest_context_below_the_trained_one_is_not_called_the_trained(tmp_path, capsys):
    """-c past a 1M trained context on 24 GiB: 153856 fits, and was called "the trained
    context, which caps a slot"."""
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(n_ctx_train=1048576), "Q4_0")
    assert main(["fit", str(path), "--gpus", "24GiB", "-c", "2000000"]) == 0
    (verdict,) = [line for line in capsys.readouterr().out.splitlines() if "verdict" in line]
    assert "largest context that fits" in verdict and "trained" not in verdict


def test_a_context_past_the_trained_one_warns_and_the_largest_is_the_trained(tmp_path, capsys):
    path = tmp_path / "small.gguf"
    gf.write_model(path, gf.llama_spec(n_ctx_train=8192))
    base = ["fit", str(path), "--gpus", "cpu", "-c", "1000000", "-np", "1"]
    assert main([*base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["max_ctx"] == 8192
    [warning] = [w for w in data["warnings"] if "trained on" in w]
    assert "context 1000192 per sequence is past the 8192 the model was trained on" in warning
    assert "llama-server caps each slot at 8192" in warning
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "largest context that fits: 8192 (the trained context, which caps a slot)" in out
    assert "warning: context 1000192 per sequence is past the 8192" in out
    # RoPE scaling asked for: the context asked is what counts, and it is said
    assert main([*base, "--rope-scaling", "yarn", "--rope-scale", "4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["max_ctx"] == 1000192
    assert any(
        "RoPE scaling as asked (--rope-scaling yarn --rope-scale 4)" in w for w in data["warnings"]
    )
    # two slots: the largest is the trained context in each, and said so (it was "the
    # trained context, which caps a slot" for twice the trained context)
    assert main([*base, "-np", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_ctx"] == 16384
    assert main([*base, "-np", "2"]) == 0
    assert (
        "largest context that fits: 16384 (the trained context per slot x 2 slots: "
        "llama-server caps each slot at 8192)" in capsys.readouterr().out
    )
    # one unified cache (-kvu, and -np auto's 4 slots) is shared by the slots, each capped
    # at the trained context (llama-server's n_ctx_slot): they fill the slots' sum as well.
    # It stopped at 8192 (-np 2 -kvu: 'n_ctx_seq = 1000192', 'new slot, n_ctx = 8192' twice)
    for flags, slots in ((["-np", "2", "-kvu"], 2), (["-np", "-1"], 4)):
        assert main([*base, *flags, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["settings"]["kv_unified"] and data["max_ctx"] == slots * 8192
        assert f"the KV cache past {slots * 8192} cells is never used" in data["warnings"][-1]
        assert main([*base, *flags]) == 0
        assert (
            f"largest context that fits: {slots * 8192} (the trained context per slot x "
            f"{slots} slots: llama-server caps each slot at 8192)" in capsys.readouterr().out
        )
    # the largest past one slot's cap is said where the context asked is within it
    assert main(["fit", str(path), "--gpus", "cpu", "-c", "8192", "-np", "2", "-kvu"]) == 0
    assert "fits: 16384 (the trained context per slot x 2 slots" in capsys.readouterr().out
    # within the trained context: no word of it
    assert main(["fit", str(path), "--gpus", "cpu", "-c", "8192", "--json"]) == 0
    assert not [w for w in json.loads(capsys.readouterr().out)["warnings"] if "trained" in w]


@pytest.mark.parametrize(
    "spec", ["0GiB", "2x0GiB", "T4=0MiB", "24GiB,0B", "-24GiB", "2x-8GiB", "T4=-16GiB"]
)
def test_a_device_of_no_memory_is_refused_as_such(tmp_path, capsys, spec):
    """-24GiB was 'neither a memory size ... nor a MIG profile' with an NVIDIA GH200 480GB as
    the nearest known GPU."""
    err = _gpus_refused(tmp_path, capsys, spec)
    assert err.endswith("a device's memory must be more than 0") and "neither" not in err


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("cpu,4090", "--gpus: 'cpu' means no GPU: give it alone (--gpus cpu)"),
        ("4090,none", "--gpus: 'none' means no GPU: give it alone (--gpus none)"),
        ("MIG-abc", "--gpus: 'MIG-abc' is neither a MIG profile (3g.40gb) nor a MIG slice's UUID"),
        ("4090,mig-0000", "--gpus: 'mig-0000' is neither a MIG profile (3g.40gb) nor a MIG"),
    ],
)
def test_a_word_that_is_no_gpu_is_told_what_it_is(tmp_path, capsys, spec, want):
    """cpu in a list of GPUs was offered as a GPU ('cpu=24GiB'), MIG-abc as an AMD MI50."""
    err = _gpus_refused(tmp_path, capsys, spec)
    assert "\n" not in err and want in err and "nearest" not in err and "=24GiB" not in err, err


def test_fit_help_lists_every_flag_that_changes_memory(capsys):
    """The list was written by hand and said the draft, projector and LoRA flags (which fit
    counts) were ignored."""
    from lltui.core.cmdline.flag_table import FLAGS

    assert main(["fit", "--help"]) == 0
    words = set(capsys.readouterr().out.replace("/", " ").split())
    for f in FLAGS:
        if f.memory:
            assert min(f.spellings, key=len) in words, f.key
    assert "ignored" not in words


@pytest.mark.parametrize(
    ("gpus", "free_gib"),
    [("Strix Halo", 20), ("GB10", 20), ("Strix Halo,7900 XTX", None), ("7900 XTX", 24)],
)
def test_an_integrated_gpu_offers_what_the_host_has_free(tmp_path, capsys, gpus, free_gib):
    """--gpus "Strix Halo" was planned with all 128 GiB free: its memory is the host's, and
    llama.cpp offers an integrated GPU what the host has available (MemAvailable on CUDA;
    ROCm's carve-out and GTT pool are of the same memory), which the OS and the host's own
    buffers share."""
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_0")
    assert main(["fit", str(path), "--gpus", gpus, "--host-free", "20GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpu = [d for d in data["devices"] if d["kind"] == "cuda"]
    said = [n for n in data.get("notes", []) if "its memory is the host's" in n]
    if free_gib is None:  # beside a discrete GPU the APU is left out: nothing to say
        assert [d["name"] for d in gpu] == ["ROCm1"] and not said
        return
    assert gpu[0]["free_bytes"] <= free_gib * GIB
    assert len(said) == (free_gib == 20) and (not said or "20.0 GiB (as given)" in said[0])


@pytest.mark.parametrize(
    ("gpus", "more", "host"),
    [
        ("Strix Halo", [], "ROCm_Host"),
        ("GB10", [], "CUDA_Host"),
        ("jetson agx orin", ["-ngl", "0"], "CUDA_Host"),
        ("Strix Halo", ["-lm", "mmap"], "CPU_Mapped"),
        ("Strix Halo", ["--no-host"], "CPU buffers"),
        ("Strix Halo,7900 XTX", [], "CPU_Mapped"),  # the APU left out: not in use
        ("Strix Halo,7900 XTX", ["-dev", "ROCm0,ROCm1"], "ROCm_Host"),
        ("7900 XTX", [], "CPU_Mapped"),
    ],
)
def test_weights_beside_an_integrated_gpu_are_not_mapped(tmp_path, capsys, gpus, more, host):
    """llama.cpp's CUDA/HIP backend reports no mmap support for an integrated GPU, and -lm
    auto then loads the host's weights into the pinned host buffer (load_mode = none): the
    plan had them CPU_Mapped ("mapped from the file") on every Strix Halo, GB10 and Jetson."""
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_K")
    argv = ["fit", str(path), "--gpus", gpus, "-ngl", "2", *more, "--host-free", "100GiB"]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpus_in = {"ROCm0", "ROCm1", "CUDA0"}
    on_host = {b["name"] for b in data["buffers"] if b["kind"] == "model"} - gpus_in
    mapped = host == "CPU_Mapped"
    assert on_host == ({"CPU", "CPU_REPACK"} if host == "CPU buffers" else {host})
    assert (data["host"]["mapped_bytes"] > 0) == mapped
    said = [w for w in data["warnings"] if "offers no mmap" in w]
    assert len(said) == (not mapped) and all(f"into {host}, not mapped" in w for w in said)
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert ("mapped from the file)" in text) == mapped
    assert all(f"warning: {w}" in text for w in said)


@pytest.mark.parametrize(
    ("gpus", "host_free", "fits"),
    [
        ("Strix Halo", "5GiB", False),  # 2941 + 1024 on the GPU, 2049 on the host: 6014 MiB
        ("Strix Halo", "7GiB", True),
        ("orin nano 4gb", None, False),  # 4 GiB in all: no -ngl puts it on "the CPU" instead
        ("Strix Halo,7900 XTX", "5GiB", True),  # the APU left out: the host is the host's
    ],
)
def test_an_integrated_gpu_and_the_host_share_one_memory(tmp_path, capsys, gpus, host_free, fits):
    """--gpus "Strix Halo" --host-free 5GiB -ngl 20 fitted: the GPU's row against 5 GiB and
    the host's against the same 5 GiB again; on a 4 GiB Jetson the plan said to move 13
    layers to the CPU, whose memory was this machine's."""
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_K")
    more = ["--host-free", host_free] if host_free else []
    argv = ["fit", str(path), "--gpus", gpus, "-ngl", "20" if host_free else "99", *more]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {d["kind"]: d for d in data["devices"]}
    gpu, host = rows["cuda"], rows["cpu"]
    assert data["fits"] == fits
    assert not any("-ngl" in json.dumps(x) for x in data["suggestions"])  # no layers to move
    if gpus != "Strix Halo,7900 XTX":
        pool = gpu["free_bytes"]
        used = gpu["total_bytes"] + gpu["unaccounted_bytes"]
        assert host["free_bytes"] == max(0, pool - used)
    assert main(argv) == 0
    assert ("verdict: fits" in capsys.readouterr().out) == fits


CONTEXT = (
    ("n_seq_max", 4),
    ("n_ctx", 4096),
    ("n_ctx_seq", 4096),
    ("n_batch", 2048),
    ("n_ubatch", 512),
    ("flash_attn", "auto"),
    ("kv_unified", "true"),
)


def test_explain_of_a_strix_halo_log_has_its_host_weights_in_rocm_host(tmp_path):
    """A log of -ngl 20 on a Strix Halo, in the pinned source's formats: llama.cpp reads the
    13 host layers and the token embeddings into ROCm_Host (load_mode = none); explain's
    plan had them CPU_Mapped (0.00 predicted for the line, and a CPU_Mapped buffer "not in
    the log")."""
    from lltui.services.explain import ExplainRequest, explain

    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_K")
    model = read_gguf(path)
    on_host = [t for t in model.tensors if t.name.split(".")[0] == "token_embd"] + [
        t for t in model.tensors if t.name.startswith("blk.") and int(t.name.split(".")[1]) < 13
    ]
    host_mib = sum(-(-t.nbytes // 32) * 32 for t in on_host) / MIB
    log = tmp_path / "server.log"
    lines = [
        "llama_model_load_from_file_impl: using device ROCm0 (AMD Radeon 8060S Graphics) "
        "(0000:c5:00.0) - 112233 MiB free",
        "llama_model_loader: loaded meta data with 23 key-value pairs and 291 tensors from "
        f"{path} (version GGUF V3 (latest))",
        "load_tensors: loading model tensors, this can take a while... (load_mode = none)",
        "load_tensors: offloading output layer to GPU",
        "load_tensors: offloading 19 repeating layers to GPU",
        "load_tensors: offloaded 20/33 layers to GPU",
        f"load_tensors:    ROCm_Host model buffer size = {host_mib:8.2f} MiB",
        *(f"llama_context: {k:<21} = {v}" for k, v in CONTEXT),
        "llama_context:  ROCm_Host  output buffer size =     1.96 MiB",
        "llama_kv_cache:      ROCm0 KV buffer size =   304.00 MiB",
        "llama_kv_cache:        CPU KV buffer size =   208.00 MiB",
    ]
    log.write_text("\n".join(lines) + "\n")
    r = explain(ExplainRequest(str(log), model=str(path), ask_binary=False))
    assert r.result is not None
    weights = [c for c in r.checks if c.line.kind == "model"]
    assert [c.line.device for c in weights] == ["ROCm_Host"] and weights[0].exact
    assert all(c.exact for c in r.checks)
    assert not [b for b in r.result.buffers if b[0] == "CPU_Mapped"]


@pytest.mark.parametrize(("total_gib", "free_gib"), [(24, 128), (128, 110)])
def test_an_integrated_gpu_on_another_machine_keeps_its_memory(
    tmp_path, capsys, monkeypatch, total_gib, free_gib
):
    """Without --host-free, this machine's available memory caps a named integrated GPU only
    where this machine can be the one described: a 24 GiB laptop asking about a 128 GiB Strix
    Halo had been told the APU offers 20 GiB."""
    from lltui.sources.gpu import meminfo

    monkeypatch.setattr(meminfo, "host_memory", lambda: (total_gib * GIB, 110 * GIB))
    monkeypatch.setattr(meminfo, "host_available", lambda: 110 * GIB)
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_0")
    assert main(["fit", str(path), "--gpus", "Strix Halo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (gpu,) = [d for d in data["devices"] if d["kind"] == "cuda"]
    assert gpu["free_bytes"] == free_gib * GIB
    (said,) = [n for n in data["notes"] if "its memory is the host's" in n]
    assert ("is not the one described" in said) == (total_gib == 24)

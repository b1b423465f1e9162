"""``lltui bench``: llama-bench's output read, the same-shape GGUF written from a header, the
calibration fitted, stored per rig and read back by later predictions; and for real, the
pinned CPU llama-bench on tiny generated models (dense and MoE), locally and from a hub."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import struct
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.hub_server import Hub, HubServer, Repo
from support.llama_fixture import llama_bins
from support.proc_helpers import wait_for

from lltui.cli import main
from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.types import GgmlType
from lltui.core.hardware.calibration import Calibration
from lltui.core.speed.calibration import HOST_BUSY_MAX, MeasuredPoint, fit_calibration
from lltui.sources.gpu import rig_store
from lltui.sources.gpu.procfs import OthersMeter
from lltui.sources.llama.bench import parse_row
from lltui.sources.models import hf_hub
from lltui.sources.models.same_shape import DISTINCT_ROWS, write_same_shape

FIXTURES = Path(__file__).parent / "fixtures" / "llama-bench"
__all__ = ["llama_bins"]  # the fixture
# --- llama-bench's output --------------------------------------------------------------------


def test_rows_are_read_from_real_jsonl_output():
    lines = (FIXTURES / "cpu_moe.jsonl").read_text().splitlines()
    rows = [parse_row(line) for line in lines]
    assert all(r is not None for r in rows)
    pp, tg = rows
    assert pp is not None and tg is not None
    assert (pp.test, tg.test) == ("pp64", "tg16")
    assert not pp.decode and tg.decode
    assert pp.avg_ts > 0 and tg.n_gen == 16


@pytest.mark.parametrize("line", ["", "main: loading", "{broken", "[]", '{"avg_ts": "x"}'])
def test_other_lines_are_not_rows(line):
    assert parse_row(line) is None


def test_a_depth_names_the_test_as_llama_bench_does():
    row = json.loads((FIXTURES / "cpu_moe.jsonl").read_text().splitlines()[1])
    row["n_depth"] = 4096
    got = parse_row(json.dumps(row))
    assert got is not None and got.test == "tg16 @ d4096"


# --- the same-shape GGUF ---------------------------------------------------------------------


def _moe(tmp_path: Path) -> Path:
    spec = gf.qwen3moe_spec(n_layer=3, n_vocab=600, n_expert=8, n_expert_used=2)
    (path,) = gf.write_model(tmp_path / "moe.gguf", spec, "Q8_0", seed=3)
    return path


def test_same_shape_copies_the_header_and_is_a_hole_of_the_real_size(tmp_path):
    src = _moe(tmp_path)
    model = read_gguf(src)
    (out,) = write_same_shape(model, tmp_path / "same.gguf")
    got = read_gguf(out)
    assert out.stat().st_size == src.stat().st_size
    f = model.files[0]
    assert out.read_bytes()[: f.header_nbytes] == src.read_bytes()[: f.header_nbytes]
    assert [(t.name, t.dims, t.type, t.offset) for t in got.tensors] == [
        (t.name, t.dims, t.type, t.offset) for t in model.tensors
    ]


def _tensor_bytes(path: Path, name: str) -> bytes:
    model = read_gguf(path)
    t = next(t for t in model.tensors if t.name == name)
    with path.open("rb") as f:
        f.seek(t.file_offset)
        return f.read(t.nbytes)


def test_same_shape_fills_what_routing_depends_on_and_nothing_else(tmp_path):
    src = _moe(tmp_path)
    (out,) = write_same_shape(read_gguf(src), tmp_path / "same.gguf")
    norm = _tensor_bytes(out, "blk.0.attn_norm.weight")
    assert set(struct.unpack(f"<{len(norm) // 4}f", norm)) == {1.0}
    router = _tensor_bytes(out, "blk.1.ffn_gate_inp.weight")
    values = struct.unpack(f"<{len(router) // 4}f", router)
    assert all(math.isfinite(v) for v in values) and len(set(values)) > len(values) // 2
    assert set(_tensor_bytes(out, "blk.1.ffn_up_exps.weight")) == {0}  # zero: a hole
    embd = read_gguf(out).tensors[0]
    assert embd.name == "token_embd.weight" and embd.type == GgmlType.Q8_0
    data = _tensor_bytes(out, "token_embd.weight")
    row = len(data) // embd.dims[1]
    rows = [data[i * row : (i + 1) * row] for i in range(embd.dims[1])]
    assert len(set(rows)) == DISTINCT_ROWS  # tokens differ, so their experts do
    # Q8_0 blocks carry a small finite f16 scale
    assert struct.unpack("<e", rows[0][:2])[0] == pytest.approx(0.01, rel=1e-2)


def test_a_split_model_is_written_as_its_split_files(tmp_path):
    parts = gf.write_model(tmp_path / "s.gguf", gf.llama_spec(), "Q8_0", split_max_tensors=20)
    model = read_gguf(parts[0])
    out = write_same_shape(model, tmp_path / "same.gguf")
    assert [p.name for p in out] == ["same-00001-of-00002.gguf", "same-00002-of-00002.gguf"]
    assert read_gguf(out[0]).file_size == model.file_size


# --- the runs a rig gets ------------------------------------------------------------------------


def _plan(tmp_path, spec, gpus, *flags):
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.services.bench import BenchRequest, plan

    path = gf.write_sparse(tmp_path / f"{spec.arch}.gguf", spec, "Q8_0")
    request = BenchRequest(str(path), parse_llama_args(["-ngl", "all", *flags]), quick=True)
    return {c.label: c for c in plan(request, read_gguf(path), gpus)}


def test_an_moe_model_on_a_gpu_is_also_benched_with_its_experts_on_the_host(tmp_path):
    from lltui.core.cmdline.args import parse_llama_args

    spec = gf.qwen3moe_spec(n_layer=6, n_expert=8, n_expert_used=2)
    configs = _plan(tmp_path, spec, 1)
    offload = configs["experts on the host (--n-cpu-moe 3)"]
    assert offload.bench_args[offload.bench_args.index("--n-cpu-moe") + 1] == "3"
    assert "-p" in offload.bench_args  # a prompt: the copies; a decode: the host's experts
    assert parse_llama_args(list(offload.server_args)).overrides  # predicted the same way
    assert not any("tensor" in label for label in configs)  # one GPU
    # a command that places experts itself, or no GPU, gets no such run
    assert not any("experts" in c for c in _plan(tmp_path, spec, 1, "--n-cpu-moe", "2"))
    assert not any("experts" in c for c in _plan(tmp_path, spec, 0))
    assert not any("experts" in c for c in _plan(tmp_path, gf.llama_spec(), 1))


def test_two_gpus_are_also_benched_with_a_tensor_split_where_llama_cpp_allows_it(tmp_path):
    from lltui.core.cmdline.args import parse_llama_args

    configs = _plan(tmp_path, gf.llama_spec(), 2, "-fa", "off")
    tensor = configs["tensor split (-sm tensor)"]
    words = list(tensor.bench_args)
    assert words[words.index("-sm") + 1] == "tensor" and words[words.index("-fa") + 1] == "on"
    assert words.count("-fa") == 1  # the command's -fa off replaced: tensor needs it on
    server = parse_llama_args(list(tensor.server_args))
    assert server.split_mode == "tensor" and server.flash_attn == "on"
    # lltui's own build (after b9455) splits a quantized K/V cache too; one GPU, nothing
    assert any("tensor" in c for c in _plan(tmp_path, gf.llama_spec(), 2, "-ctk", "q8_0"))
    assert not any("tensor" in c for c in _plan(tmp_path, gf.llama_spec(), 1))


def test_a_prediction_splits_into_the_work_a_calibration_scales():
    from lltui.core.memory.results import DeviceSpeed, SpeedEstimate
    from lltui.services.bench import split_prediction

    gpu = DeviceSpeed("CUDA0", "g", 10.0, 40.0, "memory", "compute", 1, copy_prefill_ms=0.0)
    cpu = DeviceSpeed("CPU", "h", 20.0, 60.0, "memory", "link", 1, copy_prefill_ms=50.0)
    est = SpeedEstimate(
        decode_tps=1000 / 32.0,
        prefill_tps=512 / 0.108,  # one ubatch: 40 + 60 + 8 ms
        bound="memory",
        prefill_bound="link",
        devices=(gpu, cpu),
        link_decode_ms=2.0,
        link_prefill_ms=8.0,
        depth=0,
        n_ubatch=512,
        prompt_tokens=512,
        decode_tps_full=30.0,
        reduce_decode_ms=1.5,
        reduce_prefill_ms=6.0,
    )
    pre = split_prediction(est, False, 4000.0)
    per_token = 0.108 / 512
    assert pre.copy_s == pytest.approx(per_token * 50 / 108)
    assert pre.host_s == pytest.approx(per_token * 10 / 108)
    assert pre.reduce_s == pytest.approx(per_token * 6 / 108)
    assert pre.other_s == pytest.approx(per_token * 2 / 108) and pre.kind == "copy"
    dec = split_prediction(est, True, 30.0)
    assert dec.copy_s == 0.0 and dec.reduce_s == pytest.approx(1.5e-3)


def test_a_bench_point_is_predicted_as_fit_predicts_it(tmp_path):
    """A capped card: bench predicted without its power limit (172.9 t/s) where fit
    priced it (127.9), so a card running exactly as fit said was "calibrated" 1.35x slower."""
    from dataclasses import replace

    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.fit.estimate import FitOptions, estimate, speed_of
    from lltui.core.hardware.host import default_host
    from lltui.core.memory.devices import parse_gpus_spec
    from lltui.services.bench import predict_row, split_prediction
    from lltui.sources.llama.bench import BenchRow

    model = read_gguf(gf.write_sparse(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_0"))
    (dev,) = parse_gpus_spec("4090").devices
    dev = replace(dev, power_limit_w=150, power_default_w=450)
    host = default_host()
    row = BenchRow(0, 128, 0, 2048, 512, 999, 0, 0, 1, 0.0, 0, "b1")
    bench = predict_row(model, ("-ngl", "999"), row, [dev], host)
    args = parse_llama_args(["-ngl", "999", "-c", "384", "-ub", "512", "-b", "2048"])
    opts = FitOptions(search=False, host=host)
    fit = speed_of(model, estimate(model, args, [dev], opts), [dev], opts, depth=64)
    assert bench is not None and bench.decode_tps == pytest.approx(fit.decode_tps, rel=0.02)
    point = split_prediction(bench, True, fit.decode_tps)
    assert fit_calibration("rig", "2026-01-01", [point]).gpu_decode == pytest.approx(1, abs=0.03)


# --- calibration ---------------------------------------------------------------------------


def test_calibration_recovers_the_scales_the_points_were_made_with():
    truth = Calibration("rig", "2026-01-01", 1.3, 0.8, 2.0, 1.0, copy=1.6, reduce=0.7)
    points = []
    for i in range(1, 7):
        gpu, host = 0.01 * i, 0.002 * (7 - i)
        # a host-offload point copies host memory; a tensor split all-reduces
        copy, reduce = (0.003 * (i % 3 + 1), 0.0) if i % 2 else (0.0, 0.002 * (7 - i))
        for decode in (True, False):
            g = truth.gpu_decode if decode else truth.gpu_prefill
            h = truth.host_decode if decode else truth.host_prefill
            measured = g * gpu + h * host + truth.copy * copy + truth.reduce * reduce + 0.001
            points.append(
                MeasuredPoint(decode, measured, gpu, host, 0.001, copy_s=copy, reduce_s=reduce)
            )
    got = fit_calibration("rig", "2026-01-01", points)
    for field in ("gpu_decode", "gpu_prefill", "host_decode", "host_prefill", "copy", "reduce"):
        assert getattr(got, field) == pytest.approx(getattr(truth, field), rel=0.02), field
    assert got.scales(True)[0] == pytest.approx(1.3, rel=0.02)
    assert got.note() == f"calibrated on this rig from {len(points)} points, 2026-01-01"
    one = fit_calibration("rig", "2026-01-01", points[:1])
    assert one.note() == "calibrated on this rig from 1 point, 2026-01-01"  # (not "1 points")


def test_a_point_measures_the_kind_of_work_it_spends_most_on():
    assert MeasuredPoint(True, 1.0, 0.1, 0.2, copy_s=0.5).kind == "copy"
    assert MeasuredPoint(False, 1.0, 0.3, 0.0, reduce_s=0.4).kind == "reduce"
    assert MeasuredPoint(False, 1.0, 0.3, 0.4).kind == "host_prefill"


def test_a_wild_measurement_is_left_out_and_a_far_one_fitted():
    wild = fit_calibration("r", "d", [MeasuredPoint(True, 100.0, 0.001, 0.0)])
    assert (wild.gpu_decode, wild.points) == (1.0, 0)  # 100000x: a wrong setup
    far = fit_calibration("r", "d", [MeasuredPoint(True, 0.0045, 0.001, 0.0)])
    assert far.gpu_decode == pytest.approx(4.5, rel=0.01)
    assert far.host_decode == 1.0  # nothing measured the host


def _served(slower: float, date: str = "2026-02-01", decode: bool = True) -> MeasuredPoint:
    return MeasuredPoint(decode, 0.01 * slower, 0.01, 0.0, served=True, date=date)


def test_served_points_are_held_until_three_agree():
    bench = [MeasuredPoint(False, 0.004, 0.002, 0.0, date="2026-01-01")]  # GPU prompt 2x
    one = fit_calibration("r", "d", [*bench, _served(3.0)])
    assert (one.gpu_decode, one.points, one.held) == (1.0, 1, 1)
    assert one.gpu_prefill == pytest.approx(2.0, rel=0.01) and one.date == "2026-01-01"
    # three that disagree (0.5x, 1x, 3x): none is within 1.25x of the median, nothing moves
    split = fit_calibration("r", "d", [*bench, _served(0.5), _served(1.0), _served(3.0)])
    assert (split.gpu_decode, split.points, split.held) == (1.0, 1, 3)


def test_agreeing_served_points_move_a_scale_a_bounded_step_each():
    bench = [MeasuredPoint(False, 0.004, 0.002, 0.0, date="2026-01-01")]
    three = [_served(3.0, "2026-02-01"), _served(3.1, "2026-02-03"), _served(2.9, "2026-02-02")]
    got = fit_calibration("r", "d", [*bench, *three, _served(0.2)])  # and an outlier
    assert got.gpu_decode == pytest.approx(1.25**3, rel=1e-3)  # 3x measured, 1.95x at most
    assert got.gpu_prefill == pytest.approx(2.0, rel=0.01)  # llama-bench's, untouched
    assert (got.points, got.held, got.date) == (4, 1, "2026-02-03")
    many = fit_calibration("r", "d", [_served(3.0) for _ in range(8)])
    assert many.gpu_decode == pytest.approx(3.0, rel=0.01)  # enough agreeing points get there


def test_the_store_keeps_a_rig_and_reads_it_back(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path)}
    rig = rig_store.RigIdentity(("NVIDIA GeForce RTX 4090",), "575.57.08", "AMD Ryzen 9")
    point = rig_store.StoredPoint("m.gguf", "as given", "tg128", True, 50, 60, 0.01, 0, 0, "d")
    cal = Calibration(rig.describe(), "2026-11-27", 1.2, 1.0, 1.0, 1.0, 1)
    path = rig_store.save(rig_store.RigRecord(rig, "b1 (x)", cal, (point,)), env)
    assert path.parent == tmp_path / "lltui" / "bench"
    back = rig_store.load(rig, env)
    assert back is not None and back.calibration == cal and back.points == (point,)
    other = rig_store.RigIdentity(("NVIDIA GeForce RTX 3090",), "575.57.08", "AMD Ryzen 9")
    assert rig_store.load(other, env) is None
    path.write_text("{not json")
    assert rig_store.load(rig, env) is None  # unreadable: a fresh start, not a crash


def test_the_driver_is_read_from_proc(tmp_path):
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release Build\n"
    )
    assert rig_store.driver_version(str(proc)) == "575.57.08"
    assert rig_store.driver_version(str(tmp_path / "none")) is None


# --- bad input -----------------------------------------------------------------------------


def test_bench_without_a_model_is_one_line(capsys):
    assert main(["bench"]) == 2
    assert "no model" in capsys.readouterr().err


def test_bench_json_failure_is_an_object(capsys, tmp_path):
    assert main(["bench", str(tmp_path / "missing.gguf"), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert "missing.gguf" in out["error"]


@pytest.mark.parametrize(
    "bad",
    [
        ["--budget", "0"],
        ["--budget", "x"],
        ["-r", "0"],
        ["-r", "1e9"],
        ["--budget", "inf"],
        ["-r", "1.5"],  # ran once, as if 1 were asked
    ],
)
def test_bench_bad_options(capsys, tmp_path, bad):
    assert main(["bench", str(tmp_path / "m.gguf"), *bad]) == 2
    err = capsys.readouterr().err
    assert "bench:" in err
    if bad[1] == "1.5":
        assert "whole number of repetitions, got 1.5" in err
    elif bad[1] != "x":  # the range said whole ('must be at least 1' for a billion)
        assert "to 1e+06" in err


def test_no_llama_bench_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LLTUI_LLAMA_BENCH", str(tmp_path / "nope"))
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    assert main(["bench", str(model)]) == 2  # the variable names no program: bad input
    assert "LLTUI_LLAMA_BENCH" in capsys.readouterr().err
    # none anywhere: a tool this machine lacks (exit 1, as launch without llama-server)
    monkeypatch.delenv("LLTUI_LLAMA_BENCH")
    monkeypatch.delenv("LLTUI_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert main(["bench", str(model)]) == 1
    err = capsys.readouterr().err.strip()
    assert "no llama-bench found" in err and len(err.splitlines()) == 1


def _fake_bench(tmp_path: Path, monkeypatch, pp_ts: float, tg_ts: float) -> None:
    """A stand-in llama-bench (LLTUI_LLAMA_BENCH) that prints a pp512 and a tg128 row at
    these speeds, one thread, all layers on the GPUs."""
    row = {"n_batch": 2048, "n_ubatch": 512, "n_threads": 1, "n_gpu_layers": -1}
    rows = [row | {"n_prompt": 512, "avg_ts": pp_ts}, row | {"n_gen": 128, "avg_ts": tg_ts}]
    fake = tmp_path / "llama-bench"
    fake.write_text(
        f"#!{sys.executable}\n" + "".join(f"print({json.dumps(json.dumps(r))})\n" for r in rows)
    )
    fake.chmod(0o755)
    monkeypatch.setenv("LLTUI_LLAMA_BENCH", str(fake))


def test_a_busy_host_is_named_as_the_reason_before_a_far_miss(capsys, tmp_path, monkeypatch):
    """On a busy host llama-bench decoded 70x under its prediction: the points were said to be
    'a wrong setup or what the speed model does not cover' and the busy host never named.
    The busy host is the reason given; with --busy-ok the far miss still keeps them out."""
    _fake_bench(tmp_path, monkeypatch, pp_ts=2.0, tg_ts=0.5)
    monkeypatch.setattr(OthersMeter, "share_since", lambda *_a, **_k: 0.6)
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(n_embd=512), "Q8_0")
    out = _bench_json(capsys, str(model), "--quick", "-t", "1")
    busy = "the host was busy (other processes took 60% of its CPUs; at most 10% calibrates)"
    assert [p["left_out"] for p in out["points"]] == [busy, busy]
    assert out["left_out"] == [
        f"2 of 2 points left out of the calibration: {busy}; "
        "bench again when the machine is idle (--busy-ok keeps them)"
    ]
    assert out["calibration"] is None and out["stored"] is None
    out = _bench_json(capsys, str(model), "--quick", "-t", "1", "--busy-ok")
    assert all(p["left_out"].startswith("measured ") for p in out["points"])
    assert out["calibration"] is None and out["stored"] is None
    # the summary gives each point's own figure (it gave the first one's for both)
    hows = [
        p["left_out"].split(" than predicted")[0].removeprefix("measured ") for p in out["points"]
    ]
    (line,) = out["left_out"]
    assert line.startswith(
        f"2 of 2 points left out of the calibration: measured {hows[0]} (pp512), {hows[1]} "
        "(tg128) than predicted, past the 5x"
    )


# --- for real: the pinned CPU llama-bench ----------------------------------------------------


@pytest.fixture
def bench_env(llama_bins, monkeypatch):
    monkeypatch.setenv("LLTUI_LLAMA_BENCH", str(llama_bins.binaries["llama-bench"]))
    return llama_bins


def _bench_json(capsys, *argv: str) -> dict:
    assert main(["bench", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_bench_measures_a_tiny_model_and_later_fits_say_calibrated(
    bench_env, tmp_path, capsys, monkeypatch, kind
):
    # (512 wide: large enough that decode is mostly work, not fixed costs, on any host)
    spec = (
        gf.llama_spec(n_layer=4, n_embd=512)
        if kind == "dense"
        else gf.qwen3moe_spec(n_layer=4, n_expert=8, n_expert_used=2, n_embd=512)
    )
    (model,) = gf.write_model(tmp_path / f"{kind}.gguf", spec, "Q8_0")
    # (--busy-ok: the suite's other tests run beside it; a busy host is tested below)
    out = _bench_json(capsys, str(model), "--quick", "--budget", "240", "-t", "1", "--busy-ok")
    assert not out["same_shape"] and out["rig"]["gpus"] == [] and out["left_out"] == []
    tests = {p["test"] for p in out["points"]}
    assert tests == {"pp512", "tg128"}
    for p in out["points"]:
        assert p["measured_tps"] > 0 and p["predicted_tps"] > 0
    cal = out["calibration"]
    assert cal["points"] == 2 and cal["gpu_decode"] == 1.0  # no GPU measured
    stored = Path(out["stored"])
    assert stored.is_file() and stored.is_relative_to(Path(os.environ["XDG_DATA_HOME"]))
    # the next prediction on this rig uses it and says so, and shows what was measured
    assert main(["fit", str(model), "--gpus", "cpu", "-t", "1", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["speed"]["calibrated"].startswith("calibrated on this rig from 2 points, ")
    assert {m["test"] for m in fit["measured"]} == {"pp512", "tg128"}
    # the points are the file's however it is typed; another file of its name has none (the
    # path as typed was the key: ./m.gguf had none, and another m.gguf had these)
    monkeypatch.chdir(tmp_path)
    assert main(["fit", model.name, "--gpus", "cpu", "-t", "1", "--json"]) == 0
    assert {m["test"] for m in json.loads(capsys.readouterr().out)["measured"]} == {
        "pp512",
        "tg128",
    }
    (tmp_path / "other").mkdir()
    (twin,) = gf.write_model(tmp_path / "other" / model.name, spec, "Q8_0")
    monkeypatch.chdir(twin.parent)
    assert main(["fit", model.name, "--gpus", "cpu", "-t", "1", "--json"]) == 0
    assert "measured" not in json.loads(capsys.readouterr().out)
    # calibrated, the prediction of what was measured lands near it
    dec = next(p for p in out["points"] if p["test"] == "tg128")
    assert dec["calibrated_tps"] == pytest.approx(dec["measured_tps"], rel=0.05)


@pytest.mark.slow
def test_points_measured_on_a_busy_host_are_shown_and_not_kept(bench_env, tmp_path, capsys):
    """For real: processes spinning on every CPU while llama-bench runs. Its speeds are
    printed beside the prediction, but the rig's calibration is left as it was."""
    spec = gf.llama_spec(n_layer=8, n_embd=1024, n_ff=4096, n_head=8, head_dim=128)
    (model,) = gf.write_model(tmp_path / "m.gguf", spec, "Q8_0")  # a second or more a test
    spin = [sys.executable, "-c", "while True: pass"]
    with contextlib.ExitStack() as stack:
        for _ in range(os.cpu_count() or 1):
            burner = stack.enter_context(subprocess.Popen(spin))
            stack.callback(burner.kill)
        meter, began = OthersMeter(None), time.monotonic()
        meter.mark()
        while (meter.share_since(began) or 0) < 2 * HOST_BUSY_MAX:  # the spinners are running
            assert time.monotonic() < began + 60, "the spinners never showed in /proc/stat"
            time.sleep(0.05)
        assert main(["bench", str(model), "--quick", "--budget", "240", "-t", "1"]) == 0
    text = capsys.readouterr().out
    assert "points left out of the calibration: the host was busy (other processes took" in text
    assert "bench again when the machine is idle (--busy-ok keeps them)" in text
    assert "kept in" not in text
    assert not list((Path(os.environ["XDG_DATA_HOME"]) / "lltui" / "bench").glob("rig-*"))


@pytest.mark.slow
def test_a_toy_models_decode_does_not_calibrate(bench_env, tmp_path, capsys):
    """A model of two 64-wide layers: its decode times the host's op dispatch and thread
    barriers, not the work the scales cover; its prompt still counts."""
    spec = gf.llama_spec(n_layer=2, n_embd=64, n_ff=128, n_head=2, head_dim=32, n_vocab=256)
    (model,) = gf.write_model(tmp_path / "toy.gguf", spec, "Q8_0")
    out = _bench_json(capsys, str(model), "--quick", "--budget", "240", "-t", "1", "--busy-ok")
    by_test = {p["test"]: p for p in out["points"]}
    assert by_test["tg128"]["left_out"].startswith("the model is too small for the speed model")
    prompt = by_test["pp512"]["left_out"]
    # the prompt is not too small; only a machine far from its prediction leaves it out (on 2
    # AVX-512 threads such a toy prompt runs 3-5x under it, busy or not)
    assert prompt is None or prompt.startswith("measured "), prompt
    if prompt is not None:
        return
    assert out["left_out"] == [
        "1 of 2 points left out of the calibration: "
        + by_test["tg128"]["left_out"]
        + "; a larger model calibrates this rig"
    ]
    assert out["calibration"]["points"] == 1 and out["calibration"]["host_decode"] == 1.0


@pytest.mark.slow
def test_a_budget_stops_llama_bench_and_keeps_what_ran(bench_env, tmp_path, capsys):
    spec = gf.llama_spec(n_layer=8, n_embd=1024, n_ff=4096, n_head=8, head_dim=128)
    (model,) = gf.write_model(tmp_path / "m.gguf", spec, "Q8_0")  # seconds a test, not ms
    rc = main(["bench", str(model), "--budget", "1", "-t", "1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["stopped"] == "the time budget ran out"
    assert len(out["points"]) < 4
    assert rc == (0 if out["points"] else 1)  # nothing measured is no success


@pytest.mark.slow
def test_a_remote_model_is_benched_as_a_same_shape_file(bench_env, tmp_path, capsys, monkeypatch):
    spec = gf.qwen3moe_spec(n_layer=3, n_expert=8, n_expert_used=2)
    (model,) = gf.write_model(tmp_path / "moe.gguf", spec, "Q8_0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_hub, "token", lambda: None)
    with HubServer(Hub(repos={"acme/Moe-GGUF": Repo(files={"Moe-Q8_0.gguf": model})})) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        ref = "hf:acme/Moe-GGUF:Q8_0"
        out = _bench_json(capsys, ref, "--quick", "--budget", "240", "-t", "1")
    assert out["same_shape"]
    benched = Path(out["benched"])
    assert benched.is_relative_to(tmp_path / "cache") and benched.stat().st_size == (
        model.stat().st_size
    )
    assert {p["test"] for p in out["points"]} == {"pp512", "tg128"}


# --- one convention for a miss -----------------------------------------------------------------


def test_a_miss_reads_the_same_in_bench_and_in_a_served_request():
    """Measured relative to predicted, negative when slower, in the same words everywhere."""
    from lltui.commands.bench import to_json, to_text
    from lltui.core.speed.served import SpeedCheck
    from lltui.services.bench import BenchPoint, BenchReport

    slow = BenchPoint("as given", "tg128", True, 3.0, 0.1, 72.9, 72.9)
    fast = BenchPoint("as given", "pp512", False, 200.0, 1.0, 100.0, 100.0)
    rig = rig_store.RigIdentity((), None, "cpu")
    report = BenchReport(rig, "m", "m", False, "b1", (slow, fast), None, None, None, 1.0, "h")
    text = to_text(report)
    assert "-96%" in text and "+100%" in text and "vs predicted" in text
    assert [p["miss"] for p in to_json(report)["points"]] == [
        pytest.approx(3.0 / 72.9 - 1, abs=1e-4),
        pytest.approx(1.0),
    ]
    served = SpeedCheck(1, False, 128, 64, 3.0, 72.9)
    assert served.line().endswith("measured -96% vs predicted")
    assert SpeedCheck(1, True, 512, 0, 200.0, 100.0).line().endswith("measured +100% vs predicted")


# --- the store, shown, used and cleared --------------------------------------------------------


def test_show_says_what_is_kept_fit_says_it_uses_it_and_reset_clears_it(
    tmp_path, capsys, monkeypatch
):
    from lltui.services.bench import local_rig
    from lltui.sources.gpu.cpu import local_host

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert main(["bench", "--show"]) == 0
    text = capsys.readouterr().out
    assert "no calibration" in text and "--reset" not in text  # nothing kept to forget
    # nothing written yet: where it would be, not 'kept in' a file that is not there
    where = rig_store.record_path(local_rig([], local_host()))
    assert f"\nnone stored yet; would be kept in: {where}\n" in text
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    rig = local_rig([], local_host())
    day = "2026-01-02"
    points = (
        rig_store.StoredPoint(str(model), "CPU", "tg128", True, 50, 60, 0, 0.0166, 0, day),
        rig_store.StoredPoint(str(model), "CPU", "pp512", False, 300, 200, 0, 0.005, 0, day),
    )
    cal = fit_calibration(rig.describe(), "2026-01-02", [p.measured() for p in points])
    path = rig_store.save(rig_store.RigRecord(rig, "b1 (x)", cal, points))
    assert main(["bench", "--show"]) == 0
    text = capsys.readouterr().out
    assert f"\nkept in: {path}\n" in text
    assert "calibrated on this rig from 2 points, 2026-01-02" in text
    assert "-17%" in text and "+50%" in text  # each point's miss, one convention
    assert text.rstrip().endswith("`lltui bench --reset` forgets it")
    assert main(["bench", "--show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["path"] == str(path) and shown["calibration"]["points"] == 2
    assert [p["test"] for p in shown["points"]] == ["tg128", "pp512"]
    # where it is used, it says so
    assert main(["fit", str(model), "--gpus", "cpu", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["speed"]["calibrated"] == "calibrated on this rig from 2 points, 2026-01-02"
    assert main(["fit", str(model), "--gpus", "cpu"]) == 0
    assert "calibrated on this rig from 2 points, 2026-01-02" in capsys.readouterr().out
    # cleared: gone, and fit predicts from the speed model alone
    assert main(["bench", "--reset"]) == 0
    assert f"removed {path}" in capsys.readouterr().out and not path.exists()
    assert main(["fit", str(model), "--gpus", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["speed"]["calibrated"] is None
    assert main(["bench", "--reset", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(path), "removed": False}


def test_a_calibration_of_an_earlier_model_is_shown_set_aside_and_not_used(
    tmp_path, capsys, monkeypatch
):
    from lltui.services.bench import local_rig
    from lltui.sources.gpu.cpu import local_host

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    rig = local_rig([], local_host())
    point = rig_store.StoredPoint(str(model), "CPU", "tg128", True, 50, 60, 0, 0.0166, 0, "d")
    cal = fit_calibration(rig.describe(), "d", [point.measured()])
    path = rig_store.save(rig_store.RigRecord(rig, "b1 (x)", cal, (point,)))
    raw = json.loads(path.read_text())
    raw["speed_model"] = "an-older-one"
    path.write_text(json.dumps(raw))
    assert main(["fit", str(model), "--gpus", "cpu", "--json"]) == 0
    fit = json.loads(capsys.readouterr().out)
    assert fit["speed"]["calibrated"] is None
    assert sum("another speed model" in n for n in fit["notes"]) == 1
    assert main(["bench", "--show"]) == 0
    text = capsys.readouterr().out
    assert "no calibration" in text and "set aside (of another speed model)" in text


@pytest.mark.parametrize("verb", ["--show", "--reset"])
def test_a_folder_where_the_store_should_be_is_set_aside_and_said(
    tmp_path, capsys, monkeypatch, verb
):
    """--show said "no calibration" and nothing more; --reset failed ("Is a directory")."""
    from lltui.services.bench import local_rig
    from lltui.sources.gpu.cpu import local_host

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    path = rig_store.record_path(local_rig([], local_host()))
    path.mkdir(parents=True)
    assert main(["bench", verb]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and f"store {path} could not be read (a folder" in err
    assert not path.exists() and len(rig_store.kept_aside(path)) == 1
    if verb == "--show":
        assert "no calibration" in out and "set aside (could not be read)" in out


def test_show_and_reset_take_no_model(capsys):
    assert main(["bench", "--show", "m.gguf"]) == 2
    assert "take no model" in capsys.readouterr().err


def _benches_of(model: Path) -> list[int]:
    """The llama-bench processes running on ``model`` (zombies excluded)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if (
            state != "Z"
            and words
            and words[0].endswith(b"llama-bench")
            and str(model).encode() in words
        ):
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_llama_bench_ends_with_lltui_however_it_is_stopped(bench_env, tmp_path, sig):
    """Only Ctrl-C stopped it: SIGTERM, SIGHUP and SIGKILL of lltui left llama-bench running
    its repetitions with parent 1."""
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    argv = [sys.executable, "-m", "lltui", "bench", str(model), "--no-store", "--busy-ok"]
    proc = subprocess.Popen(
        [*argv, "-r", "100000", "-t", "1"], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert wait_for(lambda: _benches_of(model), 120), "llama-bench never started"
        proc.send_signal(sig)
        proc.wait(60)
        assert wait_for(lambda: not _benches_of(model), 30), _benches_of(model)
    finally:
        proc.kill()
        for pid in _benches_of(model):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_bench_stopped_before_its_first_result_says_nothing_was_kept(
    bench_env, tmp_path, sig, code, as_json
):
    """Stopped before any test finished, lltui exited 130 or 143 and printed nothing at all
    (with --json, an empty answer); it says in one line that nothing was measured or kept."""
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    argv = [sys.executable, "-m", "lltui", "bench", str(model), "--quick", "-t", "1"]
    argv += ["--busy-ok", "-r", "100000"] + (["--json"] if as_json else [])  # no result comes
    pipe = subprocess.PIPE

    def ctrl_c_as_a_terminal_gives_it() -> None:  # (a test worker may set SIGINT aside)
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        argv, env=env, stdout=pipe, stderr=pipe, text=True, preexec_fn=ctrl_c_as_a_terminal_gives_it
    )
    try:
        assert wait_for(lambda: _benches_of(model), 120), "llama-bench never started"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert wait_for(lambda: not _benches_of(model), 30), _benches_of(model)
    finally:
        proc.kill()
        for pid in _benches_of(model):
            os.kill(pid, signal.SIGKILL)
    line = "bench: stopped before any test finished: nothing was measured or kept"
    assert proc.returncode == code
    assert err.splitlines() == [f"lltui: {line}"]
    assert json.loads(out) == {"error": line, "exit_code": code} if as_json else out == ""
    assert not list(Path(os.environ["XDG_DATA_HOME"]).rglob("rig-*.json"))  # nothing kept


def test_the_busy_summary_gives_each_runs_share_of_the_cpus(capsys, tmp_path, monkeypatch):
    """Two runs on a busy host, 60% and 30% of its CPUs taken by others: the summary said
    '4 of 4 points ...: other processes took 60%', the busiest run's share as every one's."""
    from support.fake_pynvml import FakeNvml, make_gpus

    FakeNvml(make_gpus(1)).install(monkeypatch)  # a GPU: a second run, weights on the host
    _fake_bench(tmp_path, monkeypatch, pp_ts=3000.0, tg_ts=100.0)
    shares = iter([0.6, 0.3, 0.45])  # each run's, then the whole bench's
    monkeypatch.setattr(OthersMeter, "share_since", lambda *_a, **_k: next(shares))
    spec = gf.llama_spec(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128)
    model = gf.write_sparse(tmp_path / "m.gguf", replace(spec, n_ff=14336), "Q4_0")
    out = _bench_json(capsys, str(model), "-t", "1")
    runs = [p["config"] for p in out["points"]]
    assert len(runs) == 4 and len(set(runs)) == 2, runs
    (line,) = out["left_out"]
    assert line == (
        "4 of 4 points left out of the calibration: the host was busy (other processes took "
        f"60% ({runs[0]}), 30% ({runs[2]}) of its CPUs; at most 10% calibrates); "
        "bench again when the machine is idle (--busy-ok keeps them)"
    )

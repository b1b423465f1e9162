"""What fit tells a user whose settings fit but are not what they think: a model split over
several GPUs that fewer would hold (the command that picks them, checked by estimating it
and by a brute force over every smaller set), and a ``-ts`` with more values than devices
(in ``lltui fit``, ``lltui launch`` and the views). Also the few words a summary spends on
a rig: identical GPUs said together."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from support import gguf_factory as gf
from support.fake_pynvml import FakeNvml, make_gpus

from lltui.cli import main
from lltui.core.cmdline.args import parse_llama_args
from lltui.services.devices import describe, resolve_devices
from lltui.services.fit import FitRequest, fit


@pytest.fixture(scope="module")
def llama8b(tmp_path_factory):
    path = tmp_path_factory.mktemp("hints") / "llama-8b.gguf"
    gf.write_model(path, gf.llama_8b_spec(), "Q4_K", sparse=True, name="Llama 8B")
    return str(path)


@pytest.fixture(scope="module")
def llama70b(tmp_path_factory):
    shape = dict(n_embd=8192, n_ff=28672, n_head=64, n_head_kv=8, head_dim=128, n_layer=80)
    spec = gf.llama_spec(**{**shape, "n_vocab": 128256})
    path = tmp_path_factory.mktemp("hints") / "llama-70b.gguf"
    gf.write_model(path, spec, "Q4_K", sparse=True, name="Llama 70B")
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _fit(model: str, gpus: str, *flags: str):
    return fit(FitRequest(model=model, args=parse_llama_args(list(flags)), gpus=gpus)).result


def test_an_8b_split_over_eight_h100s_is_told_one_holds_it(llama8b, capsys):
    rc, out, _ = run(capsys, "fit", llama8b, "--gpus", "sim:8xh100-sxm")
    assert rc == 0
    assert "fewer GPUs: -dev CUDA0: one GPU holds it" in out
    assert "the other 7 stay free" in out and "-sm none -mg 0" in out
    rc, out, _ = run(capsys, "fit", llama8b, "--gpus", "sim:8xh100-sxm", "--json")
    hints = json.loads(out)["hints"]
    assert [h["flags"] for h in hints] == [["-dev", "CUDA0"]]
    # what it says is what an estimate of that command says
    there = _fit(llama8b, "sim:8xh100-sxm", "-dev", "CUDA0")
    holding = [d.name for d in there.devices if d.kind != "cpu" and d.total_bytes]
    assert there.fits and holding == ["CUDA0"]


def test_the_fewest_gpus_are_found_and_none_fewer_would_do(llama70b):
    base = _fit(llama70b, "sim:4xl4", "-c", "4096")
    assert base.fits and sum(1 for d in base.devices if d.kind == "cuda" and d.total_bytes) == 4
    (hint,) = base.hints
    assert hint.flags[0] == "-dev"
    picked = hint.flags[1].split(",")
    there = _fit(llama70b, "sim:4xl4", "-c", "4096", *hint.flags)
    assert there.fits
    # brute force: no smaller set of these GPUs holds it with the same settings
    names = [f"CUDA{i}" for i in range(4)]
    for k in range(1, len(picked)):
        for subset in itertools.combinations(names, k):
            assert not _fit(llama70b, "sim:4xl4", "-c", "4096", "-dev", ",".join(subset)).fits


def test_many_gpus_fixed_costs_do_not_hide_that_one_holds_it(tmp_path, capsys):
    # sixteen GPUs' compute buffers and margins together outweigh one V100, but one holds it
    path = tmp_path / "qwen3moe-30b.gguf"
    gf.write_sparse(path, gf.qwen3moe_30b_a3b_spec(), "Q4_0")
    rc, out, _ = run(capsys, "fit", str(path), "--gpus", "sim:16xv100-dgx2")
    assert rc == 0
    assert "fewer GPUs: -dev CUDA0: one GPU holds it" in out
    assert "the other 15 stay free" in out
    rc, out, _ = run(capsys, "fit", str(path), "--gpus", "sim:16xv100-dgx2", "--json")
    assert [h["flags"] for h in json.loads(out)["hints"]] == [["-dev", "CUDA0"]]
    assert _fit(str(path), "sim:16xv100-dgx2", "-dev", "CUDA0").fits


@pytest.mark.parametrize(
    ("gpus", "flags"),
    [
        ("sim:kaggle-2xt4", ["-c", "4096", "-sm", "none"]),  # one GPU already
        ("T4", []),  # one GPU only
        ("24GiB,24GiB", ["-ngl", "0"]),  # nothing on the GPUs
    ],
)
def test_no_fewer_gpu_hint_where_there_is_nothing_to_gain(llama8b, gpus, flags):
    assert _fit(llama8b, gpus, *flags).hints == ()


def test_no_hint_when_the_model_needs_every_gpu(llama70b):
    res = _fit(llama70b, "24GiB,24GiB", "-c", "2048")
    assert res.fits and res.hints == ()


def test_identical_gpus_are_said_together():
    def said(spec: str) -> str:
        return describe(resolve_devices(spec)[0])

    assert said("sim:8xh100-sxm") == "8x H100 80GB HBM3 (CUDA0-7)"
    assert said("sim:16xv100-dgx2") == "16x V100-SXM3-32GB (CUDA0-15)"
    assert said("4090,3090") == "CUDA0 RTX 4090, CUDA1 RTX 3090"
    assert said("24GiB,24GiB") == "2x 24.0 GiB (CUDA0,1)"
    assert said("cpu") == "the host only"


def test_the_speed_line_says_alike_devices_together(llama8b, capsys):
    _rc, out, _ = run(capsys, "fit", llama8b, "--gpus", "sim:8xh100-sxm")
    speed = next(line for line in out.splitlines() if line.startswith("speed:"))
    assert re.search(r"CUDA1-6 \d+\.\d\d ms", speed) and "(memory)" not in speed
    assert speed.count("CUDA") == 3


def test_fit_warns_of_a_tensor_split_longer_than_the_devices(llama8b, capsys):
    rc, out, _ = run(capsys, "fit", llama8b, "--gpus", "T4,T4", "-ts", "1,1,1")
    assert rc == 0
    assert "warning: -ts gives 3 values for 2 devices: llama.cpp uses 1,1 and ignores 1" in out
    rc, out, _ = run(capsys, "fit", llama8b, "--gpus", "T4,T4", "-ts", "1,1,1", "--json")
    assert any("-ts gives 3 values" in w for w in json.loads(out)["warnings"])
    rc, out, _ = run(capsys, "fit", llama8b, "--gpus", "T4,T4", "-ts", "3,1")
    assert "-ts gives" not in out


def test_launch_warns_of_a_tensor_split_longer_than_the_gpus(llama8b, capsys, monkeypatch):
    FakeNvml(make_gpus(2)).install(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rc, _out, err = run(capsys, "launch", llama8b, "-ts", "1,1,1", "--dry-run")
    assert rc == 0
    assert "-ts gives 3 values for 2 devices" in err
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the server sees one of them
    rc, _out, err = run(capsys, "launch", llama8b, "-ts", "1,1", "--dry-run")
    assert "-ts gives 2 values for 1 device" in err
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    rc, _out, err = run(capsys, "launch", llama8b, "-ts", "3,1", "--dry-run")
    assert "-ts gives" not in err


def test_the_launch_view_preview_warns_of_it_for_the_rig_in_view(llama8b):
    from lltui.app.state.launch import preview_command

    line, note = preview_command(llama8b, "-ts 1,1,1", "127.0.0.1:8080", n_gpus=2)
    assert line and note is not None and "-ts gives 3 values for 2 devices" in note
    _line, note = preview_command(llama8b, "-ts 1,1", "127.0.0.1:8080", n_gpus=2)
    assert note is None or "-ts gives" not in note


def test_a_device_named_twice_in_dev_is_one_line(llama8b, capsys):
    """-dev CUDA0,CUDA0 would count one GPU's free memory twice."""
    assert main(["fit", str(llama8b), "--gpus", "4090,4090", "-dev", "CUDA0,CUDA0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["lltui: fit: -dev names CUDA0 twice: one GPU listed as two is not estimated "
                   "(give each device once)"]  # fmt: skip


def test_an_rpc_server_that_does_not_answer_is_no_plain_fits(llama8b, capsys):
    """A closed port: its free memory unknown, the verdict is unknown, not "fits", and
    "fits" null in --json as quant's rows (it was true, so a script would launch)."""
    import socket

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        argv = ["fit", str(llama8b), "--gpus", "4090", "--rpc", f"127.0.0.1:{port}"]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert main([*argv, "--json"]) == 0
    rpc = f"RPC0[127.0.0.1:{port}]"
    assert f"verdict: unknown: the free memory of {rpc} is not known (fits on the rest)" in out
    assert "llama-server would not start" in out
    data = json.loads(capsys.readouterr().out)  # the JSON says where it is not known too
    assert data["fits"] is None and data["fits_unknown_on"] == [rpc]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--gpus", "cpu", "-sm", "tensor"], "-sm tensor needs a GPU to split over"),
        (["--gpus", "2x24GiB", "-dev", "none", "-sm", "tensor"], "-sm tensor needs a GPU"),
        (["--gpus", "24GiB", "-np", "300", "-c", "76800"], "-np 300: llama.cpp takes at most 256"),
        (["--gpus", "cpu", "-ot", "nomatch=FOO"], "-ot nomatch=FOO: unknown buffer type"),
        (["--gpus", "rpc:127.0.0.1:50052=8GiB,rpc:127.0.0.1:50052=8GiB"], "is given twice"),
        (["--gpus", "2x24GiB", "--margin", "1e99"], "--margin must be 0 to"),
        # fewer outputs than slots: the pinned CPU build's llama-server (and llama-fit-params)
        # abort loading, GGML_ASSERT(n_outputs_max <= cparams.n_outputs_max)
        (["--gpus", "cpu", "-b", "3", "-np", "4"], "a batch of 3 (-b) is below the 4 slots"),
        (["--gpus", "24GiB", "-b", "2"], "a batch of 2 (-b) is below the 4 slots"),
        (["--gpus", "cpu", "--embedding", "-ub", "2", "-np", "4"], "a batch of 2 (-b)"),
    ],
)
def test_what_llama_cpp_refuses_is_refused_in_one_line(llama8b, capsys, extra, said):
    """Each of these llama-server refuses (or lltui cannot count): not "fits"."""
    assert main(["fit", llama8b, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err


def test_dev_names_a_device_in_any_case_as_llama_cpp_does(llama8b, capsys):
    assert main(["fit", llama8b, "--gpus", "2x24GiB", "-dev", "cuda1", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)["devices"]
    assert [d["name"] for d in devices if d["layers"]] == ["CUDA1"]


def test_fit_on_the_rig_in_use_reads_only_what_it_uses(llama8b, capsys, monkeypatch):
    """fit sampled the rig as the monitor does: every GPU's process list and PCIe
    throughput (NVML takes 20 ms a counter a GPU) and a tenth of a second's wait for rates,
    none of which a fit reads."""
    import time

    fake = FakeNvml(make_gpus(4)).install(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    waits: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(time, "sleep", lambda s: (waits.append(s), real_sleep(0))[1])
    rc, out, _err = run(capsys, "fit", llama8b, "-c", "4096")
    assert rc == 0 and out.count("CUDA") >= 4
    called = {fn for (_g, fn) in fake.calls}
    assert "nvmlDeviceGetPcieThroughput" not in called
    assert not {fn for fn in called if "RunningProcesses" in fn}
    assert "nvmlDeviceGetPowerManagementLimit" in called or any("Power" in f for f in called)
    assert not [s for s in waits if s >= 0.05]

"""The calibration store under hostile input: llama-bench rows with speeds that are not
speeds, store files that are cut short, of another format, nested without end, oversized or
holding one bad point among good ones. Bad points are skipped with a count, a file that
cannot be read is set aside (never overwritten), what is parsed is bounded, and writes are
atomic and private. llama-bench itself cannot be made to print NaN: a script stands in for
it, printing what a broken build or a damaged pipe could."""

from __future__ import annotations

import json
import math
import signal
import stat
import sys
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.fake_pynvml import FakeNvml, make_gpus

from lltui.cli import main
from lltui.core.hardware.calibration import Calibration
from lltui.core.hardware.host import default_host
from lltui.core.speed.calibration import MeasuredPoint, fit_calibration
from lltui.sources.gpu import rig_store

RIG = rig_store.RigIdentity(("NVIDIA GeForce RTX 4090",), "575.57.08", "AMD Ryzen 9")


def _strict(text: str) -> object:
    def refuse(word: str) -> object:
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def _point(test: str = "tg128", tps: float = 50.0, **kw: object) -> rig_store.StoredPoint:
    fields: dict = dict(
        model="m.gguf",
        config="as given",
        test=test,
        decode=test.startswith("tg"),
        measured_tps=tps,
        predicted_tps=60.0,
        gpu_s=0.0166,
        host_s=0.0,
        other_s=0.0,
        date="2026-01-02",
    )
    fields.update(kw)
    return rig_store.StoredPoint(**fields)


def _save(env: dict[str, str], *points: rig_store.StoredPoint) -> Path:
    cal = Calibration(RIG.describe(), "2026-01-02", 1.2, 1.0, 1.0, 1.0, len(points))
    return rig_store.save(rig_store.RigRecord(RIG, "b1 (x)", cal, points), env)


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {"XDG_DATA_HOME": str(tmp_path / "data")}


# --- writing --------------------------------------------------------------------------------


def test_the_store_is_written_private_and_whole(env):
    path = _save(env, _point())
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    _strict(path.read_text())


def test_a_point_that_is_not_a_speed_is_never_written(env):
    path = _save(env, _point(), _point("pp512", tps=math.nan), _point("tg32", tps=math.inf))
    raw = _strict(path.read_text())
    assert isinstance(raw, dict)
    assert [p["test"] for p in raw["points"]] == ["tg128"]


# --- reading --------------------------------------------------------------------------------


def _told() -> tuple[list[str], object]:
    said: list[str] = []
    return said, said.append


def test_one_bad_point_is_skipped_and_the_good_ones_kept(env):
    path = _save(env, _point(), _point("pp512", tps=300.0))
    raw = json.loads(path.read_text())
    bad = [
        dict(raw["points"][0], measured_tps="NaN"),
        dict(raw["points"][0], measured_tps=0),
        dict(raw["points"][0], measured_tps=-3.5),
        dict(raw["points"][0], gpu_s=1e999),  # json reads it as infinity
        dict(raw["points"][0], decode="yes"),
        "not a point",
    ]
    raw["points"] += bad
    text = json.dumps(raw).replace('"NaN"', "NaN").replace("Infinity", "1e999")
    path.write_text(text)
    said, say = _told()
    back = rig_store.load(RIG, env, say=say)
    assert back is not None
    assert [p.test for p in back.points] == ["tg128", "pp512"]
    assert back.skipped == len(bad)
    assert said == [] and path.is_file()  # readable: kept where it is
    # the calibration is fitted anew from the good points, not reset to x1.00
    for scale in (back.calibration.gpu_decode, back.calibration.gpu_prefill):
        assert math.isfinite(scale)
    assert back.calibration.gpu_decode == pytest.approx(60 / 50, rel=0.02)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(lambda good: good[: len(good) // 2], id="truncated"),
        pytest.param(lambda good: good.replace('"format": 1', '"format": 7'), id="another-format"),
        pytest.param(lambda good: "[" * 100_000 + "]" * 100_000, id="nested-100000"),
        pytest.param(lambda good: '{"a":' * 100_000 + "1" + "}" * 100_000, id="nested-objects"),
        pytest.param(lambda good: good + " " * (2 << 20), id="oversized"),
        pytest.param(lambda good: "\x00\xff garbage", id="binary"),
        pytest.param(lambda good: good.replace('"gpu_decode": 1.2', '"gpu_decode": NaN'),
                     id="nan-scale"),
    ],
)  # fmt: skip
def test_a_store_that_cannot_be_read_is_set_aside_and_said_once(env, content):
    path = _save(env, _point())
    good = path.read_text()
    path.write_text(content(good))
    said, say = _told()
    assert rig_store.load(RIG, env, say=say) is None
    assert not path.exists()
    (aside,) = [p for p in path.parent.iterdir() if p.name.startswith(path.name + ".unreadable-")]
    assert aside.read_text() == content(good)  # kept as it was
    assert len(said) == 1 and str(aside) in said[0] and "could not be read" in said[0]
    # the next reader finds no store and says nothing more; a new one starts afresh
    assert rig_store.load(RIG, env, say=say) is None
    _save(env, _point("pp512"))
    assert len(said) == 1 and aside.is_file()
    back = rig_store.load(RIG, env, say=say)
    assert back is not None and [p.test for p in back.points] == ["pp512"]


def test_a_fifo_in_the_stores_place_is_set_aside_not_waited_on(env):
    import os

    path = rig_store.record_path(RIG, env)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    said, say = _told()
    assert rig_store.load(RIG, env, say=say) is None
    assert not path.exists() and len(said) == 1 and "not a regular file" in said[0]


def test_saving_over_a_store_that_cannot_be_read_keeps_it(env):
    path = _save(env, _point())
    path.write_text("{cut sh")
    said, say = _told()
    rig_store.save(
        rig_store.RigRecord(RIG, "b1", Calibration(RIG.describe(), "d"), (_point("pp512"),)),
        env,
        say=say,
    )
    asides = [p for p in path.parent.iterdir() if ".unreadable-" in p.name]
    assert len(asides) == 1 and asides[0].read_text() == "{cut sh"
    assert len(said) == 1


def test_decoding_is_bounded_and_raises_one_kind_of_error():
    for text in ("[" * 200_000, '{"format": 1, "rig": ' * 50_000, "1e999", "", "null"):
        with pytest.raises(rig_store.StoreUnreadable):
            rig_store.decode_store(text)


def test_fitting_skips_points_that_are_not_measurements():
    good = MeasuredPoint(True, 0.02, 0.01, 0.0)
    bad = [
        MeasuredPoint(True, math.nan, 0.01, 0.0),
        MeasuredPoint(True, math.inf, 0.01, 0.0),
        MeasuredPoint(True, 0.02, math.inf, 0.0),
        MeasuredPoint(True, 0.02, math.nan, 0.0),
        MeasuredPoint(True, 0.02, -0.01, 0.0),
        MeasuredPoint(True, -0.02, 0.01, 0.0),
    ]
    got = fit_calibration("r", "d", [good, *bad])
    assert got.points == 1
    assert got.gpu_decode == pytest.approx(2.0, rel=0.01)


# --- through the command line ---------------------------------------------------------------


def _fake_bench(tmp_path: Path, rows: list[str], host_rows: list[str] | None = None) -> Path:
    """A stand-in for llama-bench printing ``rows`` as its JSONL output (``host_rows`` for a
    run with the weights on the host, ``-ngl 0``, where given)."""
    script = tmp_path / "fake-llama-bench"
    body, host = "\n".join(rows), "\n".join(host_rows if host_rows is not None else rows)
    script.write_text(
        f"#!{sys.executable}\nimport sys\na = sys.argv\n"
        f"ngl0 = '-ngl' in a and a[a.index('-ngl') + 1] == '0'\n"
        f"sys.stdout.write(({host!r} if ngl0 else {body!r}) + '\\n')\n"
    )
    script.chmod(0o755)
    return script


def _row(**kw: object) -> dict:
    row: dict = dict(
        n_prompt=0, n_gen=128, n_depth=0, n_batch=2048, n_ubatch=512, n_threads=1,
        n_gpu_layers=99, type_k="f16", type_v="f16", avg_ts=20.0, stddev_ts=0.5,
        build_commit="abc", build_number=1,
    )  # fmt: skip
    row.update(kw)
    return row


@pytest.fixture
def bench_here(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # the rows' speeds are set against the assumed desktop CPU's predictions: on this
    # machine's own CPU (2 AVX-512 threads predict a prompt 6x the rows') a point may fall
    # past the 5x a calibration takes, and what is left out would depend on the machine
    monkeypatch.setattr("lltui.sources.gpu.cpu.local_host", default_host)
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")

    def run(capsys, rows: list[str], *flags: str) -> tuple[int, dict, str]:
        monkeypatch.setenv("LLTUI_LLAMA_BENCH", str(_fake_bench(tmp_path, rows)))
        # (--busy-ok: the suite's other tests may keep the CPUs busy meanwhile)
        rc = main(["bench", str(model), *flags, "--quick", "--json", "--busy-ok"])
        out = capsys.readouterr()
        return rc, _strict(out.out) if out.out else None, out.err  # type: ignore[return-value]

    return run


def test_bench_rows_that_are_not_speeds_are_skipped_with_a_count(bench_here, capsys, tmp_path):
    rows = [
        json.dumps(_row(avg_ts=2000.0)),
        json.dumps(_row(n_prompt=512, n_gen=0, avg_ts=2500.0)),
        json.dumps(_row(avg_ts=float("nan"))),
        json.dumps(_row(avg_ts=float("inf"))),
        json.dumps(_row(avg_ts=0)),
        json.dumps(_row(avg_ts=-4.0)),
        json.dumps(_row(stddev_ts=float("nan"))),  # a speed, with a spread that is not
    ]
    rc, out, _err = bench_here(capsys, rows)
    assert rc == 0
    assert out["skipped_rows"] == 4
    assert len(out["points"]) == 3
    cal = out["calibration"]
    # fitted, not reset: the two tg128 rows are one run, the later kept
    assert cal["points"] == 2 and cal["host_decode"] != 1.0
    raw = _strict(Path(out["stored"]).read_text())
    assert isinstance(raw, dict) and len(raw["points"]) == 2


@pytest.fixture
def gpu_bench(tmp_path, monkeypatch):
    """A GPU rig through the FAKE pynvml (one RTX 3090, its use set by the test), the host
    idle whatever the suite runs beside, llama-bench a stand-in; an 8B's shape, its weights
    a hole (decode on the GPU is mostly work, not launches). Returns the GPU and a runner:
    rows -> lltui bench's exit code."""
    gpus = make_gpus(1)
    FakeNvml(gpus).install(monkeypatch)
    monkeypatch.setattr("lltui.services.bench.GPU_SAMPLE_PERIOD_S", 0.0)
    monkeypatch.setattr("lltui.sources.gpu.procfs.OthersMeter.share_since", lambda *a, **k: 0.0)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_8b_spec(), "Q4_0", sparse=True)

    def run(rows: list[dict], *flags: str) -> int:
        lines = [json.dumps(r) for r in rows]
        # the weights on the host: an 8B's decode there at about what the model predicts
        host = [json.dumps({**r, "n_gpu_layers": 0, "avg_ts": 1.5}) for r in rows]
        monkeypatch.setenv("LLTUI_LLAMA_BENCH", str(_fake_bench(tmp_path, lines, host)))
        return main(["bench", str(model), "--quick", *flags])

    return gpus[0], run


@pytest.mark.parametrize("util", [0, 60])
def test_a_gpu_another_process_keeps_busy_is_no_calibration(gpu_bench, capsys, util):
    """A GPU that another process keeps 60% busy around the runs leaves their points out;
    an idle one does not."""
    gpu, run = gpu_bench
    gpu.util_gpu = util
    assert run([_row(n_gpu_layers=99, avg_ts=120.0)], "--json") == 0
    out = _strict(capsys.readouterr().out)
    assert isinstance(out, dict) and out["rig"]["gpus"] == ["NVIDIA GeForce RTX 3090"]
    left_out = [p["left_out"] for p in out["points"]]
    if util:
        assert left_out and all(w == "another process kept a GPU 60% busy just before or "
                                "after llama-bench ran" for w in left_out)  # fmt: skip
        assert out["calibration"] is None and out["stored"] is None
    else:
        assert left_out and left_out == [None] * len(left_out) and out["stored"]


def test_a_bench_whose_every_point_is_left_out_leaves_the_store_as_it_was(gpu_bench, capsys):
    """Calibrated once on an idle GPU; benched again while another process keeps it busy:
    nothing of the second run counts, so the store is not written again (not refitted, not
    stamped with that run's build) and no "kept in" is said."""
    gpu, run = gpu_bench
    gpu.util_gpu = 0
    assert run([_row(n_gpu_layers=99, avg_ts=120.0)], "--json") == 0
    stored = Path(_strict(capsys.readouterr().out)["stored"])  # type: ignore[index]
    before = stored.read_bytes()
    gpu.util_gpu = 60
    assert run([_row(n_gpu_layers=99, avg_ts=60.0, build_number=2)]) == 0
    text = capsys.readouterr().out
    assert "another process kept a GPU 60% busy" in text and "kept in" not in text
    assert stored.read_bytes() == before


def test_a_run_lltui_cannot_predict_is_said_so_and_left_out(bench_here, capsys):
    """-np 1024 leaves no context per sequence: no prediction, not "too small a model"."""
    rows = [json.dumps(_row(avg_ts=20.0))]
    rc, out, _err = bench_here(capsys, rows, "-np", "1024")
    assert rc == 0 and out["points"] and out["calibration"] is None
    assert all(p["left_out"] == "lltui predicts nothing for these settings" for p in out["points"])


def test_a_row_with_out_of_range_counts_is_no_internal_error(bench_here, capsys):
    huge = json.dumps(_row()).replace('"n_prompt": 0', '"n_prompt": 1e999')
    neg = json.dumps(_row(n_gen=-(2**40)))
    rc, out, err = bench_here(capsys, [huge, neg])
    assert rc == 1 and "internal error" not in err and "no test finished" in err
    assert out["points"] == [] and out["calibration"] is None


def test_a_store_nested_deep_breaks_no_command(bench_here, capsys, tmp_path):
    from lltui.services.bench import local_rig
    from lltui.sources.gpu.cpu import local_host

    path = rig_store.record_path(local_rig([], local_host()))
    path.parent.mkdir(parents=True)
    path.write_text("[" * 100_000 + "]" * 100_000)
    model = tmp_path / "m.gguf"
    assert main(["fit", str(model), "--gpus", "cpu", "--json"]) == 0
    out = capsys.readouterr()
    notes = _strict(out.out)["notes"]  # with the estimate's notes, which the app shows too
    assert sum("could not be read" in n for n in notes) == 1 and out.err == ""
    assert main(["fit", str(model), "--gpus", "cpu", "--json"]) == 0
    assert "could not be read" not in capsys.readouterr().out  # said once


def test_a_store_a_far_off_point_set_to_the_limit_is_fitted_anew(env):
    """A store fitted before such points were left out kept its x5 scale until --reset."""
    wild = _point("tg128", tps=2.0)  # 30x slower than the 60 t/s predicted
    path = _save(env, wild, _point("pp512", tps=50.0))
    raw = json.loads(path.read_text())
    raw["calibration"].update(gpu_decode=5.0)
    path.write_text(json.dumps(raw))
    back = rig_store.load(RIG, env)
    assert back is not None and back.calibration.gpu_decode == 1.0


def test_a_store_from_before_served_points_were_held_is_fitted_anew(env):
    """One served request on a busy host once moved every prediction five-fold: a store
    written then (no "held") is read with the rules of now."""
    served = _point("served decode", tps=15.0, source="llama-server", predicted_tps=60.0)
    path = _save(env, served)
    raw = json.loads(path.read_text())
    raw["calibration"].update(gpu_decode=5.0, points=1)
    del raw["calibration"]["held"]
    path.write_text(json.dumps(raw))
    back = rig_store.load(RIG, env)
    assert back is not None and back.points == (served,)
    assert (back.calibration.gpu_decode, back.calibration.points, back.calibration.held) == (
        1.0,
        0,
        1,
    )


def test_a_store_from_before_the_offload_scales_reads_them_as_one(env):
    """A store kept before copies and all-reduces were scales of their own: its points have
    no such part and its calibration no such scale; both read as untouched."""
    path = _save(env, _point())
    raw = json.loads(path.read_text())
    for name in ("copy", "reduce"):
        del raw["calibration"][name]
    for p in raw["points"]:
        del p["copy_s"], p["reduce_s"]
    path.write_text(json.dumps(raw))
    back = rig_store.load(RIG, env)
    assert back is not None and len(back.points) == 1 and back.points[0].copy_s == 0.0
    assert (back.calibration.copy, back.calibration.reduce) == (1.0, 1.0)


def test_the_offload_scales_are_kept_and_guarded(env):
    offload = _point("pp512", tps=300.0, predicted_tps=400.0, copy_s=0.002, reduce_s=0.0)
    path = _save(env, offload)
    back = rig_store.load(RIG, env)
    assert back is not None and back.points == (offload,)
    raw = json.loads(path.read_text())
    raw["calibration"]["copy"] = 50.0  # past the factor of 5 a scale may reach
    path.write_text(json.dumps(raw))
    assert rig_store.load(RIG, env, say=lambda _line: None) is None  # set aside, not used
    bad = _point("pp512", copy_s=-1.0)
    assert not bad.usable  # a negative part is no prediction


@pytest.mark.parametrize(
    ("source", "here"),
    [("nvml", True), ("smi", True), ("amd", True), ("smi:gpu-box", False), ("sim:4xl4", False)],
)
def test_a_watched_rig_is_this_machines_where_its_driver_is_local(source, here):
    """The host and this rig's calibration are this machine's for a local driver's rig
    (NVML, nvidia-smi, AMD's), never for a remote host's or a simulated one."""
    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.monitor.models import RigInfo, RigSample
    from lltui.services.fit import FitRequest, _here

    sample = RigSample(1, 0.0, 0.0, RigInfo(source, simulated=source.startswith("sim")), ())
    request = FitRequest("m.gguf", parse_llama_args([]), sample=sample, watch_rig=True)
    assert _here(request) is here


def test_a_store_of_an_earlier_speed_model_is_kept_aside_not_applied(env, capsys):
    """Scales fitted against other constants' predictions would skew these ones (an older
    lltui's host share, say): such a store is renamed, said once, and not used."""
    path = _save(env, _point())
    raw = json.loads(path.read_text())
    assert raw["speed_model"]  # the constants it was fitted against
    raw["speed_model"] = "0" * 12
    path.write_text(json.dumps(raw))
    lines: list[str] = []
    assert rig_store.load(RIG, env, say=lines.append) is None
    assert len(lines) == 1 and "another speed model" in lines[0] and "lltui bench" in lines[0]
    assert not path.exists() and len(list(path.parent.glob(path.name + ".stale-*"))) == 1
    del raw["speed_model"]  # a store from before the mark: as stale
    path.write_text(json.dumps(raw))
    assert rig_store.load(RIG, env, say=lines.append) is None and len(lines) == 2


def test_host_given_is_not_calibrated_by_this_machine(bench_here, capsys, tmp_path):
    """--host describes another CPU: this EPYC's host scales were applied to it, and it
    said "calibrated on this rig"."""
    rows = [json.dumps(_row(avg_ts=2000.0)), json.dumps(_row(n_prompt=512, n_gen=0, avg_ts=2500.0))]
    rc, _out, _err = bench_here(capsys, rows)
    assert rc == 0
    model = str(tmp_path / "m.gguf")
    assert main(["fit", model, "--gpus", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["speed"]["calibrated"]
    host = "cores=64,isa=avx512,ghz=3.5,mem=400"
    assert main(["fit", model, "--gpus", "cpu", "--host", host, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["speed"]["calibrated"] is None
    assert any("--host" in n for n in data.get("notes", []) + data.get("warnings", []))


def test_quant_says_its_speeds_are_calibrated(bench_here, capsys, tmp_path):
    """quant applied this rig's calibration to its t/s column and never said so."""
    rows = [json.dumps(_row(avg_ts=2000.0)), json.dumps(_row(n_prompt=512, n_gen=0, avg_ts=2500.0))]
    assert bench_here(capsys, rows)[0] == 0
    model = str(tmp_path / "m.gguf")
    assert main(["quant", model, "--gpus", "cpu"]) == 0
    assert "t/s calibrated on this rig from" in capsys.readouterr().out
    assert main(["quant", model, "--gpus", "cpu", "--json"]) == 0
    speeds = [r["speed"] for r in json.loads(capsys.readouterr().out)["rows"] if r["speed"]]
    assert speeds and all(s["calibrated"].startswith("calibrated on this rig") for s in speeds)


def test_a_point_far_off_its_prediction_does_not_set_a_scale_to_the_clamp():
    """One point 40x slower than predicted (a toy model's prompt on a busy machine) set
    the host's prompt scale to its clamp, x5, for every later prediction on the rig."""
    good = MeasuredPoint(False, 0.012, 0.0, 0.01)
    wild = MeasuredPoint(False, 0.4, 0.0, 0.01)
    got = fit_calibration("r", "d", [good, wild])
    assert got.points == 1 and got.host_prefill == pytest.approx(1.2, rel=0.01)
    alone = fit_calibration("r", "d", [wild])
    assert alone.points == 0 and alone.host_prefill == 1.0


def test_a_miss_just_past_the_limit_does_not_read_as_the_limit():
    """tg128 at 8.6 t/s against 45.4 predicted (5.3x) read 'measured 5x slower than
    predicted, past the 5x a calibration may move'."""
    from lltui.core.speed.calibration import far_off

    why = far_off(MeasuredPoint(True, 0.0053, 0.0, 0.001))
    assert why is not None and why.startswith("measured 5.3x slower than predicted, past the 5x")
    assert (far_off(MeasuredPoint(True, 0.07, 0.0, 0.001)) or "").startswith("measured 70x slower")
    assert (far_off(MeasuredPoint(True, 0.00016, 0.0, 0.001)) or "").startswith(
        "measured 6.2x faster"
    )


def test_a_bench_point_far_off_its_prediction_is_left_out_and_said(gpu_bench, capsys):
    gpu, run = gpu_bench
    gpu.util_gpu = 0
    assert run([_row(n_gpu_layers=99, avg_ts=1.0)], "--json") == 0  # 8B Q4_0 on a 3090
    out = _strict(capsys.readouterr().out)
    assert isinstance(out, dict)
    why = out["points"][0]["left_out"]  # (the GPU's; the quick run's other is the CPU's)
    assert why.startswith("measured ") and "x slower than predicted" in why
    assert out["calibration"] is None or out["calibration"]["gpu_decode"] == 1.0


def test_a_bench_that_measured_nothing_is_no_success(bench_here, capsys):
    """llama-bench that exits 0 and prints no result: "(no test finished)" and exit 0."""
    rc, out, err = bench_here(capsys, ["llama-bench: nothing to say"])
    assert rc == 1 and out["points"] == []
    assert err.strip().splitlines() == [
        "lltui: bench: no test finished (llama-bench printed no result lltui could read)"
    ]


def test_no_store_says_the_calibration_shown_is_not_kept(bench_here, capsys):
    rows = [json.dumps(_row(avg_ts=2000.0)), json.dumps(_row(n_prompt=512, n_gen=0, avg_ts=2500.0))]
    rc, out, _err = bench_here(capsys, rows, "--no-store")
    assert rc == 0 and out["calibration"] is not None and out["stored"] is None
    assert out["not_stored"].startswith("--no-store")


def test_reset_of_a_store_that_cannot_be_removed_is_one_line(tmp_path, monkeypatch, capsys):
    """A file where the data folder should be: "internal error" and exit 1."""
    blocker = tmp_path / "afile"
    blocker.write_text("")
    monkeypatch.setenv("XDG_DATA_HOME", str(blocker))
    assert main(["bench", "--reset"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lltui: bench: cannot remove ")
    assert "internal error" not in err[0]


@pytest.mark.parametrize("measured", [True, False])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_shows_what_was_measured_and_keeps_none_of_it(
    bench_here, capsys, monkeypatch, signum, measured
):
    """Ctrl-C (or SIGTERM) after minutes of runs printed nothing: what was measured was
    lost without a word, where a budget that ran out keeps it. The exit is 128 + the
    signal's number, whether or not a test had finished: SIGTERM exited 130, as Ctrl-C."""
    from lltui.sources.llama import bench as llama_bench

    real = llama_bench.run_bench

    def then_stopped(*args, **kwargs):
        real(*args, **kwargs)
        signal.raise_signal(signum)  # its handler raises here (SIGINT's: KeyboardInterrupt)

    monkeypatch.setattr(llama_bench, "run_bench", then_stopped)
    # Ctrl-C's own handler (a test runner's worker may have set SIGINT aside)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    rows = [json.dumps(_row(avg_ts=2000.0)), json.dumps(_row(n_prompt=512, n_gen=0, avg_ts=2500.0))]
    try:
        rc, out, _err = bench_here(capsys, rows if measured else [])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 128 + signum
    if not measured:  # nothing to show, and it says so (it had printed nothing at all)
        said = "bench: stopped before any test finished: nothing was measured or kept"
        assert out == {"error": said, "exit_code": 128 + signum}
        return
    assert out["stopped"] == "interrupted"
    assert out["points"] and out["stored"] is None
    assert out["not_stored"].startswith("interrupted")

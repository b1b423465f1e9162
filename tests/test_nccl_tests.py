"""nccl-tests output parsing: every real table against truth.json, older column layouts,
other collectives, failures, several tables, and garbage through the CLI."""

import json
from pathlib import Path

import pytest

from lltui.cli import main
from lltui.core.nccl.nccl_tests import (
    bus_bandwidth_factor,
    infer_collective,
    nranks_from_all_reduce,
    parse_nccl_tests_text,
    parse_row,
    sweep_sizes,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real"  # see its README.md


def _entries():
    truth = json.loads((FIXTURES / "truth.json").read_text())
    return [e for e in truth["entries"] if e["kind"] == "nccl-tests"]


ENTRIES = _entries()


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: Path(e["file"]).stem)
def test_real_table_matches_truth(entry):
    text = (FIXTURES / entry["file"]).read_text()
    result = parse_nccl_tests_text(text)
    assert len(result.tables) == 1
    t = result.tables[0]
    truth = entry["truth"]
    assert len(t.rows) == truth["n_rows"]
    assert min(r.size for r in t.rows) == truth["min_size"]
    largest = t.largest
    assert largest is not None and largest.size == truth["max_size"]
    assert largest.busbw_out == float(truth["largest_size_busbw_out_of_place"])
    assert largest.busbw_in == float(truth["largest_size_busbw_in_place"])
    assert largest.algbw_out == float(truth["largest_size_algbw_out_of_place"])
    assert t.peak_busbw_out == float(truth["peak_busbw_out_of_place"])
    assert t.avg_busbw_text == truth["avg_bus_bandwidth"]
    if truth["avg_bus_bandwidth"] is None:
        assert t.avg_busbw is None
        assert any("Avg bus bandwidth" in w for w in t.warnings)
    else:
        assert t.avg_busbw == float(truth["avg_bus_bandwidth"])
    # The rank count is read from the device list, where the output has one.
    if "# Using devices" in text:
        assert t.nranks == truth["gpus_in_test"]
    else:
        assert t.nranks is None
    # truth["collective"] is "name (type, redop[/redop...])": named where the command line
    # is shown, otherwise inferred where the columns leave one answer (2 ranks do not).
    name, _, rest = truth["collective"].partition(" (")
    dtype, _, redops = rest.rstrip(")").partition(", ")
    if f"{name}_perf" in text:
        assert t.collective == name and not t.collective_inferred
    else:
        assert t.collective in (None, name)
    if t.collective == "all_reduce" and truth["gpus_in_test"]:
        assert t.nranks_from_busbw == truth["gpus_in_test"]
    for r in t.rows:
        assert r.type == dtype and r.redop in redops.split("/") and r.root == -1
        assert r.count * 4 == r.size
        assert r.wrong_out == 0
        assert r.wrong_in is None if truth.get("wrong_in_place_na") else r.wrong_in == 0


def test_elided_rows_are_flagged():
    entry = next(e for e in ENTRIES if "elided" in e["file"])
    t = parse_nccl_tests_text((FIXTURES / entry["file"]).read_text()).tables[0]
    assert t.elided
    assert any("elided" in w for w in t.warnings)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: Path(e["file"]).stem)
def test_cli_json_contract(entry, capsys):
    assert main(["nccl", "tests", str(FIXTURES / entry["file"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"collective", "nranks", "rows", "avg_busbw"} <= set(data)
    assert len(data["rows"]) == entry["truth"]["n_rows"]
    for row in data["rows"]:
        assert {
            "size",
            "count",
            "type",
            "time_us_out",
            "algbw_out",
            "busbw_out",
            "time_us_in",
            "algbw_in",
            "busbw_in",
        } <= set(row)
        assert isinstance(row["size"], int) and isinstance(row["count"], int)
    avg = entry["truth"]["avg_bus_bandwidth"]
    assert data["avg_busbw"] == (float(avg) if avg is not None else None)


def test_cli_text_output(capsys):
    entry = next(e for e in ENTRIES if "full-sweep" in e["file"])
    assert main(["nccl", "tests", str(FIXTURES / entry["file"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("all_reduce · 4 ranks")
    assert "peak bus bandwidth  25.31 GB/s at 1073741824 B" in out
    assert "avg bus bandwidth   13.3111 GB/s" in out


OLD_LAYOUT = """\
./all_reduce_perf -b 8 -e 128M -f 2 -g 2
# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid   5000 on    box device  0 [0x01] GeForce RTX 2080 Ti
#   Rank  1 Pid   5000 on    box device  1 [0x02] GeForce RTX 2080 Ti
#
#                                                 out-of-place                       in-place
#       size         count    type     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)             (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
       65536         16384   float    16.50    3.97    3.97  0e+00    13.80    4.75    4.75  0e+00
   134217728      33554432   float   6500.1   20.65   20.65  5e-07   6400.0   20.97   20.97  5e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 12.585
"""  # noqa: E501


def test_old_layout_without_redop_and_root_and_with_an_error_column():
    t = parse_nccl_tests_text(OLD_LAYOUT).tables[0]
    assert t.collective == "all_reduce"
    assert t.nranks == 2
    assert [d.name for d in t.devices] == ["GeForce RTX 2080 Ti"] * 2
    assert t.threads == 1 and t.gpus_per_thread == 2
    assert t.min_bytes == 8 and t.max_bytes == 134217728
    assert [r.size for r in t.rows] == [65536, 134217728]
    r = t.rows[1]
    assert r.redop is None and r.root is None
    assert (r.time_us_out, r.algbw_out, r.busbw_out) == (6500.1, 20.65, 20.65)
    assert r.wrong_out == 5e-07
    # A float error column is a rounding error, not a count of wrong values.
    assert t.wrong_rows == 0
    assert t.avg_busbw == 12.585
    assert t.out_of_bounds == 0


REDOP_NO_ROOT = """\
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
     1048576        262144     float     sum    118.6    8.84   13.26  0e+00    123.2    8.51   12.77  0e+00
"""  # noqa: E501


def test_redop_without_root_column():
    t = parse_nccl_tests_text(REDOP_NO_ROOT).tables[0]
    r = t.rows[0]
    assert r.redop == "sum" and r.root is None
    assert r.busbw_in == 12.77
    # busbw/algbw = 1.5 is an all-reduce on 4 ranks.
    assert t.collective == "all_reduce" and t.collective_inferred
    assert t.nranks_from_busbw == 4


ALL_GATHER = """\
$ mpirun -np 8 ./build/all_gather_perf -b 1M -e 4M -f 2 -g 1
# Collective test starting: all_gather_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4194304 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
     1048576         32768     float    none      -1    40.10   26.15   22.88      0    39.90   26.28   23.00      0
     2097152         65536     float    none      -1    60.00   34.95   30.58      0    59.00   35.54   31.10    N/A
     4194304        131072     float    none      -1    95.00   44.15   38.63      3    94.00   44.62   39.04      0
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 30.8717
"""  # noqa: E501


def test_all_gather_named_by_its_binary_with_na_and_wrong_values():
    t = parse_nccl_tests_text(ALL_GATHER).tables[0]
    assert t.collective == "all_gather" and not t.collective_inferred
    assert t.rows[1].wrong_in is None  # N/A: validation off for that run
    assert t.rows[2].wrong_out == 3
    assert t.wrong_rows == 1
    assert any("wrong results" in w for w in t.warnings)
    assert t.out_of_bounds == 3
    assert any("FAILED" in f for f in t.failures)
    assert t.nranks_from_busbw is None  # only an all-reduce's ratio names the ranks


BROADCAST_NO_BINARY = """\
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    33554432       8388608     float    none       0   1400.0   23.97   23.97      0   1390.0   24.14   24.14      0
"""  # noqa: E501


def test_columns_name_a_broadcast_when_the_binary_is_not_shown():
    t = parse_nccl_tests_text(BROADCAST_NO_BINARY).tables[0]
    assert t.collective == "broadcast" and t.collective_inferred
    assert t.avg_busbw is None


def test_two_runs_in_one_file_are_two_tables(capsys, tmp_path):
    text = OLD_LAYOUT + "\n" + ALL_GATHER
    result = parse_nccl_tests_text(text)
    assert [t.collective for t in result.tables] == ["all_reduce", "all_gather"]
    f = tmp_path / "two.txt"
    f.write_text(text)
    assert main(["nccl", "tests", str(f), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["collective"] == "all_reduce"
    assert [t["collective"] for t in data["more_tables"]] == ["all_gather"]


def test_cut_off_last_row_is_counted_not_parsed():
    text = REDOP_NO_ROOT + "     2097152        524288     float     sum    184.1   11.3"
    t = parse_nccl_tests_text(text).tables[0]
    assert len(t.rows) == 1
    assert any("could not be read" in w for w in t.warnings)


def test_nccl_log_lines_inside_the_output_are_ignored():
    text = (
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
        "box:1:1 [0] NCCL INFO NCCL version 2.26.5+cuda12.9\n"
        "box:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
        "           8             2     float     sum      -1    10.00    0.00    0.00      0"
        "    10.00    0.00    0.00      0\n"
    )
    t = parse_nccl_tests_text(text).tables[0]
    assert [r.size for r in t.rows] == [8]


@pytest.mark.parametrize(
    "line",
    [
        "",
        "hello world",
        "8 2 float sum -1 1.0 2.0",  # too short for a row
        "8 2 float sum -1 abc 0.0 0.0 0 1.0 0.0 0.0 0",  # time is not a number
        "-8 2 float sum -1 1.0 0.0 0.0 0 1.0 0.0 0.0 0",  # negative size
        "8 2 FLOAT sum -1 1.0 0.0 0.0 0 1.0 0.0 0.0 0",  # not a type nccl-tests prints
    ],
)
def test_non_rows(line):
    assert parse_row(line) is None


def test_row_shapes():
    full = parse_row("  1024  256  float  sum  -1  18.46  0.06  0.08  0  18.56  0.06  0.08  0")
    assert full is not None and full.root == -1 and full.time_us_in == 18.56
    out_only = parse_row("1024 256 float sum -1 18.46 0.06 0.08 0")
    assert out_only is not None and out_only.time_us_in is None and out_only.busbw_out == 0.08


def test_infer_collective_and_ranks_from_the_ratio():
    def row(alg, bus, redop="sum", root=-1):
        return parse_row(f"1048576 262144 float {redop} {root} 100.0 {alg} {bus} 0")

    assert infer_collective([row(100.0, 175.0)]) == "all_reduce"
    assert nranks_from_all_reduce([row(100.0, 175.0)]) == 8
    assert infer_collective([row(100.0, 87.5)]) == "reduce_scatter"
    assert infer_collective([row(100.0, 87.5, "none")]) is None  # all_gather or alltoall
    assert infer_collective([row(100.0, 100.0)]) is None  # 2-rank all-reduce or sendrecv
    assert infer_collective([row(100.0, 100.0, "sum", 0)]) == "reduce"
    # Too few digits to tell 15 ranks from 16.
    assert nranks_from_all_reduce([row(0.40, 0.75)]) is None


def test_bus_bandwidth_factors_and_sweep_sizes():
    assert bus_bandwidth_factor("all_reduce", 4) == 1.5
    assert bus_bandwidth_factor("all_reduce", 1) == 0.0
    assert bus_bandwidth_factor("all_gather", 4) == 0.75
    assert bus_bandwidth_factor("broadcast", 4) == 1.0
    assert bus_bandwidth_factor("unknown", 4) is None
    assert sweep_sizes(8, 64, 2, 4) == [8, 16, 32, 64]
    assert sweep_sizes(8, 256 * 1024 * 1024, 4, 4)[-2:] == [128 * 1024 * 1024, 256 * 1024 * 1024]
    assert sweep_sizes(1, 10, 2, 4) == [4, 8]  # whole elements only
    with pytest.raises(ValueError):
        sweep_sizes(64, 8, 2, 4)
    with pytest.raises(ValueError):
        sweep_sizes(8, 64, 1, 4)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\x01\x02\xff" * 5000,
        b"# a comment\n# another\n",
        b"nothing to see\n" * 10,
        b"y" * 200_000,
    ],
    ids=["empty", "binary", "comments", "text", "huge-line"],
)
def test_garbage_is_exit_2_with_one_line(tmp_path, capsys, content):
    f = tmp_path / "out.txt"
    f.write_bytes(content)
    assert main(["nccl", "tests", str(f)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "no nccl-tests table" in err


def test_a_log_is_not_a_table(capsys):
    log = next(FIXTURES.glob("nccl/N*.txt"))
    assert main(["nccl", "tests", str(log)]) == 2
    assert "no nccl-tests table" in capsys.readouterr().err


def _whole_tables_with_an_average():
    for entry in ENTRIES:
        t = parse_nccl_tests_text((FIXTURES / entry["file"]).read_text()).tables[0]
        if t.avg_busbw is not None and not t.elided:
            yield pytest.param(t, id=Path(entry["file"]).stem)


@pytest.mark.parametrize("t", list(_whole_tables_with_an_average()))
def test_printed_average_is_the_mean_of_both_busbw_columns(t):
    # nccl-tests averages out-of-place and in-place busbw over every row; where no row was
    # elided, the parsed rows give the printed average back (to its rounding).
    both = [v for r in t.rows for v in (r.busbw_out, r.busbw_in) if v is not None]
    assert abs(sum(both) / len(both) - t.avg_busbw) < 0.01


def test_tests_from_a_text_stdin(capsys, monkeypatch):
    import io
    import sys

    entry = next(e for e in ENTRIES if "NVSwitch" in e["file"])
    monkeypatch.setattr(sys, "stdin", io.StringIO((FIXTURES / entry["file"]).read_text()))
    assert main(["nccl", "tests", "-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["avg_busbw"] == float(entry["truth"]["avg_bus_bandwidth"])
    assert data["collective"] == "all_reduce" and data["collective_inferred"] is True


def test_a_run_that_failed_before_any_row_keeps_its_failure_and_exits_1(tmp_path, capsys):
    from lltui.cli import main

    text = (
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5\n"
        "#  Rank  0 Group  0 Pid  4242 on    host0 device  0 [0x17] NVIDIA A40\n"
        "#  Rank  1 Group  0 Pid  4242 on    host0 device  1 [0x31] NVIDIA A40\n"
        "host0: Test NCCL failure common.cu:1008 'unhandled cuda error' / 'invalid device'\n"
    )
    path = tmp_path / "failed.txt"
    path.write_text(text)
    assert main(["nccl", "tests", str(path), "--json"]) == 1
    out = capsys.readouterr().out
    assert "unhandled cuda error" in out


def test_the_nccl_view_gets_a_table_that_fits_80_columns():
    from lltui.app.state.nccl import summarize_file

    path = FIXTURES / "nccl" / "T09-nccltests-4xRTX4090-PCIe-p2p-driver-full-sweep.txt"
    narrow = summarize_file(str(path), narrow=True).splitlines()
    table = [line for line in narrow if line.strip().split(" ")[0].isdigit()]
    assert table and all(len(line) <= 80 for line in narrow[1:])
    assert "busbw" in narrow[2] and "in-place" not in narrow[2]
    assert "in-place" in summarize_file(str(path))  # the CLI's and a wide view's: all nine


FORMATS = Path(__file__).resolve().parent / "fixtures" / "nccl-format"  # see its README.md


@pytest.mark.parametrize(
    ("name", "nranks", "last", "avg"),
    [
        # -I 1: per-iteration statistics after each run's four columns
        (
            "all_reduce_perf-2.19.6-I1.txt",
            8,
            (3599.14, 298.33, 522.08, 3635.13, 295.38, 516.91),
            373.244,
        ),
        # -S 1: a date and time end each row
        (
            "all_reduce_perf-2.19.6-S1.txt",
            4,
            (3599.14, 298.33, 447.50, 3635.13, 295.38, 443.06),
            319.921,
        ),
    ],
)
def test_rows_with_per_iteration_columns_or_timestamps(name, nranks, last, avg, capsys):
    path = FORMATS / name
    t = parse_nccl_tests_text(path.read_text()).tables[0]
    assert t.collective == "all_reduce" and t.nranks == nranks
    assert [r.size for r in t.rows] == [1048576, 16777216, 268435456, 1073741824]
    r = t.rows[-1]
    got = (r.time_us_out, r.algbw_out, r.busbw_out, r.time_us_in, r.algbw_in, r.busbw_in)
    assert got == last
    assert (r.wrong_out, r.wrong_in) == (0, 0)
    assert t.warnings == ()
    assert t.nranks_from_busbw == nranks
    # the printed average is the mean of both busbw columns of the rows read
    both = [b for row in t.rows for b in (row.busbw_out, row.busbw_in)]
    assert sum(both) / len(both) == pytest.approx(avg, abs=0.001)
    assert main(["nccl", "tests", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["largest_busbw_out"] == last[2] and data["largest_busbw_in"] == last[5]
    assert data["warnings"] == []


def test_a_run_over_several_ops_tells_them_apart_in_text(capsys):
    # all_reduce_perf -o all: one table, one header, the sweep once per redop; the text
    # printed the sum and prod rows alike (only --json had the redop)
    path = FORMATS / "all_reduce_perf-2.19.6-o-all.txt"
    assert main(["nccl", "tests", str(path)]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 18 and len({tuple(r) for r in rows}) == 18
    assert [r[3] for r in rows[::3]] == ["sum", "prod", "max", "min", "avg", "mulsum"]
    assert "  float mulsum      10.32 GB/s at 67108864 B" in text.splitlines()
    assert "avg bus bandwidth   10.5403 GB/s (over all of them)" in text
    assert main(["nccl", "tests", str(path), "--json"]) == 0
    peaks = json.loads(capsys.readouterr().out)["peaks"]
    assert [(p["redop"], p["busbw_out"]) for p in peaks] == [
        ("sum", 12.91),
        ("prod", 12.91),
        ("max", 12.65),
        ("min", 12.65),
        ("avg", 11.73),
        ("mulsum", 10.32),
    ]


def test_several_types_and_roots_are_shown_only_where_they_vary():
    from lltui.core.nccl.nccl_tests import format_table

    # reduce_perf -d all -r -1 (nccl-tests prints each root's row); a one-op run keeps
    # the columns it always had
    text = "\n".join(
        f"{s:>12} {s // w:>12} {t:>8} sum {root:>6} 10.0 {s / 1e4:.2f} {s / 1e4:.2f} 0 "
        f"10.0 {s / 1e4:.2f} {s / 1e4:.2f} 0"
        for t, w in (("float", 4), ("half", 2))
        for root in (0, 1)
        for s in (1024, 2048)
    )
    out = format_table(parse_nccl_tests_text(text).tables[0]).splitlines()
    assert out[1].split()[:4] == ["size", "count", "type", "root"]
    assert "redop" not in out[1]
    assert out[2].split()[:4] == ["1024", "256", "float", "0"]
    assert "  half sum root 1   0.20 GB/s at 2048 B" in out
    narrow = format_table(parse_nccl_tests_text(text).tables[0], narrow=True).splitlines()
    assert narrow[1].split()[:3] == ["size", "type", "root"]
    one = format_table(parse_nccl_tests_text(text.splitlines()[0]).tables[0]).splitlines()
    assert one[1].split()[:3] == ["size", "count", "type"] and "root" not in one[1]
    assert "peak bus bandwidth  0.10 GB/s at 1024 B" in one

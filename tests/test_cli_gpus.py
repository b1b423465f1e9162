import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lltui.cli import main

CONTRACT_GPU_KEYS = {
    "index", "uuid", "name", "pci_bus_id", "memory_total", "memory_used", "memory_free",
    "power_w", "power_limit_w", "energy_mj", "util_gpu", "util_mem", "temp_c", "sm_clock_mhz",
    "mem_clock_mhz", "fan_pct", "pcie_rx_kbs", "pcie_tx_kbs", "throttle_reasons", "processes",
}  # fmt: skip


def test_gpus_json_contract_on_sim(capsys):
    assert main(["gpus", "--json", "--source", "sim:4xl4"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"source", "simulated", "driver_version", "cuda_version", "gpus", "host"} <= set(data)
    assert data["simulated"] is True and data["source"] == "sim:4xl4"
    assert len(data["gpus"]) == 4
    for g in data["gpus"]:
        assert set(g) >= CONTRACT_GPU_KEYS
        assert isinstance(g["memory_total"], int)
        assert g["memory_used"] + g["memory_free"] <= g["memory_total"]
        for p in g["processes"]:
            assert {"pid", "name", "user", "used_memory"} <= set(p)
    assert {"cpu_pct", "mem_total", "mem_used"} <= set(data["host"])


def test_auto_without_a_gpu_falls_back_to_the_simulated_rig_and_says_why(capsys, monkeypatch):
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.gpu import kinds as registry

    class NoDriver:
        name = "nvml"

        def open(self):
            raise SourceUnavailable("NVIDIA driver not loaded (libnvidia-ml.so.1 not found)")

    real_make = registry.make_source

    def make(spec, **kw):
        return NoDriver() if spec.kind == "nvml" else real_make(spec, **kw)

    monkeypatch.setattr(registry, "make_source", make)
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulated"] is True
    assert "libnvidia-ml.so.1 not found" in data["simulated_reason"]


def test_gpus_text_names_the_simulation(capsys):
    assert main(["gpus", "--source", "sim:2x3090-nvlink"]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "RTX 3090" in out and "llama-server" in out


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["gpus", "--source", "bogus"], 2, "unknown source"),
        (["gpus", "--source", "sim:nope"], 2, "unknown simulated profile"),
        (["gpus", "--frobnicate"], 2, "unrecognized arguments"),
        (["nosuchcommand"], 2, "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, code, needle):
    assert main(argv) == code
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith("lltui ")


def test_record_then_replay_through_the_cli(tmp_path, capsys):
    rec = tmp_path / "rig.jsonl"
    shot = tmp_path / "s.svg"
    assert main(["--source", "sim:4xl4", "--record", str(rec), "--screenshot", str(shot)]) == 0
    capsys.readouterr()
    assert main(["gpus", "--json", "--source", f"replay:{rec}", "--replay-step"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == f"replay:{rec}"
    assert [g["name"] for g in data["gpus"]] == ["NVIDIA L4"] * 4


def test_record_to_a_bad_path_is_one_line(tmp_path, capsys):
    bad = tmp_path / "missing" / "r.jsonl"
    assert main(["--source", "sim:4xl4", "--record", str(bad), "--screenshot", "x.svg"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--record" in err and len(err.splitlines()) == 1


def test_replay_of_a_foreign_file_is_one_line(tmp_path, capsys):
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    assert main(["gpus", "--source", f"replay:{junk}"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(junk) in err and len(err.splitlines()) == 1


def test_subcommands_follow_lltui_source_and_the_config_file(capsys, monkeypatch, isolated_config):
    monkeypatch.setenv("LLTUI_SOURCE", "sim:4xl4")
    assert main(["gpus", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "sim:4xl4"
    monkeypatch.delenv("LLTUI_SOURCE")
    isolated_config.mkdir(parents=True, exist_ok=True)
    (isolated_config / "config.toml").write_text('source = "sim:2x3090-nvlink"\n')
    assert main(["topo", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["links"] == {"GPU0-GPU1": "NV4"}
    assert main(["gpus", "--source", "sim:colab-t4", "--json"]) == 0  # the flag still wins
    assert json.loads(capsys.readouterr().out)["source"] == "sim:colab-t4"


def test_record_never_empties_a_file_before_the_source_works(tmp_path, capsys):
    rec = tmp_path / "rig.jsonl"
    shot = tmp_path / "s.svg"
    assert main(["--source", "sim:4xl4", "--record", str(rec), "--screenshot", str(shot)]) == 0
    before = rec.read_bytes()
    # recording over the file being replayed is refused, and the file is untouched
    argv = ["--source", f"replay:{rec}", "--record", str(rec), "--screenshot", str(shot)]
    assert main(argv) == 2
    assert "overwrite" in capsys.readouterr().err
    assert rec.read_bytes() == before
    # a source that cannot start leaves an existing file alone
    assert main(["--source", "nvml", "--record", str(rec), "--screenshot", str(shot)]) == 1
    assert rec.read_bytes() == before


def test_gpus_records_the_sample_it_prints(tmp_path, capsys):
    rec = tmp_path / "one.jsonl"
    assert main(["--source", "sim:4xl4", "--record", str(rec), "gpus", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert rec.stat().st_size > 0, "the sample was recorded"
    assert main(["gpus", "--json", "--source", f"replay:{rec}", "--replay-step"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert [g["uuid"] for g in replayed["gpus"]] == [g["uuid"] for g in printed["gpus"]]
    assert [g["memory_used"] for g in replayed["gpus"]] == [
        g["memory_used"] for g in printed["gpus"]
    ]


def test_record_with_a_command_that_samples_nothing_is_refused(tmp_path, capsys):
    rec = tmp_path / "never.jsonl"
    assert main(["--record", str(rec), "topo", "--file", "-"]) == 2
    err = capsys.readouterr().err
    assert "--record" in err and len(err.strip().splitlines()) == 1
    assert not rec.exists()


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_gpus_text_fits_the_terminal(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["gpus", "--source", "sim:16xv100-dgx2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= columns
    assert sum("V100" in line for line in lines) >= 16  # every GPU is still there, named


def test_an_alert_wraps_to_the_terminal_and_keeps_every_word(capsys, monkeypatch):
    """No GPU here: the simulated stand-in is a critical alert, a sentence that wraps."""
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    alert = out[out.index("alert: critical") :]
    assert " ".join(alert.split()).endswith("showing a simulated rig")


def test_gpus_text_to_a_pipe_is_the_full_table(capsys, monkeypatch):
    import os
    import shutil

    monkeypatch.delenv("COLUMNS", raising=False)
    # a pipe has no size: what shutil answers then, whatever terminal runs the tests
    monkeypatch.setattr(
        shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size(fallback)
    )
    assert main(["gpus", "--source", "sim:8xh100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "memory used / total" in out and "NVIDIA H100 80GB HBM3" in out


def test_source_help_and_errors_come_from_the_table_of_kinds(monkeypatch, capsys):
    from dataclasses import replace

    from lltui.sources.gpu import kinds

    extra = replace(kinds.KINDS["nvml"], name="amdsmi", forms=("amdsmi",), note="a new backend")
    monkeypatch.setattr(kinds, "SOURCE_KINDS", (*kinds.SOURCE_KINDS, extra))
    monkeypatch.setattr(kinds, "KINDS", {**kinds.KINDS, "amdsmi": extra})
    assert "amdsmi (a new backend)" in kinds.source_help()
    assert kinds.parse_source_spec("amdsmi") == kinds.SourceSpec("amdsmi")
    assert main(["gpus", "--source", "nope"]) == 2
    assert "amdsmi (a new backend)" in capsys.readouterr().err
    from lltui.cli import build_parser

    assert "amdsmi (a new" in " ".join(build_parser(with_commands=False).format_help().split())


def test_what_a_source_can_tell_is_read_from_its_kind_not_its_name(tmp_path, monkeypatch):
    from dataclasses import replace

    from lltui.core.monitor.models import RigInfo
    from lltui.services.rig import profile_in_use, start_recording
    from lltui.sources.gpu import kinds
    from lltui.sources.gpu.fleet import fleet_hosts

    assert kinds.kind_of("replay:/x.jsonl").recorded and kinds.kind_of("SIM:4xl4").simulated
    assert kinds.kind_of("nvml+amd") is kinds.KINDS["auto"]  # a combined rig's name
    assert profile_in_use(RigInfo("sim:4xl4", simulated=True)) == "sim:4xl4"
    # a replay of a simulated rig is a recording, not a profile to size against
    assert profile_in_use(RigInfo("replay:/r.jsonl", simulated=True)) is None
    labels = [h.label for h in fleet_hosts(["smi:box1", "amd:box2", "scrape:http://u:pw@h:9/m"])]
    assert labels[:2] == ["box1", "box2"] and "pw" not in labels[2]
    # a recording is never overwritten by the recorder of its own replay
    rec = tmp_path / "r.jsonl"
    rec.write_text("")
    with pytest.raises(ValueError, match="overwrite"):
        start_recording(str(rec), f"replay:{rec}")
    # a new kind that records is treated as one, whatever its name
    monkeypatch.setitem(kinds.KINDS, "tape", replace(kinds.KINDS["replay"], name="tape"))
    with pytest.raises(ValueError, match="overwrite"):
        start_recording(str(rec), f"tape:{rec}")


@pytest.mark.parametrize(
    "argv",
    [
        ["topo", "--file", "/etc/hostname", "--json"],
        ["fit", "/nonexistent.gguf", "--json"],
        ["quant", "/nonexistent.gguf", "--json"],
        ["gpus", "--source", "bogus", "--json"],
        ["nccl", "log", "/nonexistent.log", "--json"],
        ["nccl", "bench", "--json"],
    ],
)
def test_a_failure_with_json_is_a_json_object_too(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc in (1, 2) and err.startswith("lltui: ")
    data = json.loads(out)
    assert data["exit_code"] == rc and data["error"] and "\n" not in data["error"]


def test_a_bug_of_ours_with_json_is_a_json_object_too(monkeypatch, capsys):
    """An internal error (a bug) left stdout empty under --json: no answer to parse."""

    def broken(_args):
        raise RuntimeError("a bug")

    monkeypatch.setattr("lltui.commands.topo.run", broken)
    monkeypatch.delenv("LLTUI_DEBUG", raising=False)
    rc = main(["topo", "--json"])
    out, err = capsys.readouterr()
    assert rc == 1 and "internal error" in err
    assert json.loads(out) == {"error": err.strip().removeprefix("lltui: "), "exit_code": 1}


def test_the_parser_registers_the_named_command_and_falls_back_to_all(capsys):
    """Only the subcommand the command line names is registered (its import is the cost);
    a command word that is an option's value (``--view launch``) is not the command: the
    full parser reads it then."""
    from lltui.cli import named_command

    assert named_command(["--view", "launch", "gpus"]) == "launch"
    assert named_command(["-h", "gpus"]) is None
    assert main(["--view", "launch", "gpus", "--source", "sim:4xl4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "sim:4xl4"
    assert main(["gpsu"]) == 2
    assert "invalid choice: 'gpsu'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--interval", "-1", "gpus"], "interval must be between"),
        (["--energy-price", "-1", "gpus"], "energy_price must be a price per kWh"),
        (["--host-timeout", "-3", "gpus"], "--host-timeout -3 is out of range"),
        (["gpus", "--source", "sim", "--host-timeout", "0"], "--host-timeout 0 is out of range"),
        (["--replay-speed", "-2", "gpus"], "replay speed must be above 0"),
        (["serve", "--listen", "127.0.0.1:18766", "--source", "bogus"], "unknown source 'bogus'"),
        (["serve", "--listen", "127.0.0.1:18766", "--interval", "-2"], "interval must be"),
        (["serve", "--listen", "127.0.0.1:18766", "--source", "replay:/nonexistent"], "no such"),
        (["exporter", "--listen", "127.0.0.1:0", "--source", "replay:/nonexistent"], "no such"),
        (["exporter", "--source", "sim", "--interval", "inf"], "interval must be between"),
        (["exporter", "--source", "sim", "--interval", "nan"], "interval must be between"),
        (["watch", "--once", "--source", "sim", "--llama", "http://127.0.0.1:abc"], "--llama"),
        (["watch", "--once", "--source", "sim", "--llama", "http://[::1"], "--llama"),
        (["exporter", "--source", "sim", "--llama", "http://h:99999"], "expected an http://"),
        (["gpus", "--source", "smi:fleet-a,fleet-b"], "holds a comma: give each host its kind"),
        # a fleet's host that ssh cannot be given: bad input, not a host down retried for ever
        (["gpus", "--source", "smi:gpu1,gpu2,sim:4xl4"], "holds a comma: give each host its"),
        (["watch", "--once", "--source", "sim:4xl4,smi:gpu1:0"], "port 0 in 'gpu1:0' is out"),
        (["gpus", "--source", "sim:4xl4,amd:-oProxyCommand=x"], "would be read as an ssh option"),
        # a port that is no number went to ssh as part of the host: could not resolve host:abc
        (["gpus", "--source", "amd:host:abc"], "port 'abc' in 'host:abc' is not a number"),
        (["topo", "--source", "amd:host:abc"], "port 'abc' in 'host:abc' is not a number"),
        (["topo", "--source", "smi:host:"], "port '' in 'host:' is not a number"),
        (["gpus", "--source", "smi:[::1]:x,sim"], "port 'x' in '[::1]:x' is not a number"),
        (["gpus", "--source", "smi:host:123456"], "port 123456 in 'host:123456' is out of range"),
    ],
)
def test_a_bad_value_is_one_line_and_exit_2_whatever_uses_it(capsys, argv, said):
    """Global options are checked whatever the command (one that does not use them too),
    and what each tab of `lltui serve` would refuse is refused before it serves."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0]


def test_a_key_file_that_is_not_text_and_a_full_disk_are_one_line(tmp_path, capsys):
    key = tmp_path / "key"
    key.write_bytes(b"\xff\xfe")
    argv = ["watch", "--once", "--source", "sim", "--llama", "http://127.0.0.1:1"]
    assert main([*argv, "--llama-api-key-file", str(key)]) == 2
    assert capsys.readouterr().err.strip().endswith("not text (UTF-8)")
    if Path("/dev/full").exists():
        assert main(["--record", "/dev/full", "--source", "sim", "gpus"]) == 1
        assert capsys.readouterr().err.strip() == (
            "lltui: --record /dev/full: No space left on device"
        )


@pytest.mark.parametrize(
    "argv",
    [["explain", "-"], ["topo", "--file", "-"], ["nccl", "log", "-"], ["nccl", "tests", "-"]],
)
def test_a_closed_standard_input_is_one_line(argv, monkeypatch, capsys):
    """Started with <&- (Python's sys.stdin is then None): an internal error before."""
    monkeypatch.setattr("sys.stdin", None)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("standard input is closed") and len(err.splitlines()) == 1


def test_a_six_digit_memory_keeps_its_row_in_line(capsys, monkeypatch):
    """163540 MiB / 196592 MiB (an MI300X) is 23 characters: its row was pushed a column right."""
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["gpus", "--source", "sim:8xmi300x"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if "MI300X" in r and " MiB " in r]
    assert len(rows) == 8 and any(re.search(r" \d{6} MiB / ", r) for r in rows)
    assert len({r.index("%") for r in rows}) == 1  # the util column, one place for all


@pytest.mark.parametrize(
    "argv",
    [
        ["gpus"],
        ["gpus", "--json"],
        ["fit", "{model}"],
        ["fit", "{model}", "--json"],
        ["quant", "{model}"],
        ["watch", "--once", "--json"],
    ],
)
def test_output_cut_short_by_its_reader_exits_0_quietly(tmp_path, argv):
    """``lltui fit M.gguf | head -1`` exited 1, which reads as lltui failing."""
    from support import gguf_factory as gf

    model = tmp_path / "m.gguf"
    gf.write_model(model, gf.llama_spec())
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    words = [w.replace("{model}", str(model)) for w in argv]
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lltui", "--source", "sim:kaggle-2xt4", *words],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
    err = proc.stderr
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Exception" not in err and "pipe" not in err.lower(), err

"""nvidia-smi CSV parsing (real captures from users' rigs) and the smi / smi:HOST source.

No GPU or nvidia-smi runs here, so the source is driven by FakeNvidiaSmi: it answers each
query with the fields asked for, in the order asked, the way nvidia-smi does, and rejects
fields an older driver lacks with nvidia-smi's own message.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

from lltui.core.monitor.models import GpuSource, SourceUnavailable
from lltui.core.monitor.smi_csv import (
    APP_QUERY_FIELDS,
    EVENT_REASON_FIELDS,
    GPU_QUERY_FIELDS,
    SmiParseError,
    canonical_field,
    find_tables,
    gpu_rows,
    is_na,
    parse_apps,
    parse_csv,
    to_bytes,
    unknown_field,
)
from lltui.core.monitor.throttle import SMI_FIELDS
from lltui.core.units import MIB
from lltui.sources.gpu.smi import (
    BOUNDED,
    CommandResult,
    SmiSource,
    check_host,
    run_command,
    smi_argv,
)

REAL = Path(__file__).resolve().parent / "fixtures" / "real"  # see its README.md
CSV_FILES = sorted((REAL / "smi").glob("C*.txt"))


def _truth() -> dict[str, dict]:
    data = json.loads((REAL / "truth.json").read_text())
    return {e["file"]: e for e in data["entries"]}


def _noheader_fields(path: Path) -> list[str] | None:
    """The column list a capture's .meta gives for output printed without a header (its own,
    or that of the capture it says it shares a format with)."""
    meta = path.with_suffix(".meta").read_text()
    m = re.search(r"Header \(omitted in file\) is: (.*?)\.\s*$", meta, re.MULTILINE)
    if m:
        return [c.strip() for c in m.group(1).split(",")]
    same = re.search(r"Same format as (C\d+)", meta)
    if same:
        other = next(path.parent.glob(f"{same.group(1)}-*.txt"))
        return _noheader_fields(other)
    return None


# -- the real captures -------------------------------------------------------------------------


def test_every_csv_capture_has_a_truth_entry():
    truth = _truth()
    for path in CSV_FILES:
        assert f"smi/{path.name}" in truth


@pytest.mark.parametrize("path", CSV_FILES, ids=[p.stem[:3] for p in CSV_FILES])
def test_csv_capture_matches_truth(path: Path):
    entry = _truth()[f"smi/{path.name}"]
    truth = entry["truth"]
    text = path.read_text()
    fields = _noheader_fields(path)
    table = parse_csv(text, None if truth.get("header_present") else fields)
    rows = gpu_rows(table)
    checked = set()

    def check(key: str, ok: bool) -> None:
        checked.add(key)
        assert ok, f"{path.name}: {key} differs from truth.json: {truth[key]!r}"

    for key, want in truth.items():
        if key == "header_present":
            check(key, (table.header is not None) == want)
        elif key == "header":
            check(key, table.header == want)
        elif key == "rows" and isinstance(want, int):
            check(key, len(table.rows) == want and len(rows) == want)
        elif key == "rows":
            got = [dict(zip(table.columns, cells, strict=True)) for cells in table.rows]
            check(key, got == want)
        elif key == "fields_per_row":
            check(key, len(table.fields) == want and all(len(r) == want for r in table.rows))
        elif key == "distinct_gpus_by_bus_id":
            check(key, sorted({r.static.pci_bus_id for r in rows}) == sorted(want))
        elif key == "names":
            check(key, sorted({r.static.name for r in rows}) == sorted(want))
        elif key == "driver_version":
            check(key, {r.driver_version for r in rows} == {want})
        elif key == "gpu_count":
            ids = {r.static.uuid or r.static.pci_bus_id or r.static.index for r in rows}
            check(key, len(ids) == want)
        elif key == "second_csv":
            tables = find_tables(text)
            check(
                key,
                len(tables) >= 2
                and tables[1].header == want["header"]
                and len(tables[1].rows) == want["rows"],
            )
    assert checked == set(truth), f"truth keys this test does not check: {set(truth) - checked}"


@pytest.mark.parametrize("path", CSV_FILES, ids=[p.stem[:3] for p in CSV_FILES])
def test_csv_capture_values_in_si_units(path: Path):
    """Every memory cell comes back in bytes and every percentage as a number, compared
    with the cells read back with a plain split of the line."""
    text = path.read_text()
    header_present = _truth()[f"smi/{path.name}"]["truth"].get("header_present")
    table = parse_csv(text, None if header_present else _noheader_fields(path))
    lines = text.splitlines()
    for row, number in zip(gpu_rows(table), table.row_lines, strict=True):
        cells = dict(
            zip(table.fields, (c.strip() for c in lines[number - 1].split(",")), strict=True)
        )
        if "memory.used" in cells:
            mib = int(cells["memory.used"].split()[0])
            assert row.sample.memory_used == mib * MIB
        if "utilization.gpu" in cells:
            assert row.sample.util_gpu == float(cells["utilization.gpu"].split()[0])
        if "power.draw" in cells:
            assert row.sample.power_w == float(cells["power.draw"].split()[0])


# -- the format, written out ------------------------------------------------------------------

HEADER = (
    "index, uuid, name, memory.total [MiB], memory.used [MiB], power.draw [W], utilization.gpu [%]"
)
ROW0 = "0, GPU-aaaaaaaa-1111-2222-3333-444444444444, Tesla T4, 15360, 10240, 27.50, 93"
ROW1 = "1, GPU-bbbbbbbb-1111-2222-3333-444444444444, Tesla T4, 15360, 2048, 70.00, 100"


def parsed(text: str, fields: Sequence[str] | None = None) -> list[tuple]:
    """What two outputs must agree on: each GPU's static facts and sample."""
    return [(r.static, r.sample) for r in gpu_rows(parse_csv(text, fields))]


def test_units_in_cells_read_the_same_as_nounits():
    plain = parsed(f"{HEADER}\n{ROW0}\n{ROW1}\n")
    with_units = parsed(
        f"{HEADER}\n"
        "0, GPU-aaaaaaaa-1111-2222-3333-444444444444, Tesla T4, "
        "15360 MiB, 10240 MiB, 27.50 W, 93 %\n"
        "1, GPU-bbbbbbbb-1111-2222-3333-444444444444, Tesla T4, "
        "15360 MiB, 2048 MiB, 70.00 W, 100 %\n"
    )
    assert plain == with_units
    g = plain[0][1]
    assert g.memory_used == 10240 * MIB and g.info.memory_total == 15360 * MIB
    assert g.power_w == 27.5 and g.util_gpu == 93.0


def test_reordered_columns_are_read_by_the_header():
    cols = [c.strip() for c in HEADER.split(",")]
    order = [6, 3, 0, 5, 2, 4, 1]

    def permute(line: str) -> str:
        cells = [c.strip() for c in line.split(",")]
        return ", ".join(cells[i] for i in order)

    shuffled = "\n".join([", ".join(cols[i] for i in order), permute(ROW0), permute(ROW1)])
    assert parsed(shuffled) == parsed(f"{HEADER}\n{ROW0}\n{ROW1}")


def test_nvidia_smi_gpus_are_nvidias():
    assert [static.vendor for static, _ in parsed(f"{HEADER}\n{ROW0}\n{ROW1}")] == ["nvidia"] * 2


def test_noheader_rows_are_read_by_the_field_list_asked_for():
    fields = [canonical_field(c)[0] for c in HEADER.split(",")]
    by_list = parsed(f"{ROW0}\n{ROW1}\n", fields)
    assert by_list == parsed(f"{HEADER}\n{ROW0}\n{ROW1}")
    # the same fields asked for in another order give the same GPUs
    backwards = list(reversed(fields))
    rows = [", ".join(reversed([c.strip() for c in r.split(",")])) for r in (ROW0, ROW1)]
    assert parsed("\n".join(rows), backwards) == by_list


def test_crlf_blank_lines_bom_and_surrounding_text():
    messy = (
        "\ufeff$ nvidia-smi --query-gpu=... --format=csv\r\n\r\n"
        f"{HEADER}\r\n{ROW0}\r\n\r\n{ROW1}\r\n"
        "Tue Jun  4 10:00:00 2024\r\nuser@host:~$ \r\n"
    )
    assert parsed(messy) == parsed(f"{HEADER}\n{ROW0}\n{ROW1}")


@pytest.mark.parametrize(
    "marker", ["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "[Insufficient Permissions]"]
)
def test_markers_become_none(marker: str):
    text = f"{HEADER}\n0, GPU-a, Tesla T4, 15360, {marker}, {marker}, {marker}\n"
    g = gpu_rows(parse_csv(text))[0].sample
    assert is_na(marker)
    assert (g.memory_used, g.power_w, g.util_gpu) == (None, None, None)
    assert not g.lost


def test_a_gpu_that_needs_a_reset_is_lost():
    text = f"{HEADER}\n{ROW0}\n1, GPU-b, [GPU requires reset], [GPU requires reset], 0, 0, 0\n"
    a, b = gpu_rows(parse_csv(text))
    assert not a.sample.lost
    assert b.sample.lost and "reset" in (b.sample.error or "")


@pytest.mark.parametrize("prefix", ["clocks_event_reasons", "clocks_throttle_reasons"])
def test_throttle_reasons_from_either_family_of_columns(prefix: str):
    suffixes = list(SMI_FIELDS)
    header = "index, uuid, " + ", ".join(f"{prefix}.{s}" for s in suffixes)
    active = {"sw_power_cap", "hw_slowdown"}
    cells = ["Active" if s in active else "Not Active" for s in suffixes]
    text = f"{header}\n0, GPU-a, {', '.join(cells)}\n1, GPU-b, {', '.join(['[N/A]'] * len(cells))}"
    a, b = gpu_rows(parse_csv(text))
    assert a.sample.throttle_reasons == tuple(SMI_FIELDS[s] for s in suffixes if s in active)
    assert b.sample.throttle_reasons is None  # not reported is not "no reason"


def test_throttle_reasons_from_the_active_mask():
    text = "index, uuid, clocks_event_reasons.active\n0, GPU-a, 0x0000000000000044\n"
    assert gpu_rows(parse_csv(text))[0].sample.throttle_reasons == ("power cap", "hw thermal")


def test_static_fields():
    text = (
        "index, uuid, pci.bus_id, compute_cap, persistence_mode, pstate, clocks.max.sm [MHz], "
        "power.default_limit [W], serial, vbios_version\n"
        "0, GPU-a, 00000000:3B:00.0, 8.6, Enabled, P2, 2100 MHz, 350.00 W, 1324, 94.02.42.00.0B\n"
    )
    row = gpu_rows(parse_csv(text))[0]
    s = row.static
    assert s.pci_bus_id == "00000000:3B:00.0" and s.compute_capability == (8, 6)
    assert s.persistence_mode is True and s.max_sm_clock_mhz == 2100
    assert s.power_limit_default_w == 350.0 and s.serial == "1324"
    assert row.sample.pstate == 2


def test_names_with_commas_are_kept_whole():
    text = f"{HEADER}\n0, GPU-a, NVIDIA H100 80GB HBM3, rev 1, 81559, 1, 70.00, 0\n"
    assert gpu_rows(parse_csv(text))[0].static.name == "NVIDIA H100 80GB HBM3, rev 1"


def test_to_bytes_honours_the_cell_unit_over_the_header():
    assert to_bytes("2 GiB", "MiB") == 2048 * MIB
    assert to_bytes("512", "MiB") == 512 * MIB
    assert to_bytes("[N/A]", "MiB") is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n  \n",
        "\x00\x01\x02\xff\xfe binary \x89PNG\r\n\x1a\n",
        HEADER + "\n",  # only a header
        f"{HEADER}\n0, GPU-a, Tesla T4, 153",  # a row cut short
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
    ],
    ids=["empty", "blank", "binary", "header-only", "truncated-row", "driver-error"],
)
def test_garbage_gives_one_clear_error_or_no_rows(text: str):
    try:
        rows = gpu_rows(parse_csv(text, None if HEADER in text else GPU_QUERY_FIELDS))
    except SmiParseError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert rows == ()


def test_a_truncated_row_among_good_rows_is_skipped_with_a_note():
    table = parse_csv(f"{HEADER}\n{ROW0}\n1, GPU-b, Tesla T4, 153\n")
    assert len(table.rows) == 1
    assert table.notes and "line 3" in table.notes[0]


def test_unknown_field_message_in_both_quote_styles():
    assert unknown_field('Field "memory.reserved" is not a valid field to query.\n\n') == (
        "memory.reserved"
    )
    assert unknown_field("Field “compute_cap” is not a valid field to query.") == "compute_cap"
    assert unknown_field("0, Tesla T4") is None


def test_compute_apps():
    text = "GPU-a, 4242, /usr/bin/llama-server, 9000\nGPU-b, 4243, /opt/my, odd, name, [N/A]\n"
    a, b = parse_apps(text, APP_QUERY_FIELDS)
    assert (a.pid, a.gpu_uuid, a.process_name, a.used_memory) == (
        4242,
        "GPU-a",
        "/usr/bin/llama-server",
        9000 * MIB,
    )
    assert b.process_name == "/opt/my, odd, name" and b.used_memory is None
    assert parse_apps("", APP_QUERY_FIELDS) == ()
    assert parse_apps("pid, used_gpu_memory [MiB]\n") == ()  # header, no processes
    assert parse_apps("No running processes found\n", APP_QUERY_FIELDS) == ()


# -- the source, with a fake nvidia-smi ---------------------------------------------------------

UUIDS = ("GPU-0f0e0d0c-0b0a-0908-0706-050403020100", "GPU-1f1e1d1c-1b1a-1918-1716-151413121110")


def t4_cells(i: int) -> dict[str, str]:
    """What nvidia-smi prints (nounits) for one busy Tesla T4, field by field."""
    cells = {
        "index": str(i),
        "uuid": UUIDS[i],
        "name": "Tesla T4",
        "pci.bus_id": f"00000000:00:0{4 + i}.0",
        "driver_version": "550.54.15",
        "memory.total": "15360",
        "memory.used": str(10240 + i),
        "memory.free": str(4865 - i),
        "memory.reserved": "255",
        "utilization.gpu": str(90 + i),
        "utilization.memory": "41",
        "power.draw": "69.71",
        "power.limit": "70.00",
        "power.default_limit": "70.00",
        "power.max_limit": "70.00",
        "temperature.gpu": "71",
        "clocks.sm": "1455",
        "clocks.mem": "5000",
        "clocks.max.sm": "1590",
        "clocks.max.mem": "5001",
        "fan.speed": "[N/A]",
        "pstate": "P0",
        "pcie.link.gen.current": "3",
        "pcie.link.gen.max": "3",
        "pcie.link.width.current": "16",
        "pcie.link.width.max": "16",
        "persistence_mode": "Enabled",
        "compute_cap": "7.5",
        "serial": f"132072104{i}",
        "vbios_version": "90.04.96.00.02",
        "ecc.errors.corrected.volatile.total": "0",
        "ecc.errors.uncorrected.volatile.total": "0",
    }
    for f in EVENT_REASON_FIELDS:
        cells[f] = "Active" if f.endswith("sw_power_cap") else "Not Active"
    return cells


class FakeNvidiaSmi:
    """A stand-in for nvidia-smi (and for ssh in front of it): answers --query-gpu and
    --query-compute-apps with the fields asked for, in that order; rejects ``unknown``
    fields the way a driver that lacks them does. Records every argv it was given."""

    def __init__(
        self,
        gpus: list[dict[str, str]],
        apps: list[dict[str, str]] | None = None,
        unknown: Sequence[str] = (),
    ) -> None:
        self.gpus = gpus
        self.apps = apps or []
        self.unknown = set(unknown)
        self.calls: list[list[str]] = []
        self.gpu_chatter = ""
        self.fail: CommandResult | None = None

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        argv = list(argv)
        self.calls.append(argv)
        assert timeout > 0
        if self.fail is not None:
            return self.fail
        smi = argv.index("nvidia-smi")
        args = argv[smi + 1 :]
        if args == ["--version"]:
            return CommandResult(
                0,
                "NVIDIA-SMI version  : 550.54.15\nNVML version        : 550.54\n"
                "DRIVER version      : 550.54.15\nCUDA Version        : 12.4\n",
                "",
            )
        flag, _, spec = args[0].partition("=")
        assert args[1] == "--format=csv,noheader,nounits"
        fields = spec.split(",")
        for f in fields:
            if f in self.unknown:
                return CommandResult(2, f'Field "{f}" is not a valid field to query.\n\n', "")
        table = self.gpus if flag == "--query-gpu" else self.apps
        lines = [
            ", ".join(row.get(canonical_field(f)[0], "[N/A]") for f in fields) for row in table
        ]
        extra = self.gpu_chatter if flag == "--query-gpu" else ""
        return CommandResult(0, extra + "".join(line + "\n" for line in lines), "")

    def queried_fields(self, call: int) -> list[str]:
        arg = next(a for a in self.calls[call] if a.startswith("--query-"))
        return arg.partition("=")[2].split(",")


def old_driver_cells(i: int) -> dict[str, str]:
    """A driver before 535 names the reason columns clocks_throttle_reasons.*; the fake
    looks cells up by canonical name, so the same cells serve both spellings."""
    return t4_cells(i)


def local_source(fake: FakeNvidiaSmi, **kw) -> SmiSource:
    return SmiSource(runner=fake, which=lambda name: f"/usr/bin/{name}", **kw)


def test_smi_source_implements_the_protocol():
    assert isinstance(local_source(FakeNvidiaSmi([t4_cells(0)])), GpuSource)


def test_local_open_and_poll():
    fake = FakeNvidiaSmi(
        [t4_cells(0), t4_cells(1)],
        apps=[
            {
                "uuid": UUIDS[1],
                "pid": str(os.getpid()),
                "process_name": "/usr/bin/python3",
                "used_gpu_memory": "9000",
            }
        ],
    )
    src = local_source(fake)
    info = src.open()
    assert [g.uuid for g in info.gpus] == list(UUIDS)
    assert info.driver_version == "550.54.15" and info.cuda_version == "12.4"
    assert info.gpus[0].compute_capability == (7, 5) and info.gpus[0].memory_total == 15360 * MIB
    assert info.hostname  # this machine's name, from the host sampler
    sample = src.poll()
    a, b = sample.gpus
    assert a.memory_used == 10240 * MIB and b.memory_used == 10241 * MIB
    assert a.util_gpu == 90 and b.util_gpu == 91 and a.power_limit_w == 70.0
    assert a.fan_pct is None and a.throttle_reasons == ("power cap",)
    assert a.info is info.gpus[0]
    # the process is this test's own: the host sampler fills in what psutil knows
    (proc,) = b.processes
    assert proc.pid == os.getpid() and proc.used_memory == 9000 * MIB
    assert proc.user is not None and proc.host_rss and proc.host_rss > 0
    assert a.processes == ()
    assert sample.host.mem_total and sample.host.mem_total > 0
    assert src.poll().seq == sample.seq + 1
    # every command ran as a plain nvidia-smi argv, never through ssh or a shell
    assert all(c[0] == "nvidia-smi" for c in fake.calls)


def test_remote_argv_is_a_list_through_ssh_without_a_shell():
    fake = FakeNvidiaSmi([t4_cells(0)])
    src = SmiSource("admin@gpu-box", runner=fake, which=lambda name: None)
    info = src.open()
    assert info.hostname == "gpu-box" and src.name == "smi:admin@gpu-box"
    sample = src.poll()
    first = fake.calls[0]
    dashes = first.index("--")
    # the host ends its nvidia-smi after the poll's own timeout (20 s over ssh by default)
    assert first[0] == "ssh" and first[dashes + 1 :] == [
        "admin@gpu-box",
        *BOUNDED,
        "20",
        "nvidia-smi",
        "--query-gpu=" + ",".join(GPU_QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    options = first[1:dashes]
    for option in ("BatchMode=yes", "ConnectTimeout=5", "ControlMaster=auto"):
        assert option in options
    # one persistent connection per host, its socket in a private folder
    control = next(o for o in options if o.startswith("ControlPath="))
    folder = os.path.dirname(control.partition("=")[2])
    assert os.stat(folder).st_mode & 0o077 == 0
    assert all(c[: dashes + 2] == first[: dashes + 2] for c in fake.calls)
    src.close()
    # a remote sample has no host CPU/RAM: those would be this machine's, not the rig's
    assert sample.host.cpu_pct is None and sample.host.mem_total is None
    assert sample.gpus[0].memory_used == 10240 * MIB


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "gpu box", "gpu\tbox", "", "a\nb"])
def test_bad_hosts_are_refused(host: str):
    with pytest.raises(ValueError):
        check_host(host)
    with pytest.raises(ValueError):
        SmiSource(host, runner=FakeNvidiaSmi([]))


def test_words_for_a_remote_shell_are_checked():
    from lltui.sources.ssh import SshTarget

    with pytest.raises(ValueError):
        smi_argv(["--query-gpu=name;reboot"], SshTarget("gpu-box"), timeout=10)
    with pytest.raises(ValueError, match="remote shell"):  # '$' let a final newline through
        smi_argv(["--query-gpu=name\n"], SshTarget("gpu-box"), timeout=10)
    assert smi_argv(["-L"], timeout=10) == ["nvidia-smi", "-L"]


def test_a_field_the_driver_lacks_is_dropped_retried_and_remembered():
    fake = FakeNvidiaSmi([t4_cells(0)], unknown={"memory.reserved"})
    src = local_source(fake)
    info = src.open()
    first, retry = fake.queried_fields(0), fake.queried_fields(1)
    assert "memory.reserved" in first and "memory.reserved" not in retry
    assert [f for f in first if f != "memory.reserved"] == retry
    assert any("memory.reserved" in h for h in info.hints)
    src.poll()  # (the first poll takes the rows open read)
    calls = len(fake.calls)
    sample = src.poll()
    gpu_queries = [c for c in fake.calls[calls:] if any(a.startswith("--query-gpu") for a in c)]
    assert len(gpu_queries) == 1  # remembered: no second rejection
    assert sample.gpus[0].memory_reserved is None and sample.gpus[0].memory_used == 10240 * MIB


def test_an_old_driver_gets_the_old_reason_names():
    fake = FakeNvidiaSmi([old_driver_cells(0)], unknown=set(EVENT_REASON_FIELDS))
    src = local_source(fake)
    src.open()
    retry = fake.queried_fields(1)
    assert not any(f.startswith("clocks_event_reasons.") for f in retry)
    assert sum(f.startswith("clocks_throttle_reasons.") for f in retry) == len(SMI_FIELDS)
    assert src.poll().gpus[0].throttle_reasons == ("power cap",)
    assert src.dropped_fields == []  # renamed, not lost


def test_retries_are_bounded_when_every_field_is_rejected():
    fake = FakeNvidiaSmi([t4_cells(0)], unknown=set(GPU_QUERY_FIELDS) | {"x"})
    fake.unknown |= {
        f.replace("clocks_event_reasons", "clocks_throttle_reasons") for f in fake.unknown
    }
    with pytest.raises(SourceUnavailable):
        local_source(fake).open()
    assert len(fake.calls) <= len(GPU_QUERY_FIELDS) + 2


def test_missing_nvidia_smi_is_one_line():
    src = SmiSource(runner=FakeNvidiaSmi([]), which=lambda name: None)
    with pytest.raises(SourceUnavailable) as info:
        src.open()
    assert "nvidia-smi" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("result", "words"),
    [
        (
            CommandResult(
                9,
                "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                "Make sure that the latest NVIDIA driver is installed and running.\n\n",
                "",
            ),
            "couldn't communicate",
        ),
        (CommandResult(6, "No devices were found\n", ""), "no devices were found"),
        (CommandResult(124, "", "nvidia-smi did not answer within 10 s"), "did not answer"),
    ],
)
def test_local_failures_are_one_line(result: CommandResult, words: str):
    fake = FakeNvidiaSmi([t4_cells(0)])
    fake.fail = result
    with pytest.raises(SourceUnavailable) as info:
        local_source(fake).open()
    assert words in str(info.value).lower() and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("result", "words"),
    [
        (CommandResult(255, "", "admin@gpu-box: Permission denied (publickey).\r\n"), "ssh to"),
        (CommandResult(127, "", "bash: line 1: nvidia-smi: command not found\n"), "not installed"),
    ],
)
def test_remote_failures_are_one_line(result: CommandResult, words: str):
    fake = FakeNvidiaSmi([t4_cells(0)])
    fake.fail = result
    with pytest.raises(SourceUnavailable) as info:
        SmiSource("admin@gpu-box", runner=fake).open()
    assert words in str(info.value) and "gpu-box" in str(info.value)
    assert "\n" not in str(info.value)


def test_garbage_output_is_a_source_error_not_a_traceback():
    fake = FakeNvidiaSmi([t4_cells(0)])
    src = local_source(fake)
    src.open()
    src.poll()  # (the first poll takes the rows open read)
    fake.fail = CommandResult(0, "\x00\x7f\x1b[31m garbage\n", "")
    with pytest.raises(SourceUnavailable) as info:
        src.poll()
    assert "\n" not in str(info.value)


def test_a_gpu_that_drops_out_is_marked_lost_and_the_rest_keep_updating():
    fake = FakeNvidiaSmi([t4_cells(0), t4_cells(1)])
    src = local_source(fake)
    src.open()
    src.poll()  # (the first poll takes the rows open read)
    fake.gpus = [t4_cells(1)]
    fake.gpu_chatter = "Unable to determine the device handle for GPU0000:00:04.0: Unknown Error\n"
    a, b = src.poll().gpus
    assert a.lost and "Unable to determine the device handle" in (a.error or "")
    assert not b.lost and b.memory_used == 10241 * MIB


def test_a_gpu_needing_a_reset_stays_the_same_gpu_and_is_lost():
    fake = FakeNvidiaSmi([t4_cells(0), t4_cells(1)])
    src = local_source(fake)
    info = src.open()
    src.poll()  # (the first poll takes the rows open read)
    broken = {k: "[GPU requires reset]" for k in t4_cells(0)}
    broken.update(index="0", **{"pci.bus_id": t4_cells(0)["pci.bus_id"]})
    fake.gpus = [broken, t4_cells(1)]
    sample = src.poll()
    assert sample.info.gpus == info.gpus  # no phantom third GPU
    a, b = sample.gpus
    assert a.info.uuid == UUIDS[0] and a.lost and "reset" in (a.error or "")
    assert not b.lost


def test_process_list_failure_leaves_the_gpus():
    fake = FakeNvidiaSmi([t4_cells(0)])
    src = local_source(fake)
    src.open()
    real = fake.__call__

    def apps_fail(argv: Sequence[str], timeout: float) -> CommandResult:
        if any(a.startswith("--query-compute-apps") for a in argv):
            return CommandResult(15, "Unknown Error\n", "")
        return real(argv, timeout)

    src._run = apps_fail
    sample = src.poll()
    assert sample.gpus[0].memory_used == 10240 * MIB
    assert sample.error and "process list" in sample.error


# -- the real command runner, with a fake nvidia-smi program on PATH ------------------------------

FAKE_PROGRAM = textwrap.dedent(
    """\
    #!{python}
    # A fake nvidia-smi for tests: prints canned rows for the fields asked.
    import json, sys
    args = sys.argv[1:]
    with open({log!r}, "a") as log:
        log.write(json.dumps(args) + "\\n")
    if args == ["--version"]:
        print("CUDA Version        : 12.4")
        sys.exit(0)
    cells = json.loads({cells!r})
    fields = args[0].partition("=")[2].split(",")
    if args[0].startswith("--query-gpu"):
        print(", ".join(cells.get(f, "[N/A]") for f in fields))
    """
)


def test_runs_a_real_program_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "argv.log"
    program = tmp_path / "nvidia-smi"
    program.write_text(
        FAKE_PROGRAM.format(python=sys.executable, log=str(log), cells=json.dumps(t4_cells(0)))
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    src = SmiSource()
    info = src.open()
    assert info.cuda_version == "12.4" and info.gpus[0].uuid == UUIDS[0]
    assert src.poll().gpus[0].memory_used == 10240 * MIB
    argvs = [json.loads(line) for line in log.read_text().splitlines()]
    assert ["--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits"] in argvs


def test_run_command_reports_missing_programs_and_timeouts():
    ok = run_command([sys.executable, "-c", "print('a, b')"], 30)
    assert ok == CommandResult(0, "a, b\n", "")
    missing = run_command(["lltui-no-such-program-here"], 5)
    assert missing.returncode == 127 and "not found" in missing.stderr
    slow = run_command([sys.executable, "-c", "import time; time.sleep(30)"], 0.2)
    assert slow.returncode == 124 and "did not answer" in slow.stderr
    # no shell: metacharacters are passed through as plain text
    echoed = run_command([sys.executable, "-c", "import sys; print(sys.argv[1])", "$(id); `x`"], 30)
    assert echoed.stdout == "$(id); `x`\n"


def test_the_process_list_is_read_on_its_own_ttl_not_every_tick():
    from lltui.sources.gpu.sim import StepClock

    fake = FakeNvidiaSmi([t4_cells(0)])
    clock = StepClock(100.0, step=0.0)
    src = local_source(fake, clock=clock, process_ttl_s=2.0)
    src.open()

    def count(flag: str) -> int:
        return sum(1 for argv in fake.calls if any(a.startswith(flag) for a in argv))

    apps_after_open, gpu_after_open = count("--query-compute-apps"), count("--query-gpu")
    for _ in range(3):
        src.poll()
        clock.advance(0.5)
    assert count("--query-compute-apps") - apps_after_open == 1
    assert count("--query-gpu") - gpu_after_open == 2  # the first poll takes open's rows
    clock.advance(2.0)
    src.poll()
    assert count("--query-compute-apps") - apps_after_open == 2


def test_a_timeout_returns_though_something_else_holds_the_pipe(tmp_path):
    """An ssh master holds a multiplexed session's stdout until the remote command ends:
    after the timeout's kill, reading the pipe to its end waited on it for ever."""
    import os
    import signal
    import time

    pid_file = tmp_path / "held.pid"
    argv = ["sh", "-c", f"sleep 120 & echo $! > {pid_file}; exec sleep 120"]
    t0 = time.monotonic()
    try:
        result = run_command(argv, 0.5)
        assert result.returncode == 124 and time.monotonic() - t0 < 60
    finally:
        if pid_file.exists():  # (its group is stopped now: this one is gone already)
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_a_source_that_fails_to_open_is_closed(monkeypatch):
    """smi:HOST whose nvidia-smi fails: its ssh master lived on for ControlPersist after
    lltui, as nothing closed the source open() had failed in."""
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.gpu import kinds

    closed = []

    class Failing:
        def open(self):
            raise SourceUnavailable("nvidia-smi: command not found")

        def close(self):
            closed.append(True)

    monkeypatch.setattr(kinds, "make_source", lambda *a, **k: Failing())
    with pytest.raises(SourceUnavailable):
        kinds.open_source("smi:gpu-box")
    assert closed == [True]


def test_a_changed_host_key_is_said_not_lost_as_a_failed_verification():
    """ssh's "REMOTE HOST IDENTIFICATION HAS CHANGED ... man-in-the-middle" banner ends in
    "Host key verification failed.", the line an unknown key gives: the warning was lost."""
    from lltui.sources.gpu.smi import command_failure

    banner = (
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
        "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\n"
        "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\n"
        "Host key verification failed.\n"
    )
    changed = command_failure("nvidia-smi", CommandResult(255, "", banner), "gpu-box")
    assert "host key has CHANGED" in changed
    unknown = CommandResult(255, "", "Host key verification failed.\n")
    assert command_failure("nvidia-smi", unknown, "gpu-box") == (
        "ssh to gpu-box failed: Host key verification failed."
    )


def test_a_remote_nvidia_smi_exiting_255_runs_once_and_says_why(monkeypatch):
    """nvidia-smi's own "Other error" is exit 255, its reason on stdout, as ssh's failures
    are: a 255 with nothing on stderr was taken for a jump host's hidden error, nvidia-smi
    was run again without the master, and the error said "ssh to gpu-box failed: no reason
    given". Only ssh's "connection closed" lines, alone, are asked again."""
    import shutil
    import tempfile

    runtime = tempfile.mkdtemp(prefix="lr-")  # (short: a master's socket path fits)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    answers: list[CommandResult] = []
    masterless: list[bool] = []

    def host(argv: Sequence[str], timeout: float) -> CommandResult:
        masterless.append("ControlPath=none" in argv)
        return answers.pop(0) if answers else CommandResult(255, gone, "")

    gone = "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error\n"
    src = SmiSource("gpu-box", runner=host, timeout=10.0)
    try:
        with pytest.raises(SourceUnavailable) as err:
            src.open()
        assert str(err.value) == f"nvidia-smi failed on gpu-box: {gone.strip()}"
        assert masterless == [False]
        closed = "Connection closed by UNKNOWN port 65535\r\n"
        refused = "ssh: connect to host bastion port 22: Connection refused\r\n"
        answers.extend([CommandResult(255, "", closed), CommandResult(255, "", refused + closed)])
        with pytest.raises(SourceUnavailable, match=r"failed at its jump host .*refused$"):
            src.open()
        assert masterless == [False, False, True]
    finally:
        src.close()
        shutil.rmtree(runtime, ignore_errors=True)

"""NCCL_DEBUG=INFO log parsing: the real fixture against truth.json, written-out formats,
launcher prefixes, wrapped WARN lines, error lines, and garbage through the CLI."""

import json
from pathlib import Path

import pytest

from lltui.cli import main
from lltui.core.nccl.log import (
    MAX_KEPT_LINES,
    decode_cuda_driver,
    format_log_summary,
    parse_nccl_log,
    parse_nccl_log_text,
    strip_launcher_prefix,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real"  # see its README.md


def _log_entries():
    truth = json.loads((FIXTURES / "truth.json").read_text())
    return [e for e in truth["entries"] if e["kind"] == "nccl-log"]


LOG_ENTRIES = _log_entries()


@pytest.mark.parametrize("entry", LOG_ENTRIES, ids=lambda e: Path(e["file"]).stem)
def test_real_log_matches_truth(entry):
    s = parse_nccl_log_text((FIXTURES / entry["file"]).read_text())
    t = entry["truth"]
    assert s.nccl_version == t["nccl_version"]
    assert list(s.transports) == t["transports_via_lines"]
    assert s.network == t["network"]
    if "channels" in t:
        assert s.channels == t["channels"]
    else:  # not printed: only a lower bound from the highest channel the log uses
        assert s.channels is None or s.channels >= t["channels_min"]
    assert list(s.warn_lines) == t["warn_lines"]
    assert list(s.error_lines) == t["error_lines"]
    if t.get("reliable", {}).get("nranks") is False:
        assert s.nranks is None  # a mangled count is not guessed
    elif s.nranks is not None:
        assert s.nranks == t["nranks"]
    if "cuda_driver_version" in t:
        assert s.cuda_driver_version == t["cuda_driver_version"]
    if "env" in t:
        assert s.env == t["env"]
    if "ib_errors" in t:
        assert [[e.error, e.vendor_err] for e in s.ib_errors] == t["ib_errors"]
    if "failure_lines" in t:
        assert list(s.failure_lines) == t["failure_lines"]
        assert s.failed


def test_real_wrapped_warn_fixture_through_cli(capsys):
    entry = next(e for e in LOG_ENTRIES if "wrapped" in e["file"])
    assert main(["nccl", "log", str(FIXTURES / entry["file"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in (
        "nccl_version",
        "cuda_driver_version",
        "nranks",
        "channels",
        "transports",
        "network",
        "warn_lines",
        "error_lines",
    ):
        assert key in data
    assert data["warn_lines"] == entry["truth"]["warn_lines"]
    assert data["network"] == "IB"
    # The INFO lines after the WARN pass error 6 up the stack: a remote error.
    assert {t["code"] for t in data["error_trace"]} == {6}
    assert data["error_trace"][0]["name"] == "ncclRemoteError"
    # The rank count is not in this file (the truth's 2 comes from its description).
    assert data["nranks"] is None


SINGLE_NODE = """\
rig:4101:4101 [0] NCCL INFO Bootstrap : Using enp5s0:192.168.1.20<0>
rig:4101:4101 [0] NCCL INFO cudaDriverVersion 12020
rig:4101:4101 [0] NCCL INFO NCCL version 2.21.5+cuda12.4
rig:4101:4101 [0] NCCL INFO NCCL_P2P_LEVEL set by environment to NVL
rig:4101:4120 [0] NCCL INFO NET/IB : No device found.
rig:4101:4120 [0] NCCL INFO NET/Socket : Using [0]enp5s0:192.168.1.20<0>
rig:4101:4120 [0] NCCL INFO Using network Socket
rig:4101:4121 [1] NCCL INFO Using network Socket
rig:4101:4120 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9 - Init START
rig:4101:4121 [1] NCCL INFO comm 0x55e0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2000 commId 0x9 - Init START
rig:4101:4120 [0] NCCL INFO Channel 00/04 :    0   1
rig:4101:4120 [0] NCCL INFO Channel 01/04 :    0   1
rig:4101:4120 [0] NCCL INFO Channel 02/04 :    0   1
rig:4101:4120 [0] NCCL INFO Channel 03/04 :    0   1
rig:4101:4120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
rig:4101:4121 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/IPC/read
rig:4101:4121 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via SHM/direct/direct
rig:4101:4120 [0] NCCL INFO Connected all rings
rig:4101:4120 [0] NCCL INFO 4 coll channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer
rig:4101:4120 [0] NCCL INFO comm 0x55d0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1000 commId 0x9 - Init COMPLETE
rig:4101:4121 [1] NCCL INFO comm 0x55e0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2000 commId 0x9 - Init COMPLETE
"""  # noqa: E501


def test_single_node_log_every_field():
    s = parse_nccl_log_text(SINGLE_NODE)
    assert s.nccl_version == "2.21.5+cuda12.4"
    assert s.cuda_driver_code == 12020
    assert s.cuda_driver_version == "12.2"
    assert s.nranks == 2
    assert s.channels == 4
    assert s.transports == ("P2P/IPC/read", "SHM/direct/direct")
    assert s.transport_classes == ("P2P", "SHM")
    assert s.network == "Socket"
    assert s.networks == ("Socket",)
    assert s.env == {"NCCL_P2P_LEVEL": "NVL"}
    assert s.hosts == ("rig",)
    assert s.pids == (4101,)
    assert s.devices == ("0", "1")
    assert s.init_complete == 2
    assert s.ranks_seen == (0, 1)
    assert s.warn_lines == () and s.error_lines == ()
    assert s.record_lines == len(SINGLE_NODE.splitlines())


MULTI_NODE_MPI = """\
[1,0]<stdout>:node-a:700:700 [0] NCCL INFO NCCL version 2.18.5+cuda12.2
[1,0]<stdout>:node-a:700:790 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ; OOB ib0:10.0.0.1<0>
[1,0]<stdout>:node-a:700:790 [0] NCCL INFO Using network IB
[1,8]<stdout>:node-b:900:990 [0] NCCL INFO Using network IB
[1,0]<stdout>:node-a:700:790 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
[1,0]<stdout>:node-a:700:790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
[1,7]<stdout>:node-a:707:797 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
[1,8]<stdout>:node-b:900:990 [0] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [receive] via NET/IB/0/GDRDMA
[1,8]<stdout>:node-b:900:990 [0] NCCL INFO Channel 05/0 : 8[0] -> 9[1] via P2P/CUMEM
"""  # noqa: E501

SRUN = """\
0: gpu-01:11:11 [0] NCCL INFO NCCL version 2.20.5+cuda12.4
 1: gpu-01:12:12 [1] NCCL INFO Channel 03/1 : 1[1] -> 0[0] via P2P/IPC
12: gpu-02:13:13 [4] NCCL INFO Channel 01/1 : 12[4] -> 13[5] via P2P/IPC
"""


def test_mpi_prefixed_multi_node_log():
    s = parse_nccl_log_text(MULTI_NODE_MPI)
    assert s.nccl_version == "2.18.5+cuda12.2"
    assert s.nranks == 16
    assert s.ranks_seen == (0,)  # only rank 0 logged its setup line here
    assert s.network == "IB"
    assert s.transports == ("P2P/CUMEM", "NET/IB/0/GDRDMA")
    assert s.transport_classes == ("P2P", "NET")
    assert s.hosts == ("node-a", "node-b")
    assert set(s.pids) == {700, 707, 900}
    assert s.net_devices == ("mlx5_0:1/IB", "mlx5_1:1/RoCE")
    # No ring listing: the channel count comes from the highest channel used.
    assert s.channels == 6


def test_srun_prefixes_with_and_without_padding():
    s = parse_nccl_log_text(SRUN)
    assert s.nccl_version == "2.20.5+cuda12.4"
    assert s.transports == ("P2P/IPC",)
    assert s.hosts == ("gpu-01", "gpu-02")


OLD_FORMAT = """\
box:2335:2335 [0] INFO NET : Using interface eno1:192.168.1.2<0>
box:2335:2335 [0] INFO NET/Socket : 1 interfaces found
box:2335:2335 [0] INFO Using internal Network Socket
box:2335:2335 [0] INFO NCCL version 2.3.7+cuda9.2
box:2335:2360 [0] INFO Ring 00 :    0   1   2
box:2335:2360 [0] INFO Ring 01 :    0   1   2
box:2335:2360 [0] INFO Ring 00 : 0[0] -> 1[1] via P2P/IPC
box:2335:2361 [1] INFO Ring 00 : 1[1] -> 2[2] via direct shared memory
box:2335:2361 [1] INFO Ring 00 : 1[1] -> 2[2] via P2P/direct pointer
"""


def test_old_format_without_the_nccl_token():
    s = parse_nccl_log_text(OLD_FORMAT)
    assert s.nccl_version == "2.3.7+cuda9.2"
    assert s.network == "Socket"
    assert s.nranks == 3  # from the ring listing
    assert s.channels == 2
    assert s.transports == ("P2P/IPC", "direct shared memory", "P2P/direct pointer")


def test_bare_version_banner_and_ray_prefix():
    text = (
        "NCCL version 2.19.3+cuda12.3\n"
        "(Worker pid=31) host9:31:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n"  # noqa: E501
    )
    s = parse_nccl_log_text(text)
    assert s.nccl_version == "2.19.3+cuda12.3"
    assert s.transports == ("SHM/direct/direct",)
    assert s.hosts == ("host9",)


def test_warn_lines_one_per_line_with_launcher_prefix_removed():
    text = (
        "[1,3]<stderr>:n1:5:6 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 10.1.1.2<4321> failed : Connection refused\n"  # noqa: E501
        "n1:5:6 [3] NCCL WARN Short one\n"
        "A line from the program that follows a short WARN\n"
        "n1:5:6 [3] NCCL INFO misc/socket.cc:564 -> 2\n"
    )
    s = parse_nccl_log_text(text)
    assert s.warn_lines == (
        "n1:5:6 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        "10.1.1.2<4321> failed : Connection refused",
        "n1:5:6 [3] NCCL WARN Short one",
    )
    assert s.warn_total == 2
    assert [(t.where, t.code, t.name) for t in s.error_trace] == [
        ("misc/socket.cc:564", 2, "ncclSystemError")
    ]


def test_wrapped_warn_is_joined_but_a_traceback_after_it_is_not():
    long_warn = (
        "h:1:2 [0] transport/net_ib.cc:100 NCCL WARN NET/IB : Got completion from peer "
        "10.0.0.9<1> with error 5, opcode 0,"
    )
    text = long_warn + "\n len 0, vendor err 249\nTraceback (most recent call last):\n"
    s = parse_nccl_log_text(text)
    assert s.warn_lines == (long_warn + "\n len 0, vendor err 249",)


def test_error_lines_from_frameworks_and_nccl_tests():
    text = (
        "host:1:1 [0] NCCL INFO Using network IB\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for "
        "details), NCCL version 2.19.3\n"
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed.\n"
        "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 milliseconds\n"
        "gpu7: Test NCCL failure common.cu:958 'internal error'\n"
        "host:1:1 [0] NCCL ABORT something went very wrong\n"
        "an ordinary line mentioning errors in general\n"
    )
    s = parse_nccl_log_text(text)
    assert s.error_total == 5
    assert s.error_lines[0].startswith("torch.distributed.DistBackendError: NCCL error in:")
    assert s.error_lines[2].startswith("[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog")
    assert s.error_lines[3] == "gpu7: Test NCCL failure common.cu:958 'internal error'"
    assert s.error_lines[4] == "host:1:1 [0] NCCL ABORT something went very wrong"
    # The version the framework names is used when NCCL's own banner is missing.
    assert s.nccl_version == "2.19.3"


def test_kept_lines_are_capped_but_counted():
    text = "".join(f"h:1:1 [0] NCCL WARN number {i}\n" for i in range(MAX_KEPT_LINES + 25))
    s = parse_nccl_log_text(text)
    assert s.warn_total == MAX_KEPT_LINES + 25
    assert len(s.warn_lines) == MAX_KEPT_LINES
    assert s.warn_lines[-1] == f"h:1:1 [0] NCCL WARN number {MAX_KEPT_LINES - 1}"


def test_lines_can_be_any_iterable_with_newlines():
    s = parse_nccl_log(iter(SINGLE_NODE.splitlines(keepends=True)))
    assert s.nranks == 2 and s.channels == 4


def test_strip_launcher_prefix_and_cuda_driver_decoding():
    assert strip_launcher_prefix("[1,0]<stdout>:   # size") == "# size"
    assert strip_launcher_prefix("  12: text") == "text"
    assert strip_launcher_prefix("[default3]:text") == "text"
    assert strip_launcher_prefix("> > (Actor pid=5) text") == "text"
    assert strip_launcher_prefix("plain text") == "plain text"
    assert decode_cuda_driver(12040) == "12.4"
    assert decode_cuda_driver(11080) == "11.8"


def test_text_output_lists_warnings(capsys):
    entry = next(e for e in LOG_ENTRIES if "wrapped" in e["file"])
    assert main(["nccl", "log", str(FIXTURES / entry["file"])]) == 0
    out = capsys.readouterr().out
    assert "network     IB" in out
    assert "Got completion from peer 10.2.0.5<33092>" in out
    assert "warnings    1" in out


def test_log_from_stdin(capsys, monkeypatch):
    import io
    import sys

    class FakeStdin:
        buffer = io.BytesIO(SINGLE_NODE.encode())

    monkeypatch.setattr(sys, "stdin", FakeStdin())
    assert main(["nccl", "log", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["channels"] == 4


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\x01\x02\xff\xfe" * 4000,
        bytes(range(256)) * 300,
        b"just some text\nwith nothing from the library\n" * 50,
        b"x" * 300_000,  # one line longer than any reader limit
        "ünïcödé ✓ NCCL_DEBUG\n".encode("utf-16"),
    ],
    ids=["empty", "binary", "all-bytes", "plain-text", "one-huge-line", "utf16"],
)
def test_garbage_is_exit_2_with_one_line(tmp_path, capsys, content):
    f = tmp_path / "input.log"
    f.write_bytes(content)
    assert main(["nccl", "log", str(f)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert "\n" not in err and "Traceback" not in err
    assert "nothing from NCCL" in err


def test_missing_file_and_directory_are_exit_2(tmp_path, capsys):
    assert main(["nccl", "log", str(tmp_path / "absent.log")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["nccl", "log", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_records_survive_binary_noise_around_them(tmp_path, capsys):
    f = tmp_path / "noisy.log"
    f.write_bytes(b"\x00\xff" * 100 + b"\n" + SINGLE_NODE.encode() + b"\xfe\x00garbage\n")
    assert main(["nccl", "log", str(f), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["nranks"] == 2
    assert data["transports"] == ["P2P/IPC/read", "SHM/direct/direct"]


PLUGIN_THEN_SOCKET = """\
h:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
host:100:100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
host:100:100 [0] NCCL INFO Using network Socket
"""


def test_the_internal_plugin_line_names_no_network():
    s = parse_nccl_log_text(PLUGIN_THEN_SOCKET)
    assert s.network == "Socket"
    assert s.networks == ("Socket",)
    only_plugin = parse_nccl_log_text(PLUGIN_THEN_SOCKET.splitlines()[0])
    assert only_plugin.network is None


FAILED_RUN = """\
box:1:2 [0] NCCL INFO Using network IB
box:1:2 [0] NCCL INFO transport/net.cc:1134 -> 6
box:1:2 [0] NCCL INFO proxy.cc:679 -> 6
box:1:2 [0] NCCL INFO proxy.cc:858 -> 6 [Proxy Thread]
box:1:2 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via NET/IB/0
box:1:3 [0] NCCL INFO misc/socket.cc:50 -> 2
box:1:3 [0] NCCL INFO init.cc:1234 -> 7
"""


def test_a_failure_passed_up_the_stack_makes_a_run_with_errors():
    s = parse_nccl_log_text(FAILED_RUN)
    assert s.failed
    # one failure per chain: the 6 chain (3 lines), then a 2 chain after another record
    assert s.failure_total == 2
    assert s.failure_lines[0].endswith("transport/net.cc:1134 -> 6")
    assert s.failure_lines[1].endswith("misc/socket.cc:50 -> 2")
    assert s.error_lines == ()  # nothing was printed as an error line
    text = format_log_summary(s)
    assert "errors      2" in text and "errors      0" not in text
    assert parse_nccl_log_text("x:1:1 [0] NCCL INFO init.cc:1 -> 7").failed is False


def test_ib_completion_errors_are_explained():
    wrapped = (
        "node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion "
        "from peer 10.2.0.5<33092> with error 12, opcode 0, len\n0, vendor err 129 (Recv)\n"
        "node-2:5776:5902 [0] transport/net_ib.cc:1296 NCCL WARN NET/IB : Got completion "
        "from peer 10.2.0.6<33092> with error 5, opcode 0, len 0, vendor err 249\n"
    )
    s = parse_nccl_log_text(wrapped)
    assert [(e.error, e.name, e.vendor_err) for e in s.ib_errors] == [
        (12, "IBV_WC_RETRY_EXC_ERR", 129),
        (5, "IBV_WC_WR_FLUSH_ERR", 249),
    ]
    assert "retries exhausted" in s.ib_errors[0].meaning
    data = s.to_json()
    assert data["ib_errors"][0]["name"] == "IBV_WC_RETRY_EXC_ERR"
    assert "IB error    12 (IBV_WC_RETRY_EXC_ERR, vendor err 129)" in format_log_summary(s)


def test_ib_completion_errors_in_the_status_format():
    text = (
        "w:1:2 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<5> "
        "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00::1 remoteGidsfd00::2\n"
    )
    s = parse_nccl_log_text(text)
    assert [(e.error, e.vendor_err) for e in s.ib_errors] == [(12, 129)]


def test_a_net_transport_with_no_device_is_not_the_network():
    text = (
        "h:1:1 [0] NCCL INFO NET/IB : No device found.\n"
        "h:1:1 [0] NCCL INFO Failed to initialize NET plugin IB\n"
        "h:1:1 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
    )
    assert parse_nccl_log_text(text).network == "Socket"
    assert parse_nccl_log_text(text.splitlines()[0]).network is None


def test_a_timestamped_line_after_a_long_error_is_a_line_of_its_own():
    first = (
        "2025-02-18 12:54 [rank1]:[E218 04:54:22.86 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran 600045 ms"
    )
    for nxt in (
        "2025-02-18 12:54 [rank1]:[E218 04:54:22.87 ProcessGroupNCCL.cpp:1795] Exception detected",
        "[rank1]:[E218 04:54:22.87 ProcessGroupNCCL.cpp:1795] Exception detected",
        "[2025-02-18 12:54:22] something else",
    ):
        s = parse_nccl_log_text(first + "\n" + nxt + "\n")
        assert s.error_lines == (first,), nxt


def test_old_nccls_direct_shared_memory_is_shm():
    """NCCL before 2.8 printed "via direct shared memory" for SHM (it was classed "direct")."""
    text = (
        "node:1:1 [0] NCCL INFO Ring 00 : 0[0] -> 1[1] via direct shared memory\n"
        "node:1:1 [0] NCCL INFO Channel 01 : 1[1] -> 0[0] via P2P/IPC\n"
    )
    assert parse_nccl_log_text(text).transport_classes == ("SHM", "P2P")


FORMATS = Path(__file__).resolve().parent / "fixtures" / "nccl-format"  # see its README.md
NCCL_230_LOG = FORMATS / "nccl-2.30-2node-ib-retry-exceeded.log"


def test_nccl_230_warn_records_keep_their_host_pid_and_device(tmp_path, capsys):
    """NCCL 2.30 prints the function after a WARN's file and line; such a record still says
    which host, process and device warned, also in a paste of the WARN lines alone."""
    lines = NCCL_230_LOG.read_text().splitlines()
    s = parse_nccl_log(lines)
    assert s.nccl_version == "2.30.7+cuda13.0" and s.nranks == 16
    assert s.hosts == ("dgx-a01", "dgx-a02")
    assert [w.split(" ", 1)[0] for w in s.warn_lines] == [
        "dgx-a02:31442:31539",
        "dgx-a02:31442:31442",
    ]
    grepped = tmp_path / "warn.log"
    grepped.write_text("".join(line + "\n" for line in lines if "WARN" in line))
    assert main(["nccl", "log", str(grepped), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hosts"] == ["dgx-a02"] and data["pids"] == [31442] and data["devices"] == ["0"]
    assert data["warn_total"] == 2 and data["record_lines"] == 2
    assert data["warn_lines"][1].startswith("dgx-a02:31442:31442 [0] misc/socket.cc:49 ")


def test_a_trace_record_keeps_its_host():
    """NCCL_DEBUG=TRACE records give milliseconds since init before the function and line."""
    text = "h1:7:9 [2] 1520.253418 ncclProxyProgress:884 NCCL TRACE Received ctrl on peer 3\n"
    s = parse_nccl_log_text(text)
    assert s.hosts == ("h1",) and s.devices == ("2",) and s.record_lines == 1


def test_ib_completion_errors_in_nccl_228s_named_status_format(capsys):
    """NCCL 2.28.7+ names the status and opcode: status=IBV_WC_RETRY_EXC_ERR(12) ...
    vendor_err=129."""
    assert main(["nccl", "log", str(NCCL_230_LOG), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(e["error"], e["name"], e["vendor_err"]) for e in data["ib_errors"]] == [
        (12, "IBV_WC_RETRY_EXC_ERR", 129)
    ]
    assert main(["nccl", "log", str(NCCL_230_LOG)]) == 0
    assert "IB error    12 (IBV_WC_RETRY_EXC_ERR, vendor err 129)" in capsys.readouterr().out


def test_a_log_of_rank_0_alone_counts_the_hosts_nccl_says(capsys, tmp_path):
    """A multi-node log holding only rank 0's lines said '16 ranks on 1 host' though NCCL's
    own line says 'nNodes 2': the host count now takes nNodes, and says how many hosts the
    log has lines from; --json gives nnodes."""
    fixture = NCCL_230_LOG.read_text().splitlines(keepends=True)
    rank0 = tmp_path / "rank0.log"
    rank0.write_text("".join(line for line in fixture if line.startswith("dgx-a01:")))
    s = parse_nccl_log_text(rank0.read_text())
    assert s.hosts == ("dgx-a01",) and s.nnodes == 2
    assert main(["nccl", "log", str(rank0)]) == 0
    assert "16 ranks on 2 hosts (lines from 1) ·" in capsys.readouterr().out
    assert main(["nccl", "log", str(rank0), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nnodes"] == 2
    assert "16 ranks on 2 hosts ·" in format_log_summary(parse_nccl_log(fixture))


def test_a_log_that_does_not_say_how_many_hosts_claims_none(capsys):
    """64 ranks of 8 hosts, the lines of one of them and no 'nNodes': the text said '64 ranks
    on 1 host' where --json said nnodes null; it says what the log has lines from."""
    log = FIXTURES / "nccl" / "N16-ncclinfo-64rank-NVLS-coll-channels-init-complete.txt"
    assert main(["nccl", "log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "64 ranks (lines from 1 host) ·" in out and "on 1 host" not in out
    # where every rank's lines are here, so are its hosts' (one rank: one host)
    one = FIXTURES / "nccl" / "N20-ncclinfo-2.19.3-single-rank-socket-32-channels.txt"
    assert main(["nccl", "log", str(one)]) == 0
    assert "1 rank on 1 host ·" in capsys.readouterr().out


def test_hosts_running_different_nccl_versions_are_called_out(capsys, tmp_path):
    """Hosts printing different NCCL versions in one log went unnoticed (only the first
    version was reported), though NCCL fails init with 'Mismatched NCCL version detected':
    the text now says which version runs where, and --json lists the version per host. A
    different +cuda build of one version is no mismatch to NCCL."""
    fixture = NCCL_230_LOG.read_text()
    other = "dgx-a02:31442:31442 [0] NCCL INFO NCCL version 2.28.3+cuda12.9\n"
    mixed = tmp_path / "mixed.log"
    mixed.write_text(fixture + other)
    assert main(["nccl", "log", str(mixed)]) == 0
    out = capsys.readouterr().out
    assert (
        "versions    differ between hosts: 2.30.7+cuda13.0 on dgx-a01; 2.28.3+cuda12.9 on "
        "dgx-a02" in out
    )
    assert main(["nccl", "log", str(mixed), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["host_versions"] == {"dgx-a01": "2.30.7+cuda13.0", "dgx-a02": "2.28.3+cuda12.9"}
    assert data["versions_differ"] is True
    same = parse_nccl_log_text(fixture + other.replace("2.28.3+cuda12.9", "2.30.7+cuda12.9"))
    assert not same.mismatched_versions and "versions " not in format_log_summary(same)
    one = parse_nccl_log_text(fixture)
    assert one.host_versions == {"dgx-a01": "2.30.7+cuda13.0"} and not one.mismatched_versions

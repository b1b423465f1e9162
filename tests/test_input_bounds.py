"""Inputs of any size: the NCCL log and nccl-tests summaries keep bounded sets whatever the
input holds, the readers stop at MAX_INPUT_BYTES (an endless stream ends), and the progress
line is drawn on a terminal past a second, erased after, and never on a pipe.
(Times and peaks of 10 MB inputs: bench/big_inputs.py.)"""

from __future__ import annotations

import io
import json

import pytest

from lltui.cli import main
from lltui.commands import nccl as nccl_cmd
from lltui.commands.progress import Progress
from lltui.core.nccl import nccl_tests
from lltui.core.nccl.log import MAX_KEPT_LINES, parse_nccl_log

ROW = "        1024           256     float     sum      -1    10.00    0.10    0.15      0    10.00    0.10    0.15      0"  # noqa: E501


def test_a_log_naming_a_new_host_on_every_line_keeps_the_first_ones_in_order():
    n = MAX_KEPT_LINES + 500
    lines = (
        f"host{i}:{1000 + i}:{1000 + i} [{i}] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/x{i}"
        for i in range(n)
    )
    s = parse_nccl_log(lines)
    assert s.record_lines == n
    for kept in (s.hosts, s.pids, s.devices, s.transports):
        assert len(kept) == MAX_KEPT_LINES
    assert s.hosts[:3] == ("host0", "host1", "host2")
    assert s.pids[-1] == 1000 + MAX_KEPT_LINES - 1
    assert s.transports[0] == "P2P/x0"


def test_repeated_values_are_kept_once_in_first_seen_order():
    lines = [
        "b:1:1 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
        "a:2:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/IPC/read",
        "b:1:1 [1] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via SHM/direct/direct",
        "a:2:2 [0] NCCL INFO misc.cc:1 -> 3",
        "a:2:2 [0] NCCL INFO misc.cc:1 -> 3",
    ]
    s = parse_nccl_log(lines)
    assert s.hosts == ("b", "a") and s.pids == (1, 2) and s.devices == ("1", "0")
    assert s.transports == ("SHM/direct/direct", "P2P/IPC/read")
    assert len(s.error_trace) == 1


def _table(n_rows: int, header: bool = True) -> list[str]:
    head = ["#       size         count      type   redop    root     time   algbw   busbw #wrong"]
    return (head if header else []) + [ROW] * n_rows + ["# Avg bus bandwidth    : 0.15"]


def test_a_table_keeps_its_first_rows_and_says_how_many_more(monkeypatch):
    monkeypatch.setattr(nccl_tests, "MAX_ROWS", 5)
    result = nccl_tests.parse_nccl_tests(_table(12))
    (table,) = result.tables
    assert len(table.rows) == 5
    assert any("7 more row(s) not kept" in w for w in table.warnings)


def test_tables_failures_and_ranks_are_bounded(monkeypatch):
    monkeypatch.setattr(nccl_tests, "MAX_TABLES", 3)
    monkeypatch.setattr(nccl_tests, "MAX_FAILURES", 2)
    monkeypatch.setattr(nccl_tests, "MAX_RANKS", 4)
    lines: list[str] = []
    for _ in range(5):
        lines += [f"#  Rank {r:2d} Group  0 Pid 1 on h device {r} [0x1] GPU" for r in range(9)]
        lines += ["Test NCCL failure common.cu:1 'x'"] * 3
        lines += _table(2)
    result = nccl_tests.parse_nccl_tests(lines)
    assert len(result.tables) == 3 and result.tables_dropped == 2
    assert result.to_json()["tables_not_kept"] == 2
    assert all(len(t.failures) <= 2 for t in result.tables)
    assert all(len(t.devices) == 4 for t in result.tables)


def test_the_text_output_says_when_tables_were_not_kept(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(nccl_tests, "MAX_TABLES", 1)
    path = tmp_path / "two.txt"
    path.write_text("\n".join([*_table(2), "all_reduce_perf -b 8", *_table(2)]) + "\n")
    assert main(["nccl", "tests", str(path)]) == 0
    assert "1 more table(s) not kept" in capsys.readouterr().out


class _Endless(io.RawIOBase):
    """/dev/zero, or ``yes |``: a stream that never ends."""

    def __init__(self, chunk: bytes) -> None:
        self.chunk = chunk

    def readable(self) -> bool:
        return True

    def readinto(self, b: memoryview) -> int:
        n = len(b)
        data = (self.chunk * (n // len(self.chunk) + 1))[:n]
        b[:n] = data
        return n


@pytest.mark.parametrize("chunk", [b"\0", b"NCCL INFO y\n"], ids=["zeros", "lines"])
def test_an_endless_stream_ends_at_the_limit(chunk):
    lines = nccl_cmd.InputLines("-", stdin=io.BufferedReader(_Endless(chunk)), limit=1 << 20)
    n = sum(1 for _ in lines)
    assert lines.cut and lines.done > 1 << 20
    assert n >= 0
    assert "read the first 1.0 MiB only" in (lines.note() or "")


def test_a_cut_input_is_summarised_with_a_note_on_stderr(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(nccl_cmd, "MAX_INPUT_BYTES", 200)
    path = tmp_path / "log.txt"
    line = "h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
    path.write_text(line * 20)
    assert main(["nccl", "log", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["lines"] < 20
    assert err.strip().endswith("read the first 200 B only; the summary covers that part")


class _Tty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_the_progress_line_waits_a_second_is_redrawn_in_place_and_erased():
    stream, clock = _Tty(True), _Clock()
    p = Progress(
        "reading x.log", total=4 << 20, unit="MiB", stream=stream, clock=clock, ticker=False
    )
    p.done = 1 << 20
    clock.t += 0.5
    assert not p.tick() and stream.getvalue() == ""
    clock.t += 0.7
    assert p.tick()
    assert stream.getvalue() == "\rlltui: reading x.log: 1/4 MiB (25%), 1 s"
    p.done, p.phase = 4 << 20, "\nforged"
    clock.t += 1
    p.tick()
    assert stream.getvalue().endswith("\rlltui: reading x.log \\u000aforged: 4/4 MiB (100%), 2 s")
    p.close()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_no_progress_line_on_a_pipe_nor_for_quick_work():
    stream, clock = _Tty(False), _Clock()
    with Progress("x", stream=stream, clock=clock, ticker=False) as p:
        clock.t += 5
        assert not p.tick()
    assert stream.getvalue() == ""
    tty = _Tty(True)
    with Progress("x", stream=tty, clock=clock, ticker=False):
        pass
    assert tty.getvalue() == ""  # nothing drawn, nothing to erase


def test_a_tiny_sparse_file_claiming_billions_of_strings_is_one_line(tmp_path, capsys):
    """A 4 KiB file truncated to 16 GiB whose token array claims 2^31 strings: each string
    was stepped over in turn, reading every zero page (still running after 90 s)."""
    import struct

    key = b"tokenizer.ggml.tokens"
    count = 1 << 28
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    head += struct.pack("<IIQ", 9, 8, count)  # an array of strings
    path = tmp_path / "claims.gguf"
    with path.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + count * 8 + 4096)  # (room for every claimed string: a hole)
    assert main(["fit", str(path), "--gpus", "24GiB"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "more than any vocabulary" in err

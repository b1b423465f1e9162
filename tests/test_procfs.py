"""The host's facts read from /proc as psutil reads them (lltui/sources/gpu/procfs.py): parsed
from fixture trees, and read from real processes side by side with psutil."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from lltui.core.monitor.models import GpuProcess
from lltui.sources.gpu import procfs
from lltui.sources.gpu.host_facts import HostSampler
from lltui.sources.gpu.host_psutil import PsutilReader
from lltui.sources.gpu.procfs import (
    CpuMeter,
    ProcReader,
    full_name,
    parse_cmdline,
    parse_stat,
)


def stat_line(pid: int, comm: str, utime: int, stime: int, start: int, rss: int) -> bytes:
    # fields 1-24 of proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt
    # cminflt majflt cmajflt utime stime cutime cstime priority nice threads itreal start
    # vsize rss
    rest = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), str(stime)]
    rest += ["0", "0", "20", "0", "1", "0", str(start), "1000", str(rss)]
    return f"{pid} ({comm}) {' '.join(rest)} 0 0 0\n".encode()


def fake_proc(root: Path, cpu: str = "cpu 100 0 50 800 50 0 0 0 0 0", btime: int = 1000) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"{cpu}\ncpu0 1 2 3 4\nbtime {btime}\n")
    (root / "self").mkdir(exist_ok=True)
    (root / "self" / "stat").write_bytes(stat_line(1, "x", 0, 0, 0, 0))
    return root


def fake_pid(root: Path, pid: int, stat: bytes, cmdline: bytes, uid: int) -> None:
    d = root / str(pid)
    d.mkdir(exist_ok=True)
    (d / "stat").write_bytes(stat)
    (d / "cmdline").write_bytes(cmdline)
    fields = stat.rpartition(b")")[2].split()
    rss = fields[21].decode() if len(fields) > 21 else "0"  # as the stat line says
    (d / "statm").write_text(f"1000 {rss} 0 0 0 0 0\n")
    (d / "status").write_text(f"Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")


def test_the_name_in_parentheses_may_hold_spaces_and_parentheses():
    stat = parse_stat(stat_line(7, "a) (b c", 30, 12, 5000, 25))
    assert (stat.comm, stat.cpu_ticks, stat.start_ticks) == ("a) (b c", 42, 5000)


def test_command_lines_as_psutil_reads_them():
    assert parse_cmdline(b"llama-server\x00-m\x00a b.gguf\x00") == (
        "llama-server",
        "-m",
        "a b.gguf",
    )
    assert parse_cmdline(b"") == ()  # a kernel thread, a zombie
    # a process that rewrote its title into one string
    assert parse_cmdline(b"postgres: writer process \x00") == ("postgres:", "writer", "process", "")
    assert parse_cmdline(b"python3 app.py --x") == ("python3", "app.py", "--x")


def test_a_name_the_kernel_cut_is_completed_from_the_program():
    args = ("/opt/bin/llama-server-cuda12", "-m", "x.gguf")
    assert full_name("llama-server-cu", args) == "llama-server-cuda12"
    assert full_name("llama-server-cu", ("python3",)) == "llama-server-cu"
    assert full_name("short", args) == "short"


def test_host_cpu_counts_iowait_idle_and_guest_time_once(tmp_path):
    root = fake_proc(tmp_path / "proc", cpu="cpu 100 0 50 800 50 0 0 0 0 0")
    meter = CpuMeter(tmp_path)
    # +300 user (of which 100 guest), +100 system, +500 idle, +100 iowait: 400 busy of 1000
    fake_proc(root, cpu="cpu 400 0 150 1300 150 0 0 0 100 0")
    assert meter.percent() == 40.0
    assert meter.percent() == 0.0  # no time passed
    (root / "stat").write_text("garbage")
    assert meter.percent() is None


def test_a_counter_that_went_backwards_counts_as_no_change(tmp_path):
    root = fake_proc(tmp_path / "proc", cpu="cpu 100 0 0 800 100 0 0 0 0 0")
    meter = CpuMeter(tmp_path)
    fake_proc(root, cpu="cpu 110 0 0 890 50 0 0 0 0 0")  # iowait fell by 50
    assert meter.percent() == 10.0  # 10 busy of 100, not 10 of 50


def test_start_times_and_users_as_psutil_has_them(tmp_path):
    """The kernel's boot time moves when the wall clock is stepped (NTP after boot): a process
    keeps the start time first worked out (psutil's Process keeps it too), a process first
    seen after the step gets the new boot time. A process may change its uid: read again."""
    root = fake_proc(tmp_path / "proc", btime=1_000)
    ticks = os.sysconf("SC_CLK_TCK")
    stat = stat_line(42, "llama-server", 10, 0, 5 * ticks, 100)
    fake_pid(root, 42, stat, b"llama-server\x00", 0)
    reader = ProcReader(tmp_path)
    first = reader.process(42)
    assert first is not None and first.started == pytest.approx(1_005.0) and first.user == "root"
    fake_proc(root, btime=1_100)  # the wall clock stepped 100 s
    fake_pid(root, 42, stat, b"llama-server\x00", 4242424)
    fake_pid(root, 43, stat_line(43, "sleep", 0, 0, 7 * ticks, 1), b"sleep\x00", 0)
    second, other = reader.process(42), reader.process(43)
    assert second is not None and second.started == pytest.approx(1_005.0)
    assert second.user == "4242424"
    assert other is not None and other.started == pytest.approx(1_107.0)


def test_a_name_that_is_not_utf8_is_completed_as_psutil_does():
    comm = b"llama-server-\xffx"  # 15 bytes, cut by the kernel
    stat = parse_stat(b"1 (" + comm + b") " + stat_line(1, "x", 0, 0, 0, 0).split(b") ", 1)[1])
    args = parse_cmdline(b"/opt/llama-server-\xffxyz\x00-m\x00m.gguf\x00")
    assert full_name(stat.comm, args) == "llama-server-\udcffxyz"


def test_a_pid_reused_by_another_process_starts_over(tmp_path):
    root = fake_proc(tmp_path / "proc", btime=1_000)
    ticks = os.sysconf("SC_CLK_TCK")
    fake_pid(root, 42, stat_line(42, "llama-server", 10, 0, 5 * ticks, 100), b"llama-server\x00", 0)
    reader = ProcReader(tmp_path)
    first = reader.process(42)
    assert first is not None and first.cpu_pct == 0.0 and first.user == "root"
    assert first.started == pytest.approx(1_005.0)
    assert first.host_rss == 100 * os.sysconf("SC_PAGE_SIZE")
    # the same process, busy since: a share of one core
    fake_pid(
        root,
        42,
        stat_line(42, "llama-server", 10 + 50 * ticks, 0, 5 * ticks, 100),
        b"llama-server\x00",
        0,
    )
    second = reader.process(42)
    assert second is not None and second.cpu_pct > 100  # 50 CPU-seconds in far less time
    # the pid now belongs to another process, of a uid without a passwd entry
    fake_pid(root, 42, stat_line(42, "sleep", 10**6, 0, 9 * ticks, 1), b"sleep\x0030\x00", 4242424)
    third = reader.process(42)
    assert third is not None and third.cpu_pct == 0.0 and third.user == "4242424"
    assert third.name == "sleep" and third.cmdline == ("sleep", "30")
    reader.forget(set())
    (root / "42" / "stat").unlink()
    assert reader.process(42) is None  # gone


def test_an_unreadable_process_has_no_facts(tmp_path):
    root = fake_proc(tmp_path / "proc")
    fake_pid(root, 9, b"9 (x) S", b"", 0)  # cut short
    assert ProcReader(tmp_path).process(9) is None
    assert ProcReader(tmp_path).process(10) is None  # hidepid, another namespace: not there


@pytest.fixture
def long_named_sleeper(tmp_path):
    """A real process whose program name is longer than the kernel keeps."""
    program = tmp_path / "lltui-test-sleeper-program"
    program.symlink_to(sys.executable)
    code = "import time; print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen([str(program), "-c", code, "a b"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child
    finally:
        child.kill()
        child.wait()


def test_a_real_process_reads_as_psutil_reads_it(long_named_sleeper):
    pid = long_named_sleeper.pid
    ours, theirs = ProcReader(), PsutilReader()
    a, b = ours.process(pid), theirs.process(pid)  # the child is asleep: nothing changes
    assert a is not None and b is not None
    assert a.name == b.name == "lltui-test-sleeper-program"
    assert (a.user, a.cmdline) == (b.user, b.cmdline)
    assert a.started == pytest.approx(b.started, abs=0.02)
    assert a.host_rss == pytest.approx(b.host_rss, rel=0.1)
    total, available = ours.memory()
    assert total == theirs.memory()[0] and 0 < available <= total


def test_rss_is_psutils_from_statm_for_a_child_and_for_this_process(long_named_sleeper):
    ours = ProcReader()
    child = ours.process(long_named_sleeper.pid)  # asleep: its memory stays put
    assert child is not None
    assert child.host_rss == psutil.Process(long_named_sleeper.pid).memory_info().rss
    me = psutil.Process()
    for _ in range(50):  # this process allocates as it runs: a reading between two equal
        before = ours.process(os.getpid())
        theirs = me.memory_info().rss
        after = ours.process(os.getpid())
        assert before is not None and after is not None
        if before.host_rss == after.host_rss:
            assert before.host_rss == theirs
            break
    else:
        pytest.fail("this process's RSS never held still between two readings")


def test_a_busy_process_reads_about_what_psutil_reads():
    me = os.getpid()
    ours, theirs = ProcReader(), PsutilReader()
    ours.process(me), theirs.process(me)
    end = time.process_time() + 0.3
    while time.process_time() < end:  # busy: both readings cover the same stretch
        pass
    a, b = ours.process(me), theirs.process(me)
    assert a is not None and b is not None
    # a share of one core over the same stretch (how much of it the machine gave varies)
    assert a.cpu_pct > 0 and b.cpu_pct > 0
    assert a.cpu_pct == pytest.approx(b.cpu_pct, abs=25)


def test_the_monitor_reads_the_host_without_psutil():
    code = (
        "import os, sys\n"
        "from lltui.core.monitor.models import GpuProcess\n"
        "from lltui.sources.gpu.host_facts import HostSampler\n"
        "s = HostSampler()\n"
        "(p,) = s.enrich([GpuProcess(pid=os.getpid(), gpu_index=0, used_memory=1)])\n"
        "h = s.sample()\n"
        "assert p.name and p.user and p.command and p.host_rss > 0, p\n"
        "assert h.mem_total > h.mem_used > 0 and h.cpu_count >= 1, h\n"
        "assert 'psutil' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_either_reader_gives_the_sampler_the_same_process():
    me = GpuProcess(pid=os.getpid(), gpu_index=0, used_memory=1)
    (a,) = HostSampler(reader=ProcReader()).enrich([me])
    (b,) = HostSampler(reader=PsutilReader()).enrich([me])
    assert (a.name, a.user, a.command, a.model) == (b.name, b.user, b.command, b.model)
    assert psutil.Process().username() == a.user


def test_a_root_without_proc_is_not_readable(tmp_path):
    assert not procfs.readable(tmp_path)
    fake_proc(tmp_path / "proc")
    assert procfs.readable(tmp_path) and procfs.readable()

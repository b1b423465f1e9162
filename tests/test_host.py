import os
import time

from lltui.core.monitor.models import GpuProcess
from lltui.sources.gpu.host_facts import HostSampler


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_process_on_two_gpus_gets_the_same_host_facts_from_one_reading():
    sampler = HostSampler()
    me = os.getpid()
    listed = [
        GpuProcess(pid=me, gpu_index=0, used_memory=1),
        GpuProcess(pid=me, gpu_index=1, used_memory=2),
    ]
    sampler.enrich(listed)  # the first reading of a pid primes cpu_percent
    busy(0.2)
    a, b = sampler.enrich(listed)
    assert a.cpu_pct is not None and a.cpu_pct > 10
    assert b.cpu_pct == a.cpu_pct and b.command == a.command
    assert (a.gpu_index, a.used_memory, b.gpu_index, b.used_memory) == (0, 1, 1, 2)


def test_a_vanished_pid_keeps_its_nones_and_is_forgotten():
    sampler = HostSampler()
    gone = GpuProcess(pid=2**22 + 12345, gpu_index=0, used_memory=None)
    (out,) = sampler.enrich([gone])
    assert out == gone
    assert sampler.unseen == 1

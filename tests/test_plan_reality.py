"""A llama-server's plan held against what the GPU source says its process holds: the NVML
source over the fake pynvml, a process whose memory climbs past its plan (an alert once it
has held past the margin for the window), one that holds memory on a GPU the plan gave
nothing (placement mismatch), and none on a quiet rig."""

from __future__ import annotations

import os

import pytest
from support.fake_pynvml import DRIVER_R535, FakeNvml, make_gpus
from support.nvml_helpers import close_nvml_sources

from lltui.core.monitor.alert_settings import AlertThresholds
from lltui.core.monitor.alerts import AlertTracker
from lltui.core.monitor.plan_reality import PlanWatch
from lltui.core.units import MIB
from lltui.sources.gpu.nvml import NvmlSource
from lltui.sources.gpu.sim import StepClock

__all__ = ["close_nvml_sources"]

ME = os.getpid()  # the "server": a pid the host knows
PLAN = 2000 * MIB  # what the load log said CUDA0 holds
CONTEXT = 300 * MIB  # what the plan leaves out (the CUDA context)
SERVER = "http://127.0.0.1:8080"
TH = AlertThresholds(plan_growth_mib=512, plan_growth_for_s=60, plan_placement_for_s=10)


@pytest.fixture
def rig(monkeypatch):
    gpus = make_gpus(2)
    fake = FakeNvml(gpus, driver=DRIVER_R535)
    fake.install(monkeypatch)
    clock = StepClock(1000.0, step=0.0)
    src = NvmlSource(clock=clock, wall=lambda: 1_767_225_600.0, env={}, event_wait_s=0.002)
    src.open()
    return gpus, src, clock


def run(rig, held_by_step, *, plan=None, seconds=10.0):
    """Sample the rig each ``seconds`` with the process holding what ``held_by_step`` says
    per GPU; the alerts raised after each sample."""
    gpus, src, clock = rig
    watch = PlanWatch(SERVER, ME, plan or {"CUDA0": PLAN})
    tracker = AlertTracker(TH)
    raised = []
    for i, held in enumerate(held_by_step):
        for g, used in zip(gpus, held, strict=True):
            g.compute_procs = [(ME, used)] if used else []
        clock.advance(seconds)
        sample = src.poll()
        reality = watch.fold(sample)
        tracker.update(1000.0 + i * seconds, plans=[reality])
        raised.append({(a.kind, a.gpu_index) for a in tracker.active})
    return reality, raised


def test_memory_that_climbs_past_the_plan_raises_growth_after_the_window(rig):
    steps = [(PLAN + CONTEXT + k * 100 * MIB, 0) for k in range(16)]  # +100 MiB each 10 s
    reality, raised = run(rig, steps)
    row = reality.rows[0]
    assert row.device == "CUDA0" and row.planned_bytes == PLAN
    assert row.baseline_excess == CONTEXT
    assert row.history[-1] == PLAN + CONTEXT + 1500 * MIB
    # 513 MiB past at step 6; raised once it has held 60 s more
    assert ("plan_growth", 0) not in raised[10]
    assert ("plan_growth", 0) in raised[-1]
    assert all(kind != "plan_placement" for r in raised for kind, _ in r)


def test_memory_on_a_gpu_the_plan_gave_nothing_is_a_placement_mismatch(rig):
    steps = [(PLAN + CONTEXT, 256 * MIB)] * 3
    reality, raised = run(rig, steps)
    unplanned = next(r for r in reality.rows if r.gpu_index == 1)
    assert unplanned.planned_bytes is None and unplanned.held_bytes == 256 * MIB
    assert raised[0] == set()  # not yet held for the window
    assert raised[-1] == {("plan_placement", 1)}


def test_a_plans_host_and_rpc_shares_do_not_hide_a_misplacement(rig):
    """A launch's plan names the host (CPU) and RPC servers too: no GPU of this host, so
    they neither number as one nor make the plan unmapped."""
    plan = {"CUDA0": PLAN, "CPU": 100 * MIB, "CUDA_Host": MIB, "RPC0[127.0.0.1:50052]": PLAN}
    reality, raised = run(rig, [(PLAN + CONTEXT, 256 * MIB)] * 3, plan=plan)
    assert reality.mapped and [r.device for r in reality.rows] == ["CUDA0", None]
    assert raised[-1] == {("plan_placement", 1)}


def test_a_server_numbered_otherwise_raises_no_placement(rig):
    """A server started with CUDA_VISIBLE_DEVICES=1 calls GPU 1 its CUDA0: its plan's GPU
    holds nothing of it, so memory on the other is no evidence of a misplacement."""
    reality, raised = run(rig, [(0, PLAN + CONTEXT)] * 3)
    assert not reality.mapped
    assert all(r == set() for r in raised)


def test_a_rocm_servers_devices_are_its_gpus(rig):
    reality, raised = run(rig, [(PLAN + CONTEXT, 0)] * 3, plan={"ROCm0": PLAN})
    assert reality.rows[0].device == "ROCm0" and reality.mapped
    assert all(r == set() for r in raised)


def test_a_quiet_rig_raises_nothing(rig):
    steps = [(PLAN + CONTEXT + (k % 3) * MIB, 0) for k in range(20)]
    _, raised = run(rig, steps)
    assert all(r == set() for r in raised)


def test_the_plan_beside_what_is_held_in_a_line(rig):
    from lltui.core.monitor.plan_reality import plan_line

    reality, _ = run(rig, [(PLAN + CONTEXT, 256 * MIB)])
    assert plan_line(reality) == "held/planned: GPU0 2300/2000 MiB, GPU1 256/- MiB"


def test_the_launch_poll_folds_the_plan_and_the_verdicts_into_the_state(rig):
    """The launch's own poll: the plan per GPU from the load's buffers beside the process,
    and why it is slow from the samples of the GPUs it holds memory on."""
    from lltui.services.launch.compare import DeviceCheck, LaunchCheck
    from lltui.services.launch.polls import ServerPoll
    from lltui.services.launch.state import LaunchState
    from lltui.sources.llama.http import OK, EndpointResult
    from lltui.sources.llama.http import ServerPoll as Answer

    gpus, src, clock = rig
    gpus[0].compute_procs = [(ME, PLAN + CONTEXT)]
    gpus[0].util_gpu, gpus[0].util_mem = 95, 85
    samples = []

    def sample():
        clock.advance(10.0)
        samples.append(src.poll())
        return samples[-1]

    check = LaunchCheck((DeviceCheck("CUDA0", (("model", PLAN),), ()),), None, "-", 0, 0, 0)
    st = LaunchState(phase="ready", url=SERVER, pid=ME, check=check)
    poll = ServerPoll(SERVER, None, rig=sample)
    health = EndpointResult("/health", OK)
    try:
        for _ in range(3):
            st = poll.fold(st, Answer(SERVER, 0.0, 0.0, "ready", health, endpoints=(health,)))
    finally:
        poll.close()
    assert st.plan is not None and st.plan.rows[0].planned_bytes == PLAN
    assert "memory_bound" in [v.kind for v in st.verdicts]

"""Bottleneck verdicts from recorded counter sequences: a simulated two-GPU rig's samples,
changed where a cause is wanted, written as a real recording and read back through the
replay source; each verdict is reached from its sequence, and a quiet rig gets none."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from lltui.core.monitor.bottleneck import ServerSpeed, verdicts
from lltui.core.monitor.models import GpuSample, RigSample
from lltui.sources.gpu.replay import Recorder, ReplaySource
from lltui.sources.gpu.sim import SimSource, StepClock

TICKS = 12
SERVER = ServerSpeed(gpus=(0, 1), measured_decode_tps=40.0, predicted_decode_tps=42.0)
BASE = {  # a GPU decoding at ease: nothing stands out
    "util_gpu": 55.0,
    "util_mem": 35.0,
    "sm_clock_mhz": 1800,
    "throttle_reasons": (),
    "pcie_gen": 4,
    "pcie_width": 16,
    "pcie_rx_kbs": 200_000.0,
    "pcie_tx_kbs": 150_000.0,
    "pcie_bw_kbs": None,
}
Change = Callable[[int, int], dict[str, object]]  # (GPU index, tick) -> fields


def recorded(tmp_path: Path, change: Change, host_cpu: float = 20.0) -> list[RigSample]:
    """The sequence written as a recording and read back as the replay source gives it."""
    src = SimSource("2x3090-nvlink", seed=0, clock=StepClock(step=1.0))
    info = src.open()
    path = tmp_path / "seq.jsonl"
    with Recorder(path, wall=lambda: 1_767_225_600.0) as rec:
        rec.start(info)
        for tick in range(TICKS):
            s = src.poll()
            gpus = tuple(_gpu(g, tick, change) for g in s.gpus)
            rec.write(replace(s, gpus=gpus, host=replace(s.host, cpu_pct=host_cpu)))
    replay = ReplaySource(str(path), stepped=True)
    replay.open()
    try:
        return [replay.poll() for _ in range(TICKS)]
    finally:
        replay.close()


def _gpu(g: GpuSample, tick: int, change: Change) -> GpuSample:
    info = replace(g.info, max_sm_clock_mhz=1950)
    return replace(g, info=info, **(BASE | change(g.info.index, tick)))  # type: ignore[arg-type]


def kinds(samples: list[RigSample], server: ServerSpeed = SERVER) -> list[str]:
    return [v.kind for v in verdicts(samples, server)]


def test_a_quiet_rig_gets_no_verdict(tmp_path):
    idle = recorded(tmp_path, lambda i, t: {"util_gpu": 0.0, "util_mem": 0.0})
    assert kinds(idle) == []
    at_ease = recorded(tmp_path, lambda i, t: {})
    assert kinds(at_ease) == []


@pytest.mark.parametrize(
    ("kind", "change", "host_cpu", "server"),
    [
        (
            "throttled",
            lambda i, t: (
                {"throttle_reasons": ("hw thermal",), "sm_clock_mhz": 1200}
                if i == 1 and t % 4
                else {}
            ),
            20.0,
            SERVER,
        ),
        ("host_bound", lambda i, t: {"util_gpu": 25.0}, 95.0, SERVER),
        ("link_bound", lambda i, t: {"pcie_rx_kbs": 22_000_000.0}, 20.0, SERVER),
        ("memory_bound", lambda i, t: {"util_mem": 85.0, "util_gpu": 92.0}, 20.0, SERVER),
        ("compute_bound", lambda i, t: {"util_gpu": 97.0, "util_mem": 20.0}, 20.0, SERVER),
        (
            "slower_than_predicted",
            lambda i, t: {},
            20.0,
            replace(SERVER, measured_decode_tps=20.0),
        ),
    ],
)
def test_each_verdict_from_its_sequence(tmp_path, kind, change, host_cpu, server):
    samples = recorded(tmp_path, change, host_cpu)
    found = verdicts(samples, server)
    assert [v.kind for v in found] == [kind]
    assert found[0].evidence and found[0].suggestion


def test_one_odd_sample_decides_nothing(tmp_path):
    once = recorded(tmp_path, lambda i, t: {"util_mem": 99.0} if t == 3 else {})
    assert kinds(once) == []


def test_the_evidence_says_which_gpu_of_a_split_waits_on_which(tmp_path):
    uneven = recorded(
        tmp_path, lambda i, t: {"util_mem": 80.0, "util_gpu": 95.0 if i == 1 else 40.0}
    )
    (v,) = verdicts(uneven, SERVER)
    assert v.kind == "memory_bound"
    assert "GPU0 40% wait on GPU1 (95% busy)" in v.evidence

import itertools

import pytest

from lltui.core.monitor.models import SourceUnavailable
from lltui.core.units import MIB
from lltui.sources.gpu.sim import PROFILES, SimSource, StepClock, cuda_order, phase_at


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def run(profile: str, seed: int, ticks: int = 20, step: float = 0.5):
    clock = FakeClock()
    src = SimSource(profile, seed=seed, clock=clock, start=0.0)
    src.open()
    out = []
    for _ in range(ticks):
        out.append(src.poll())
        clock.now += step
    return out


@pytest.mark.parametrize("profile", list(PROFILES))
def test_same_seed_same_samples(profile):
    assert run(profile, 7) == run(profile, 7)


def test_different_seed_different_samples():
    a = run("kaggle-2xt4", 1)
    b = run("kaggle-2xt4", 2)
    assert [g.power_w for s in a for g in s.gpus] != [g.power_w for s in b for g in s.gpus]


def test_sequence_numbers_and_monotonic_time():
    samples = run("4xl4", 0, ticks=5)
    assert [s.seq for s in samples] == [1, 2, 3, 4, 5]
    assert all(b.t > a.t for a, b in itertools.pairwise(samples))


def test_published_specs():
    specs = {
        "kaggle-2xt4": ("Tesla T4", 15360, 70.0),
        "4xl4": ("NVIDIA L4", 23034, 72.0),
        "2x3090-nvlink": ("NVIDIA GeForce RTX 3090", 24576, 350.0),
        "8xh100-sxm": ("NVIDIA H100 80GB HBM3", 81559, 700.0),
    }
    for profile, (name, mib, watts) in specs.items():
        info = SimSource(profile).open()
        assert {g.name for g in info.gpus} == {name}
        assert {g.memory_total for g in info.gpus} == {mib * 1024 * 1024}
        assert {g.power_limit_default_w for g in info.gpus} == {watts}
        assert info.simulated and info.simulated_reason


def test_timeline_loads_then_serves_and_vram_grows():
    samples = run("2x3090-nvlink", 0, ticks=40, step=0.5)  # 0..20 s of the timeline
    phases = [phase_at(0.5 * k)[0] for k in range(40)]
    assert phases[0] == "idle" and "loading" in phases and "decode" in phases
    used = [s.gpus[0].memory_used for s in samples]
    assert used[0] == 3 * 1024 * 1024  # only the display before llama-server starts
    assert max(used) > 10 * 1024**3
    first_loaded = phases.index("prefill")
    assert used[first_loaded] >= max(used[:first_loaded])
    assert samples[0].gpus[0].processes[0].name == "Xorg"
    assert any(p.name == "llama-server" for p in samples[-1].gpus[1].processes)


def test_energy_counter_integrates_power():
    samples = run("kaggle-2xt4", 0, ticks=10, step=1.0)
    for i in range(2):
        e = [s.gpus[i].energy_mj for s in samples]
        assert all(b >= a for a, b in itertools.pairwise(e))
        # over 9 s, energy grows by about the mean power times 9 s (mJ)
        mean_w = sum(s.gpus[i].power_w for s in samples[1:]) / 9
        assert e[-1] - e[0] == pytest.approx(mean_w * 9 * 1000, rel=0.05)


def test_last_gpu_holds_the_output_head_and_is_fullest():
    s = run("8xh100-sxm", 0, ticks=1)[0]
    src = SimSource("8xh100-sxm", start=30.0)
    src.open()
    s = src.poll()
    used = [g.memory_used for g in s.gpus]
    assert used[-1] == max(used) and used[-1] > used[0]


def test_mixed_rig_cuda_order_differs_and_tensor_split_follows_cuda_order():
    profile = PROFILES["mixed-4090-3090"]
    assert cuda_order(profile) == (1, 0)  # the 4090 is CUDA device 0
    src = SimSource("mixed-4090-3090", start=30.0)
    info = src.open()
    assert [g.cuda_index for g in info.gpus] == [1, 0]
    s = src.poll()
    # -ts 3,2 gives CUDA0 (the 4090, NVML 1) the larger share
    assert s.gpus[1].memory_used > s.gpus[0].memory_used


def test_unknown_profile_is_unavailable_with_the_known_names():
    with pytest.raises(SourceUnavailable, match="kaggle-2xt4"):
        SimSource("nope")


@pytest.mark.parametrize("profile", list(PROFILES))
def test_topo_text_has_one_row_per_gpu_and_links_agree(profile):
    p = PROFILES[profile]
    text = p.topo_text
    if all(g.amd for g in p.gpus):  # an AMD rig prints amd-smi's tables: one row a GPU each
        link_types = text.split("LINK TYPE TABLE:")[1].splitlines()[2:]
        assert [row.split()[0] for row in link_types if row.strip()] == [
            b[4:].lower() for b in p.pci_bus_ids
        ]
        assert p.nccl_facts["library"] == "rccl"
        return
    rows = [line for line in text.splitlines() if line.startswith("GPU")]
    assert len(rows) == len(p.gpus)
    for (i, j), cell in p.links.items():
        assert rows[i].split("\t")[1 + j] == cell
        assert rows[j].split("\t")[1 + i] == cell
    assert p.nccl_facts["version"] == p.nccl_version


@pytest.mark.parametrize("profile", list(PROFILES))
def test_the_server_process_holds_the_gpus_memory_less_its_context(profile):
    sample = run(profile, 0, ticks=40)[-1]  # serving by then
    for g in sample.gpus:
        server = [p for p in g.processes if p.name == "llama-server"]
        assert len(server) == 1 and server[0].gpu_index == g.index
        assert g.memory_used is not None and server[0].used_memory is not None
        # the CUDA context (300 MiB), plus 3 MiB of display memory on a desktop card, plus
        # what the other processes on the GPU hold
        others = sum(p.used_memory or 0 for p in g.processes if p.name != "llama-server")
        held = g.memory_used - server[0].used_memory - others
        assert held in (300 * MIB, 303 * MIB)


def test_a_rig_on_the_real_clock_reads_the_real_time_of_day():
    """The sim's fixed date is for tests and recordings: live, an alert's "since" and a
    process's start are today's, not 2026-01-01 00:00."""
    import time

    before = time.time()
    live = SimSource("kaggle-2xt4").poll()
    assert before - 1 <= live.wall <= time.time() + 1
    started = [p.started for g in live.gpus for p in g.processes if p.started is not None]
    assert started and all(before - 7 * 86400 < s <= live.wall for s in started)
    tested = SimSource("kaggle-2xt4", clock=StepClock(step=1.0)).poll()
    assert abs(tested.wall - 1_767_225_600.0) < 10  # a fixed date where the clock is injected


@pytest.mark.parametrize("profile", list(PROFILES))
def test_used_free_and_reserved_add_up_to_the_total(profile):
    """16xv100-dgx2's GPU15 said 32723 of 32768 MiB used and 390 MiB reserved (more than the
    card has), so 0 MiB free beside 45 MiB left: NVML's used leaves the reserved out."""
    for sample in run(profile, 0, ticks=60)[::10]:
        for g in sample.gpus:
            parts = (g.memory_used, g.memory_free, g.memory_reserved)
            assert sum(p or 0 for p in parts) == g.memory_total, (g.index, parts)

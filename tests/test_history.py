"""The app model's history: windows by time, trimmed by age, energy since start."""

from lltui.core.monitor.balance import imbalances
from lltui.core.monitor.history import RigHistory
from lltui.sources.gpu.sim import SimSource, StepClock


def samples(n: int, step: float = 1.0, profile: str = "kaggle-2xt4"):
    src = SimSource(profile, seed=0, clock=StepClock(0.0, step=step), start=20.0)
    src.open()
    return [src.poll() for _ in range(n)]


def test_window_takes_only_the_last_seconds():
    h = RigHistory(maxlen=1000)
    ss = samples(100)
    for s in ss:
        h.append(s)
    uuid = ss[0].gpus[0].info.uuid
    everything = h.series(uuid, "power_w")
    last10 = h.series(uuid, "power_w", 9.5)
    assert len(everything.values) == 100 and len(last10.values) == 10
    assert last10.values == tuple(s.gpus[0].power_w for s in ss[-10:])
    assert last10.lo == min(last10.values) and last10.hi == max(last10.values)


def test_old_samples_fall_out_by_age_whatever_the_interval():
    h = RigHistory(maxlen=10_000, max_age_s=30.0)
    ss = samples(200, step=0.25)  # 50 s of samples at 4 a second
    for s in ss:
        h.append(s)
    uuid = ss[0].gpus[0].info.uuid
    kept = h.series(uuid, "util_gpu")
    assert 119 <= len(kept.values) <= 121  # 30 s at 0.25 s
    assert h.seconds() > 40  # since the first sample, not the oldest kept


def test_energy_since_start_is_the_counter_difference():
    h = RigHistory()
    ss = samples(10)
    for s in ss:
        h.append(s)
    expected = sum(b.energy_mj - a.energy_mj for a, b in zip(ss[0].gpus, ss[-1].gpus, strict=True))
    assert h.energy_since_start_mj() == expected


def test_balance_names_the_fullest_and_emptiest_gpu():
    s = samples(1, profile="mixed-4090-3090")[0]
    (im,) = imbalances(s)
    assert im.name == "llama-server" and set(im.gpu_indexes) == {0, 1}
    vram = dict(zip(im.gpu_indexes, im.vram_pct, strict=True))
    assert im.fullest == max(vram, key=vram.get) and im.emptiest == min(vram, key=vram.get)
    assert im.vram_spread == max(vram.values()) - min(vram.values())

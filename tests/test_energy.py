from dataclasses import replace

from lltui.core.monitor.energy import EnergyPoint, JoulesPerToken, rig_energy_mj
from lltui.sources.gpu.sim import SimSource


def test_joules_per_token_over_the_window():
    jpt = JoulesPerToken(window_s=60)
    assert jpt.value() is None
    jpt.add(EnergyPoint(0.0, 1_000_000, 0))
    jpt.add(EnergyPoint(1.0, 1_300_000, 100))  # 300 J for 100 tokens
    assert jpt.value() == 3.0
    jpt.add(EnergyPoint(2.0, 1_400_000, 100))  # idle energy is charged to the tokens
    assert jpt.value() == 4.0


def test_window_drops_old_points_and_resets_on_counter_going_back():
    jpt = JoulesPerToken(window_s=10)
    jpt.add(EnergyPoint(0.0, 0, 0))
    jpt.add(EnergyPoint(5.0, 50_000, 10))
    jpt.add(EnergyPoint(20.0, 250_000, 60))  # the first two fall out of the window
    assert jpt.value() is None
    jpt.add(EnergyPoint(21.0, 260_000, 70))
    assert jpt.value() == 1.0
    jpt.add(EnergyPoint(22.0, 5, 0))  # new server: counters restart
    assert jpt.value() is None


def test_rig_energy_sums_the_chosen_gpus_and_refuses_partial_sums():
    src = SimSource("4xl4")
    src.open()
    s = src.poll()
    all_gpus = rig_energy_mj(s)
    two = rig_energy_mj(s, {0, 1})
    assert all_gpus == sum(g.energy_mj for g in s.gpus)
    assert two == s.gpus[0].energy_mj + s.gpus[1].energy_mj
    gpus = list(s.gpus)
    gpus[2] = replace(gpus[2], energy_mj=None)
    assert rig_energy_mj(replace(s, gpus=tuple(gpus))) is None
    assert rig_energy_mj(replace(s, gpus=tuple(gpus)), {0, 1}) == two

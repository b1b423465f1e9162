"""The app model's history: windows by time, trimmed by age, energy since start."""

from dataclasses import replace

import pytest

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


def test_energy_since_start_keeps_what_was_used_when_a_counter_goes_back():
    """A replay's loop (or a driver reload) takes the counters back: the energy used
    before is kept, and what is used after is added to it, never lost."""
    h = RigHistory()
    ss = samples(5)
    for s in ss + ss:  # the same five samples again, as a looped replay plays them
        h.append(s)
    once = sum(b.energy_mj - a.energy_mj for a, b in zip(ss[0].gpus, ss[-1].gpus, strict=True))
    assert once > 0 and h.energy_since_start_mj() == 2 * once


def test_energy_since_start_keeps_what_gpus_that_left_the_sample_used():
    """A GPU lost (no reading), or a joined recording's other rig (other GPUs): the energy
    the GPUs gone used is kept; it fell to 0 when the second rig's first sample came."""
    h = RigHistory()
    two, four = samples(5), samples(3, profile="4xl4")
    used = [
        sum(b.energy_mj - a.energy_mj for a, b in zip(ss[0].gpus, ss[-1].gpus, strict=True))
        for ss in (two, four)
    ]
    for s in two:
        h.append(s)
    lost = replace(two[-1], gpus=(replace(two[-1].gpus[0], lost=True, energy_mj=None),))
    h.append(lost)
    assert used[0] > 0 and h.energy_since_start_mj() == used[0]
    for s in four:
        h.append(s)
    assert h.energy_since_start_mj() == used[0] + used[1]


def test_balance_names_the_fullest_and_emptiest_gpu():
    s = samples(1, profile="mixed-4090-3090")[0]
    (im,) = imbalances(s)
    assert im.name == "llama-server" and set(im.gpu_indexes) == {0, 1}
    own = dict(zip(im.gpu_indexes, im.own_bytes, strict=True))
    assert im.fullest == max(own, key=own.get) and im.emptiest == min(own, key=own.get)
    mean = sum(own.values()) / len(own)
    assert im.vram_spread == pytest.approx((max(own.values()) - min(own.values())) / 2 / mean * 100)


def _shared_box():
    """8 GPUs: a llama-server with 38.6 GiB on GPU0-6 and 43.1 on GPU7, and two other users'
    jobs that fill GPU0 and GPU1 besides it (whole-GPU fill is then very uneven)."""
    from dataclasses import replace

    from lltui.core.monitor.models import GpuProcess

    s = samples(1, profile="8xh100-sxm")[0]
    gib = 1 << 30
    gpus = []
    for pos, g in enumerate(s.gpus):
        own = int((43.1 if pos == 7 else 38.6) * gib)
        procs = [GpuProcess(4242, g.info.index, own, name="llama-server")]
        extra = {0: (7001, "train.py", 36 * gib), 1: (7002, "jupyter", 20 * gib)}.get(pos)
        if extra:
            procs.append(GpuProcess(extra[0], g.info.index, extra[2], name=extra[1]))
        used = sum(p.used_memory or 0 for p in procs)
        gpus.append(replace(g, processes=tuple(procs), memory_used=used))
    return replace(s, gpus=tuple(gpus))


def test_balance_is_the_servers_own_memory_and_names_the_others():
    (im, *rest) = imbalances(_shared_box())
    assert im.name == "llama-server" and len(im.gpu_indexes) == 8
    assert im.vram_spread == pytest.approx((43.1 - 38.6) / 2 / ((38.6 * 7 + 43.1) / 8) * 100)
    assert im.fullest == 7 and im.vram_spread < 6  # about ±6%, not the ±30% of whole GPUs
    whole = max(im.vram_pct) - min(im.vram_pct)
    assert whole > 40  # what the old line reported: other people's memory
    assert [n.name for n in im.neighbours] == ["train.py", "jupyter"]
    assert im.neighbours[0].gpu_indexes == (0,) and im.neighbours[0].used_bytes == 36 << 30
    assert rest == []  # the other jobs hold one GPU each: no split of theirs


def test_the_monitor_line_shows_the_servers_balance_and_who_else_is_there():
    from lltui.app.rig_model import RigModel
    from lltui.app.screens.monitor import render_rig_line
    from lltui.app.widgets.gpu_card import CardStyles

    sample = _shared_box()
    model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
    model.apply(sample)
    from rich.style import Style

    styles = CardStyles("t", *[Style()] * 13)
    narrow = render_rig_line(sample, model, styles, 80).plain.splitlines()[-1]
    assert narrow.startswith("balance llama-server") and "VRAM ±6%" in narrow
    assert narrow.endswith("+2 others") and len(narrow) <= 78
    wide = render_rig_line(sample, model, styles, 160).plain.splitlines()[-1]
    assert "beside: train.py 36.0 GiB on GPU 0 +1 more" in wide


def test_the_monitor_line_says_dash_for_what_a_source_does_not_report():
    """all-smi sends no free memory and no power limit: "-" or worked out, never 0."""
    from dataclasses import replace

    from rich.style import Style

    from lltui.app.rig_model import RigModel
    from lltui.app.screens.monitor import render_rig_line
    from lltui.app.widgets.gpu_card import CardStyles

    sample = _shared_box()
    gpus = tuple(replace(g, memory_free=None, power_limit_w=None) for g in sample.gpus)
    sample = replace(sample, gpus=gpus)
    model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
    model.apply(sample)
    first = render_rig_line(sample, model, CardStyles("t", *[Style()] * 13)).plain.splitlines()[0]
    used = sum(g.memory_used or 0 for g in gpus) / 2**30
    total = sum(g.info.memory_total or 0 for g in gpus) / 2**30
    assert f"({total - used:.1f} free)" in first and "/- W" in first, first


def test_float_ring_behaves_as_a_bounded_deque_of_floats():
    """Appends past the bound drop the oldest, pops from the front, compactions between:
    the ring holds what a deque(maxlen) would, None as a missing reading."""
    import math
    import random
    from collections import deque

    from lltui.core.monitor.history import FloatRing

    rng = random.Random(3)
    ring, model = FloatRing(100), deque(maxlen=100)
    for step in range(5000):
        if model and rng.random() < 0.45:
            ring.popleft()
            model.popleft()
        else:
            value = None if step % 17 == 0 else float(step)
            ring.append(value)
            model.append(value)
        assert len(ring) == len(model) and bool(ring) == bool(model)
        if model:
            got = list(ring.tail(len(ring)))
            assert [g if not math.isnan(g) else None for g in got] == list(model)
            assert [g if not math.isnan(g) else None for g in ring.tail(3)] == list(model)[-3:]
    times = FloatRing(50)
    for t in range(80):
        times.append(float(t))
    assert times.count_since(70.0) == 10 and times.count_since(-1.0) == 50
    assert times.first() == 30.0 and times.last() == 79.0


def test_an_hour_of_history_holds_each_reading_in_a_few_bytes():
    import tracemalloc

    source = SimSource("8xh100-sxm", seed=0, clock=StepClock(), start=0.0)
    source.open()
    samples = [source.poll() for _ in range(10)]
    history = RigHistory(14400, max_age_s=3600)
    tracemalloc.start()
    try:
        for i in range(3600):
            history.append(replace(samples[i % 10], t=float(i)))
        used, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    readings = 3600 * 8 * 6  # times and five metrics per GPU
    assert used / readings < 16  # 8 bytes a float, and the array's slack; a deque took ~32


def test_a_replay_that_ended_adds_its_last_sample_once_not_each_poll():
    """After the end a replay keeps answering its last sample (newer seq and time): the
    history, its graphs and the energy over time stop where the recording does."""
    from dataclasses import replace

    from lltui.app.rig_model import RigModel

    sample = _shared_box()
    model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
    model.apply(sample)
    for k in range(1, 4):
        model.apply(replace(sample, seq=sample.seq + k, t=sample.t + k, ended=True))
    assert model.history.seconds() == pytest.approx(1.0)  # the end once, not three polls
    assert model.latest is not None and model.latest.ended


def test_a_process_detail_shows_no_secret_and_only_the_time_it_was_watched():
    from dataclasses import replace

    from lltui.app.rig_model import RigModel
    from lltui.app.screens.process_detail import render_process

    box = _shared_box()
    secret = "sk-live-0123456789abcdefghij"
    gpus = tuple(
        replace(
            g,
            processes=tuple(
                replace(p, command=f"llama-server -m m.gguf --api-key {secret}")
                if p.pid == 4242
                else p
                for p in g.processes
            ),
        )
        for g in box.gpus
    )
    model = RigModel(info=box.info, interval=1.0, history=RigHistory())
    for k in range(5):  # 4 s of history, the process in all of it
        model.apply(replace(box, gpus=gpus, seq=box.seq + k, t=box.t + k))
    text = render_process(4242, model, 100, 60.0)
    assert secret not in text and "--api-key ***" in text
    assert "over the last 4s" in text and "over 1m" not in text


def test_balance_counts_no_unknown_utilisation_as_idle():
    """nvidia-smi's [N/A] utilisation on one GPU of the split was read as 0%: "util ±97%
    busy 0", a skew made up from a GPU that does not say."""
    from dataclasses import replace

    from rich.style import Style

    from lltui.app.rig_model import RigModel
    from lltui.app.screens.launch import render_balance
    from lltui.app.screens.monitor import render_rig_line
    from lltui.app.widgets.gpu_card import CardStyles

    sample = _shared_box()
    gpus = tuple(replace(g, util_gpu=None if g.index == 1 else 97.0) for g in sample.gpus)
    sample = replace(sample, gpus=gpus)
    (im, *_) = imbalances(sample)
    assert im.util_spread is None and im.busiest is None and im.util_pct[1] is None
    assert im.level == "uneven"  # judged by the memory it knows (±6%), not a made-up ±97%
    model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
    model.apply(sample)
    styles = CardStyles("t", *[Style()] * 13)
    line = render_rig_line(sample, model, styles, 160).plain.splitlines()[-1]
    assert "util ±-%" in line and "busy" not in line
    assert "GPU1  its  38.6 GiB  VRAM  " in render_balance(model, 4242)
    assert "util    -  power" in render_balance(model, 4242)

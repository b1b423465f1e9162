"""Recordings: the JSONL format round trip, the Recorder, and replaying through ReplaySource."""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from support.recording import decode_lines, read_recording

from lltui.core.monitor.models import (
    GpuProcess,
    GpuSample,
    GpuSource,
    GpuStatic,
    HostSample,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.monitor.record import (
    RECORDING_VERSION,
    Encoder,
    RecordingError,
    sample_from_dict,
    sample_to_dict,
)
from lltui.sources.gpu.kinds import make_source, parse_source_spec
from lltui.sources.gpu.replay import (
    END_OF_RECORDING,
    Recorder,
    RecordingSource,
    ReplaySource,
    record,
)
from lltui.sources.gpu.sim import PROFILES, SimSource


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sim_samples(profile: str, n: int, step: float = 1.0) -> tuple[RigInfo, list[RigSample]]:
    clock = FakeClock()
    src = SimSource(profile, seed=3, clock=clock, start=0.0)
    info = src.open()
    out = []
    for _ in range(n):
        clock.now += step
        out.append(src.poll())
    return info, out


def write(path: Path, info: RigInfo, samples: list[RigSample]) -> None:
    with Recorder(path, wall=lambda: 1_767_225_600.0) as rec:
        rec.start(info)
        for s in samples:
            rec.write(s)


def odd_samples() -> tuple[RigInfo, list[RigSample]]:
    """Samples with what a recording must keep exactly: Nones, empty and None reason lists,
    ints in float fields, processes, a lost GPU, errors and a GPU not in the header."""
    a = GpuStatic(0, "GPU-a", "Tesla T4", "00000000:00:04.0", 15 * 2**30, compute_capability=(7, 5))
    b = GpuStatic(1, "GPU-b", "Tesla T4", "00000000:00:05.0", 15 * 2**30, persistence_mode=False)
    stray = GpuStatic(7, "GPU-z", "NVIDIA L4", "00000000:00:09.0", 22 * 2**30)
    info = RigInfo(
        source="smi:box",
        driver_version="550.54.15",
        cuda_version="12.4",
        nccl_version="2.21.5",
        hostname="box",
        gpus=(a, b),
        hints=("this nvidia-smi does not report: memory.reserved",),
    )
    procs = (
        GpuProcess(4242, 0, 9 * 2**30, "C", "llama-server", "me", "llama-server -m x.gguf", 2**30),
        GpuProcess(1873, 0, None, "G", None, None, None, None, 0.0),
    )
    s1 = RigSample(
        seq=1,
        t=10.0,
        wall=1_767_225_600.25,
        info=info,
        gpus=(
            GpuSample(
                a, memory_used=3, util_gpu=93, power_w=69.5, throttle_reasons=(), processes=procs
            ),
            GpuSample(b, throttle_reasons=None, temp_c=40.0, fan_pct=None),
        ),
        host=HostSample(cpu_pct=12.5, mem_total=2**34, hostname="box"),
    )
    s2 = RigSample(
        seq=2,
        t=11.0,
        wall=1_767_225_601.25,
        info=info,
        gpus=(
            GpuSample(a, util_gpu=0.0, throttle_reasons=("idle",)),
            GpuSample(b, lost=True, error="missing from nvidia-smi output"),
            GpuSample(stray, memory_used=0),
        ),
        error="process list: Unknown Error",
    )
    return info, [s1, s2]


# -- the format ---------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", list(PROFILES))
def test_round_trip_of_simulated_rigs(tmp_path: Path, profile: str):
    info, samples = sim_samples(profile, 12)
    path = tmp_path / "rec.jsonl"
    write(path, info, samples)
    rec = read_recording(path)
    assert rec.header.info == info
    assert rec.samples == tuple(samples)
    assert rec.hints == ()


def test_round_trip_keeps_nones_tuples_ints_lost_gpus_and_errors(tmp_path: Path):
    info, samples = odd_samples()
    path = tmp_path / "rec.jsonl"
    write(path, info, samples)
    loaded = read_recording(path).samples
    assert loaded == tuple(samples)
    s1, s2 = loaded
    assert s1.gpus[0].throttle_reasons == () and s1.gpus[1].throttle_reasons is None
    assert type(s1.gpus[0].util_gpu) is int and type(s2.gpus[0].util_gpu) is float
    assert s1.gpus[0].info.compute_capability == (7, 5)
    assert isinstance(s1.gpus[0].processes, tuple) and s1.gpus[0].processes[1].used_memory is None
    assert s2.gpus[1].lost and s2.gpus[2].info.uuid == "GPU-z"


def test_an_info_change_mid_recording_is_kept(tmp_path: Path):
    info, samples = odd_samples()
    changed = replace(info, driver_version="560.28.03", hints=())
    later = replace(samples[1], seq=3, info=changed)
    path = tmp_path / "rec.jsonl"
    write(path, info, [*samples, later])
    loaded = read_recording(path).samples
    assert loaded[-1] == later and loaded[0].info == info


def test_header_and_compact_lines(tmp_path: Path):
    info, samples = sim_samples("2x3090-nvlink", 3)
    path = tmp_path / "rec.jsonl"
    write(path, info, samples)
    header, *lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert header["lltui_recording"] == RECORDING_VERSION
    assert header["source"] == info.source and header["gpu_count"] == len(info.gpus)
    assert header["created"] == "2026-01-01T00:00:00Z"
    assert isinstance(header["lltui_version"], str)
    got = header["info"]
    assert got["driver_version"] == info.driver_version and got["cuda_version"] == info.cuda_version
    assert got["nccl_version"] == info.nccl_version and got["hostname"] == info.hostname
    assert [g["name"] for g in got["gpus"]] == [g.name for g in info.gpus]
    assert [g["memory_total"] for g in got["gpus"]] == [g.memory_total for g in info.gpus]
    text = path.read_text().splitlines()
    for line, sample in zip(lines, samples, strict=True):
        # GPUs refer to the header's list; their static facts are not repeated
        assert [g["gpu"] for g in line["gpus"]] == [g.info.index for g in sample.gpus]
        assert not any("uuid" in g for g in line["gpus"])
    assert all(info.gpus[0].uuid not in t for t in text[1:])


def test_sample_dicts_reject_wrong_types_with_a_path():
    info, samples = odd_samples()
    good = sample_to_dict(samples[0], info)
    bad = json.loads(json.dumps(good))
    bad["gpus"][0]["util_gpu"] = "hot"
    with pytest.raises(RecordingError) as exc:
        sample_from_dict(bad, info, 7)
    assert exc.value.line == 7 and "gpus[0].util_gpu" in str(exc.value)
    bad = json.loads(json.dumps(good))
    bad["gpus"][1]["gpu"] = 5
    with pytest.raises(RecordingError, match="not one of the 2 GPUs"):
        sample_from_dict(bad, info)
    bad = json.loads(json.dumps(good))
    del bad["seq"]
    with pytest.raises(RecordingError, match="seq is missing"):
        sample_from_dict(bad, info)
    bad = json.loads(json.dumps(good))
    bad["gpus"][0]["info"] = "GPU-a"  # a key the format does not use is ignored
    bad["future_field"] = 1
    assert sample_from_dict(bad, info) == samples[0]


# -- the recorder ----------------------------------------------------------------------------------


def test_recorder_flushes_every_line(tmp_path: Path):
    info, samples = sim_samples("kaggle-2xt4", 3)
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path)
    rec.start(info)
    for k, s in enumerate(samples, start=1):
        rec.write(s)
        # read while the recorder is still open: everything written so far is there
        assert read_recording(path).samples == tuple(samples[:k])
    rec.close()
    rec.close()
    assert rec.closed


def test_recorder_header_from_the_first_sample_and_writes_after_close(tmp_path: Path):
    info, samples = sim_samples("colab-t4", 2)
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path)
    rec.write(samples[0])  # before start: the header comes from the sample's info
    rec.start(info)  # already started: nothing more
    rec.close()
    rec.write(samples[1])  # dropped, not raised: the poller may still be delivering
    loaded = read_recording(path)
    assert loaded.header.info == info and loaded.samples == (samples[0],)
    with pytest.raises(ValueError):
        rec.start(info)


def test_recorder_from_several_threads_keeps_lines_whole(tmp_path: Path):
    info, samples = sim_samples("4xl4", 40)
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path)
    rec.start(info)
    threads = [
        threading.Thread(target=lambda part=samples[i::4]: [rec.write(s) for s in part])
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    loaded = read_recording(path).samples
    assert sorted(loaded, key=lambda s: s.seq) == samples


def test_recorder_on_a_bad_path_fails_at_once(tmp_path: Path):
    with pytest.raises(OSError):
        Recorder(tmp_path / "no-such-dir" / "rec.jsonl")


def test_recording_source_tees_any_source(tmp_path: Path):
    path = tmp_path / "rec.jsonl"
    clock = FakeClock()
    sim = SimSource("mixed-4090-3090", seed=1, clock=clock, start=0.0)
    tee = RecordingSource(sim, Recorder(path))
    assert isinstance(tee, GpuSource)
    info = tee.open()
    polled = []
    for _ in range(4):
        clock.now += 0.5
        polled.append(tee.poll())
    tee.close()
    loaded = read_recording(path)
    assert loaded.header.info == info and loaded.samples == tuple(polled)


def test_record_helper_polls_and_closes(tmp_path: Path):
    path = tmp_path / "rec.jsonl"
    clock = FakeClock()
    sim = SimSource("colab-t4", clock=clock, start=0.0)
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock.now += seconds

    assert record(sim, path, 3, sleep=sleep, interval=2.0) == 3
    loaded = read_recording(path).samples
    assert [s.seq for s in loaded] == [1, 2, 3] and pauses == [2.0, 2.0]
    assert [s.t for s in loaded] == [clock.now - 4.0, clock.now - 2.0, clock.now]


# -- replay ----------------------------------------------------------------------------------------


@pytest.fixture
def recording(tmp_path: Path) -> tuple[Path, RigInfo, list[RigSample]]:
    info, samples = sim_samples("kaggle-2xt4", 5, step=2.0)
    path = tmp_path / "rec.jsonl"
    write(path, info, samples)
    return path, info, samples


def same_readings(played: RigSample, recorded: RigSample) -> bool:
    """Replay renumbers seq and t and names itself as the source; the rest is as recorded."""
    return (played.gpus, played.wall, played.host, played.error) == (
        recorded.gpus,
        recorded.wall,
        recorded.host,
        recorded.error,
    )


def test_replay_implements_the_protocol_and_names_itself(recording):
    path, info, _ = recording
    src = ReplaySource(path, stepped=True)
    assert isinstance(src, GpuSource)
    opened = src.open()
    assert opened.source == f"replay:{path}"
    assert opened.gpus == info.gpus and opened.driver_version == info.driver_version
    assert any(info.source in h for h in opened.hints)


def test_stepped_replay_then_the_end(recording):
    path, _, samples = recording
    src = ReplaySource(path, stepped=True, clock=FakeClock())
    src.open()
    played = [src.poll() for _ in range(len(samples))]
    assert all(same_readings(p, r) for p, r in zip(played, samples, strict=True))
    assert all(p.error is None for p in played)
    seqs = [p.seq for p in played]
    assert seqs == sorted(set(seqs))
    # recorded spacing is kept on the replay's timeline
    assert [b.t - a.t for a, b in itertools.pairwise(played)] == [
        b.t - a.t for a, b in itertools.pairwise(samples)
    ]
    after = [src.poll() for _ in range(3)]
    for a in after:
        assert a.error == END_OF_RECORDING and a.gpus == played[-1].gpus
        assert a.ended
    assert not any(p.ended for p in played)
    assert [a.seq for a in after] == sorted({a.seq for a in after})
    assert after[0].seq > played[-1].seq and after[0].t >= played[-1].t
    src.close()


def test_recorded_speed_follows_the_clock(recording):
    path, _, samples = recording  # recorded every 2 s
    clock = FakeClock()
    src = ReplaySource(path, clock=clock)
    src.open()
    first = src.poll()
    assert same_readings(first, samples[0])
    assert src.poll().seq == first.seq  # nothing new is due: the same sample again
    clock.now += 1.9
    assert src.poll().seq == first.seq
    clock.now += 0.2  # 2.1 s in: the second sample's offset has elapsed
    assert same_readings(src.poll(), samples[1])
    clock.now += 4.0  # 6.1 s in
    assert same_readings(src.poll(), samples[3])
    clock.now += 10.0
    end = src.poll()
    assert end.error == END_OF_RECORDING and end.gpus == src.poll().gpus
    assert same_readings(replace(end, error=None), samples[-1])


def test_faster_speed(recording):
    path, _, samples = recording
    clock = FakeClock()
    src = ReplaySource(path, clock=clock, speed=4.0)
    src.open()
    clock.now += 2.1  # 8.4 recorded seconds
    assert same_readings(src.poll(), samples[4])


def test_poll_all_plays_every_sample_due_since_the_last_poll(recording):
    """A replay faster than the polls: poll passes over samples, poll_all returns each
    in turn (on into the next loop), the last one what poll would have returned."""
    path, _, samples = recording  # five, recorded every 2 s: a loop is 10 s
    clock = FakeClock()
    src = ReplaySource(path, clock=clock, speed=10.0, loop=True)
    src.open()
    assert [p.seq for p in src.poll_all()] == [1]
    clock.now += 0.65  # 6.5 recorded seconds
    assert [p.seq for p in src.poll_all()] == [2, 3, 4]
    assert src.poll_all() == (src.poll(),)  # nothing new: the same sample again
    clock.now += 1.0  # 16.5 s: the next loop's fourth
    played = src.poll_all()
    assert [p.seq for p in played] == [5, 6, 7, 8, 9]
    assert same_readings(played[1], replace(samples[0], wall=samples[0].wall + 10.0))
    once = ReplaySource(path, clock=clock, speed=10.0)
    once.open()
    clock.now += 5.0
    *due, end = once.poll_all()
    assert [same_readings(p, s) for p, s in zip(due, samples, strict=True)] == [True] * 5
    assert end.ended and not any(p.ended for p in due)


def test_poll_all_catches_up_a_bounded_way_and_says_what_it_could_not_read(recording, monkeypatch):
    """A looped replay faster than its samples can be checked fell further behind each poll,
    holding every sample due (10,000 then 130,000 a poll, memory without bound): poll_all
    plays at most CATCH_UP and says how many it passed over. A sample it cannot read is
    said (a timed watch had passed over a corrupt line without a word)."""
    from lltui.sources.gpu import replay

    monkeypatch.setattr(replay, "CATCH_UP", 3)
    path = recording[0]  # five samples, recorded every 2 s: a loop is 10 s
    clock = FakeClock()
    src = ReplaySource(path, clock=clock, speed=10.0, loop=True)
    src.open()
    src.poll_all()
    clock.now += 10.0  # ten loops on: 50 samples due
    played = src.poll_all()
    assert len(played) == 4 and "46 samples passed over" in (played[0].error or "")
    assert [p.seq for p in played] == sorted({p.seq for p in played})  # none played twice
    assert not any(p.error for p in played[1:])
    lines = path.read_text().splitlines(keepends=True)
    lines[3] = lines[3].replace(',"temp_c"', ',XX"temp_c"', 1)  # the third sample, corrupt
    path.write_text("".join(lines))
    monkeypatch.setattr(replay, "CATCH_UP", 4096)
    once = ReplaySource(path, clock=clock, speed=10.0)
    once.open()
    clock.now += 5.0
    *due, end = once.poll_all()  # the corrupt one said on the next, not played again
    assert [bool(p.error) for p in due] == [False, False, True, False]
    assert ":4:" in (due[2].error or "") and due[2].seq == 4 and end.ended


def test_loop_starts_over_with_increasing_seq_and_time(recording):
    path, _, samples = recording
    src = ReplaySource(path, stepped=True, loop=True)
    src.open()
    played = [src.poll() for _ in range(2 * len(samples) + 1)]
    assert all(p.error is None for p in played)
    period = 10.0  # 8 s of samples and one 2 s gap
    assert same_readings(played[len(samples)], replace(samples[0], wall=samples[0].wall + period))
    assert [p.seq for p in played] == sorted({p.seq for p in played})
    assert all(b.t > a.t for a, b in itertools.pairwise(played))
    assert all(b.wall > a.wall for a, b in itertools.pairwise(played))  # alerts' times too
    clock = FakeClock()
    timed = ReplaySource(path, clock=clock, loop=True)
    timed.open()
    clock.now += 10.0 + 0.1  # one period (8 s of samples + one 2 s gap) and a bit
    again = timed.poll()
    assert same_readings(again, replace(samples[0], wall=samples[0].wall + period))
    assert again.seq == len(samples) + 1


def test_a_loop_goes_on_past_a_bad_sample(recording):
    """A bad value in the last sample is said each time it is played; the loop goes on."""
    path, _, samples = recording
    lines = path.read_text().splitlines(keepends=True)
    obj = json.loads(lines[-1])
    obj["gpus"][0]["power_w"] = "a lot"
    lines[-1] = json.dumps(obj) + "\n"
    path.write_text("".join(lines))
    src = ReplaySource(path, stepped=True, loop=True)
    src.open()
    played, failed = [], 0
    for _ in range(3 * len(samples)):
        try:
            played.append(src.poll())
        except SourceUnavailable:
            failed += 1
    assert failed == 3 and len(played) == 3 * (len(samples) - 1)
    assert all(b.wall > a.wall for a, b in itertools.pairwise(played))


def test_registry_builds_a_replay_source(recording):
    path = recording[0]
    src = make_source(parse_source_spec(f"replay:{path}"))
    assert isinstance(src, ReplaySource)
    assert src.open().source == f"replay:{path}"


def test_truncated_last_line_is_skipped_with_a_hint(recording):
    path, _, samples = recording
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])  # cut mid-write
    loaded = read_recording(path)
    assert loaded.samples == tuple(samples[:-1])
    assert loaded.hints and "cut short" in loaded.hints[0]
    src = ReplaySource(path, stepped=True)
    info = src.open()
    assert any("cut short" in h for h in info.hints)
    played = [src.poll() for _ in range(len(samples) - 1)]
    assert same_readings(played[-1], samples[-2])
    assert src.poll().error == END_OF_RECORDING


def test_a_broken_line_in_the_middle_names_file_and_line(recording):
    path, _, _ = recording
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:30] + "\n"
    path.write_text("".join(lines))
    with pytest.raises(SourceUnavailable) as exc:
        ReplaySource(path).open()
    assert str(exc.value).startswith(f"{path}:3: ") and "\n" not in str(exc.value)
    with pytest.raises(RecordingError) as rexc:
        read_recording(path)
    assert rexc.value.line == 3


def test_a_line_cut_after_its_time_is_still_found_at_once(recording):
    """The index reads only a sample line's seq, t and wall: one cut short after them, with
    more after it, is still corruption found on opening, not a sample."""
    path, _, _ = recording
    lines = path.read_text().splitlines(keepends=True)
    lines[2] = lines[2][:120] + "\n"
    path.write_text("".join(lines))
    with pytest.raises(SourceUnavailable) as exc:
        ReplaySource(path).open()
    assert str(exc.value).startswith(f"{path}:3: not JSON")


def test_a_bad_value_is_reported_when_played(recording):
    path, _, _ = recording
    lines = path.read_text().splitlines(keepends=True)
    obj = json.loads(lines[3])
    obj["gpus"][0]["power_w"] = "a lot"
    lines[3] = json.dumps(obj) + "\n"
    path.write_text("".join(lines))
    src = ReplaySource(path, stepped=True)
    src.open()
    src.poll()
    src.poll()
    with pytest.raises(SourceUnavailable) as exc:
        src.poll()
    assert str(exc.value).startswith(f"{path}:4: ") and "power_w" in str(exc.value)


def _moved(samples: list[RigSample], t: float, wall: float) -> list[RigSample]:
    """Samples as another run of the recorder would have them: its own clocks."""
    return [replace(s, t=t + i, wall=wall + i) for i, s in enumerate(samples)]


def _two_recordings(tmp_path: Path, t_b: float) -> tuple[Path, Path, list[RigSample]]:
    """Two runs' recordings, 1 s apart: three samples of a 2-GPU rig, then, an hour later by
    the wall clock and at ``t_b`` on the second run's own monotonic clock, four of 4 GPUs."""
    info_a, a = sim_samples("kaggle-2xt4", 3)
    info_b, b = sim_samples("4xl4", 4)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write(first, info_a, _moved(a, 500.0, 1_767_225_600.0))
    write(second, info_b, _moved(b, t_b, 1_767_229_200.0))
    return first, second, a + b


@pytest.mark.parametrize("t_b", [20.0, 90_000.0], ids=["clock-behind", "clock-ahead"])
def test_joined_recordings_play_one_after_the_other(tmp_path: Path, t_b: float):
    """cat a.jsonl b.jsonl: the second plays after the first, one sample interval on, its
    GPUs and times its own (its monotonic clock another process's: hours on, or behind)."""
    first, second, samples = _two_recordings(tmp_path, t_b)
    joined = tmp_path / "joined.jsonl"
    joined.write_bytes(first.read_bytes() + second.read_bytes())
    clock = FakeClock()
    src = ReplaySource(joined, clock=clock)
    assert any("line 5: another recording joined on" in h for h in src.open().hints)
    played = []
    for _ in samples:
        played.append(src.poll())
        clock.now += 1.0
    assert [len(p.gpus) for p in played] == [2, 2, 2, 4, 4, 4, 4]
    assert [p.gpus for p in played] == [s.gpus for s in samples]
    assert [p.seq for p in played] == list(range(1, 8))
    assert src.poll().ended
    stepped = ReplaySource(joined, stepped=True, loop=True)
    stepped.open()
    walls = [stepped.poll().wall for _ in range(3 * len(samples))]
    assert walls == sorted(walls)


def test_joined_recordings_out_of_order_or_cut_short(tmp_path: Path):
    first, second, samples = _two_recordings(tmp_path, 20.0)
    backwards = tmp_path / "backwards.jsonl"
    backwards.write_bytes(second.read_bytes() + first.read_bytes())
    with pytest.raises(SourceUnavailable) as exc:
        ReplaySource(backwards).open()
    assert str(exc.value) == (
        f"{backwards}:6: a recording made before the one above it is joined on here;"
        " join them oldest first"
    )
    # the first cut mid-line (the recorder killed), the second joined on after it
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(first.read_bytes()[:-40] + second.read_bytes())
    src = ReplaySource(cut, stepped=True)
    hints = src.open().hints
    assert any("line 4: a line cut short" in h for h in hints), hints
    played = [src.poll() for _ in range(len(samples) - 1)]
    assert [p.gpus for p in played] == [s.gpus for s in samples[:2] + samples[3:]]
    assert src.poll().ended
    newer = tmp_path / "newer.jsonl"
    later = second.read_text().replace('"lltui_recording":1', '"lltui_recording":9', 1)
    newer.write_text(first.read_text() + later)
    with pytest.raises(SourceUnavailable) as exc:
        ReplaySource(newer).open()
    assert str(exc.value).startswith(f"{newer}:5: recording format 9 is newer")


@pytest.mark.parametrize(
    ("content", "words", "line"),
    [
        (b"", "empty", 1),
        (b"\n\n", "empty", 1),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not an lltui recording", 1),
        (b"gpu,memory\n0,15360\n", "not an lltui recording", 1),
        (b'{"name": "something else"}\n', "not an lltui recording", 1),
        (b"[1, 2, 3]\n", "not an lltui recording", 1),
        (b'{"lltui_recording": "yes", "info": {}}\n', "not an lltui recording", 1),
        (b'{"lltui_recording": 2, "info": {"source": "x"}}\n', "newer than this lltui", 1),
        (b'{"lltui_recording": 1, "info": {"gpus": 3}}\n', "header", 1),
        (b'{"lltui_recording": 1, "info": {"source": "nvml"}}\n', "no samples", None),
        (
            b'{"lltui_recording": 1, "info": {"source": "nvml"}}\n{"what": 1}\n{"seq": 1}\n',
            "neither a sample",
            2,
        ),
    ],
    ids=[
        "empty",
        "blank",
        "binary",
        "csv",
        "foreign-json",
        "json-list",
        "bad-version",
        "newer-version",
        "bad-header-info",
        "header-only",
        "unknown-record",
    ],
)
def test_foreign_and_broken_files_are_one_clear_line(
    tmp_path: Path, content: bytes, words: str, line: int | None
):
    path = tmp_path / "rec.jsonl"
    path.write_bytes(content)
    with pytest.raises(SourceUnavailable) as exc:
        ReplaySource(path).open()
    message = str(exc.value)
    assert words in message and "\n" not in message
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert message.startswith(where)


def test_a_line_that_is_not_json_says_where_in_plain_words(tmp_path: Path):
    """json's "Unterminated string starting at" was followed by " at column 27": "at at"."""
    path = tmp_path / "rec.jsonl"
    path.write_bytes(b'{"name": 1, "info": {"source": "nv')
    with pytest.raises(SourceUnavailable) as exc:
        ReplaySource(path).open()
    assert str(exc.value) == (
        f"{path}:1: not an lltui recording: not JSON (Unterminated string starting at column 32)"
    )


def test_a_recording_cut_inside_its_header_says_so(recording):
    """The recorder killed while writing its header (here inside a hostname's UTF-8 too):
    an lltui recording cut short, not 'not an lltui recording: not JSON'."""
    path = recording[0]
    header = path.read_bytes().split(b"\n")[0].replace(b'"source":', 'Ω"source":'.encode(), 1)
    for cut in (header[:60], header[: header.index("Ω".encode()) + 1]):
        path.write_bytes(cut)
        with pytest.raises(SourceUnavailable) as exc:
            ReplaySource(path).open()
        assert str(exc.value) == (
            f"{path}:1: an lltui recording cut short inside its header line; it holds no samples"
        )
    path.write_bytes(header[:60] + b"\n" + b'{"seq": 1, "t": 0, "gpus": []}\n')
    with pytest.raises(SourceUnavailable) as exc:
        ReplaySource(path).open()
    assert str(exc.value).startswith(f"{path}:1: an lltui recording whose header line is broken")


def test_missing_file_and_directory(tmp_path: Path):
    with pytest.raises(SourceUnavailable, match="no such recording"):
        ReplaySource(tmp_path / "nope.jsonl").open()
    with pytest.raises(SourceUnavailable, match="directory"):
        ReplaySource(tmp_path).open()
    with pytest.raises(ValueError):
        ReplaySource(tmp_path / "x", speed=0)


def test_decode_lines_without_line_endings():
    info, samples = odd_samples()
    enc = Encoder(info)
    lines = [enc.header(lltui_version="0", created=0.0)]
    for s in samples:
        lines += enc.lines(s)
    assert decode_lines(lines).samples == tuple(samples)


def test_a_non_finite_time_is_a_bad_recording(tmp_path):
    from lltui.core.monitor.record import RecordingError, sample_time

    with pytest.raises(RecordingError, match="finite"):
        sample_time({"seq": 1, "t": float("nan"), "gpus": []}, 3)


def test_non_finite_readings_replay_as_unknown(tmp_path, capsys):
    from lltui.cli import main

    rec = tmp_path / "rig.jsonl"
    assert main(["--source", "sim:4xl4", "--record", str(rec), "gpus"]) == 0
    capsys.readouterr()
    lines = rec.read_text().splitlines()
    # a recording edited or written by a broken driver: NaN and infinite readings
    last = json.loads(lines[-1])
    gpu = last["gpus"][0]
    gpu.update({"power_w": "NaN", "power_limit_w": "Infinity", "pcie_rx_kbs": "-Infinity"})
    text = json.dumps(last).replace('"NaN"', "NaN").replace('"Infinity"', "1e999")
    text = text.replace('"-Infinity"', "-Infinity")
    rec.write_text("\n".join([*lines[:-1], text]) + "\n")
    assert main(["gpus", "--json", "--source", f"replay:{rec}", "--replay-step"]) == 0
    first = json.loads(capsys.readouterr().out)["gpus"][0]
    assert first["power_w"] is None and first["power_limit_w"] is None
    assert first["pcie_rx_kbs"] is None

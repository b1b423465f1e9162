"""XID and ECC events through NVML's event API, against the fake binding's event functions."""

from __future__ import annotations

import threading
import tracemalloc
from dataclasses import replace
from typing import Any

import pytest
from support.fake_nvml_events import EVENT_SYMBOLS, nvmlEventTypeSingleBitEccError
from support.fake_pynvml import (
    BINDING_13,
    DRIVER_NO_EVENTS,
    DRIVER_NO_FIELD_VALUES,
    DRIVER_R535,
    MIB,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNKNOWN,
    FakeGpu,
    FakeNvml,
    make_gpus,
)
from support.nvml_helpers import close_nvml_sources  # noqa: F401 (an autouse fixture)

from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text
from lltui.core.monitor.models import XidEvent
from lltui.sources.gpu.nvml import NvmlSource
from lltui.sources.gpu.nvml.events import DEFAULT_EVENT_LIMIT, EventWatcher
from lltui.sources.gpu.sim import StepClock

WALL = 1_767_225_600.0
DEADLINE_S = 10.0


def start(
    monkeypatch: pytest.MonkeyPatch,
    gpus: list[FakeGpu] | None = None,
    *,
    driver: Any = DRIVER_R535,
    binding: Any = BINDING_13,
    **kwargs: Any,
) -> tuple[FakeNvml, NvmlSource, StepClock]:
    fake = FakeNvml(gpus if gpus is not None else make_gpus(2), driver=driver, binding=binding)
    fake.install(monkeypatch)
    clock = StepClock(1000.0, step=0.0)
    kwargs.setdefault("event_wait_s", 0.002)
    src = NvmlSource(clock=clock, wall=lambda: WALL, env={}, **kwargs)
    return fake, src, clock


def watcher(src: NvmlSource) -> EventWatcher:
    w = src.event_watcher
    assert w is not None, "no GPU was registered for events"
    return w


def handed_in(src: NvmlSource, count: int) -> None:
    """Wait (with a deadline) until the event thread has handed ``count`` events in."""
    assert watcher(src).buffer.wait_received(count, DEADLINE_S), "the events never arrived"


def event_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "lltui-nvml-events"]


# -- XID events in the samples ------------------------------------------------------------------
def test_xid_events_come_with_their_meaning_once_and_the_last_one_stays(monkeypatch):
    fake, src, clock = start(monkeypatch)
    src.open()
    assert src.poll().gpus[0].xid is None
    assert fake.xid(0, 13) == 1 and fake.xid(0, 31) == 1
    handed_in(src, 2)
    clock.advance(1.0)
    sample = src.poll()
    g0, g1 = sample.gpus
    assert g0.xid_events == (
        XidEvent(13, WALL, "graphics engine exception"),
        XidEvent(31, WALL, "GPU memory page fault"),
    )
    assert g0.xid == 31 and g0.xid_dropped == 0 and not g0.lost and g0.error is None
    assert g1.xid is None and g1.xid_events == ()

    clock.advance(1.0)
    later = src.poll().gpus[0]
    assert later.xid_events == () and later.xid == 31  # the last one seen stays


def test_an_unknown_xid_says_where_to_look_it_up(monkeypatch):
    fake, src, _ = start(monkeypatch)
    src.open()
    fake.xid(1, 4242)
    handed_in(src, 1)
    g1 = src.poll().gpus[1]
    assert g1.xid_events[0].meaning == "XID 4242 (see NVIDIA's XID catalogue)"


def test_xid_79_marks_the_gpu_lost_and_the_others_keep_updating(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(3))
    src.open()
    before = src.poll()
    fake.xid(1, 79)  # the driver reports it; NVML calls on GPU 1 would still answer
    handed_in(src, 1)
    for g in (fake.gpus[0], fake.gpus[2]):
        g.util_gpu += 20
        g.memory_used += 512 * MIB
    clock.advance(1.0)
    after = src.poll()
    g1 = after.gpus[1]
    assert g1.lost and "XID 79" in (g1.error or "") and "lost" in (g1.error or "")
    assert g1.xid == 79 and [e.xid for e in g1.xid_events] == [79]
    assert g1.xid_events[0].meaning == "GPU has fallen off the bus"
    assert g1.info == before.gpus[1].info
    for i in (0, 2):
        assert not after.gpus[i].lost
        assert after.gpus[i].util_gpu == fake.gpus[i].util_gpu
        assert after.gpus[i].memory_used == fake.gpus[i].memory_used
    assert after.error is None

    fake.reset_counts()
    clock.advance(10.0)
    again = src.poll()
    assert fake.count(1) == 0  # a GPU off the bus is not asked again
    assert fake.count(0) > 0 and fake.count(2) > 0
    assert again.gpus[1].lost and again.gpus[1].xid == 79 and again.gpus[1].xid_events == ()


# -- an event storm -----------------------------------------------------------------------------
def _retained_by_events_module(snapshot: tracemalloc.Snapshot) -> int:
    keep = [tracemalloc.Filter(True, "*lltui/sources/gpu/nvml/events.py")]
    return sum(stat.size for stat in snapshot.filter_traces(keep).statistics("filename"))


def test_an_event_storm_keeps_memory_bounded_and_says_what_it_dropped(monkeypatch):
    fake, src, clock = start(monkeypatch)
    src.open()
    src.poll()
    quiet_calls = fake.count(0)
    fake.reset_counts()
    clock.advance(0.5)
    src.poll()
    fast_calls = fake.count(0)

    tracemalloc.start()
    try:
        assert fake.xid_storm(0, 9_999, xid=13) == 1
        fake.xid(0, 79)  # past the limit: dropped from the list, but still marks the GPU
        handed_in(src, 10_000)
        retained = _retained_by_events_module(tracemalloc.take_snapshot())
    finally:
        tracemalloc.stop()
    buffer = watcher(src).buffer
    assert buffer.held() == DEFAULT_EVENT_LIMIT
    assert buffer.dropped == 10_000 - DEFAULT_EVENT_LIMIT
    assert retained < 64 * 1024, retained  # 10,000 events kept would take over a megabyte
    assert fake.queued() == 0

    fake.reset_counts()
    clock.advance(0.5)
    sample = src.poll()
    g0 = sample.gpus[0]
    assert len(g0.xid_events) == DEFAULT_EVENT_LIMIT
    assert all(e.xid == 13 for e in g0.xid_events)
    assert g0.xid_dropped == 10_000 - DEFAULT_EVENT_LIMIT
    assert g0.xid == 79 and g0.lost
    assert fake.count(0) == 0 and fake.count(1) == fast_calls <= quiet_calls
    assert buffer.held() == 0  # drained: nothing piles up between polls
    text = rig_to_text(sample)
    assert f"{10_000 - DEFAULT_EVENT_LIMIT} more XID events dropped" in text
    assert rig_to_json(sample)["gpus"][0]["xid_dropped"] == 10_000 - DEFAULT_EVENT_LIMIT


def test_the_event_limit_is_a_constructor_argument(monkeypatch):
    fake, src, _ = start(monkeypatch, event_limit=3)
    src.open()
    fake.xid_storm(1, 10, xid=31)
    handed_in(src, 10)
    g1 = src.poll().gpus[1]
    assert len(g1.xid_events) == 3 and g1.xid_dropped == 7 and g1.xid == 31


# -- ECC ----------------------------------------------------------------------------------------
def ecc_gpus() -> list[FakeGpu]:
    gpus = make_gpus(2, name="NVIDIA A100-SXM4-80GB")
    for i, g in enumerate(gpus):
        g.ecc_corrected, g.ecc_uncorrected = 2 + i, 0
        g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected = 40 + i, 1
    return gpus


@pytest.mark.parametrize("driver", [DRIVER_R535, DRIVER_NO_FIELD_VALUES], ids=["batched", "single"])
def test_volatile_and_aggregate_ecc_counts(monkeypatch, driver):
    fake, src, _ = start(monkeypatch, ecc_gpus(), driver=driver)
    src.open()
    sample = src.poll()
    for fg, gs in zip(fake.gpus, sample.gpus, strict=True):
        assert (gs.ecc_corrected, gs.ecc_uncorrected) == (fg.ecc_corrected, fg.ecc_uncorrected)
        assert (gs.ecc_aggregate_corrected, gs.ecc_aggregate_uncorrected) == (
            fg.ecc_aggregate_corrected,
            fg.ecc_aggregate_uncorrected,
        )
    j = rig_to_json(sample)["gpus"][1]
    assert (j["ecc_volatile_corrected"], j["ecc_volatile_uncorrected"]) == (3, 0)
    assert (j["ecc_aggregate_corrected"], j["ecc_aggregate_uncorrected"]) == (41, 1)


def test_geforce_has_no_ecc_counts_and_json_says_null(monkeypatch):
    _, src, _ = start(monkeypatch)
    src.open()
    j = rig_to_json(src.poll())["gpus"][0]
    for key in (
        "ecc_volatile_corrected",
        "ecc_volatile_uncorrected",
        "ecc_aggregate_corrected",
        "ecc_aggregate_uncorrected",
    ):
        assert j[key] is None, key


def test_an_ecc_event_reads_that_gpus_counts_before_the_slow_ttl(monkeypatch):
    fake, src, clock = start(monkeypatch, ecc_gpus(), slow_ttl_s=60.0)
    src.open()
    src.poll()
    for g in fake.gpus:
        g.ecc_corrected = (g.ecc_corrected or 0) + 5
        g.ecc_aggregate_corrected = (g.ecc_aggregate_corrected or 0) + 5
    assert fake.event(0, nvmlEventTypeSingleBitEccError) == 1
    handed_in(src, 1)
    clock.advance(1.0)
    sample = src.poll()
    assert sample.gpus[0].ecc_corrected == fake.gpus[0].ecc_corrected
    assert sample.gpus[0].ecc_aggregate_corrected == fake.gpus[0].ecc_aggregate_corrected
    assert sample.gpus[1].ecc_corrected == fake.gpus[1].ecc_corrected - 5  # waits for its TTL
    assert sample.gpus[0].xid is None and sample.gpus[0].xid_events == ()
    fake.reset_counts()
    clock.advance(1.0)
    src.poll()
    assert fake.count(0, "nvmlDeviceGetFieldValues") == 1  # the fast batch only: read once


# -- no events, no error ------------------------------------------------------------------------
def _quiet(src: NvmlSource) -> None:
    sample = src.poll()
    assert sample.error is None
    assert all(g.error is None and g.xid is None and g.xid_events == () for g in sample.gpus)
    assert not any("XID" in h for h in sample.info.hints)


def test_a_driver_without_events_gives_no_events_and_no_error(monkeypatch):
    fake, src, _ = start(monkeypatch, driver=DRIVER_NO_EVENTS)
    before = set(event_threads())  # threads of closed sources may still end their waits
    src.open()
    assert src.event_watcher is None
    assert set(event_threads()) <= before
    assert fake.xid(0, 13) == 0
    _quiet(src)


def test_a_binding_without_the_event_functions_gives_no_events(monkeypatch):
    binding = replace(BINDING_13, absent=BINDING_13.absent | EVENT_SYMBOLS)
    _, src, _ = start(monkeypatch, binding=binding)
    src.open()
    assert src.event_watcher is None
    _quiet(src)


@pytest.mark.parametrize(
    "error",
    [
        NVML_ERROR_NOT_SUPPORTED,
        NVML_ERROR_NO_PERMISSION,
        NVML_ERROR_FUNCTION_NOT_FOUND,
        NVML_ERROR_UNKNOWN,
        RuntimeError("odd"),
    ],
)
@pytest.mark.parametrize(
    "function", ["nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents"]
)
def test_a_refused_registration_means_no_events_for_that_gpu_only(monkeypatch, function, error):
    fake, src, _ = start(monkeypatch)
    fake.fail(0, function, error)
    src.open()
    assert watcher(src).registered == (1,)
    assert fake.xid(0, 13) == 0  # GPU 0 is on no event set
    _quiet(src)
    fake.xid(1, 43)
    handed_in(src, 1)
    assert [e.xid for e in src.poll().gpus[1].xid_events] == [43]


def test_no_permission_on_every_gpu_starts_no_thread(monkeypatch):
    fake, src, _ = start(monkeypatch)
    for i in range(2):
        fake.fail(i, "nvmlDeviceRegisterEvents", NVML_ERROR_NO_PERMISSION)
    src.open()
    assert src.event_watcher is None
    assert fake.live_event_sets() == []  # the set nobody uses is freed at once
    _quiet(src)


def test_a_gpu_that_supports_no_event_is_left_out(monkeypatch):
    gpus = make_gpus(2)
    gpus[0].supported_events = None
    _, src, _ = start(monkeypatch, gpus)
    src.open()
    assert watcher(src).registered == (1,)
    _quiet(src)


def test_a_wait_that_stops_working_ends_the_thread_with_a_hint(monkeypatch):
    driver = replace(DRIVER_R535, missing_symbols=frozenset({"nvmlEventSetWait_v2"}))
    _, src, _ = start(monkeypatch, driver=driver)
    src.open()
    assert watcher(src).join(DEADLINE_S)
    sample = src.poll()
    assert any("XID and ECC events stopped" in h for h in sample.info.hints)
    assert all(g.error is None and not g.lost for g in sample.gpus)


# -- the thread ---------------------------------------------------------------------------------
def test_the_thread_stops_and_the_set_is_freed_on_close(monkeypatch):
    fake, src, _ = start(monkeypatch)
    before = set(event_threads())
    src.open()
    w = watcher(src)
    assert w.running and len(fake.live_event_sets()) == 1
    (thread,) = set(event_threads()) - before
    assert thread.daemon
    src.close()
    assert src.event_watcher is None
    assert w.join(DEADLINE_S) and not thread.is_alive()
    # freed while NVML was up (or the free fails): the thread held it open itself
    assert fake.live_event_sets() == []
    assert fake.waiters() == 0 and fake.shutdowns == 2 and fake.initialised == 0


def test_closing_does_not_wait_out_the_threads_wait(monkeypatch):
    """NVML cannot end a wait early: the source closes at once and the thread, still
    waiting, keeps its own hold on NVML until its wait ends."""
    fake, src, _ = start(monkeypatch, event_wait_s=DEADLINE_S * 10)
    src.open()
    w = watcher(src)
    assert fake.wait_for_waiters(1, DEADLINE_S)
    src.close()  # with the thread in a wait far longer than the test may take
    assert w.running and fake.waiters() == 1
    assert fake.initialised == 1 and fake.shutdowns == 1  # the source's hold is gone
    fake.xid(0, 13)  # the wait ends
    assert w.join(DEADLINE_S)
    assert fake.live_event_sets() == [] and fake.initialised == 0


def test_a_poll_does_not_wait_on_the_event_thread(monkeypatch):
    fake, src, clock = start(monkeypatch, event_wait_s=DEADLINE_S * 10)
    src.open()
    w = watcher(src)
    assert w.running
    # The thread sits in a wait far longer than the test may take; polls still complete.
    for _ in range(3):
        clock.advance(1.0)
        assert all(g.memory_used is not None for g in src.poll().gpus)
    fake.xid(0, 62)
    handed_in(src, 1)
    assert src.poll().gpus[0].xid == 62
    w.stop()
    fake.xid(1, 13)  # wakes the long wait, so the thread ends within the test
    assert w.join(DEADLINE_S)


# -- recordings ---------------------------------------------------------------------------------
def test_xid_events_read_from_nvml_replay_exactly(monkeypatch, tmp_path):
    from support.recording import read_recording

    from lltui.sources.gpu.replay import Recorder, ReplaySource

    fake, src, clock = start(monkeypatch, make_gpus(3))
    info = src.open()
    polled = [src.poll()]
    fake.xid(0, 94)
    fake.xid(2, 79)
    handed_in(src, 2)
    clock.advance(1.0)
    polled.append(src.poll())
    clock.advance(1.0)
    polled.append(src.poll())
    assert [e.xid for e in polled[1].gpus[0].xid_events] == [94] and polled[1].gpus[2].lost

    path = tmp_path / "nvml.jsonl"
    with Recorder(path, wall=lambda: WALL) as rec:
        rec.start(info)
        for s in polled:
            rec.write(s)
    assert read_recording(path).samples == tuple(polled)
    replay = ReplaySource(path, stepped=True)
    replay.open()
    try:
        replayed = [replay.poll() for _ in polled]
    finally:
        replay.close()
    assert [s.gpus for s in replayed] == [s.gpus for s in polled]


def test_no_thread_to_be_had_means_no_events_and_nvml_let_go(monkeypatch):
    fake, src, _ = start(monkeypatch)

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    src.open()
    assert src.event_watcher is None
    assert fake.live_event_sets() == [] and fake.initialised == 1  # the source's own hold
    assert all(g.error is None for g in src.poll().gpus)
    src.close()
    assert fake.initialised == 0

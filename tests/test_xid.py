"""XID errors outside the NVML source: their meanings, the history's log, recordings and the
``gpus`` report (JSON and text, through the CLI on a replayed recording)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.recording import read_recording

from lltui.cli import main
from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text
from lltui.core.monitor.history import RigHistory
from lltui.core.monitor.models import GpuSample, GpuStatic, RigInfo, RigSample, XidEvent
from lltui.core.monitor.record import RecordingError, sample_from_dict, sample_to_dict
from lltui.core.monitor.xid import XID_MEANINGS, xid_event, xid_meaning
from lltui.sources.gpu.replay import Recorder, ReplaySource

WALL = 1_767_225_600.5
A = GpuStatic(0, "GPU-a", "NVIDIA A100-SXM4-80GB", "00000000:07:00.0", 80 * 2**30)
B = GpuStatic(1, "GPU-b", "NVIDIA A100-SXM4-80GB", "00000000:0F:00.0", 80 * 2**30)
INFO = RigInfo(source="nvml", driver_version="550.54.15", cuda_version="12.4", gpus=(A, B))


def xid_samples() -> list[RigSample]:
    """Two ticks: GPU 1 reports XID 48 then 79 (and falls off); GPU 0 a burst with drops."""
    s1 = RigSample(
        seq=1,
        t=10.0,
        wall=WALL,
        info=INFO,
        gpus=(
            GpuSample(
                A,
                memory_used=2**30,
                ecc_corrected=3,
                ecc_uncorrected=0,
                ecc_aggregate_corrected=120,
                ecc_aggregate_uncorrected=2,
                xid=13,
                xid_events=(xid_event(13, WALL - 0.25), xid_event(31, WALL - 0.5)),
                xid_dropped=9_936,
            ),
            GpuSample(B, memory_used=0, xid=48, xid_events=(xid_event(48, WALL - 0.75),)),
        ),
    )
    s2 = RigSample(
        seq=2,
        t=11.0,
        wall=WALL + 1,
        info=INFO,
        gpus=(
            GpuSample(A, memory_used=2**30, xid=13),
            GpuSample(
                B,
                lost=True,
                error="GPU is lost: it has fallen off the bus (XID 79)",
                xid=79,
                xid_events=(xid_event(79, WALL + 0.5),),
            ),
        ),
    )
    return [s1, s2]


# -- meanings -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("xid", "words"),
    [
        (79, "GPU has fallen off the bus"),
        (48, "double-bit ECC error"),
        (31, "GPU memory page fault"),
        (13, "graphics engine exception"),
        (43, "GPU stopped processing"),
        (45, "preemptive cleanup, due to previous errors"),
        (74, "NVLink error"),
        (92, "high single-bit ECC error rate"),
        (94, "contained ECC error"),
        (95, "uncontained ECC error"),
        (119, "GSP RPC timeout"),
        (120, "GSP error"),
    ],
)
def test_common_xids_in_words(xid, words):
    assert xid_meaning(xid) == words
    assert xid_event(xid, 1.0) == XidEvent(xid, 1.0, words)


def test_the_table_covers_the_common_xids_and_unknown_ones_say_where_to_look():
    common = {13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 93, 94, 95, 119, 120}
    assert common <= set(XID_MEANINGS)
    assert all(XID_MEANINGS[x] and "catalogue" not in XID_MEANINGS[x] for x in common)
    assert "row remapping" in xid_meaning(63) and "row remapping" in xid_meaning(64)
    assert xid_meaning(9_999) == "XID 9999 (see NVIDIA's XID catalogue)"
    assert xid_meaning(100_000) == "XID 100000 (see NVIDIA's XID catalogue)"


# -- the history ---------------------------------------------------------------------------------
def test_the_history_keeps_xid_events_bounded_and_counts_what_it_let_go():
    history = RigHistory(maxlen=10, xid_maxlen=5)
    for k in range(8):
        events = (xid_event(13, float(k)),) if k % 2 == 0 else (xid_event(31, float(k)),) * 2
        history.append(
            RigSample(
                seq=k,
                t=float(k),
                wall=float(k),
                info=INFO,
                gpus=(GpuSample(A, xid_events=events, xid_dropped=1), GpuSample(B)),
            )
        )
    kept = history.xid_events()
    assert len(kept) == 5 and [e.t for e in kept] == [5.0, 5.0, 6.0, 7.0, 7.0]  # the newest
    assert history.xid_events("GPU-a") == kept and history.xid_events("GPU-b") == ()
    assert history.xid_dropped == (12 - 5) + 8  # let go by the log + dropped by the source


# -- recordings ---------------------------------------------------------------------------------
def test_recordings_round_trip_xid_events_and_ecc_counts(tmp_path: Path):
    samples = xid_samples()
    path = tmp_path / "rec.jsonl"
    with Recorder(path, wall=lambda: WALL) as rec:
        rec.start(INFO)
        for s in samples:
            rec.write(s)
    assert read_recording(path).samples == tuple(samples)
    line = json.loads(path.read_text().splitlines()[1])
    assert line["gpus"][0]["xid_events"][0] == {
        "xid": 13,
        "t": WALL - 0.25,
        "meaning": "graphics engine exception",
    }
    assert line["gpus"][0]["xid_dropped"] == 9_936
    assert "xid_events" not in json.loads(path.read_text().splitlines()[2])["gpus"][0]

    replay = ReplaySource(path, stepped=True)
    replay.open()
    try:
        assert replay.poll().gpus == samples[0].gpus
        assert replay.poll().gpus == samples[1].gpus
    finally:
        replay.close()


def test_a_malformed_xid_event_in_a_recording_names_where():
    good = sample_to_dict(xid_samples()[0], INFO)
    bad = json.loads(json.dumps(good))
    bad["gpus"][1]["xid_events"][0]["xid"] = "forty-eight"
    with pytest.raises(RecordingError, match=r"gpus\[1\]\.xid_events\[0\]\.xid"):
        sample_from_dict(bad, INFO, 3)
    bad = json.loads(json.dumps(good))
    del bad["gpus"][0]["xid_events"][1]["meaning"]
    with pytest.raises(RecordingError, match="meaning is missing"):
        sample_from_dict(bad, INFO)


# -- the gpus report -----------------------------------------------------------------------------
ECC_KEYS = (
    "ecc_volatile_corrected",
    "ecc_volatile_uncorrected",
    "ecc_aggregate_corrected",
    "ecc_aggregate_uncorrected",
)


def test_gpus_json_has_xid_events_and_ecc_counts():
    s1 = xid_samples()[0]
    gpus = rig_to_json(s1)["gpus"]
    assert gpus[0]["xid_events"] == [
        {"xid": 13, "meaning": "graphics engine exception", "t": WALL - 0.25},
        {"xid": 31, "meaning": "GPU memory page fault", "t": WALL - 0.5},
    ]
    assert gpus[0]["xid"] == 13 and gpus[0]["xid_dropped"] == 9_936
    assert [gpus[0][k] for k in ECC_KEYS] == [3, 0, 120, 2]
    assert (gpus[0]["ecc_corrected"], gpus[0]["ecc_uncorrected"]) == (3, 0)  # kept as they were
    assert [gpus[1][k] for k in ECC_KEYS] == [None] * 4


def test_gpus_text_shows_each_xid_with_its_meaning():
    s1, s2 = xid_samples()
    text = rig_to_text(s1)
    assert ": graphics engine exception" in text and "XID 31 at " in text
    assert "9936 more XID events dropped" in text
    assert "XID 48 at " in text and "double-bit ECC error" in text
    lost = rig_to_text(s2)
    assert "LOST" in lost and "XID 79 at " in lost and "GPU has fallen off the bus" in lost
    assert "last XID 13: graphics engine exception" in lost  # none new on GPU 0: the last one
    odd = replace(s1.gpus[1], xid_events=(XidEvent(48, 1e300, "double-bit ECC error"),))
    assert "XID 48 at ?" in rig_to_text(replace(s1, gpus=(odd,)))  # no traceback


def test_gpus_json_through_the_cli_from_a_recording_with_xids(tmp_path: Path, capsys):
    path = tmp_path / "rec.jsonl"
    with Recorder(path, wall=lambda: WALL) as rec:
        rec.start(INFO)
        rec.write(xid_samples()[0])
    assert main(["gpus", "--json", "--source", f"replay:{path}"]) == 0
    gpus = json.loads(capsys.readouterr().out)["gpus"]
    assert [e["xid"] for e in gpus[0]["xid_events"]] == [13, 31]
    assert gpus[1]["xid_events"] == [
        {"xid": 48, "meaning": "double-bit ECC error", "t": WALL - 0.75}
    ]
    assert main(["gpus", "--source", f"replay:{path}"]) == 0
    assert "double-bit ECC error" in capsys.readouterr().out


def test_gpus_json_on_a_simulated_rig_has_the_new_keys_and_no_xids(capsys):
    assert main(["gpus", "--json", "--source", "sim:8xh100-sxm"]) == 0
    for g in json.loads(capsys.readouterr().out)["gpus"]:
        assert set(ECC_KEYS) <= set(g)
        assert g["xid_events"] == [] and g["xid"] is None and g["xid_dropped"] == 0

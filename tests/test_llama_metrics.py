"""/metrics, /slots and /props parsers on captured responses, and the throughput tracker."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from lltui.core.llama.metrics import (
    LlamaMetrics,
    MetricsFormatError,
    SlotState,
    ThroughputTracker,
    error_message,
    parse_metrics,
    parse_prometheus,
    parse_props,
    parse_slots,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llama-server"  # see its README.md


def http_bodies(name: str) -> list[tuple[int, str]]:
    """(status, body) of each HTTP response captured in a fixture file."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    out = []
    for chunk in text.split("HTTP/1.1 ")[1:]:
        status = int(chunk.split(None, 1)[0])
        head, _, rest = chunk.partition("\n\n")
        length = next(
            (int(h.split(":")[1]) for h in head.splitlines() if h.startswith("Content-Length")),
            len(rest),
        )
        out.append((status, rest.encode()[:length].decode()))
    return out


def body(name: str, index: int = 0) -> str:
    return http_bodies(name)[index][1]


# --- /metrics --------------------------------------------------------------------------------


def test_metrics_after_a_request() -> None:
    m = parse_metrics(body("metrics_after.txt"))
    assert m.prompt_tokens_total == 22
    assert m.prompt_seconds_total == 0.007239
    assert m.tokens_predicted_total == 6
    assert m.tokens_predicted_seconds_total == 0.001731
    assert m.n_decode_total == 6
    assert m.n_tokens_max == 27
    assert m.prompt_tokens_seconds == 3039.09
    assert m.predicted_tokens_seconds == 2888.5
    assert m.requests_processing == 0 and m.n_busy_slots_per_decode == 1
    assert m.kv_cache_usage_ratio is None  # not exported by this version
    assert m.other == ()


def test_metrics_before_any_request_are_zero() -> None:
    m = parse_metrics(body("metrics_before.txt"))
    assert m.tokens_predicted_total == 0 and m.prompt_tokens_total == 0
    assert m.requests_processing == 0


def test_second_scrape_resets_only_the_gauges() -> None:
    first = parse_metrics(body("metrics_after.txt"))
    second = parse_metrics(body("metrics_after_second_scrape.txt"))
    assert second.predicted_tokens_seconds == 0 and first.predicted_tokens_seconds > 0
    assert second.tokens_predicted_total == first.tokens_predicted_total


def test_counter_rates_between_two_captured_scrapes() -> None:
    before = parse_metrics(body("metrics_before.txt"))
    after = parse_metrics(body("metrics_after.txt"))
    tracker = ThroughputTracker()
    assert tracker.update(10.0, before, None) is None
    tp = tracker.update(12.0, after, None)
    assert tp is not None
    assert tp.decode_tps == pytest.approx(6 / 0.001731)
    assert tp.prompt_tps == pytest.approx(22 / 0.007239)
    assert tp.generated_tokens == 6 and tp.generation_tps == pytest.approx(3.0)
    # Not the server's per-scrape gauge.
    assert tp.decode_tps != after.predicted_tokens_seconds


def test_metrics_during_generation_counters_wait_for_the_request() -> None:
    bodies = [b for s, b in http_bodies("metrics_slots_during_generation.txt") if s == 200]
    metrics = [parse_metrics(b) for b in bodies if b.lstrip().startswith("#")]
    slots = [parse_slots(json.loads(b)) for b in bodies if b.lstrip().startswith("[")]
    assert metrics and slots
    assert all(m.requests_processing == 1 and m.tokens_predicted_total == 0 for m in metrics)
    busy = [s for s in slots[0] if s.is_processing]
    assert len(busy) == 1 and busy[0].id == 3 and busy[0].id_task == 0


def test_prometheus_labels_types_and_bad_lines() -> None:
    text = "\n".join(
        [
            "# HELP llamacpp:x help text",
            "# TYPE llamacpp:tokens_predicted_total counter",
            "llamacpp:tokens_predicted_total 12",
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 5',
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 9',
            'other_metric{a="x\\"y",b="z"} +Inf 1700000000',
            "llamacpp:kv_cache_usage_ratio 0.25",
            "this is not a sample",
            "llamacpp:requests_processing not-a-number",
        ]
    )
    samples, types = parse_prometheus(text)
    assert types == {"llamacpp:tokens_predicted_total": "counter"}
    other = next(s for s in samples if s.name == "other_metric")
    assert other.labels == (("a", 'x"y'), ("b", "z")) and math.isinf(other.value)
    m = parse_metrics(text)
    assert m.tokens_predicted_total == 12 and m.kv_cache_usage_ratio == 0.25
    assert m.spec_accepted_per_position == ((0, 9.0), (1, 5.0))
    assert m.requests_processing is None
    assert [s.name for s in m.other] == ["other_metric"]


def test_text_without_llama_metrics_is_an_error() -> None:
    with pytest.raises(MetricsFormatError):
        parse_metrics('{"error": {"code": 501}}')
    with pytest.raises(MetricsFormatError):
        parse_metrics("")


# --- /slots and /props -----------------------------------------------------------------------


def test_slots_before_and_after() -> None:
    before = parse_slots(json.loads(body("slots_before.txt")))
    assert [s.id for s in before] == [0, 1, 2, 3]
    assert all(s.n_ctx == 2048 and not s.is_processing and s.id_task is None for s in before)
    after = parse_slots(json.loads(body("slots_after.txt")))
    used = after[3]
    assert (used.id_task, used.n_prompt_tokens, used.n_decoded, used.n_remain) == (2, 27, 0, -1)
    assert used.has_next_token is False and used.n_predict == 16
    assert after[0].n_decoded is None


def test_slots_next_token_as_object_and_junk_entries() -> None:
    data = [
        {
            "id": 0,
            "n_ctx": 4096,
            "is_processing": True,
            "id_task": 7,
            "next_token": {"n_decoded": 5},
        },
        {"id": "x"},
        "junk",
        {"id": 1, "n_ctx": 1.5, "is_processing": False, "next_token": []},
    ]
    slots = parse_slots(data)
    assert [(s.id, s.n_decoded, s.is_processing) for s in slots] == [(0, 5, True), (1, None, False)]
    assert slots[1].n_ctx is None
    with pytest.raises(ValueError):
        parse_slots({"error": {}})


def test_props() -> None:
    p = parse_props(json.loads(body("props.txt")))
    assert (p.total_slots, p.n_ctx) == (4, 2048)
    assert p.model_path == "models/tiny-llama.gguf" and p.model_ftype == "F16"
    assert p.build_info == "b0-unknown" and p.is_sleeping is False
    assert (p.endpoint_slots, p.endpoint_metrics, p.endpoint_props) == (True, True, False)
    assert p.modalities == () and p.has_chat_template
    with pytest.raises(ValueError):
        parse_props([])


def test_error_bodies() -> None:
    status, text = http_bodies("health_loading_503.txt")[0]
    assert status == 503 and error_message(json.loads(text)) == "Loading model"
    messages = [(s, error_message(json.loads(b))) for s, b in http_bodies("http_api_key.txt")]
    assert (401, "Invalid API Key") in messages
    not_supported = [m or "" for s, m in messages if s == 501]
    assert any("--metrics" in m for m in not_supported)
    assert any("--props" in m for m in not_supported)
    assert error_message({"status": "ok"}) is None


# --- the tracker -----------------------------------------------------------------------------


def metrics(tokens: float, seconds: float, prompt: float = 0, prompt_s: float = 0) -> LlamaMetrics:
    return LlamaMetrics(
        tokens_predicted_total=tokens,
        tokens_predicted_seconds_total=seconds,
        prompt_tokens_total=prompt,
        prompt_seconds_total=prompt_s,
        # Gauges set to nonsense: the tracker must not read them.
        predicted_tokens_seconds=1e9,
        prompt_tokens_seconds=1e9,
    )


def slot(slot_id: int, task: int | None, decoded: int | None, busy: bool = True) -> SlotState:
    return SlotState(id=slot_id, is_processing=busy, id_task=task, n_decoded=decoded)


def test_live_rate_from_slots_while_counters_stand_still() -> None:
    tr = ThroughputTracker()
    tr.update(0.0, metrics(0, 0), [slot(0, 1, 10)])
    tp = tr.update(2.0, metrics(0, 0), [slot(0, 1, 50)])
    assert tp is not None
    assert tp.generated_tokens == 40 and tp.generation_tps == 20.0
    assert tp.busy_slots == 1 and tp.decode_tps is None
    assert tp.sources == ("metrics", "slots")


def test_finished_request_counts_only_tokens_not_seen_before() -> None:
    tr = ThroughputTracker()
    tr.update(0.0, metrics(0, 0), [slot(0, 1, 30)])
    # The request ended at 45 tokens; the counters now hold all 45, 30 of them already seen.
    tp = tr.update(1.0, metrics(45, 0.9), [slot(0, 1, None, busy=False)])
    assert tp is not None and tp.generated_tokens == 15
    assert tp.decode_tps == pytest.approx(50.0)


def test_counter_one_poll_late_is_not_counted_twice() -> None:
    tr = ThroughputTracker()
    tr.update(0.0, metrics(0, 0), [slot(0, 1, 30)])
    first = tr.update(1.0, metrics(0, 0), [slot(0, 1, None, busy=False)])
    second = tr.update(2.0, metrics(45, 0.9), [slot(0, 1, None, busy=False)])
    assert first is not None and second is not None
    assert first.generated_tokens == 0 and second.generated_tokens == 15


def test_new_task_on_a_slot_counts_from_zero() -> None:
    tr = ThroughputTracker()
    tr.update(0.0, metrics(0, 0), [slot(0, 1, 20), slot(1, 2, 5)])
    tp = tr.update(1.0, metrics(25, 1.0), [slot(0, 3, 4), slot(1, 2, 9)])
    # Task 1 finished with 25 tokens (20 seen), task 2 went 5 -> 9, task 3 is new with 4.
    assert tp is not None and tp.generated_tokens == 5 + 4 + 4


def test_counter_reset_means_no_rate() -> None:
    tr = ThroughputTracker()
    tr.update(0.0, metrics(100, 2.0), None)
    tp = tr.update(1.0, metrics(3, 0.1), None)
    assert tp is not None and tp.counter_reset
    assert tp.generated_tokens is None and tp.decode_tps is None
    after = tr.update(2.0, metrics(13, 0.2), None)
    assert after is not None and after.generated_tokens == 10


def test_metrics_disabled_uses_slots_only() -> None:
    tr = ThroughputTracker()
    tr.update(0.0, None, [slot(0, 1, 0)])
    tp = tr.update(0.5, None, [slot(0, 1, 10)])
    assert tp is not None and tp.generation_tps == 20.0 and tp.sources == ("slots",)


def test_time_must_advance() -> None:
    tr = ThroughputTracker()
    m = metrics(0, 0)
    assert tr.update(5.0, m, None) is None
    assert tr.update(5.0, replace(m, tokens_predicted_total=3), None) is None
    tr.reset()
    assert tr.update(6.0, m, None) is None

"""llama-server's /metrics, /slots and /props, and tokens per second from them.

Pure. ``parse_metrics`` reads the Prometheus text format; ``parse_slots`` and ``parse_props``
take the decoded JSON. :class:`ThroughputTracker` turns successive polls into rates.

Rates come from counters and from the slots' ``n_decoded``, never from the
``*_tokens_seconds`` gauges: those cover only the time since the previous scrape and each
scrape resets them, so a second scraper (Prometheus, a browser) would steal our window. The
generation counters move only when a request finishes, so the tracker adds what the slots
decoded meanwhile and, when the request ends, counts only its tokens not already seen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PREFIX = "llamacpp:"


class MetricsFormatError(ValueError):
    """The text is not Prometheus exposition text, or holds no llama.cpp metric."""


@dataclass(frozen=True, slots=True)
class MetricSample:
    name: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


# name [{labels}] value [timestamp]
_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
    r"(?:\{(?P<labels>[^}]*)\})?"
    r"\s+(?P<value>\S+)(?:\s+-?\d+)?\s*$"
)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def _float(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    if lowered == "nan":
        return math.nan
    return float(text)


def parse_prometheus(text: str) -> tuple[tuple[MetricSample, ...], dict[str, str]]:
    """Samples and ``# TYPE`` declarations of Prometheus text; bad lines are skipped."""
    samples: list[MetricSample] = []
    types: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) == 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3].strip()
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = _float(m.group("value"))
        except ValueError:
            continue
        labels: tuple[tuple[str, str], ...] = ()
        if m.group("labels"):
            labels = tuple(
                (k, v.replace('\\"', '"').replace("\\\\", "\\"))
                for k, v in _LABEL.findall(m.group("labels"))
            )
        samples.append(MetricSample(m.group("name"), value, labels))
    return tuple(samples), types


@dataclass(frozen=True, slots=True)
class LlamaMetrics:
    """One scrape of /metrics. Counters only grow while the server lives; ``None`` = absent."""

    prompt_tokens_total: float | None = None
    prompt_tokens_cached_total: float | None = None
    prompt_seconds_total: float | None = None
    tokens_predicted_total: float | None = None
    tokens_predicted_seconds_total: float | None = None
    n_decode_total: float | None = None
    n_tokens_max: float | None = None
    spec_draft_tokens_total: float | None = None
    spec_accepted_tokens_total: float | None = None
    spec_drafts_total: float | None = None
    requests_processing: float | None = None
    requests_deferred: float | None = None
    n_busy_slots_per_decode: float | None = None
    # Per-scrape gauges: shown as the server reports them, never used for rates.
    prompt_tokens_seconds: float | None = None
    predicted_tokens_seconds: float | None = None
    # Only older builds export these.
    kv_cache_usage_ratio: float | None = None
    kv_cache_tokens: float | None = None
    spec_accepted_per_position: tuple[tuple[int, float], ...] = ()
    other: tuple[MetricSample, ...] = ()


_FIELDS: dict[str, str] = {
    "prompt_tokens_total": "prompt_tokens_total",
    "prompt_tokens_cached_total": "prompt_tokens_cached_total",
    "prompt_seconds_total": "prompt_seconds_total",
    "tokens_predicted_total": "tokens_predicted_total",
    "tokens_predicted_seconds_total": "tokens_predicted_seconds_total",
    "n_decode_total": "n_decode_total",
    "n_tokens_max": "n_tokens_max",
    "spec_decode_num_draft_tokens_total": "spec_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total": "spec_accepted_tokens_total",
    "spec_decode_num_drafts_total": "spec_drafts_total",
    "requests_processing": "requests_processing",
    "requests_deferred": "requests_deferred",
    "n_busy_slots_per_decode": "n_busy_slots_per_decode",
    "prompt_tokens_seconds": "prompt_tokens_seconds",
    "predicted_tokens_seconds": "predicted_tokens_seconds",
    "kv_cache_usage_ratio": "kv_cache_usage_ratio",
    "kv_cache_tokens": "kv_cache_tokens",
}


def parse_metrics(text: str) -> LlamaMetrics:
    """llama-server's /metrics text; raises :class:`MetricsFormatError` if none is there."""
    samples, _types = parse_prometheus(text)
    values: dict[str, float] = {}
    per_pos: list[tuple[int, float]] = []
    other: list[MetricSample] = []
    found = False
    for s in samples:
        if not s.name.startswith(PREFIX):
            other.append(s)
            continue
        found = True
        short = s.name[len(PREFIX) :]
        if short == "spec_decode_num_accepted_tokens_per_pos_total":
            pos = dict(s.labels).get("position", "")
            if pos.isdigit():
                per_pos.append((int(pos), s.value))
            continue
        attr = _FIELDS.get(short)
        if attr is None or s.labels:
            other.append(s)
            continue
        values[attr] = s.value
    if not found:
        raise MetricsFormatError("no llamacpp: metric in the /metrics text")
    return LlamaMetrics(
        **values, spec_accepted_per_position=tuple(sorted(per_pos)), other=tuple(other)
    )


# --- /slots ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotState:
    """One entry of GET /slots. A slot that never ran a task has only the first four fields."""

    id: int
    n_ctx: int | None = None
    is_processing: bool = False
    speculative: bool | None = None
    id_task: int | None = None
    n_prompt_tokens: int | None = None
    n_prompt_tokens_processed: int | None = None
    n_prompt_tokens_cache: int | None = None
    n_decoded: int | None = None
    n_remain: int | None = None
    has_next_token: bool | None = None
    n_predict: int | None = None


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def parse_slots(data: Any) -> tuple[SlotState, ...]:
    """Decoded GET /slots JSON. ``next_token`` may be a one-element list or an object."""
    if not isinstance(data, list):
        raise ValueError("/slots: expected a JSON array of slots")
    slots: list[SlotState] = []
    for item in data:
        if not isinstance(item, dict):
            continue
        slot_id = _int(item.get("id"))
        if slot_id is None:
            continue
        nt = item.get("next_token")
        if isinstance(nt, list):
            nt = nt[0] if nt else None
        if not isinstance(nt, dict):
            nt = {}
        params = item.get("params")
        params = params if isinstance(params, dict) else {}
        slots.append(
            SlotState(
                id=slot_id,
                n_ctx=_int(item.get("n_ctx")),
                is_processing=bool(item.get("is_processing")),
                speculative=_bool(item.get("speculative")),
                id_task=_int(item.get("id_task")),
                n_prompt_tokens=_int(item.get("n_prompt_tokens")),
                n_prompt_tokens_processed=_int(item.get("n_prompt_tokens_processed")),
                n_prompt_tokens_cache=_int(item.get("n_prompt_tokens_cache")),
                n_decoded=_int(nt.get("n_decoded")),
                n_remain=_int(nt.get("n_remain")),
                has_next_token=_bool(nt.get("has_next_token")),
                n_predict=_int(params.get("n_predict")),
            )
        )
    return tuple(slots)


# --- /props ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ServerProps:
    """The parts of GET /props a monitor shows."""

    total_slots: int | None = None
    n_ctx: int | None = None  # per slot (default_generation_settings.n_ctx)
    model_path: str | None = None
    model_alias: str | None = None
    model_ftype: str | None = None
    build_info: str | None = None
    is_sleeping: bool | None = None
    endpoint_slots: bool | None = None
    endpoint_metrics: bool | None = None
    endpoint_props: bool | None = None
    modalities: tuple[str, ...] = ()
    has_chat_template: bool = False


def parse_props(data: Any) -> ServerProps:
    """Decoded GET /props JSON."""
    if not isinstance(data, dict):
        raise ValueError("/props: expected a JSON object")
    dgs = data.get("default_generation_settings")
    dgs = dgs if isinstance(dgs, dict) else {}
    modalities = data.get("modalities")
    mods = (
        tuple(k for k, v in modalities.items() if v is True) if isinstance(modalities, dict) else ()
    )
    return ServerProps(
        total_slots=_int(data.get("total_slots")),
        n_ctx=_int(dgs.get("n_ctx")),
        model_path=_str(data.get("model_path")),
        model_alias=_str(data.get("model_alias")),
        model_ftype=_str(data.get("model_ftype")),
        build_info=_str(data.get("build_info")),
        is_sleeping=_bool(data.get("is_sleeping")),
        endpoint_slots=_bool(data.get("endpoint_slots")),
        endpoint_metrics=_bool(data.get("endpoint_metrics")),
        endpoint_props=_bool(data.get("endpoint_props")),
        modalities=mods,
        has_chat_template=bool(_str(data.get("chat_template"))),
    )


def error_message(data: Any) -> str | None:
    """The message of llama-server's ``{"error": {"code", "message", "type"}}`` bodies."""
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
    return None


# --- rates -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Throughput:
    """Rates over one interval between two polls. ``None`` where the interval cannot say.

    ``generated_tokens`` counts tokens produced in the interval (finished requests from the
    counters plus in-flight ones from the slots); ``generation_tps`` is that over wall time.
    ``decode_tps`` and ``prompt_tps`` are the servers' busy-time speeds of the requests that
    finished in the interval (tokens over the seconds the server spent on them).
    """

    interval_s: float
    generated_tokens: float | None = None
    generation_tps: float | None = None
    decode_tps: float | None = None
    prompt_tokens: float | None = None
    prompt_tps: float | None = None
    busy_slots: int | None = None
    requests_processing: float | None = None
    counter_reset: bool = False
    sources: tuple[str, ...] = ()  # "metrics", "slots"


def _delta(cur: float | None, prev: float | None) -> float | None:
    if cur is None or prev is None:
        return None
    return cur - prev


@dataclass(slots=True)
class _Seen:
    t: float
    metrics: LlamaMetrics | None
    decoded: dict[tuple[int, int], int] = field(default_factory=dict)


class ThroughputTracker:
    """Feed it each poll's metrics and slots (either may be None); get rates per interval."""

    def __init__(self) -> None:
        self._prev: _Seen | None = None
        self._seen_unmatched = 0.0

    def reset(self) -> None:
        self._prev = None
        self._seen_unmatched = 0.0

    def update(
        self,
        t: float,
        metrics: LlamaMetrics | None,
        slots: Sequence[SlotState] | None,
    ) -> Throughput | None:
        """Rates since the previous update (``t`` in monotonic seconds); None on the first."""
        decoded = _decoded_by_task(slots) if slots is not None else {}
        cur = _Seen(t=t, metrics=metrics, decoded=decoded)
        prev, self._prev = self._prev, cur
        if prev is None or t <= prev.t:
            return None
        dt = t - prev.t
        sources: list[str] = []
        reset = False
        finished_tokens: float | None = None
        decode_tps = prompt_tps = prompt_tokens = None
        if metrics is not None and prev.metrics is not None:
            pm = prev.metrics
            d_tokens = _delta(metrics.tokens_predicted_total, pm.tokens_predicted_total)
            d_gen_s = _delta(
                metrics.tokens_predicted_seconds_total, pm.tokens_predicted_seconds_total
            )
            d_prompt = _delta(metrics.prompt_tokens_total, pm.prompt_tokens_total)
            d_prompt_s = _delta(metrics.prompt_seconds_total, pm.prompt_seconds_total)
            if any(d is not None and d < 0 for d in (d_tokens, d_gen_s, d_prompt, d_prompt_s)):
                reset = True  # the server restarted: its counters began again
                self._seen_unmatched = 0.0
            else:
                sources.append("metrics")
                finished_tokens = d_tokens
                if d_tokens is not None and d_gen_s:
                    decode_tps = d_tokens / d_gen_s
                prompt_tokens = d_prompt
                if d_prompt is not None and d_prompt_s:
                    prompt_tps = d_prompt / d_prompt_s
        generated: float | None = None
        if slots is not None and not reset:
            sources.append("slots")
            in_flight = 0
            for key, n in decoded.items():
                before = prev.decoded.get(key, 0)
                in_flight += max(0, n - before)
            # Tasks that were decoding at the last poll and are gone now have finished; the
            # counters will hold all their tokens, of which the polls already counted some.
            # /metrics and /slots are read at different instants, so a counter may catch up
            # one poll late: what was seen stays owed until the counters pass it.
            self._seen_unmatched += sum(n for key, n in prev.decoded.items() if key not in decoded)
            if finished_tokens is not None:
                new_finished = max(0.0, finished_tokens - self._seen_unmatched)
                self._seen_unmatched = max(0.0, self._seen_unmatched - finished_tokens)
                generated = in_flight + new_finished
            else:
                self._seen_unmatched = 0.0
                generated = float(in_flight)
        elif finished_tokens is not None:
            generated = finished_tokens
        busy = sum(1 for s in slots if s.is_processing) if slots is not None else None
        return Throughput(
            interval_s=dt,
            generated_tokens=generated,
            generation_tps=generated / dt if generated is not None else None,
            decode_tps=decode_tps,
            prompt_tokens=prompt_tokens,
            prompt_tps=prompt_tps,
            busy_slots=busy,
            requests_processing=metrics.requests_processing if metrics is not None else None,
            counter_reset=reset,
            sources=tuple(sources),
        )


def _decoded_by_task(slots: Sequence[SlotState]) -> dict[tuple[int, int], int]:
    """n_decoded of each slot's running task, keyed by (slot, task)."""
    out: dict[tuple[int, int], int] = {}
    for s in slots:
        if s.is_processing and s.id_task is not None and s.n_decoded is not None:
            out[(s.id, s.id_task)] = s.n_decoded
    return out

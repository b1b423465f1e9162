"""llama-server's own timing of each served request, from its log: the two ``print_timing``
lines it writes when a request finishes (``tools/server/server-context.cpp``)::

    slot print_timing: id  3 | task 2 | prompt eval time =   7.38 ms /  22 tokens (...)
    slot print_timing: id  3 | task 2 |        eval time =   1.73 ms /   6 tokens (...)

at the default verbosity and in ``--log-jsonl`` logs alike. Rates from /metrics counters fall
to 0 between requests; these are what the last request got. Before them, the cells a
request's prompt found cached (its prompt eval times only the rest, from that depth)::

    slot operator(): id  3 | task 2 | cached n_tokens = 1501, memory_seq_rm [1501, end)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_TIMING = re.compile(
    r"print_timing: id\s+(?P<slot>\d+)\s*\|\s*task\s+(?P<task>\d+)\s*\|\s*"
    r"(?P<kind>prompt eval|eval) time\s*=\s*(?P<ms>[\d.]+)\s*ms\s*/\s*(?P<n>\d+)\s*tokens"
)

_CACHED = re.compile(r"task\s+(?P<task>\d+)\s*\|\s*cached n_tokens\s*=\s*(?P<n>\d+)")


def _message(line: str) -> str | None:
    """A line's message: the line, or a --log-jsonl record's ``msg``."""
    if not line.lstrip().startswith("{"):
        return line
    try:
        return str(json.loads(line).get("msg", ""))
    except (ValueError, AttributeError):
        return None


def parse_cached(line: str) -> tuple[int, int] | None:
    """(task, cells its prompt found cached) where a line says it, else None."""
    if "cached n_tokens" not in line:
        return None
    m = _CACHED.search(_message(line) or "")
    return (int(m.group("task")), int(m.group("n"))) if m else None


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """One request's prompt processing or generation, as the server timed it."""

    task: int
    prompt: bool  # the prompt's processing; False: the generated tokens
    tokens: int
    ms: float

    @property
    def tps(self) -> float:
        return self.tokens / (self.ms / 1000.0) if self.ms > 0 else 0.0

    @property
    def rate(self) -> float | None:
        """Tokens per second, or None where there is too little to say (no tokens, no time)."""
        return self.tps if self.ms > 0 and self.tokens > 0 else None


def parse_timing(line: str) -> RequestTiming | None:
    """The timing a log line carries, or None (most lines carry none)."""
    if "print_timing" not in line:
        return None
    text = _message(line)
    if text is None:
        return None
    m = _TIMING.search(text)
    if m is None:
        return None
    try:
        return RequestTiming(
            int(m.group("task")),
            m.group("kind") == "prompt eval",
            int(m.group("n")),
            float(m.group("ms")),
        )
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class RequestTimings:
    """The prompt and the generation of one request, as llama-server timed them."""

    prompt_tokens: int
    prompt_ms: float
    prompt_tps: float | None  # None: too few tokens to say
    gen_tokens: int
    gen_ms: float
    gen_tps: float | None

    def line(self) -> str:
        """``prompt 22 tokens at 2979 tok/s, generated 6 tokens at 2889 tok/s``."""
        return (
            f"prompt {self.prompt_tokens} tokens at {_rate(self.prompt_tps)}, "
            f"generated {self.gen_tokens} tokens at {_rate(self.gen_tps)}"
        )


def _rate(tps: float | None) -> str:
    return "- tok/s" if tps is None else f"{tps:.0f} tok/s"


class TimingReader:
    """Reads log lines; a request's timings come out once both of its lines are read."""

    def __init__(self) -> None:
        self._prompt: dict[int, RequestTiming] = {}

    def feed(self, line: str) -> RequestTimings | None:
        t = parse_timing(line)
        if t is None:
            return None
        if t.prompt:
            self._prompt = {t.task: t}  # one request's two lines follow each other
            return None
        p = self._prompt.pop(t.task, None)
        if p is None:
            return None
        return RequestTimings(p.tokens, p.ms, p.rate, t.tokens, t.ms, t.rate)

"""A request's own speed, from the two lines llama-server logs when a request ends::

    slot print_timing: id  3 | task 2 | prompt eval time =   7.38 ms /  22 tokens (...,  2979.01 tokens per second)
    slot print_timing: id  3 | task 2 |        eval time =   1.73 ms /   6 tokens (...,  2888.50 tokens per second)

(``tools/server/server-context.cpp``, print_timings). Rates from /metrics counters fall to 0
between requests; these are what the last request got.
"""  # noqa: E501

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_TIMING = re.compile(
    r"(?P<kind>prompt eval|eval) time =\s*(?P<ms>[0-9.]+) ms /\s*(?P<n>\d+) (?:tokens|runs)"
    r"\s*\(\s*[0-9.a-z]+ ms per token,\s*(?P<tps>[0-9.]+|inf|nan) tokens per second\)"
)
_TASK = re.compile(r"\btask\s+(\d+)")


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


def _tps(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


class TimingReader:
    """Reads log lines; a request's timings come out once both of its lines are read."""

    def __init__(self) -> None:
        self._prompt: dict[str, tuple[int, float, float | None]] = {}

    def feed(self, line: str) -> RequestTimings | None:
        m = _TIMING.search(line)
        if m is None:
            return None
        task_match = _TASK.search(line, 0, m.start())
        task = task_match.group(1) if task_match else ""
        n, ms, tps = int(m.group("n")), float(m.group("ms")), _tps(m.group("tps"))
        if m.group("kind") == "prompt eval":
            self._prompt = {task: (n, ms, tps)}  # one request's lines follow each other
            return None
        prompt = self._prompt.pop(task, None)
        if prompt is None:
            return None
        return RequestTimings(prompt[0], prompt[1], prompt[2], n, ms, tps)

"""llama-server's own timing of each served request, from its log: the ``print_timing`` lines
it writes when a request finishes (``prompt eval time = X ms / N tokens`` for the prompt it
processed, ``eval time = X ms / N tokens`` for the tokens it generated), at the default
verbosity and in ``--log-jsonl`` logs alike."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

_TIMING = re.compile(
    r"print_timing: id\s+(?P<slot>\d+)\s*\|\s*task\s+(?P<task>\d+)\s*\|\s*"
    r"(?P<kind>prompt eval|eval) time\s*=\s*(?P<ms>[\d.]+)\s*ms\s*/\s*(?P<n>\d+)\s*tokens"
)


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


def parse_timing(line: str) -> RequestTiming | None:
    """The timing a log line carries, or None (most lines carry none)."""
    if "print_timing" not in line:
        return None
    text = line
    if line.lstrip().startswith("{"):
        try:
            text = str(json.loads(line).get("msg", ""))
        except (ValueError, AttributeError):
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

"""Measured against predicted for the requests a llama-server serves: its own timing of each
request (:mod:`lltui.core.llama.timings`) beside the speed model's prediction of the same
command at that request's size (the prompt's tokens; decode at the depth the request
reached), and the difference. A large miss is worth keeping as a calibration point."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lltui.core.llama.timings import RequestTiming
from lltui.core.speed.calibration import miss, miss_text

MIN_PROMPT_TOKENS = 64  # shorter prompts time launches and syncs, not throughput
MIN_GEN_TOKENS = 16
LARGE_MISS = 0.3  # measured this far from predicted (either way): a calibration point


@dataclass(frozen=True, slots=True)
class SpeedCheck:
    """One served request's speed beside the prediction."""

    task: int
    prompt: bool  # prompt processing; False: generation
    tokens: int
    depth: int  # cells in the context when it ran (generation: half way through)
    measured_tps: float
    predicted_tps: float

    @property
    def diff(self) -> float:
        """Measured over predicted, less one (+0.1: 10% faster than predicted)."""
        return miss(self.measured_tps, self.predicted_tps) or 0.0

    @property
    def large_miss(self) -> bool:
        return abs(self.diff) >= LARGE_MISS

    def line(self) -> str:
        what = "prompt" if self.prompt else "generation"
        m, p = self.measured_tps, self.predicted_tps
        return f"{what} {self.tokens} tokens: {m:.1f} t/s, {p:.1f} predicted: {miss_text(m, p)}"


class ServedSpeeds:
    """Pairs each request's prompt and generation timings (the prompt's size sets the depth
    generation ran at) and checks each against ``predict(prompt, depth, tokens)``, which
    gives the predicted tokens/s (None: no prediction)."""

    def __init__(self, predict: Callable[[bool, int, int], float | None]) -> None:
        self._predict = predict
        self._prompt_tokens: dict[int, int] = {}

    def feed(self, timing: RequestTiming) -> SpeedCheck | None:
        if timing.prompt:
            self._prompt_tokens[timing.task] = timing.tokens
            if len(self._prompt_tokens) > 256:
                self._prompt_tokens.pop(next(iter(self._prompt_tokens)))
            if timing.tokens < MIN_PROMPT_TOKENS:
                return None
            depth = 0
        else:
            if timing.tokens < MIN_GEN_TOKENS:
                return None
            depth = self._prompt_tokens.pop(timing.task, 0) + timing.tokens // 2
        predicted = self._predict(timing.prompt, depth, timing.tokens)
        if not predicted or timing.tps <= 0:
            return None
        return SpeedCheck(timing.task, timing.prompt, timing.tokens, depth, timing.tps, predicted)

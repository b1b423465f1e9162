"""Measured against predicted for the requests a llama-server serves: its own timing of each
request (:mod:`lltui.core.llama.timings`) beside the speed model's prediction of the same
command at that request's size (the prompt's tokens; decode at the depth the request
reached), and the difference.

A served request may calibrate the rig only when what it measured is the work the speed
model costs (:func:`refusal` says why not):

- the host was otherwise idle: processes other than the server and lltui took at most
  10% of all its CPUs' time over the request (unknown: refused;
  :func:`lltui.core.speed.calibration.busy_host`, as for llama-bench's points);
- no other process kept a GPU the server runs on busy (at most 10% of its
  SM time, where the monitor knows it);
- the request ran alone on the server (another slot's request halves its speed);
- the model is large enough for the speed model to apply
  (:func:`lltui.core.speed.calibration.too_small`, as for llama-bench's points). By the
  speed model's numbers, generation on a current GPU passes from a 1B model at 8 bits or a
  3B at 4 bits (35-60 MB of weights per layer); on a CPU from a few MB per layer (a 0.5B
  model); prompts, compute-bound, pass sooner. A toy model never calibrates generation."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from lltui.core.llama.timings import RequestTiming
from lltui.core.speed.calibration import busy_gpu, busy_host, miss, miss_text, too_small

MIN_PROMPT_TOKENS = 64  # shorter prompts time launches and syncs, not throughput
MIN_GEN_TOKENS = 16
LARGE_MISS = 0.3  # measured this far from predicted (either way): worth a look
# llama-server's slot lines (default verbosity; plain and --log-jsonl logs alike)
_STARTED = re.compile(r"\|\s*task\s+(\d+)\s*\|\s*processing task")
_STOPPED = re.compile(r"\|\s*task\s+(\d+)\s*\|\s*stop processing")


@dataclass(frozen=True, slots=True)
class SpeedCheck:
    """One served request's speed beside the prediction."""

    task: int
    prompt: bool  # prompt processing; False: generation
    tokens: int
    depth: int  # cells in the context when it ran (generation: half way through)
    measured_tps: float
    predicted_tps: float
    calibration: str | None = None  # what became of it as a calibration point, in words
    kept: bool = False  # kept as a calibration point of this rig
    model: str | None = None  # a router's model that served it (None: the one server's)

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
        what = f"{self.model}: {what}" if self.model is not None else what
        return f"{what} {self.tokens} tokens: {m:.1f} t/s, {p:.1f} predicted: {miss_text(m, p)}"


class ServedSpeeds:
    """Pairs each request's prompt and generation timings (the prompt's size sets the depth
    generation ran at) and checks each against ``predict(prompt, depth, tokens)``, which
    gives the predicted tokens/s (None: no prediction)."""

    def __init__(self, predict: Callable[[bool, int, int], float | None]) -> None:
        self._predict = predict
        self._prompt_tokens: dict[int, int] = {}
        self._cached: dict[int, int] = {}  # task -> cells its prompt found cached

    def cached(self, task: int, n: int) -> None:
        """A request's prompt found ``n`` cells cached: its prompt runs from that depth (a
        chat's next turn was judged at depth 0, its generation 1500 cells too shallow)."""
        self._cached[task] = n
        if len(self._cached) > 256:
            self._cached.pop(next(iter(self._cached)))

    def feed(self, timing: RequestTiming) -> SpeedCheck | None:
        if timing.prompt:
            depth = self._cached.pop(timing.task, 0)
            self._prompt_tokens[timing.task] = depth + timing.tokens
            if len(self._prompt_tokens) > 256:
                self._prompt_tokens.pop(next(iter(self._prompt_tokens)))
            if timing.tokens < MIN_PROMPT_TOKENS:
                return None
        else:
            if timing.tokens < MIN_GEN_TOKENS:
                return None
            depth = self._prompt_tokens.pop(timing.task, 0) + timing.tokens // 2
        predicted = self._predict(timing.prompt, depth, timing.tokens)
        if not predicted or timing.tps <= 0:
            return None
        return SpeedCheck(timing.task, timing.prompt, timing.tokens, depth, timing.tps, predicted)


@dataclass(frozen=True, slots=True)
class ServeConditions:
    """What else went on while a request was served."""

    host_busy: float | None  # share of all CPUs' time other processes took; None: unknown
    gpu_busy: float | None  # the most SM time (%) another process took on its GPUs; None: unknown
    shared: bool  # another request ran on the server at the same time
    fixed_share: float  # of the predicted time, the speed model's fixed costs


def refusal(c: ServeConditions) -> str | None:
    """Why a served request cannot calibrate this rig, in words (None: it can). A model too
    small comes first, as for llama-bench's points: no other request of it calibrates either
    (a toy model's request is also too short for the host's load to be told)."""
    small = too_small(c.fixed_share)
    if small is not None:
        return small
    busy = busy_host(c.host_busy, "the request")
    if busy is not None:
        return busy
    gpu = busy_gpu(c.gpu_busy)
    if gpu is not None:
        return gpu
    if c.shared:
        return "another request was served at the same time"
    return None


class ServedTasks:
    """When each request began and whether another ran beside it, from llama-server's slot
    lines (``processing task``, ``stop processing``); ``now`` is the caller's clock."""

    def __init__(self) -> None:
        self._running: dict[int, float] = {}  # task -> when its start line came
        self._shared: set[int] = set()
        self._ended: dict[int, tuple[float, bool]] = {}  # the last few, for late timing lines

    def feed(self, line: str, now: float) -> bool:
        """Read one log line; True when it started a request."""
        if "processing task" in line and (m := _STARTED.search(line)):
            task = int(m.group(1))
            if self._running:
                self._shared.update(self._running)
                self._shared.add(task)
            self._running[task] = now
            self._bound()
            return True
        if "stop processing" in line and (m := _STOPPED.search(line)):
            self.done(int(m.group(1)))
        return False

    def done(self, task: int) -> None:
        """``task`` finished (its release line, or its last timing line: a release line
        lost must not leave every later request looking shared)."""
        if task in self._running:
            self._ended[task] = (self._running.pop(task), task in self._shared)
            self._shared.discard(task)
            self._bound()

    def window(self, task: int) -> tuple[float | None, bool]:
        """When ``task`` began (None: its start was not seen) and whether it was shared."""
        if task in self._running:
            return self._running[task], task in self._shared
        return self._ended.get(task, (None, False))

    def _bound(self) -> None:
        for kept in (self._running, self._ended):
            while len(kept) > 64:
                kept.pop(next(iter(kept)))
        self._shared &= set(self._running)

"""``lltui quant ... --best GOAL``: across quantizations, the best command line of each, ranked.

Each quantization (the GGUF files a repository offers, or the types llama-quantize would make
of a model) gets :func:`lltui.core.fit.best.best_configs`' first line for the goal; the
quantizations are then ranked:

- ``context``: the largest context, then quality (bits per weight, up to Q8_0's 8.5: beyond
  it, none that shows; then the K/V cache type), then speed;
- ``speed``: the fastest decode at the context asked for, then quality;
- ``gpu-only``: nothing on the CPU, the largest context, then quality, then speed.

A type above the source's own precision (F32 of an F16 model, Q8_0 of a Q4_0 one) adds
nothing: it comes after every other that fits. Those where nothing fits come last, as do those
that could not be read (with why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.fit.best import Candidate, Progress, best_configs, check_goal, speed_tier
from lltui.core.gguf.model import GgufModel
from lltui.core.memory.common import FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.results import FitOptions


@dataclass(frozen=True, slots=True)
class QuantOption:
    """One quantization to rank: its name, the file it is (empty: one llama-quantize would
    write), its size, and its header (None with ``error``: it could not be read)."""

    quant: str
    file: str
    file_bytes: int | None
    model: GgufModel | None
    error: str = ""
    above_source: str | None = None  # a type that adds nothing over the source's weights
    room: tuple[DeviceSpec, ...] | None = None  # the devices less its own projector's; None: all


@dataclass(frozen=True, slots=True)
class QuantChoice:
    option: QuantOption
    bits_per_weight: float | None
    best: Candidate | None  # None: nothing this search tried fits (or ``option.error``)
    error: str = ""


def bits_per_weight(model: GgufModel) -> float | None:
    """Tensor bits per parameter, as llama.cpp prints ``file size`` in BPW."""
    return model.tensors_nbytes * 8 / model.n_params if model.n_params else None


def _choice(
    opt: QuantOption,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None,
    goal: str,
) -> QuantChoice:
    if opt.model is None:
        return QuantChoice(opt, None, None, opt.error or "not read")
    try:
        bpw = bits_per_weight(opt.model)
        # the K/V cache and ubatch as given: the quantization is what is chosen here (fit
        # --best on the one chosen tries the rest); the -ts sized to the GPUs' room is tried,
        # or a type that fits only with it would be called one that does not fit
        found = best_configs(
            opt.model,
            settings,
            devices if opt.room is None else opt.room,
            options,
            goal,
            limit=1,
            kv_types=(),
            small_ubatch=False,
            splits=True,
        )
    except FitError as exc:
        return QuantChoice(opt, None, None, str(exc))
    return QuantChoice(opt, bpw, found[0] if found else None)


LOSSLESS_BPW = 8.5  # Q8_0: more bits than this buy no quality that shows


def _kv_loss(flags: Sequence[str]) -> int:
    """Quality the K/V cache type gives up: 0 for f16, 1 for q8_0, 2 for q4_0."""
    types = {flags[i + 1] for i, f in enumerate(flags[:-1]) if f in ("-ctk", "-ctv")}
    return 2 if "q4_0" in types else 1 if "q8_0" in types else 0


def _key(c: QuantChoice, goal: str, fastest: float) -> tuple[float, ...]:
    """The goal first, then quality: bits per weight (up to Q8_0's), then the K/V type.
    ``fastest``: the fastest decode of all the choices (speeds within 2 % of each other
    rank alike)."""
    b = c.best
    if b is None:
        return (1, 0, 0, 0, 0)
    quality = -round(min(c.bits_per_weight or 0.0, LOSSLESS_BPW), 2)
    speed = speed_tier(b.decode_tps, fastest)
    if goal == "speed":
        return (0, speed, quality, _kv_loss(b.flags), -b.max_ctx)
    return (0, -b.max_ctx, quality, _kv_loss(b.flags), speed)


def rank_quants(
    opts: Sequence[QuantOption],
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
    goal: str = "context",
    *,
    progress: Progress | None = None,
) -> list[QuantChoice]:
    """Every quantization with its best command line for ``goal``, best first; ValueError
    for a goal that is not one of :data:`lltui.core.fit.best.GOALS`. ``progress`` is told
    (quantizations done, all of them)."""
    goal = check_goal(goal)
    choices = []
    for i, o in enumerate(opts):
        choices.append(_choice(o, settings, devices, options, goal))
        if progress is not None:
            progress(i + 1, len(opts))
    fastest = max((c.best.decode_tps for c in choices if c.best is not None), default=0.0)
    # a type above the source's own precision adds nothing: after every real quant
    return sorted(
        choices,
        key=lambda c: (bool(c.error), bool(c.option.above_source), *_key(c, goal, fastest)),
    )


def computed_options(model: GgufModel) -> list[QuantOption]:
    """The types llama-quantize would make of ``model`` (see :mod:`.quant`), as options."""
    from lltui.core.quant.sizes import as_quantized, quant_sizes, quant_source, relevant_ftypes

    src = quant_source(model)
    out = []
    for row in quant_sizes(src, relevant_ftypes(src)[0]):
        name = row.name + ("*" if row.requires_imatrix else "")
        if row.error:
            out.append(QuantOption(name, "", None, None, row.error))
        else:
            quant = as_quantized(model, row)
            out.append(QuantOption(name, "", row.file_bytes, quant, above_source=row.above_source))
    return out

"""Every llama-quantize type of a model, placed on the devices: the file size from
llama-quantize's own rules, and whether it fits and how much context it leaves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.fit.estimate import ExtraModels, estimate
from lltui.core.gguf.model import GgufModel
from lltui.core.memory.common import FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams, read_hparams
from lltui.core.memory.results import FitOptions, FitResult
from lltui.core.quant.sizes import (
    QuantRow,
    as_quantized,
    quant_sizes,
    quant_source,
    relevant_ftypes,
)


@dataclass(frozen=True, slots=True)
class QuantFit:
    """One row of the quant table: a type's sizes and, where it was placed, its estimate."""

    row: QuantRow
    result: FitResult | None  # None when llama-quantize would refuse or the estimate fails
    error: str | None = None

    @property
    def fits(self) -> bool | None:
        """Whether it fits; None where it cannot be told: no estimate, or a device's free
        memory is not known (FitResult.fits_told)."""
        return None if self.result is None else self.result.fits_told

    @property
    def fits_word(self) -> str:
        """yes, no, or ? where it cannot be told (the table's fits column)."""
        return "?" if self.fits is None else ("yes" if self.fits else "no")

    @property
    def unknown_on(self) -> list[str]:
        """The devices whose free memory is not known."""
        return [] if self.result is None else self.result.unknown_on

    @property
    def max_ctx(self) -> int | None:
        return None if self.result is None else self.result.max_ctx

    @property
    def decode_tps(self) -> float | None:
        speed = self.result.speed if self.result else None
        return speed.decode_tps if speed else None

    def to_json(self) -> dict[str, Any]:
        out = dict(self.row.as_dict())
        out["fits"] = self.fits
        if self.unknown_on:
            out["fits_unknown_on"] = self.unknown_on
        out["max_ctx"] = self.max_ctx
        speed = self.result.speed if self.result is not None else None
        out["speed"] = (
            {
                "decode_tps": round(speed.decode_tps, 1),
                "prefill_tps": round(speed.prefill_tps, 1),
                "bound": speed.bound,
                "calibrated": speed.calibrated,  # this rig's own measurements, in words
            }
            if speed
            else None
        )
        if self.result is not None:
            from lltui.core.fit.report import device_to_json  # JSON output only

            n_all = self.result.model.n_layer
            out["devices"] = [device_to_json(d, n_all) for d in self.result.devices]
        else:
            out["devices"] = []
        if self.error and not out.get("error"):
            out["error"] = self.error
        return out


def quant_table(
    model: GgufModel,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    options: FitOptions | None = None,
    extra: ExtraModels | None = None,
    on_row: Callable[[int, int], None] | None = None,
) -> list[QuantFit]:
    """One entry per llama-quantize type that makes sense for the model (see
    :func:`relevant_ftypes`), smallest file first. Each is placed, its largest context found
    and its speed predicted; the flags that would make it fit are not searched for.
    FitError: settings llama.cpp refuses (whatever the type), as :func:`estimate` raises.
    ``extra``: the draft, projector and adapters loaded beside every one of them.
    ``on_row(done, total)`` is told after each type (a progress line)."""
    opts = replace(options or FitOptions(), suggest=False)
    try:
        # a quant's header differs from the model's in its type and split keys alone
        hp: Hparams | None = read_hparams(model)
    except FitError:
        hp = None  # the first estimate raises why
    src = quant_source(model)
    ftypes, _skipped = relevant_ftypes(src)
    out = []
    rows = quant_sizes(src, ftypes)
    for row in rows:
        out.append(_quant_fit(model, row, settings, devices, opts, extra, hp))
        if on_row is not None:
            on_row(len(out), len(rows))
    return sorted(out, key=lambda q: (q.row.file_bytes == 0, q.row.file_bytes))


def _quant_fit(
    model: GgufModel,
    row: QuantRow,
    settings: LlamaArgs,
    devices: Sequence[DeviceSpec],
    opts: FitOptions,
    extra: ExtraModels | None,
    hp: Hparams | None,
) -> QuantFit:
    if row.error:
        return QuantFit(row, None, row.error)
    # settings llama.cpp refuses (FitError) are refused for every type alike: raised
    quant = as_quantized(model, row)
    return QuantFit(row, estimate(quant, settings, devices, opts, extra, hparams=hp))


def skipped_types(model: GgufModel) -> list[tuple[str, str]]:
    """(type, why) for the llama-quantize types the table leaves out for this model."""
    return relevant_ftypes(quant_source(model))[1]


def best_fitting(table: Sequence[QuantFit]) -> QuantFit | None:
    """The largest file that fits: the most bits the devices can hold (a type above the
    source's own precision holds no more than the source: never that one)."""
    fitting = [q for q in table if q.fits and not q.row.above_source]
    return max(fitting, key=lambda q: q.row.file_bytes) if fitting else None

"""Values read in one ``nvmlDeviceGetFieldValues`` call where the driver answers it, each
with the function to call on its own where it does not."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lltui.core.text import error_text
from lltui.sources.gpu.nvml.calls import FAILED, OK, GpuLost, NvmlCalls
from lltui.sources.gpu.nvml.codes import (
    AGGREGATE_ECC,
    ERR_FUNCTION_NOT_FOUND,
    ERR_GPU_IS_LOST,
    ERR_INVALID_ARGUMENT,
    ERR_NO_PERMISSION,
    ERR_NOT_SUPPORTED,
    FI_ECC_DBE_AGG_TOTAL,
    FI_ECC_DBE_VOL_TOTAL,
    FI_ECC_SBE_AGG_TOTAL,
    FI_ECC_SBE_VOL_TOTAL,
    FI_MEMORY_TEMP,
    FI_NVLINK_LINK_COUNT,
    FI_NVLINK_THROUGHPUT_DATA_RX,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    FI_POWER_AVERAGE,
    FI_POWER_CURRENT_LIMIT,
    FI_RETIRED_DBE,
    FI_RETIRED_SBE,
    FI_TOTAL_ENERGY_CONSUMPTION,
    MEMORY_ERROR_CORRECTED,
    MEMORY_ERROR_UNCORRECTED,
    NVML_SUCCESS,
    RETIRED_BY_DBE,
    RETIRED_BY_SBE,
    VOLATILE_ECC,
    mw_to_w,
)
from lltui.sources.gpu.nvml.state import GpuState

# A batched field answered per field with one of these will not come from the batch.
NOT_BATCHABLE = frozenset(
    {ERR_NOT_SUPPORTED, ERR_NO_PERMISSION, ERR_INVALID_ARGUMENT, ERR_FUNCTION_NOT_FOUND}
)


@dataclass(frozen=True, slots=True)
class Field:
    """One value that can come from ``nvmlDeviceGetFieldValues`` or from its own function."""

    key: str
    field_id: int
    convert: Callable[[Any], Any]
    fallback: str | None = None  # function to call when the batch cannot answer
    fallback_args: tuple[Any, ...] = ()
    fallback_convert: Callable[[Any], Any] | None = None
    fallback_on_slow_ttl: bool = False  # read on the slow TTL when not batched


POWER_LIMIT_FIELD = Field(
    "power_limit",
    FI_POWER_CURRENT_LIMIT,
    mw_to_w,
    "nvmlDeviceGetEnforcedPowerLimit",
    fallback_on_slow_ttl=True,
)
FAST_FIELDS = (
    Field("energy", FI_TOTAL_ENERGY_CONSUMPTION, int, "nvmlDeviceGetTotalEnergyConsumption"),
    Field("power", FI_POWER_AVERAGE, mw_to_w, "nvmlDeviceGetPowerUsage"),
    POWER_LIMIT_FIELD,
)
ECC_FIELDS = (
    Field(
        "ecc_corrected",
        FI_ECC_SBE_VOL_TOTAL,
        int,
        "nvmlDeviceGetTotalEccErrors",
        (MEMORY_ERROR_CORRECTED, VOLATILE_ECC),
    ),
    Field(
        "ecc_uncorrected",
        FI_ECC_DBE_VOL_TOTAL,
        int,
        "nvmlDeviceGetTotalEccErrors",
        (MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC),
    ),
    Field(
        "ecc_agg_corrected",
        FI_ECC_SBE_AGG_TOTAL,
        int,
        "nvmlDeviceGetTotalEccErrors",
        (MEMORY_ERROR_CORRECTED, AGGREGATE_ECC),
    ),
    Field(
        "ecc_agg_uncorrected",
        FI_ECC_DBE_AGG_TOTAL,
        int,
        "nvmlDeviceGetTotalEccErrors",
        (MEMORY_ERROR_UNCORRECTED, AGGREGATE_ECC),
    ),
)
SLOW_FIELDS = (
    *ECC_FIELDS,
    Field("mem_temp", FI_MEMORY_TEMP, float),  # HBM's own sensor; NOT_SUPPORTED on GDDR
    Field("retired_sbe", FI_RETIRED_SBE, int, "nvmlDeviceGetRetiredPages", (RETIRED_BY_SBE,), len),
    Field("retired_dbe", FI_RETIRED_DBE, int, "nvmlDeviceGetRetiredPages", (RETIRED_BY_DBE,), len),
)
NVLINK_FIELDS = (
    Field("nvlink_tx", FI_NVLINK_THROUGHPUT_DATA_TX, int),
    Field("nvlink_rx", FI_NVLINK_THROUGHPUT_DATA_RX, int),
)
LINK_COUNT_FIELD = Field("nvlink_count", FI_NVLINK_LINK_COUNT, int)


def field_number(fv: Any) -> float | int:
    """The value of one nvmlFieldValue_t, read by its valueType."""
    member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    value_type = int(fv.valueType)
    if not 0 <= value_type < len(member):
        raise ValueError(f"unknown field value type {value_type}")
    return getattr(fv.value, member[value_type])


def read_fields(
    calls: NvmlCalls, g: GpuState, fields: Iterable[Field]
) -> tuple[dict[str, Any], list[Field]]:
    """Values the batch gave, by field key, and the fields it could not give (to read
    another way)."""
    wanted = [f for f in fields if f.key not in g.skip]
    batched = [f for f in wanted if f.key not in g.unbatched] if g.batch_ok else []
    out: dict[str, Any] = {}
    if batched:
        outcome, raw = calls.attempt(
            g, "nvmlDeviceGetFieldValues", ([f.field_id for f in batched],), {}
        )
        if outcome == OK:
            try:
                _take_fields(g, batched, raw, out)
            except GpuLost:
                raise
            except Exception as exc:
                g.errors.append(f"field values: unreadable ({error_text(exc)})")
                out.update(dict.fromkeys((f.key for f in batched), None))
        elif outcome == FAILED:
            g.errors.append(f"field values: {raw}")
            out.update(dict.fromkeys((f.key for f in batched), None))
        else:
            g.batch_ok = False  # this driver or GPU does not batch: one call per field
    pending = [f for f in wanted if f.key not in out]
    return out, pending


def _take_fields(g: GpuState, batched: list[Field], raw: Any, out: dict[str, Any]) -> None:
    answers = list(raw)
    if len(answers) != len(batched):
        raise ValueError(f"{len(answers)} answers for {len(batched)} fields")
    for f, fv in zip(batched, answers, strict=True):
        rc = int(fv.nvmlReturn)
        if rc == NVML_SUCCESS:
            try:
                out[f.key] = f.convert(field_number(fv))
            except Exception as exc:
                g.errors.append(f"{f.key}: unreadable answer ({exc})")
                out[f.key] = None
        elif rc == ERR_GPU_IS_LOST:
            raise GpuLost()
        elif rc in NOT_BATCHABLE:
            g.unbatched.add(f.key)
        else:
            g.errors.append(f"{f.key}: NVML error {rc}")
            out[f.key] = None


def fallback(calls: NvmlCalls, g: GpuState, f: Field) -> Any:
    """One field read with its own function, when the batch cannot give it."""
    if f.fallback is None:
        g.skip.add(f.key)
        return None
    convert = f.fallback_convert or f.convert
    return calls.call(g, f.key, f.fallback, *f.fallback_args, convert=convert)

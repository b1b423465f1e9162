"""One NVML call for one GPU, with what a refusal means.

Each call ends in one of four outcomes. A GPU remembers the fields it will not answer (and
which version of a function answered), so a refused call is not repeated every tick.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lltui.core.text import error_text
from lltui.sources.gpu.nvml.codes import (
    ERR_ARGUMENT_VERSION_MISMATCH,
    ERR_FUNCTION_NOT_FOUND,
    ERR_GPU_IS_LOST,
    ERR_NO_PERMISSION,
    ERR_NOT_SUPPORTED,
    error_code,
    error_words,
)
from lltui.sources.gpu.nvml.state import GpuState


class GpuLost(Exception):
    """Raised inside one GPU's read when NVML says the GPU is lost."""


# Outcomes of one NVML call.
OK = "ok"
UNSUPPORTED = "unsupported"  # NOT_SUPPORTED / NO_PERMISSION: ask no more
MISSING = "missing"  # the binding or the driver lacks the function (or this version of it)
FAILED = "failed"  # anything else: None this tick, try again next tick
EMPTY = "empty"  # a code the caller reads as "nothing to report" (no samples yet)

# (function, args, kwargs) from newest to oldest.
Variant = tuple[str, tuple[Any, ...], dict[str, Any]]


def memory_variants(nv: Any) -> tuple[Variant, ...]:
    """Memory info v2 (with ``reserved``) where the binding has it, then v1."""
    newest: tuple[Variant, ...] = (
        (("nvmlDeviceGetMemoryInfo", (), {"version": nv.nvmlMemory_v2}),)
        if hasattr(nv, "nvmlMemory_v2")
        else ()
    )
    return (*newest, ("nvmlDeviceGetMemoryInfo", (), {}))


class NvmlCalls:
    """Calls into one initialised binding. ``on_missing`` runs when a function turns out to
    be missing from the binding or the driver (the source shows a hint once)."""

    def __init__(self, nv: Any, on_missing: Callable[[], None]) -> None:
        self.nv = nv
        self._nvml_error: type[BaseException] = nv.NVMLError
        mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
        self._mismatch_error: tuple[type[BaseException], ...] = (
            (mismatch,) if isinstance(mismatch, type) else ()
        )
        self._on_missing = on_missing
        self.memory_variants = memory_variants(nv)

    def attempt(
        self,
        g: GpuState,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        empty_on: frozenset[int] = frozenset(),
    ) -> tuple[str, Any]:
        """Call ``name(handle, *args, **kwargs)``; (outcome, value or error words). An NVML
        error whose code is in ``empty_on`` is the EMPTY outcome."""
        fn = getattr(self.nv, name, None)
        if fn is None:
            return MISSING, None
        try:
            return OK, fn(g.handle, *args, **kwargs)
        except self._nvml_error as exc:
            code = error_code(exc)
            if code == ERR_GPU_IS_LOST:
                raise GpuLost() from None
            if code in empty_on:
                return EMPTY, None
            if code in (ERR_NOT_SUPPORTED, ERR_NO_PERMISSION):
                return UNSUPPORTED, None
            if code in (ERR_FUNCTION_NOT_FOUND, ERR_ARGUMENT_VERSION_MISMATCH):
                return MISSING, None
            return FAILED, error_words(exc)
        except self._mismatch_error:
            return MISSING, None
        except TypeError as exc:
            # An old binding without the keyword we pass (memory info's ``version``).
            if kwargs:
                return MISSING, None
            return FAILED, f"TypeError: {exc}"
        except Exception as exc:
            return FAILED, f"{error_text(exc)}"

    def settle(
        self,
        g: GpuState,
        key: str,
        outcome: str,
        value: Any,
        convert: Callable[[Any], Any] | None,
    ) -> Any:
        """Turn an outcome into the field's value, remembering what not to ask again."""
        if outcome == OK:
            if convert is None:
                return value
            try:
                return convert(value)
            except Exception as exc:
                g.errors.append(f"{key}: unreadable answer ({error_text(exc)})")
                return None
        if outcome == FAILED:
            g.errors.append(f"{key}: {value}")
            return None
        g.skip.add(key)
        if outcome == MISSING:
            self._on_missing()
        return None

    def call(
        self,
        g: GpuState,
        key: str,
        name: str,
        *args: Any,
        convert: Callable[[Any], Any] | None = None,
    ) -> Any:
        """``name(handle, *args)`` converted, or None (and the reason noted) when it fails."""
        if key in g.skip:
            return None
        outcome, value = self.attempt(g, name, args, {})
        return self.settle(g, key, outcome, value, convert)

    def versioned(
        self,
        g: GpuState,
        key: str,
        variants: Sequence[Variant],
        *,
        older_on: frozenset[str] = frozenset({MISSING, UNSUPPORTED}),
        convert: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Call the newest variant that works here, moving to an older one (for good) when
        the newer is missing from the binding or the driver."""
        if key in g.skip:
            return None
        start = g.api.get(key, 0)
        for i in range(start, len(variants)):
            name, args, kwargs = variants[i]
            outcome, value = self.attempt(g, name, args, kwargs)
            if outcome in older_on and i + 1 < len(variants):
                g.api[key] = i + 1
                continue
            return self.settle(g, key, outcome, value, convert)
        return None

"""What NVML says about the machine as a whole: versions, the GPU count, and why it will not
start, in words. ``lltui doctor`` uses :func:`probe_nvml`; the source uses the rest at open."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lltui.core.text import error_text
from lltui.sources.gpu.nvml.codes import (
    ERR_DRIVER_NOT_LOADED,
    ERR_FUNCTION_NOT_FOUND,
    ERR_GPU_IS_LOST,
    ERR_LIB_RM_VERSION_MISMATCH,
    ERR_LIBRARY_NOT_FOUND,
    ERR_NO_PERMISSION,
    INSTALL_HINT,
    NOT_INSTALLED,
    NOT_THE_BINDING,
    error_code,
    error_words,
    import_pynvml,
    is_binding,
    text,
)


@dataclass(frozen=True, slots=True)
class NvmlProbe:
    """What ``lltui doctor`` learns from NVML without keeping it open."""

    available: bool
    reason: str | None = None  # why not, in plain words
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_version: str | None = None  # "12.4"
    device_count: int = 0
    hint: str | None = None  # what to do next, or a warning when available
    lost: tuple[int, ...] = ()  # the GPUs (NVML indices) NVML says are lost


def cuda_version_text(version: int) -> str:
    """NVML's CUDA version integer as people write it: 12040 -> "12.4", 11080 -> "11.8"."""
    return f"{version // 1000}.{(version % 1000) // 10}"


NO_DRIVER_HINT = (
    "install the NVIDIA driver; in a container, start it with the GPUs passed in "
    "(docker run --gpus all)"
)


def init_failure(nv: Any, exc: BaseException) -> tuple[str, str]:
    """(reason, hint) in words for an ``nvmlInit`` failure."""
    code = error_code(exc)
    if code == ERR_LIBRARY_NOT_FOUND:
        return "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)", NO_DRIVER_HINT
    if code == ERR_DRIVER_NOT_LOADED:
        return (
            "NVIDIA driver not loaded (the nvidia kernel module is not running)",
            "load it (sudo modprobe nvidia) or reboot after installing the driver",
        )
    if code == ERR_NO_PERMISSION:
        return (
            "no permission to use the NVIDIA driver (cannot open /dev/nvidia*)",
            "add your user to the group that owns /dev/nvidia* or ask the admin",
        )
    if code == ERR_LIB_RM_VERSION_MISMATCH:
        return (
            "NVIDIA driver and libnvidia-ml.so.1 are different versions",
            "reboot (or reload the nvidia module) after a driver update",
        )
    if code is not None:
        return f"NVML did not initialise: {error_words(exc)}", "run nvidia-smi to see why"
    return (
        f"NVML did not initialise: {error_text(exc)}",
        "run nvidia-smi to see why",
    )


def system_value(nv: Any, names: Sequence[str]) -> tuple[Any, bool]:
    """First answer from the named system functions, and whether one was missing."""
    missing = False
    for name in names:
        fn = getattr(nv, name, None)
        if fn is None:
            continue
        try:
            return fn(), missing
        except getattr(nv, "NVMLLibraryMismatchError", ()):
            missing = True
        except nv.NVMLError as exc:
            if error_code(exc) == ERR_FUNCTION_NOT_FOUND:
                missing = True
        except Exception:
            pass
    return None, missing


def system_versions(nv: Any) -> tuple[str | None, str | None, str | None, bool]:
    """(driver, nvml, cuda) versions and whether a function was missing from the driver."""
    driver, m1 = system_value(nv, ["nvmlSystemGetDriverVersion"])
    nvml, m2 = system_value(nv, ["nvmlSystemGetNVMLVersion"])
    cuda, m3 = system_value(
        nv, ["nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2"]
    )
    cuda_text = cuda_version_text(cuda) if isinstance(cuda, int) and cuda > 0 else None
    return (
        text(driver) if driver is not None else None,
        text(nvml) if nvml is not None else None,
        cuda_text,
        m1 or m2 or m3,
    )


def mismatch_hint(driver_version: str | None) -> str:
    driver = f"NVIDIA driver {driver_version}" if driver_version else "the NVIDIA driver"
    return (
        f"nvidia-ml-py and {driver} disagree (a function the binding calls is missing from "
        "the driver), so some fields show '-'; install the nvidia-ml-py release made for "
        "this driver, or use --source smi"
    )


LOST_HINT = "dmesg names the Xid (79: fallen off the bus); a GPU reset or a reboot brings it back"


def _lost(nv: Any, count: int) -> tuple[int, ...]:
    """The GPUs NVML can name but not reach (GPU_IS_LOST on a plain question)."""
    lost = []
    for index in range(count):
        try:
            nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(index))
        except Exception as exc:
            if error_code(exc) == ERR_GPU_IS_LOST:
                lost.append(index)
    return tuple(lost)


def probe_nvml() -> NvmlProbe:
    """Initialise NVML, read versions and the GPU count, shut it down again. Never raises."""
    nv = import_pynvml()
    if nv is None:
        return NvmlProbe(False, NOT_INSTALLED, hint=INSTALL_HINT)
    if not is_binding(nv):
        return NvmlProbe(False, NOT_THE_BINDING, hint=INSTALL_HINT)
    try:
        nv.nvmlInit()
    except Exception as exc:
        reason, init_hint = init_failure(nv, exc)
        return NvmlProbe(False, reason, hint=init_hint)
    try:
        driver, nvml, cuda, missing = system_versions(nv)
        count, missing_count = system_value(nv, ["nvmlDeviceGetCount"])
        hint = mismatch_hint(driver) if missing or missing_count else None
        if not isinstance(count, int):
            return NvmlProbe(
                False,
                "NVML initialised but could not count the GPUs",
                driver,
                nvml,
                cuda,
                hint=hint or "run nvidia-smi to see why",
            )
        if count == 0:
            return NvmlProbe(
                False,
                "no NVIDIA GPU found (the driver is loaded but sees no GPU)",
                driver,
                nvml,
                cuda,
                0,
                hint="in a container, start it with the GPUs passed in (docker run --gpus all)",
            )
        lost = _lost(nv, count)
        if len(lost) == count:
            return NvmlProbe(
                False,
                f"every GPU is lost ({count}: NVML_ERROR_GPU_IS_LOST): fallen off the bus, or "
                "a driver fault",
                driver,
                nvml,
                cuda,
                count,
                hint=LOST_HINT,
                lost=lost,
            )
        return NvmlProbe(True, None, driver, nvml, cuda, count, hint, lost)
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()

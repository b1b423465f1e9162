"""The slice of the CUDA runtime (libcudart) the bench needs, through ctypes, and why a
runtime sees no GPU in words a user can act on."""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable
from typing import Any

from lltui.sources.nccl.errors import CudaError, NcclUnavailable
from lltui.sources.nccl.finder import (
    CUDART_LIB_ENV,
    CUDART_SONAMES,
    LibraryCandidate,
    explicit_path,
    find_cudart_candidates,
    load_cdll,
    load_failure,
)

_P = ctypes.c_void_p
_I = ctypes.c_int
_SZ = ctypes.c_size_t

_CUDA_MEMCPY_HOST_TO_DEVICE = 1
_CUDA_MEMCPY_DEVICE_TO_HOST = 2
_CUDA_ERROR_NOT_READY = 600

_CUDART_FUNCS: dict[str, tuple[list[Any], Any]] = {
    "cudaGetDeviceCount": ([ctypes.POINTER(_I)], _I),
    "cudaSetDevice": ([_I], _I),
    "cudaGetDevice": ([ctypes.POINTER(_I)], _I),
    "cudaMalloc": ([ctypes.POINTER(_P), _SZ], _I),
    "cudaFree": ([_P], _I),
    "cudaMemset": ([_P, _I, _SZ], _I),
    "cudaMemcpy": ([_P, _P, _SZ, _I], _I),
    "cudaMemGetInfo": ([ctypes.POINTER(_SZ), ctypes.POINTER(_SZ)], _I),
    "cudaStreamCreate": ([ctypes.POINTER(_P)], _I),
    "cudaStreamDestroy": ([_P], _I),
    "cudaStreamSynchronize": ([_P], _I),
    "cudaStreamQuery": ([_P], _I),
    "cudaEventCreate": ([ctypes.POINTER(_P)], _I),
    "cudaEventRecord": ([_P, _P], _I),
    "cudaEventSynchronize": ([_P], _I),
    "cudaEventElapsedTime": ([ctypes.POINTER(ctypes.c_float), _P, _P], _I),
    "cudaEventDestroy": ([_P], _I),
    "cudaDeviceCanAccessPeer": ([ctypes.POINTER(_I), _I, _I], _I),
    "cudaDeviceSynchronize": ([], _I),
    "cudaDeviceGetPCIBusId": ([ctypes.c_char_p, _I, _I], _I),
    "cudaGetErrorString": ([_I], ctypes.c_char_p),
    "cudaGetErrorName": ([_I], ctypes.c_char_p),
    "cudaRuntimeGetVersion": ([ctypes.POINTER(_I)], _I),
    "cudaDriverGetVersion": ([ctypes.POINTER(_I)], _I),
}


class CudaRuntime:
    """The slice of the CUDA runtime the bench needs: devices, buffers, streams, events."""

    def __init__(self, cdll: Any, path: str, found_by: str = "explicit") -> None:
        self.cdll = cdll
        self.path = path
        self.found_by = found_by
        for name, (argtypes, restype) in _CUDART_FUNCS.items():
            fn = getattr(cdll, name)
            fn.argtypes = argtypes
            fn.restype = restype

    def error_string(self, rc: int) -> str:
        raw = self.cdll.cudaGetErrorString(rc)
        return raw.decode(errors="replace") if raw else f"CUDA error {rc}"

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CudaError(rc, f"{what} failed: {self.error_string(rc)} (CUDA error {rc})")

    def runtime_version(self) -> int:
        v = _I(0)
        self.check(self.cdll.cudaRuntimeGetVersion(ctypes.byref(v)), "cudaRuntimeGetVersion")
        return int(v.value)

    def driver_version(self) -> int:
        """The CUDA version the driver supports (12040); 0 when there is no driver."""
        v = _I(0)
        self.check(self.cdll.cudaDriverGetVersion(ctypes.byref(v)), "cudaDriverGetVersion")
        return int(v.value)

    def device_count(self) -> int:
        n = _I(0)
        self.check(self.cdll.cudaGetDeviceCount(ctypes.byref(n)), "cudaGetDeviceCount")
        return int(n.value)

    def set_device(self, device: int) -> None:
        self.check(self.cdll.cudaSetDevice(device), f"cudaSetDevice({device})")

    def malloc(self, nbytes: int) -> int:
        ptr = _P()
        self.check(self.cdll.cudaMalloc(ctypes.byref(ptr), nbytes), f"cudaMalloc({nbytes})")
        if not ptr.value:
            raise CudaError(2, f"cudaMalloc({nbytes}) returned NULL")
        return int(ptr.value)

    def free(self, ptr: int) -> None:
        self.check(self.cdll.cudaFree(ptr), "cudaFree")

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self.check(self.cdll.cudaMemset(ptr, value, nbytes), "cudaMemset")

    def copy_to_device(self, dst: int, src: Any, nbytes: int) -> None:
        """``src``: a ctypes array or buffer of at least ``nbytes``."""
        if ctypes.sizeof(src) < nbytes:
            raise ValueError(f"host buffer of {ctypes.sizeof(src)} bytes < {nbytes}")
        rc = self.cdll.cudaMemcpy(dst, ctypes.addressof(src), nbytes, _CUDA_MEMCPY_HOST_TO_DEVICE)
        self.check(rc, "cudaMemcpy to device")

    def copy_to_host(self, dst: Any, src: int, nbytes: int) -> None:
        if ctypes.sizeof(dst) < nbytes:
            raise ValueError(f"host buffer of {ctypes.sizeof(dst)} bytes < {nbytes}")
        rc = self.cdll.cudaMemcpy(ctypes.addressof(dst), src, nbytes, _CUDA_MEMCPY_DEVICE_TO_HOST)
        self.check(rc, "cudaMemcpy to host")

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) bytes of the current device."""
        free, total = _SZ(0), _SZ(0)
        rc = self.cdll.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total))
        self.check(rc, "cudaMemGetInfo")
        return int(free.value), int(total.value)

    def stream_create(self) -> int:
        s = _P()
        self.check(self.cdll.cudaStreamCreate(ctypes.byref(s)), "cudaStreamCreate")
        return int(s.value or 0)

    def stream_destroy(self, stream: int) -> None:
        self.check(self.cdll.cudaStreamDestroy(stream), "cudaStreamDestroy")

    def stream_synchronize(self, stream: int) -> None:
        self.check(self.cdll.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def stream_done(self, stream: int) -> bool:
        """True when all work on ``stream`` has finished; False while it runs."""
        rc = self.cdll.cudaStreamQuery(stream)
        if rc == _CUDA_ERROR_NOT_READY:
            return False
        self.check(rc, "cudaStreamQuery")
        return True

    def event_create(self) -> int:
        e = _P()
        self.check(self.cdll.cudaEventCreate(ctypes.byref(e)), "cudaEventCreate")
        return int(e.value or 0)

    def event_record(self, event: int, stream: int = 0) -> None:
        self.check(self.cdll.cudaEventRecord(event, stream), "cudaEventRecord")

    def event_elapsed_ms(self, start: int, end: int) -> float:
        ms = ctypes.c_float(0.0)
        rc = self.cdll.cudaEventElapsedTime(ctypes.byref(ms), start, end)
        self.check(rc, "cudaEventElapsedTime")
        return float(ms.value)

    def event_destroy(self, event: int) -> None:
        self.check(self.cdll.cudaEventDestroy(event), "cudaEventDestroy")

    def can_access_peer(self, device: int, peer: int) -> bool:
        ok = _I(0)
        rc = self.cdll.cudaDeviceCanAccessPeer(ctypes.byref(ok), device, peer)
        self.check(rc, "cudaDeviceCanAccessPeer")
        return bool(ok.value)

    def pci_bus_id(self, device: int) -> str:
        buf = ctypes.create_string_buffer(64)
        rc = self.cdll.cudaDeviceGetPCIBusId(buf, len(buf), device)
        self.check(rc, "cudaDeviceGetPCIBusId")
        return buf.value.decode(errors="replace")


def load_cudart(
    lib_path: str | None = None, *, loader: Callable[[str], Any] = load_cdll
) -> CudaRuntime:
    """Load the CUDA runtime: the path given (or $LLTUI_CUDART_LIB), else the first found."""
    explicit = explicit_path(lib_path, CUDART_LIB_ENV, "")
    candidates = [LibraryCandidate(explicit, "explicit")] if explicit else _candidates()
    errors: list[str] = []
    for c in candidates:
        try:
            return CudaRuntime(loader(c.path), c.path, c.found_by)
        except (OSError, AttributeError) as exc:
            errors.append(load_failure(c.path, exc))
    if explicit:
        raise NcclUnavailable(f"cannot load {errors[0]}")
    raise NcclUnavailable(_NOT_FOUND)


_NOT_FOUND = "the CUDA runtime (libcudart) was not found; pip install nvidia-cuda-runtime-cu12"


def _candidates() -> list[LibraryCandidate]:
    """The CUDA runtimes found on this machine, then the sonames dlopen may find."""
    return [*find_cudart_candidates(), *(LibraryCandidate(so, "dlopen") for so in CUDART_SONAMES)]


_CUDA_NO_DEVICE = 100
_CUDA_INSUFFICIENT_DRIVER = 35


def _no_gpu_reason(cudart: CudaRuntime, code: int) -> str:
    """Why a CUDA runtime sees no GPU, in words a user can act on."""
    driver = 0
    with contextlib.suppress(CudaError):
        driver = cudart.driver_version()
    if driver == 0:
        return "no NVIDIA driver on this machine (libcuda.so.1 not found)"
    if code == _CUDA_NO_DEVICE:
        return "no CUDA-capable GPU is visible (check CUDA_VISIBLE_DEVICES)"
    if code == _CUDA_INSUFFICIENT_DRIVER:
        runtime = 0
        with contextlib.suppress(CudaError):
            runtime = cudart.runtime_version()
        return (
            f"the driver supports CUDA {driver // 1000}.{driver % 1000 // 10}, older than "
            f"this CUDA runtime ({runtime // 1000}.{runtime % 1000 // 10}, {cudart.path})"
        )
    return f"{cudart.error_string(code)} (CUDA error {code})"


def cuda_devices(cudart: CudaRuntime) -> int:
    """The number of GPUs CUDA sees; NcclUnavailable with the reason when there are none."""
    try:
        n = cudart.device_count()
    except CudaError as exc:
        raise NcclUnavailable(f"no usable GPU: {_no_gpu_reason(cudart, exc.code)}") from None
    if n < 1:
        raise NcclUnavailable("no GPU visible to CUDA (check CUDA_VISIBLE_DEVICES)")
    return n


def open_cuda(
    lib_path: str | None = None, *, loader: Callable[[str], Any] = load_cdll
) -> tuple[CudaRuntime, int]:
    """A CUDA runtime that sees GPUs, and how many. Every runtime found is tried: a newer
    one than the driver supports sees none, while an older one beside it works."""
    explicit = explicit_path(lib_path, CUDART_LIB_ENV, "")
    if explicit:
        rt = load_cudart(explicit, loader=loader)
        return rt, cuda_devices(rt)
    first_reason: str | None = None
    for c in _candidates():
        try:
            rt = CudaRuntime(loader(c.path), c.path, c.found_by)
        except (OSError, AttributeError):
            continue
        try:
            return rt, cuda_devices(rt)
        except NcclUnavailable as exc:
            first_reason = first_reason or str(exc)
    raise NcclUnavailable(first_reason or _NOT_FOUND)

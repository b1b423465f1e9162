"""libnccl and libcudart through ctypes: find, load, version, communicators, all-reduce bench.

Finding the libraries needs no GPU: ``libnccl.so.2`` is looked for in ``LD_LIBRARY_PATH``, the
linker cache (``ldconfig -p``), the usual system directories, the ``nvidia-nccl-cu12`` /
``nvidia-nccl-cu13`` wheels and a copy bundled with torch, and ``ncclGetVersion`` answers
without a driver. Communicators and the bench need a GPU; without one they raise
:class:`NcclUnavailable` with one line that says why.

The seed API names (``NCCLCommunicator``, ``is_nccl_available``, ``get_nccl_version``,
``get_nccl_info``, ``print_nccl_info``, ``setup_nccl_environment``, ``kaggle_nccl_config``,
``NCCLDataType``, ``NCCLResult``) live here with the signatures and defaults users know.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import shutil
import site
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lltui.core.monitor.models import SourceUnavailable
from lltui.core.nccl.env import (
    RESULT_NAMES,
    NCCLDataType,
    NCCLRedOp,
    NCCLResult,
    decode_nccl_version,
    socket_ifname_matches,
)
from lltui.core.nccl.nccl_tests import NcclTestsRow, bus_bandwidth_factor, format_rows, sweep_sizes
from lltui.core.units import MIB

__all__ = [
    "BenchResult",
    "CudaError",
    "CudaRuntime",
    "LibraryCandidate",
    "NCCLCommunicator",
    "NCCLDataType",
    "NCCLError",
    "NCCLRedOp",
    "NCCLResult",
    "NcclLibrary",
    "NcclProbe",
    "NcclUnavailable",
    "find_cudart_candidates",
    "find_nccl_candidates",
    "get_nccl_info",
    "get_nccl_version",
    "is_nccl_available",
    "kaggle_nccl_config",
    "load_cudart",
    "load_nccl",
    "local_interfaces",
    "open_cuda",
    "print_nccl_info",
    "probe_nccl",
    "run_allreduce_bench",
    "setup_nccl_environment",
]

NCCL_SONAME = "libnccl.so.2"
CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")
NCCL_LIB_ENV = "LLTUI_NCCL_LIB"  # a path that wins over the search
CUDART_LIB_ENV = "LLTUI_CUDART_LIB"
LDCONFIG_TIMEOUT_S = 5.0
SYNC_TIMEOUT_S = 60.0  # an all-reduce that has not finished by then is hung

SYSTEM_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib/sbsa-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/nccl/lib",
    "/opt/nccl/lib",
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/lib",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/cuda/targets/sbsa-linux/lib",
)
NCCL_WHEEL_DIRS = (("nvidia", "nccl", "lib"), ("nvidia", "cu13", "lib"))
CUDART_WHEEL_DIRS = (("nvidia", "cuda_runtime", "lib"), ("nvidia", "cu13", "lib"))

_CUDA_MEMCPY_HOST_TO_DEVICE = 1
_CUDA_MEMCPY_DEVICE_TO_HOST = 2
_CUDA_ERROR_NOT_READY = 600


class NcclUnavailable(SourceUnavailable):
    """libnccl, libcudart or a GPU is missing; ``str()`` says which in one line."""


class NCCLError(RuntimeError):
    """An NCCL call returned an error."""

    def __init__(self, result: int, message: str) -> None:
        super().__init__(message)
        self.code = result
        self.result: NCCLResult | None = (
            NCCLResult(result) if result in NCCLResult._value2member_map_ else None
        )


class CudaError(RuntimeError):
    """A CUDA runtime call returned an error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# --- finding libraries ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LibraryCandidate:
    path: str
    found_by: str  # "explicit", "LD_LIBRARY_PATH", "ldconfig", "system", "pip wheel", "torch"


def parse_ldconfig(text: str, soname: str) -> list[str]:
    """Paths ``ldconfig -p`` lists for ``soname`` (exact name), in its order."""
    out = []
    for line in text.splitlines():
        name, sep, path = line.strip().partition(" => ")
        if sep and name.split(" (", 1)[0].strip() == soname and path.strip():
            out.append(path.strip())
    return out


@functools.cache  # the linker cache does not change under us; one `ldconfig -p` a run
def _ldconfig_listing() -> str:
    exe = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if os.path.exists(p)), None
    )
    if exe is None:
        return ""
    try:
        proc = subprocess.run(
            [exe, "-p"],
            capture_output=True,
            text=True,
            timeout=LDCONFIG_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout or ""


def python_site_dirs() -> list[str]:
    """Directories where pip puts packages for this interpreter, in sys.path order."""
    dirs: list[str] = []
    extra: list[str] = []
    with contextlib.suppress(AttributeError):  # some virtualenv builds lack these
        extra += site.getsitepackages()
    with contextlib.suppress(AttributeError):
        extra.append(site.getusersitepackages())
    for d in [*sys.path, *extra]:
        if d and os.path.isdir(d) and d not in dirs:
            dirs.append(d)
    return dirs


def _find_candidates(
    sonames: Sequence[str],
    wheel_dirs: Sequence[tuple[str, ...]],
    torch_glob: str,
    *,
    environ: Mapping[str, str],
    ldconfig_text: str | None,
    site_dirs: Sequence[str] | None,
    system_dirs: Sequence[str],
) -> list[LibraryCandidate]:
    out: list[LibraryCandidate] = []
    seen: set[str] = set()

    def add(path: str, how: str) -> None:
        if not os.path.isfile(path):
            return
        real = os.path.realpath(path)
        if real in seen:
            return
        seen.add(real)
        out.append(LibraryCandidate(path, how))

    for d in environ.get("LD_LIBRARY_PATH", "").split(":"):
        if d:
            for so in sonames:
                add(os.path.join(d, so), "LD_LIBRARY_PATH")
    listing = _ldconfig_listing() if ldconfig_text is None else ldconfig_text
    for so in sonames:
        for path in parse_ldconfig(listing, so):
            add(path, "ldconfig")
    cuda_dirs = sorted(glob.glob("/usr/local/cuda-*/lib64")) + sorted(
        glob.glob("/usr/local/cuda-*/lib")
    )
    for d in [*system_dirs, *cuda_dirs]:
        for so in sonames:
            add(os.path.join(d, so), "system")
    for sp in python_site_dirs() if site_dirs is None else site_dirs:
        for parts in wheel_dirs:
            for so in sonames:
                add(os.path.join(sp, *parts, so), "pip wheel")
        for path in sorted(glob.glob(os.path.join(sp, "torch", "lib", torch_glob))):
            add(path, "torch")
    return out


def find_nccl_candidates(
    *,
    environ: Mapping[str, str] | None = None,
    ldconfig_text: str | None = None,
    site_dirs: Sequence[str] | None = None,
    system_dirs: Sequence[str] = SYSTEM_LIB_DIRS,
) -> list[LibraryCandidate]:
    """Every libnccl.so.2 on this machine, in the order lltui tries them."""
    return _find_candidates(
        (NCCL_SONAME,),
        NCCL_WHEEL_DIRS,
        "libnccl*.so*",
        environ=os.environ if environ is None else environ,
        ldconfig_text=ldconfig_text,
        site_dirs=site_dirs,
        system_dirs=system_dirs,
    )


def find_cudart_candidates(
    *,
    environ: Mapping[str, str] | None = None,
    ldconfig_text: str | None = None,
    site_dirs: Sequence[str] | None = None,
    system_dirs: Sequence[str] = SYSTEM_LIB_DIRS,
) -> list[LibraryCandidate]:
    """Every CUDA runtime (libcudart) on this machine, newest soname first per place."""
    return _find_candidates(
        CUDART_SONAMES,
        CUDART_WHEEL_DIRS,
        "libcudart*.so*",
        environ=os.environ if environ is None else environ,
        ldconfig_text=ldconfig_text,
        site_dirs=site_dirs,
        system_dirs=system_dirs,
    )


def _explicit(lib_path: str | None, env_var: str, default_soname: str) -> str | None:
    """A path the caller named (argument, then environment); None means search."""
    if lib_path and lib_path != default_soname:
        return lib_path
    return os.environ.get(env_var) or None


# --- libnccl ---------------------------------------------------------------------------

_P = ctypes.c_void_p
_I = ctypes.c_int
_SZ = ctypes.c_size_t

# name -> (argtypes, restype); optional ones may be missing in old releases.
_NCCL_FUNCS: dict[str, tuple[list[Any], Any]] = {
    "ncclGetVersion": ([ctypes.POINTER(_I)], _I),
    "ncclGetErrorString": ([_I], ctypes.c_char_p),
    "ncclCommInitAll": ([ctypes.POINTER(_P), _I, ctypes.POINTER(_I)], _I),
    "ncclCommDestroy": ([_P], _I),
    "ncclCommCount": ([_P, ctypes.POINTER(_I)], _I),
    "ncclCommCuDevice": ([_P, ctypes.POINTER(_I)], _I),
    "ncclCommUserRank": ([_P, ctypes.POINTER(_I)], _I),
    "ncclAllReduce": ([_P, _P, _SZ, _I, _I, _P, _P], _I),
    "ncclBroadcast": ([_P, _P, _SZ, _I, _I, _P, _P], _I),
    "ncclReduce": ([_P, _P, _SZ, _I, _I, _I, _P, _P], _I),
    "ncclAllGather": ([_P, _P, _SZ, _I, _P, _P], _I),
    "ncclReduceScatter": ([_P, _P, _SZ, _I, _I, _P, _P], _I),
    "ncclGroupStart": ([], _I),
    "ncclGroupEnd": ([], _I),
}
_NCCL_OPTIONAL: dict[str, tuple[list[Any], Any]] = {
    "ncclGetLastError": ([_P], ctypes.c_char_p),  # 2.13
    "ncclCommAbort": ([_P], _I),
    "ncclCommGetAsyncError": ([_P, ctypes.POINTER(_I)], _I),
}


class NcclLibrary:
    """A loaded libnccl with its function signatures declared."""

    def __init__(self, cdll: Any, path: str, found_by: str = "explicit") -> None:
        self.cdll = cdll
        self.path = path
        self.found_by = found_by
        for name, (argtypes, restype) in _NCCL_FUNCS.items():
            fn = getattr(cdll, name)
            fn.argtypes = argtypes
            fn.restype = restype
        self.optional: set[str] = set()
        for name, (argtypes, restype) in _NCCL_OPTIONAL.items():
            fn = getattr(cdll, name, None)
            if fn is not None:
                fn.argtypes = argtypes
                fn.restype = restype
                self.optional.add(name)
        code = _I(0)
        rc = cdll.ncclGetVersion(ctypes.byref(code))
        if rc != 0:
            raise NCCLError(rc, f"ncclGetVersion failed: {self.error_string(rc)}")
        self.version_code = int(code.value)
        self.version = decode_nccl_version(self.version_code)

    def error_string(self, rc: int) -> str:
        raw = self.cdll.ncclGetErrorString(rc)
        text = raw.decode(errors="replace") if raw else ""
        return text or RESULT_NAMES.get(rc, f"NCCL error {rc}")

    def last_error(self, comm: int | None) -> str:
        if "ncclGetLastError" not in self.optional:
            return ""
        raw = self.cdll.ncclGetLastError(comm)
        return raw.decode(errors="replace").strip() if raw else ""

    def check(self, rc: int, what: str, comm: int | None = None) -> None:
        if rc == 0:
            return
        detail = self.last_error(comm)
        name = RESULT_NAMES.get(rc, str(rc))
        msg = f"{what} failed: {name}: {self.error_string(rc)}"
        if detail:
            msg += f" ({detail})"
        raise NCCLError(rc, msg)


def _load_cdll(path: str) -> Any:
    # Local binding: two copies of NCCL (a wheel's and torch's, say) must not interpose.
    return ctypes.CDLL(path)


def load_nccl(
    lib_path: str | None = None, *, loader: Callable[[str], Any] = _load_cdll
) -> NcclLibrary:
    """Load libnccl: the path given (or $LLTUI_NCCL_LIB), else the first candidate that loads.

    Raises NcclUnavailable with where it looked.
    """
    explicit = _explicit(lib_path, NCCL_LIB_ENV, NCCL_SONAME)
    if explicit:
        candidates = [LibraryCandidate(explicit, "explicit")]
    else:
        candidates = [*find_nccl_candidates(), LibraryCandidate(NCCL_SONAME, "dlopen")]
    errors: list[str] = []
    for c in candidates:
        try:
            return NcclLibrary(loader(c.path), c.path, c.found_by)
        except (OSError, AttributeError, NCCLError) as exc:
            errors.append(f"{c.path}: {exc}")
    if explicit:
        raise NcclUnavailable(f"cannot load {explicit}: {errors[0].split(': ', 1)[-1]}")
    raise NcclUnavailable(
        "libnccl.so.2 not found (looked in LD_LIBRARY_PATH, ldconfig, system directories, "
        "nvidia-nccl-cu12/cu13 wheels, torch); pip install nvidia-nccl-cu12"
    )


@dataclass(frozen=True, slots=True)
class NcclProbe:
    available: bool
    version: str | None
    version_code: int | None
    path: str | None
    found_by: str | None
    candidates: tuple[LibraryCandidate, ...]
    reason: str | None = None  # why it is not available

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "version": self.version,
            "version_code": self.version_code,
            "path": self.path,
            "found_by": self.found_by,
            "candidates": [{"path": c.path, "found_by": c.found_by} for c in self.candidates],
            "reason": self.reason,
        }


def probe_nccl(lib_path: str | None = None) -> NcclProbe:
    """What libnccl is here, without raising."""
    explicit = _explicit(lib_path, NCCL_LIB_ENV, NCCL_SONAME)
    candidates = tuple(find_nccl_candidates()) if not explicit else ()
    try:
        lib = load_nccl(lib_path)
    except NcclUnavailable as exc:
        return NcclProbe(False, None, None, None, None, candidates, str(exc))
    return NcclProbe(True, lib.version, lib.version_code, lib.path, lib.found_by, candidates)


# --- libcudart -------------------------------------------------------------------------

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

    def get_device(self) -> int:
        d = _I(0)
        self.check(self.cdll.cudaGetDevice(ctypes.byref(d)), "cudaGetDevice")
        return int(d.value)

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

    def event_synchronize(self, event: int) -> None:
        self.check(self.cdll.cudaEventSynchronize(event), "cudaEventSynchronize")

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
    lib_path: str | None = None, *, loader: Callable[[str], Any] = _load_cdll
) -> CudaRuntime:
    """Load the CUDA runtime: the path given (or $LLTUI_CUDART_LIB), else the first found."""
    explicit = _explicit(lib_path, CUDART_LIB_ENV, "")
    if explicit:
        candidates = [LibraryCandidate(explicit, "explicit")]
    else:
        candidates = [
            *find_cudart_candidates(),
            *(LibraryCandidate(so, "dlopen") for so in CUDART_SONAMES),
        ]
    errors: list[str] = []
    for c in candidates:
        try:
            return CudaRuntime(loader(c.path), c.path, c.found_by)
        except (OSError, AttributeError) as exc:
            errors.append(f"{c.path}: {exc}")
    if explicit:
        raise NcclUnavailable(f"cannot load {explicit}: {errors[0].split(': ', 1)[-1]}")
    raise NcclUnavailable(
        "the CUDA runtime (libcudart) was not found; pip install nvidia-cuda-runtime-cu12"
    )


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
    lib_path: str | None = None, *, loader: Callable[[str], Any] = _load_cdll
) -> tuple[CudaRuntime, int]:
    """A CUDA runtime that sees GPUs, and how many. Every runtime found is tried: a newer
    one than the driver supports sees none, while an older one beside it works."""
    explicit = _explicit(lib_path, CUDART_LIB_ENV, "")
    if explicit:
        rt = load_cudart(explicit, loader=loader)
        return rt, cuda_devices(rt)
    candidates = [
        *find_cudart_candidates(),
        *(LibraryCandidate(so, "dlopen") for so in CUDART_SONAMES),
    ]
    first_reason: str | None = None
    for c in candidates:
        try:
            rt = CudaRuntime(loader(c.path), c.path, c.found_by)
        except (OSError, AttributeError):
            continue
        try:
            return rt, cuda_devices(rt)
        except NcclUnavailable as exc:
            first_reason = first_reason or str(exc)
    if first_reason is None:
        raise NcclUnavailable(
            "the CUDA runtime (libcudart) was not found; pip install nvidia-cuda-runtime-cu12"
        )
    raise NcclUnavailable(first_reason)


# --- communicator ----------------------------------------------------------------------


def _as_dtype(datatype: NCCLDataType | int) -> int:
    return datatype.value if isinstance(datatype, NCCLDataType) else int(datatype)


class NCCLCommunicator:
    """NCCL communicators over local GPUs, one per device, made with ncclCommInitAll.

    Buffers and streams are given per device: a sequence with one pointer (int) per device,
    in ``device_ids`` order. A plain int is accepted when the communicator has one device;
    ``stream=0`` means each device's default stream. Collectives over several devices are
    issued inside one ncclGroupStart/ncclGroupEnd, as NCCL requires when one thread drives
    several GPUs. A failed call raises :class:`NCCLError`; success returns
    ``NCCLResult.SUCCESS``.

        with NCCLCommunicator(n_devs=2) as comm:
            comm.all_reduce([send0, send1], [recv0, recv1], count=1024)
    """

    def __init__(
        self,
        n_devs: int = 2,
        device_ids: list[int] | None = None,
        lib_path: str = NCCL_SONAME,
        *,
        library: NcclLibrary | None = None,
    ) -> None:
        ids = list(device_ids) if device_ids is not None else list(range(n_devs))
        if not ids:
            raise ValueError("a communicator needs at least one device")
        if len(set(ids)) != len(ids):
            raise ValueError(f"device_ids has duplicates: {ids}")
        if any(i < 0 for i in ids):
            raise ValueError(f"device ids must be >= 0: {ids}")
        self.device_ids = ids
        self.lib_path = lib_path
        self._lib = library
        self._comms: list[int] = []

    @property
    def n_devs(self) -> int:
        return len(self.device_ids)

    @property
    def library(self) -> NcclLibrary:
        if self._lib is None:
            self._lib = load_nccl(self.lib_path)
        return self._lib

    @property
    def comms(self) -> tuple[int, ...]:
        return tuple(self._comms)

    @property
    def initialized(self) -> bool:
        return bool(self._comms)

    def init(self) -> NCCLCommunicator:
        if self._comms:
            return self
        lib = self.library
        n = self.n_devs
        comms = (_P * n)()
        devlist = (_I * n)(*self.device_ids)
        lib.check(lib.cdll.ncclCommInitAll(comms, n, devlist), f"ncclCommInitAll({n} GPUs)")
        self._comms = [int(comms[i] or 0) for i in range(n)]
        if not all(self._comms):
            self._comms = [c for c in self._comms if c]
            self.close()
            raise NCCLError(3, "ncclCommInitAll returned a NULL communicator")
        return self

    def __enter__(self) -> NCCLCommunicator:
        return self.init()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Destroy every communicator; the first failure is raised after all are tried."""
        comms, self._comms = self._comms, []
        if not comms:
            return
        lib = self.library
        first: NCCLError | None = None
        for c in comms:
            try:
                lib.check(lib.cdll.ncclCommDestroy(c), "ncclCommDestroy")
            except NCCLError as exc:
                first = first or exc
        if first is not None:
            raise first

    def abort(self) -> None:
        """Tear the communicators down without waiting for work in flight (after a hang)."""
        comms, self._comms = self._comms, []
        lib = self.library
        fn = "ncclCommAbort" if "ncclCommAbort" in lib.optional else "ncclCommDestroy"
        for c in comms:
            getattr(lib.cdll, fn)(c)

    def _require(self) -> list[int]:
        if not self._comms:
            raise RuntimeError("the communicator is not initialised: use it in a with block")
        return self._comms

    def _query(self, fn: str, rank: int) -> int:
        comms = self._require()
        out = _I(0)
        lib = self.library
        lib.check(getattr(lib.cdll, fn)(comms[rank], ctypes.byref(out)), fn, comms[rank])
        return int(out.value)

    def count(self, rank: int = 0) -> int:
        """Ranks in the communicator, as NCCL reports it."""
        return self._query("ncclCommCount", rank)

    def cuda_device(self, rank: int) -> int:
        return self._query("ncclCommCuDevice", rank)

    def user_rank(self, rank: int) -> int:
        return self._query("ncclCommUserRank", rank)

    def async_error(self, rank: int) -> NCCLResult:
        lib = self.library
        if "ncclCommGetAsyncError" not in lib.optional:
            return NCCLResult.SUCCESS
        comms = self._require()
        out = _I(0)
        lib.check(
            lib.cdll.ncclCommGetAsyncError(comms[rank], ctypes.byref(out)),
            "ncclCommGetAsyncError",
        )
        return (
            NCCLResult(out.value)
            if out.value in NCCLResult._value2member_map_
            else (NCCLResult.INTERNAL_ERROR)
        )

    def _per_rank(self, value: int | Sequence[int], what: str, *, zero_ok: bool) -> list[int]:
        n = self.n_devs
        if isinstance(value, int):
            if n == 1 or (zero_ok and value == 0):
                return [value] * n
            raise ValueError(f"{what}: give one value per device ({n} devices), not one int")
        vals = [int(v) for v in value]
        if len(vals) != n:
            raise ValueError(f"{what}: {len(vals)} values for {n} devices")
        return vals

    def _launch(
        self,
        name: str,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        stream: int | Sequence[int],
        call: Callable[[Any, int, int, int, int], int],
    ) -> NCCLResult:
        comms = self._require()
        sends = self._per_rank(sendbuff, "sendbuff", zero_ok=False)
        recvs = self._per_rank(recvbuff, "recvbuff", zero_ok=False)
        streams = self._per_rank(stream, "stream", zero_ok=True)
        lib = self.library
        fn = getattr(lib.cdll, name)
        grouped = len(comms) > 1
        if grouped:
            lib.check(lib.cdll.ncclGroupStart(), "ncclGroupStart")
        failed: tuple[int, int] | None = None
        try:
            for r, comm in enumerate(comms):
                rc = call(fn, sends[r], recvs[r], comm, streams[r])
                if rc != 0:
                    failed = (rc, r)
                    break
        finally:
            end_rc = lib.cdll.ncclGroupEnd() if grouped else 0
        if failed is not None:
            rc, r = failed
            lib.check(rc, f"{name} on GPU {self.device_ids[r]}", comms[r])
        lib.check(end_rc, f"ncclGroupEnd after {name}", comms[0])
        return NCCLResult.SUCCESS

    def all_reduce(
        self,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        count: int,
        datatype: NCCLDataType = NCCLDataType.FLOAT32,
        op: int = 0,
        stream: int | Sequence[int] = 0,
        *,
        dtype: NCCLDataType | None = None,
    ) -> NCCLResult:
        """Reduce across all GPUs (op: 0 sum, 1 prod, 2 max, 3 min, 4 avg); every GPU gets
        the result."""
        dt = _as_dtype(dtype if dtype is not None else datatype)
        return self._launch(
            "ncclAllReduce",
            sendbuff,
            recvbuff,
            stream,
            lambda fn, s, r, c, st: fn(s, r, count, dt, int(op), c, st),
        )

    def broadcast(
        self,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        count: int,
        datatype: NCCLDataType = NCCLDataType.FLOAT32,
        root: int = 0,
        stream: int | Sequence[int] = 0,
        *,
        dtype: NCCLDataType | None = None,
    ) -> NCCLResult:
        """Copy the root rank's buffer to every GPU (root is a rank, an index into the
        devices)."""
        dt = _as_dtype(dtype if dtype is not None else datatype)
        return self._launch(
            "ncclBroadcast",
            sendbuff,
            recvbuff,
            stream,
            lambda fn, s, r, c, st: fn(s, r, count, dt, int(root), c, st),
        )

    def reduce(
        self,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        count: int,
        datatype: NCCLDataType = NCCLDataType.FLOAT32,
        op: int = 0,
        root: int = 0,
        stream: int | Sequence[int] = 0,
        *,
        dtype: NCCLDataType | None = None,
    ) -> NCCLResult:
        """Reduce across all GPUs into the root rank's buffer."""
        dt = _as_dtype(dtype if dtype is not None else datatype)
        return self._launch(
            "ncclReduce",
            sendbuff,
            recvbuff,
            stream,
            lambda fn, s, r, c, st: fn(s, r, count, dt, int(op), int(root), c, st),
        )

    def reduce_scatter(
        self,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        recvcount: int,
        datatype: NCCLDataType = NCCLDataType.FLOAT32,
        op: int = 0,
        stream: int | Sequence[int] = 0,
        *,
        dtype: NCCLDataType | None = None,
    ) -> NCCLResult:
        """Reduce across all GPUs; rank i receives block i (``recvcount`` elements) of the
        result. Send buffers hold ``recvcount * n_devs`` elements."""
        dt = _as_dtype(dtype if dtype is not None else datatype)
        return self._launch(
            "ncclReduceScatter",
            sendbuff,
            recvbuff,
            stream,
            lambda fn, s, r, c, st: fn(s, r, recvcount, dt, int(op), c, st),
        )

    def all_gather(
        self,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        sendcount: int,
        datatype: NCCLDataType = NCCLDataType.FLOAT32,
        stream: int | Sequence[int] = 0,
        *,
        dtype: NCCLDataType | None = None,
    ) -> NCCLResult:
        """Every GPU receives every rank's ``sendcount`` elements, in rank order."""
        dt = _as_dtype(dtype if dtype is not None else datatype)
        return self._launch(
            "ncclAllGather",
            sendbuff,
            recvbuff,
            stream,
            lambda fn, s, r, c, st: fn(s, r, sendcount, dt, c, st),
        )


# --- the all-reduce bench --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchResult:
    nccl_version: str
    nccl_path: str
    cudart_path: str
    devices: tuple[int, ...]
    pci_bus_ids: tuple[str, ...]
    dtype: str  # as nccl-tests names it: "float"
    rows: tuple[NcclTestsRow, ...]
    device_time_us: tuple[float | None, ...]  # per row, out-of-place, from CUDA events
    iters: int
    warmup: int
    validated: bool | None  # None when validation was skipped
    validation_error: str | None = None
    p2p: dict[str, bool] = field(default_factory=dict)  # "GPU0-GPU1": can access peer
    notes: tuple[str, ...] = ()

    @property
    def nranks(self) -> int:
        return len(self.devices)

    @property
    def avg_busbw(self) -> float | None:
        """Mean bus bandwidth over all measurements, as nccl-tests reports it."""
        vals = [v for r in self.rows for v in (r.busbw_out, r.busbw_in) if v is not None]
        return sum(vals) / len(vals) if vals else None

    @property
    def peak_busbw_out(self) -> float | None:
        vals = [r.busbw_out for r in self.rows if r.busbw_out is not None]
        return max(vals) if vals else None

    def to_text(self) -> str:
        """The sweep as nccl-tests prints it, with a header and the average."""
        gpus = ",".join(str(d) for d in self.devices)
        lines = [
            f"all-reduce, float, sum · {self.nranks} GPU{'s' if self.nranks != 1 else ''} "
            f"({gpus}) · NCCL {self.nccl_version} · {self.iters} iterations"
        ]
        if self.p2p:
            lines.append(
                "P2P access  "
                + "  ".join(f"{k} {'yes' if v else 'no'}" for k, v in self.p2p.items())
            )
        lines += format_rows(self.rows)
        avg = self.avg_busbw
        lines.append(
            f"avg bus bandwidth   {avg:.2f} GB/s"
            if avg is not None
            else "avg bus bandwidth   - (needs two or more GPUs)"
        )
        if self.validated is not None:
            lines.append(
                "results     correct"
                if self.validated
                else f"results     WRONG: {self.validation_error}"
            )
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        rows = []
        for r, dev_us in zip(self.rows, self.device_time_us, strict=True):
            row = r.to_json()
            row["device_time_us_out"] = dev_us
            rows.append(row)
        return {
            "collective": "all_reduce",
            "nranks": self.nranks,
            "rows": rows,
            "avg_busbw": self.avg_busbw,
            "peak_busbw_out": self.peak_busbw_out,
            "nccl_version": self.nccl_version,
            "nccl_path": self.nccl_path,
            "cudart_path": self.cudart_path,
            "devices": [
                {"cuda_index": d, "pci_bus_id": b}
                for d, b in zip(self.devices, self.pci_bus_ids, strict=True)
            ],
            "type": self.dtype,
            "iters": self.iters,
            "warmup": self.warmup,
            "validated": self.validated,
            "validation_error": self.validation_error,
            "p2p": dict(self.p2p),
            "notes": list(self.notes),
        }


class _BenchBuffers:
    """Per-device send/recv buffers and streams, freed in ``close``."""

    def __init__(self, cudart: CudaRuntime, devices: Sequence[int], nbytes: int) -> None:
        self.cudart = cudart
        self.devices = list(devices)
        self.send: list[int] = []
        self.recv: list[int] = []
        self.streams: list[int] = []
        self.events: list[tuple[int, int]] = []
        try:
            for d in self.devices:
                cudart.set_device(d)
                self.send.append(cudart.malloc(nbytes))
                self.recv.append(cudart.malloc(nbytes))
                cudart.memset(self.send[-1], 0, nbytes)
                cudart.memset(self.recv[-1], 0, nbytes)
                self.streams.append(cudart.stream_create())
                self.events.append((cudart.event_create(), cudart.event_create()))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        c = self.cudart
        for i, d in enumerate(self.devices):
            try:
                c.set_device(d)
            except CudaError:
                continue
            for ptrs in (self.send, self.recv):
                if i < len(ptrs):
                    _quietly(c.free, ptrs[i])
            if i < len(self.streams):
                _quietly(c.stream_destroy, self.streams[i])
            if i < len(self.events):
                for e in self.events[i]:
                    _quietly(c.event_destroy, e)
        self.send, self.recv, self.streams, self.events = [], [], [], []


def _quietly(fn: Callable[[int], None], arg: int) -> None:
    with contextlib.suppress(CudaError):
        fn(arg)


def _wait_all(
    cudart: CudaRuntime,
    comm: NCCLCommunicator,
    streams: Sequence[int],
    timeout_s: float,
    clock: Callable[[], float],
) -> None:
    """Wait for every stream, polling as nccl-tests does so a hang becomes an error."""
    deadline = clock() + timeout_s
    pending = list(enumerate(streams))
    while pending:
        still = []
        for rank, s in pending:
            if not cudart.stream_done(s):
                still.append((rank, s))
        pending = still
        if not pending:
            return
        for rank in range(comm.n_devs):
            err = comm.async_error(rank)
            if err not in (NCCLResult.SUCCESS, NCCLResult.IN_PROGRESS):
                name = RESULT_NAMES[err.value]
                raise NCCLError(err.value, f"NCCL reported {name} on rank {rank}")
        if clock() > deadline:
            raise NCCLError(
                NCCLResult.INTERNAL_ERROR.value,
                f"all-reduce did not finish within {timeout_s:.0f} s: GPU-to-GPU transfers "
                "hang on this rig; try NCCL_P2P_DISABLE=1",
            )
        time.sleep(0)


def _validate(
    cudart: CudaRuntime,
    comm: NCCLCommunicator,
    bufs: _BenchBuffers,
    count: int,
    timeout_s: float,
    clock: Callable[[], float],
) -> str | None:
    """One float all-reduce with known data; None when every GPU got the right sums."""
    n = comm.n_devs
    nbytes = count * 4
    for rank, d in enumerate(bufs.devices):
        host = (ctypes.c_float * count)(*[(rank + 1) * (i % 7 + 1) for i in range(count)])
        cudart.set_device(d)
        cudart.copy_to_device(bufs.send[rank], host, nbytes)
        cudart.memset(bufs.recv[rank], 0, nbytes)
    comm.all_reduce(bufs.send, bufs.recv, count, NCCLDataType.FLOAT32, NCCLRedOp.SUM, bufs.streams)
    _wait_all(cudart, comm, bufs.streams, timeout_s, clock)
    ranks_sum = n * (n + 1) // 2
    for rank, d in enumerate(bufs.devices):
        out = (ctypes.c_float * count)()
        cudart.set_device(d)
        cudart.copy_to_host(out, bufs.recv[rank], nbytes)
        for i in range(count):
            want = float(ranks_sum * (i % 7 + 1))
            if out[i] != want:
                return f"GPU {d} element {i}: got {out[i]:g}, expected {want:g}"
    return None


def run_allreduce_bench(
    *,
    devices: Sequence[int] | None = None,
    min_bytes: int = 8,
    max_bytes: int = 256 * MIB,
    factor: int = 2,
    iters: int = 20,
    warmup: int = 5,
    validate: bool = True,
    nccl: NcclLibrary | None = None,
    cudart: CudaRuntime | None = None,
    nccl_path: str | None = None,
    cudart_path: str | None = None,
    timeout_s: float = SYNC_TIMEOUT_S,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[NcclTestsRow], None] | None = None,
) -> BenchResult:
    """Float all-reduce (sum) from ``min_bytes`` to ``max_bytes``, out-of-place and in-place,
    timed as nccl-tests times it: host clock around ``iters`` launches after ``warmup``.

    algbw = size / time; busbw = algbw * 2(n-1)/n. Raises NcclUnavailable when a library or
    a GPU is missing, NCCLError or CudaError when a call fails.
    """
    if iters < 1 or warmup < 0:
        raise ValueError("iters must be >= 1 and warmup >= 0")
    lib = nccl or load_nccl(nccl_path)
    if cudart is None:
        rt, visible = open_cuda(cudart_path)
    else:
        rt, visible = cudart, cuda_devices(cudart)
    devs = list(range(visible)) if devices is None else list(devices)
    bad = [d for d in devs if not 0 <= d < visible]
    if bad:
        raise NcclUnavailable(f"no GPU {bad[0]}: CUDA sees {visible} (0-{visible - 1})")
    if not devs:
        raise ValueError("no devices to run on")
    notes: list[str] = []
    dtype = NCCLDataType.FLOAT32
    # Two buffers per GPU at the largest size, with room left for NCCL's own buffers.
    limit = max_bytes
    for d in devs:
        rt.set_device(d)
        free, _total = rt.mem_get_info()
        limit = min(limit, max((free - 512 * MIB) // 2, 0))
    sizes = sweep_sizes(min_bytes, max_bytes, factor, dtype.itemsize)
    fitting = [s for s in sizes if s <= limit]
    if len(fitting) < len(sizes):
        if not fitting:
            raise NcclUnavailable(
                f"not enough free GPU memory for {min_bytes} B buffers (limit {limit} B)"
            )
        notes.append(
            f"sizes above {fitting[-1]} B skipped: not enough free GPU memory for two buffers"
        )
    sizes = fitting
    n = len(devs)
    factor_bw = bus_bandwidth_factor("all_reduce", n) or 0.0
    if n == 1:
        notes.append(
            "one GPU: all-reduce is a local copy here; bus bandwidth needs two or more GPUs"
        )
    p2p: dict[str, bool] = {}
    for i, a in enumerate(devs):
        for b in devs[i + 1 :]:
            p2p[f"GPU{a}-GPU{b}"] = rt.can_access_peer(a, b)
    buses = tuple(rt.pci_bus_id(d) for d in devs)
    bufs = _BenchBuffers(rt, devs, sizes[-1])
    rows: list[NcclTestsRow] = []
    dev_times: list[float | None] = []
    validated: bool | None = None
    validation_error: str | None = None
    comm = NCCLCommunicator(device_ids=devs, library=lib)
    try:
        comm.init()
        if validate:
            check_count = min(1024, sizes[-1] // 4)
            validation_error = _validate(rt, comm, bufs, check_count, timeout_s, clock)
            validated = validation_error is None
            if validation_error:
                notes.append(
                    "all-reduce returned wrong sums: GPU-to-GPU transfers corrupt data on this "
                    "rig; try NCCL_P2P_DISABLE=1"
                )
        for size in sizes:
            count = size // dtype.itemsize
            measured: list[tuple[float, float | None]] = []
            for in_place in (False, True):
                recv = bufs.send if in_place else bufs.recv
                for _ in range(warmup):
                    comm.all_reduce(bufs.send, recv, count, dtype, NCCLRedOp.SUM, bufs.streams)
                _wait_all(rt, comm, bufs.streams, timeout_s, clock)
                for (start, _end), s, d in zip(bufs.events, bufs.streams, devs, strict=True):
                    rt.set_device(d)
                    rt.event_record(start, s)
                t0 = clock()
                for _ in range(iters):
                    comm.all_reduce(bufs.send, recv, count, dtype, NCCLRedOp.SUM, bufs.streams)
                for (_start, end), s, d in zip(bufs.events, bufs.streams, devs, strict=True):
                    rt.set_device(d)
                    rt.event_record(end, s)
                _wait_all(rt, comm, bufs.streams, timeout_s, clock)
                host_us = (clock() - t0) / iters * 1e6
                dev_ms = [rt.event_elapsed_ms(s0, s1) for s0, s1 in bufs.events]
                dev_us = max(dev_ms) * 1000.0 / iters if dev_ms else None
                measured.append((host_us, dev_us))
            (t_out, dev_out), (t_in, _dev_in) = measured
            alg_out = size / (t_out * 1e3) if t_out > 0 else None  # GB/s = B / (us * 1e3)
            alg_in = size / (t_in * 1e3) if t_in > 0 else None
            row = NcclTestsRow(
                size=size,
                count=count,
                type=dtype.nccl_tests_name,
                redop="sum",
                root=-1,
                time_us_out=t_out,
                algbw_out=alg_out,
                busbw_out=alg_out * factor_bw if alg_out is not None and n > 1 else None,
                wrong_out=None,
                time_us_in=t_in,
                algbw_in=alg_in,
                busbw_in=alg_in * factor_bw if alg_in is not None and n > 1 else None,
                wrong_in=None,
            )
            rows.append(row)
            dev_times.append(dev_out)
            if progress is not None:
                progress(row)
    except NCCLError:
        comm.abort()
        raise
    finally:
        if comm.initialized:
            comm.close()
        bufs.close()
    return BenchResult(
        nccl_version=lib.version,
        nccl_path=lib.path,
        cudart_path=rt.path,
        devices=tuple(devs),
        pci_bus_ids=buses,
        dtype=dtype.nccl_tests_name,
        rows=tuple(rows),
        device_time_us=tuple(dev_times),
        iters=iters,
        warmup=warmup,
        validated=validated,
        validation_error=validation_error,
        p2p=p2p,
        notes=tuple(notes),
    )


# --- the seed API ----------------------------------------------------------------------


def is_nccl_available(lib_path: str = NCCL_SONAME) -> bool:
    """Whether libnccl can be loaded here (no GPU needed)."""
    try:
        load_nccl(lib_path)
    except NcclUnavailable:
        return False
    return True


def get_nccl_version(lib_path: str = NCCL_SONAME) -> str | None:
    """The NCCL version ("2.18.5"), or None when NCCL cannot be loaded."""
    try:
        return load_nccl(lib_path).version
    except NcclUnavailable:
        return None


def get_nccl_info() -> dict[str, Any]:
    """Availability, version, library path and the NCCL environment, as a dict."""
    probe = probe_nccl()
    env = os.environ
    return {
        "available": probe.available,
        "version": probe.version,
        "lib_path": probe.path or NCCL_SONAME,
        "path": probe.path,
        "found_by": probe.found_by,
        "nccl_p2p_disable": env.get("NCCL_P2P_DISABLE", "0"),
        "nccl_ib_disable": env.get("NCCL_IB_DISABLE", "0"),
        "nccl_socket_ifname": env.get("NCCL_SOCKET_IFNAME"),
        "nccl_debug": env.get("NCCL_DEBUG"),
        "env": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")},
        "reason": probe.reason,
    }


def print_nccl_info() -> None:
    """Print NCCL's availability, version and P2P/IB settings."""
    info = get_nccl_info()
    p2p_off = info["nccl_p2p_disable"] not in ("0", "", None)
    ib_off = info["nccl_ib_disable"] not in ("0", "", None)
    print("NCCL Info")
    print("---------")
    print(f"Available : {info['available']}")
    print(f"Version   : {info['version'] or '-'}")
    print(f"Library   : {info['path'] or info['reason'] or '-'}")
    print(f"P2P       : {'disabled' if p2p_off else 'enabled'}")
    print(f"IB        : {'disabled' if ib_off else 'enabled'}")


def local_interfaces() -> list[str]:
    """Network interface names on this host; empty when the OS will not say."""
    try:
        return [name for _idx, name in socket.if_nameindex()]
    except OSError:
        return []


def setup_nccl_environment(
    disable_p2p: bool = False,
    disable_ib: bool = True,
    socket_ifname: str | None = "eth0",
    debug: str | None = None,
) -> dict[str, str]:
    """Set NCCL_* variables in this process (before NCCL starts; it reads them once).

    NCCL_SOCKET_IFNAME is set only when it names an interface this host has: an interface
    that does not exist stops NCCL from starting at all, so a missing one is skipped with a
    warning. Returns what was set.
    """
    applied = {
        "NCCL_P2P_DISABLE": "1" if disable_p2p else "0",
        "NCCL_IB_DISABLE": "1" if disable_ib else "0",
    }
    if socket_ifname:
        have = local_interfaces()
        if not have or socket_ifname_matches(socket_ifname, have):
            applied["NCCL_SOCKET_IFNAME"] = socket_ifname
        else:
            warnings.warn(
                f"NCCL_SOCKET_IFNAME={socket_ifname} not set: no such interface here "
                f"(have: {', '.join(have)})",
                RuntimeWarning,
                stacklevel=2,
            )
    if debug:
        applied["NCCL_DEBUG"] = debug.upper()
    os.environ.update(applied)
    return applied


def kaggle_nccl_config() -> dict[str, str]:
    """The NCCL environment for Kaggle's two T4s on PCIe."""
    return {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "WARN",
    }

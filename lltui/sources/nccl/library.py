"""libnccl through ctypes: its functions declared, its version, and a probe that never raises.

``ncclGetVersion`` answers without a driver, so the version is known on a machine with no GPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.nccl.enums import RESULT_NAMES, decode_nccl_version
from lltui.sources.nccl.errors import NCCLError, NcclUnavailable
from lltui.sources.nccl.finder import (
    NCCL_LIB_ENV,
    NCCL_SONAME,
    LibraryCandidate,
    explicit_path,
    find_nccl_candidates,
    load_cdll,
    load_failure,
)

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
    "ncclAllReduce": ([_P, _P, _SZ, _I, _I, _P, _P], _I),
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


def load_nccl(
    lib_path: str | None = None,
    *,
    loader: Callable[[str], Any] = load_cdll,
    rccl_first: bool = False,
) -> NcclLibrary:
    """Load libnccl: the path given (or $LLTUI_NCCL_LIB), else the first candidate that loads
    (ROCm's RCCL tried first with ``rccl_first``, for a rig of AMD GPUs alone).

    Raises NcclUnavailable with where it looked.
    """
    explicit = explicit_path(lib_path, NCCL_LIB_ENV, NCCL_SONAME)
    if explicit:
        candidates = [LibraryCandidate(explicit, "explicit")]
    else:
        found = find_nccl_candidates(rccl_first=rccl_first)
        candidates = [*found, LibraryCandidate(NCCL_SONAME, "dlopen")]
    errors: list[str] = []
    for c in candidates:
        try:
            return NcclLibrary(loader(c.path), c.path, c.found_by)
        except (OSError, AttributeError, NCCLError) as exc:
            errors.append(load_failure(c.path, exc))
    if explicit:
        raise NcclUnavailable(f"cannot load {errors[0]}")
    looked = (
        "(looked in LD_LIBRARY_PATH, ldconfig, system directories, /opt/rocm, "
        "nvidia-nccl-cu12/cu13 wheels, torch)"
    )
    if rccl_first:
        raise NcclUnavailable(
            f"ROCm's librccl.so.1 not found, nor libnccl.so.2 {looked}; RCCL ships with "
            f"ROCm (/opt/rocm/lib), or name it with {NCCL_LIB_ENV}"
        )
    raise NcclUnavailable(
        f"libnccl.so.2 not found, nor ROCm's librccl.so.1 {looked}; pip install nvidia-nccl-cu12"
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
            **fields_of(self, "available version version_code path found_by"),
            "candidates": [{"path": c.path, "found_by": c.found_by} for c in self.candidates],
            "reason": self.reason,
        }


def probe_nccl(lib_path: str | None = None, *, rccl_first: bool = False) -> NcclProbe:
    """What libnccl is here, without raising."""
    explicit = explicit_path(lib_path, NCCL_LIB_ENV, NCCL_SONAME)
    candidates = tuple(find_nccl_candidates(rccl_first=rccl_first)) if not explicit else ()
    try:
        lib = load_nccl(lib_path, rccl_first=rccl_first)
    except NcclUnavailable as exc:
        return NcclProbe(False, None, None, None, None, candidates, str(exc))
    return NcclProbe(True, lib.version, lib.version_code, lib.path, lib.found_by, candidates)

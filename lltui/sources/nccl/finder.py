"""Finding libnccl and libcudart: LD_LIBRARY_PATH, the linker cache (``ldconfig -p``), the
usual system directories, the nvidia-nccl / nvidia-cuda-runtime wheels and torch's copy."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import glob
import os
import shutil
import site
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lltui.core.api_args import check_arg

NCCL_SONAME = "libnccl.so.2"
RCCL_SONAME = "librccl.so.1"  # ROCm's NCCL: the same API, ncclGetVersion and all
ROCM_LIB_DIRS = ("/opt/rocm/lib", "/opt/rocm/lib64")
CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so")
NCCL_LIB_ENV = "LLTUI_NCCL_LIB"  # a path that wins over the search
CUDART_LIB_ENV = "LLTUI_CUDART_LIB"
LDCONFIG_TIMEOUT_S = 5.0

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
    extra: list[str] = []
    with contextlib.suppress(AttributeError):  # some virtualenv builds lack these
        extra += site.getsitepackages()
    with contextlib.suppress(AttributeError):
        extra.append(site.getusersitepackages())
    return list(dict.fromkeys(d for d in [*sys.path, *extra] if d and os.path.isdir(d)))


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
    rccl_first: bool = False,
) -> list[LibraryCandidate]:
    """Every libnccl.so.2 on this machine and every RCCL (librccl.so.1, ROCm's, in
    /opt/rocm and torch's ROCm wheels), in the order lltui tries them: NVIDIA's first, RCCL
    first where the caller knows the GPUs are all AMD (``rccl_first``)."""
    env = os.environ if environ is None else environ
    nccl = _find_candidates(
        (NCCL_SONAME,),
        NCCL_WHEEL_DIRS,
        "libnccl*.so*",
        environ=env,
        ldconfig_text=ldconfig_text,
        site_dirs=site_dirs,
        system_dirs=system_dirs,
    )
    rocm = [*ROCM_LIB_DIRS, *sorted(glob.glob("/opt/rocm-*/lib"))] if system_dirs else []
    rccl = _find_candidates(
        (RCCL_SONAME,),
        (),
        "librccl*.so*",
        environ=env,
        ldconfig_text=ldconfig_text,
        site_dirs=site_dirs,
        system_dirs=[*system_dirs, *rocm],
    )
    first, then = (rccl, nccl) if rccl_first else (nccl, rccl)
    return first + [c for c in then if c.path not in {f.path for f in first}]


def library_kind(path: str | None) -> str | None:
    """``rccl`` for ROCm's library, ``nccl`` for NVIDIA's, by its file name."""
    if not path:
        return None
    return "rccl" if "rccl" in os.path.basename(path).lower() else "nccl"


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


def lib_path_arg(lib_path: str | os.PathLike[str] | None) -> str | None:
    """The public API's ``lib_path`` as a string (None: search); TypeError for another type."""
    check_arg(
        "lib_path",
        lib_path,
        (str, os.PathLike, type(None)),
        "libnccl's name or path (a string or path), or None to search",
    )
    return None if lib_path is None else os.fspath(lib_path)


def explicit_path(lib_path: str | None, env_var: str, default_soname: str) -> str | None:
    """A path the caller named (argument, then environment); None means search. A name
    without a slash that is a file here is that file (the loader would search the system's
    folders for the name, and load the system's libnccl beside a build's own)."""
    named = lib_path if lib_path and lib_path != default_soname else os.environ.get(env_var)
    if named and os.sep not in named and os.path.isfile(named):
        return os.path.abspath(named)
    return named or None


def load_failure(path: str, exc: Exception) -> str:
    """``path: why`` it did not load, the path once (dlopen's own message starts with it)."""
    return f"{path}: {str(exc).removeprefix(f'{path}: ')}"


def load_cdll(path: str) -> Any:
    # Local binding: two copies of NCCL (a wheel's and torch's, say) must not interpose.
    check_whole_elf(path)
    return ctypes.CDLL(path)


_PT_LOAD = 1


def check_whole_elf(path: str) -> None:
    """OSError where ``path`` is an ELF file cut short: the loader maps its segments past
    the end of the file, and the first touch of them kills the process (SIGBUS), not an
    error ctypes could raise. Other files are left to the loader to refuse."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
                return
            size = os.fstat(f.fileno()).st_size
            wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
            phoff = struct.unpack_from(f"{order}{'Q' if wide else 'I'}", head, 32 if wide else 28)
            phentsize, phnum = struct.unpack_from(f"{order}HH", head, 54 if wide else 42)
            f.seek(phoff[0])
            table = f.read(phentsize * phnum)
    except OSError:
        return  # (unreadable: the loader says why)
    ends = [phoff[0] + phentsize * phnum]  # the program headers themselves
    if len(table) == phentsize * phnum:
        for at in range(0, len(table), phentsize):
            if wide:
                kind, _flags, offset, _va, _pa, filesz = struct.unpack_from(
                    f"{order}IIQQQQ", table, at
                )
            else:
                kind, offset, _va, _pa, filesz = struct.unpack_from(f"{order}IIIII", table, at)
            if kind == _PT_LOAD:
                ends.append(offset + filesz)
    if max(ends) > size:
        raise OSError("the file is cut short (not a whole shared library)")

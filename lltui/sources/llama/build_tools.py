"""The programs a llama.cpp build needs (cmake, a C++ compiler, nvcc for CUDA) and the CUDA
architectures to build for."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lltui.sources.llama.build_cache import BuildError

# Where nvcc usually lives when the CUDA toolkit is not on PATH.
NVCC_FALLBACKS: tuple[str, ...] = ("/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc")


@dataclass(frozen=True, slots=True)
class Toolchain:
    """The programs a build needs, as found on this machine."""

    cmake: str
    cxx: str
    nvcc: str | None = None
    hip_compiler: str | None = None  # ROCm's clang++, the HIP compiler llama.cpp's HIP build uses
    rocm_path: str | None = None
    glslc: str | None = None  # the Vulkan shader compiler the Vulkan build needs


def find_nvcc(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        return found
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    candidates = [os.path.join(cuda_home, "bin", "nvcc")] if cuda_home else []
    candidates += NVCC_FALLBACKS  # read at call time: tests narrow it
    return next((p for p in candidates if os.path.isfile(p) and os.access(p, os.X_OK)), None)


def _cmake_version(cmake: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [cmake, "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"cmake version (\d+)\.(\d+)(?:\.(\d+))?", out)
    if not m:
        return None
    return tuple(int(g) for g in m.groups() if g is not None)


MIN_CMAKE = (3, 18)


ROCM_FALLBACKS: tuple[str, ...] = ("/opt/rocm",)


def find_rocm(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """(ROCm's directory, its HIP clang++): $ROCM_PATH or $HIP_PATH, else /opt/rocm."""
    env = os.environ if env is None else env
    roots = [r for r in (env.get("ROCM_PATH"), env.get("HIP_PATH")) if r]
    for root in [*roots, *ROCM_FALLBACKS]:  # read at call time: tests narrow it
        clang = os.path.join(root, "llvm", "bin", "clang++")
        if os.path.isfile(clang) and os.access(clang, os.X_OK):
            return root, clang
    return None


def _gpu_tools(toolchain: Toolchain, backend: str, env: Mapping[str, str]) -> Toolchain:
    """The backend's own compilers: ROCm's HIP clang, or Vulkan's glslc; one clear line
    when they are missing."""
    if backend == "rocm":
        rocm = find_rocm(env)
        if rocm is None:
            raise BuildError(
                "--rocm needs ROCm's HIP compiler (llvm/bin/clang++ under $ROCM_PATH or "
                "/opt/rocm): install ROCm (amdgpu-install --usecase=hiplibsdk) or build "
                "with --vulkan"
            )
        return replace(toolchain, rocm_path=rocm[0], hip_compiler=rocm[1])
    if backend == "vulkan":
        glslc = shutil.which("glslc", path=env.get("PATH"))
        if glslc is None:
            raise BuildError(
                "--vulkan needs glslc and the Vulkan headers: apt install glslc "
                "libvulkan-dev (or the LunarG Vulkan SDK)"
            )
        return replace(toolchain, glslc=glslc)
    return toolchain


def check_toolchain(
    cuda: bool = False, env: Mapping[str, str] | None = None, *, backend: str = ""
) -> Toolchain:
    """Find cmake, a C++ compiler and the backend's compiler (nvcc for CUDA, ROCm's clang
    for ``backend="rocm"``, glslc for ``"vulkan"``), or raise one clear line."""
    env = os.environ if env is None else env
    path = env.get("PATH")
    cmake = shutil.which("cmake", path=path)
    if cmake is None:
        raise BuildError(
            "cmake not found on PATH: install it (apt install cmake, or pip install cmake)"
        )
    version = _cmake_version(cmake)
    if version is None:
        raise BuildError(f"{cmake} does not run (cmake --version failed)")
    if version < MIN_CMAKE:
        have = ".".join(map(str, version))
        need = ".".join(map(str, MIN_CMAKE))
        raise BuildError(f"cmake {have} is too old: llama.cpp needs {need} or newer")
    cxx_names = [env["CXX"]] if env.get("CXX") else ["c++", "g++", "clang++"]
    cxx = next((found for n in cxx_names if (found := shutil.which(n, path=path))), None)
    if cxx is None:
        raise BuildError(
            "no C++ compiler found (looked for " + ", ".join(cxx_names) + "): "
            "install one (apt install g++ or build-essential)"
        )
    nvcc = find_nvcc(env)
    if cuda and nvcc is None:
        raise BuildError(
            "--cuda needs the CUDA toolkit's nvcc, which is not on PATH nor in "
            "/usr/local/cuda/bin: install the toolkit or build without --cuda"
        )
    tools = Toolchain(cmake=cmake, cxx=cxx, nvcc=nvcc if cuda else None)
    return _gpu_tools(tools, backend, env)


def cuda_architectures(capabilities: Sequence[tuple[int, int] | None]) -> str | None:
    """CMAKE_CUDA_ARCHITECTURES for these compute capabilities (``[(8, 6), (7, 5)]`` -> ``75;86``).

    ``None`` when none is known: llama.cpp then picks its own list for the toolkit version.
    """
    archs = sorted({major * 10 + minor for cc in capabilities if cc for major, minor in [cc]})
    return ";".join(str(a) for a in archs) if archs else None


def gpu_targets(gfx: Sequence[str | None]) -> str | None:
    """GPU_TARGETS for a ROCm build from the GPUs' ISAs (``gfx1100;gfx942``); None when none
    is known: llama.cpp's HIP build then compiles for its default list."""
    targets = sorted({g for g in gfx if g and g.startswith("gfx")})
    return ";".join(targets) if targets else None


def detect_gpu_targets() -> str | None:
    """The local AMD GPUs' ISAs, where the amd source answers."""
    from lltui.sources.gpu.kinds import one_sample

    sample = one_sample("amd")
    return gpu_targets([g.info.gfx_target for g in sample.gpus]) if sample else None


def detect_cuda_architectures() -> str | None:
    """The local GPUs' compute capabilities through NVML, if NVML answers."""
    try:
        from lltui.sources.gpu.nvml import NvmlSource
    except Exception:
        return None
    source = NvmlSource()
    try:
        info = source.open()
    except Exception:
        return None
    try:
        return cuda_architectures([g.compute_capability for g in info.gpus])
    finally:
        with contextlib.suppress(Exception):
            source.close()

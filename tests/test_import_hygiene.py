"""The core and the sources never pull in the UI; the core pulls in no I/O libraries."""

import importlib
import pathlib
import subprocess
import sys

CORE_FORBIDDEN = ("textual", "rich", "pynvml", "httpx", "psutil", "subprocess", "ctypes")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def _modules_in(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [
        f"{package}.{f.stem}"
        for path in pkg.__path__
        for f in sorted(pathlib.Path(path).glob("*.py"))
        if f.stem != "__init__"
    ]


def test_core_and_sources_do_not_import_textual():
    names = _modules_in("lltui.core") + _modules_in("lltui.sources")
    assert len(names) > 5, "no modules found"
    mods = _modules_after("\n".join(f"import {n}" for n in names))
    assert "textual" not in mods
    assert not any(m.startswith("textual.") for m in mods)


def test_core_imports_only_the_standard_library():
    names = _modules_in("lltui.core")
    # compare with a bare interpreter: only what the core modules themselves add counts
    baseline = _modules_after("")
    mods = _modules_after("\n".join(f"import {n}" for n in names)) - baseline
    bad = sorted(m for m in mods if m.split(".")[0] in CORE_FORBIDDEN)
    assert bad == []


def test_cli_help_does_not_import_textual():
    mods = _modules_after("from lltui.cli import build_parser\nbuild_parser()")
    assert "textual" not in mods

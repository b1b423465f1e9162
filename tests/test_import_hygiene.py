"""The core and the sources never pull in the UI; the core pulls in no I/O libraries."""

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


def test_core_and_sources_do_not_import_textual():
    import lltui.core
    import lltui.sources

    pkgs = ["lltui.core", "lltui.sources"]
    names = []
    for pkg in pkgs:
        mod = sys.modules[pkg]
        for path in mod.__path__:
            import pathlib

            for f in sorted(pathlib.Path(path).glob("*.py")):
                if f.stem != "__init__":
                    names.append(f"{pkg}.{f.stem}")
    assert names, "no modules found"
    mods = _modules_after("\n".join(f"import {n}" for n in names))
    assert "textual" not in mods
    assert not any(m.startswith("textual.") for m in mods)


def test_core_imports_only_the_standard_library():
    import pathlib

    import lltui.core

    names = [
        f"lltui.core.{f.stem}"
        for f in sorted(pathlib.Path(lltui.core.__path__[0]).glob("*.py"))
        if f.stem != "__init__"
    ]
    # subprocess and ctypes are imported by the interpreter's own startup on some builds;
    # check what the core modules themselves add.
    baseline = _modules_after("")
    mods = _modules_after("\n".join(f"import {n}" for n in names)) - baseline
    bad = sorted(m for m in mods if m.split(".")[0] in CORE_FORBIDDEN)
    assert bad == []


def test_cli_help_does_not_import_textual():
    mods = _modules_after("from lltui.cli import build_parser\nbuild_parser()")
    assert "textual" not in mods

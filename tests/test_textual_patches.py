"""Textual's internals lltui replaces (lltui/app/patches): on the Textual they were written
for, pinned in pyproject.toml, every patch takes. A Textual upgrade fails here first, so
that whoever moves the pin reruns the patches' own tests (test_partial_updates,
test_key_names, test_driver) and the idle benches before it lands."""

from __future__ import annotations

import pathlib
import tomllib

import textual
from textual.drivers.linux_driver import LinuxDriver

from lltui.app import patches
from lltui.app.patches.driver import QuietLinuxDriver, quiet

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_the_installed_textual_is_the_one_the_patches_were_written_for():
    assert textual.__version__ == patches.TEXTUAL_VERSION


def test_the_pin_in_pyproject_is_that_version():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"textual=={patches.TEXTUAL_VERSION}" in deps


def test_every_patch_takes_and_applying_again_changes_nothing():
    first = patches.apply()
    assert first == patches.Applied(partial_updates=True, key_names=True)
    assert patches.apply() == first
    assert quiet(LinuxDriver) is QuietLinuxDriver


def test_no_module_outside_the_patches_reaches_into_textuals_private_modules():
    private = ("from textual._", "import textual._")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "lltui").rglob("*.py")
        if "patches" not in path.parts and any(p in path.read_text() for p in private)
    ]
    assert offenders == []

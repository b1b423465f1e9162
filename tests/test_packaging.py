"""The package's metadata in the form current setuptools reads without a deprecation banner
(an SPDX license string, which it takes from 77 on), and the build asking for that setuptools."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_license_is_an_spdx_string_and_the_build_wants_a_setuptools_that_reads_it():
    data = tomllib.loads(PYPROJECT.read_text())
    assert data["project"]["license"] == "MIT"
    [setuptools] = [r for r in data["build-system"]["requires"] if r.startswith("setuptools")]
    found = re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert found and int(found.group(1)) >= 77

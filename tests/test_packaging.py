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


def test_the_package_says_it_is_typed_so_a_users_mypy_reads_the_api_types():
    """No py.typed marker (PEP 561): mypy in a project using lltui.api, installed from the
    wheel, stopped at the import ('missing library stubs or py.typed marker') and checked
    none of the API's annotations (setuptools puts the marker in the wheel by itself)."""
    assert (PYPROJECT.parent / "lltui" / "py.typed").is_file()

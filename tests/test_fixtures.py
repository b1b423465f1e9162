"""The fixtures the tests read are part of the repository: every file truth.json names is
here, and no test reaches outside the repository for data."""

from __future__ import annotations

import json
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"


def test_every_truth_entry_has_its_file_and_source_note():
    truth = json.loads((FIXTURES / "real" / "truth.json").read_text())
    assert len(truth["entries"]) >= 20
    for entry in truth["entries"]:
        path = FIXTURES / "real" / entry["file"]
        assert path.is_file(), entry["file"]
        assert path.with_suffix(".meta").is_file(), f"{entry['file']} has no source note"


def test_llama_server_captures_are_listed_in_their_index():
    index = (FIXTURES / "llama-server" / "INDEX.md").read_text()
    for path in (FIXTURES / "llama-server").iterdir():
        if path.name != "INDEX.md":
            assert f"`{path.name}`" in index, f"{path.name} is not described in INDEX.md"


def test_no_test_reads_outside_the_repository():
    outside = re.compile(r"parents\[[2-9]\]|\.\./shared|LLTUI_FIXTURES")
    for path in sorted(TESTS.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        assert not outside.search(path.read_text()), f"{path.name} reads outside the repo"

"""Regenerate the corpus of explained cases in tests/fixtures/llama-logs/cases/: one JSON per
public log, ``lltui explain``'s ``case`` (with a reconstructed header where
tests/support/public_models.py has one) and the comparison's per-line predictions, so a change
in the scanner, the rules or the estimate shows up in tests/test_explain_public.py as a diff.

    .venv/bin/python scripts/explain_cases.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from support.public_models import corpus_entry  # noqa: E402

LOGS = ROOT / "tests" / "fixtures" / "llama-logs"
OUT = LOGS / "cases"


def main() -> None:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for log in sorted(LOGS.glob("*.log")):
            entry = corpus_entry(log, Path(tmp))
            path = OUT / f"{log.stem}.json"
            path.write_text(json.dumps(entry, indent=1, sort_keys=True) + "\n")
            print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()

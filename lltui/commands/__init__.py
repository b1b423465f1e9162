"""CLI subcommands: each module registers its parser and runs it.

Modules here import only the standard library at top level so ``lltui SUBCOMMAND --help``
and ``lltui fit --json`` start fast; heavy imports go inside ``run``.
"""

from __future__ import annotations

import json
import sys
from typing import Any


class CliError(Exception):
    """One line for the user and an exit code (1 failure, 2 bad input or usage)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")

"""The models of a repository, listed when a reference names the repository but not one
model in it (``lltui quant hf:OWNER/REPO``, ``lltui fit hf:OWNER/REPO``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lltui.commands import CliError, print_json

if TYPE_CHECKING:
    from lltui.services.fit import ModelChoice


def show_choices(exc: ModelChoice, verb: str, as_json: bool) -> bool:
    """Print the listing a repository reference carries on stdout. True when that is the
    whole answer (quant of a repository); CliError when a model had to be named."""
    if as_json:
        print_json(exc.data)
    else:
        print("\n".join(exc.lines))
    if verb == "quant" and not exc.named:
        return True
    raise CliError(f"{verb}: {exc}", 2, answered=as_json)

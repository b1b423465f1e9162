"""The members of a JSON object read straight off a snapshot's attributes.

Most of a ``--json`` contract is a snapshot's fields under their own names; the names are
written once, in the contract's order, as one string (``"memory_used memory_free"``)."""

from __future__ import annotations

from typing import Any


def fields_of(obj: object, names: str) -> dict[str, Any]:
    """``obj``'s attributes ``names`` (space-separated), in that order, by their names."""
    return {name: getattr(obj, name) for name in names.split()}

"""Where lltui reaches into Textual's internals: every such place is here, applied from one
call, each checked by a test on the Textual version it was written for.

- ``partial_updates``: a partial update writes the changed cells, not whole line starts, and
  renders only the changed lines (the monitor's idle redraw cost).
- ``key_names``: a key's character and display name from a table of ASCII's, not Python's
  Unicode name database (whose pages stayed resident: 0.8 MiB).
- ``driver``: the Linux driver's input thread sleeps until there is input (ten wake-ups a
  second otherwise); used through the documented ``App.get_driver_class``.

Each patch checks the shape of what it replaces and leaves Textual as it is where that shape
changed: an upgrade costs speed, never correctness. ``tests/test_textual_patches.py`` fails
when the installed Textual is not :data:`TEXTUAL_VERSION`, the one pinned in pyproject.toml:
whoever moves the pin reruns the patches' tests and benches first.
"""

from __future__ import annotations

from dataclasses import dataclass

from lltui.app.patches import key_names, partial_updates

TEXTUAL_VERSION = "8.2.8"


@dataclass(frozen=True, slots=True)
class Applied:
    """Which patches took (False: Textual's code is not what the patch was written for)."""

    partial_updates: bool
    key_names: bool


def apply() -> Applied:
    """Apply the patches that replace Textual's functions (idempotent)."""
    return Applied(partial_updates.apply(), key_names.find_key_characters_here())

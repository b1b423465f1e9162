"""Text from files, servers and process lists, made safe to print on a terminal.

A GGUF's ``general.name``, a llama-server log line or another user's command line can hold
escape sequences that clear the screen, retitle the window or worse. Printed through
:func:`printable`, every control character shows as a visible ``\\u001b``-style escape instead
(the same spelling JSON uses, so a JSON document stays valid); newlines and tabs stay unless
a single line is wanted.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (U+009B is a one-character CSI)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str, *, one_line: bool = False) -> str:
    """``text`` with control characters shown as escapes; ``one_line`` escapes newlines and
    tabs too."""
    pattern = _CONTROL_ONE_LINE if one_line else _CONTROL
    return pattern.sub(_escape, text) if pattern.search(text) else text

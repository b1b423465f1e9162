"""What works on this machine, as checks a user can act on, rendered as text or JSON."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.text import one_line

OK = "ok"
WARN = "warn"
MISSING = "missing"
ERROR = "error"

_MARK = {OK: "ok  ", WARN: "warn", MISSING: "miss", ERROR: "FAIL"}


@dataclass(frozen=True, slots=True)
class Check:
    name: str  # "driver", "nvml", "cuda", "nvidia-smi", "libnccl", "llama-server", ...
    status: str  # ok | warn | missing | error
    detail: str  # what was found, in words
    version: str | None = None
    hint: str | None = None  # what to do next
    essential: bool = False  # monitoring a real GPU needs it (of ``vendor``'s)
    vendor: str | None = None  # "nvidia", "amd": whose GPUs an essential check is for


def checks_ok(checks: tuple[Check, ...] | list[Check]) -> bool:
    """True when every essential check of one vendor passed (an AMD rig needs no NVIDIA
    driver); True where no check is essential."""
    by_vendor: dict[str | None, list[Check]] = {}
    for c in checks:
        if c.essential:
            by_vendor.setdefault(c.vendor, []).append(c)
    if not by_vendor:
        return True
    return any(all(c.status in (OK, WARN) for c in group) for group in by_vendor.values())


def checks_to_json(checks: tuple[Check, ...] | list[Check]) -> dict[str, Any]:
    return {
        "ok": checks_ok(checks),
        "checks": [
            fields_of(c, "name status detail version hint essential vendor") for c in checks
        ],
    }


def checks_to_text(checks: tuple[Check, ...] | list[Check], columns: int = 0) -> str:
    """One check a line, its hint under it; wrapped to ``columns`` (0: not wrapped) under
    the detail's column, as gpus and topo wrap theirs."""
    import textwrap

    width = max((len(c.name) for c in checks), default=0)
    indent = " " * (width + 9)
    lines = []

    def add(first: str, text: str) -> None:
        if columns <= len(indent) + 20:
            lines.append(first + text)
            return
        lines.extend(
            textwrap.wrap(
                text,
                columns,
                initial_indent=first,
                subsequent_indent=indent,
                break_long_words=False,  # (a path is not cut)
                break_on_hyphens=False,
            )
            or [first]
        )

    for c in checks:
        # details and versions come from drivers, libraries and binaries: one line each
        version = f" {one_line(c.version)}" if c.version else ""
        add(
            f"[{_MARK.get(c.status, c.status)}] {c.name:<{width}}  ",
            f"{one_line(c.detail)}{version}",
        )
        if c.hint and c.status != OK:
            add(f"{indent}-> ", one_line(c.hint))
    if checks_ok(checks):
        lines.append("GPU monitoring works here.")
    else:
        lines.append("No GPU can be monitored here; `lltui` shows a simulated rig.")
    return "\n".join(lines)

"""Whether a rig is simulated and why, as every output says it. Its own module: a fit or
quant for the rig in use says so without the gpus report and the monitor's models (~15 ms
of every fit --json, and of a fit on the simulated rig standing in for missing GPUs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lltui.core.text import one_line

if TYPE_CHECKING:
    from lltui.core.monitor.models import RigInfo


def simulated_json(info: RigInfo | None) -> dict[str, Any]:
    """Whether a rig is simulated and why, as every JSON output says it (false for a real
    rig, and where no rig was used: devices described by --gpus)."""
    simulated = info is not None and info.simulated
    return {
        "simulated": simulated,
        "simulated_reason": info.simulated_reason if info is not None and simulated else None,
    }


def simulated_line(info: RigInfo) -> str:
    """``SIMULATED rig (sim:kaggle-2xt4): why``, as every text output says it."""
    why = one_line(info.simulated_reason or "asked for")
    return f"SIMULATED rig ({one_line(info.source)}): {why}"

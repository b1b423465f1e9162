"""Signalling a process on a GPU from the monitor: the pid's identity checked first and
again just before the signal, so a reused pid is never signalled (sources.gpu.signals); and
which rigs' processes may be signalled at all (the source kinds table says whose pids are
this machine's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lltui.sources.gpu.kinds import kind_of, pids_here
from lltui.sources.gpu.signals import check_signal, send_signal, still_running

if TYPE_CHECKING:
    from lltui.core.monitor.models import RigInfo

__all__ = ["check_signal", "send_signal", "signal_refusal", "still_running"]


def signal_refusal(info: RigInfo) -> str | None:
    """Why processes of this rig are not signalled from here, or None when they are local.

    Only a local driver's source (NVML, nvidia-smi, AMD's) lists processes of this machine:
    a simulated rig's pids are made up, a replay's are from another time, a remote host's
    are another machine's; signalling the same number here would hit an unrelated process."""
    kind = kind_of(info.source)
    if info.simulated or kind.simulated or kind.recorded:
        return f"This rig is simulated ({info.source}): no real process is signalled."
    if not pids_here(info.source):
        return (
            f"These processes are not on this machine ({info.source}): "
            "no process is signalled from here."
        )
    return None

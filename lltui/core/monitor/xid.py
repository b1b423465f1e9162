"""What NVIDIA's XID error numbers mean, in words.

The driver reports a serious GPU error as an XID: a number written to the kernel log and, for
the critical ones, handed to NVML's event API. The words below follow NVIDIA's XID catalogue
(docs.nvidia.com/deploy/xid-errors); a number not listed here still reads as something a user
can look up.
"""

from __future__ import annotations

from lltui.core.monitor.models import XidEvent

XID_FELL_OFF_THE_BUS = 79

XID_MEANINGS: dict[int, str] = {
    8: "GPU stopped processing (the driver timed out)",
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    48: "double-bit ECC error",
    56: "display engine error",
    57: "error programming video memory interface",
    58: "unstable video memory interface detected",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement/row remapping recorded",
    64: "ECC page retirement/row remapping recording failed",
    68: "video processor exception",
    69: "graphics engine class error",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    93: "non-fatal violation of provisioned InfoROM wear limit",
    94: "contained ECC error",
    95: "uncontained ECC error",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
    154: "GPU recovery action changed",
}


def xid_meaning(xid: int) -> str:
    """The XID's meaning in words; an unknown number says where to look it up."""
    words = XID_MEANINGS.get(xid)
    return words if words is not None else f"XID {xid} (see NVIDIA's XID catalogue)"


def xid_event(xid: int, t: float) -> XidEvent:
    """An event for XID ``xid`` seen at ``t`` (seconds since the epoch), with its meaning."""
    return XidEvent(xid=xid, t=t, meaning=xid_meaning(xid))

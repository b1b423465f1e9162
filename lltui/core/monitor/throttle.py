"""Clock-event (throttle) reason bits, as NVML defines them, turned into words."""

from __future__ import annotations

# nvmlClocksEventReason* / nvmlClocksThrottleReason* bit values (nvml.h).
REASONS: tuple[tuple[int, str], ...] = (
    (0x0000000000000001, "idle"),
    (0x0000000000000002, "app clocks"),
    (0x0000000000000004, "power cap"),
    (0x0000000000000008, "hw slowdown"),
    (0x0000000000000010, "sync boost"),
    (0x0000000000000020, "sw thermal"),
    (0x0000000000000040, "hw thermal"),
    (0x0000000000000080, "power brake"),
    (0x0000000000000100, "display clocks"),
)

# AMD's violation kinds -> our word, with the names the two AMD interfaces give each: the
# ``amd-smi metric`` ``throttle.<prefix>_violation_status`` key (MI300 on) and the binding's
# ``amdsmi_get_violation_status()`` flag. ``throttle_status: THROTTLED`` (older firmware) is
# one word for them all.
AMD_VIOLATIONS: tuple[tuple[str, str, str | None], ...] = (
    ("prochot", "prochot", "active_prochot_thrm"),
    ("power cap", "ppt", "active_ppt_pwr"),
    ("thermal", "socket_thermal", "active_socket_thrm"),
    ("vr thermal", "vr_thermal", "active_vr_thrm"),
    ("hbm thermal", "hbm_thermal", "active_hbm_thrm"),
    ("host clock limit", "gfx_clk_below_host_limit", "active_gfx_clk_below_host_limit"),
    ("low utilization", "low_utilization", None),
)
AMD_THROTTLED = "throttled"

# Reasons that mean the GPU runs slower than it could while busy.
SLOWDOWNS = frozenset(
    {"power cap", "hw slowdown", "sw thermal", "hw thermal", "power brake"}
    | {"prochot", "thermal", "vr thermal", "hbm thermal", "host clock limit", AMD_THROTTLED}
)

# nvidia-smi --query-gpu clocks_event_reasons.* column suffix -> our word.
SMI_FIELDS: dict[str, str] = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "app clocks",
    "sw_power_cap": "power cap",
    "hw_slowdown": "hw slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "sw thermal",
    "hw_thermal_slowdown": "hw thermal",
    "hw_power_brake_slowdown": "power brake",
}


def reasons_from_mask(mask: int) -> tuple[str, ...]:
    """Words for the bits set in an NVML clock-event mask, in NVML's bit order."""
    words = [word for bit, word in REASONS if mask & bit]
    known = sum(bit for bit, _ in REASONS)  # each reason one bit of its own
    if mask & ~known:
        words.append(f"other (0x{mask & ~known:x})")
    return tuple(words)

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

# Reasons that mean the GPU runs slower than it could while busy.
SLOWDOWNS = frozenset({"power cap", "hw slowdown", "sw thermal", "hw thermal", "power brake"})

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
    known = 0
    for bit, _ in REASONS:
        known |= bit
    if mask & ~known:
        words.append(f"other (0x{mask & ~known:x})")
    return tuple(words)


def mask_from_reasons(words: tuple[str, ...] | list[str]) -> int:
    """Inverse of :func:`reasons_from_mask` for the known words (used by simulators)."""
    table = {word: bit for bit, word in REASONS}
    mask = 0
    for word in words:
        mask |= table.get(word, 0)
    return mask

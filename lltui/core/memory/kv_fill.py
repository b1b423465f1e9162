"""How full a running server's KV cache is, per device, from the tokens its slots hold.

llama.cpp has no endpoint for this; lltui knows what one cell (one token of one sequence)
takes on each device from the fit model's own caches (:class:`~.kv.KvCache.cell_bytes`: each
layer's K and V rows where that layer's cache lives), and ``/slots`` says how many tokens each
slot holds (``n_prompt_tokens`` is the slot's whole cache: its prompt and what it generated).

As llama.cpp counts them: a full-attention layer keeps every token of a sequence; a
sliding-window layer keeps at most the window (a cell older than the window is taken again
by the next token, ``is_masked_swa``); a recurrent layer's state is the same size whatever
the length, one per sequence that holds anything. Pure: frozen values in and out.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lltui.core.memory.results import FitResult
from lltui.core.units import MIB

RATE_WINDOW_S = 30.0  # the token rate that says how long until full is taken over this long


@dataclass(frozen=True, slots=True)
class KvDeviceLayout:
    """One device's share of the caches: bytes per token in the full and the windowed
    caches, recurrent state per sequence, and what all of it can hold."""

    name: str
    full_bytes_per_token: int
    swa_bytes_per_token: int
    rs_bytes_per_seq: int
    capacity_bytes: int


@dataclass(frozen=True, slots=True)
class KvLayout:
    """The caches of one server as the fit model sizes them for its command."""

    devices: tuple[KvDeviceLayout, ...]
    cells_per_stream: int  # n_ctx_seq
    streams: int  # 1 with a unified cache, else one per slot
    swa_window: int  # 0: no sliding-window layers

    @property
    def capacity_tokens(self) -> int:
        return self.cells_per_stream * self.streams


@dataclass(frozen=True, slots=True)
class KvDeviceFill:
    name: str
    used_bytes: int
    free_bytes: int
    capacity_bytes: int
    seconds_to_full: float | None = None  # at the current rate; None: not filling


@dataclass(frozen=True, slots=True)
class KvFill:
    """One sample: the tokens each slot holds, and per device what they take."""

    t: float  # monotonic seconds of the /slots answer
    slot_tokens: tuple[int, ...]
    slot_ctx: tuple[int | None, ...]  # each slot's context (/slots n_ctx)
    capacity_tokens: int
    devices: tuple[KvDeviceFill, ...]
    tokens_per_s: float | None = None  # how fast the slots' tokens grew lately

    @property
    def used_tokens(self) -> int:
        return sum(self.slot_tokens)

    @property
    def used_bytes(self) -> int:
        return sum(d.used_bytes for d in self.devices)

    @property
    def capacity_bytes(self) -> int:
        return sum(d.capacity_bytes for d in self.devices)

    def slot_share(self, i: int) -> float | None:
        """Slot ``i``'s tokens over its own context."""
        ctx = self.slot_ctx[i]
        return self.slot_tokens[i] / ctx if ctx else None

    @property
    def seconds_to_full(self) -> float | None:
        known = [d.seconds_to_full for d in self.devices if d.seconds_to_full is not None]
        return min(known) if known else None


def kv_layout(result: FitResult, device_of: Mapping[str, str] | None = None) -> KvLayout | None:
    """The layout of a fit result's caches; ``device_of``: the device each buffer name is
    shown under (host buffers under CPU); None when the model keeps no cache."""
    device_of = device_of or {}
    r = result.resolved
    full: dict[str, int] = {}
    swa: dict[str, int] = {}
    capacity: dict[str, int] = {}
    for cache in result.kv:
        per_token = swa if cache.swa else full
        for buf, n in cache.cell_bytes:
            name = device_of.get(buf, buf)
            per_token[name] = per_token.get(name, 0) + n
        for buf, n in cache.buffers:
            name = device_of.get(buf, buf)
            capacity[name] = capacity.get(name, 0) + n
    rs: dict[str, int] = {}
    for buf, kind, n in result.buffers:
        if kind == "RS":
            name = device_of.get(buf, buf)
            rs[name] = rs.get(name, 0) + n // max(1, r.n_seq_max)
            capacity[name] = capacity.get(name, 0) + n
    names = list(dict.fromkeys([*full, *swa, *rs]))
    if not names:
        return None
    devices = tuple(
        KvDeviceLayout(n, full.get(n, 0), swa.get(n, 0), rs.get(n, 0), capacity.get(n, 0))
        for n in names
    )
    window = (result.model.sliding_window or 0) if swa else 0
    return KvLayout(devices, r.n_ctx_seq, r.n_stream, window)


def device_used(d: KvDeviceLayout, slot_tokens: Sequence[int], window: int) -> int:
    """Bytes the slots' tokens take on one device."""
    used = 0
    for n in slot_tokens:
        if n <= 0:
            continue
        used += d.full_bytes_per_token * n + d.rs_bytes_per_seq
        used += d.swa_bytes_per_token * (min(n, window) if window else n)
    return used


def kv_fill(
    layout: KvLayout,
    slot_tokens: Sequence[int],
    slot_ctx: Sequence[int | None],
    t: float,
    earlier: Sequence[KvFill] = (),
) -> KvFill:
    """The fill of ``layout`` with these tokens per slot at ``t``; ``earlier`` samples (the
    oldest first) give the rate (over the last :data:`RATE_WINDOW_S`), and so how long until
    each device is full."""
    tokens = tuple(max(0, n) for n in slot_tokens)
    used = {d.name: device_used(d, tokens, layout.swa_window) for d in layout.devices}
    base = next((e for e in earlier if t - e.t <= RATE_WINDOW_S and e.t < t), None)
    rate = eta = None
    if base is not None:
        rate = (sum(tokens) - base.used_tokens) / (t - base.t)
        eta = _seconds_to_full(layout, tokens, slot_ctx, base, rate, t - base.t)
    devices = []
    for d in layout.devices:
        free = max(0, d.capacity_bytes - used[d.name])
        # only the cells of full attention (and a window not yet full) grow: a device of
        # sliding-window layers alone stops growing at the window
        grows = d.full_bytes_per_token > 0 or (
            d.swa_bytes_per_token > 0 and any(0 < n < layout.swa_window for n in tokens)
        )
        devices.append(
            KvDeviceFill(d.name, used[d.name], free, d.capacity_bytes, eta if grows else None)
        )
    return KvFill(
        t=t,
        slot_tokens=tokens,
        slot_ctx=tuple(slot_ctx),
        capacity_tokens=layout.capacity_tokens,
        devices=tuple(devices),
        tokens_per_s=rate,
    )


def _seconds_to_full(
    layout: KvLayout,
    tokens: Sequence[int],
    slot_ctx: Sequence[int | None],
    base: KvFill,
    rate: float,
    dt: float,
) -> float | None:
    """How long until the cache can take no more tokens at the current rates: its cells
    as a whole (a unified cache), or the first slot that reaches its own limit (each slot
    its n_ctx_seq). Counted in cells, not bytes: a sliding window's bytes stop growing and
    never fill (they made an eta 6x too long). ``rate``: tokens a second over all slots
    since ``base``, ``dt`` seconds ago."""
    found: list[float] = []
    if rate > 0:
        found.append(max(0, layout.capacity_tokens - sum(tokens)) / rate)
    for i, n in enumerate(tokens):
        limit = slot_ctx[i] if i < len(slot_ctx) else None
        was = base.slot_tokens[i] if i < len(base.slot_tokens) else 0
        if limit and n > was:
            found.append(max(0, limit - n) / ((n - was) / dt))
    return min(found, default=None)


class KvHistory:
    """A server's fills sample after sample, the last ones kept for the rate."""

    def __init__(self, keep: int = 64) -> None:
        self._fills: deque[KvFill] = deque(maxlen=keep)

    def fold(
        self,
        layout: KvLayout,
        slot_tokens: Sequence[int | None],
        slot_ctx: Sequence[int | None],
        t: float,
    ) -> KvFill:
        """The fill of these tokens per slot (None: a slot that never ran) at ``t``."""
        earlier = [f for f in self._fills if t - f.t <= RATE_WINDOW_S]
        fill = kv_fill(layout, [n or 0 for n in slot_tokens], slot_ctx, t, earlier)
        self._fills.append(fill)
        return fill

    def clear(self) -> None:
        self._fills.clear()


def fill_line(fill: KvFill) -> str:
    """The fill in one line: per device used of capacity, the slots, how long until full."""
    devs = ", ".join(
        f"{d.name} {d.used_bytes / MIB:.1f}/{_capacity(d.capacity_bytes / MIB)} MiB"
        for d in fill.devices
    )
    slots = " ".join(
        f"{fill.slot_share(i):.0%}" if fill.slot_share(i) is not None else str(n)
        for i, n in enumerate(fill.slot_tokens)
    )
    eta = fill.seconds_to_full
    tail = f"; full in {_duration(eta)}" if eta is not None else ""
    return f"KV {fill.used_tokens}/{fill.capacity_tokens} tokens: {devs}; slots {slots}{tail}"


def _capacity(mib: float) -> str:
    """Whole MiB, but a tenth where that would round a small cache away (0.5 MiB, not 0)."""
    return f"{mib:.0f}" if mib >= 100 else f"{mib:.1f}"


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"

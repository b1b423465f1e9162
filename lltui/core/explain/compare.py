"""Each buffer line of a log beside the bytes lltui predicts for it.

A logged line and a predicted buffer meet on (device, kind, cache): device names are the log's
(the estimate was made for devices named after its buffers), with the names that changed
over builds taken as one (``CPU`` for mapped weights before b3990, ``CPU_AARCH64`` for
``CPU_REPACK``, any ``X_Host`` for pinned host memory), and a KV line of a two-cache model
meets its own cache. A line of an earlier load (a fit probe, a run above the last) or of a
part lltui does not size here (a projector, a LoRA) has no prediction, and says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.explain.devices import LogDevices
from lltui.core.explain.settings import is_host_buffer
from lltui.core.llamalog.models import BufferLine, device_of_buffer
from lltui.core.memory.results import FitResult
from lltui.core.units import MIB

_KINDS = {"model": "model", "KV": "kv", "RS": "rs", "compute": "compute", "output": "output"}


@dataclass(frozen=True, slots=True)
class BufferCheck:
    """One logged buffer line and lltui's prediction for it (None: no prediction, ``why``);
    ``also``: the device's other weights buffers of the same type (one per file of a split
    model), whose printed sizes add to this line's against the prediction."""

    line: BufferLine
    predicted_bytes: int | None
    why: str | None = None
    also: tuple[BufferLine, ...] = ()

    @property
    def logged_bytes(self) -> int:
        return self.line.logged_bytes + sum(b.logged_bytes for b in self.also)

    @property
    def diff_bytes(self) -> int | None:
        if self.predicted_bytes is None:
            return None
        return self.predicted_bytes - self.logged_bytes

    @property
    def exact(self) -> bool:
        """The prediction prints as the log printed it (llama.cpp's two decimals; each
        line summed adds its own rounding)."""
        if self.predicted_bytes is None:
            return False
        if not self.also:
            return f"{self.predicted_bytes / MIB:.2f}" == f"{self.line.mib:.2f}"
        return abs(self.predicted_bytes - self.logged_bytes) <= 0.005 * MIB * (1 + len(self.also))

    def within(self, fraction: float) -> bool:
        if self.predicted_bytes is None:
            return False
        logged = self.logged_bytes
        slack = max(fraction * logged, 0.005 * MIB * (1 + len(self.also)))  # the print's rounding
        return abs(self.predicted_bytes - logged) <= slack


def _owner(name: str, kind: str) -> str:
    """The name a buffer is matched under: host memory is one owner for the KV cache,
    outputs and compute; weights keep their buffer (mapped, repacked, pinned)."""
    if is_host_buffer(name):
        if kind in ("kv", "rs", "output", "compute"):
            return "host"
        if name.endswith("_Host"):
            return "pinned"
        return {"CPU_AARCH64": "CPU_REPACK"}.get(name, name)
    return name


_Key = tuple[str, str, str | None]


def predicted_lines(result: FitResult) -> dict[_Key, int]:
    """The estimate's buffers by (owner, kind, cache) -> bytes."""
    out: dict[_Key, int] = {}

    def add(name: str, kind: str, cache: str | None, nbytes: int) -> None:
        key = (_owner(name, kind), kind, cache)
        out[key] = out.get(key, 0) + nbytes

    from lltui.core.memory.tensor_parallel import fold_meta

    meta = result.meta_devices
    for name, kind, nbytes in fold_meta(result.buffers, meta):
        k = _KINDS.get(kind)
        if k is None or k == "kv":
            continue
        add(name, k, None, nbytes)
    two = len(result.kv) > 1
    for cache in result.kv:
        # -sm tensor: one Meta() line per cache, the largest device's share
        for name, _kind, nbytes in fold_meta([(n, "KV", b) for n, b in cache.buffers], meta):
            add(name, "kv", None, nbytes)  # the device's KV, both caches
            if two:
                add(name, "kv", "swa" if cache.swa else "base", nbytes)
    return out


@dataclass(frozen=True, slots=True)
class Comparison:
    checks: tuple[BufferCheck, ...]
    # buffers the estimate has that the last load did not print: (device, kind, bytes)
    not_logged: tuple[tuple[str, str, int], ...] = ()


def compare(
    lines: Sequence[BufferLine],
    result: FitResult | None,
    devs: LogDevices,
    last_load: int,
    why_none: str,
) -> Comparison:
    """Every line with its prediction (``why_none`` where the estimate could not be made)."""
    if result is None:
        return Comparison(tuple(BufferCheck(b, None, why_none) for b in lines))
    predicted = predicted_lines(result)
    mapped = _mapped_alias(predicted)
    occurrences: dict[_Key, int] = {}
    rpc_seen: dict[str, int] = {}
    keys: list[_Key | None] = []
    for b in lines:
        if b.load != last_load or b.superseded or b.part != "model" or b.kind == "moe_cache":
            keys.append(None)
            continue
        device = _internal(b.device, devs, rpc_seen, b.kind)
        owner = _owner(device if device is not None else b.device, b.kind)
        if b.kind == "model" and owner == "CPU" and mapped:
            owner = "CPU_Mapped"  # before b3990 mapped weights were a CPU buffer
        keys.append((owner, b.kind, b.cache if b.cache in ("base", "swa") else None))
    # llama.cpp prints every weights buffer it made: a mapped one per file of a split model
    # (and per device), each of the file's part; their sum is what the estimate sizes
    weights: dict[_Key, list[BufferLine]] = {}
    for b, key in zip(lines, keys, strict=True):
        if key is not None and b.kind == "model":
            weights.setdefault(key, []).append(b)
    out = []
    for b, key in zip(lines, keys, strict=True):
        if b.load != last_load:
            out.append(BufferCheck(b, None, "an earlier load (a fit probe or a run above)"))
            continue
        if b.superseded:
            out.append(BufferCheck(b, None, "reserved again below (the server's warm-up)"))
            continue
        if b.part != "model":
            out.append(BufferCheck(b, None, f"the {b.part}'s buffers are not predicted here"))
            continue
        if b.kind == "moe_cache":
            out.append(BufferCheck(b, None, "the MoE cache (--moe-cache-mib) is not predicted"))
            continue
        assert key is not None
        seen = occurrences.get(key, 0)
        occurrences[key] = seen + 1
        group = weights.get(key, [])
        if seen and len(group) > 1:
            out.append(BufferCheck(b, None, f"in line {group[0].line}'s sum"))
            continue
        if seen:
            out.append(BufferCheck(b, None, "the same buffer printed again"))
            continue
        if len(group) > 1:
            why = (
                f"lines {'+'.join(str(g.line) for g in group)}: {sum(g.mib for g in group):.2f}"
                " MiB, a weights buffer per file of a split model"
            )
            out.append(BufferCheck(b, predicted.get(key, 0), why, tuple(group[1:])))
            continue
        out.append(BufferCheck(b, predicted.get(key, 0)))
    kinds = {c.line.kind for c in out if c.predicted_bytes is not None}
    matched = {(o, k) for o, k, _ in occurrences}
    missing = tuple(
        (devs.printed_name(owner), kind, nbytes)
        for (owner, kind, cache), nbytes in predicted.items()
        if cache is None
        and nbytes > 0
        and (kind in kinds or not kinds)  # nothing logged: every prediction stands alone
        and (owner, kind) not in matched
    )
    return Comparison(tuple(out), missing)


def _mapped_alias(predicted: dict[_Key, int]) -> bool:
    names = {k[0] for k in predicted if k[1] == "model"}
    return "CPU_Mapped" in names and "CPU" not in names


def _internal(name: str, devs: LogDevices, rpc_seen: dict[str, int], kind: str) -> str | None:
    """The estimate's name for a logged device buffer (a repeated RPC name: the next one)."""
    if is_host_buffer(name):
        return None
    device = device_of_buffer(name)  # (MTL0_Mapped: MTL0's)
    hits = [d.name for d, p in zip(devs.devices, devs.printed, strict=True) if p == device]
    if not hits:
        return None
    if len(hits) == 1:
        return hits[0]
    k = rpc_seen.get(f"{kind}:{name}", 0)
    rpc_seen[f"{kind}:{name}"] = k + 1
    return hits[min(k, len(hits) - 1)]

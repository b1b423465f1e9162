"""Why a load failed: the device that ran out, what it asked for, what it had free then.

llama.cpp says an allocation failed in two or three lines (the backend's ``allocating X MiB
on device N: cudaMalloc failed``, the allocator's ``failed to allocate CUDA0 buffer of size
B``, the context's ``failed to allocate compute buffers``); they are read as one failure.
What the device had free when it failed is the free memory the log printed for it at load,
less the buffers it had already allocated (the lines above the failure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lltui.core.explain.settings import is_host_buffer
from lltui.core.llamalog.models import AllocFailure, LogFacts, device_of_buffer
from lltui.core.units import MIB

NEAR_LINES = 8  # lines of one failure


@dataclass(frozen=True, slots=True)
class Failed:
    message: str
    line: int
    kind: str  # oom, abort, error
    device: str | None = None
    needed_bytes: int | None = None
    free_bytes: int | None = None  # free on the device when it failed
    free_at_load_bytes: int | None = None
    held_bytes: int = 0  # what the device had allocated before it failed
    stage: str | None = None  # weights, kv, compute, output, load
    predicted_bytes: int | None = None  # lltui's size for the buffer that failed

    @property
    def short_bytes(self) -> int | None:
        """By how much the device ran out (None where it had the room, by the log's own
        numbers: what refused it was another limit)."""
        if self.needed_bytes is None or self.free_bytes is None:
            return None
        short = self.needed_bytes - self.free_bytes
        return short if short > 0 else None

    @property
    def free_below_bytes(self) -> int | None:
        """An upper bound on the device's free memory at load, from the failure itself: it
        held ``held_bytes`` and could not find ``needed_bytes`` more."""
        if self.needed_bytes is None:
            return None
        return self.held_bytes + self.needed_bytes


def _device_name(f: AllocFailure, facts: LogFacts) -> str | None:
    if f.device is not None:
        return f.device
    if f.backend is not None:
        return _backend_device(f.backend, facts)
    if f.device_index is None:
        return None
    prefixes = [d.name.rstrip("0123456789") for d in facts.devices if d.name[-1:].isdigit()]
    prefix = next((p for p in prefixes if p and not p.startswith("RPC")), "CUDA")
    return f"{prefix}{f.device_index}"


def _backend_device(backend: str, facts: LogFacts) -> str | None:
    """The device of a backend's line that names none (Metal's, Vulkan's, SYCL's): the one
    device of it the log names (MTL0, Vulkan0; "Metal" before the MTL names), Metal's own
    name where the log names none, else None (several: which is not said)."""
    names = {d.name for d in facts.devices} | {device_of_buffer(b.device) for b in facts.buffers}
    prefix = "MTL" if backend == "Metal" else backend
    found = {n for n in names if n.startswith(prefix) and n[len(prefix) :].isdigit()}
    if backend == "Metal":
        found |= names & {"Metal"}
        if not found:
            return "Metal"
    return found.pop() if len(found) == 1 else None


STAGE_KIND = {"weights": "model", "kv": "kv", "compute": "compute", "output": "output"}


def earlier_failures(facts: LogFacts) -> list[str]:
    """One line for each earlier load of the log that failed: the verdict and the comparison
    are its last load's, and a run pasted or appended above it did not end that one."""
    lines = []
    last = summarise(facts)
    for load in sorted({f.load for f in facts.failures if f.load < facts.loads}):
        f = summarise(facts, load=load)
        # (the same line again: --fit's probe of this very run, which failed as it did)
        if f is None or (last is not None and f.message == last.message):
            continue
        what = f"ran out of memory on {f.device}" if f.kind == "oom" and f.device else "failed"
        run = f"load {load} of {facts.loads}" if load else "a run before load 1"
        lines.append(
            f"{run} {what} (line {f.line}: {f.message}); "
            f"the verdict and the comparison are load {facts.loads}'s"
        )
    return lines


def summarise(
    facts: LogFacts, free_at_load: Mapping[str, int] | None = None, *, load: int | None = None
) -> Failed | None:
    """The failure that ended the log's last load, or ``load`` (None: it did not fail; a
    failure of an earlier run above it did not end it). ``free_at_load``: bytes free per
    device buffer name, where the log said (else its own device lines)."""
    last = facts.loads if load is None else load
    failures = [f for f in facts.failures if f.load == last or (load is None and f.load > last)]
    if not failures:
        return None
    oom = [f for f in failures if f.kind == "oom"]
    first = oom[0] if oom else failures[0]
    cluster = [f for f in failures if 0 <= f.line - first.line <= NEAR_LINES]
    device = next((f.device for f in cluster if f.device is not None), None)
    if device is None:
        device = next((n for f in cluster if (n := _device_name(f, facts)) is not None), None)
    exact = [f.needed_bytes for f in cluster if f.needed_bytes is not None and not f.rounded]
    rough = [f.needed_bytes for f in cluster if f.needed_bytes is not None]
    needed = exact[0] if exact else (rough[0] if rough else None)
    # alloc_tensor_range allocates the KV cache as it allocates weights: the line after it
    # that names what the buffer was for ("failed to allocate buffer for kv cache") says
    at = next((i for i, f in enumerate(cluster) if f.device), len(cluster))
    after = [
        f.stage for f in cluster[at + 1 :] if not f.device and f.stage in ("kv", "rs", "compute")
    ]
    stage = next(iter(after), None) or next(
        (f.stage for f in cluster if f.device and f.stage), first.stage
    )
    if first.kind != "oom":
        return Failed(first.message, first.line, first.kind, device=device, stage=stage)
    host = device is not None and is_host_buffer(device)
    held = sum(
        b.logged_bytes
        for b in facts.buffers
        if b.line < first.line
        and b.load == last
        # the host's memory: its buffers but the mapped file (page cache, given back); a
        # Metal device's: its mapped file and private buffers too (MTL0_Mapped)
        and (
            b.device == device
            or (host and is_host_buffer(b.device) and b.device != "CPU_Mapped")
            or (
                not host
                and device is not None
                and device_of_buffer(b.device) == device_of_buffer(device)
            )
        )
    )
    free = dict(free_at_load or {})
    for d in facts.devices:
        if d.free_mib is not None:
            free.setdefault(d.name, d.free_mib * MIB)
    at_load = free.get(device) if device is not None else None
    left = max(0, at_load - held) if at_load is not None and device is not None else None
    return Failed(
        message=first.message,
        line=first.line,
        kind="oom",
        device=device,
        needed_bytes=needed,
        free_bytes=left,
        free_at_load_bytes=at_load,
        held_bytes=held,
        stage=stage,
    )

"""An explained log, as one frozen report: the log's facts, the build whose rules the figures
follow, the settings recovered, each buffer beside its prediction, the failure and the fix."""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.explain.compare import BufferCheck, Comparison
from lltui.core.explain.devices import LogDevices
from lltui.core.explain.failure import Failed
from lltui.core.explain.settings import Recovered, is_host_buffer
from lltui.core.llama.builds import BuildRules
from lltui.core.llamalog.models import LogFacts, device_of_buffer
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.results import FitResult
from lltui.core.units import MIB


@dataclass(frozen=True, slots=True)
class LogSource:
    """What was read: the file, how much of it, and why not all."""

    path: str
    size_bytes: int
    read_bytes: int
    lines: int
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fix:
    """A command line that fits, from the fit search: the user's flags with these changed."""

    argv: tuple[str, ...]
    flags: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class DeviceRow:
    """One device's buffers, as logged and as predicted (bytes by kind), host as "host"."""

    name: str
    description: str | None
    free_bytes: int | None  # at load
    layers: tuple[int, ...]  # the estimate's (the log prints them only at -v)
    logged: tuple[tuple[str, int], ...]
    predicted: tuple[tuple[str, int], ...] | None
    # the buffers of the other parts on it (a projector, a draft model, a LoRA): bytes by part
    parts: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ExplainReport:
    source: LogSource
    facts: LogFacts
    build: int | None
    build_source: str  # where the build came from, in words
    rules: BuildRules
    settings: Recovered
    model_ref: str | None
    model_read: bool
    model_note: str | None  # why there is no prediction
    hparams: Hparams | None
    tensor_types: tuple[tuple[str, int], ...]
    devices: LogDevices
    result: FitResult | None
    comparison: Comparison
    failed: Failed | None
    fix: Fix | None
    notes: tuple[str, ...] = ()

    @property
    def checks(self) -> tuple[BufferCheck, ...]:
        return self.comparison.checks

    def compared(self) -> list[BufferCheck]:
        return [c for c in self.checks if c.predicted_bytes is not None]

    def device_rows(self) -> list[DeviceRow]:
        """Per device of the last load: logged and predicted bytes by kind."""
        last = [c for c in self.checks if c.line.load == self.facts.loads and not c.line.superseded]
        order: list[str] = []
        logged: dict[str, dict[str, int]] = {}
        predicted: dict[str, dict[str, int]] = {}
        parts: dict[str, dict[str, int]] = {}
        for c in last:
            owner = "host" if is_host_buffer(c.line.device) else device_of_buffer(c.line.device)
            if owner not in order:
                order.append(owner)
            if c.line.part != "model":
                slot = parts.setdefault(owner, {})
                slot[c.line.part] = slot.get(c.line.part, 0) + c.line.logged_bytes
                continue
            slot = logged.setdefault(owner, {})
            slot[c.line.kind] = slot.get(c.line.kind, 0) + c.line.logged_bytes
            if c.predicted_bytes is not None:
                p = predicted.setdefault(owner, {})
                p[c.line.kind] = p.get(c.line.kind, 0) + c.predicted_bytes
        for name in self.devices.printed:
            if name not in order:
                order.append(name)
        if self.result is not None and self.result.meta_devices:
            # -sm tensor: the log has the Meta() device's lines; each device's own share is
            # the estimate's alone
            for name in self.result.meta_devices:
                predicted[self.devices.printed_name(name)] = self._own_share(name)
        order.sort(key=lambda n: n == "host")
        seen = {d.name: d for d in self.facts.devices}
        spec_free = {
            p: d.free_bytes
            for d, p in zip(self.devices.devices, self.devices.printed, strict=True)
            if d.free_bytes is not None
        }
        layers = self._layers()
        rows = []
        for name in order:
            # the host's row is the device list's CPU line (its free memory, its CPU)
            info = seen.get("CPU" if name == "host" else name)
            free = info.free_mib * MIB if info and info.free_mib is not None else None
            free = spec_free.get(name, free)
            rows.append(
                DeviceRow(
                    name=name,
                    description=info.description if info else None,
                    free_bytes=free,
                    layers=layers.get(name, ()),
                    logged=tuple(logged.get(name, {}).items()),
                    predicted=tuple(predicted.get(name, {}).items())
                    if self.result is not None
                    else None,
                    parts=tuple(parts.get(name, {}).items()),
                )
            )
        return rows

    def _own_share(self, device: str) -> dict[str, int]:
        """One device's predicted bytes by kind (model, kv, compute)."""
        assert self.result is not None
        kinds = {"model": "model", "compute": "compute"}
        out: dict[str, int] = {}
        for name, kind, nbytes in self.result.buffers:
            if name == device and kind in kinds:
                out[kinds[kind]] = out.get(kinds[kind], 0) + nbytes
        for cache in self.result.kv:
            for name, nbytes in cache.buffers:
                if name == device:
                    out["kv"] = out.get("kv", 0) + nbytes
        return out

    def _layers(self) -> dict[str, tuple[int, ...]]:
        """Layers per device: as the log printed them (-v), else as the estimate placed them."""
        out: dict[str, list[int]] = {}
        if self.facts.layer_devices:
            printed = {
                d.device_name: p
                for d, p in zip(self.devices.devices, self.devices.printed, strict=True)
            }
            for il, dev in self.facts.layer_devices:
                out.setdefault("host" if dev == "CPU" else printed.get(dev, dev), []).append(il)
            return {k: tuple(v) for k, v in out.items()}
        if self.result is None:
            return {}
        meta = self.result.meta_devices
        for il, dev in enumerate(self.result.layer_devices):
            if dev in meta:  # -sm tensor: every device holds a slice of each layer
                for name in meta:
                    out.setdefault(self.devices.printed_name(name), []).append(il)
                continue
            name = "host" if dev == "CPU" else self.devices.printed_name(dev)
            out.setdefault(name, []).append(il)
        return {k: tuple(v) for k, v in out.items()}

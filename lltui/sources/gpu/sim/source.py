"""Simulated rigs: deterministic, seeded stand-ins for real GPUs, for demos, tests and screenshots.

A profile describes real hardware (names, VRAM, power limits, clocks, links as their vendors
publish them) and a llama-server that serves one model split across the GPUs. Each view reads
the same profile, so the monitor, topology text and NCCL facts of one profile agree.

Everything a sample holds is a function of the seed and of the time the injected clock gives,
so two sources with the same seed and clock produce equal samples.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from lltui.core.monitor.models import (
    GpuSample,
    GpuStatic,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.units import MIB
from lltui.sources.gpu.base import SequenceCounter
from lltui.sources.gpu.sim.physics import gpu_load, gpu_sample, host_sample
from lltui.sources.gpu.sim.profile import SimGpu, cuda_order
from lltui.sources.gpu.sim.rigs import DEFAULT_PROFILE, PROFILES
from lltui.sources.gpu.sim.workload import LOAD_START, layer_shares, phase_at


class StepClock:
    """A clock for reproducible runs of a simulated rig: it moves by ``step`` on each read
    (0: only when told by ``advance``)."""

    def __init__(self, start: float = 0.0, step: float = 1.0) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        return value

    def advance(self, seconds: float) -> None:
        self.now += seconds


SIM_WALL_START = 1_767_225_600.0  # 2026-01-01 00:00 UTC: the wall clock of a rig on a test clock


class SimSource:
    """A simulated rig. ``clock`` returns seconds; ``start`` is where on the timeline the rig
    is when opened (the default lands in a served model's generation phase)."""

    # a poll is arithmetic, well under a millisecond: the app takes the first one before
    # its first frame rather than on its poller thread
    POLLS_INSTANTLY: ClassVar[bool] = True

    def __init__(
        self,
        profile: str = DEFAULT_PROFILE,
        *,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        start: float = 16.0,
        reason: str | None = None,
        wall_start: float | None = None,
    ) -> None:
        if profile not in PROFILES:
            known = ", ".join(PROFILES)
            raise SourceUnavailable(f"unknown simulated profile {profile!r} (known: {known})")
        self.profile = PROFILES[profile]
        self.name = f"sim:{profile}"
        self.seed = seed
        self._clock = clock or time.monotonic
        self._start = start
        self._stand_in = reason is not None  # (auto gives its reason: no GPU here)
        self._reason = reason or f"the simulated rig {profile} was asked for"
        # A rig run on the real clock reads the real time of day (an alert "since 00:00:00"
        # or a process "started 2025-12-31" would be the simulation's, not the user's); one
        # on an injected clock (tests, reproducible recordings) starts at a fixed date.
        if wall_start is None:
            wall_start = time.time() if clock is None else SIM_WALL_START
        self._wall_start = wall_start
        self._t0: float | None = None
        self._seq = SequenceCounter()
        self._info: RigInfo | None = None
        self._last_t: float | None = None
        self._energy_mj: list[float] = []
        self._static = self._make_static()
        self._shares = layer_shares(self.profile)  # the profile is frozen: work it out once

    def _make_static(self) -> tuple[GpuStatic, ...]:
        p = self.profile
        rng = random.Random(f"{self.seed}-static-{p.name}")
        order = cuda_order(p)
        out = []
        for i, (g, bus) in enumerate(zip(p.gpus, p.pci_bus_ids, strict=True)):
            uuid = "GPU-" + "-".join(
                "".join(rng.choice("0123456789abcdef") for _ in range(k)) for k in (8, 4, 4, 4, 12)
            )
            static = GpuStatic(
                index=i,
                uuid=uuid,
                name=g.name,
                pci_bus_id=bus,
                memory_total=g.memory_mib * MIB,
                power_limit_default_w=g.power_limit_w,
                power_limit_max_w=g.power_max_w,
                max_sm_clock_mhz=g.max_sm_mhz,
                max_mem_clock_mhz=g.max_mem_mhz,
                compute_capability=g.compute_capability,
                cuda_index=order.index(i),
                pcie_gen_max=g.pcie_gen,
                pcie_width_max=g.pcie_width,
                nvlink_links=g.nvlinks or None,
                serial=str(rng.randrange(10**12, 10**13)),
                vbios="96.00.89.00.01" if g.nvlinks == 18 else "94.02.42.00.0B",
                persistence_mode=True,
                vendor=g.spec.vendor,
            )
            out.append(_amd_static(static, g, rng) if g.amd else static)
        return tuple(out)

    # -- GpuSource -----------------------------------------------------------------------
    def open(self) -> RigInfo:
        self._t0 = self._clock()
        self._last_t = None
        self._energy_mj = [
            random.Random(f"{self.seed}-energy-{i}").uniform(5e8, 5e9)
            for i in range(len(self.profile.gpus))
        ]
        p = self.profile
        nvidia = any(not g.amd for g in p.gpus)
        self._info = RigInfo(
            source=self.name,
            simulated=True,
            simulated_reason=self._reason,
            stand_in=self._stand_in,
            driver_version=p.driver_version,
            cuda_version=p.cuda_version if nvidia else None,
            nvml_version=f"13.{p.driver_version}" if nvidia else None,
            rocm_version=p.rocm_version,
            nccl_version=p.nccl_version,
            hostname=p.hostname,
            gpus=self._static,
        )
        return self._info

    def close(self) -> None:
        self._info = None

    def poll(self) -> RigSample:
        if self._info is None or self._t0 is None:
            self.open()
        assert self._info is not None and self._t0 is not None
        now = self._clock()
        elapsed = now - self._t0
        t = self._start + elapsed
        dt = 0.0 if self._last_t is None else max(0.0, now - self._last_t)
        self._last_t = now
        phase, progress = phase_at(t)
        gpus = tuple(self._gpu_sample(i, t, dt, phase, progress) for i in range(len(self._static)))
        return RigSample(
            seq=self._seq.next(),
            t=now,
            wall=self._wall_start + elapsed,
            info=self._info,
            gpus=gpus,
            host=host_sample(self.profile, self.seed, t, phase),
        )

    # -- the workload --------------------------------------------------------------------
    def shares(self) -> tuple[float, ...]:
        """Fraction of the model's layers each GPU holds."""
        return self._shares

    def _gpu_sample(self, i: int, t: float, dt: float, phase: str, progress: float) -> GpuSample:
        p = self.profile
        rng = random.Random(f"{self.seed}-{i}-{round(t * 10)}")
        share = self._shares[i]
        load = gpu_load(p.gpus[i], len(p.gpus), share, phase, serving=t >= LOAD_START, rng=rng)
        self._energy_mj[i] += load.power_w * dt * 1000.0
        return gpu_sample(
            p,
            self._static[i],
            share,
            load,
            self._energy_mj[i],
            t=t,
            phase=phase,
            progress=progress,
            rng=rng,
            wall0=self._wall_start,
        )


def _amd_static(static: GpuStatic, g: SimGpu, rng: random.Random) -> GpuStatic:
    """An AMD GPU as amd-smi reports it: no CUDA index (CUDA cannot see it), no compute
    capability, its gfx target, and an Instinct's partition modes (SPX/NPS1, the default)."""
    instinct = g.spec.segment == "Instinct"
    return replace(
        static,
        uuid=static.uuid.removeprefix("GPU-"),
        compute_capability=None,
        cuda_index=None,
        nvlink_links=None,
        serial=f"0x{rng.randrange(16**15, 16**16):016X}",
        vbios="113-M3000100-103" if instinct else "113-D7020100-102",
        persistence_mode=None,
        gfx_target=g.spec.gfx,
        compute_partition="SPX" if instinct else None,
        memory_partition="NPS1" if instinct else None,
        unified_memory=g.spec.unified,
    )

"""Why a llama-server is slow: one verdict per cause, each with its evidence and the one
change that would help most, decided from a window of counter samples of the GPUs it uses
(and the host) beside its measured and predicted speed. Pure.

Each rule reads the median of the window (one odd sample decides nothing) and only samples
where the server's GPUs are busy: a quiet rig gets no verdict.

- ``throttled``: a slowdown reason (thermal, power cap, power brake, HW slowdown) in at least
  half the busy samples, with the SM clock under 90 % of its highest.
- ``host_bound``: the host's CPUs at 80 % or more while the GPUs are busy under half the time
  (host experts, -nkvo, or too few threads keep them waiting).
- ``link_bound``: PCIe traffic at 60 % or more of the link's capacity (its generation and
  width now).
- ``memory_bound``: memory busy 60 % of the time or more, or the prediction says decode is
  bound by memory bandwidth and the measured speed is at least 70 % of it.
- ``compute_bound``: kernels running 90 % of the time with memory busy under 40 %.
- ``slower_than_predicted``: measured decode more than the model's known error under the
  prediction.

Where a split's GPUs are busy unevenly, the evidence says which waits on which."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from lltui.core.monitor.models import GpuSample, RigSample
from lltui.core.monitor.throttle import SLOWDOWNS

BUSY_UTIL = 10.0  # % of time a kernel ran: below it a GPU is idle
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
DEFAULT_KNOWN_ERROR = 0.25  # the speed model's error where the caller knows none better

SUGGESTIONS = {
    "throttled": "cool the GPU or raise its power limit (nvidia-smi -pl); a clock held down "
    "costs speed in proportion",
    "host_bound": "put fewer experts on the host (a smaller --n-cpu-moe) or keep the KV on the "
    "GPUs (drop -nkvo); failing that, give llama.cpp more threads (-t)",
    "link_bound": "keep the split's traffic off PCIe: -sm layer over -sm tensor/row, GPUs on "
    "x16 links or NVLink; check `lltui topo` for a narrow link",
    "memory_bound": "read fewer bytes per token: a smaller quant, a quantized KV cache "
    "(-ctk/-ctv q8_0), or more GPUs' bandwidth (a layer split)",
    "compute_bound": "give the kernels more work per launch: flash attention (-fa on) and a "
    "larger -ub for prompts; decode at batch 1 rarely stays here",
    "slower_than_predicted": "measure this rig with `lltui bench` so predictions use its own "
    "numbers, then look again",
}


@dataclass(frozen=True, slots=True)
class ServerSpeed:
    """What is known of the server beside the counters."""

    gpus: tuple[int, ...]  # the GPUs it uses (the source's indexes)
    measured_decode_tps: float | None = None
    predicted_decode_tps: float | None = None
    predicted_bound: str | None = None  # memory, compute or link
    known_error: float = DEFAULT_KNOWN_ERROR


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: str
    evidence: str
    suggestion: str


def _med(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return median(known) if known else None


def _link_share(g: GpuSample) -> float | None:
    lane = PCIE_LANE_GBS.get(g.pcie_gen or 0)
    if lane is None or not g.pcie_width:
        return None
    traffic = g.pcie_bw_kbs
    if traffic is None and (g.pcie_rx_kbs is not None or g.pcie_tx_kbs is not None):
        traffic = max(g.pcie_rx_kbs or 0.0, g.pcie_tx_kbs or 0.0)
    return None if traffic is None else traffic / (lane * g.pcie_width * 1e6)


class _Window:
    """The busy samples of the server's GPUs, per GPU."""

    def __init__(self, samples: Sequence[RigSample], gpus: Sequence[int]) -> None:
        self.per: dict[int, list[GpuSample]] = {i: [] for i in gpus}
        self.host: list[float | None] = []
        for s in samples:
            mine = [g for g in s.gpus if g.info.index in self.per and not g.lost]
            if not mine or (_med([g.util_gpu for g in mine]) or 0.0) < BUSY_UTIL:
                continue
            for g in mine:
                self.per[g.info.index].append(g)
            self.host.append(s.host.cpu_pct)

    @property
    def busy(self) -> bool:
        return bool(self.host)

    def med(self, attr: str) -> dict[int, float]:
        out = {}
        for i, gs in self.per.items():
            m = _med([getattr(g, attr) for g in gs])
            if m is not None:
                out[i] = m
        return out


def _throttled(w: _Window) -> Verdict | None:
    for i, gs in w.per.items():
        slow = [g for g in gs if set(g.throttle_reasons or ()) & SLOWDOWNS]
        top = gs[0].info.max_sm_clock_mhz if gs else None
        clock = _med([g.sm_clock_mhz for g in gs])
        if not gs or len(slow) * 2 < len(gs) or not top or clock is None or clock >= 0.9 * top:
            continue
        reasons = sorted({r for g in slow for r in g.throttle_reasons or () if r in SLOWDOWNS})
        return Verdict(
            "throttled",
            f"GPU{i}: {', '.join(reasons)} in {len(slow)} of {len(gs)} busy samples; SM clock "
            f"{clock:.0f} MHz of {top} MHz",
            SUGGESTIONS["throttled"],
        )
    return None


def _waits(util: dict[int, float]) -> str:
    """Which GPU of a split the others wait on, where they are busy unevenly."""
    if len(util) < 2:
        return ""
    hi = max(util, key=lambda i: util[i])
    lo = [i for i in util if util[i] < 0.7 * util[hi]]
    if not lo:
        return ""
    others = ", ".join(f"GPU{i} {util[i]:.0f}%" for i in lo)
    return f"; {others} wait on GPU{hi} ({util[hi]:.0f}% busy)"


def verdicts(samples: Sequence[RigSample], server: ServerSpeed) -> tuple[Verdict, ...]:
    """Every cause the window shows (none for a quiet rig), the likeliest first."""
    w = _Window(samples, server.gpus)
    if not w.busy:
        return ()
    util, mem = w.med("util_gpu"), w.med("util_mem")
    waits = _waits(util)
    out: list[Verdict] = []
    throttled = _throttled(w)
    if throttled is not None:
        out.append(throttled)
    host = _med(w.host)
    gpu_busy = max(util.values()) if util else None
    if host is not None and host >= 80 and gpu_busy is not None and gpu_busy < 50:
        out.append(
            Verdict(
                "host_bound",
                f"host CPUs {host:.0f}% busy while the GPUs run {gpu_busy:.0f}% of the time"
                + waits,
                SUGGESTIONS["host_bound"],
            )
        )
    for i, gs in w.per.items():
        share = _med([_link_share(g) for g in gs])
        if share is not None and share >= 0.6:
            g = gs[-1]
            out.append(
                Verdict(
                    "link_bound",
                    f"GPU{i}: PCIe at {share:.0%} of its Gen{g.pcie_gen} x{g.pcie_width} "
                    "link" + waits,
                    SUGGESTIONS["link_bound"],
                )
            )
            break
    measured, predicted = server.measured_decode_tps, server.predicted_decode_tps
    near = measured is not None and predicted and measured >= 0.7 * predicted
    top_mem = max(mem.values()) if mem else None
    if (top_mem is not None and top_mem >= 60) or (server.predicted_bound == "memory" and near):
        speed = f"; decode {measured:.1f} tok/s of {predicted:.1f} predicted" if near else ""
        busy = f"memory busy {top_mem:.0f}% of the time" if top_mem is not None else "memory"
        out.append(Verdict("memory_bound", busy + speed + waits, SUGGESTIONS["memory_bound"]))
    elif gpu_busy is not None and gpu_busy >= 90 and top_mem is not None and top_mem < 40:
        out.append(
            Verdict(
                "compute_bound",
                f"kernels running {gpu_busy:.0f}% of the time, memory busy {top_mem:.0f}%" + waits,
                SUGGESTIONS["compute_bound"],
            )
        )
    if measured is not None and predicted and measured < predicted * (1 - server.known_error):
        out.append(
            Verdict(
                "slower_than_predicted",
                f"decode {measured:.1f} tok/s, predicted {predicted:.1f}: "
                f"{1 - measured / predicted:.0%} slower, past the model's known error "
                f"({server.known_error:.0%})",
                SUGGESTIONS["slower_than_predicted"],
            )
        )
    return tuple(out)

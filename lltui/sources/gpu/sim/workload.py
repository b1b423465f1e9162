"""The llama-server a simulated rig runs: loading, then prompt processing and generation
bursts with idle gaps, on a loop; the layers each GPU holds, the memory that takes, and the
processes each GPU shows."""

from __future__ import annotations

from lltui.core.monitor.models import GpuProcess
from lltui.core.units import GIB, MIB
from lltui.sources.gpu.sim.profile import SimProfile, cuda_order

PHASE_IDLE = "idle"
PHASE_LOADING = "loading"
PHASE_PREFILL = "prefill"
PHASE_DECODE = "decode"

LOAD_START = 2.0
LOAD_SECONDS = 10.0
CYCLE = ((PHASE_PREFILL, 2.0), (PHASE_DECODE, 10.0), (PHASE_IDLE, 3.0))
CYCLE_SECONDS = sum(d for _, d in CYCLE)

SERVER_PID = 41234
CUDA_CONTEXT = 300 * MIB
DISPLAY_BYTES = 3 * MIB  # what Xorg holds on a desktop card's first GPU


def phase_at(t: float) -> tuple[str, float]:
    """The workload phase at ``t`` seconds into the timeline and how far into it (0..1)."""
    if t < LOAD_START:
        return PHASE_IDLE, t / LOAD_START
    if t < LOAD_START + LOAD_SECONDS:
        return PHASE_LOADING, (t - LOAD_START) / LOAD_SECONDS
    into = (t - LOAD_START - LOAD_SECONDS) % CYCLE_SECONDS
    for name, dur in CYCLE:
        if into < dur:
            return name, into / dur
        into -= dur
    return PHASE_IDLE, 1.0  # pragma: no cover - float edge


def layer_shares(profile: SimProfile) -> tuple[float, ...]:
    """Fraction of the model's layers each GPU holds, in NVML order."""
    served = profile.served
    n = len(profile.gpus)
    if served.tensor_split:
        # -ts is in CUDA order, which differs from NVML order on mixed rigs
        total = sum(served.tensor_split)
        order = cuda_order(profile)
        return tuple(served.tensor_split[order.index(i)] / total for i in range(n))
    return tuple(1.0 / n for _ in range(n))


def resident_bytes(profile: SimProfile, i: int, share: float, phase: str, progress: float) -> int:
    """Bytes the llama-server holds on GPU i: its layers, their KV, compute buffer, and
    the output head on the last GPU (what makes the last card the fullest)."""
    served = profile.served
    n = len(profile.gpus)
    weights = served.weights_gib * GIB * share
    if i == n - 1:
        weights += served.weights_gib * GIB * 0.02  # output head
    kv = served.kv_gib * GIB * share
    total = weights + kv + served.compute_mib * MIB + CUDA_CONTEXT
    if phase == PHASE_LOADING:
        return int(CUDA_CONTEXT + (total - CUDA_CONTEXT) * progress)
    return int(total)


SERVER_AGE_S = 3 * 3600 + 12 * 60  # the llama-server had run this long when the clock started
DESKTOP_AGE_S = 2 * 86400 + 4 * 3600


def gpu_processes(
    profile: SimProfile,
    i: int,
    phase: str,
    *,
    serving: bool,
    server_bytes: int,
    util: float = 0.0,
    wall0: float = 0.0,
) -> tuple[GpuProcess, ...]:
    """The llama-server once it serves, and Xorg on a desktop card's first GPU."""
    n = len(profile.gpus)
    proc: tuple[GpuProcess, ...] = ()
    if serving:
        proc = (
            GpuProcess(
                pid=SERVER_PID,
                gpu_index=i,
                used_memory=server_bytes,
                kind="C",
                name="llama-server",
                user="llama",
                command="llama-server -m /models/"
                + profile.served.gguf
                + " "
                + " ".join(profile.served.argv),
                host_rss=int((1.2 + 0.3 * n) * GIB),
                cpu_pct=100.0 if phase in (PHASE_PREFILL, PHASE_DECODE) else 3.0,
                sm_util=float(round(util)),  # the server is what keeps this GPU busy
                mem_util=float(round(util * 0.8)),
                started=wall0 - SERVER_AGE_S,
            ),
        )
    if profile.gpus[i].has_fan and i == 0:
        xorg = GpuProcess(
            pid=1873,
            gpu_index=i,
            used_memory=None,
            kind="G",
            name="Xorg",
            user="root",
            command="/usr/lib/xorg/Xorg vt1 -displayfd 3",
            host_rss=96 * MIB,
            cpu_pct=0.0,
            sm_util=0.0,
            started=wall0 - DESKTOP_AGE_S,
        )
        proc = (xorg, *proc)
    # the other jobs show from the end of the model's loading on (the early timeline, which
    # tests of the other views step through, stays as it was)
    loaded = serving and phase != PHASE_LOADING
    return (*proc, *side_processes(profile, i, wall0)) if loaded else proc


def side_processes(profile: SimProfile, i: int, wall0: float = 0.0) -> tuple[GpuProcess, ...]:
    """What else runs on GPU i beside the llama-server (a training run, a notebook)."""
    return tuple(
        GpuProcess(
            pid=job.pid,
            gpu_index=i,
            used_memory=None if job.mib is None else job.mib * MIB,
            kind=job.kind,
            name=job.name,
            user=job.user,
            command=job.command,
            host_rss=job.rss_mib * MIB,
            cpu_pct=job.cpu_pct,
            # the rig's utilisation follows the llama-server alone: the others wait on it
            sm_util=0.0,
            started=wall0 - job.age_s,
            container=job.container,
        )
        for job in profile.side_jobs
        if i in job.gpus
    )


def side_bytes(profile: SimProfile, i: int) -> int:
    """GPU memory the side jobs hold on GPU i."""
    return sum(job.mib * MIB for job in profile.side_jobs if i in job.gpus and job.mib)

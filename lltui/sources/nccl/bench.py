"""The all-reduce bench: a float sum swept over message sizes, timed as nccl-tests times it,
with a correctness check and a hang turned into an error."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.nccl.enums import RESULT_NAMES, NCCLDataType, NCCLRedOp, NCCLResult
from lltui.core.nccl.nccl_tests import NcclTestsRow, bus_bandwidth_factor, format_rows, sweep_sizes
from lltui.core.text import counted
from lltui.core.units import MIB
from lltui.sources.nccl.communicator import NCCLCommunicator
from lltui.sources.nccl.cudart import CudaRuntime, cuda_devices, open_cuda
from lltui.sources.nccl.errors import CudaError, NCCLError, NcclUnavailable
from lltui.sources.nccl.library import NcclLibrary, load_nccl

SYNC_TIMEOUT_S = 60.0  # an all-reduce that has not finished by then is hung
_DTYPE = NCCLDataType.FLOAT32  # the bench sums floats, as all_reduce_perf does by default


@dataclass(frozen=True, slots=True)
class BenchResult:
    nccl_version: str
    nccl_path: str
    cudart_path: str
    devices: tuple[int, ...]
    pci_bus_ids: tuple[str, ...]
    dtype: str  # as nccl-tests names it: "float"
    rows: tuple[NcclTestsRow, ...]
    device_time_us: tuple[float | None, ...]  # per row, out-of-place, from CUDA events
    iters: int
    warmup: int
    validated: bool | None  # None when validation was skipped
    validation_error: str | None = None
    p2p: dict[str, bool] = field(default_factory=dict)  # "GPU0-GPU1": can access peer
    notes: tuple[str, ...] = ()

    @property
    def nranks(self) -> int:
        return len(self.devices)

    @property
    def avg_busbw(self) -> float | None:
        """Mean bus bandwidth over all measurements, as nccl-tests reports it."""
        vals = [v for r in self.rows for v in (r.busbw_out, r.busbw_in) if v is not None]
        return sum(vals) / len(vals) if vals else None

    @property
    def peak_busbw_out(self) -> float | None:
        vals = [r.busbw_out for r in self.rows if r.busbw_out is not None]
        return max(vals) if vals else None

    def to_text(self) -> str:
        """The sweep as nccl-tests prints it, with a header and the average."""
        gpus = ",".join(str(d) for d in self.devices)
        lines = [
            f"all-reduce, float, sum · {counted(self.nranks, 'GPU')} "
            f"({gpus}) · NCCL {self.nccl_version} · {counted(self.iters, 'iteration')}"
        ]
        if self.p2p:
            lines.append(
                "P2P access  "
                + "  ".join(f"{k} {'yes' if v else 'no'}" for k, v in self.p2p.items())
            )
        lines += format_rows(self.rows)
        avg = self.avg_busbw
        lines.append(
            f"avg bus bandwidth   {avg:.2f} GB/s"
            if avg is not None
            else "avg bus bandwidth   - (needs two or more GPUs)"
        )
        if self.validated is not None:
            lines.append(
                "results     correct"
                if self.validated
                else f"results     WRONG: {self.validation_error}"
            )
        for note in self.notes:
            lines.append(f"note: {note}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        rows = [
            {**r.to_json(), "device_time_us_out": dev_us}
            for r, dev_us in zip(self.rows, self.device_time_us, strict=True)
        ]
        return {
            "collective": "all_reduce",
            "nranks": self.nranks,
            "rows": rows,
            **fields_of(self, "avg_busbw peak_busbw_out nccl_version nccl_path cudart_path"),
            "devices": [
                {"cuda_index": d, "pci_bus_id": b}
                for d, b in zip(self.devices, self.pci_bus_ids, strict=True)
            ],
            "type": self.dtype,
            **fields_of(self, "iters warmup validated validation_error"),
            "p2p": dict(self.p2p),
            "notes": list(self.notes),
        }


class _BenchBuffers:
    """Per-device send/recv buffers and streams, freed in ``close``."""

    def __init__(self, cudart: CudaRuntime, devices: Sequence[int], nbytes: int) -> None:
        self.cudart = cudart
        self.devices = list(devices)
        self.send: list[int] = []
        self.recv: list[int] = []
        self.streams: list[int] = []
        self.events: list[tuple[int, int]] = []
        try:
            for d in self.devices:
                cudart.set_device(d)
                self.send.append(cudart.malloc(nbytes))
                self.recv.append(cudart.malloc(nbytes))
                cudart.memset(self.send[-1], 0, nbytes)
                cudart.memset(self.recv[-1], 0, nbytes)
                self.streams.append(cudart.stream_create())
                self.events.append((cudart.event_create(), cudart.event_create()))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        c = self.cudart
        for i, d in enumerate(self.devices):
            try:
                c.set_device(d)
            except CudaError:
                continue
            for ptrs in (self.send, self.recv):
                if i < len(ptrs):
                    _quietly(c.free, ptrs[i])
            if i < len(self.streams):
                _quietly(c.stream_destroy, self.streams[i])
            if i < len(self.events):
                for e in self.events[i]:
                    _quietly(c.event_destroy, e)
        self.send, self.recv, self.streams, self.events = [], [], [], []


def _quietly(fn: Callable[[int], None], arg: int) -> None:
    with contextlib.suppress(CudaError):
        fn(arg)


def _wait_all(
    cudart: CudaRuntime,
    comm: NCCLCommunicator,
    streams: Sequence[int],
    timeout_s: float,
    clock: Callable[[], float],
) -> None:
    """Wait for every stream, polling as nccl-tests does so a hang becomes an error."""
    deadline = clock() + timeout_s
    pending = list(enumerate(streams))
    while pending:
        pending = [(rank, s) for rank, s in pending if not cudart.stream_done(s)]
        if not pending:
            return
        for rank in range(comm.n_devs):
            err = comm.async_error(rank)
            if err not in (NCCLResult.SUCCESS, NCCLResult.IN_PROGRESS):
                name = RESULT_NAMES[err.value]
                raise NCCLError(err.value, f"NCCL reported {name} on rank {rank}")
        if clock() > deadline:
            raise NCCLError(
                NCCLResult.INTERNAL_ERROR.value,
                f"all-reduce did not finish within {timeout_s:.0f} s: GPU-to-GPU transfers "
                "hang on this rig; try NCCL_P2P_DISABLE=1",
            )
        time.sleep(0)


def _validate(
    cudart: CudaRuntime,
    comm: NCCLCommunicator,
    bufs: _BenchBuffers,
    count: int,
    timeout_s: float,
    clock: Callable[[], float],
) -> str | None:
    """One float all-reduce with known data; None when every GPU got the right sums."""
    n = comm.n_devs
    nbytes = count * 4
    for rank, d in enumerate(bufs.devices):
        host = (ctypes.c_float * count)(*[(rank + 1) * (i % 7 + 1) for i in range(count)])
        cudart.set_device(d)
        cudart.copy_to_device(bufs.send[rank], host, nbytes)
        cudart.memset(bufs.recv[rank], 0, nbytes)
    comm.all_reduce(bufs.send, bufs.recv, count, NCCLDataType.FLOAT32, NCCLRedOp.SUM, bufs.streams)
    _wait_all(cudart, comm, bufs.streams, timeout_s, clock)
    ranks_sum = n * (n + 1) // 2
    for rank, d in enumerate(bufs.devices):
        out = (ctypes.c_float * count)()
        cudart.set_device(d)
        cudart.copy_to_host(out, bufs.recv[rank], nbytes)
        for i in range(count):
            want = float(ranks_sum * (i % 7 + 1))
            if out[i] != want:
                return f"GPU {d} element {i}: got {out[i]:g}, expected {want:g}"
    return None


@dataclass(frozen=True, slots=True)
class _Timing:
    """How each size is timed: launches counted, launches before, and the hang deadline."""

    iters: int
    warmup: int
    timeout_s: float
    clock: Callable[[], float]


def _open_libraries(
    nccl: NcclLibrary | None,
    cudart: CudaRuntime | None,
    nccl_path: str | None,
    cudart_path: str | None,
    devices: Sequence[int] | None,
) -> tuple[NcclLibrary, CudaRuntime, list[int]]:
    """libnccl, a CUDA runtime that sees GPUs, and the devices asked for (all by default)."""
    lib = nccl or load_nccl(nccl_path)
    if cudart is None:
        rt, visible = open_cuda(cudart_path)
    else:
        rt, visible = cudart, cuda_devices(cudart)
    devs = list(range(visible)) if devices is None else list(devices)
    bad = [d for d in devs if not 0 <= d < visible]
    if bad:
        raise NcclUnavailable(f"no GPU {bad[0]}: CUDA sees {visible} (0-{visible - 1})")
    if not devs:
        raise ValueError("no devices to run on")
    return lib, rt, devs


def _fitting_sizes(
    rt: CudaRuntime, devs: Sequence[int], min_bytes: int, max_bytes: int, factor: int
) -> tuple[list[int], list[str]]:
    """The sweep's sizes that fit twice into every GPU's free memory, and a note on the rest."""
    # Two buffers per GPU at the largest size, with room left for NCCL's own buffers.
    limit = max_bytes
    for d in devs:
        rt.set_device(d)
        free, _total = rt.mem_get_info()
        limit = min(limit, max((free - 512 * MIB) // 2, 0))
    sizes = sweep_sizes(min_bytes, max_bytes, factor, _DTYPE.itemsize)
    fitting = [s for s in sizes if s <= limit]
    notes: list[str] = []
    if len(fitting) < len(sizes):
        if not fitting:
            raise NcclUnavailable(
                f"not enough free GPU memory for {min_bytes} B buffers (limit {limit} B)"
            )
        notes.append(
            f"sizes above {fitting[-1]} B skipped: not enough free GPU memory for two buffers"
        )
    return fitting, notes


def _peer_access(rt: CudaRuntime, devs: Sequence[int]) -> dict[str, bool]:
    pairs = itertools.combinations(devs, 2)
    return {f"GPU{a}-GPU{b}": rt.can_access_peer(a, b) for a, b in pairs}


def _time_one(
    rt: CudaRuntime,
    comm: NCCLCommunicator,
    bufs: _BenchBuffers,
    count: int,
    in_place: bool,
    timing: _Timing,
) -> tuple[float, float | None]:
    """(host us, device us) per all-reduce of ``count`` floats, out-of-place or in-place."""
    recv = bufs.send if in_place else bufs.recv
    clock = timing.clock
    for _ in range(timing.warmup):
        comm.all_reduce(bufs.send, recv, count, _DTYPE, NCCLRedOp.SUM, bufs.streams)
    _wait_all(rt, comm, bufs.streams, timing.timeout_s, clock)
    for (start, _end), s, d in zip(bufs.events, bufs.streams, bufs.devices, strict=True):
        rt.set_device(d)
        rt.event_record(start, s)
    t0 = clock()
    for _ in range(timing.iters):
        comm.all_reduce(bufs.send, recv, count, _DTYPE, NCCLRedOp.SUM, bufs.streams)
    for (_start, end), s, d in zip(bufs.events, bufs.streams, bufs.devices, strict=True):
        rt.set_device(d)
        rt.event_record(end, s)
    _wait_all(rt, comm, bufs.streams, timing.timeout_s, clock)
    host_us = (clock() - t0) / timing.iters * 1e6
    dev_ms = [rt.event_elapsed_ms(s0, s1) for s0, s1 in bufs.events]
    return host_us, (max(dev_ms) * 1000.0 / timing.iters if dev_ms else None)


def _sweep(
    rt: CudaRuntime,
    comm: NCCLCommunicator,
    bufs: _BenchBuffers,
    sizes: Sequence[int],
    timing: _Timing,
    progress: Callable[[NcclTestsRow], None] | None,
) -> tuple[list[NcclTestsRow], list[float | None]]:
    """One row per size, and the out-of-place device time of each."""
    rows: list[NcclTestsRow] = []
    dev_times: list[float | None] = []
    for size in sizes:
        count = size // _DTYPE.itemsize
        t_out, dev_out = _time_one(rt, comm, bufs, count, False, timing)
        t_in, _dev_in = _time_one(rt, comm, bufs, count, True, timing)
        row = _row(size, t_out, t_in, comm.n_devs)
        rows.append(row)
        dev_times.append(dev_out)
        if progress is not None:
            progress(row)
    return rows, dev_times


def _row(size: int, t_out: float, t_in: float, n: int) -> NcclTestsRow:
    """One nccl-tests row: algbw = size / time, busbw = algbw * 2(n-1)/n (none on one GPU)."""
    factor_bw = bus_bandwidth_factor("all_reduce", n) or 0.0
    alg_out = size / (t_out * 1e3) if t_out > 0 else None  # GB/s = B / (us * 1e3)
    alg_in = size / (t_in * 1e3) if t_in > 0 else None
    return NcclTestsRow(
        size=size,
        count=size // _DTYPE.itemsize,
        type=_DTYPE.nccl_tests_name,
        redop="sum",
        root=-1,
        time_us_out=t_out,
        algbw_out=alg_out,
        busbw_out=alg_out * factor_bw if alg_out is not None and n > 1 else None,
        wrong_out=None,
        time_us_in=t_in,
        algbw_in=alg_in,
        busbw_in=alg_in * factor_bw if alg_in is not None and n > 1 else None,
        wrong_in=None,
    )


def run_allreduce_bench(
    *,
    devices: Sequence[int] | None = None,
    min_bytes: int = 8,
    max_bytes: int = 256 * MIB,
    factor: int = 2,
    iters: int = 20,
    warmup: int = 5,
    validate: bool = True,
    nccl: NcclLibrary | None = None,
    cudart: CudaRuntime | None = None,
    nccl_path: str | None = None,
    cudart_path: str | None = None,
    timeout_s: float = SYNC_TIMEOUT_S,
    clock: Callable[[], float] = time.perf_counter,
    progress: Callable[[NcclTestsRow], None] | None = None,
) -> BenchResult:
    """Float all-reduce (sum) from ``min_bytes`` to ``max_bytes``, out-of-place and in-place,
    timed as nccl-tests times it: host clock around ``iters`` launches after ``warmup``.

    algbw = size / time; busbw = algbw * 2(n-1)/n. Raises NcclUnavailable when a library or
    a GPU is missing, NCCLError or CudaError when a call fails.
    """
    if iters < 1 or warmup < 0:
        raise ValueError("iters must be >= 1 and warmup >= 0")
    lib, rt, devs = _open_libraries(nccl, cudart, nccl_path, cudart_path, devices)
    sizes, notes = _fitting_sizes(rt, devs, min_bytes, max_bytes, factor)
    if len(devs) == 1:
        notes.append(
            "one GPU: all-reduce is a local copy here; bus bandwidth needs two or more GPUs"
        )
    p2p = _peer_access(rt, devs)
    buses = tuple(rt.pci_bus_id(d) for d in devs)
    bufs = _BenchBuffers(rt, devs, sizes[-1])
    timing = _Timing(iters, warmup, timeout_s, clock)
    validation_error: str | None = None
    comm = NCCLCommunicator(device_ids=devs, library=lib)
    try:
        comm.init()
        if validate:
            check_count = min(1024, sizes[-1] // 4)
            validation_error = _validate(rt, comm, bufs, check_count, timeout_s, clock)
            if validation_error:
                notes.append(
                    "all-reduce returned wrong sums: GPU-to-GPU transfers corrupt data on this "
                    "rig; try NCCL_P2P_DISABLE=1"
                )
        rows, dev_times = _sweep(rt, comm, bufs, sizes, timing, progress)
    except NCCLError:
        comm.abort()
        raise
    finally:
        if comm.initialized:
            comm.close()
        bufs.close()
    return BenchResult(
        nccl_version=lib.version,
        nccl_path=lib.path,
        cudart_path=rt.path,
        devices=tuple(devs),
        pci_bus_ids=buses,
        dtype=_DTYPE.nccl_tests_name,
        rows=tuple(rows),
        device_time_us=tuple(dev_times),
        iters=iters,
        warmup=warmup,
        validated=(validation_error is None) if validate else None,
        validation_error=validation_error,
        p2p=p2p,
        notes=tuple(notes),
    )

"""NCCLCommunicator: one NCCL communicator per local GPU, made with ncclCommInitAll, and
the collectives the seed API offers."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from numbers import Integral
from typing import Any

from lltui.core.api_args import check_arg, check_indices
from lltui.core.nccl.enums import NCCLDataType, NCCLResult
from lltui.sources.nccl.errors import NCCLError
from lltui.sources.nccl.finder import NCCL_SONAME, lib_path_arg
from lltui.sources.nccl.library import NcclLibrary, load_nccl


def _as_dtype(datatype: NCCLDataType | int) -> int:
    return datatype.value if isinstance(datatype, NCCLDataType) else int(datatype)


class NCCLCommunicator:
    """NCCL communicators over local GPUs, one per device, made with ncclCommInitAll.

    Buffers and streams are given per device: a sequence with one pointer (int) per device,
    in ``device_ids`` order. A plain int is accepted when the communicator has one device;
    ``stream=0`` means each device's default stream. Collectives over several devices are
    issued inside one ncclGroupStart/ncclGroupEnd, as NCCL requires when one thread drives
    several GPUs. A failed call raises :class:`NCCLError`; success returns
    ``NCCLResult.SUCCESS``. ``n_devs`` (None: as many as ``device_ids``, else 2) and
    ``device_ids`` (None: ``range(n_devs)``), both given, must agree: ValueError otherwise.

        with NCCLCommunicator(n_devs=2) as comm:
            comm.all_reduce([send0, send1], [recv0, recv1], count=1024)
    """

    def __init__(
        self,
        n_devs: int | None = None,
        device_ids: list[int] | None = None,
        lib_path: str | os.PathLike[str] | None = NCCL_SONAME,
        *,
        library: NcclLibrary | None = None,
    ) -> None:
        check_arg("n_devs", n_devs, (Integral, type(None)), "a number of GPUs")
        check_indices("device_ids", device_ids)
        lib = lib_path_arg(lib_path)
        if n_devs is not None and device_ids is not None and n_devs != len(device_ids):
            raise ValueError(
                f"n_devs={n_devs} but device_ids={list(device_ids)} names {len(device_ids)} "
                "GPU(s): give one or make them agree"
            )
        count = 2 if n_devs is None else n_devs
        ids = list(device_ids) if device_ids is not None else list(range(count))
        if not ids:
            raise ValueError("a communicator needs at least one device")
        if len(set(ids)) != len(ids):
            raise ValueError(f"device_ids has duplicates: {ids}")
        if any(i < 0 for i in ids):
            raise ValueError(f"device ids must be >= 0: {ids}")
        self.device_ids = ids
        self.lib_path = lib
        self._lib = library
        self._comms: list[int] = []

    @property
    def n_devs(self) -> int:
        return len(self.device_ids)

    @property
    def library(self) -> NcclLibrary:
        if self._lib is None:
            self._lib = load_nccl(self.lib_path)
        return self._lib

    @property
    def comms(self) -> tuple[int, ...]:
        return tuple(self._comms)

    @property
    def initialized(self) -> bool:
        return bool(self._comms)

    def init(self) -> NCCLCommunicator:
        if self._comms:
            return self
        lib = self.library
        n = self.n_devs
        comms = (ctypes.c_void_p * n)()
        devlist = (ctypes.c_int * n)(*self.device_ids)
        lib.check(lib.cdll.ncclCommInitAll(comms, n, devlist), f"ncclCommInitAll({n} GPUs)")
        self._comms = [int(comms[i] or 0) for i in range(n)]
        if not all(self._comms):
            self._comms = [c for c in self._comms if c]
            self.close()
            raise NCCLError(3, "ncclCommInitAll returned a NULL communicator")
        return self

    def __enter__(self) -> NCCLCommunicator:
        return self.init()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Destroy every communicator; the first failure is raised after all are tried."""
        comms, self._comms = self._comms, []
        if not comms:
            return
        lib = self.library
        first: NCCLError | None = None
        for c in comms:
            try:
                lib.check(lib.cdll.ncclCommDestroy(c), "ncclCommDestroy")
            except NCCLError as exc:
                first = first or exc
        if first is not None:
            raise first

    def abort(self) -> None:
        """Tear the communicators down without waiting for work in flight (after a hang)."""
        comms, self._comms = self._comms, []
        lib = self.library
        fn = "ncclCommAbort" if "ncclCommAbort" in lib.optional else "ncclCommDestroy"
        for c in comms:
            getattr(lib.cdll, fn)(c)

    def _require(self) -> list[int]:
        if not self._comms:
            raise RuntimeError("the communicator is not initialised: use it in a with block")
        return self._comms

    def _query(self, fn: str, rank: int) -> int:
        comms = self._require()
        out = ctypes.c_int(0)
        lib = self.library
        lib.check(getattr(lib.cdll, fn)(comms[rank], ctypes.byref(out)), fn, comms[rank])
        return int(out.value)

    def count(self, rank: int = 0) -> int:
        """Ranks in the communicator, as NCCL reports it."""
        return self._query("ncclCommCount", rank)

    def async_error(self, rank: int) -> NCCLResult:
        lib = self.library
        if "ncclCommGetAsyncError" not in lib.optional:
            return NCCLResult.SUCCESS
        comms = self._require()
        out = ctypes.c_int(0)
        lib.check(
            lib.cdll.ncclCommGetAsyncError(comms[rank], ctypes.byref(out)),
            "ncclCommGetAsyncError",
        )
        return (
            NCCLResult(out.value)
            if out.value in NCCLResult._value2member_map_
            else (NCCLResult.INTERNAL_ERROR)
        )

    def _per_rank(self, value: int | Sequence[int], what: str, *, zero_ok: bool) -> list[int]:
        n = self.n_devs
        if isinstance(value, int):
            if n == 1 or (zero_ok and value == 0):
                return [value] * n
            raise ValueError(f"{what}: give one value per device ({n} devices), not one int")
        vals = [int(v) for v in value]
        if len(vals) != n:
            raise ValueError(f"{what}: {len(vals)} values for {n} devices")
        return vals

    def _launch(
        self,
        name: str,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        stream: int | Sequence[int],
        call: Callable[[Any, int, int, int, int], int],
    ) -> NCCLResult:
        comms = self._require()
        sends = self._per_rank(sendbuff, "sendbuff", zero_ok=False)
        recvs = self._per_rank(recvbuff, "recvbuff", zero_ok=False)
        streams = self._per_rank(stream, "stream", zero_ok=True)
        lib = self.library
        fn = getattr(lib.cdll, name)
        grouped = len(comms) > 1
        if grouped:
            lib.check(lib.cdll.ncclGroupStart(), "ncclGroupStart")
        failed: tuple[int, int] | None = None
        try:
            for r, comm in enumerate(comms):
                rc = call(fn, sends[r], recvs[r], comm, streams[r])
                if rc != 0:
                    failed = (rc, r)
                    break
        finally:
            end_rc = lib.cdll.ncclGroupEnd() if grouped else 0
        if failed is not None:
            rc, r = failed
            lib.check(rc, f"{name} on GPU {self.device_ids[r]}", comms[r])
        lib.check(end_rc, f"ncclGroupEnd after {name}", comms[0])
        return NCCLResult.SUCCESS

    def all_reduce(
        self,
        sendbuff: int | Sequence[int],
        recvbuff: int | Sequence[int],
        count: int,
        datatype: NCCLDataType = NCCLDataType.FLOAT32,
        op: int = 0,
        stream: int | Sequence[int] = 0,
        *,
        dtype: NCCLDataType | None = None,
    ) -> NCCLResult:
        """Reduce across all GPUs (op: 0 sum, 1 prod, 2 max, 3 min, 4 avg); every GPU gets
        the result."""
        dt = _as_dtype(dtype if dtype is not None else datatype)
        return self._launch(
            "ncclAllReduce",
            sendbuff,
            recvbuff,
            stream,
            lambda fn, s, r, c, st: fn(s, r, count, dt, int(op), c, st),
        )

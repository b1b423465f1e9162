"""The event API of the FAKE nvidia-ml-py (:mod:`fake_pynvml`): event sets, registration and
waits, with the names, parameters, constants and ``c_nvmlEventData_t`` fields of the real
binding (checked against the installed nvidia-ml-py by a test).

What it models: ``nvmlDeviceGetSupportedEventTypes`` answers a GPU's ``supported_events`` (plus
the ECC event types where the GPU has ECC) or NOT_SUPPORTED when that is None;
``nvmlDeviceRegisterEvents`` refuses a type the GPU does not support, as the driver does;
``nvmlEventSetWait_v2`` blocks (for real time, on a condition) until an event is queued or the
timeout passes, then raises ``NVMLError_Timeout``; ``device`` in the data it returns is the very
handle that was registered. Waits are thread-safe and are not counted in ``FakeNvml.calls``
(a test reads those counts while the source's event thread waits); :attr:`event_waits` counts
them.

Test controls: :meth:`event`, :meth:`xid`, :meth:`xid_storm` queue events for every live set
the GPU is registered on.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque
from typing import Any

# nvmlEventType bits, as nvidia-ml-py defines them.
nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeClock = 0x0000000000000010
nvmlEventTypePowerSourceChange = 0x0000000000000080
nvmlEventMigConfigChange = 0x0000000000000100
nvmlEventTypeNone = 0x0000000000000000

EVENT_CONSTANTS = {k: v for k, v in dict(globals()).items() if k.startswith("nvmlEvent")}
ECC_EVENTS = nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError
GEFORCE_EVENTS = nvmlEventTypePState | nvmlEventTypeClock | nvmlEventTypeXidCriticalError
EVENT_SYMBOLS = frozenset(
    {
        "nvmlEventSetCreate",
        "nvmlDeviceRegisterEvents",
        "nvmlDeviceGetSupportedEventTypes",
        "nvmlEventSetWait_v2",
        "nvmlEventSetFree",
    }
)
NO_INSTANCE = 0xFFFFFFFF

# Error codes used here (the same numbers as fake_pynvml's constants).
_INVALID_ARGUMENT = 2
_NOT_SUPPORTED = 3
_UNINITIALIZED = 1
_TIMEOUT = 10
_FUNCTION_NOT_FOUND = 13


class c_nvmlEventData_t(ctypes.Structure):
    """Laid out as nvidia-ml-py's; ``device`` holds the fake's handle object (the real one is
    an opaque device pointer)."""

    _fields_ = [
        ("device", ctypes.py_object),
        ("eventType", ctypes.c_ulonglong),
        ("eventData", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class FakeEventSet:
    """What ``nvmlEventSetCreate`` returns (an opaque pointer in the real binding)."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.devices: dict[int, tuple[Any, int]] = {}  # GPU index -> (handle, event types)
        self.queue: deque[tuple[Any, int, int]] = deque()  # (handle, type, data)
        self.freed = False
        self.waiting = 0  # threads inside a wait on this set now

    def __repr__(self) -> str:
        return f"<fake nvmlEventSet {self.number}>"


class FakeEventApi:
    """Mixed into ``FakeNvml``; uses its ``gpus``, ``driver``, ``initialised``, ``_device``,
    ``_system`` and the error class it is given."""

    gpus: list[Any]
    driver: Any
    initialised: int

    def _init_events(self, error: type[Exception]) -> None:
        self._error = error
        self._event_cond = threading.Condition()
        self.event_sets: list[FakeEventSet] = []
        self.event_waits = 0  # nvmlEventSetWait(_v2) calls

    def _device(self, function: str, handle: Any, symbol: str | None = None) -> Any:
        raise NotImplementedError

    def _system(self, function: str, symbol: str | None = None) -> None:
        raise NotImplementedError

    # -- test controls ------------------------------------------------------------------
    def event(self, gpu: int, event_type: int, data: int = 0, *, times: int = 1) -> int:
        """Queue ``times`` events of ``event_type`` for ``gpu`` on every live set it is
        registered on for that type; how many sets got them."""
        delivered = 0
        with self._event_cond:
            for es in self.event_sets:
                registered = es.devices.get(gpu)
                if es.freed or registered is None or not registered[1] & event_type:
                    continue
                es.queue.extend([(registered[0], event_type, data)] * times)
                delivered += 1
            self._event_cond.notify_all()
        return delivered

    def xid(self, gpu: int, xid: int) -> int:
        """The driver reports XID ``xid`` on ``gpu``."""
        return self.event(gpu, nvmlEventTypeXidCriticalError, xid)

    def xid_storm(self, gpu: int, n: int, xid: int = 13) -> int:
        """``n`` XID events on ``gpu`` at once."""
        return self.event(gpu, nvmlEventTypeXidCriticalError, xid, times=n)

    def queued(self) -> int:
        """Events queued and not yet waited for, all live sets together."""
        with self._event_cond:
            return sum(len(es.queue) for es in self.event_sets if not es.freed)

    def live_event_sets(self) -> list[FakeEventSet]:
        with self._event_cond:
            return [es for es in self.event_sets if not es.freed]

    def waiters(self) -> int:
        """Threads inside a wait now, all sets together."""
        with self._event_cond:
            return sum(es.waiting for es in self.event_sets)

    def wait_for_waiters(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` threads are inside a wait; False after ``timeout``."""
        with self._event_cond:
            return self._event_cond.wait_for(
                lambda: sum(es.waiting for es in self.event_sets) >= count, timeout
            )

    # -- the binding's functions ----------------------------------------------------------
    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._system("nvmlEventSetCreate")
        with self._event_cond:
            es = FakeEventSet(len(self.event_sets))
            self.event_sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        gpu = self._device("nvmlDeviceGetSupportedEventTypes", handle)
        if gpu.supported_events is None:
            raise self._error(_NOT_SUPPORTED)
        ecc = ECC_EVENTS if gpu.ecc_corrected is not None else 0
        return int(gpu.supported_events) | ecc

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self._device("nvmlDeviceRegisterEvents", handle)
        if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
            raise self._error(_INVALID_ARGUMENT)
        supported = gpu.supported_events
        if supported is None:
            raise self._error(_NOT_SUPPORTED)
        supported |= ECC_EVENTS if gpu.ecc_corrected is not None else 0
        if eventTypes & ~supported:
            raise self._error(_NOT_SUPPORTED)  # as the driver: some type is not supported
        with self._event_cond:
            eventSet.devices[handle.index] = (handle, int(eventTypes))

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> c_nvmlEventData_t:
        with self._event_cond:
            if not self.initialised:
                raise self._error(_UNINITIALIZED)
            if "nvmlEventSetWait_v2" in self.driver.missing_symbols:
                raise self._error(_FUNCTION_NOT_FOUND)
            if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
                raise self._error(_INVALID_ARGUMENT)
            self.event_waits += 1
            eventSet.waiting += 1
            self._event_cond.notify_all()  # for wait_for_waiters
            try:
                deadline = time.monotonic() + timeoutms / 1000
                while not eventSet.queue:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._error(_TIMEOUT)
                    self._event_cond.wait(left)
                handle, event_type, data = eventSet.queue.popleft()
            finally:
                eventSet.waiting -= 1
        out = c_nvmlEventData_t()
        out.device = handle
        out.eventType, out.eventData = event_type, data
        out.gpuInstanceId = out.computeInstanceId = NO_INSTANCE
        return out

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> c_nvmlEventData_t:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._system("nvmlEventSetFree")
        with self._event_cond:
            if not isinstance(eventSet, FakeEventSet) or eventSet.freed:
                raise self._error(_INVALID_ARGUMENT)
            if eventSet.waiting:
                # The real library would be freeing memory a waiting call still uses.
                raise AssertionError("nvmlEventSetFree while a thread waits on the set")
            eventSet.freed = True
            eventSet.queue.clear()
            self._event_cond.notify_all()

"""XID and ECC errors through NVML's event API, waited on by a thread of their own.

At open an event set is created and each GPU is registered for the types it supports among
XID critical errors and single- and double-bit ECC errors (``nvmlDeviceGetSupportedEventTypes``).
A GPU or driver that supports none of them, or refuses (NOT_SUPPORTED, NO_PERMISSION, a
function the driver lacks), simply has no events: that is not an error. A daemon thread waits
on the set with ``nvmlEventSetWait_v2`` and hands each event to an :class:`EventBuffer`. The
poll drains the buffer: it never waits on NVML for events.

NVML has no call that ends a wait early, so the thread holds NVML open itself (its init and
shutdown are counted): told to stop, it frees its set and lets NVML go once its wait ends, and
closing the source does not wait for that. Its waits can be long, and an idle monitor is not
woken twice a second to look for a stop, nor is quitting held up by a wait.

The buffer is bounded per GPU: an event storm costs a counter, not memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from lltui.core.monitor.models import XidEvent
from lltui.core.monitor.xid import XID_FELL_OFF_THE_BUS, xid_event
from lltui.sources.gpu.nvml.codes import (
    ERR_FUNCTION_NOT_FOUND,
    ERR_GPU_IS_LOST,
    ERR_TIMEOUT,
    ERR_UNINITIALIZED,
    EVENT_DOUBLE_BIT_ECC,
    EVENT_SINGLE_BIT_ECC,
    EVENT_XID_CRITICAL,
    error_code,
    error_words,
)

# how long one wait may block: an idle monitor wakes this thread 1/x times a second (at 0.5 s
# a twentieth of its idle CPU), and a stopped thread leaves NVML at most this much later
DEFAULT_EVENT_WAIT_S = 5.0
DEFAULT_EVENT_LIMIT = 64  # XID events kept per GPU between two polls
EVENT_ECC = EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC
WANTED_EVENTS = EVENT_XID_CRITICAL | EVENT_ECC
MAX_WAIT_FAILURES = 5  # failed waits in a row before the thread gives up
FAILURE_BACKOFF_S = 1.0


@dataclass(frozen=True, slots=True)
class Drained:
    """What one GPU's events came to since the last poll."""

    events: tuple[XidEvent, ...] = ()  # the first ones, up to the buffer's limit
    dropped: int = 0  # XID events past the limit: counted, not kept
    last: int | None = None  # the last XID number seen, kept or dropped
    fell_off: bool = False  # an XID 79 came, kept or dropped
    ecc: bool = False  # an ECC error event came


@dataclass(slots=True)
class _Pending:
    events: list[XidEvent] = field(default_factory=list)
    dropped: int = 0
    last: int | None = None
    fell_off: bool = False
    ecc: bool = False


class EventBuffer:
    """Events handed from the waiting thread to the poll; thread-safe and bounded.

    Per GPU it keeps the first ``limit`` XID events since the last drain (the first of a burst
    is usually the cause; the rest follow from it) and counts the others. The last XID number
    and whether an XID 79 came are kept whatever was dropped.
    """

    def __init__(self, limit: int = DEFAULT_EVENT_LIMIT) -> None:
        self.limit = max(1, limit)
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._pending: dict[int, _Pending] = {}
        self.received = 0  # events handed in, ever
        self.dropped = 0  # XID events not kept, ever

    def _slot(self, index: int) -> _Pending:
        slot = self._pending.get(index)
        if slot is None:
            slot = self._pending[index] = _Pending()
        return slot

    def add_xid(self, index: int, xid: int, t: float) -> None:
        with self._lock:
            self.received += 1
            slot = self._slot(index)
            slot.last = xid
            if xid == XID_FELL_OFF_THE_BUS:
                slot.fell_off = True
            if len(slot.events) < self.limit:
                slot.events.append(xid_event(xid, t))
            else:
                slot.dropped += 1
                self.dropped += 1
            self._arrived.notify_all()

    def add_ecc(self, index: int) -> None:
        with self._lock:
            self.received += 1
            self._slot(index).ecc = True
            self._arrived.notify_all()

    def wait_received(self, count: int, timeout: float) -> bool:
        """Wait until ``count`` events in all have been handed in; False after ``timeout``."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self.received >= count, timeout)

    def held(self) -> int:
        """XID events held now, all GPUs together (never more than ``limit`` per GPU)."""
        with self._lock:
            return sum(len(p.events) for p in self._pending.values())

    def drain(self) -> dict[int, Drained]:
        """Everything since the last drain, by GPU index; the buffer is empty after."""
        with self._lock:
            pending, self._pending = self._pending, {}
        return {
            index: Drained(tuple(p.events), p.dropped, p.last, p.fell_off, p.ecc)
            for index, p in pending.items()
        }


def device_key(handle: Any) -> Hashable:
    """What identifies a device handle: the address a ctypes pointer holds (the binding makes
    a new pointer object for each event), else the object itself."""
    try:
        return ("address", ctypes.cast(handle, ctypes.c_void_p).value)
    except (ctypes.ArgumentError, TypeError):
        return ("object", id(handle))


class EventWatcher:
    """One NVML event set, the GPUs registered on it, and the thread that waits on it."""

    def __init__(
        self,
        nv: Any,
        buffer: EventBuffer,
        *,
        wall: Callable[[], float],
        wait_s: float = DEFAULT_EVENT_WAIT_S,
    ) -> None:
        self._nv = nv
        self.buffer = buffer
        self._wall = wall
        self._wait_ms = max(1, round(wait_s * 1000))
        self._set: Any = None
        self._devices: dict[Hashable, int] = {}
        self._handles: list[Any] = []  # keeps the registered handles (and their ids) alive
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.problem: str | None = None  # why the thread gave up early, in words

    @property
    def registered(self) -> tuple[int, ...]:
        """Indices of the GPUs whose events are waited on."""
        return tuple(sorted(self._devices.values()))

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, gpus: Iterable[tuple[int, Any]]) -> bool:
        """Create the set, register each (index, handle) for what it supports and start the
        thread; False (and nothing left open) when no GPU has events."""
        nv = self._nv
        wait = getattr(nv, "nvmlEventSetWait_v2", None) or getattr(nv, "nvmlEventSetWait", None)
        create = getattr(nv, "nvmlEventSetCreate", None)
        if wait is None or create is None:
            return False
        try:
            self._set = create()
        except Exception:  # a driver without the event API
            return False
        for index, handle in gpus:
            if self._register(handle):
                self._devices[device_key(handle)] = index
                self._handles.append(handle)
        if not self._devices:
            self._free()
            return False
        try:
            nv.nvmlInit()  # the thread's own hold on NVML, let go when it ends
        except Exception:
            self._free()
            return False
        thread = threading.Thread(
            target=self._run, args=(wait,), name="lltui-nvml-events", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: no events, and NVML let go again
            self._let_go()
            return False
        self._thread = thread
        return True

    def _register(self, handle: Any) -> bool:
        nv = self._nv
        try:
            wanted = int(nv.nvmlDeviceGetSupportedEventTypes(handle)) & WANTED_EVENTS
            if not wanted:
                return False
            nv.nvmlDeviceRegisterEvents(handle, wanted, self._set)
        except Exception:  # NOT_SUPPORTED, NO_PERMISSION, missing functions: no events
            return False
        return True

    def join(self, timeout: float) -> bool:
        """Wait for the thread to end by itself; whether it has."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.running

    def stop(self) -> None:
        """Tell the thread to stop after its current wait (safe from any thread), without
        waiting for it: it frees its set and lets NVML go itself (``join`` waits for that)."""
        self._stop.set()

    def _free(self) -> None:
        event_set, self._set = self._set, None
        if event_set is not None:
            with contextlib.suppress(Exception):  # closing must not fail
                self._nv.nvmlEventSetFree(event_set)

    # -- the thread -----------------------------------------------------------------------
    def _let_go(self) -> None:
        """Free the set while NVML is still held, then the hold ``start`` took."""
        self._free()
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()

    def _run(self, wait: Callable[[Any, int], Any]) -> None:
        try:
            self._wait_for_events(wait)
        finally:
            self._let_go()

    def _wait_for_events(self, wait: Callable[[Any, int], Any]) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                data = wait(self._set, self._wait_ms)
            except Exception as exc:
                code = error_code(exc)
                if code == ERR_TIMEOUT:
                    failures = 0
                    continue
                if code == ERR_GPU_IS_LOST:  # one GPU fell off: the others still report
                    self._stop.wait(FAILURE_BACKOFF_S)
                    continue
                failures += 1
                if code in (ERR_FUNCTION_NOT_FOUND, ERR_UNINITIALIZED) or (
                    failures >= MAX_WAIT_FAILURES
                ):
                    self.problem = f"XID and ECC events stopped: {error_words(exc)}"
                    return
                self._stop.wait(FAILURE_BACKOFF_S)
                continue
            failures = 0
            try:
                self._take(data)
            except Exception:  # an event shaped in a way this code does not know: skipped
                continue

    def _take(self, data: Any) -> None:
        index = self._devices.get(device_key(data.device))
        if index is None:
            return
        kind = int(data.eventType)
        if kind & EVENT_XID_CRITICAL:
            self.buffer.add_xid(index, int(data.eventData), self._wall())
        elif kind & EVENT_ECC:
            self.buffer.add_ecc(index)

"""Ask a llama.cpp ``rpc-server`` how much memory its devices have free, as llama-server does.

The wire protocol is ggml-rpc's (ggml/src/ggml-rpc/ggml-rpc.cpp of the pinned llama.cpp,
protocol 7.x): a request is ``cmd (u8) | size (u64) | payload``, a reply ``size (u64) |
payload``, little-endian. The first command must be HELLO (14) with 24 bytes of transport
capabilities (all zero: plain TCP, no RDMA upgrade); it answers the server's version. Then
DEVICE_COUNT (15), GET_DEVICE_MEMORY (11, ``u32 device``) -> ``u64 free, u64 total`` and
GET_ALIGNMENT (1, ``u32 device``) -> ``u64``: the buffer alignment of the backend behind it,
32 for the CPU backend (TENSOR_ALIGNMENT), 128 for CUDA, which says how it allocates. The
protocol names no device: llama.cpp describes each by its endpoint.

llama.cpp RPC has no authentication and no encryption: this only reads, and sends nothing
beyond these four commands.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.text import error_text

PROTO_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of the pinned llama.cpp
PROTO_MINOR = 0  # RPC_PROTO_MINOR_VERSION: a newer minor is refused by llama-server too
CMD_GET_ALIGNMENT = 1
CMD_GET_DEVICE_MEMORY = 11
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE
MAX_DEVICES = 16  # more than a server plausibly serves: a garbage count is refused
TIMEOUT_S = 3.0


CPU_ALIGNMENT = 32  # the CPU backend's buffer alignment (ggml-impl.h TENSOR_ALIGNMENT)


@dataclass(frozen=True, slots=True)
class RpcDeviceMemory:
    free_bytes: int
    total_bytes: int
    alignment: int = 0  # the backend's buffer alignment (0: not reported)

    @property
    def backend(self) -> str:
        """What runs behind the device, as far as its alignment tells: "cpu" or "cuda"."""
        return "cpu" if self.alignment == CPU_ALIGNMENT else "cuda"


@dataclass(frozen=True, slots=True)
class RpcServerInfo:
    """What one rpc-server reported: its protocol version and each device's memory."""

    endpoint: str
    version: tuple[int, int, int]
    devices: tuple[RpcDeviceMemory, ...]


class RpcProbeError(Exception):
    """The server could not be asked; ``str()`` is one line naming the endpoint. ``silent``:
    it took the connection and said nothing (busy with a client, or no rpc-server):
    llama-server would wait on it without end."""

    def __init__(self, message: str, silent: bool = False) -> None:
        super().__init__(message)
        self.silent = silent


class _Conn:
    """One TCP connection with a deadline shared by every read and write."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline

    def _arm(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        self.sock.settimeout(left)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            self._arm()
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise RpcProbeError("the server closed the connection")
            buf += chunk
        return bytes(buf)

    def call(self, cmd: int, payload: bytes, reply_size: int) -> bytes:
        self._arm()
        self.sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
        (size,) = struct.unpack("<Q", self.recv_exact(8))
        if size != reply_size:
            raise RpcProbeError(
                f"not a llama.cpp rpc-server answer (command {cmd}: {size} bytes, "
                f"expected {reply_size})"
            )
        return self.recv_exact(reply_size)


def _split(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    digits = port.isascii() and port.isdigit()  # "²" is a digit to str.isdigit
    if not sep or not host or not digits or not 0 < int(port) < 65536:
        raise RpcProbeError(f"{endpoint}: expected HOST:PORT")
    return host.strip("[]"), int(port)


def _talk(conn: _Conn, endpoint: str) -> RpcServerInfo:
    hello = conn.call(CMD_HELLO, bytes(CONN_CAPS_SIZE), 4 + CONN_CAPS_SIZE)
    major, minor, patch = hello[0], hello[1], hello[2]
    if major != PROTO_MAJOR or minor > PROTO_MINOR:  # what llama-server itself refuses
        raise RpcProbeError(
            f"rpc-server protocol {major}.{minor}.{patch}; "
            f"this llama.cpp speaks {PROTO_MAJOR}.{PROTO_MINOR}"
        )
    (count,) = struct.unpack("<I", conn.call(CMD_DEVICE_COUNT, b"", 4))
    if not 0 < count <= MAX_DEVICES:
        raise RpcProbeError(f"the server reports {count} devices")
    devices = []
    for i in range(count):
        reply = conn.call(CMD_GET_DEVICE_MEMORY, struct.pack("<I", i), 16)
        free, total = struct.unpack("<QQ", reply)
        (align,) = struct.unpack("<Q", conn.call(CMD_GET_ALIGNMENT, struct.pack("<I", i), 8))
        devices.append(RpcDeviceMemory(min(free, total), total, align))
    return RpcServerInfo(endpoint, (major, minor, patch), tuple(devices))


def probe(endpoint: str, timeout_s: float = TIMEOUT_S) -> RpcServerInfo:
    """The devices' memory of the rpc-server at ``endpoint`` (HOST:PORT), within ``timeout_s``
    in all. RpcProbeError with one line when it cannot be had."""
    host, port = _split(endpoint)
    deadline = time.monotonic() + timeout_s
    sock = _connect(endpoint, host, port, timeout_s)
    try:
        with sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # close with a reset, not a FIN: a busy rpc-server (one client at a time) reads
            # the HELLO later, and its reply to a half-closed socket raises SIGPIPE, which
            # kills it; to a reset one, its send fails and it goes on serving
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return _talk(_Conn(sock, deadline), endpoint)
    except RpcProbeError as exc:
        raise RpcProbeError(f"rpc-server {endpoint}: {exc}") from None
    except TimeoutError:
        # connected but silent: rpc-server serves one client at a time (llama-server, say)
        raise RpcProbeError(
            f"rpc-server {endpoint}: no answer within {timeout_s:g} s "
            "(it serves one client at a time: is a llama-server using it?)",
            silent=True,
        ) from None
    except OSError as exc:
        why = error_text(exc)
        raise RpcProbeError(f"rpc-server {endpoint}: connection lost ({why})") from None


def _connect(endpoint: str, host: str, port: int, timeout_s: float) -> socket.socket:
    """A connected socket, or RpcProbeError saying why not (a host that is down or
    firewalled times out here, before any server could be busy)."""
    try:
        return socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError:
        raise RpcProbeError(
            f"rpc-server {endpoint}: cannot connect (no answer within {timeout_s:g} s)"
        ) from None
    except socket.gaierror as exc:
        raise RpcProbeError(f"rpc-server {endpoint}: unknown host ({exc.strerror})") from None
    except (UnicodeError, ValueError):  # an empty or over-long label: "a..b"
        raise RpcProbeError(f"rpc-server {endpoint}: not a valid host name") from None
    except OSError as exc:
        why = error_text(exc)
        raise RpcProbeError(f"rpc-server {endpoint}: cannot connect ({why})") from None


# answers kept for a caller that asks again and again (the fit view, on each edit of its
# form): endpoint -> (when, answer)
_recent: dict[str, tuple[float, RpcServerInfo | RpcProbeError]] = {}
_recent_lock = threading.Lock()
RECENT_MAX = 16  # endpoints kept (a host typed a digit at a time is a new one each time)


def probe_all(
    endpoints: Sequence[str], timeout_s: float = TIMEOUT_S, max_age_s: float = 0.0
) -> list[RpcServerInfo | RpcProbeError]:
    """Every endpoint probed at once, all within ``timeout_s`` (and a little): a dead host
    costs one timeout, not one each. Name lookups, which no socket timeout bounds, are left
    behind in daemon threads when they take longer. An answer (or failure) at most
    ``max_age_s`` old is taken as it is, without asking again."""
    now = time.monotonic()
    with _recent_lock:
        kept = {ep: _recent.get(ep) for ep in endpoints}
    fresh = {ep: got[1] for ep, got in kept.items() if got and now - got[0] <= max_age_s}
    ask = [ep for ep in dict.fromkeys(endpoints) if ep not in fresh]
    answers = dict(zip(ask, _probe_now(ask, timeout_s), strict=True))
    with _recent_lock:
        if len(_recent) + len(answers) > RECENT_MAX:
            _recent.clear()
        _recent.update((ep, (now, got)) for ep, got in answers.items())
    return [fresh[ep] if ep in fresh else answers[ep] for ep in endpoints]


def _probe_now(endpoints: Sequence[str], timeout_s: float) -> list[RpcServerInfo | RpcProbeError]:
    results: list[RpcServerInfo | RpcProbeError | None] = [None] * len(endpoints)

    def one(i: int, ep: str) -> None:
        try:
            results[i] = probe(ep, timeout_s)
        except RpcProbeError as exc:
            results[i] = exc
        except Exception as exc:  # a thread's traceback must not reach the terminal
            results[i] = RpcProbeError(f"rpc-server {ep}: {error_text(exc)}")

    threads = [
        threading.Thread(target=one, args=(i, ep), daemon=True, name=f"rpc-probe {ep}")
        for i, ep in enumerate(endpoints)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s + 0.5
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [
        r if r is not None else RpcProbeError(f"rpc-server {ep}: no answer within {timeout_s:g} s")
        for r, ep in zip(results, endpoints, strict=True)
    ]

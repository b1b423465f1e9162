"""The rpc-server probe: free memory asked as llama-server asks it; errors in one line, in time."""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.services.devices import with_rpc
from lltui.sources.llama.rpc_probe import RpcProbeError, probe, probe_all

GIB = 1 << 30


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ConnectionError
        buf += chunk
    return buf


def _read_cmd(conn: socket.socket) -> tuple[int, bytes]:
    cmd, size = struct.unpack("<BQ", _recv_exact(conn, 9))
    return cmd, _recv_exact(conn, size)


def _reply(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(struct.pack("<Q", len(payload)) + payload)


def fake_rpc_server(
    conn: socket.socket, memories=((3 * GIB, 8 * GIB),), major=7, minor=0, alignment=128
) -> None:
    """ggml-rpc protocol 7 as the pinned rpc-server speaks it, for these devices (a CUDA
    server's buffer alignment unless told)."""
    cmd, caps = _read_cmd(conn)
    assert cmd == 14 and caps == bytes(24)
    _reply(conn, bytes([major, minor, 0, 0]) + bytes(24))
    while True:
        try:
            cmd, body = _read_cmd(conn)
        except ConnectionError:
            return
        if cmd == 15:
            _reply(conn, struct.pack("<I", len(memories)))
        elif cmd == 11:
            (dev,) = struct.unpack("<I", body)
            _reply(conn, struct.pack("<QQ", *memories[dev]))
        elif cmd == 1:
            _reply(conn, struct.pack("<Q", alignment))
        else:
            return


@contextlib.contextmanager
def serving(handler: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback TCP server running ``handler`` on each connection; yields HOST:PORT."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    srv.settimeout(0.05)  # the loop sees ``stop`` soon after the test ends
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn, contextlib.suppress(OSError, AssertionError, ConnectionError):
                handler(conn)

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        t.join(2)
        srv.close()


def silent(conn: socket.socket) -> None:
    """Accepts and reads, never answers (until the client gives up)."""
    while conn.recv(4096):
        pass


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_probe_reads_every_device_of_a_server():
    two = ((3 * GIB, 8 * GIB), (10 * GIB, 24 * GIB))
    with serving(lambda c: fake_rpc_server(c, two)) as ep:
        info = probe(ep)
    assert info.version == (7, 0, 0)
    assert [(d.free_bytes, d.total_bytes) for d in info.devices] == list(two)


def test_probe_errors_are_one_line_and_bounded():
    with pytest.raises(RpcProbeError, match="cannot connect") as exc:
        probe(_closed_port())
    assert "\n" not in str(exc.value)
    # garbage: an HTTP server, say
    http = serving(lambda c: c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n"))
    with http as ep, pytest.raises(RpcProbeError, match=r"not a llama\.cpp rpc-server"):
        probe(ep)
    # another protocol version
    old = serving(lambda c: fake_rpc_server(c, major=3))
    with old as ep, pytest.raises(RpcProbeError, match=r"protocol 3\.0\.0"):
        probe(ep)
    # accepted, then silence: the whole probe keeps to its deadline
    with serving(silent) as ep:
        t0 = time.monotonic()
        with pytest.raises(RpcProbeError, match=r"no answer within 0\.5 s"):
            probe(ep, timeout_s=0.5)
        assert time.monotonic() - t0 < 1.5
    with pytest.raises(RpcProbeError, match="expected HOST:PORT"):
        probe("nohost")


def test_names_and_ports_that_are_not_an_endpoint_are_one_line(monkeypatch):
    from lltui.sources.llama import rpc_probe

    monkeypatch.setattr(rpc_probe, "_connect", rpc_probe._connect.__wrapped__)
    with pytest.raises(RpcProbeError, match="not a valid host name"):
        probe("a..b:50052")  # an empty label: the name codec refuses it, not the resolver
    with pytest.raises(RpcProbeError, match="expected HOST:PORT"):
        probe("host:\u00b2")  # a superscript two is a digit to str.isdigit, not a port
    # whatever a probe thread meets comes back as that endpoint's one line
    monkeypatch.setattr(rpc_probe, "probe", lambda ep, t: 1 / 0)
    (got,) = probe_all(["127.0.0.1:1"], timeout_s=0.5)
    assert isinstance(got, RpcProbeError) and str(got).endswith(": division by zero")


def test_a_newer_minor_protocol_is_refused_as_llama_server_refuses_it():
    newer = serving(lambda c: fake_rpc_server(c, minor=1))
    with newer as ep, pytest.raises(RpcProbeError, match=r"protocol 7\.1\.0; .* speaks 7\.0"):
        probe(ep)


def test_a_host_that_drops_the_connection_attempt_is_not_called_busy(monkeypatch):
    from lltui.sources.llama import rpc_probe

    def dropped(*_a, **_k):
        raise TimeoutError

    monkeypatch.setattr(rpc_probe, "_connect", rpc_probe._connect.__wrapped__)
    monkeypatch.setattr(rpc_probe.socket, "create_connection", dropped)
    with pytest.raises(RpcProbeError) as exc:
        probe("127.0.0.1:50052", timeout_s=0.2)
    assert "cannot connect (no answer within 0.2 s)" in str(exc.value)
    assert "llama-server" not in str(exc.value)


def test_only_the_loopback_network_escapes_the_warning():
    from lltui.core.cmdline.address import endpoint_is_loopback as loopback

    assert loopback("127.0.0.1:1") and loopback("[::1]:1") and loopback("localhost:1")
    assert not loopback("127.evil.example:1") and not loopback("10.0.0.1:1")


def test_probe_all_asks_servers_at_once():
    with serving(silent) as slow1, serving(silent) as slow2:
        t0 = time.monotonic()
        got = probe_all([slow1, slow2], timeout_s=0.5)
        assert time.monotonic() - t0 < 1.2
    assert all(isinstance(g, RpcProbeError) for g in got)


def test_probe_all_takes_a_recent_answer_only_when_asked_to():
    asked = []

    def counted(conn: socket.socket) -> None:
        asked.append(1)
        fake_rpc_server(conn, ((1 * GIB, 2 * GIB),))

    with serving(counted) as ep:
        first = probe_all([ep], timeout_s=2.0)
        again = probe_all([ep], timeout_s=2.0, max_age_s=60.0)  # the fit view, edit after edit
        assert again == first and len(asked) == 1
        probe_all([ep], timeout_s=2.0)  # no age given: asked afresh
        assert len(asked) == 2
    # a failure is kept as well: a dead host costs its timeout once, not on every edit
    dead = _closed_port()
    failed = probe_all([dead], timeout_s=0.5)
    assert probe_all([dead], timeout_s=0.5, max_age_s=60.0) == failed


def test_a_name_lookup_that_hangs_is_left_behind(monkeypatch):
    from lltui.sources.llama import rpc_probe

    def stuck(*_a, **_k):
        time.sleep(5)  # getaddrinfo on a resolver that does not answer: no timeout applies
        raise OSError("late")

    monkeypatch.setattr(rpc_probe, "_connect", rpc_probe._connect.__wrapped__)
    monkeypatch.setattr(rpc_probe.socket, "create_connection", stuck)
    t0 = time.monotonic()
    (got,) = probe_all(["slow.example:50052"], timeout_s=0.3)
    assert time.monotonic() - t0 < 1.5
    assert isinstance(got, RpcProbeError) and "no answer within 0.3 s" in str(got)


def test_with_rpc_gives_the_reported_memory_and_names_each_device():
    two = ((3 * GIB, 8 * GIB), (10 * GIB, 24 * GIB))
    with serving(lambda c: fake_rpc_server(c, two)) as a, serving(fake_rpc_server) as b:
        devices, notes = with_rpc([], [a, b])
    assert [(d.name, d.dev_name) for d in devices] == [
        (f"RPC0[{a}]", "RPC0"),
        (f"RPC1[{a}]", "RPC1"),
        (f"RPC0[{b}]", "RPC2"),
    ]
    assert [d.free_bytes for d in devices] == [3 * GIB, 10 * GIB, 3 * GIB]
    assert [d.total_bytes for d in devices] == [8 * GIB, 24 * GIB, 8 * GIB]
    assert any("3.0 GiB free of 8.0 GiB" in n for n in notes)
    assert not any("authentication" in n for n in notes)  # loopback only
    assert {d.backend for d in devices} == {"cuda"}


def test_a_server_running_the_cpu_backend_is_told_by_its_alignment():
    """A CPU rpc-server allocates and schedules as the CPU does (no CUDA row padding); its
    buffer alignment (32) says so. A backend the spec names is kept."""
    from lltui.core.memory.devices import parse_gpus_spec

    with serving(lambda c: fake_rpc_server(c, alignment=32)) as ep:
        (dev,), _ = with_rpc([], [ep])
        assert dev.backend == "cpu"
        (named,) = parse_gpus_spec(f"rpc:{ep}:cuda").devices
        (kept,), _ = with_rpc([named], [])
        assert kept.backend == "cuda"


def test_fit_with_a_dead_rpc_server_says_so_in_one_line(tmp_path, capsys):
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec())
    dead = _closed_port()
    assert main(["fit", str(path), "--gpus", "T4", "--rpc", dead, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"][0]["free_bytes"] is None
    (note,) = [n for n in data["notes"] if dead in n]
    assert "cannot connect" in note and "free memory is unknown" in note
    with serving(fake_rpc_server) as ep:
        assert main(["fit", str(path), "--gpus", "T4", "--rpc", ep, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"][0]["name"] == f"RPC0[{ep}]"
    assert data["devices"][0]["free_bytes"] == 3 * GIB


def test_remote_rpc_hosts_are_warned_about():
    devices, notes = with_rpc([], ["10.255.255.1:50052"], timeout_s=0.2)
    assert devices[0].free_bytes is None
    assert any("no authentication" in n for n in notes)


def test_a_remote_rpc_server_given_with_its_memory_is_warned_about_once(tmp_path, capsys):
    """fit --gpus rpc:10.0.0.5:50052=24GiB asks that server nothing: the warning came only
    with a probe, so fit said nothing of RPC's missing authentication."""
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec())
    far = "no authentication and no encryption"
    given = ["--gpus", "rpc:10.0.0.5:50052=24GiB"]
    assert main(["fit", str(path), *given, "--json"]) == 0
    assert sum(far in n for n in json.loads(capsys.readouterr().out)["notes"]) == 1
    assert main(["fit", str(path), *given, "--rpc", "10.0.0.5:50052"]) == 0
    assert capsys.readouterr().out.count(far) == 1
    assert main(["fit", str(path), "--gpus", "rpc:127.0.0.1:50052=24GiB"]) == 0
    assert far not in capsys.readouterr().out


@pytest.mark.slow
def test_probe_the_real_rpc_server(tmp_path, capsys):
    from support.llama_fixture import build_llama, rpc_servers

    bins = build_llama()
    with rpc_servers(bins, 1, tmp_path) as (server,):
        ep = f"127.0.0.1:{server.port}"
        info = probe(ep)
        again = probe(ep)  # the server serves one client at a time: the probe lets go
        assert info.version[0] == 7 and len(info.devices) == 1
        dev = info.devices[0]
        assert 0 < dev.free_bytes <= dev.total_bytes
        assert dev.alignment == 32 and dev.backend == "cpu"  # the CPU backend behind it
        assert again.devices[0].total_bytes == dev.total_bytes
        # while another client holds it, the server does not answer: said, in time
        with socket.create_connection(("127.0.0.1", server.port)) as busy:
            busy.sendall(struct.pack("<BQ", 14, 24) + bytes(24))
            assert len(_recv_exact(busy, 8 + 28)) == 36  # the first client is served
            t0 = time.monotonic()
            with pytest.raises(RpcProbeError, match="one client at a time"):
                probe(ep, timeout_s=1.0)
            assert time.monotonic() - t0 < 2.0
        # the HELLO the probe left behind is read once the first client goes: the server
        # must live through answering a client that is gone
        time.sleep(0.5)
        assert server.proc.poll() is None, server.log_path.read_text()[-500:]
        log = server.log_path.read_text()
        # what the server itself prints at start: "CPU: ... (24105 MiB, 24105 MiB free)"
        assert f"({dev.total_bytes >> 20} MiB" in log
        # fit --rpc: the device has the memory the server reports
        path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec())
        assert main(["fit", str(path), "--gpus", "cpu", "--rpc", ep, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rpc = data["devices"][0]
    assert rpc["free_bytes"] is not None, data.get("notes")
    assert rpc["name"] == f"RPC0[{ep}]" and rpc["free_bytes"] > 0
    assert abs(rpc["free_bytes"] - dev.free_bytes) < 256 << 20  # free moves a little


@pytest.mark.parametrize(
    "spec",
    [
        "rpc:127.0.0.1:50052=8GiB,127.0.0.1:50053=8GiB",
        "rpc:127.0.0.1:50052=8GiB,rpc:127.0.0.1:50053=8GiB",
    ],
)
def test_gpus_rpc_list_names_every_server(spec):
    """--gpus rpc:A,B as llama-server's --rpc A,B: B is a server too (it was a GPU named B)."""
    from lltui.core.memory.devices import parse_gpus_spec

    devices = parse_gpus_spec(spec).devices
    assert [(d.kind, d.total_bytes) for d in devices] == [("rpc", 8 * 2**30)] * 2
    assert [d.name.split("[")[1] for d in devices] == ["127.0.0.1:50052]", "127.0.0.1:50053]"]


def test_gpus_host_port_without_size_and_ipv6_are_servers():
    from lltui.core.memory.devices import parse_gpus_spec

    kinds = [d.kind for d in parse_gpus_spec("24GiB,rpc:127.0.0.1:1,[::1]:2=4GiB").devices]
    assert sorted(kinds) == ["cuda", "rpc", "rpc"]
    with pytest.raises(ValueError, match="given twice"):
        parse_gpus_spec("rpc:127.0.0.1:1,127.0.0.1:1")


@pytest.mark.parametrize("spec", ["4090:2", "4090:2:cuda", "24GiB,3090:4=24GiB"])
def test_a_gpu_and_a_count_written_as_a_port_is_no_server(spec):
    """``4090:2`` was RPC server 0.0.15.250:2 (the digits read as an address) and probed."""
    from lltui.core.memory.devices import parse_gpus_spec

    with pytest.raises(
        ValueError, match=r"write [24]x(4090|3090) \(an RPC server is rpc:HOST:PORT\)"
    ):
        parse_gpus_spec(spec)
    (named,) = parse_gpus_spec("rpc:4090:2").devices  # said as a server: one
    assert named.kind == "rpc"


def test_rpc_servers_on_the_cpu_backend_are_not_called_gpus(tmp_path, capsys):
    """Two rpc-servers on the CPU backend (alignment 32): fit said 'fewer GPUs: -dev RPC0:
    one GPU holds it' and kept its margin for 'the CUDA context, cuBLAS' on no GPU."""
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec())
    cpu = lambda c: fake_rpc_server(c, alignment=32)  # noqa: E731
    with serving(cpu) as a, serving(cpu) as b:
        assert main(["fit", str(path), "--gpus", "cpu", "--rpc", f"{a},{b}"]) == 0
        out = capsys.readouterr().out
        assert main(["fit", str(path), "--gpus", "cpu", "--rpc", f"{a},{b}", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
    assert "fewer devices: -dev RPC0: one device holds it" in out
    assert "the other device stays free" in out
    assert "(MiB; no margin kept on these devices)" in out
    assert "per GPU" not in out and "CUDA" not in out
    assert data["hints"][0]["reason"].startswith("one device holds it")


def test_an_rpc_server_of_unknown_backend_says_it_is_taken_as_a_cuda_gpu(tmp_path, capsys):
    """A server that does not answer, or is given with its memory only, was estimated as a
    CUDA GPU (its margin, the RTX 3090's speed) without saying so."""
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec())
    dead = _closed_port()
    assert main(["fit", str(path), "--gpus", "cpu", "--rpc", dead, "--json"]) == 0
    (note,) = [n for n in json.loads(capsys.readouterr().out)["notes"] if dead in n]
    assert "free memory is unknown" in note and "backend: estimated as a CUDA GPU" in note
    assert main(["fit", str(path), "--gpus", "rpc:127.0.0.1:50052=24GiB"]) == 0
    out = capsys.readouterr().out
    assert "RPC0 127.0.0.1:50052: estimated as a CUDA GPU: its backend is not given" in out
    assert main(["fit", str(path), "--gpus", "rpc:127.0.0.1:50052:cpu=24GiB"]) == 0
    assert "estimated as" not in capsys.readouterr().out

"""libnccl/libcudart through ctypes: the real wheel's libnccl, the real CUDA runtime where
one is installed, and the communicator and bench against tests/support/fake_nccl.py (a FAKE library
compiled here); the seed API; the `lltui nccl` and `nccl bench` commands."""

import ctypes
import importlib.metadata
import json
import os
from pathlib import Path

import pytest
from support.fake_nccl import FakeCounters, build_fake_library, compiler

from lltui.cli import main
from lltui.core.nccl.enums import NCCLDataType, decode_nccl_version, parse_version
from lltui.sources import nccl as src
from lltui.sources.nccl import info as nccl_info

# --- the real libnccl from the nvidia-nccl-cu12 wheel -----------------------------------


def _wheel_library() -> tuple[Path, str] | None:
    try:
        dist = importlib.metadata.distribution("nvidia-nccl-cu12")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == "libnccl.so.2":
            return Path(dist.locate_file(f)).resolve(), dist.version
    return None


WHEEL = _wheel_library()
needs_wheel = pytest.mark.skipif(
    WHEEL is None, reason="nvidia-nccl-cu12 is not installed (pip install nvidia-nccl-cu12)"
)


@needs_wheel
def test_real_wheel_libnccl_loads_and_reports_its_version_without_a_gpu():
    path, wheel_version = WHEEL
    lib = src.load_nccl(str(path))
    # The wheel's version is NCCL's (2.32.3); post releases add a suffix after it.
    assert wheel_version.startswith(lib.version)
    assert lib.version == decode_nccl_version(lib.version_code)
    assert lib.version_code >= 21800
    assert "ncclGetLastError" in lib.optional
    assert "invalid argument" in lib.error_string(4)


@needs_wheel
def test_the_search_finds_the_wheel(monkeypatch):
    path, _ = WHEEL
    monkeypatch.delenv("LLTUI_NCCL_LIB", raising=False)
    found = src.find_nccl_candidates()
    assert str(path) in {str(Path(c.path).resolve()) for c in found}
    probe = src.probe_nccl()
    assert probe.available and probe.version is not None
    assert src.is_nccl_available()
    assert src.get_nccl_version() == probe.version


@needs_wheel
def test_lltui_nccl_json_with_the_real_library(capsys, monkeypatch):
    path, _ = WHEEL
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    assert main(["nccl", "--json", "--lib", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"available", "version", "path", "env", "findings"} <= set(data)
    assert data["available"] is True
    assert data["version"] == src.load_nccl(str(path)).version
    assert data["path"] == str(path)
    assert data["env"]["NCCL_P2P_DISABLE"] == "1"
    assert data["env"]["NCCL_DEBUG"] is None
    codes = {f["code"] for f in data["findings"]}
    assert {"p2p-disabled", "debug-unset"} <= codes
    for f in data["findings"]:
        assert set(f) == {"severity", "code", "message", "hint"}


@needs_wheel
def test_a_lib_named_without_a_slash_is_the_file_here(capsys, monkeypatch, tmp_path):
    """`--lib mynccl.so` went to the loader as a name to search the system's folders for
    ("No such file"), and `--lib libnccl.so.2` in a build folder could load the system's."""
    path, _ = WHEEL
    (tmp_path / "mynccl.so").symlink_to(path)
    monkeypatch.chdir(tmp_path)
    assert main(["nccl", "--json", "--lib", "mynccl.so"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["available"] is True and data["path"] == str(tmp_path / "mynccl.so")


def test_lltui_nccl_without_a_library_is_exit_1(capsys, tmp_path):
    assert main(["nccl", "--lib", str(tmp_path / "libnccl.so.2")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("NCCL not available: cannot load")
    assert "nccl-missing" in out


def test_lltui_nccl_on_a_simulated_rig(capsys):
    assert main(["nccl", "--json", "--source", "sim:2x3090-nvlink"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulated"] is True
    assert data["env"]["NCCL_P2P_LEVEL"] == "NVL"
    assert "nvlink-all" in {f["code"] for f in data["findings"]}
    assert main(["nccl", "--source", "sim:no-such-rig"]) == 2


# --- finding libraries -----------------------------------------------------------------


def test_parse_ldconfig():
    text = (
        "1234 libs found in cache `/etc/ld.so.cache'\n"
        "\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2\n"
        "\tlibnccl.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so\n"
        "\tlibnccl.so.2 (libc6) => /usr/lib32/libnccl.so.2\n"
    )
    assert src.parse_ldconfig(text, "libnccl.so.2") == [
        "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
        "/usr/lib32/libnccl.so.2",
    ]
    assert src.parse_ldconfig("garbage\n=> \n", "libnccl.so.2") == []


def test_candidates_in_search_order_with_labels(tmp_path):
    def lib(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x7fELF")
        return path

    ld = lib(tmp_path / "ld" / "libnccl.so.2")
    cache = lib(tmp_path / "cache" / "libnccl.so.2")
    system = lib(tmp_path / "sys" / "libnccl.so.2")
    wheel = lib(tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    cu13 = lib(tmp_path / "site2" / "nvidia" / "cu13" / "lib" / "libnccl.so.2")
    torch = lib(tmp_path / "site" / "torch" / "lib" / "libnccl-ab12cd.so.2")
    os.symlink(ld, tmp_path / "sys" / "libnccl-link.so.2")
    found = src.find_nccl_candidates(
        environ={"LD_LIBRARY_PATH": f"{tmp_path / 'ld'}::{tmp_path / 'missing'}"},
        ldconfig_text=f"\tlibnccl.so.2 (libc6,x86-64) => {cache}\n"
        f"\tlibnccl.so.2 (libc6,x86-64) => {ld}\n",  # the same file twice: listed once
        site_dirs=[str(tmp_path / "site"), str(tmp_path / "site2")],
        system_dirs=[str(tmp_path / "sys")],
    )
    assert [(c.path, c.found_by) for c in found] == [
        (str(ld), "LD_LIBRARY_PATH"),
        (str(cache), "ldconfig"),
        (str(system), "system"),
        (str(wheel), "pip wheel"),
        (str(torch), "torch"),
        (str(cu13), "pip wheel"),
    ]


def test_cudart_candidates_include_the_runtime_wheels(tmp_path):
    so = tmp_path / "site" / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.12"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\x7fELF")
    found = src.find_cudart_candidates(
        environ={}, ldconfig_text="", site_dirs=[str(tmp_path / "site")], system_dirs=[]
    )
    assert [(c.path, c.found_by) for c in found if c.path.startswith(str(tmp_path))] == [
        (str(so), "pip wheel")
    ]


def test_a_file_that_is_not_a_library_is_one_line(tmp_path):
    bogus = tmp_path / "libnccl.so.2"
    bogus.write_text("not a shared object")
    with pytest.raises(src.NcclUnavailable) as exc:
        src.load_nccl(str(bogus))
    assert str(bogus) in str(exc.value) and "\n" not in str(exc.value)
    assert not src.is_nccl_available(str(bogus))
    assert src.get_nccl_version(str(bogus)) is None


def test_version_decoding():
    assert decode_nccl_version(23203) == "2.32.3"
    assert decode_nccl_version(21805) == "2.18.5"
    assert decode_nccl_version(2708) == "2.7.8"  # before 2.9: major*1000 + minor*100 + patch
    assert decode_nccl_version(2804) == "2.8.4"
    with pytest.raises(ValueError):
        decode_nccl_version(-1)
    assert parse_version("2.25.1+cuda12.2") == (2, 25, 1)
    assert parse_version("garbage") is None


# --- the real CUDA runtime, where one is installed -------------------------------------

REAL_CUDART = next(iter(src.find_cudart_candidates()), None)


@pytest.mark.skipif(REAL_CUDART is None, reason="no libcudart installed on this machine")
def test_real_cuda_runtime_loads_and_says_why_it_has_no_gpu():
    rt = src.load_cudart(REAL_CUDART.path)
    assert rt.runtime_version() >= 11000
    try:
        n = rt.device_count()
    except src.CudaError:
        n = 0
    if n > 0:
        pytest.skip("this machine has a GPU: the no-GPU message does not apply")
    with pytest.raises(src.NcclUnavailable) as exc:
        src.open_cuda(REAL_CUDART.path)
    msg = str(exc.value)
    assert msg.startswith("no usable GPU:") and "\n" not in msg


@pytest.mark.skipif(REAL_CUDART is None or WHEEL is None, reason="needs libcudart and the wheel")
def test_bench_command_without_a_gpu_is_one_line_exit_1(capsys):
    rt = src.load_cudart(REAL_CUDART.path)
    try:
        if rt.device_count() > 0:
            pytest.skip("this machine has a GPU")
    except src.CudaError:
        pass
    assert main(["nccl", "bench", "--lib", str(WHEEL[0]), "--cudart", REAL_CUDART.path]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert err.startswith("lltui: nccl bench: no usable GPU") and "\n" not in err


# --- the FAKE library: communicator and bench code paths -------------------------------


@pytest.fixture(scope="session")
def fake_path(tmp_path_factory) -> Path:
    if compiler() is None:
        pytest.skip("no C compiler to build the fake NCCL library")
    return build_fake_library(tmp_path_factory.mktemp("fake-nccl"))


@pytest.fixture
def fake(fake_path, monkeypatch):
    for var in (
        "FAKE_CUDA_DEVICES",
        "FAKE_CUDA_ERROR",
        "FAKE_CUDA_DRIVER",
        "FAKE_CUDA_MEM_MIB",
        "FAKE_CUDA_P2P",
        "FAKE_CUDA_HANG",
        "FAKE_NCCL_VERSION",
        "FAKE_NCCL_FAIL_INIT",
        "FAKE_NCCL_CORRUPT",
    ):
        monkeypatch.delenv(var, raising=False)
    counters = FakeCounters(fake_path)
    counters.clear_pending()
    before = counters.snapshot()
    yield fake_path, counters
    after = counters.snapshot()
    # Nothing leaks: every communicator, buffer, stream and event is released.
    assert after == before


def _libs(path: Path) -> tuple[src.NcclLibrary, src.CudaRuntime]:
    return src.load_nccl(str(path)), src.load_cudart(str(path))


def _upload(rt: src.CudaRuntime, device: int, values: list[float]) -> int:
    rt.set_device(device)
    host = (ctypes.c_float * len(values))(*values)
    ptr = rt.malloc(ctypes.sizeof(host))
    rt.copy_to_device(ptr, host, ctypes.sizeof(host))
    return ptr


def _download(rt: src.CudaRuntime, device: int, ptr: int, n: int) -> list[float]:
    rt.set_device(device)
    host = (ctypes.c_float * n)()
    rt.copy_to_host(host, ptr, ctypes.sizeof(host))
    return list(host)


def _free(rt: src.CudaRuntime, pairs: list[tuple[int, int]]) -> None:
    for device, ptr in pairs:
        rt.set_device(device)
        rt.free(ptr)


def test_fake_version_goes_through_ctypes(fake, monkeypatch):
    path, _ = fake
    monkeypatch.setenv("FAKE_NCCL_VERSION", "2708")
    assert src.load_nccl(str(path)).version == "2.7.8"
    monkeypatch.setenv("FAKE_NCCL_VERSION", "22203")
    assert src.get_nccl_version(str(path)) == "2.22.3"


def test_lib_path_takes_a_path_and_none_searches(fake, monkeypatch):
    """None (search, as before the API's argument check) and a pathlib.Path were refused:
    'lib_path: a string: libnccl's name or path, not None'."""
    path, _ = fake
    monkeypatch.setenv("FAKE_NCCL_VERSION", "22203")
    assert src.is_nccl_available(path) and src.get_nccl_version(path) == "2.22.3"
    assert src.NCCLCommunicator(lib_path=path).library.version == "2.22.3"
    monkeypatch.setenv("LLTUI_NCCL_LIB", str(path))  # what the search finds first
    assert src.is_nccl_available(None) and src.get_nccl_version(None) == "2.22.3"
    assert src.NCCLCommunicator(lib_path=None).library.path == str(path)


def test_collectives_compute_across_two_devices(fake):
    path, counters = fake
    lib, rt = _libs(path)
    n = 6
    a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    b = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]
    send = [_upload(rt, 0, a), _upload(rt, 1, b)]
    recv = [_upload(rt, 0, [0.0] * n), _upload(rt, 1, [0.0] * n)]
    owned = [(0, send[0]), (1, send[1]), (0, recv[0]), (1, recv[1])]
    ran = counters.collectives_run()
    try:
        with src.NCCLCommunicator(n_devs=2, library=lib) as comm:
            assert comm.count() == 2

            assert comm.all_reduce(send, recv, n) is src.NCCLResult.SUCCESS
            want = [x + y for x, y in zip(a, b, strict=True)]
            assert _download(rt, 0, recv[0], n) == want
            assert _download(rt, 1, recv[1], n) == want

            comm.all_reduce(send, recv, n, op=src.NCCLRedOp.MAX)
            assert _download(rt, 0, recv[0], n) == b

            comm.all_reduce(send, recv, n, dtype=NCCLDataType.FLOAT32, op=src.NCCLRedOp.AVG)
            assert _download(rt, 1, recv[1], n) == [(x + y) / 2 for x, y in zip(a, b, strict=True)]

            comm.all_reduce([0, 0], [0, 0], 0)  # zero elements: nothing to check or move

            # In place: the send buffers receive the sum.
            comm.all_reduce(send, send, n)
            assert _download(rt, 1, send[1], n) == want
        assert counters.collectives_run() - ran == 5
        assert not comm.initialized
    finally:
        _free(rt, owned)


def test_int32_and_streams_per_device(fake):
    path, _ = fake
    lib, rt = _libs(path)
    owned = []
    ptrs = []
    streams = []
    for d, vals in ((0, [5, -7, 9]), (1, [1, 2, -3])):
        rt.set_device(d)
        host = (ctypes.c_int32 * 3)(*vals)
        p = rt.malloc(12)
        rt.copy_to_device(p, host, 12)
        ptrs.append(p)
        owned.append((d, p))
        streams.append(rt.stream_create())
    try:
        with src.NCCLCommunicator(device_ids=[0, 1], library=lib) as comm:
            comm.all_reduce(ptrs, ptrs, 3, NCCLDataType.INT32, src.NCCLRedOp.MIN, streams)
        rt.set_device(1)
        rt.stream_synchronize(streams[1])
        out = (ctypes.c_int32 * 3)()
        rt.copy_to_host(out, ptrs[1], 12)
        assert list(out) == [1, -7, -3]
    finally:
        for d, s in enumerate(streams):
            rt.set_device(d)
            rt.stream_destroy(s)
        _free(rt, owned)


def test_nccl_errors_carry_nccls_own_words(fake, monkeypatch):
    path, _ = fake
    lib, rt = _libs(path)
    on_wrong_device = _upload(rt, 0, [1.0, 2.0])
    right = _upload(rt, 1, [1.0, 2.0])
    try:
        with src.NCCLCommunicator(n_devs=2, library=lib) as comm:
            # Rank 1's buffer lives on GPU 0: NCCL refuses it.
            with pytest.raises(src.NCCLError) as exc:
                comm.all_reduce([on_wrong_device, on_wrong_device], [on_wrong_device, right], 2)
            assert exc.value.result is src.NCCLResult.INVALID_ARGUMENT
            assert "ncclInvalidArgument" in str(exc.value)
            assert "rank 1 sendbuff is not 8 bytes on device 1" in str(exc.value)
            # A buffer too small for the count.
            with pytest.raises(src.NCCLError):
                comm.all_reduce([on_wrong_device, right], [on_wrong_device, right], 3)
            # 16-bit floats are beyond the fake: an error, not a crash.
            with pytest.raises(src.NCCLError):
                comm.all_reduce([on_wrong_device, right], [on_wrong_device, right], 2, 6)
            with pytest.raises(ValueError):
                comm.all_reduce(on_wrong_device, right, 2)  # one int for two devices
            with pytest.raises(ValueError):
                comm.all_reduce([on_wrong_device], [right], 2)
            with pytest.raises(ValueError):
                comm.all_reduce([on_wrong_device, right], [on_wrong_device, right], 2, stream=7)
    finally:
        _free(rt, [(0, on_wrong_device), (1, right)])

    monkeypatch.setenv("FAKE_NCCL_FAIL_INIT", "2")
    with pytest.raises(src.NCCLError) as exc:
        src.NCCLCommunicator(n_devs=2, library=lib).init()
    assert exc.value.result is src.NCCLResult.SYSTEM_ERROR
    assert "told to fail" in str(exc.value)
    monkeypatch.delenv("FAKE_NCCL_FAIL_INIT")
    with pytest.raises(src.NCCLError) as exc:
        src.NCCLCommunicator(device_ids=[0, 5], library=lib).init()
    assert exc.value.result is src.NCCLResult.UNHANDLED_CUDA
    with pytest.raises(ValueError):
        src.NCCLCommunicator(device_ids=[1, 1], library=lib)
    with pytest.raises(RuntimeError):
        src.NCCLCommunicator(n_devs=2, library=lib).all_reduce([1, 2], [1, 2], 1)


def test_single_device_communicator_takes_plain_ints(fake):
    path, _ = fake
    lib, rt = _libs(path)
    p = _upload(rt, 1, [3.0, 4.0])
    q = _upload(rt, 1, [0.0, 0.0])
    try:
        with src.NCCLCommunicator(n_devs=1, device_ids=[1], library=lib) as comm:
            comm.all_reduce(p, q, 2)
        assert _download(rt, 1, q, 2) == [3.0, 4.0]
    finally:
        _free(rt, [(1, p), (1, q)])


@pytest.mark.parametrize("n_gpus", [2, 4])
def test_bench_on_the_fake(fake, monkeypatch, n_gpus):
    path, _ = fake
    monkeypatch.setenv("FAKE_CUDA_DEVICES", str(n_gpus))
    lib, rt = _libs(path)
    seen = []
    result = src.run_allreduce_bench(
        nccl=lib, cudart=rt, max_bytes=64 * 1024, iters=3, warmup=1, progress=seen.append
    )
    assert result.devices == tuple(range(n_gpus))
    assert result.pci_bus_ids == tuple(f"0000:{0x10 + d:02X}:00.0" for d in range(n_gpus))
    assert [r.size for r in result.rows] == [8 * 2**k for k in range(14)]
    assert seen == list(result.rows)
    assert result.validated is True
    pairs = {f"GPU{a}-GPU{b}" for a in range(n_gpus) for b in range(a + 1, n_gpus)}
    assert set(result.p2p) == pairs
    factor = 2 * (n_gpus - 1) / n_gpus
    for r in result.rows:
        assert r.count * 4 == r.size and r.type == "float"
        assert r.time_us_out > 0 and r.time_us_in > 0
        assert r.algbw_out == pytest.approx(r.size / (r.time_us_out * 1e3))
        assert r.busbw_out == pytest.approx(r.algbw_out * factor)
        assert r.busbw_in == pytest.approx(r.algbw_in * factor)
    assert all(t is not None and t >= 0 for t in result.device_time_us)
    data = result.to_json()
    assert data["collective"] == "all_reduce" and data["nranks"] == n_gpus
    assert data["avg_busbw"] == pytest.approx(
        sum(v for r in result.rows for v in (r.busbw_out, r.busbw_in)) / (2 * len(result.rows))
    )


def test_bench_on_one_gpu_says_bus_bandwidth_needs_two(fake, monkeypatch):
    path, _ = fake
    lib, rt = _libs(path)
    result = src.run_allreduce_bench(
        nccl=lib, cudart=rt, devices=[1], max_bytes=1024, iters=2, warmup=0, factor=4
    )
    assert [r.size for r in result.rows] == [8, 32, 128, 512, 1024]
    assert all(r.busbw_out is None and r.algbw_out for r in result.rows)
    assert result.avg_busbw is None
    assert any("two or more GPUs" in n for n in result.notes)
    assert result.p2p == {}


def test_bench_catches_wrong_sums(fake, monkeypatch):
    path, _ = fake
    monkeypatch.setenv("FAKE_NCCL_CORRUPT", "1")
    lib, rt = _libs(path)
    result = src.run_allreduce_bench(nccl=lib, cudart=rt, max_bytes=64, iters=1, warmup=0)
    assert result.validated is False
    assert result.validation_error == "GPU 1 element 0: got 4, expected 3"
    assert any("NCCL_P2P_DISABLE=1" in n for n in result.notes)


def test_bench_turns_a_hang_into_an_error_and_cleans_up(fake, monkeypatch):
    path, _ = fake
    monkeypatch.setenv("FAKE_CUDA_HANG", "1")
    lib, rt = _libs(path)
    with pytest.raises(src.NCCLError) as exc:
        src.run_allreduce_bench(nccl=lib, cudart=rt, max_bytes=64, timeout_s=0.05)
    assert "did not finish" in str(exc.value)
    assert "NCCL_P2P_DISABLE=1" in str(exc.value)


def test_bench_fits_the_sweep_into_free_memory(fake, monkeypatch):
    path, _ = fake
    monkeypatch.setenv("FAKE_CUDA_MEM_MIB", "514")  # 2 MiB left after NCCL's share
    lib, rt = _libs(path)
    result = src.run_allreduce_bench(
        nccl=lib, cudart=rt, min_bytes=256 * 1024, max_bytes=16 * 1024 * 1024, iters=1, warmup=0
    )
    assert result.rows[-1].size == 1024 * 1024
    assert any("skipped" in n for n in result.notes)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"FAKE_CUDA_ERROR": "100", "FAKE_CUDA_DRIVER": "12040"}, "no CUDA-capable GPU"),
        ({"FAKE_CUDA_ERROR": "35", "FAKE_CUDA_DRIVER": "0"}, "no NVIDIA driver"),
        ({"FAKE_CUDA_ERROR": "35", "FAKE_CUDA_DRIVER": "11080"}, "supports CUDA 11.8"),
        ({"FAKE_CUDA_DEVICES": "0"}, "no GPU visible"),
    ],
)
def test_no_gpu_reasons(fake, monkeypatch, env, words):
    path, _ = fake
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(src.NcclUnavailable) as exc:
        src.open_cuda(str(path))
    assert words in str(exc.value)


def test_bench_command_json_on_the_fake(fake, capsys):
    path, _ = fake
    args = ["nccl", "bench", "--json", "--lib", str(path), "--cudart", str(path)]
    args += ["--max-size", "4KiB", "--iters", "2", "--warmup", "1", "--step", "4"]
    assert main(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["collective"] == "all_reduce" and data["nranks"] == 2
    assert [r["size"] for r in data["rows"]] == [8, 32, 128, 512, 2048, 4096]
    assert data["validated"] is True
    assert data["nccl_version"] == "2.18.5"
    assert data["p2p"] == {"GPU0-GPU1": True}


def test_bench_command_text_and_exit_codes(fake, capsys, monkeypatch):
    path, _ = fake
    base = ["nccl", "bench", "--lib", str(path), "--cudart", str(path), "--iters", "1"]
    assert main([*base, "--max-size", "64", "--gpus", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 GPU (1)" in out and "needs two or more GPUs" in out
    assert "results     correct" in out

    monkeypatch.setenv("FAKE_NCCL_CORRUPT", "1")
    assert main([*base, "--max-size", "64"]) == 1
    assert "results     WRONG: GPU 1 element 0" in capsys.readouterr().out
    monkeypatch.delenv("FAKE_NCCL_CORRUPT")

    for bad in (["--gpus", "0,x"], ["--max-size", "lots"], ["--min-size", "1M", "--max-size", "8"]):
        assert main([*base, *bad]) == 2
        assert "\n" not in capsys.readouterr().err.strip()
    assert main([*base, "--gpus", "0,7"]) == 1
    assert "no GPU 7" in capsys.readouterr().err


# --- the seed API ----------------------------------------------------------------------

SEED_ENV = ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG")


def test_setup_nccl_environment(monkeypatch):
    for k in SEED_ENV:
        monkeypatch.delenv(k, raising=False)
    applied = src.setup_nccl_environment(disable_p2p=True, disable_ib=True, socket_ifname="lo")
    assert applied == {"NCCL_P2P_DISABLE": "1", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "lo"}
    assert os.environ["NCCL_P2P_DISABLE"] == "1" and os.environ["NCCL_SOCKET_IFNAME"] == "lo"
    src.setup_nccl_environment(disable_p2p=False, debug="info", socket_ifname=None)
    assert os.environ["NCCL_P2P_DISABLE"] == "0" and os.environ["NCCL_DEBUG"] == "INFO"


def test_setup_skips_an_interface_this_host_lacks(monkeypatch):
    for k in SEED_ENV:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(nccl_info, "local_interfaces", lambda: ["lo", "ens5"])
    with pytest.warns(RuntimeWarning, match="no such interface"):
        applied = src.setup_nccl_environment()  # the seed default, eth0
    assert "NCCL_SOCKET_IFNAME" not in applied and "NCCL_SOCKET_IFNAME" not in os.environ
    assert applied["NCCL_IB_DISABLE"] == "1"


def test_kaggle_config_and_info(monkeypatch, capsys):
    assert src.kaggle_nccl_config() == {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "WARN",
    }
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    monkeypatch.delenv("NCCL_IB_DISABLE", raising=False)
    info = src.get_nccl_info()
    assert {"available", "version", "lib_path", "nccl_p2p_disable", "nccl_ib_disable"} <= set(info)
    assert info["nccl_p2p_disable"] == "1" and info["nccl_ib_disable"] == "0"
    assert info["env"]["NCCL_P2P_DISABLE"] == "1"
    src.print_nccl_info()
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["NCCL Info", "---------"]
    assert f"Available : {info['available']}" in out
    assert "P2P       : disabled" in out and "IB        : enabled" in out


def test_nccl_help_does_not_need_the_library(capsys):
    with pytest.raises(SystemExit):
        main(["nccl", "--help"])
    assert "bench" in capsys.readouterr().out


def test_a_library_cut_short_is_one_line_not_a_bus_error(tmp_path):
    """dlopen maps a truncated library's segments past the end of its file; the first touch
    killed lltui with SIGBUS (exit 135, nothing printed)."""
    import _ctypes
    import subprocess
    import sys

    from lltui.sources.nccl.finder import check_whole_elf

    whole = Path(_ctypes.__file__).read_bytes()
    cut = tmp_path / "libnccl.so.2"
    cut.write_bytes(whole[:4000])
    with pytest.raises(OSError, match="cut short"):
        check_whole_elf(str(cut))
    check_whole_elf(_ctypes.__file__)  # a whole one passes
    done = subprocess.run(
        [sys.executable, "-m", "lltui", "nccl", "--lib", str(cut)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert "cut short" in lines[0] and "Traceback" not in done.stderr


def test_findings_are_wrapped_to_the_terminal(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    main(["nccl"])
    out = capsys.readouterr().out.splitlines()
    findings = out[out.index("findings") + 1 :]
    assert findings and all(len(line) <= 80 for line in findings), findings


def test_a_named_library_that_does_not_load_names_its_path_once(capsys, tmp_path):
    """`nccl bench --lib /nonexistent` said 'cannot load /nonexistent: /nonexistent: cannot
    open shared object file': dlopen's message starts with the path, and lltui put it first
    too. The same for --cudart."""
    from lltui.sources.nccl.cudart import load_cudart

    missing = str(tmp_path / "libnccl.so.2")
    for load in (src.load_nccl, load_cudart):
        with pytest.raises(src.NcclUnavailable) as err:
            load(missing)
        assert str(err.value) == f"cannot load {missing}: cannot open shared object file: " + (
            "No such file or directory"
        )
    assert main(["nccl", "bench", "--lib", missing]) == 1
    assert capsys.readouterr().err.count(missing) == 1

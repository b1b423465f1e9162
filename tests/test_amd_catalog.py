"""AMD GPUs in the one catalog: Instinct MI50 to MI355X, Radeon RX 6000 to 9000, Radeon PRO,
APUs with unified memory; named as AMD's tools name them or short, and planned for by fit
as the devices llama.cpp's ROCm build makes of them (``ROCm0``, ``ROCm_Host``)."""

from __future__ import annotations

import pytest

from lltui.core.hardware.gpus import all_gpus, find_gpu, short_gpu_name
from lltui.core.memory.devices import host_buffer, parse_gpus_spec

AMD = [g for g in all_gpus() if g.vendor == "amd"]


def test_every_amd_row_has_its_isa_and_its_sources() -> None:
    assert len(AMD) >= 35
    for g in AMD:
        assert g.gfx.startswith("gfx") and g.cc == (0, 0), g.name
        assert g.source and g.segment in {"Instinct", "Radeon", "Radeon PRO", "APU"}, g.name
        assert g.mib > 0 and g.bandwidth_gbs > 0 and g.fp16_tflops > 0, g.name
        assert g.unified == (g.segment == "APU" or g.name.endswith("MI300A")), g.name
    nvidia = [g for g in all_gpus() if g.vendor == "nvidia"]
    assert nvidia and all(not g.gfx for g in nvidia)


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("7900 XTX", "AMD Radeon RX 7900 XTX"),
        ("7900 XT", "AMD Radeon RX 7900 XT"),
        ("7900 GRE", "AMD Radeon RX 7900 GRE"),
        ("9070 XT", "AMD Radeon RX 9070 XT"),
        ("MI100", "AMD Instinct MI100"),
        ("mi50", "AMD Instinct MI50"),
        ("MI355X", "AMD Instinct MI355X"),
        ("Strix Halo", "AMD Radeon 8060S Graphics"),
        ("Ryzen AI Max+ 395", "AMD Radeon 8060S Graphics"),
        ("R9700", "AMD Radeon AI PRO R9700"),
        ("W7900", "AMD Radeon PRO W7900"),
        ("780M", "AMD Radeon 780M Graphics"),
        # as amd-smi (market_name), rocm-smi (Card Series) and rocminfo print them
        ("AMD Instinct MI300X", "AMD Instinct MI300X"),
        ("MI300X-O", "AMD Instinct MI300X"),
        ("AMD Instinct MI250X/MI250", "AMD Instinct MI250X"),
        ("Radeon RX 7900 XT", "AMD Radeon RX 7900 XT"),
        ("AMD Radeon AI PRO R9700", "AMD Radeon AI PRO R9700"),
    ],
)
def test_amd_names_resolve(name: str, want: str) -> None:
    hit = find_gpu(name)
    assert hit is not None and hit.name == want


def test_the_memory_a_gpu_reports_picks_its_variant() -> None:
    assert find_gpu("AMD Instinct MI50", 32752).name == "AMD Instinct MI50 32GB"  # type: ignore[union-attr]
    assert find_gpu("AMD Instinct MI50", 16368).name == "AMD Instinct MI50"  # type: ignore[union-attr]


def test_amd_brand_words_leave_nvidia_names_alone() -> None:
    assert find_gpu("RTX 4090").name == "NVIDIA GeForce RTX 4090"  # type: ignore[union-attr]
    assert find_gpu("3090").name == "NVIDIA GeForce RTX 3090"  # type: ignore[union-attr]
    assert short_gpu_name("AMD Instinct MI300X") == "Instinct MI300X"


def test_gpus_spec_names_amd_devices_as_the_rocm_build_does() -> None:
    spec = parse_gpus_spec("2x7900 XTX,rpc:10.0.0.2:50052")
    names = [d.name for d in spec.devices]
    assert names == ["RPC0[10.0.0.2:50052]", "ROCm0", "ROCm1"]
    assert [d.total_bytes for d in spec.devices[1:]] == [24560 * 2**20] * 2
    assert host_buffer(spec.devices, 1) == "ROCm_Host" and host_buffer(spec.devices, 0) is None
    # the AMD GPUs after the NVIDIA ones, as ggml loads its backends (cuda, then hip) and
    # llama.cpp uses them without -dev: the layers of a 4090,MI100,24GiB split had been
    # planned on the MI100 second
    mixed = parse_gpus_spec("RTX 4090,MI100,24GiB")
    assert [d.name for d in mixed.devices] == ["CUDA0", "CUDA1", "ROCm0"]
    assert [d.description for d in mixed.devices][1:] == ["", "AMD Instinct MI100"]


@pytest.mark.parametrize(
    ("gpus", "words"),
    [("2x7900 XTX", "ROCm's HIP build shares the CUDA backend's"), ("RTX 4090,7900 XTX", "CUDA's")],
)
def test_the_compute_buffer_note_names_the_backend_planned(tmp_path, gpus, words) -> None:
    """fit on two RX 7900 XTX said "CUDA's allocation rules are planned": ROCm's rules are
    the CUDA backend's, which HIP shares, and the note now says so."""
    from support import gguf_factory as gf

    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.fit.estimate import FitOptions, estimate
    from lltui.core.fit.report import result_to_text
    from lltui.core.gguf.reader import read_gguf

    path = tmp_path / "llama.gguf"
    gf.write_model(path, gf.llama_spec(), "F16")
    devices = parse_gpus_spec(gpus).devices
    res = estimate(read_gguf(path), parse_llama_args(["-c", "1024"]), devices, FitOptions(False))
    assert res.compute_note.startswith(words), res.compute_note
    assert f"compute buffers: approximate ({res.compute_note})" in result_to_text(res)


def test_unified_apus_take_their_memory_from_the_host() -> None:
    halo = find_gpu("Strix Halo")
    assert halo is not None and halo.unified and halo.mib == 128 * 1024
    assert halo.memory == "GDDR" and find_gpu("MI100").memory == "HBM"  # type: ignore[union-attr]

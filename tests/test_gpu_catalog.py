"""The one GPU catalog: read from its file, looked up by NVML's names and short ones, and the
only place the simulated rigs take their GPUs from."""

from __future__ import annotations

import dataclasses

import pytest

from lltui.core.hardware.gpus import GpuSpec, all_gpus, find_gpu, gpu
from lltui.sources.gpu.sim import PROFILES
from lltui.sources.gpu.sim.profile import SimGpu


def test_every_row_reads_with_its_types():
    rows = all_gpus()
    assert len(rows) > 60
    for g in rows:
        assert isinstance(g, GpuSpec) and g.name and len(g.cc) == 2
        assert all(isinstance(a, str) and a == a.lower() for a in g.aliases)


def test_every_simulated_gpu_is_a_catalog_row():
    for profile in PROFILES.values():
        for g in profile.gpus:
            assert isinstance(g, SimGpu)
            assert g.spec is gpu(g.name), (profile.name, g.name)
            # what the simulator draws with is what the catalog says
            assert g.memory_mib == g.spec.mib and g.power_limit_w == g.spec.tdp_w


def test_a_simulated_gpu_needs_power_and_clocks_from_the_catalog():
    bare = next(g for g in all_gpus() if g.tdp_w is None)
    with pytest.raises(ValueError, match="catalog has no tdp_w"):
        SimGpu.of(bare.name)
    with pytest.raises(KeyError):
        SimGpu.of("NVIDIA GeForce RTX 9999")


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
        ("4090", "NVIDIA GeForce RTX 4090"),
        ("a100-80g", "NVIDIA A100-SXM4-80GB"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
        ("Tesla V100-SXM3-32GB", "Tesla V100-SXM3-32GB"),
    ],
)
def test_names_resolve(name, want):
    hit = find_gpu(name)
    assert hit is not None and hit.name == want


def test_gpu_wants_the_exact_name():
    with pytest.raises(KeyError):
        gpu("4090")  # code names catalog rows by their NVML name
    assert dataclasses.is_dataclass(gpu("Tesla T4"))

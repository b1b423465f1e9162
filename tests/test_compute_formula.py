"""The compute formula (used where no graph is modelled) against the planned graph, which
tests/test_fit_compute_real.py holds to the real llama-server byte for byte: where the
formula puts each part of the compute (devices or host) must follow llama.cpp."""

from __future__ import annotations

import pytest
from support import gguf_factory as gf

import lltui.core.memory.allocate as allocate
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory import compute as compute_mod
from lltui.core.memory.compute_graph import ComputeLayout, Planned, planned_compute_buffers
from lltui.core.memory.devices import rpc_device


def _both(monkeypatch, path, argv, n_dev):
    """(planned, formula) compute bytes per buffer for one estimate."""
    seen: dict[str, dict[str, int]] = {}
    real = compute_mod.compute_buffers

    def spy(layout: ComputeLayout):
        planned = planned_compute_buffers(layout)
        assert isinstance(planned, Planned)
        seen["planned"] = dict(planned.sizes)
        seen["formula"] = compute_mod.formula_compute_buffers(layout)
        return real(layout)

    monkeypatch.setattr(allocate, "compute_buffers", spy)
    devs = [rpc_device(f"127.0.0.1:{50000 + i}", None, i, backend="cpu") for i in range(n_dev)]
    rpc = ["--rpc", ",".join(d.endpoint or "" for d in devs)] if devs else []
    estimate(read_gguf(path), parse_llama_args([*rpc, *argv]), devs, FitOptions(search=False))
    return seen["planned"], seen["formula"]


@pytest.fixture(scope="module")
def llama_8b_shape(tmp_path_factory):
    path = tmp_path_factory.mktemp("formula") / "l8.gguf"
    return gf.write_sparse(path, gf.llama_8b_spec(n_layer=4, n_vocab=32000), "Q8_0")


@pytest.mark.parametrize("fa", ["on", "off"])
def test_with_the_kv_cache_on_the_host_the_attention_scores_are_the_hosts(
    monkeypatch, llama_8b_shape, fa
):
    """-nkvo without flash attention: llama.cpp pins the attention between the KV store
    and its output to the CPU, so the KQ scores (n_head x n_kv x n_ubatch floats) are in
    the host's compute buffer, not the devices'."""
    argv = ["-c", "4096", "-np", "1", "-ts", "1,1", "-fa", fa, "-nkvo"]
    planned, formula = _both(monkeypatch, llama_8b_shape, argv, 2)
    scores = 32 * 4096 * 512 * 4
    for name, size in planned.items():
        assert formula[name] == pytest.approx(size, rel=0.3), name
    if fa == "off":
        assert planned["CPU"] > scores and formula["CPU"] > scores
        assert all(v < scores for k, v in formula.items() if k != "CPU")


def test_the_host_holds_the_embedding_paths_when_every_layer_is_offloaded(
    monkeypatch, llama_8b_shape
):
    """The CPU's buffer with every layer on devices: the token rows and the input and
    mixed-batch embedding paths (four n_embd x n_ubatch F32 tensors), plus the inputs."""
    argv = ["-c", "4096", "-np", "1", "-ts", "1,1", "-nkvo", "-fa", "on"]
    planned, formula = _both(monkeypatch, llama_8b_shape, argv, 2)
    act = 4096 * 512 * 4
    assert 4 * act < planned["CPU"] < 5 * act
    assert formula["CPU"] == pytest.approx(planned["CPU"], rel=0.02)

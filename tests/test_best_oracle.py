"""fit --best against llama.cpp's own --fit: on the same devices, whenever llama-fit-params
finds settings that fit, the search finds a command line that fits at least as much context.

The devices are loopback ggml-rpc-server processes. Each reports the host's memory; a large
``--fit-target`` leaves llama-fit-params a few GiB per device, and lltui is given exactly that
much per device (no margin of its own: ``rpc:HOST:PORT:cpu=SIZE``), so both work to the same
budget. The models are sparse files of real size: neither tool reads tensor data.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from support import gguf_factory as gf
from support.llama_fixture import llama_bins, rpc_servers

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.best import best_configs
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.units import GIB

__all__ = ["llama_bins"]  # a session fixture used by name

pytestmark = pytest.mark.slow

BUDGET_MIB = 6144  # what each device offers both tools
FREE_RE = re.compile(r"using device (RPC\d+) \(([^)]+)\).* - (\d+) MiB free")

MODELS = {
    # dense, ~15 GiB in F16: layers must leave the devices or the context shrink
    "dense": (
        gf.llama_8b_spec(n_vocab=32000, n_ctx_train=131072),
        "F16",
    ),
    # MoE, ~16 GiB in Q8_0: experts can leave the devices first
    "moe": (
        gf.qwen3moe_30b_a3b_spec(n_vocab=32000, n_ctx_train=40960),
        "Q8_0",
    ),
}


@pytest.fixture(scope="module")
def endpoints(llama_bins, tmp_path_factory):
    with rpc_servers(llama_bins, 2, tmp_path_factory.mktemp("rpc-logs")) as servers:
        yield [f"127.0.0.1:{s.port}" for s in servers]


def fit_params(bins, model, endpoints: list[str], target_mib: list[int]) -> tuple[str, str]:
    exe = bins.binaries["llama-fit-params"]
    argv = [str(exe), "-m", str(model), "--rpc", ",".join(endpoints), "-np", "1", "-v"]
    argv += ["--fit", "on", "--fit-target", ",".join(map(str, target_mib))]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    return proc.stdout if proc.returncode == 0 else "", proc.stderr


def device_free_mib(bins, model, endpoints: list[str]) -> list[int]:
    """What each RPC device reports free, as llama-fit-params sees it."""
    _out, err = fit_params(bins, model, endpoints, [0, 0])
    free = {m.group(2): int(m.group(3)) for m in FREE_RE.finditer(err)}
    assert set(free) == set(endpoints), err[-2000:]
    return [free[ep] for ep in endpoints]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_best_fits_at_least_the_context_llama_fit_finds(llama_bins, endpoints, tmp_path, name):
    spec, wtype = MODELS[name]
    model_path = gf.write_sparse(tmp_path / f"{name}.gguf", spec, wtype)
    free = device_free_mib(llama_bins, model_path, endpoints)
    if min(free) <= BUDGET_MIB:
        pytest.skip(f"the RPC devices report {min(free)} MiB free: too little for this test")
    theirs_out, _err = fit_params(llama_bins, model_path, endpoints, [f - BUDGET_MIB for f in free])
    gpus = ",".join(f"rpc:{ep}:cpu={BUDGET_MIB}MiB" for ep in endpoints)
    devices = parse_gpus_spec(gpus).devices
    model = read_gguf(model_path)
    opts = FitOptions(host_free_bytes=256 * GIB)  # llama-fit-params counts devices only
    ours = best_configs(model, parse_llama_args(["-np", "1"]), devices, opts, "context")
    if not theirs_out.strip():
        return  # llama.cpp found nothing: the search may still find something (it tries more)
    fitted = theirs_out.split()
    their_ctx = int(fitted[fitted.index("-c") + 1]) if "-c" in fitted else spec.n_ctx_train
    assert ours, f"llama-fit-params fitted {theirs_out.strip()!r}; the search found nothing"
    # like for like: llama-fit-params keeps the K/V type, so the search's f16 lines compete
    same_kv = [c for c in ours if "-ctk" not in c.flags and "-ctv" not in c.flags]
    assert same_kv, [c.flags for c in ours]
    best = max(same_kv, key=lambda c: c.max_ctx)
    assert best.max_ctx >= their_ctx, (best.flags, theirs_out)
    # what the search proposes fits by the estimator's own account
    again = estimate(model, parse_llama_args(["-np", "1", *best.flags]), devices, opts)
    assert again.fits

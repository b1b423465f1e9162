"""AMD topology and collectives: amd-smi topology (text and both JSON shapes) and rocm-smi
--showtopo as the one matrix, ROCm's advice, RCCL found and named, its variables known."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from lltui.core.monitor.models import GpuStatic
from lltui.core.nccl.findings import NcclFacts, nccl_findings
from lltui.core.nccl.variables import explain_variable, is_known_variable, nccl_environment
from lltui.core.topo.advice import advise, link_bandwidth
from lltui.core.topo.amd import parse_amd_topology, render_amd_topology
from lltui.core.topo.parse import parse_topology
from lltui.core.topo.report import topology_to_json
from lltui.sources.gpu.amd.cli import AmdCliSource
from lltui.sources.gpu.amd.topo import read_amd_topology
from lltui.sources.gpu.smi import CommandResult
from lltui.sources.nccl.errors import NcclUnavailable
from lltui.sources.nccl.finder import find_nccl_candidates, library_kind
from lltui.sources.nccl.library import load_nccl

FIX = Path(__file__).parent / "fixtures" / "amd"


def text(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


def test_amd_smi_topology_text_of_eight_mi300x() -> None:
    topo = parse_topology(text("amd-smi/topology-8xmi300x-rocm6.1.0.txt"))  # detected as AMD
    assert topo.gpus == tuple(f"GPU{i}" for i in range(8)) and topo.warnings == ()
    assert set(topo.link_map().values()) == {"XGMI"} and len(topo.links) == 28


def test_amd_smi_topology_json_before_and_after_6_1_1() -> None:
    old = parse_amd_topology(text("amd-smi/topology-2gpu-pcie-rocm6.1.0.json"))
    assert old.link_map() == {"GPU0-GPU1": "PHB"}  # PCIE, 2 hops, weight 40: one socket
    new = parse_amd_topology(text("amd-smi/topology-a-t-rocm6.1.1.json"))
    assert new.link_map() == {"GPU0-GPU1": "PHB"} and new.warnings == ()


def test_rocm_smi_showtopo_cut_in_its_numa_section() -> None:
    topo = parse_topology(text("rocm-smi/showtopo-4gpu-pcie-cut.txt"))
    assert len(topo.links) == 6 and set(topo.link_map().values()) == {"SYS"}  # 3 hops, weight 52
    assert topo.warnings == ("the text ends where the NUMA section begins",)


def test_rocm_smi_numa_nodes_become_numa_affinity() -> None:
    numa = "\n".join(
        f"GPU[{i}]\t\t: (Topology) Numa Node: {i // 2}\n"
        f"GPU[{i}]\t\t: (Topology) Numa Affinity: {i // 2}"
        for i in range(4)
    )
    topo = parse_topology(text("rocm-smi/showtopo-4gpu-pcie-cut.txt") + numa)
    assert topo.affinity("numa_affinity") == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert any(a.code == "numa-pinning" for a in advise(topo))


@pytest.mark.parametrize(
    "bad", ["WEIGHT TABLE:\n", "[]", '[{"gpu": 0, "links": "N/A"}', '{"link_type": 1}']
)
def test_amd_text_without_a_matrix_is_a_warning_not_a_crash(bad: str) -> None:
    topo = parse_amd_topology(bad)
    assert topo.gpus == () or topo.links == ()
    assert topo.warnings


def test_render_and_parse_agree() -> None:
    links = {(0, 1): "XGMI", (0, 2): "PHB", (1, 2): "SYS"}
    rendered = render_amd_topology(
        3, ["00000000:0C:00.0", "00000000:22:00.0", "00000000:38:00.0"], links
    )
    assert parse_topology(rendered).link_map() == {
        "GPU0-GPU1": "XGMI",
        "GPU0-GPU2": "PHB",
        "GPU1-GPU2": "SYS",
    }


def _mi300x(i: int, partition: str = "SPX") -> GpuStatic:
    return GpuStatic(i, f"u{i}", "AMD Instinct MI300X", "", None, vendor="amd", gfx_target="gfx942",
                     compute_partition=partition)  # fmt: skip


def test_rocm_advice_on_an_xgmi_hive() -> None:
    topo = parse_topology(text("amd-smi/topology-8xmi300x-rocm6.1.0.txt"))
    advice = {a.code: a for a in advise(topo, [_mi300x(i, "CPX") for i in range(8)])}
    assert "XGMI" in advice["split-mode"].message
    # llama.cpp's HIP build leaves RCCL off (GGML_HIP_RCCL, docs/multi-gpu.md); it was said
    # to use it
    assert "-DGGML_HIP_RCCL=ON, off by default" in advice["split-mode"].message
    assert "HIP_VISIBLE_DEVICES" in (advice["hip-device-order"].hint or "")
    assert "CPX" in advice["partitions"].message
    assert "64 GB/s" in advice["allreduce-cost"].message  # one XGMI link of an MI300X
    assert "cuda-device-order" not in advice and "p2p" not in advice  # no CUDA words here
    bw = link_bandwidth("XGMI", _mi300x(0), _mi300x(1))
    assert bw is not None and bw.gbs == 64.0


def test_pcie_amd_rigs_are_told_about_fine_grained_pcie() -> None:
    topo = parse_topology(text("rocm-smi/showtopo-4gpu-pcie-cut.txt"))
    p2p = next(a for a in advise(topo) if a.code == "p2p")
    assert "HSA_FORCE_FINE_GRAIN_PCIE=1" in (p2p.hint or "")
    assert all(a.code != "p2p" for a in advise(topo, env={"HSA_FORCE_FINE_GRAIN_PCIE": "1"}))


def test_a_mixed_rig_is_told_which_build_sees_which_gpus() -> None:
    from lltui.sources.gpu.sim import PROFILES, SimSource

    profile = PROFILES["2x4090-2x7900xtx"]
    gpus = SimSource("2x4090-2x7900xtx").open().gpus
    advice = {a.code: a for a in advise(parse_topology(profile.topo_text), gpus)}
    assert "GPU2-3 are AMD" in advice["mixed-vendors"].message.replace("GPU2, GPU3", "GPU2-3")


def test_a_mixed_rig_s_cuda_advice_counts_its_nvidia_gpus_only() -> None:
    """2x 4090 beside 2x W7900 (48 GiB): the main GPU was a W7900 ("-mg 2", an index no
    CUDA build has) and the two alike 4090s were "mixed GPU models" CUDA may renumber."""
    from dataclasses import replace

    from lltui.sources.gpu.sim import PROFILES, SimSource

    profile = PROFILES["2x4090-2x7900xtx"]
    gpus = [
        replace(g, name="AMD Radeon PRO W7900", memory_total=48 * 2**30) if g.vendor else g
        for g in SimSource("2x4090-2x7900xtx").open().gpus
    ]
    advice = {a.code: a for a in advise(parse_topology(profile.topo_text), gpus)}
    assert "W7900" not in advice["main-gpu"].message and "-mg 2" not in advice["main-gpu"].message
    assert "cuda-device-order" not in advice and "mixed-vendors" in advice


def test_topology_json_contract_holds_for_amd() -> None:
    out = topology_to_json(parse_topology(text("amd-smi/topology-8xmi300x-rocm6.1.0.txt")))
    assert out["links"]["GPU0-GPU7"] == "XGMI" and out["gpus"][0] == "GPU0"


def test_live_amd_topology_over_the_tools() -> None:
    static = json.dumps(
        [{"gpu": i, "asic": {"market_name": "AMD Instinct MI300X"}} for i in range(2)]
    )

    def run(argv: list[str], timeout: float) -> CommandResult:
        if argv[-2:] == ["static", "--json"]:
            return CommandResult(0, static, "")
        if argv[-2:] == ["topology", "--json"]:
            return CommandResult(0, text("amd-smi/topology-2gpu-pcie-rocm6.1.0.json"), "")
        return CommandResult(1, "", "no")

    src = AmdCliSource(tool="amd-smi", runner=run, which=lambda _: "/x")  # type: ignore[arg-type]
    topo, gpus, where = read_amd_topology(src)
    assert topo.link_map() == {"GPU0-GPU1": "PHB"} and topo.source == "amd-smi"
    assert [g.name for g in gpus] == ["AMD Instinct MI300X"] * 2 and where == "amd-smi here"


# --- RCCL ---------------------------------------------------------------------------------------


def test_rccl_is_found_beside_nccl_and_named(tmp_path: Path) -> None:
    rocm = tmp_path / "opt-rocm-lib"
    rocm.mkdir()
    (rocm / "librccl.so.1").write_bytes(b"")
    found = find_nccl_candidates(
        environ={"LD_LIBRARY_PATH": str(rocm)}, ldconfig_text="", site_dirs=[], system_dirs=()
    )
    assert [os.path.basename(c.path) for c in found] == ["librccl.so.1"]
    assert library_kind(found[0].path) == "rccl" and library_kind("/usr/lib/libnccl.so.2") == "nccl"


def test_on_a_rig_of_amd_gpus_alone_rccl_is_tried_before_nccl(tmp_path, monkeypatch) -> None:
    """`lltui nccl` on an MI300X rig loaded the libnccl.so.2 a CUDA wheel brought along,
    before ROCm's RCCL; on an NVIDIA rig (or one without GPUs) libnccl stays first."""
    from support.fake_amdsmi import FakeAmdSmi, mi300x

    from lltui.services.nccl import nccl_report

    for so in ("libnccl.so.2", "librccl.so.1"):
        (tmp_path / so).write_bytes(b"")  # found, not loadable
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVIDIA binding, no driver
    monkeypatch.setattr("shutil.which", lambda _: None)  # no amd-smi, no rocm-smi

    def order() -> list[str]:
        found = [c.path for c in nccl_report("auto").info.candidates]
        return [os.path.basename(p) for p in found if p.startswith(str(tmp_path))]

    assert order() == ["libnccl.so.2", "librccl.so.1"]  # no GPU here
    FakeAmdSmi([mi300x(0), mi300x(1)]).install(monkeypatch)
    assert order() == ["librccl.so.1", "libnccl.so.2"]

    def cannot_load(path: str) -> None:
        raise OSError(f"{path}: cannot open shared object file")

    with pytest.raises(NcclUnavailable, match=r"^ROCm's librccl.so.1 not found.*ships with ROCm"):
        load_nccl(rccl_first=True, loader=cannot_load)


def test_nccl_bench_on_amd_gpus_alone_says_it_does_not_run_there(monkeypatch, capsys) -> None:
    """`lltui nccl bench` on an MI300X rig said to pip install NVIDIA's CUDA runtime: the
    bench drives GPUs through it and cannot drive AMD's at all."""
    from support.fake_amdsmi import FakeAmdSmi, mi300x

    from lltui import sources
    from lltui.cli import main

    def no_cudart(**_: object) -> None:
        raise NcclUnavailable("the CUDA runtime (libcudart) was not found; pip install it")

    monkeypatch.setattr(sources.nccl, "run_allreduce_bench", no_cudart)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr("shutil.which", lambda _: None)
    assert main(["nccl", "bench"]) == 1
    assert "pip install" in capsys.readouterr().err  # no GPU here: the library is the miss
    FakeAmdSmi([mi300x(0), mi300x(1)]).install(monkeypatch)
    assert main(["nccl", "bench"]) == 1
    err = capsys.readouterr().err
    assert "does not run on AMD GPUs" in err and "pip install" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_rccl_variables_are_known_and_explained() -> None:
    assert is_known_variable("RCCL_MSCCL_ENABLE") and is_known_variable("HSA_FORCE_FINE_GRAIN_PCIE")
    assert "MSCCL off" in explain_variable("RCCL_MSCCL_ENABLE", "0")
    env = nccl_environment({"RCCL_MSCCLPP_ENABLE": "1", "HSA_NO_SCRATCH_RECLAIM": "1", "HOME": "/"})
    assert (
        env["RCCL_MSCCLPP_ENABLE"] == "1"
        and env["HSA_NO_SCRATCH_RECLAIM"] == "1"
        and "HOME" not in env
    )
    findings = nccl_findings(
        NcclFacts(available=True, version="2.22.3", env={"RCCL_MSCL_ENABLE": "1"})
    )
    typo = next(f for f in findings if f.code == "unknown-variable")
    assert "RCCL_MSCCL_ENABLE" in typo.message


def test_an_xgmi_hive_is_one_finding_not_pcie_advice() -> None:
    links = {f"GPU{a}-GPU{b}": "XGMI" for a in range(8) for b in range(a + 1, 8)}
    codes = [
        f.code
        for f in nccl_findings(NcclFacts(available=True, version="2.22.3", env={}, links=links))
    ]
    assert "xgmi-all" in codes and "pcie-only" not in codes


@pytest.mark.parametrize(
    ("source", "tool"),
    [("amd:127.0.0.1:1", "amd-smi topology"), ("smi:127.0.0.1:1", "nvidia-smi topo -m")],
)
def test_a_rig_that_cannot_be_read_is_told_its_own_tool_to_save(capsys, source, tool):
    """An AMD host that could not be read was told to save `nvidia-smi topo -m` (which it
    has not) and pass it with --file; --file reads amd-smi topology too."""
    from lltui.cli import main

    assert main(["topo", "--source", source]) == 1
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"; save `{tool}` on the rig and pass it with --file"), err

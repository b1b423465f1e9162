"""Advice from a topology and GPU models: split mode, main GPU, CUDA numbering, P2P, NUMA
pinning and the all-reduce estimate."""

from __future__ import annotations

import pytest

from lltui.core.monitor.models import GpuStatic
from lltui.core.topo.advice import (
    NVLINK_BY_CC,
    PCIE_GBS_PER_LANE,
    Advice,
    advise,
    allreduce_seconds_per_token,
    default_cuda_order,
    link_bandwidth,
)
from lltui.core.topo.matrix import CPU_AFFINITY, NUMA_AFFINITY, Topology
from lltui.core.topo.parse import parse_topology
from lltui.core.topo.report import topology_to_json, topology_to_text
from lltui.core.units import GIB


def topo_of(
    n: int,
    cell: str | dict[tuple[int, int], str],
    *,
    numa: list[str] | None = None,
    cpus: list[str] | None = None,
    p2p: dict[tuple[int, int], str] | None = None,
    unreliable: tuple[str, ...] = (),
) -> Topology:
    gpus = tuple(f"GPU{i}" for i in range(n))
    cells = (
        cell
        if isinstance(cell, dict)
        else {(i, j): cell for i in range(n) for j in range(i + 1, n)}
    )
    return Topology(
        gpus=gpus,
        links=tuple((f"GPU{i}", f"GPU{j}", c) for (i, j), c in sorted(cells.items())),
        cpu_affinity=tuple(zip(gpus, cpus, strict=True)) if cpus else None,
        numa_affinity=tuple(zip(gpus, numa, strict=True)) if numa else None,
        p2p=tuple((f"GPU{i}", f"GPU{j}", s) for (i, j), s in sorted((p2p or {}).items())),
        unreliable=unreliable,
    )


def gpu(
    index: int,
    name: str = "NVIDIA L4",
    mem_gib: float = 24,
    cc: tuple[int, int] | None = (8, 9),
    bus: str | None = None,
    pcie: tuple[int, int] | None = (4, 16),
    cuda_index: int | None = None,
) -> GpuStatic:
    return GpuStatic(
        index=index,
        uuid=f"GPU-{index}",
        name=name,
        pci_bus_id=bus or f"00000000:{0x10 + index * 0x10:02X}:00.0",
        memory_total=int(mem_gib * GIB),
        compute_capability=cc,
        pcie_gen_max=pcie[0] if pcie else None,
        pcie_width_max=pcie[1] if pcie else None,
        cuda_index=cuda_index,
    )


def by_code(items: tuple[Advice, ...]) -> dict[str, list[Advice]]:
    out: dict[str, list[Advice]] = {}
    for a in items:
        out.setdefault(a.code, []).append(a)
    return out


# --- split mode ------------------------------------------------------------------------------


def test_all_nvlink_allows_tensor_and_says_row_is_refused():
    advice = by_code(advise(topo_of(4, "NV12")))
    split = advice["split-mode"][0]
    assert "-sm tensor" in split.message and "NV12" in split.message
    assert split.hint and "does not support split buffers" in split.hint and "-fa on" in split.hint


@pytest.mark.parametrize("cell", ["PIX", "PXB", "PHB", "NODE", "SYS"])
def test_pcie_keeps_layer_split(cell):
    advice = by_code(advise(topo_of(2, cell)))
    split = advice["split-mode"][0]
    assert split.message.startswith("-sm layer") and cell in split.message
    assert "tensor" not in split.message.split(":")[0]
    assert "nvlink-group" not in advice


def test_nvlink_pairs_on_pcie_get_a_group_each():
    cells = {
        (i, j): ("NV4" if j == i + 1 and i % 2 == 0 else "SYS")
        for i in range(4)
        for j in range(i + 1, 4)
    }
    advice = by_code(advise(topo_of(4, cells)))
    split = advice["split-mode"][0]
    assert split.message.startswith("-sm layer")
    # it knows no model: the planner's "tensor 67% faster" on PCIe was contradicted by a
    # flat "too slow" here; it says where the answer for a model is
    assert "too slow" not in split.message and "--best decode" in (split.hint or "")
    groups = advice["nvlink-group"]
    assert [g.message.split(" are ")[0] for g in groups] == ["GPU0, GPU1", "GPU2, GPU3"]
    assert "CUDA_VISIBLE_DEVICES=2,3" in (groups[1].hint or "")


def test_an_nvlink_chain_that_is_not_complete_is_no_group():
    cells = {(0, 1): "NV2", (1, 2): "NV2", (0, 2): "SYS"}
    assert "nvlink-group" not in by_code(advise(topo_of(3, cells)))


def test_one_gpu_has_nothing_to_split_and_no_collective_estimate():
    advice = by_code(advise(topo_of(1, {})))
    assert "one GPU" in advice["split-mode"][0].message
    assert "allreduce-cost" not in advice and "main-gpu" not in advice and "p2p" not in advice


def test_empty_topology_gives_no_advice():
    assert advise(Topology()) == ()


# --- main GPU and CUDA numbering -----------------------------------------------------------


def test_main_gpu_prefers_the_most_memory_in_cuda_numbering():
    gpus = [gpu(0, "NVIDIA RTX A6000", 48, (8, 6)), gpu(1, "NVIDIA GeForce RTX 4090", 24, (8, 9))]
    advice = by_code(advise(topo_of(2, "PHB"), gpus))
    main = advice["main-gpu"][0]
    assert "GPU0" in main.message and "most VRAM" in main.message
    # CUDA puts the 4090 (compute 8.9) first, so GPU0 is CUDA1.
    assert "-mg 1 (-mg 0 with CUDA_DEVICE_ORDER=PCI_BUS_ID)" in main.message
    assert advice["cuda-device-order"][0].severity == "warn"
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    advice = by_code(advise(topo_of(2, "PHB"), gpus, env=env))
    assert advice["main-gpu"][0].message.endswith("-mg 0")
    assert "cuda-device-order" not in advice


def test_main_gpu_counts_nvlinks_when_memory_is_equal():
    cells = {(0, 1): "SYS", (0, 2): "SYS", (1, 2): "NV4"}
    main = by_code(advise(topo_of(3, cells), [gpu(i) for i in range(3)]))["main-gpu"][0]
    assert "GPU1" in main.message and "4 NVLinks" in main.message


def test_alike_gpus_keep_the_default_main_gpu():
    main = by_code(advise(topo_of(4, "NV18"), [gpu(i, "H100", 80, (9, 0)) for i in range(4)]))
    assert "default -mg 0" in main["main-gpu"][0].message


def test_a_measured_cuda_order_is_used_as_given():
    gpus = [gpu(i) for i in range(3)]
    advice = by_code(advise(topo_of(3, "PHB"), gpus, cuda_order=(2, 0, 1)))
    order = advice["cuda-device-order"][0]
    assert "CUDA0 is GPU2" in order.message and "CUDA2 is GPU1" in order.message
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in (order.hint or "")
    assert "cuda-device-order" not in by_code(advise(topo_of(3, "PHB"), gpus, cuda_order=(0, 1, 2)))


def test_cuda_index_in_the_gpu_statics_is_the_order():
    gpus = [gpu(0, cuda_index=1), gpu(1, cuda_index=0)]
    order = by_code(advise(topo_of(2, "PHB"), gpus))["cuda-device-order"][0]
    assert "CUDA0 is GPU1" in order.message


def test_default_cuda_order_is_fastest_first_then_bus():
    gpus = [gpu(0, cc=(7, 5)), gpu(1, cc=(8, 9)), gpu(2, cc=(7, 5), bus="00000000:05:00.0")]
    assert default_cuda_order(gpus) == (1, 2, 0)
    assert default_cuda_order([gpu(0, cc=None), gpu(1)]) is None


def test_mixed_models_without_capabilities_get_a_note():
    gpus = [gpu(0, "A", cc=None), gpu(1, "B", cc=None)]
    order = by_code(advise(topo_of(2, "PHB"), gpus))["cuda-device-order"][0]
    assert order.severity == "info" and "mixed GPU models" in order.message


# --- peer to peer ----------------------------------------------------------------------------


def test_nvlink_everywhere_suggests_ggml_cuda_p2p():
    p2p = by_code(advise(topo_of(2, "NV4"), env={}))["p2p"][0]
    assert "GGML_CUDA_P2P=1" in (p2p.hint or "") and "even 0" in (p2p.hint or "")


def test_ggml_cuda_p2p_zero_still_enables_peer_access():
    advice = by_code(advise(topo_of(2, "PHB"), env={"GGML_CUDA_P2P": "0"}))
    warn = advice["ggml-cuda-p2p-set"][0]
    assert (
        warn.severity == "warn" and "'0'" in warn.message and "whatever its value" in warn.message
    )
    assert "ggml-cuda-p2p-set" not in by_code(advise(topo_of(2, "NV4"), env={"GGML_CUDA_P2P": "1"}))


def test_nccl_p2p_disabled_on_nvlink_is_flagged():
    advice = by_code(advise(topo_of(2, "NV4"), env={"NCCL_P2P_DISABLE": "1"}))
    assert advice["nccl-p2p-disabled"][0].severity == "warn"
    assert "nccl-p2p-disabled" not in by_code(
        advise(topo_of(2, "SYS"), env={"NCCL_P2P_DISABLE": "1"})
    )


def test_p2p_status_not_ok_is_a_warning():
    topo = topo_of(3, "NODE", p2p={(0, 1): "OK", (0, 2): "CNS", (1, 2): "CNS"})
    p2p = by_code(advise(topo))["p2p"][0]
    assert p2p.severity == "warn" and "GPU0-GPU2 CNS" in p2p.message
    assert "GPU0-GPU1" not in p2p.message and "NCCL_P2P_DISABLE=1" in (p2p.hint or "")


def test_geforce_on_pcie_and_cross_socket_pairs():
    gf = [gpu(i, "NVIDIA GeForce RTX 4090") for i in range(2)]
    assert "GeForce" in by_code(advise(topo_of(2, "PHB"), gf))["p2p"][0].message
    cross = by_code(
        advise(
            topo_of(
                4,
                {
                    (i, j): "NODE" if i // 2 == j // 2 else "SYS"
                    for i in range(4)
                    for j in range(i + 1, 4)
                },
            )
        )
    )
    msg = cross["p2p"][0].message
    assert (
        "GPU0-GPU2" in msg
        and "GPU0-GPU1" not in msg
        and "NCCL_P2P_LEVEL=PHB keeps P2P off the SYS pairs" in (cross["p2p"][0].hint or "")
    )


def test_cross_socket_advice_names_a_level_nccl_reads():
    """The advice said NCCL_P2P_LEVEL=NODE, a level NCCL does not have (it ignores it, and
    `lltui nccl` warned about it): the level advised is one NCCL reads, that allows the NODE
    pairs and keeps the SYS pairs off P2P, as `lltui nccl` reads it."""
    import re

    from lltui.core.nccl.findings import NcclFacts, nccl_findings, p2p_level_allows

    topo = topo_of(
        4,
        {(i, j): "NODE" if i // 2 == j // 2 else "SYS" for i in range(4) for j in range(i + 1, 4)},
    )
    hint = by_code(advise(topo))["p2p"][0].hint or ""
    level = re.search(r"NCCL_P2P_LEVEL=(\S+)", hint)
    assert level is not None
    assert p2p_level_allows(level[1], "NODE") is True and p2p_level_allows(level[1], "SYS") is False
    env = {"NCCL_P2P_LEVEL": level[1], "NCCL_DEBUG": "WARN"}
    codes = [f.code for f in nccl_findings(NcclFacts(True, "2.21.5", env, topo.link_map()))]
    assert "p2p-level-invalid" not in codes and "p2p-level-limits" in codes


# --- NUMA ----------------------------------------------------------------------------------


def test_two_numa_nodes_pin_with_numactl_and_the_printed_cpus():
    topo = topo_of(
        4, "SYS", numa=["0", "0", "1", "1"], cpus=["0-31,64-95"] * 2 + ["32-63,96-127"] * 2
    )
    numa = by_code(advise(topo))["numa-pinning"][0]
    assert "NUMA node 0: GPU0, GPU1" in numa.message and "NUMA node 1: GPU2, GPU3" in numa.message
    hint = numa.hint or ""
    assert "numactl --cpunodebind=0 --membind=0" in hint and "--numa numactl" in hint
    assert "taskset -c 0-31,64-95" in hint


def test_cut_cpu_affinity_is_not_offered_to_taskset():
    topo = topo_of(
        2, "NV8", numa=["0", "1"], cpus=["-31,64-95", "32-63,96-127"], unreliable=(CPU_AFFINITY,)
    )
    hint = by_code(advise(topo))["numa-pinning"][0].hint or ""
    assert "taskset" not in hint and "looks cut" in hint


def test_single_node_or_unknown_numa_needs_no_pinning():
    assert "numa-pinning" not in by_code(
        advise(topo_of(2, "NV4", numa=["0", "0"], cpus=["0-23"] * 2))
    )
    assert "numa-pinning" not in by_code(advise(topo_of(2, "NV4", numa=["N/A", "N/A"])))
    split_cpus = by_code(advise(topo_of(2, "SYS", numa=["N/A", "N/A"], cpus=["0-7", "8-15"])))
    assert "taskset -c 0-7" in (split_cpus["numa-pinning"][0].hint or "")


# --- bandwidth and the all-reduce estimate ---------------------------------------------------


def test_link_bandwidth_by_generation_and_pcie():
    a100 = gpu(0, cc=(8, 0))
    nv = link_bandwidth("NV12", a100, a100)
    assert nv is not None and nv.gbs == pytest.approx(12 * NVLINK_BY_CC[(8, 0)].gbs_per_link)
    bridge = link_bandwidth("NV4", gpu(0, cc=(8, 6)), gpu(1, cc=(8, 6)))
    assert bridge is not None and bridge.gbs == pytest.approx(4 * NVLINK_BY_CC[(8, 6)].gbs_per_link)
    unknown = link_bandwidth("NV4")
    assert unknown is not None and "assumed" in unknown.basis
    t4 = gpu(0, cc=(7, 5), pcie=(3, 16))
    phb = link_bandwidth("PHB", t4, t4)
    sys_link = link_bandwidth("SYS", t4, t4)
    assert phb is not None and sys_link is not None
    assert phb.gbs == pytest.approx(16 * PCIE_GBS_PER_LANE[3])
    assert sys_link.gbs < phb.gbs
    narrow = link_bandwidth("PIX", gpu(0, pcie=(4, 8)), gpu(1, pcie=(3, 16)))
    assert narrow is not None and narrow.gbs == pytest.approx(8 * PCIE_GBS_PER_LANE[3])
    assert link_bandwidth("X") is None and link_bandwidth("C2C") is None


def test_allreduce_cost_follows_the_ring_formula():
    n_embd, n_layer, gbs = 4096, 32, 100.0
    one = allreduce_seconds_per_token(2, gbs, n_embd, n_layer)
    # 2 all-reduces per layer, each 2(N-1)/N x bytes / bandwidth.
    assert one == pytest.approx(2 * n_layer * (2 * 1 / 2) * n_embd * 2 / (gbs * 1e9))
    eight = allreduce_seconds_per_token(8, gbs, n_embd, n_layer)
    assert eight / one == pytest.approx((2 * 7 / 8) / (2 * 1 / 2))
    assert allreduce_seconds_per_token(2, 2 * gbs, n_embd, n_layer) == pytest.approx(one / 2)
    assert allreduce_seconds_per_token(1, gbs) == 0.0


def test_allreduce_advice_uses_the_slowest_link():
    cells = {(0, 1): "NV4", (0, 2): "SYS", (1, 2): "SYS"}
    gpus = [gpu(i, cc=(8, 6), pcie=(4, 16)) for i in range(3)]
    item = by_code(advise(topo_of(3, cells), gpus, n_embd=5120, n_layer=64))["allreduce-cost"][0]
    slow = link_bandwidth("SYS", gpus[0], gpus[2])
    assert slow is not None
    expect_us = allreduce_seconds_per_token(3, slow.gbs, 5120, 64) * 1e6
    assert f"about {expect_us:.0f} µs" in item.message
    assert "SYS" in item.message and "5120-wide, 64-layer" in item.message


# --- rendering -------------------------------------------------------------------------------


def test_advice_is_rendered_in_json_and_text():
    topo = parse_topology(
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tSYS\t0-15\t0\nGPU1\tSYS\t X \t16-31\t1\n"
    )
    advice = advise(topo, env={"GGML_CUDA_P2P": "0"})
    data = topology_to_json(topo, advice)
    assert [a["code"] for a in data["advice"]] == [a.code for a in advice]
    assert {"split-mode", "p2p", "ggml-cuda-p2p-set", "numa-pinning", "allreduce-cost"} <= {
        a["code"] for a in data["advice"]
    }
    text = topology_to_text(topo, advice, width=80)
    assert text.count("[warn]") == sum(a.severity == "warn" for a in advice)
    assert text.count("[info]") == sum(a.severity == "info" for a in advice)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert NUMA_AFFINITY in data

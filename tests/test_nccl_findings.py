"""NCCL findings: the NCCL_* environment, the library version and the GPU links turned
into ordered findings with stable codes."""

import pytest

from lltui.core.nccl.findings import (
    ERROR,
    INFO,
    WARN,
    NcclFacts,
    link_kind,
    nccl_findings,
    p2p_level_allows,
    socket_ifname_matches,
)
from lltui.core.nccl.variables import nccl_environment


def _codes(facts: NcclFacts) -> dict[str, str]:
    """Code -> severity; for a code found twice, the more severe (listed first)."""
    out: dict[str, str] = {}
    for f in nccl_findings(facts):
        out.setdefault(f.code, f.severity)
    return out


def test_p2p_disabled_on_an_nvlink_rig_is_a_warning():
    nv = {"GPU0-GPU1": "NV4"}
    env = {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "WARN"}
    assert _codes(NcclFacts(True, "2.21.5", env, nv))["p2p-disabled-nvlink"] == WARN
    without_topology = _codes(NcclFacts(True, "2.21.5", env))
    assert without_topology["p2p-disabled"] == INFO
    assert "p2p-disabled-nvlink" not in without_topology
    assert "p2p-disabled" not in _codes(NcclFacts(True, "2.21.5", {"NCCL_P2P_DISABLE": "0"}, nv))


def test_p2p_level_against_the_links():
    links = {"GPU0-GPU1": "NV12", "GPU0-GPU2": "SYS", "GPU1-GPU2": "SYS"}
    assert _codes(NcclFacts(True, "2.21.5", {"NCCL_P2P_LEVEL": "LOC"}, links))["p2p-level-loc"] == (
        WARN
    )
    assert (
        _codes(NcclFacts(True, "2.21.5", {"NCCL_P2P_LEVEL": "PHB"}, links))["p2p-level-limits"]
        == INFO
    )
    assert "p2p-level-limits" not in _codes(
        NcclFacts(True, "2.21.5", {"NCCL_P2P_LEVEL": "SYS"}, links)
    )
    assert _codes(NcclFacts(True, "2.21.5", {"NCCL_P2P_LEVEL": "nearby"}))["p2p-level-invalid"]
    assert p2p_level_allows("NVL", "NV4") is True
    assert p2p_level_allows("NVL", "PIX") is False
    assert p2p_level_allows("PHB", "NODE") is True
    assert p2p_level_allows("PXB", "NODE") is False
    assert p2p_level_allows("3", "PHB") is True
    assert p2p_level_allows("SYS", "weird") is None
    assert link_kind(" nv18 ") == "NV"


def test_topology_shapes():
    partial = {"GPU0-GPU1": "NV4", "GPU2-GPU3": "NV4", "GPU0-GPU2": "PHB"}
    assert "nvlink-partial" in _codes(NcclFacts(True, "2.21.5", {}, partial))
    pcie = _codes(NcclFacts(True, "2.21.5", {}, {"GPU0-GPU1": "SYS"}))
    assert "pcie-only" in pcie
    msgs = [f.message for f in nccl_findings(NcclFacts(True, "2.21.5", {}, {"GPU0-GPU1": "SYS"}))]
    assert any("CPU socket link (SYS)" in m for m in msgs)


def test_consumer_cards_over_pcie():
    names = ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"]
    got = _codes(NcclFacts(True, "2.21.5", {}, {"GPU0-GPU1": "PHB"}, names))
    assert got["p2p-consumer-pcie"] == INFO
    assert "p2p-consumer-pcie" not in _codes(
        NcclFacts(True, "2.21.5", {"NCCL_P2P_DISABLE": "1"}, {"GPU0-GPU1": "PHB"}, names)
    )
    assert "p2p-consumer-pcie" not in _codes(
        NcclFacts(True, "2.21.5", {}, {"GPU0-GPU1": "PHB"}, ["NVIDIA A100-SXM4-80GB"] * 2)
    )


def test_network_variables():
    facts = NcclFacts(True, "2.21.5", {"NCCL_SOCKET_IFNAME": "eth0"}, interfaces=["lo", "ens5"])
    assert _codes(facts)["socket-ifname-missing"] == ERROR
    ok = NcclFacts(True, "2.21.5", {"NCCL_SOCKET_IFNAME": "^docker,lo"}, interfaces=["lo", "ens5"])
    assert "socket-ifname-missing" not in _codes(ok)
    assert socket_ifname_matches("=ens5", ["ens5", "ens51"]) == ["ens5"]
    assert socket_ifname_matches("ens", ["ens5", "ens51", "lo"]) == ["ens5", "ens51"]
    assert socket_ifname_matches("^=lo", ["lo", "eth0"]) == ["eth0"]
    loop = NcclFacts(True, "2.21.5", {"NCCL_SOCKET_IFNAME": "lo"}, interfaces=["lo", "ens5"])
    assert "socket-ifname-loopback" in _codes(loop)
    ib = _codes(NcclFacts(True, "2.21.5", {"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": "mlx5_0"}))
    assert ib["ib-disabled-hca-set"] == WARN
    assert _codes(NcclFacts(True, "2.21.5", {"NCCL_IB_DISABLE": "1"}))["ib-disabled"] == INFO


@pytest.mark.parametrize("hca", [{}, {"NCCL_IB_HCA": "mlx5_0"}])
def test_ib_disabled_quotes_the_value_given(hca):
    """NCCL_IB_DISABLE=2 (any number but 0 turns InfiniBand off) was said as
    "NCCL_IB_DISABLE=1: ...", a value the user never set."""
    facts = NcclFacts(True, "2.21.5", {"NCCL_IB_DISABLE": "2", **hca})
    (said,) = [f.message for f in nccl_findings(facts) if f.code.startswith("ib-disabled")]
    assert said.startswith("NCCL_IB_DISABLE=2") and "=1" not in said


def test_variables_that_nccl_ignores():
    got = _codes(
        NcclFacts(
            True,
            "2.21.5",
            {
                "NCCL_P2P_DISABLED": "1",
                "NCCL_SHM_DISABLE": "true",
                "NCCL_FROBNICATE": "3",
                "NCCL_ASYNC_ERROR_HANDLING": "1",
                "NCCL_DEBUG": "LOUD",
                "NCCL_ALGO": "Ring",
            },
        )
    )
    assert got["unknown-variable"] == WARN  # the typo comes first and is the worst
    assert got["not-an-integer"] == WARN
    assert got["torch-renamed-variable"] == INFO
    assert got["debug-invalid"] == WARN
    assert got["algo-forced"] == INFO
    findings = nccl_findings(NcclFacts(True, "2.21.5", {"NCCL_P2P_DISABLED": "1"}))
    assert any("did you mean NCCL_P2P_DISABLE?" in f.message for f in findings)


def test_versions_with_known_problems():
    assert _codes(NcclFacts(True, "2.8.4"))["nccl-old-no-bf16"] == WARN
    assert _codes(NcclFacts(True, "2.19.3"))["nccl-cumem-memory"] == INFO
    assert "nccl-cumem-memory" not in _codes(NcclFacts(True, "2.19.3", {"NCCL_CUMEM_ENABLE": "0"}))
    assert "nccl-cumem-memory" not in _codes(NcclFacts(True, "2.23.4"))
    assert _codes(NcclFacts(False))["nccl-missing"] == WARN


def test_debug_findings_and_ordering():
    assert _codes(NcclFacts(True, "2.21.5", {}))["debug-unset"] == INFO
    assert _codes(NcclFacts(True, "2.21.5", {}, debugging=True))["debug-unset"] == WARN
    assert "debug-unset" not in _codes(NcclFacts(True, "2.21.5", {"NCCL_DEBUG": "WARN"}))
    findings = nccl_findings(
        NcclFacts(
            True,
            "2.21.5",
            {"NCCL_SOCKET_IFNAME": "eth9", "NCCL_P2P_DISABLE": "1"},
            {"GPU0-GPU1": "NV4"},
            interfaces=["lo"],
        )
    )
    order = {ERROR: 0, WARN: 1, INFO: 2}
    ranks = [order[f.severity] for f in findings]
    assert ranks == sorted(ranks) and findings[0].code == "socket-ifname-missing"


def test_nccl_environment_lists_key_variables_first():
    env = nccl_environment({"NCCL_IB_HCA": "mlx5", "PATH": "/bin", "NCCL_DEBUG": "INFO"})
    keys = list(env)
    assert keys[:6] == [
        "NCCL_P2P_DISABLE",
        "NCCL_P2P_LEVEL",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_SOCKET_IFNAME",
        "NCCL_DEBUG",
    ]
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_P2P_DISABLE"] is None
    assert env["NCCL_IB_HCA"] == "mlx5" and "PATH" not in env


def test_integer_variables_are_read_as_nccls_strtoll_reads_them():
    from lltui.core.nccl.variables import VARIABLES, nccl_int

    assert nccl_int("4MB") == (4, "MB") and nccl_int("0x10") == (16, "")
    assert nccl_int("010") == (8, "") and nccl_int("yes") == (0, "yes")
    assert nccl_int("99999999999999999999")[0] is None  # ERANGE: NCCL keeps its default
    said = {
        value: next(f for f in nccl_findings(NcclFacts(True, "2.21.5", {name: value})) if
                    f.code == "not-an-integer").message
        for name, value in (("NCCL_BUFFSIZE", "4MB"), ("NCCL_NTHREADS", "abc"))
    }  # fmt: skip
    assert "reads its leading number, 4" in said["4MB"] and "reads it as 0" in said["abc"]
    # "yes" is 0 to NCCL: P2P stays on, and the table says so
    assert VARIABLES["NCCL_P2P_DISABLE"].explain("yes") == "P2P allowed"
    findings = nccl_findings(NcclFacts(True, "2.21.5", {"NCCL_P2P_DISABLE": "yes"}))
    assert not any(f.code == "p2p-disabled" for f in findings)


@pytest.mark.parametrize("value", ["", "x"])
def test_a_socket_ifname_of_one_character_is_one_nccl_ignores(value):
    facts = NcclFacts(True, "2.21.5", {"NCCL_SOCKET_IFNAME": value}, interfaces=["eth0", "lo"])
    codes = {f.code: f.severity for f in nccl_findings(facts)}
    assert codes.get("socket-ifname-ignored") == INFO and "socket-ifname-missing" not in codes


def test_p2p_disable_is_read_as_nccls_ncclgetlevel_reads_it(capsys, monkeypatch):
    """NCCL (src/graph/paths.cc, ncclGetLevel) turns P2P off for NCCL_P2P_DISABLE=1 only and
    then does not read NCCL_P2P_LEVEL: with NCCL_P2P_LEVEL=SYS set too nothing said it was
    ignored (it was explained as 'P2P even across CPU sockets'), and NCCL_P2P_DISABLE=2 or
    'true' were taken for P2P off."""
    from lltui.cli import main
    from lltui.core.topo.advice import advise
    from lltui.core.topo.p2p_levels import p2p_disabled
    from lltui.core.topo.parse import parse_topology

    # strtol's long kept in an int: 4294967297 is 1 to NCCL (P2P off), 4294967296 is 0
    assert p2p_disabled({"NCCL_P2P_DISABLE": "4294967297"})
    assert not p2p_disabled({"NCCL_P2P_DISABLE": "4294967296"})
    both = {"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "SYS"}
    codes = _codes(NcclFacts(True, "2.21.5", both, {"GPU0-GPU1": "SYS"}))
    assert codes["p2p-level-ignored"] == INFO and "p2p-level-limits" not in codes
    for name, value in both.items():
        monkeypatch.setenv(name, value)
    main(["nccl"])
    out = capsys.readouterr().out
    assert "NCCL_P2P_LEVEL      SYS  - ignored: NCCL_P2P_DISABLE=1 turns P2P off" in out
    assert "p2p-level-ignored: NCCL_P2P_LEVEL=SYS is ignored" in out
    monkeypatch.setenv("NCCL_P2P_DISABLE", "2")
    main(["nccl"])
    out = capsys.readouterr().out
    assert "NCCL_P2P_DISABLE    2  - P2P allowed: NCCL turns P2P off for 1 only" in out
    assert "p2p-disabled" not in out and "SYS  - P2P even across CPU sockets" in out
    nv = parse_topology("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNV4\t X \n")
    for value, said in (("2", False), ("true", False), ("0x1", True)):
        codes = _codes(NcclFacts(True, "2.21.5", {"NCCL_P2P_DISABLE": value}, nv.link_map()))
        assert ("p2p-disabled-nvlink" in codes) is said
        advice = advise(nv, env={"NCCL_P2P_DISABLE": value})
        assert any(a.code == "nccl-p2p-disabled" for a in advice) is said


def test_p2p_level_is_read_as_nccls_ncclgetlevel_reads_it(capsys, monkeypatch):
    """NCCL (src/graph/paths.cc, ncclGetLevel) matches NCCL_P2P_LEVEL case-sensitively against
    its path names LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS, and reads a value starting
    with a digit as an old number mapped through {LOC, PIX, PXB, PHB, SYS, SYS}, capped. 'sys'
    was explained as SYS (NCCL ignores it), NVB warned as unknown, 7 warned (NCCL: SYS) and 4
    read as PHB (NCCL: SYS)."""
    from lltui.cli import main
    from lltui.core.nccl.variables import nccl_path_level

    cases = {"SYS": "SYS", "sys": None, "NVB": "NVB", "PXN": "PXN", "7": "SYS", "4": "SYS"}
    cases |= {"3": "PHB", "0x2": "PXB", "08": "LOC", "-1": None, " PHB": None, "NET": None}
    assert {v: nccl_path_level(v) for v in cases} == cases
    assert p2p_level_allows("4", "SYS") is True
    assert p2p_level_allows("sys", "SYS") is None
    assert p2p_level_allows("NVB", "NV4") is True and p2p_level_allows("NVB", "PIX") is False
    assert p2p_level_allows("PXN", "PXB") is True and p2p_level_allows("PXN", "NODE") is False
    for level, invalid in (("NVB", False), ("7", False), ("C2C", False), ("sys", True)):
        codes = _codes(NcclFacts(True, "2.21.5", {"NCCL_P2P_LEVEL": level}))
        assert ("p2p-level-invalid" in codes) is invalid, level
    links = {"GPU0-GPU1": "NV4", "GPU0-GPU2": "SYS"}
    assert "p2p-level-loc" in _codes(NcclFacts(True, "2.21.5", {"NCCL_P2P_LEVEL": "00"}, links))
    monkeypatch.setenv("NCCL_P2P_LEVEL", "sys")
    main(["nccl"])
    out = capsys.readouterr().out
    assert "NCCL_P2P_LEVEL      sys  - ignored: NCCL reads only upper-case path names" in out
    assert "-> NCCL_P2P_LEVEL=SYS" in out
    monkeypatch.setenv("NCCL_P2P_LEVEL", "7")
    main(["nccl"])
    assert "7  - P2P even across CPU sockets (QPI/UPI/Infinity Fabric) (NCCL reads 7 as SYS)" in (
        capsys.readouterr().out
    )


def test_algo_and_proto_names_nccl_rejects_are_an_error():
    """NCCL 2.24 and later (src/graph/tuning.cc parseList) fail communicator init on a name
    they do not know in NCCL_ALGO or NCCL_PROTO ("Unrecognized element token",
    ncclInvalidUsage); it was only an info finding like any forced algorithm. '^' exclusions,
    per-collective entries and names in any case are valid."""
    from lltui.core.nccl.variables import nccl_list_error

    for valid in ("Ring", "ring,TREE", "^NVLS,nvlstree", "ring;allreduce:tree", "allreduce:^pat"):
        assert nccl_list_error("NCCL_ALGO", valid) is None, valid
    assert nccl_list_error("NCCL_PROTO", "^LL128;allreduce:LL128") is None
    # (';Ring': strtok skips the ';', so the first entry is not at the start and needs a
    # collective too)
    for invalid in ("Rng", "Ring, Tree", "ring;tree", "allreduc:ring", "LL128", ";Ring"):
        assert nccl_list_error("NCCL_ALGO", invalid) is not None, invalid
    got = _codes(NcclFacts(True, "2.24.3", {"NCCL_ALGO": "Rng", "NCCL_PROTO": "^LL128"}))
    assert got["algo-invalid"] == ERROR and got["proto-forced"] == INFO
    assert "algo-forced" not in got and "proto-invalid" not in got
    (found,) = [
        f
        for f in nccl_findings(NcclFacts(True, None, {"NCCL_PROTO": "LL256"}))
        if f.code == "proto-invalid"
    ]
    assert found.severity == ERROR and "'LL256'" in found.message
    assert "fails communicator init" in found.message and "LL, LL128, Simple" in found.hint
    # before 2.24.3 NCCL skipped names it did not know
    assert _codes(NcclFacts(True, "2.23.4", {"NCCL_ALGO": "Rng"}))["algo-invalid"] == WARN

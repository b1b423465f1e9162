"""The report behind `lltui nccl`: typed library facts whose JSON keeps its keys and order."""

import json
import os

from lltui.services.nccl import NcclInfo, nccl_report
from lltui.sources.nccl.finder import LibraryCandidate

LOCAL_KEYS = [
    "available",
    "version",
    "version_code",
    "path",
    "found_by",
    "candidates",
    "reason",
    "simulated",
    "cudart",
    "env",
    "findings",
]


def test_simulated_report_json_keys_and_order():
    report = nccl_report("sim:2x3090-nvlink")
    assert report.info.simulated and report.available
    assert report.info.source == "sim:2x3090-nvlink"
    data = report.to_json()
    assert list(data) == [
        "available",
        "version",
        "path",
        "found_by",
        "simulated",
        "source",
        "env",
        "findings",
    ]
    assert data["env"]["NCCL_P2P_LEVEL"] == "NVL"
    assert report.links and set(report.links.values()) == {"NV4"}


def test_local_report_without_a_library(tmp_path):
    missing = str(tmp_path / "libnccl.so.2")
    report = nccl_report(f"replay:{tmp_path / 'r.jsonl'}", lib_path=missing, environ={})
    assert not report.available and not report.info.simulated
    assert report.info.reason is not None and "cannot load" in report.info.reason
    data = report.to_json()
    assert list(data) == [*LOCAL_KEYS, "env_from", "conf_files"]  # this machine's NCCL only
    assert data["candidates"] == [] and data["version_code"] is None
    assert all(set(c) == {"path", "found_by"} for c in data["cudart"])
    assert "nccl-missing" in {f["code"] for f in data["findings"]}


def test_info_json_lists_candidates_as_dicts():
    info = NcclInfo(
        available=True,
        version="2.21.5",
        path="/lib/libnccl.so.2",
        found_by="ldconfig",
        simulated=False,
        version_code=22105,
        candidates=(LibraryCandidate("/lib/libnccl.so.2", "ldconfig"),),
        cudart=(LibraryCandidate("/lib/libcudart.so.12", "system"),),
    )
    data = info.to_json()
    assert list(data) == LOCAL_KEYS[:-2]
    assert data["candidates"] == [{"path": "/lib/libnccl.so.2", "found_by": "ldconfig"}]
    assert data["cudart"] == [{"path": "/lib/libcudart.so.12", "found_by": "system"}]
    assert data["version_code"] == 22105 and data["reason"] is None


def test_the_nccl_of_this_machine_is_said_so_beside_a_rig_that_is_not_it():
    from lltui.services.nccl import nccl_report

    for source in ("replay:/tmp/rec.jsonl", "smi:gpu-box", "prom:http://127.0.0.1:9090"):
        codes = [f.code for f in nccl_report(source, environ={}).findings]
        assert codes[0] == "this-machine", source
    for source in (None, "nvml", "smi"):
        assert "this-machine" not in [f.code for f in nccl_report(source, environ={}).findings]


def test_the_text_lists_every_library_found_but_the_one_loaded(tmp_path, monkeypatch, capsys):
    """A broken libnccl first on LD_LIBRARY_PATH: the text took the first found for the one
    loaded, hid the broken one and listed the loaded one again as 'also'."""
    from lltui.cli import main

    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "libnccl.so.2").write_text("not a library")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(junk))
    source = ["--source", f"replay:{tmp_path / 'r.jsonl'}"]
    main(["nccl", *source, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["candidates"][0]["path"] == str(junk / "libnccl.so.2")
    main(["nccl", *source])
    also = [ln.split("also: ")[1] for ln in capsys.readouterr().out.splitlines() if "also: " in ln]
    listed = [c["path"] for c in data["candidates"] if c["path"] != data["path"]]
    assert [a.rsplit(" (", 1)[0] for a in also] == listed
    assert str(junk / "libnccl.so.2") in listed


def test_counts_of_one_are_singular(capsys, tmp_path):
    """'GPU links  PHB (1 pairs)', '1 ranks' over a one-GPU nccl-tests run, '1 iterations'
    from `nccl bench --iters 1` and 'GPU0: 1 NVLinks to the others'."""
    from lltui.cli import main
    from lltui.core.topo.advice import advise
    from lltui.core.topo.parse import parse_topology
    from lltui.sources.nccl.bench import BenchResult

    main(["nccl", "--source", "sim:kaggle-2xt4"])
    assert "GPU links  PHB (1 pair)\n" in capsys.readouterr().out
    one_rank = tmp_path / "one.txt"
    one_rank.write_text(
        "#  Rank  0 Group  0 Pid  1 on node1 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
        "8 2 float sum -1 3.50 0.00 0.00 0 0.20 0.04 0.00 0\n"
    )
    main(["nccl", "tests", str(one_rank)])
    assert capsys.readouterr().out.startswith("collective not printed · 1 rank\n")
    bench = BenchResult("2.27.3", "libnccl.so.2", "libcudart.so.12", (0,), ("0:1:0",), "float",
                        (), (), 1, 0, None)  # fmt: skip
    assert bench.to_text().splitlines()[0].endswith("· 1 iteration")
    cells = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV1\tPHB\nGPU1\tNV1\t X \tPHB\nGPU2\tPHB\tPHB\t X \n"
    said = [a.message for a in advise(parse_topology(cells)) if a.code == "main-gpu"]
    assert said == ["main GPU: GPU0: 1 NVLink to the others; -mg 0"]


AMD_ENV = {
    "RCCL_MSCCL_ENABLE": "0",
    "HSA_FORCE_FINE_GRAIN_PCIE": "1",
    "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
    "HIP_VISIBLE_DEVICES": "0,1",
    "ROCR_VISIBLE_DEVICES": "0,1,2",
    "CUDA_VISIBLE_DEVICES": "1",
}


def test_the_environment_shows_rccl_rocm_and_the_visible_gpus(monkeypatch, capsys):
    """An AMD user's RCCL_*, HSA_* and HIP/ROCR_VISIBLE_DEVICES (and CUDA_VISIBLE_DEVICES)
    were left out of this machine's environment: only NCCL_* was read. Text and --json list
    the same variables; the rest of the environment stays out."""
    from lltui.cli import main

    env = {**AMD_ENV, "NCCL_DEBUG": "WARN", "PATH": "/usr/bin", "HIP_PATH": "/opt/rocm"}
    report = nccl_report("nvml", environ=env)
    shown = {k: v for k, v in report.env.items() if v is not None}
    assert shown == {**AMD_ENV, "NCCL_DEBUG": "WARN"}
    assert report.env_from == dict.fromkeys(shown, "environment")
    for name, value in {**AMD_ENV, "NCCL_DEBUG": "WARN"}.items():
        monkeypatch.setenv(name, value)
    main(["nccl", "--source", "nvml", "--json"])
    data = json.loads(capsys.readouterr().out)
    main(["nccl", "--source", "nvml"])
    text = capsys.readouterr().out
    section = text.split("environment\n", 1)[1].split("config files", 1)[0]
    listed = [line.split()[0] for line in section.splitlines()]
    assert listed == list(data["env"]) and set(AMD_ENV) <= set(listed)
    assert "HIP_VISIBLE_DEVICES        0,1  - ROCm: which GPUs a HIP process" in section


def test_a_secret_in_the_environment_is_masked(monkeypatch, capsys):
    """A variable whose name says it holds a secret (a network plugin's token) was printed
    whole by lltui nccl, text and --json, and so into lltui report."""
    from lltui.cli import main

    monkeypatch.setenv("NCCL_NET_PLUGIN_TOKEN", "s3cr3t-value")
    monkeypatch.setenv("HSA_API_KEY", "s3cr3t-value")
    report = nccl_report("nvml", environ=dict(os.environ))
    assert report.env["NCCL_NET_PLUGIN_TOKEN"] == report.env["HSA_API_KEY"] == "***"
    for argv in (["nccl", "--source", "nvml"], ["nccl", "--source", "nvml", "--json"]):
        main(argv)
        out = capsys.readouterr().out
        assert "NCCL_NET_PLUGIN_TOKEN" in out and "s3cr3t" not in out

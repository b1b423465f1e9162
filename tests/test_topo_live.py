"""nvidia-smi topo -m read live: nvidia-smi here and over ssh, NVML on fake bindings, and
``lltui topo`` from a file, stdin, a live rig or a simulated one."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from support import fake_topo_pynvml as fake
from support.topo_fixtures import (
    TOPO_FILES,
    render,
    truth_entries,
)

from lltui.cli import main
from lltui.core.monitor.models import SourceUnavailable
from lltui.core.topo.advice import advise
from lltui.core.topo.matrix import (
    AFFINITY_COLUMNS,
    CPU_AFFINITY,
    GPU_NUMA_ID,
    NUMA_AFFINITY,
)
from lltui.core.topo.parse import parse_topology
from lltui.core.topo.report import topology_to_json
from lltui.sources.gpu import topo as topo_source
from lltui.sources.gpu.smi import BOUNDED

# --- the live sources --------------------------------------------------------------------


def fake_smi_script(tmp_path: Path, topo_text: str, *, sleep: float = 0.0) -> Path:
    """A stand-in ``nvidia-smi`` executable (this machine has none) that prints saved output."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "topo.txt").write_text(topo_text)
    (tmp_path / "p2p.txt").write_text(
        " \tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tOK\tX\n\nLegend:\n\n  X    = Self\n"
    )
    (tmp_path / "query.txt").write_text(
        "0, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 24576, 8.6, 4, 16\n"
        "1, NVIDIA GeForce RTX 3090, 00000000:21:00.0, 24576, 8.6, 4, 16\n"
    )
    script = bindir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"sleep {sleep}\n"
        f'case "$1 $2" in\n'
        f'  "topo -m") cat "{tmp_path}/topo.txt" ;;\n'
        f'  "topo -p2p") cat "{tmp_path}/p2p.txt" ;;\n'
        f'  --query-gpu=*) cat "{tmp_path}/query.txt" ;;\n'
        '  *) echo "unknown option $1" >&2; exit 2 ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


def nvlink_pair_fake() -> fake.FakeTopoNvml:
    b0, b1 = "00000000:01:00.0", "00000000:21:00.0"
    return fake.FakeTopoNvml(
        [
            fake.FakeGpu("NVIDIA GeForce RTX 3090", b0, 24576, (8, 6), [b1] * 4, range(24), 0),
            fake.FakeGpu("NVIDIA GeForce RTX 3090", b1, 24576, (8, 6), [b0] * 4, range(24), 0),
        ],
        {(0, 1): fake.NVML_TOPOLOGY_HOSTBRIDGE},
    )


def test_smi_source_runs_argv_with_a_timeout(tmp_path):
    text = render({(0, 1): "NV4"}, 2, affinity={CPU_AFFINITY: ["0-23"] * 2})
    bindir = fake_smi_script(tmp_path, text)
    seen: list[tuple[list[str], dict]] = []

    def run(argv, **kw):
        import subprocess

        seen.append((argv, kw))
        return subprocess.run(argv, **kw)

    live = topo_source.read_smi_topology(run=run, which=lambda n: str(bindir / n))
    assert live.topology.link_map() == {"GPU0-GPU1": "NV4"}
    assert live.topology.p2p_map() == {"GPU0-GPU1": "OK"}
    assert [g.compute_capability for g in live.gpus] == [(8, 6), (8, 6)]
    assert live.gpus[1].pci_bus_id == "00000000:21:00.0"
    assert live.gpus[0].memory_total == 24576 * 1024 * 1024
    for argv, kw in seen:
        assert isinstance(argv, list) and argv[0] == str(bindir / "nvidia-smi")
        assert kw["timeout"] > 0 and not kw.get("shell")


def test_smi_source_timeout_and_failure_are_one_line(tmp_path, monkeypatch):
    text = render({(0, 1): "NV4"}, 2)
    bindir = fake_smi_script(tmp_path, text, sleep=5)
    with pytest.raises(SourceUnavailable, match=r"did not answer within 0\.5 s"):
        topo_source.run_smi(["topo", "-m"], which=lambda n: str(bindir / n), timeout=0.5)
    bindir = fake_smi_script(tmp_path, text)
    with pytest.raises(SourceUnavailable, match="failed: unknown option --bogus"):
        topo_source.run_smi(["--bogus"], which=lambda n: str(bindir / n))
    with pytest.raises(topo_source.SmiMissing):
        topo_source.run_smi(["topo", "-m"], which=lambda n: None)


def test_smi_over_ssh_builds_a_batch_mode_argv():
    seen = []

    class Done:
        returncode = 0
        stdout = render({(0, 1): "PHB"}, 2)
        stderr = ""

    def run(argv, **kw):
        seen.append(argv)
        return Done()

    live = topo_source.read_smi_topology(host="gpu-box", run=run, which=lambda n: f"/usr/bin/{n}")
    assert live.topology.link_map() == {"GPU0-GPU1": "PHB"}
    assert live.topology.source == "nvidia-smi:gpu-box"
    argv = seen[0]
    assert argv[0] == "/usr/bin/ssh" and "BatchMode=yes" in argv
    # bounded on the host by the local timeout (15 s), run through sh there
    assert argv[argv.index("gpu-box") + 1 :] == [*BOUNDED, "15", "nvidia-smi", "topo", "-m"]
    assert argv[argv.index("gpu-box") - 1] == "--"  # nothing after it is an ssh option


def test_smi_over_ssh_takes_a_port_as_every_smi_source_does():
    seen = []

    class Done:
        returncode = 0
        stdout = render({(0, 1): "NV4"}, 2)
        stderr = ""

    def run(argv, **kw):
        seen.append(argv)
        return Done()

    which = lambda n: f"/usr/bin/{n}"  # noqa: E731
    topo_source.read_smi_topology(host="admin@gpu-box:2222", run=run, which=which)
    argv = seen[0]
    assert argv[argv.index("--") - 2 : argv.index("--")] == ["-p", "2222"]
    assert argv[argv.index("--") + 1] == "admin@gpu-box"
    with pytest.raises(ValueError, match="out of range"):
        topo_source.read_smi_topology(host="gpu-box:99999", run=run, which=which)


def test_cli_topo_reaches_a_smi_host_port_as_gpus_does(capsys):
    """``--source smi:127.0.0.1:PORT`` for topo as for gpus: the real ssh is sent to that
    port (nothing listens there: refused, one line, exit 1)."""
    import shutil
    import socket

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for command in (["topo"], ["gpus"]):
        rc = main(["--source", f"smi:127.0.0.1:{port}", *command])
        err = capsys.readouterr().err
        assert rc == 1, (command, err)
        assert f"port {port}: Connection refused" in err, (command, err)
        assert "Could not resolve hostname" not in err
        assert len(err.strip().splitlines()) == 1


def test_cli_topo_of_a_host_keeps_to_the_host_timeout(capsys):
    """``--host-timeout`` bounds topo's ssh as it bounds gpus': a port that takes the
    connection and never says a word (no ssh banner) is given up after 1 s, not topo's own
    15, and the line says which."""
    import shutil
    import socket

    if shutil.which("ssh") is None:
        pytest.skip("no ssh client")
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(4)
        port = mute.getsockname()[1]
        rc = main(["--host-timeout", "1", "--source", f"smi:127.0.0.1:{port}", "topo"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "within 1 s" in err, err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "box; rm -rf ~", "a b"])
def test_smi_over_ssh_refuses_hosts_ssh_would_misread(host):
    def run(argv, **kw):
        raise AssertionError(f"ran {argv}")

    with pytest.raises(ValueError, match="host"):
        topo_source.read_smi_topology(host=host, run=run, which=lambda n: f"/usr/bin/{n}")


def test_gpu_query_parser_handles_old_drivers_and_na():
    fields = tuple(f for f in topo_source.QUERY_FIELDS if f != "compute_cap")
    gpus = topo_source.parse_gpu_query(
        "0, Tesla V100-SXM2-16GB, 0000:06:00.0, 16160, 3, 16\n"
        "1, Tesla V100-SXM2-16GB, 0000:07:00.0, [N/A], [N/A], 16\nnot a row\n",
        fields,
    )
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].pci_bus_id == "00000000:06:00.0"
    assert gpus[0].compute_capability is None and gpus[0].pcie_gen_max == 3
    assert gpus[1].memory_total is None and gpus[1].pcie_gen_max is None  # "[N/A]"


def test_fake_pynvml_agrees_with_the_real_binding():
    real = pytest.importorskip("pynvml")
    for name in fake.CONSTANT_NAMES:
        assert getattr(real, name) == getattr(fake, name), name
    for name in fake.FUNCTION_NAMES:
        assert callable(getattr(real, name)), name
    for cls in ("NVMLError", "NVMLError_NotSupported", "NVMLError_InvalidArgument"):
        assert hasattr(real, cls)


def test_nvml_nvlink_bridge_matches_the_real_paste_of_that_rig():
    live = topo_source.read_nvml_topology(nvlink_pair_fake(), cpu_count=24)
    from_nvml = topology_to_json(live.topology)
    paste = topology_to_json(
        parse_topology(next(p for p in TOPO_FILES if p.name.startswith("18")).read_text())
    )
    for key in ("gpus", "links", *AFFINITY_COLUMNS):
        assert from_nvml[key] == paste[key], key
    assert from_nvml["p2p"] == {"GPU0-GPU1": "OK"}
    assert [g.name for g in live.gpus] == ["NVIDIA GeForce RTX 3090"] * 2


def test_nvml_nvswitch_rig_matches_the_real_paste_of_an_8xh100():
    paste_path = next(p for p in TOPO_FILES if p.name.startswith("02"))
    paste = topology_to_json(parse_topology(paste_path.read_text()))
    gpus = []
    for i, bus in enumerate(("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")):
        cpus = [*range(0, 52), *range(104, 156)] if i < 4 else [*range(52, 104), *range(156, 208)]
        gpus.append(
            fake.FakeGpu(
                "NVIDIA H100 80GB HBM3",
                f"00000000:{bus}:00.0",
                81559,
                (9, 0),
                [fake.SWITCH] * 18,
                cpus,
                0 if i < 4 else 1,
            )
        )
    ancestors = {
        (i, j): fake.NVML_TOPOLOGY_NODE if (i < 4) == (j < 4) else fake.NVML_TOPOLOGY_SYSTEM
        for i in range(8)
        for j in range(i + 1, 8)
    }
    for kw in ({}, {"legacy_bus_ids": True, "missing": ["nvmlDeviceGetNvLinkRemoteDeviceType"]}):
        live = topo_source.read_nvml_topology(
            fake.FakeTopoNvml(gpus, ancestors, **kw), cpu_count=208
        )
        data = topology_to_json(live.topology)
        for key in ("gpus", "links", CPU_AFFINITY, NUMA_AFFINITY):
            assert data[key] == paste[key], (kw, key)


def test_nvml_hybrid_cube_mesh_counts_links_per_pair():
    entry = truth_entries()["topo/04-8xV100-DGX1-hybrid-cube-mesh-4mlx5-unordered-old-legend.txt"][
        "truth"
    ]
    buses = [f"00000000:{b:02X}:00.0" for b in (0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A)]
    nvlinks: list[list[str]] = [[] for _ in range(8)]
    for key, cell in entry["links"].items():
        a, b = (int(x[3:]) for x in key.split("-"))
        if cell.startswith("NV"):
            nvlinks[a] += [buses[b]] * int(cell[2:])
            nvlinks[b] += [buses[a]] * int(cell[2:])
    gpus = [
        fake.FakeGpu("Tesla V100-SXM2-16GB", buses[i], 16160, (7, 0), [*links, ""], [*range(20)], 0)
        for i, links in enumerate(nvlinks)
    ]
    ancestors = {(i, j): fake.NVML_TOPOLOGY_SYSTEM for i in range(8) for j in range(i + 1, 8)}
    live = topo_source.read_nvml_topology(fake.FakeTopoNvml(gpus, ancestors), cpu_count=40)
    assert live.topology.link_map() == entry["links"]


def test_nvml_pcie_rig_with_p2p_status_and_failures():
    buses = ["00000000:17:00.0", "00000000:31:00.0", "00000000:B1:00.0", "00000000:CA:00.0"]
    gpus = [
        fake.FakeGpu(
            "NVIDIA L4", b, 23034, (8, 9), [], range(i // 2 * 24, i // 2 * 24 + 24), i // 2
        )
        for i, b in enumerate(buses)
    ]
    ancestors = {
        (i, j): fake.NVML_TOPOLOGY_NODE if i // 2 == j // 2 else fake.NVML_TOPOLOGY_SYSTEM
        for i in range(4)
        for j in range(i + 1, 4)
    }
    del ancestors[(1, 3)]  # the driver cannot tell this pair
    p2p = {(0, 2): fake.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED}
    nvml = fake.FakeTopoNvml(
        gpus,
        ancestors,
        p2p=p2p,
        fail={"nvmlDeviceGetCpuAffinity": {2: fake.NVMLError_NotSupported}},
    )
    live = topo_source.read_nvml_topology(nvml, cpu_count=48)
    topo = live.topology
    assert topo.link_map() == {
        "GPU0-GPU1": "NODE",
        "GPU0-GPU2": "SYS",
        "GPU0-GPU3": "SYS",
        "GPU1-GPU2": "SYS",
        "GPU2-GPU3": "NODE",
    }
    assert any("GPU1-GPU3" in w for w in topo.warnings)
    assert topo.p2p_map()["GPU0-GPU2"] == "TNS" and topo.p2p_map()["GPU0-GPU1"] == "OK"
    assert topo.cpu_affinity is None  # one GPU would not say: the column is left out
    assert topo.affinity(NUMA_AFFINITY) == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert nvml.calls[-1] == "nvmlShutdown" and not nvml.initialised
    codes = {a.code: a for a in advise(topo, live.gpus)}
    assert codes["p2p"].severity == "warn" and "GPU0-GPU2 TNS" in codes["p2p"].message


def test_nvml_cannot_start_is_one_line_and_shuts_down():
    with pytest.raises(SourceUnavailable, match="NVML did not initialise: Driver Not Loaded"):
        topo_source.read_nvml_topology(
            fake.FakeTopoNvml([], init_error=fake.NVMLError_DriverNotLoaded)
        )
    empty = fake.FakeTopoNvml([])
    with pytest.raises(SourceUnavailable, match="no GPU"):
        topo_source.read_nvml_topology(empty)
    assert empty.calls[-1] == "nvmlShutdown"


def test_nvml_lost_gpu_is_named_and_the_rest_are_read():
    nvml = nvlink_pair_fake()
    nvml.gpus.append(fake.FakeGpu("NVIDIA GeForce RTX 3090", "00000000:41:00.0", 24576, (8, 6)))
    nvml.ancestors.update({(0, 2): 30, (1, 2): 30})
    nvml.fail = {"nvmlDeviceGetHandleByIndex": {2: fake.NVMLError_GpuIsLost}}
    topo = topo_source.read_nvml_topology(nvml, cpu_count=24).topology
    assert topo.link_map() == {"GPU0-GPU1": "NV4"}
    assert any("GPU2" in w for w in topo.warnings)


def test_live_reader_falls_back_to_nvml_without_nvidia_smi():
    live = topo_source.read_live_topology(which=lambda n: None, nvml=nvlink_pair_fake())
    assert live.topology.source == "nvml" and live.topology.link_map() == {"GPU0-GPU1": "NV4"}
    with pytest.raises(SourceUnavailable, match="nvidia-smi is not on PATH, and NVML"):
        topo_source.read_live_topology(
            which=lambda n: None,
            nvml=fake.FakeTopoNvml([], init_error=fake.NVMLError_LibraryNotFound),
        )


# --- lltui topo ------------------------------------------------------------------------------

CONTRACT_KEYS = {"gpus", "links", "gpu_nic_links", "nics", "warnings", "advice"}


def test_cli_json_from_a_file(capsys):
    path = next(p for p in TOPO_FILES if p.name.startswith("09"))
    truth = truth_entries()[f"topo/{path.name}"]["truth"]
    assert main(["topo", "--file", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert CONTRACT_KEYS | {CPU_AFFINITY, NUMA_AFFINITY} <= set(data)
    assert GPU_NUMA_ID not in data
    assert data["links"] == truth["links"] and data["nics"] == truth["nic_legend"]
    for item in data["advice"]:
        assert set(item) == {"severity", "code", "message", "hint"}
        assert item["severity"] in ("info", "warn")


def test_cli_text_from_stdin(capsys, monkeypatch):
    import io

    path = next(p for p in TOPO_FILES if p.name.startswith("04"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert main(["topo", "--file", "-"]) == 0
    out = capsys.readouterr().out
    assert "GPU topology from standard input: 8 GPUs, 4 NICs" in out
    assert "mlx5_2" in out and "NV2" in out and "Advice" in out


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "is empty"),
        (b"\n \n", "is empty"),
        (bytes(range(256)) * 40, "no nvidia-smi topo -m matrix"),
        (b"hello\nworld\n", "no nvidia-smi topo -m matrix"),
    ],
)
def test_cli_bad_input_is_exit_2_with_one_line(tmp_path, capsys, content, needle):
    path = tmp_path / "topo.txt"
    path.write_bytes(content)
    assert main(["topo", "--file", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert needle in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err


def test_cli_missing_file_and_directory_are_exit_2(tmp_path, capsys):
    assert main(["topo", "--file", str(tmp_path / "nope.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["topo", "--file", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_cli_without_nvidia_smi_or_nvml_is_exit_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(
        sys.modules, "pynvml", fake.FakeTopoNvml([], init_error=fake.NVMLError_LibraryNotFound)
    )
    # (auto shows the simulated rig the monitor shows instead: see test_rig_in_use)
    assert main(["topo", "--source", "nvml"]) == 1
    err = capsys.readouterr().err
    assert "nvidia-smi is not on PATH" in err and "--file" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_uses_nvml_when_nvidia_smi_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", nvlink_pair_fake())
    assert main(["topo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "nvml" and data["links"] == {"GPU0-GPU1": "NV4"}
    assert data["p2p"] == {"GPU0-GPU1": "OK"}


def test_cli_live_nvidia_smi(tmp_path, capsys, monkeypatch):
    text = render(
        {(0, 1): "PHB"}, 2, affinity={CPU_AFFINITY: ["0-15"] * 2, NUMA_AFFINITY: ["0"] * 2}
    )
    bindir = fake_smi_script(tmp_path, text)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GGML_CUDA_P2P", "0")
    assert main(["topo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "nvidia-smi" and data["links"] == {"GPU0-GPU1": "PHB"}
    codes = {a["code"]: a for a in data["advice"]}
    # The live environment counts: GGML_CUDA_P2P=0 still turns peer access on.
    assert codes["ggml-cuda-p2p-set"]["severity"] == "warn"
    assert main(["topo"]) == 0
    assert "GPU topology from nvidia-smi topo -m: 2 GPUs" in capsys.readouterr().out


def test_cli_sim_profile(capsys):
    assert main(["--source", "sim:mixed-4090-3090", "topo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "sim:mixed-4090-3090" and data["warnings"] == []
    codes = {a["code"]: a for a in data["advice"]}
    assert codes["cuda-device-order"]["severity"] == "warn"
    assert main(["topo", "--source", "sim:16xv100-dgx2"]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "GPU15" in out
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("replay:x.jsonl", "replay"),
        ("bogus", "unknown"),
        # a remote rig's topology is not this machine's nvidia-smi (it was read before)
        ("prom:http://127.0.0.1:9", "Prometheus server holds no topology"),
        ("scrape:http://127.0.0.1:9/metrics", "exporter's /metrics holds no topology"),
    ],
)
def test_cli_sources_topo_cannot_read_are_exit_2(capsys, source, needle):
    assert main(["topo", "--source", source]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["--hosts", "HOSTS", "topo"],
        ["--source", "sim:4xl4,sim:8xh100-sxm", "topo"],
        ["topo", "--json", "--source", "smi:fleet-a,smi:fleet-b"],
    ],
)
def test_cli_topo_of_a_fleet_says_it_reads_one_rig(tmp_path, capsys, argv):
    """--hosts FILE showed a SIMULATED rig (exit 0, the fleet's hosts never asked), and a
    --source list was read as one spec ('unknown simulated profile 4xl4,sim:...'): topo
    reads one rig, and says how to pick one host."""
    hosts = tmp_path / "hosts"
    hosts.write_text("fleet-a\nfleet-b\n")
    assert main([str(hosts) if a == "HOSTS" else a for a in argv]) == 2
    out, err = capsys.readouterr()
    assert "SIMULATED" not in out and len(err.strip().splitlines()) == 1, (out, err)
    assert "topo reads one rig" in err and "--source smi:HOST topo" in err, err

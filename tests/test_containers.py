"""Each GPU process's container: read from fixture /proc trees of docker, podman, Kubernetes,
systemd and slurm layouts (with the runtimes' own metadata), from a real process put in a
real cgroup where this machine allows it, and never an error where nothing can be read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.fake_pynvml import MIB, FakeNvml, make_gpus

from lltui.core.monitor.containers import container_of
from lltui.core.monitor.models import ContainerRef
from lltui.core.monitor.prom_export import rig_families
from lltui.sources.gpu.containers import ContainerReader, hidden_pids_hint, inside_container

FIXTURES = Path(__file__).parent / "fixtures" / "cgroups"
PID = 4242
D = "4f1c9a7e2b3d5c6a8e9f0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e"
P = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b"
K = "2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d"
C = "7f8e9d0c1b2a3f4e5d6c7b8a9f0e1d2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e"

EXPECTED = {
    "docker-systemd": (ContainerRef("docker", id=D, name="vllm-7b"), "docker:vllm-7b"),
    "docker-cgroupfs-v1": (ContainerRef("docker", id=D, name="comfyui"), "docker:comfyui"),
    "podman-rootful": (ContainerRef("podman", id=P, name="llama-podman"), "podman:llama-podman"),
    "k8s-containerd-systemd": (
        ContainerRef(
            "kubernetes",
            id=K,
            name="server",
            pod="llama-serve-7d9f8c-x2k4q",
            namespace="ml",
            pod_uid="3f0c2b1a-7d8e-4f5a-9b6c-1d2e3f4a5b6c",
        ),
        "k8s:ml/llama-serve-7d9f8c-x2k4q",
    ),
    "k8s-cgroupfs-v1": (
        ContainerRef(
            "kubernetes",
            id=C,
            name="jupyter",
            pod="notebook-0",
            namespace="research",
            pod_uid="8a7b6c5d-4e3f-4a1b-9c8d-7e6f5a4b3c2d",
        ),
        "k8s:research/notebook-0",
    ),
    # no kubelet files in this tree: the pod by its uid
    "k8s-crio": (
        ContainerRef("kubernetes", id=K, pod_uid="3f0c2b1a-7d8e-4f5a-9b6c-1d2e3f4a5b6c"),
        "k8s:pod 3f0c2b1a",
    ),
    "systemd-service": (
        ContainerRef("systemd", id="ollama.service", unit="ollama.service"),
        "systemd:ollama.service",
    ),
    "slurm-v2": (
        ContainerRef("slurm", id="123456", name="finetune-8b", job="123456"),
        "slurm:123456 finetune-8b",
    ),
    "slurm-v1": (ContainerRef("slurm", id="777", job="777"), "slurm:777"),
    "user-session": (None, None),
    "host-init": (None, None),
}


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_containers_from_fixture_proc_trees(layout):
    reader = ContainerReader(FIXTURES / layout)
    want, label = EXPECTED[layout]
    got = reader.container(PID, 1_767_000_000.0)
    assert got == want
    assert (got.label if got else None) == label


def test_every_layout_of_the_fixtures_is_tested():
    assert {p.name for p in FIXTURES.iterdir()} == set(EXPECTED)


def test_rootless_podman_names_from_the_owners_own_store(tmp_path):
    import pwd

    root = tmp_path / "tree"
    cgroup = root / "proc" / str(PID) / "cgroup"
    cgroup.parent.mkdir(parents=True)
    cgroup.write_text(
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{P}.scope\n"
    )
    home = pwd.getpwuid(os.getuid()).pw_dir  # the fixture's files are this user's
    store = root / home.lstrip("/") / ".local/share/containers/storage/overlay-containers"
    store.mkdir(parents=True)
    (store / "containers.json").write_text(json.dumps([{"id": P, "names": ["my-llama"]}]))
    assert ContainerReader(root).container(PID).label == "podman:my-llama"


def test_unreadable_or_odd_cgroups_are_no_container_never_an_error(tmp_path):
    root = tmp_path / "tree"
    (root / "proc" / "1").mkdir(parents=True)  # no cgroup file
    (root / "proc" / "2" / "cgroup").mkdir(parents=True)  # a folder where the file should be
    (root / "proc" / "3").mkdir(parents=True)
    (root / "proc" / "3" / "cgroup").write_bytes(b"\xff\xfe garbage\n::\n0::relative\n")
    big = root / "proc" / "4"
    big.mkdir(parents=True)
    (big / "cgroup").write_text("0::/" + "a/" * 100_000 + "\n")  # read only in part
    docker = root / "proc" / "5"
    docker.mkdir(parents=True)
    (docker / "cgroup").write_text(f"0::/system.slice/docker-{D}.scope\n")
    meta = root / "var/lib/docker/containers" / D
    meta.mkdir(parents=True)
    (meta / "config.v2.json").write_text("{not json")  # metadata of another shape: the id alone
    reader = ContainerReader(root)
    for pid in (1, 2, 3, 4, 999):
        assert reader.container(pid) is None
    assert reader.container(5) == ContainerRef("docker", id=D)
    assert ContainerReader(tmp_path / "nowhere").container(PID) is None


def test_a_pid_reused_by_another_process_is_read_anew(tmp_path):
    root = tmp_path / "tree"
    cgroup = root / "proc" / str(PID) / "cgroup"
    cgroup.parent.mkdir(parents=True)
    cgroup.write_text("0::/system.slice/ollama.service\n")
    reader = ContainerReader(root)
    assert reader.container(PID, 100.0).unit == "ollama.service"
    cgroup.write_text("0::/system.slice/vllm.service\n")
    assert reader.container(PID, 100.0).unit == "ollama.service"  # the same process: cached
    assert reader.container(PID, 200.0).unit == "vllm.service"  # started since: another one


def _real_cgroup_dir(name: str) -> Path | None:
    """A new cgroup this machine lets us make (v2's unified tree, else v1's pids one)."""
    for base in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/pids")):
        if not (base / "cgroup.procs").exists():
            continue
        path = base / name
        try:
            path.mkdir()
        except OSError:
            continue
        return path
    return None


def test_a_real_process_in_a_real_cgroup():
    name = f"lltui-test-{os.getpid()}.service"
    group = _real_cgroup_dir(name)
    if group is None:
        pytest.skip("cannot make a cgroup here (not root, or cgroups read-only)")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        try:
            (group / "cgroup.procs").write_text(str(child.pid))
        except OSError as exc:
            pytest.skip(f"cannot move a process into a cgroup here: {exc}")
        got = ContainerReader("/").container(child.pid, time.time())
        assert got == ContainerRef("systemd", id=name, unit=name)
    finally:
        child.kill()
        child.wait()
        for _ in range(50):  # the cgroup empties once the kill is through
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.05)


def test_cgroup_parsing_prefers_the_most_specific():
    text = (
        "1:name=systemd:/system.slice/slurmd.service\n"
        "7:memory:/slurm/uid_0/job_9/step_0/task_0\n"
        f"0::/system.slice/docker-{D}.scope\n"
    )
    assert container_of(text) == ContainerRef("docker", id=D)  # a container beats a job
    assert container_of("0::/system.slice/user@1000.service\n") is not None
    assert (
        container_of("0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.service\n")
        is None
    )
    assert container_of("") is None and container_of("garbage") is None


def test_inside_a_container_is_said_plainly(tmp_path):
    (tmp_path / ".dockerenv").write_text("")
    assert inside_container(tmp_path) == "docker"
    bare = tmp_path / "bare"
    (bare / "proc" / "1").mkdir(parents=True)
    (bare / "proc" / "1" / "cgroup").write_text("0::/init.scope\n")
    assert inside_container(bare) is None
    assert "--pid=host" in hidden_pids_hint("docker")


def test_nvml_pids_this_container_cannot_see_give_one_plain_hint(monkeypatch):
    import lltui.sources.gpu.containers as containers
    from lltui.sources.gpu.host_facts import HostSampler
    from lltui.sources.gpu.nvml import NvmlSource

    gpus = make_gpus(1)
    gpus[0].compute_procs = [(3_999_999, 900 * MIB), (3_999_998, 100 * MIB)]  # no such pids here
    FakeNvml(gpus).install(monkeypatch)
    monkeypatch.setattr(containers, "inside_container", lambda root="/": "docker")
    src = NvmlSource(host=HostSampler(), env={})
    src.open()
    try:
        sample = src.poll()
    finally:
        src.close()
    (hint,) = [h for h in sample.info.hints if "inside a container" in h]
    assert "host pids" in hint and "--pid=host" in hint
    assert [p.pid for p in sample.gpus[0].processes] == [3_999_999, 3_999_998]


def test_own_processes_get_their_container_start_and_the_exporter_labels(monkeypatch):
    from lltui.sources.gpu.host_facts import HostSampler
    from lltui.sources.gpu.nvml import NvmlSource

    me = os.getpid()
    gpus = make_gpus(1)
    gpus[0].compute_procs = [(me, 900 * MIB)]
    FakeNvml(gpus).install(monkeypatch)
    tree = FIXTURES / "docker-systemd"
    reader = ContainerReader(tree)
    # this process, as if the fixture tree's docker container held it
    monkeypatch.setattr(reader, "_path", lambda *parts: tree.joinpath(
        *(str(PID) if p == str(me) else p.lstrip("/") for p in parts)))  # fmt: skip
    src = NvmlSource(host=HostSampler(reader), env={})
    src.open()
    try:
        sample = src.poll()
    finally:
        src.close()
    (proc,) = sample.gpus[0].processes
    assert proc.container is not None and proc.container.label == "docker:vllm-7b"
    assert proc.started is not None and abs(proc.started - time.time()) < 24 * 3600 * 365
    fam = next(
        f for f in rig_families(sample, host="h") if f.name == "lltui_gpu_process_memory_bytes"
    )
    labels = dict(fam.samples[0][0])
    assert labels["container"] == "docker:vllm-7b" and labels["container_runtime"] == "docker"

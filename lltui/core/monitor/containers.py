"""Which container (or systemd unit, or slurm job) a process runs in, from ``/proc/PID/cgroup``.

Pure: the text of a cgroup file in, a :class:`ContainerRef` (without the runtime's own name
for it, which :mod:`lltui.sources.gpu.containers` reads where it can) or None out. Both
cgroup versions are read: v2's single ``0::/path`` line, and v1's per-controller lines, of
which the most specific path wins. The layouts are those the runtimes write:

* docker: ``/docker/ID`` (cgroupfs driver), ``/system.slice/docker-ID.scope`` (systemd)
* podman: ``/machine.slice/libpod-ID.scope`` (rootful), ``.../user@UID.service/user.slice/
  libpod-ID.scope`` (rootless), with ``/container`` below it under ``--cgroups=split``
* Kubernetes: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podUID.slice/
  cri-containerd-ID.scope`` (systemd driver), ``/kubepods/burstable/podUID/ID`` (cgroupfs);
  ``crio-ID.scope`` for CRI-O, ``docker-ID.scope`` for the old dockershim
* containerd alone: ``nerdctl-ID.scope``; LXC: ``/lxc.payload.NAME``, ``/lxc/NAME``
* slurm: ``/system.slice/slurmstepd.scope/job_N/step_S/...`` (v2), ``/slurm/uid_U/job_N/...`` (v1)
* a systemd service: ``/system.slice/NAME.service`` (user sessions and slices are not units
  worth a column: they are left out)
"""

from __future__ import annotations

import re

from lltui.core.monitor.models import ContainerRef

MAX_CGROUP_BYTES = 64 * 1024  # a cgroup file is a few hundred bytes; never read more

_ID = r"[0-9a-f]{64}"
_SCOPED = re.compile(
    rf"(?:^|/)(?P<rt>docker|libpod|cri-containerd|crio|nerdctl)-(?P<id>{_ID})\.scope(?:/|$)"
)
_DOCKER_FS = re.compile(rf"(?:^|/)docker/(?P<id>{_ID})(?:/|$)")
_KUBE_POD = re.compile(r"(?:^|/)kubepods[^/]*?-?pod(?P<uid>[0-9a-f_\-]{32,36})(?:\.slice)?(?:/|$)")
_KUBE_POD_FS = re.compile(r"(?:^|/)kubepods(?:/[a-z]+)?/pod(?P<uid>[0-9a-f\-]{36})(?:/|$)")
_KUBE_CONTAINER_FS = re.compile(rf"/pod[0-9a-f\-]{{36}}/(?P<id>{_ID})(?:/|$)")
_LXC = re.compile(r"(?:^|/)(?:lxc\.payload\.|lxc/)(?P<name>[A-Za-z0-9_.\-]+)")
_SLURM_JOB = re.compile(
    r"(?:^|/)(?:slurm[^/]*|slurmstepd\.scope)/(?:uid_\d+/)?job_(?P<job>\d+)(?:/|$)"
)
_SERVICE = re.compile(r"(?:^|/)(?P<unit>[A-Za-z0-9@_.:\\\-]+\.service)(?:/|$)")

_RUNTIMES = {
    "docker": "docker",
    "libpod": "podman",
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "nerdctl": "containerd",
}


def cgroup_paths(text: str) -> list[str]:
    """The paths of a ``/proc/PID/cgroup`` file (v2's one, or v1's one per hierarchy)."""
    paths = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2].startswith("/"):
            paths.append(parts[2])
    return paths


def container_of(text: str) -> ContainerRef | None:
    """The container, pod, slurm job or systemd service a process's cgroup file names; None
    for a process of the host itself (or a file that names none)."""
    paths = cgroup_paths(text)
    # the most specific first: a container beats a job, a job beats a unit
    for read in (_kubernetes, _container, _slurm, _service):
        for path in sorted(paths, key=len, reverse=True):
            found = read(path)
            if found is not None:
                return found
    return None


def _kubernetes(path: str) -> ContainerRef | None:
    pod = _KUBE_POD.search(path) or _KUBE_POD_FS.search(path)
    if pod is None:
        return None
    uid = pod.group("uid").replace("_", "-")  # the systemd driver writes dashes as _
    scoped = _SCOPED.search(path)
    plain = _KUBE_CONTAINER_FS.search(path)
    cid = scoped.group("id") if scoped else plain.group("id") if plain else None
    # the pod's name and namespace come from the kubelet's files, by this uid
    return ContainerRef(runtime="kubernetes", id=cid, pod_uid=uid)


def _container(path: str) -> ContainerRef | None:
    scoped = _SCOPED.search(path)
    if scoped is not None:
        return ContainerRef(runtime=_RUNTIMES[scoped.group("rt")], id=scoped.group("id"))
    docker = _DOCKER_FS.search(path)
    if docker is not None:
        return ContainerRef(runtime="docker", id=docker.group("id"))
    lxc = _LXC.search(path)
    if lxc is not None:
        return ContainerRef(runtime="lxc", id=lxc.group("name"), name=lxc.group("name"))
    return None


def _slurm(path: str) -> ContainerRef | None:
    job = _SLURM_JOB.search(path)
    if job is None:
        return None
    return ContainerRef(runtime="slurm", id=job.group("job"), job=job.group("job"))


def _service(path: str) -> ContainerRef | None:
    if "/user.slice/" in path or path.startswith("/user.slice"):
        return None  # a user's own session or app: not a unit to name
    found = None
    for m in _SERVICE.finditer(path):
        found = m.group("unit")  # the innermost service
    if found is None:
        return None
    return ContainerRef(runtime="systemd", id=found, unit=found)

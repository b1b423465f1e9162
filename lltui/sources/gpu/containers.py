"""A process's container, read from ``/proc/PID/cgroup`` and the runtime's own metadata.

What the cgroup path says is parsed in :mod:`lltui.core.monitor.containers`; the names come
from the runtimes' files where this user may read them:

* docker: ``/var/lib/docker/containers/ID/config.v2.json`` (``Name``)
* podman: ``overlay-containers/containers.json`` under ``/var/lib/containers/storage``
  (rootful) or the owner's ``~/.local/share/containers/storage`` (rootless)
* Kubernetes: the kubelet's ``/var/log/pods/NAMESPACE_POD_UID`` folders and the
  ``/var/log/containers/POD_NAMESPACE_CONTAINER-ID.log`` links
* slurm: the job's name from the process's own ``SLURM_JOB_NAME`` (``/proc/PID/environ``)

Everything is read under ``root`` (``/``; tests give a fixture tree), bounded in size, and
cached: a container's name by its id, a process's container by its pid and start time. A
file that cannot be read leaves the name out, and an unreadable cgroup is no container:
never an error.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from lltui.core.monitor.containers import MAX_CGROUP_BYTES, container_of
from lltui.core.monitor.models import ContainerRef

MAX_METADATA_BYTES = 4 * 1024 * 1024
MAX_ENVIRON_BYTES = 256 * 1024
CACHE_MAX = 4096


def _read(path: Path, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except (OSError, ValueError):
        return None


class ContainerReader:
    """Finds each process's container; one per source, its caches bounded."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)
        self._by_process: dict[tuple[int, float | None], ContainerRef | None] = {}
        self._names: dict[tuple[str, str], ContainerRef] = {}
        self._pods: dict[str, tuple[str, str]] | None = None  # uid -> (namespace, pod)

    def _path(self, *parts: str) -> Path:
        return self.root.joinpath(*(p.lstrip("/") for p in parts))

    def container(self, pid: int, started: float | None = None) -> ContainerRef | None:
        """The container of ``pid`` (started at ``started``, so a reused pid is read anew)."""
        key = (pid, started)
        if key in self._by_process:
            return self._by_process[key]
        raw = _read(self._path("proc", str(pid), "cgroup"), MAX_CGROUP_BYTES)
        found = None
        if raw is not None:
            ref = container_of(raw.decode("utf-8", errors="replace"))
            found = self._named(ref, pid) if ref is not None else None
        if len(self._by_process) >= CACHE_MAX:
            self._by_process.clear()
        self._by_process[key] = found
        return found

    def forget(self, alive: set[int]) -> None:
        """Drop what is cached of processes no longer listed."""
        for key in [k for k in self._by_process if k[0] not in alive]:
            del self._by_process[key]

    # -- names from the runtimes -----------------------------------------------------------
    def _named(self, ref: ContainerRef, pid: int) -> ContainerRef:
        if ref.runtime == "slurm":
            return self._slurm(ref, pid)  # per process: jobs come and go under one id space
        cache_key = (ref.runtime, ref.id or ref.pod_uid or "")
        known = self._names.get(cache_key)
        if known is not None:
            return known
        named = ref
        try:
            if ref.runtime == "docker":
                named = self._docker(ref)
            elif ref.runtime == "podman":
                named = self._podman(ref, pid)
            elif ref.runtime == "kubernetes":
                named = self._kubernetes(ref)
        except (ValueError, TypeError, KeyError, AttributeError):
            named = ref  # metadata of a shape we do not know: the id alone
        if len(self._names) >= CACHE_MAX:
            self._names.clear()
        # a name that could not be read now may be readable later: cache only a find
        if named is not ref:
            self._names[cache_key] = named
        return named

    def _docker(self, ref: ContainerRef) -> ContainerRef:
        raw = _read(
            self._path("var/lib/docker/containers", ref.id or "", "config.v2.json"),
            MAX_METADATA_BYTES,
        )
        if raw is None:
            return ref
        name = json.loads(raw).get("Name")
        return replace(ref, name=name.lstrip("/")) if isinstance(name, str) and name else ref

    def _podman(self, ref: ContainerRef, pid: int) -> ContainerRef:
        stores = [self._path("var/lib/containers/storage")]
        home = self._owner_home(pid)
        if home is not None:
            stores.append(self._path(home, ".local/share/containers/storage"))
        for store in stores:
            raw = _read(store / "overlay-containers" / "containers.json", MAX_METADATA_BYTES)
            if raw is None:
                continue
            for entry in json.loads(raw):
                if isinstance(entry, dict) and entry.get("id") == ref.id:
                    names = entry.get("names") or []
                    if names and isinstance(names[0], str):
                        return replace(ref, name=names[0])
        return ref

    def _owner_home(self, pid: int) -> str | None:
        try:
            import pwd

            uid = self._path("proc", str(pid)).stat().st_uid
            return pwd.getpwuid(uid).pw_dir
        except (OSError, KeyError, ImportError):
            return None

    def _kubernetes(self, ref: ContainerRef) -> ContainerRef:
        pods = self._pod_names()
        found = pods.get(ref.pod_uid or "")
        if found is None:
            self._pods = None  # a pod started since: look again next time
            return ref
        namespace, pod = found
        name = self._k8s_container_name(ref.id, pod, namespace) if ref.id else None
        return replace(ref, namespace=namespace, pod=pod, name=name)

    def _pod_names(self) -> dict[str, tuple[str, str]]:
        """Pod uid -> (namespace, name), from the kubelet's per-pod log folders."""
        if self._pods is None:
            pods: dict[str, tuple[str, str]] = {}
            try:
                entries = os.listdir(self._path("var/log/pods"))
            except OSError:
                entries = []
            for entry in entries[:CACHE_MAX]:
                parts = entry.split("_")
                if len(parts) == 3:
                    pods[parts[2]] = (parts[0], parts[1])
            self._pods = pods
        return self._pods

    def _k8s_container_name(self, cid: str | None, pod: str, namespace: str) -> str | None:
        """The container's name in its pod, from ``/var/log/containers/POD_NS_NAME-ID.log``."""
        prefix = f"{pod}_{namespace}_"
        suffix = f"-{cid}.log"
        try:
            entries = os.listdir(self._path("var/log/containers"))
        except OSError:
            return None
        named = (e for e in entries if e.startswith(prefix) and e.endswith(suffix))
        return next((e[len(prefix) : -len(suffix)] or None for e in named), None)

    def _slurm(self, ref: ContainerRef, pid: int) -> ContainerRef:
        raw = _read(self._path("proc", str(pid), "environ"), MAX_ENVIRON_BYTES)
        if raw is None:
            return ref
        for item in raw.split(b"\0"):
            if item.startswith(b"SLURM_JOB_NAME="):
                name = item.split(b"=", 1)[1].decode("utf-8", errors="replace")
                return replace(ref, name=name[:64] or None)
        return ref


def inside_container(root: str | os.PathLike[str] = "/") -> str | None:
    """The runtime lltui itself runs under (docker, podman, a Kubernetes pod, a container),
    or None on a host."""
    base = Path(root)
    if (base / ".dockerenv").exists():
        return "docker"
    if (base / "run/.containerenv").exists():
        return "podman"
    if os.environ.get("KUBERNETES_SERVICE_HOST") and str(base) == "/":
        return "a Kubernetes pod"
    raw = _read(base / "proc/1/cgroup", MAX_CGROUP_BYTES)
    ref = container_of(raw.decode("utf-8", errors="replace")) if raw is not None else None
    if ref is not None and ref.runtime not in ("systemd", "slurm"):
        return ref.runtime
    return None


def hidden_pids_hint(runtime: str) -> str:
    """What to say when NVML lists processes this container cannot see."""
    how = {
        "docker": "docker run --pid=host",
        "podman": "podman run --pid=host",
        "a Kubernetes pod": "hostPID: true in the pod spec",
    }.get(runtime, "the host's pid namespace")
    return (
        f"lltui runs inside a container ({runtime}): NVML reports the GPU processes by their "
        "host pids, which this container cannot see, so their names, users and containers "
        f"are unknown here; run lltui on the host, or with {how}"
    )

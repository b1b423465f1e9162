"""vGPU: how a GPU is virtualised (read once), and on a vGPU host the vGPUs it serves to
virtual machines: ``nvmlDeviceGetActiveVgpus`` (on the link TTL, as VMs come and go), each
one's type (``nvmlVgpuInstanceGetType``, ``nvmlVgpuTypeGetName``,
``nvmlVgpuTypeGetFramebufferSize``), VM (``nvmlVgpuInstanceGetVmID``) and framebuffer in use
(``nvmlVgpuInstanceGetFbUsage``, on the slow TTL). A GPU in another mode costs no call per
tick."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from lltui.core.monitor.models import VgpuInstance
from lltui.sources.gpu.nvml.calls import GpuLost, NvmlCalls
from lltui.sources.gpu.nvml.codes import ERR_GPU_IS_LOST, error_code, text
from lltui.sources.gpu.nvml.state import GpuState

# nvmlGpuVirtualizationMode_t
MODES = {0: "none", 1: "passthrough", 2: "vgpu", 3: "host-vgpu", 4: "host-vsga"}
HOST_VGPU = "host-vgpu"
MAX_VGPUS = 64


def virtualization_mode(value: Any) -> str | None:
    return MODES.get(int(value))


def _call(calls: NvmlCalls, name: str, *args: Any) -> Any:
    fn = getattr(calls.nv, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception as exc:
        if error_code(exc) == ERR_GPU_IS_LOST:
            raise GpuLost() from None
        return None


def read_vgpus(calls: NvmlCalls, g: GpuState) -> None:
    """The vGPUs a host GPU serves now (their types, VMs and framebuffer)."""
    active = _call(calls, "nvmlDeviceGetActiveVgpus", g.handle) or []
    found = []
    for instance in list(active)[:MAX_VGPUS]:
        vid = int(getattr(instance, "value", instance))
        type_id = _call(calls, "nvmlVgpuInstanceGetType", vid)
        name = _call(calls, "nvmlVgpuTypeGetName", type_id) if type_id is not None else None
        size = (
            _call(calls, "nvmlVgpuTypeGetFramebufferSize", type_id) if type_id is not None else None
        )
        vm = _call(calls, "nvmlVgpuInstanceGetVmID", vid)
        used = _call(calls, "nvmlVgpuInstanceGetFbUsage", vid)
        found.append(
            VgpuInstance(
                instance=vid,
                type_name=text(name) if name is not None else f"type {type_id}",
                vm=text(vm[0]) if vm else None,
                memory_total=int(size) if size is not None else None,
                memory_used=int(used) if used is not None else None,
            )
        )
    g.vgpus = tuple(found)


def read_vgpu_memory(calls: NvmlCalls, g: GpuState) -> None:
    """Each vGPU's framebuffer in use, on the slow TTL."""
    out = []
    for v in g.vgpus:
        used = _call(calls, "nvmlVgpuInstanceGetFbUsage", v.instance)
        out.append(replace(v, memory_used=int(used)) if used is not None else v)
    g.vgpus = tuple(out)

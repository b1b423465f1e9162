"""MIG instances (and vGPUs) as devices under their GPU: read through the fake NVML's MIG
calls (shaped after nvidia-ml-py's: nvmlDeviceGetMigMode, GetMaxMigDeviceCount,
GetMigDeviceHandleByIndex, GetGpuInstanceId, GetComputeInstanceId, GetAttributes and
GetMemoryInfo on a MIG handle) and vGPU calls, shown in gpus --json, the exporter, the monitor
and fit's --gpus."""

from __future__ import annotations

import json

import pytest
from support.fake_pynvml import (
    MIB,
    NVML_DEVICE_MIG_ENABLE,
    NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU,
    NVML_GPU_VIRTUALIZATION_MODE_VGPU,
    FakeMig,
    FakeMigHandle,
    FakeNvml,
    FakeVgpu,
    c_nvmlDeviceAttributes,
    make_gpus,
)
from support.nvml_helpers import close_nvml_sources  # noqa: F401 (an autouse fixture)

from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text
from lltui.core.monitor.prom_export import rig_families
from lltui.services.devices import DeviceSpecError, devices_from_sample
from lltui.sources.gpu.nvml import DEFAULT_LINK_TTL_S, NvmlSource
from lltui.sources.gpu.sim import StepClock

A100 = "NVIDIA A100-SXM4-80GB"


def mig_gpus() -> list:
    gpus = make_gpus(2, name=A100, compute_capability=(8, 0))
    g = gpus[0]
    g.memory_total = 81920 * MIB
    g.mig_mode = NVML_DEVICE_MIG_ENABLE
    g.mig_slots = [
        FakeMig("MIG-aaaaaaaa-1111-2222-3333-444444444444", 1, 0, f"{A100} MIG 3g.40gb", 40192,
                memory_used=21000 * MIB, slices=3, sm_count=42),
        None,  # an empty slot: NOT_FOUND, as the driver answers
        FakeMig("MIG-bbbbbbbb-1111-2222-3333-444444444444", 5, 0, f"{A100} MIG 2g.20gb", 19968,
                memory_used=512 * MIB, slices=2, sm_count=28),
        FakeMig("MIG-cccccccc-1111-2222-3333-444444444444", 13, 0, f"{A100} MIG 1g.10gb", 9856,
                slices=1, sm_count=14),
    ]  # fmt: skip
    g.compute_procs = [(51000, 20000 * MIB), (51001, 400 * MIB)]
    g.proc_instances = {51000: (1, 0), 51001: (5, 0)}
    gpus[1].mig_mode = 0  # MIG-capable, off
    return gpus


def open_source(monkeypatch, gpus=None) -> tuple[FakeNvml, NvmlSource, StepClock]:
    fake = FakeNvml(gpus or mig_gpus()).install(monkeypatch)
    clock = StepClock(1000.0, step=0.0)
    src = NvmlSource(clock=clock, env={})
    src.open()
    return fake, src, clock


def test_mig_instances_are_devices_under_their_gpu(monkeypatch):
    _fake, src, _clock = open_source(monkeypatch)
    sample = src.poll()
    g, plain = sample.gpus
    assert g.info.mig_mode is True and plain.info.mig_mode is False and plain.mig == ()
    assert [(m.profile, m.gpu_instance_id, m.compute_instance_id) for m in g.mig] == [
        ("3g.40gb", 1, 0), ("2g.20gb", 5, 0), ("1g.10gb", 13, 0),
    ]  # fmt: skip
    first = g.mig[0]
    assert first.uuid.startswith("MIG-aaaaaaaa") and first.memory_total == 40192 * MIB
    assert first.memory_used == 21000 * MIB and first.sm_count == 42 and first.slices == 3
    assert all(m.util_gpu is None for m in g.mig)  # NVML gives no utilisation per instance
    procs = {p.pid: (p.gpu_instance_id, p.compute_instance_id) for p in g.processes}
    assert procs == {51000: (1, 0), 51001: (5, 0)}
    assert all(p.gpu_instance_id is None for p in plain.processes)


def test_a_gpu_without_mig_costs_no_mig_call_per_tick(monkeypatch):
    fake, src, clock = open_source(monkeypatch, make_gpus(2))  # GeForce: NOT_SUPPORTED
    sample = src.poll()
    assert all(g.info.mig_mode is None and g.mig == () for g in sample.gpus)
    clock.advance(DEFAULT_LINK_TTL_S)
    fake.reset_counts()
    src.poll()
    called = fake.functions_called(0)
    assert not [name for name in called if "Mig" in name or "Instance" in name]


def test_instances_made_or_destroyed_show_on_the_link_ttl(monkeypatch):
    fake, src, clock = open_source(monkeypatch)
    assert len(src.poll().gpus[0].mig) == 3
    fake.gpus[0].mig_slots[3] = None  # `nvidia-smi mig -dci/-dgi`: no reset needed
    clock.advance(5.0)
    assert len(src.poll().gpus[0].mig) == 3  # not asked again yet
    clock.advance(DEFAULT_LINK_TTL_S)
    assert [m.profile for m in src.poll().gpus[0].mig] == ["3g.40gb", "2g.20gb"]


def test_mig_memory_follows_on_the_slow_ttl(monkeypatch):
    fake, src, clock = open_source(monkeypatch)
    src.poll()
    fake.gpus[0].mig_slots[0].memory_used = 30000 * MIB  # type: ignore[union-attr]
    clock.advance(5.0)
    assert src.poll().gpus[0].mig[0].memory_used == 30000 * MIB


def test_the_fake_answers_as_the_real_binding_does(monkeypatch):
    fake = FakeNvml(mig_gpus()).install(monkeypatch)
    nv = fake.module
    nv.nvmlInit()
    parent = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceGetMigMode(parent) == [1, 1]
    handle = nv.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert isinstance(handle, FakeMigHandle)
    assert nv.nvmlDeviceIsMigDeviceHandle(handle).value == 1  # a c_uint, as the binding gives
    attrs = nv.nvmlDeviceGetAttributes(handle)
    assert isinstance(attrs, c_nvmlDeviceAttributes) and attrs.memorySizeMB == 40192
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetUtilizationRates(handle)
    assert nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle).index == 0
    nv.nvmlShutdown()


def test_gpus_json_text_and_the_exporter_list_the_instances(monkeypatch):
    _fake, src, _clock = open_source(monkeypatch)
    sample = src.poll()
    data = json.loads(json.dumps(rig_to_json(sample)))
    mig = data["gpus"][0]["mig"]
    assert [m["profile"] for m in mig] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    assert mig[0]["processes"] == [51000] and mig[1]["processes"] == [51001]
    assert mig[2]["processes"] == [] and data["gpus"][0]["mig_mode"] is True
    assert data["gpus"][0]["processes"][0]["gpu_instance_id"] == 1
    text = rig_to_text(sample)
    assert "MIG 3g.40gb" in text and "GI 1 CI 0" in text and "1 process " in text
    families = {f.name: f for f in rig_families(sample, host="h")}
    used = families["lltui_mig_memory_used_bytes"]
    by_profile = {dict(labels)["profile"]: value for labels, value in used.samples}
    assert by_profile["3g.40gb"] == 21000 * MIB
    labels = dict(used.samples[0][0])
    assert labels["mig_uuid"].startswith("MIG-") and labels["gpu"] == "0"
    assert labels["gpu_instance"] == "1" and labels["compute_instance"] == "0"


def test_fit_gpus_takes_mig_profiles_and_slices(monkeypatch):
    spec = parse_gpus_spec("a100 mig 3g.40gb,2xH100:1g.10gb")
    assert [(d.name, d.description, d.total_bytes) for d in spec.devices] == [
        ("CUDA0", f"{A100} MIG 3g.40gb", 40 * 10**9),
        ("CUDA1", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * 10**9),
        ("CUDA2", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * 10**9),
    ]
    _fake, src, _clock = open_source(monkeypatch)
    sample = src.poll()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # a GPU in MIG mode is its first slice to CUDA; the other GPU stays a GPU
    devices = devices_from_sample(sample)
    assert [(d.name, d.description) for d in devices] == [
        ("CUDA0", A100),
        ("CUDA1", f"{A100} MIG 3g.40gb"),
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-bbbbbbbb-1111-2222-3333-444444444444")
    (only,) = devices_from_sample(sample)
    assert only.name == "CUDA0" and only.total_bytes == 19968 * MIB
    assert only.free_bytes == (19968 - 512) * MIB and "MIG 2g.20gb" in only.description
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-ffffffff-0000")
    with pytest.raises(DeviceSpecError, match="no such MIG slice here"):
        devices_from_sample(sample)


def test_fit_cli_with_a_mig_profile(tmp_path, capsys):
    from support.gguf_factory import llama_spec, write_model

    from lltui.cli import main

    model = tmp_path / "tiny.gguf"
    write_model(model, llama_spec())
    assert main(["fit", str(model), "--gpus", "1g.6gb", "--json", "-c", "2048"]) == 0
    data = json.loads(capsys.readouterr().out)
    cuda = [d for d in data["devices"] if d["kind"] == "cuda"]
    assert len(cuda) == 1 and cuda[0]["free_bytes"] == 6 * 10**9
    assert cuda[0]["description"] == "NVIDIA A30 MIG 1g.6gb" and cuda[0]["fits"] is True


def test_a_vgpu_host_lists_the_vgpus_it_serves(monkeypatch):
    gpus = make_gpus(2, name=A100, compute_capability=(8, 0))
    host = gpus[0]
    host.virtualization_mode = NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU
    host.vgpus = [
        FakeVgpu(3251634190, 461, "GRID A100-4C", "vm-train-01", 4096, 1500 * MIB),
        FakeVgpu(3251634191, 462, "GRID A100-8C", "vm-infer-02", 8192, 6000 * MIB),
    ]
    gpus[1].virtualization_mode = NVML_GPU_VIRTUALIZATION_MODE_VGPU  # as a VM sees its vGPU
    fake, src, clock = open_source(monkeypatch, gpus)
    sample = src.poll()
    g, guest = sample.gpus
    assert g.info.virtualization == "host-vgpu" and guest.info.virtualization == "vgpu"
    assert [(v.type_name, v.vm, v.memory_total, v.memory_used) for v in g.vgpus] == [
        ("GRID A100-4C", "vm-train-01", 4096 * MIB, 1500 * MIB),
        ("GRID A100-8C", "vm-infer-02", 8192 * MIB, 6000 * MIB),
    ]
    assert guest.vgpus == ()
    host.vgpus[0].fb_used = 2000 * MIB
    clock.advance(5.0)  # framebuffer use on the slow TTL
    assert src.poll().gpus[0].vgpus[0].memory_used == 2000 * MIB
    data = rig_to_json(sample)
    assert data["gpus"][0]["vgpus"][1]["vm"] == "vm-infer-02"
    fams = {f.name: f for f in rig_families(sample, host="h")}
    used = fams["lltui_vgpu_memory_used_bytes"]
    assert {dict(labels)["vm"]: value for labels, value in used.samples} == {
        "vm-train-01": 1500 * MIB,
        "vm-infer-02": 6000 * MIB,
    }
    fake.reset_counts()
    clock.advance(1.0)
    src.poll()  # a fast tick asks nothing of the vGPUs
    assert not [f for f in fake.functions_called(0) if "Vgpu" in f]


def test_a_mig_profile_is_a_slice_of_its_card(tmp_path, capsys):
    """--gpus 3g.40gb (a profile of the A100 80GB and the H100 80GB alike) was priced as an
    RTX 3090, and a local slice (NVML's 'NVIDIA A100-SXM4-80GB MIG 3g.40gb') as no card the
    catalog knew: a slice is now its share of its card, and a profile of several cards is
    refused, naming them."""
    from support import gguf_factory as gf

    from lltui.cli import main
    from lltui.core.hardware.gpus import find_gpu

    card = find_gpu("H100")
    part = find_gpu("NVIDIA H100 80GB HBM3 MIG 3g.40gb")
    assert card is not None and part is not None
    assert part.bandwidth_gbs == card.bandwidth_gbs * 40 / 80
    assert part.fp16_tflops == card.fp16_tflops * 3 / 7
    assert find_gpu(f"{A100} MIG 3g.40gb") == find_gpu("a100 3g.40gb") != part
    assert find_gpu("NVIDIA A30 MIG 1g.6gb").int8_tops == find_gpu("A30").int8_tops / 4
    # a slice with the media engines is the same size (NVML: 'MIG 1g.10gb+me')
    assert find_gpu("NVIDIA H100 80GB HBM3 MIG 3g.40gb+me") == part
    (model,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    assert main(["fit", str(model), "--gpus", "3g.40gb"]) == 2
    err = capsys.readouterr().err.strip()
    assert "3g.40gb is a MIG profile of 8 GPUs (" in err and "H100 80GB HBM3" in err
    assert err.endswith("name the card, e.g. 'A100 80GB PCIe MIG 3g.40gb'"), err
    assert main(["fit", str(model), "--gpus", "H100 MIG 3g.40gb"]) == 0
    out = capsys.readouterr().out
    assert "speed note: CUDA0" not in out  # no other card's numbers assumed
    assert "\nCUDA0 MIG 3g.40gb H100 80G " in out  # its profile before the card, not cut off
    for gpus, said in [
        ("A100-40GB MIG 3g.40gb", "its profiles: 1g.5gb, 1g.10gb, 2g.10gb, 3g.20gb"),
        ("4090 MIG 1g.10gb", "it has no MIG profile this knows"),
        ("2g.30gb", "no GPU this knows has the MIG profile 2g.30gb"),
    ]:
        assert main(["fit", str(model), "--gpus", gpus]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err

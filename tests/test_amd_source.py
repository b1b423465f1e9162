"""AMD GPUs: the ``amd`` source on recorded amd-smi / rocm-smi output (tests/fixtures/amd,
see its README), on a function-level fake of the ``amdsmi`` binding, and over ssh; the
kernel's fdinfo for per-process VRAM; ``auto`` and a host with NVIDIA and AMD GPUs."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from support.fake_amdsmi import (
    BINDING_6_0,
    DRIVER_NOT_LOADED,
    GIB,
    NO_PERM,
    NOT_SUPPORTED,
    FakeAmdSmi,
    mi300x,
    rx7900xtx,
)

from lltui.core.monitor.alerts import AlertTracker
from lltui.core.monitor.amd_fdinfo import memory_by_gpu, parse_fdinfo
from lltui.core.monitor.amd_smi_json import (
    AmdJsonError,
    read_processes,
    read_rig,
    read_samples,
    sample_of,
)
from lltui.core.monitor.amd_values import load_json, pcie_gen, to_bytes
from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text
from lltui.core.monitor.models import GpuStatic, RigInfo, RigSample, SourceUnavailable
from lltui.core.monitor.prom import GPU_METRICS, Series
from lltui.core.monitor.prom_export import rig_families
from lltui.core.monitor.prom_import import rigs_from_series
from lltui.core.monitor.record import sample_from_dict, sample_to_dict
from lltui.core.monitor.rocm_smi_json import read_cards
from lltui.services.devices import devices_from_sample
from lltui.sources.gpu.amd.binding import AmdSmiSource
from lltui.sources.gpu.amd.cli import AmdCliSource
from lltui.sources.gpu.amd.fdinfo import read_drm_processes
from lltui.sources.gpu.amd.source import AmdSource
from lltui.sources.gpu.combined import CombinedSource
from lltui.sources.gpu.host_facts import HostSampler
from lltui.sources.gpu.kinds import open_source, parse_source_spec
from lltui.sources.gpu.sim import SimSource
from lltui.sources.gpu.smi import CommandResult

FIX = Path(__file__).parent / "fixtures" / "amd"


def fixture(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


class NoHost:
    """A host sampler that reads nothing (the tests' processes are not on this host)."""

    def sample(self) -> Any:
        from lltui.core.monitor.models import HostSample

        return HostSample(hostname="box")

    def enrich(self, procs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(procs)


NO_HOST = cast(HostSampler, NoHost())


# --- recorded amd-smi output -------------------------------------------------------------------


def test_amd_smi_static_of_an_mi210_in_the_gpu_data_form() -> None:
    rig = read_rig(None, fixture("amd-smi/static-mi210-gpu_data.json"))
    (g,) = rig.statics
    assert (g.name, g.gfx_target, g.vendor) == ("AMD Instinct MI210", "gfx90a", "amd")
    assert g.memory_total == 65520 * 1024 * 1024  # "65520 MB" is MiB, as amd-smi means it
    assert (g.pcie_gen_max, g.pcie_width_max) == (4, 16)  # 16 GT/s
    assert (g.power_limit_default_w, g.power_limit_max_w) == (300.0, 300.0)
    assert g.mem_bus_width_bits == 4096 and g.vbios == "Mi200 pcie"
    assert rig.driver_version and rig.driver_version.startswith("Linuxversion6.14")


def test_amd_smi_metric_with_units_reads_power_and_throttle() -> None:
    (g,) = read_rig(None, fixture("amd-smi/static-mi210-gpu_data.json")).statics
    samples = read_samples(fixture("amd-smi/metric-power-rocm6.1.0.json"), [g])
    s = samples[0]
    assert s.power_w == 10.0 and s.throttle_reasons == ()  # UNTHROTTLED
    assert s.power_limit_w == 300.0  # the static cap where the metric has none
    assert s.memory_used is None and s.temp_c is None  # `metric -p` printed power only


def test_amd_smi_process_list_of_rocm_6_2() -> None:
    procs = read_processes(fixture("amd-smi/process-2procs-rocm6.2.json"))
    assert [(p.pid, p.name, p.used_memory) for p in procs[0]] == [
        (420157, "TransferBench", 0),
        (420315, "rvs", 0),
    ]


def test_amd_smi_list_gives_uuid_and_bus_id_older_static_lacks() -> None:
    listing = json.dumps([{"gpu": 0, "bdf": "0000:05:00.0", "uuid": "afff74a1-0000-1000"}])
    rig = read_rig(listing, fixture("amd-smi/static-mi210-gpu_data.json"))
    assert rig.statics[0].uuid == "afff74a1-0000-1000"
    assert rig.statics[0].pci_bus_id == "00000000:05:00.0"  # NVML's 8-digit domain


def v(value: Any, unit: str) -> dict[str, Any]:
    """A value as amd-smi 6.1 on prints it."""
    return {"value": value, "unit": unit}


# the keys of amd-smi 6.3's `metric --json` (amdsmi_cli/amdsmi_commands.py), every value set
METRIC_63: dict[str, Any] = {
    "gpu": 0,
    "usage": {"gfx_activity": v(87, "%"), "umc_activity": v(41, "%")},
    "power": {"socket_power": v(542, "W"), "throttle_status": "UNTHROTTLED"},
    "clock": {"gfx_0": {"clk": v(2100, "MHz")}, "mem_0": {"clk": v(1300, "MHz")}},
    "temperature": {"edge": "N/A", "hotspot": v(71, "C"), "mem": v(58, "C")},
    "pcie": {"width": 16, "speed": v(32, "GT/s"), "bandwidth": v(8000, "Mb/s")},
    "ecc": {
        "total_correctable_count": 3,
        "total_uncorrectable_count": 0,
        "total_deferred_count": 1,
    },
    "fan": {"speed": "N/A", "max": "N/A", "rpm": "N/A", "usage": "N/A"},
    "energy": {"total_energy_consumption": v(123.5, "J")},
    "mem_usage": {
        "total_vram": v(196592, "MB"),
        "used_vram": v(121344, "MB"),
        "free_vram": v(75248, "MB"),
        "total_gtt": v(64357, "MB"),
        "used_gtt": v(65, "MB"),
    },
    "throttle": {
        "ppt_violation_status": "ACTIVE",
        "socket_thermal_violation_status": "NOT ACTIVE",
        "hbm_thermal_violation_status": "ACTIVE",
        "prochot_violation_status": "N/A",
    },
}


def test_every_metric_field_of_amd_smi_reaches_the_sample() -> None:
    static = GpuStatic(0, "u", "AMD Instinct MI300X", "", 196592 * 2**20, vendor="amd")
    s = sample_of(METRIC_63, static)
    assert (s.util_gpu, s.util_mem, s.power_w) == (87, 41, 542)
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (2100, 1300)
    assert (s.temp_c, s.hotspot_temp_c, s.mem_temp_c) == (71, 71, 58)  # no edge on MI300
    assert (s.pcie_gen, s.pcie_width) == (5, 16)
    assert s.pcie_bw_kbs == pytest.approx(8000e6 / 8 / 1024)
    assert (s.ecc_corrected, s.ecc_uncorrected, s.ecc_deferred) == (3, 0, 1)
    assert s.energy_mj == 123500 and s.fan_pct is None
    assert (s.memory_used, s.memory_free) == (121344 * 2**20, 75248 * 2**20)
    assert (s.gtt_used, s.gtt_total) == (65 * 2**20, 64357 * 2**20)
    # the violation section wins over throttle_status (MI300 on)
    assert s.throttle_reasons == ("power cap", "hbm thermal")


def test_amd_smi_pcie_traffic_is_mib_per_second() -> None:
    """amd-smi prints a second's PCIe bytes // 1024 // 1024 as "Mb/s" (amdsmi_cli's
    amdsmi_commands.py, ROCm/amdsmi): 100 of them were read as 100 MB/s, 4.6% short."""
    pcie = {"current_bandwidth_sent": v(100, "Mb/s"), "current_bandwidth_received": 25}
    s = read_samples(json.dumps([{"gpu": 0, "pcie": pcie}]), [GpuStatic(0, "u", "x", "", None)])
    assert (s[0].pcie_tx_kbs, s[0].pcie_rx_kbs) == (100 * 1024, 25 * 1024)


def test_the_three_json_shapes_of_amd_smi_read_alike() -> None:
    static = GpuStatic(0, "u", "x", "", None)
    bare = {"gpu": 0, "usage": {"gfx_activity": 5}, "power": {"average_socket_power": 90}}
    listed = json.dumps([bare])
    wrapped = json.dumps({"gpu_data": [bare]})
    banner = "WARNING: User is missing the following required groups: render\n" + listed
    for text in (listed, wrapped, banner):
        s = read_samples(text, [static])[0]
        assert (s.util_gpu, s.power_w) == (5, 90)


# amd-smi of ROCm 6.0 (amdsmi_cli/amdsmi_commands.py at ROCm/amdsmi tag rocm-6.0.2): bare
# numbers, and the names its fields had before 6.1 renamed them
STATIC_60: dict[str, Any] = {
    "gpu": 0,
    "asic": {"market_name": "AMD Instinct MI300X", "device_id": "0x74a1"},
    "bus": {"bdf": "0000:0c:00.0", "max_pcie_speed": 32, "max_pcie_width": 16},
    "limit": {"max_power": 750, "current_power": 700},
    "driver": {"driver_name": "amdgpu", "driver_version": "6.3.6"},
    "vram": {"vram_type": "HBM3", "vram_vendor": "N/A", "vram_size_mb": 196592},
}
METRIC_60: dict[str, Any] = {
    "gpu": 0,
    "usage": {"gfx_usage": 87, "mem_usage": 41, "mm_ip_usage": "N/A"},
    "power": {"current_power": 542, "power_limit": 700, "throttle_status": "UNTHROTTLED"},
    "clock": {"gfx": {"cur_clk": 2100, "max_clk": 2100}, "mem": {"cur_clk": 1300}},
    "temperature": {"edge": "N/A", "hotspot": 71, "mem": 58},
    "mem_usage": {"total_vram": 196592, "used_vram": 121344, "free_vram": 75248},
}


def test_amd_smi_of_rocm_6_0_reads_its_older_field_names() -> None:
    """ROCm 6.0's amd-smi said gfx_usage, current_power, vram_size_mb, ...: its GPUs showed
    no utilisation, no power, no total memory and no driver."""
    rig = read_rig(None, json.dumps([STATIC_60]))
    (static,) = rig.statics
    assert static.memory_total == 196592 * 2**20 and rig.driver_version == "6.3.6"
    assert (static.power_limit_default_w, static.power_limit_max_w) == (700, 750)
    s = read_samples(json.dumps([METRIC_60]), rig.statics)[0]
    assert (s.util_gpu, s.util_mem, s.power_w, s.power_limit_w) == (87, 41, 542, 700)
    assert (s.memory_used, s.sm_clock_mhz, s.hotspot_temp_c) == (121344 * 2**20, 2100, 71)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "printed no JSON"),
        ("ERROR:root:Unable to get devices, driver not initialized (amdgpu)", "not initialized"),
        ("[{\"gpu\": 0,", "does not parse"),
        ("{\"hello\": 1}", "without a list of GPUs"),
        ("[{\"name\": 1}]", "name no GPU"),
    ],
)  # fmt: skip
def test_output_that_is_not_what_amd_smi_prints_is_one_line(text: str, words: str) -> None:
    with pytest.raises(AmdJsonError, match=words) as err:
        read_samples(text, [])
    assert "\n" not in str(err.value)


def test_values_read_whatever_the_version_printed() -> None:
    assert to_bytes({"value": 8176, "unit": "MB"}) == 8176 * 2**20
    assert to_bytes("7.3 GB") == round(7.3 * 2**30)
    assert to_bytes("N/A") is None and to_bytes({"value": "N/A", "unit": "MB"}) is None
    speeds = ("Gen 4", 16, "32 GT/s", 160, v(16000, "MT/s"))
    assert [pcie_gen(speed) for speed in speeds] == [4, 4, 5, 4, 4]
    with pytest.raises(AmdJsonError, match="too long"):
        load_json("[" * (33 * 2**20), "amd-smi metric")


@pytest.mark.parametrize("absurd", [1e308, "1e400", "inf", "nan", -5])
def test_an_absurd_value_reads_as_unsupported_not_a_crash(absurd: Any) -> None:
    """1e308 J of energy or GB of memory overflowed to a float infinity and a traceback."""
    static = GpuStatic(0, "u", "x", "", None)
    fields = ("energy_mj", "memory_used", "gtt_total", "sm_clock_mhz", "ecc_corrected")
    metric = {
        "gpu": 0,
        "energy": {"total_energy_consumption": v(absurd, "J")},
        "mem_usage": {"used_vram": v(absurd, "GB"), "total_gtt": v(absurd, "MB")},
        "clock": {"gfx_0": {"clk": v(absurd, "MHz")}},
        "ecc": {"total_correctable_count": absurd},
    }
    s = read_samples(json.dumps([metric]), [static])[0]
    assert [getattr(s, f) for f in fields] == [None] * len(fields)
    assert to_bytes(v(absurd, "GB")) is None and pcie_gen(absurd) is None


def test_a_reading_no_gpu_can_give_reads_as_unknown() -> None:
    """1e19 °C, 1e19 W and a 1e19 MHz clock were shown as read and raised alerts."""
    static = GpuStatic(0, "u", "x", "", 24560 * 2**20, vendor="amd")
    metric = {
        "gpu": 0,
        "temperature": {"edge": v(1e19, "C"), "hotspot": v(88, "C"), "mem": v(-300, "C")},
        "power": {"socket_power": v(1e19, "W")},
        "clock": {"gfx_0": {"clk": v(1e19, "MHz")}, "mem_0": {"clk": v(1249, "MHz")}},
        "usage": {"gfx_activity": v(250, "%"), "umc_activity": v(40, "%")},
        "fan": {"usage": v(1e19, "%")},
        "pcie": {"width": 1e19},
        "mem_usage": {"total_vram": v(24560, "MB"), "used_vram": v(1e9, "MB")},
    }
    s = read_samples(json.dumps([metric]), [static])[0]
    broken = ("power_w", "sm_clock_mhz", "util_gpu", "fan_pct", "pcie_width", "memory_used")
    assert [getattr(s, f) for f in broken] == [None] * len(broken)
    assert (s.temp_c, s.hotspot_temp_c, s.mem_temp_c) == (88, 88, None)  # the edge is broken
    assert (s.mem_clock_mhz, s.util_mem) == (1249, 40)
    card = {"Temperature (Sensor edge) (C)": "1e19", "Average Graphics Package Power (W)": "1e19"}
    (rocm,), _ = read_cards(json.dumps({"card0": card}))
    assert (rocm.sample.temp_c, rocm.sample.power_w) == (None, None)
    tracker = AlertTracker(instant=True)
    tracker.update(0.0, rigs={None: RigSample(1, 0.0, 0.0, RigInfo("amd", gpus=(static,)), (s,))})
    assert [a.message for a in tracker.active] == ["temperature 88°C (warning at 83)"]


# --- recorded rocm-smi output ------------------------------------------------------------------


def test_rocm_smi_all_of_an_mi210_on_rocm_5() -> None:
    (card,), driver = read_cards(fixture("rocm-smi/a-mi210-rocm5.json"))
    s = card.sample
    assert driver == "5.18.13"
    assert card.static.pci_bus_id == "00000000:63:00.0" and card.static.vbios == "113-D67301-063"
    # its series is "GENERIC RM IMAGE": the name comes from the catalog by its PCI ID, 0x740f
    assert card.static.name == "AMD Instinct MI210"
    assert (s.temp_c, s.hotspot_temp_c, s.mem_temp_c) == (33, 35, 46)
    assert (s.power_w, s.power_limit_w) == (41, 300)
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (800, 1600)  # "(800Mhz)"
    assert s.energy_mj == 93668579258  # "Accumulated Energy (uJ)"
    assert s.memory_used is None  # -a on ROCm 5 printed no VRAM


def test_rocm_smi_of_a_7900_xt_names_it_and_its_gfx_target() -> None:
    (card,), _ = read_cards(fixture("rocm-smi/7900xt-productname-use-meminfo.json"))
    assert (card.static.name, card.static.gfx_target) == ("Radeon RX 7900 XT", "gfx1100")
    assert card.static.memory_total == 21458059264
    assert card.sample.memory_used == 27856896 and card.sample.util_gpu == 0


def test_rocm_smi_fields_it_could_not_read_are_none() -> None:
    cards, _ = read_cards(fixture("rocm-smi/2xrx6800-showmemuse-1.4.1.json"))
    assert [c.sample.util_mem for c in cards] == [0, 0]  # GPU memory use (%): activity
    assert all(c.sample.memory_used is None and c.static.name.startswith("AMD GPU") for c in cards)


def test_cards_without_a_unique_id_stay_apart_in_the_exporter() -> None:
    """rocm-smi prints no Unique ID for these RX 6800s: both were keyed "" and so one GPU to
    the monitor, and the exporter served two identical series (Prometheus rejects them)."""
    cards, _ = read_cards(fixture("rocm-smi/2xrx6800-showmemuse-1.4.1.json"))
    assert [c.static.uuid for c in cards] == ["index:0", "index:1"]
    info = RigInfo("amd", gpus=tuple(c.static for c in cards))
    sample = RigSample(1, 0.0, 0.0, info, tuple(c.sample for c in cards))
    for family in rig_families(sample, host="h"):
        labels = [tuple(sorted(dict(s[0]).items())) for s in family.samples]
        assert len(labels) == len(set(labels)), family.name
    assert [g["index"] for g in rig_to_json(sample)["gpus"]] == [0, 1]


# --- the command-line source -------------------------------------------------------------------


class Tools:
    """Answers argv like amd-smi / rocm-smi would, from a table (and records the calls)."""

    def __init__(self, answers: dict[tuple[str, ...], CommandResult | str]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append(list(argv))
        for key, answer in self.answers.items():
            if tuple(argv[-len(key) :]) == key:
                return CommandResult(0, answer, "") if isinstance(answer, str) else answer
        return CommandResult(127, "", f"{argv[0]}: command not found")


MISSING = CommandResult(127, "", "amd-smi: command not found")


def _mi300x_metric(gpu: int, used_mb: int) -> dict[str, Any]:
    return {**METRIC_63, "gpu": gpu, "mem_usage": {**METRIC_63["mem_usage"], "used_vram": used_mb}}


def amd_smi_tools(**extra: CommandResult | str) -> Tools:
    static = [
        {"gpu": i,
         "asic": {"market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942"},
         "vram": {"size": {"value": 196592, "unit": "MB"}},
         "partition": {"compute_partition": "SPX", "memory_partition": "NPS1"}}
        for i in (0, 1)
    ]  # fmt: skip
    listing = [{"gpu": i, "bdf": f"0000:{5 + i:02x}:00.0", "uuid": f"uuid-{i}"} for i in (0, 1)]
    answers: dict[tuple[str, ...], CommandResult | str] = {
        ("static", "--json"): json.dumps(static),
        ("list", "--json"): json.dumps(listing),
        ("version",): "AMDSMI Tool: 25.5.1 | AMDSMI Library version: 25.5.1 | ROCm version: 6.4.1",
        ("metric", "--json"): json.dumps(
            {"gpu_data": [_mi300x_metric(0, 1000), _mi300x_metric(1, 2000)]}
        ),
        ("process", "--json"): fixture("amd-smi/process-2procs-rocm6.2.json"),
    }  # fmt: skip
    answers.update({tuple(k.split("_")): v for k, v in extra.items()})
    return Tools(answers)


def cli(tools: Tools, host: str | None = None, **kw: Any) -> AmdCliSource:
    return AmdCliSource(
        host, runner=tools, which=lambda _: "/opt/rocm/bin/x", host_sampler=NO_HOST, **kw
    )


def test_amd_smi_source_reads_the_rig_and_polls_it() -> None:
    src = cli(amd_smi_tools())
    info = src.open()
    assert info.source == "amd" and info.rocm_version == "6.4.1"
    assert [(g.uuid, g.pci_bus_id, g.compute_partition) for g in info.gpus] == [
        ("uuid-0", "00000000:05:00.0", "SPX"),
        ("uuid-1", "00000000:06:00.0", "SPX"),
    ]
    sample = src.poll()
    assert [g.memory_used for g in sample.gpus] == [1000 * 2**20, 2000 * 2**20]
    assert [p.pid for p in sample.gpus[0].processes] == [420157, 420315]
    assert sample.error is None


def _strix_halo(gtt_used_mb: int) -> AmdCliSource:
    """amd-smi on a Strix Halo: a 512 MiB BIOS carve-out (300 used), a 96 GiB GTT pool."""
    static = [
        {"gpu": 0,
         "asic": {"market_name": "AMD Radeon 8060S Graphics", "target_graphics_version": "gfx1151"},
         "vram": {"size": v(512, "MB")}}
    ]  # fmt: skip
    metric = [
        {"gpu": 0,
         "mem_usage": {"total_vram": v(512, "MB"), "used_vram": v(300, "MB"),
                       "total_gtt": v(98304, "MB"), "used_gtt": v(gtt_used_mb, "MB")}}
    ]  # fmt: skip
    return cli(
        Tools({("static", "--json"): json.dumps(static), ("metric", "--json"): json.dumps(metric)})
    )


def test_a_strix_halo_is_planned_with_the_gtt_pool_rocm_offers() -> None:
    """A Strix Halo read here (BIOS carve-out 512 MiB, GTT 96 GiB) was planned with the
    carve-out alone: ROCm0 had 212 MiB free and lltui fit said no model fits, where ROCm's
    hipMemGetInfo offers llama.cpp's HIP build both pools. A discrete GPU's GTT is no
    device memory to it."""
    (apu,) = devices_from_sample(_strix_halo(gtt_used_mb=4096).poll())
    assert (apu.name, apu.integrated) == ("ROCm0", True)
    assert apu.total_bytes == (512 + 98304) * 2**20
    assert apu.free_bytes == (512 - 300 + 98304 - 4096) * 2**20
    mi300x = cli(amd_smi_tools()).poll()  # its 64357 MB of GTT not counted
    assert devices_from_sample(mi300x)[0].free_bytes == mi300x.gpus[0].memory_free


def test_gpus_text_shows_the_gtt_an_apu_keeps_its_model_in() -> None:
    """lltui gpus on a Strix Halo said 300 MiB / 512 MiB (the carve-out) and nothing of the
    GTT pool holding the model, which the monitor's card and gpus --json show; a discrete
    GPU with little GTT mapped still gets no such line."""
    apu = _strix_halo(gtt_used_mb=61440).poll()
    for width in (None, 60):
        assert "GTT 61440 MiB / 98304 MiB" in rig_to_text(apu, width)
    assert "GTT" not in rig_to_text(cli(amd_smi_tools()).poll())  # 65 MB of GTT: no line


def test_a_failing_process_listing_marks_the_sample_and_the_gpus_keep_updating() -> None:
    tools = amd_smi_tools(process_json=CommandResult(1, "", "ERROR: insufficient permissions"))
    tools.answers[("process", "--json")] = CommandResult(1, "", "ERROR: insufficient permissions")
    src = cli(tools, proc_root="/nonexistent")
    sample = src.poll()
    assert sample.error == "process list: amd-smi failed here: ERROR: insufficient permissions"
    assert all(g.memory_used and not g.lost for g in sample.gpus)


def test_a_gpu_missing_from_the_metric_output_is_lost_and_the_rest_update() -> None:
    tools = amd_smi_tools()
    tools.answers[("metric", "--json")] = json.dumps([_mi300x_metric(1, 3000)])
    sample = cli(tools).poll()
    assert sample.gpus[0].lost and sample.gpus[0].error == "missing from amd-smi output"
    assert sample.gpus[1].memory_used == 3000 * 2**20


def test_without_amd_smi_rocm_smi_stands_in_and_says_so() -> None:
    tools = Tools({("--json",): fixture("rocm-smi/7900xt-productname-use-meminfo.json")})
    src = AmdCliSource(
        runner=tools,
        which=lambda t: None if t == "amd-smi" else "/usr/bin/rocm-smi",
        host_sampler=NO_HOST,
    )
    info = src.open()
    assert src.tool == "rocm-smi" and info.gpus[0].name == "Radeon RX 7900 XT"
    assert info.hints == ("reading rocm-smi: amd-smi is not on PATH here",)
    assert src.poll().gpus[0].memory_used == 27856896


def test_an_amd_smi_that_fails_gives_way_to_rocm_smi() -> None:
    tools = amd_smi_tools()
    tools.answers[("static", "--json")] = CommandResult(1, "", "AttributeError: 'NoneType' object")
    tools.answers[("--showdriverversion", "--json")] = fixture("rocm-smi/a-mi210-rocm5.json")
    src = cli(tools)
    info = src.open()
    assert src.tool == "rocm-smi"
    assert "amd-smi failed here: AttributeError" in info.hints[0]


def test_a_rocm_smi_too_old_for_a_flag_is_asked_for_everything() -> None:
    tools = Tools(
        {
            ("--showdriverversion", "--json"): CommandResult(
                2, "", "rocm-smi: error: unrecognized arguments: --showdriverversion"
            ),
            ("-a", "--json"): fixture("rocm-smi/a-mi210-rocm5.json"),
        }
    )  # fmt: skip
    src = AmdCliSource(tool="rocm-smi", runner=tools, which=lambda _: "/x", host_sampler=NO_HOST)
    assert src.open().gpus[0].pci_bus_id == "00000000:63:00.0"
    assert "too old" in src.open().hints[-1]
    assert src.poll().gpus[0].power_w == 41


def test_no_tool_at_all_is_one_line() -> None:
    src = AmdCliSource(runner=Tools({}), which=lambda _: None)
    with pytest.raises(SourceUnavailable) as err:
        src.open()
    assert str(err.value) == "amd-smi is not on PATH here; rocm-smi is not on PATH here"


def test_over_ssh_the_tools_run_on_the_host() -> None:
    tools = amd_smi_tools()
    src = cli(tools, host="gpu-box")
    src.open()
    src.poll()
    metric = next(c for c in tools.calls if c[-2:] == ["metric", "--json"])
    assert metric[0] == "ssh" and "gpu-box" in metric and metric[-3] == "amd-smi"
    assert src.name == "amd:gpu-box"


def test_ssh_failure_is_the_line_ssh_printed() -> None:
    tools = Tools(
        {
            ("static", "--json"): CommandResult(
                255, "", "ssh: connect to host box port 22: Connection refused"
            )
        }
    )
    src = AmdCliSource("box", tool="amd-smi", runner=tools)
    with pytest.raises(SourceUnavailable, match=r"^ssh: connect to host box port 22"):
        src.open()


def test_a_host_ssh_cannot_reach_is_not_asked_for_its_other_tool() -> None:
    """amd:HOST over a dead connection said ssh's reason twice (and waited twice): rocm-smi
    was tried after amd-smi over the same host."""
    refused = CommandResult(255, "", "ssh: connect to host box port 22: Connection refused")
    tools = Tools({("static", "--json"): refused, ("--json",): refused})
    with pytest.raises(SourceUnavailable) as err:
        AmdCliSource("box", runner=tools).open()
    assert str(err.value) == "ssh: connect to host box port 22: Connection refused"
    assert [c[-2:] for c in tools.calls] == [["static", "--json"]]


# --- the binding --------------------------------------------------------------------------------


def binding(fake: FakeAmdSmi, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> AmdSmiSource:
    fake.install(monkeypatch)
    return AmdSmiSource(host_sampler=NO_HOST, **kw)


def test_the_binding_reads_every_field(monkeypatch: pytest.MonkeyPatch) -> None:
    procs = [{"name": "llama-server", "pid": 4242, "vram": 30 * GIB, "gtt": 2 * GIB}]
    fake = FakeAmdSmi([
        mi300x(0, vram_used=40 * GIB, gtt_used=GIB, gfx_activity=87, umc_activity=41,
               socket_power=542, ecc=(3, 0, 1), violations={"active_ppt_pwr": True},
               processes=procs),
        mi300x(1),
    ])  # fmt: skip
    times = iter([10.0, 12.0])
    src = binding(fake, monkeypatch, clock=lambda: next(times))
    info = src.open()
    g = info.gpus[0]
    assert (g.name, g.gfx_target, g.vendor, g.compute_partition, g.memory_partition) == (
        "AMD Instinct MI300X", "gfx942", "amd", "SPX", "NPS1",
    )  # fmt: skip
    assert g.memory_total == 192 * GIB and g.power_limit_max_w == 750
    assert (g.pcie_gen_max, g.pcie_width_max) == (5, 16) and g.pci_bus_id == "00000000:0C:00.0"
    s = src.poll().gpus[0]
    assert (s.memory_used, s.memory_free) == (40 * GIB, 152 * GIB)
    assert (s.gtt_used, s.gtt_total) == (GIB, 64 * GIB)
    assert (s.util_gpu, s.util_mem, s.power_w, s.power_limit_w) == (87, 41, 542, 750)
    assert (s.temp_c, s.hotspot_temp_c, s.mem_temp_c) == (45, 45, 50)  # no edge: junction
    assert (s.sm_clock_mhz, s.mem_clock_mhz) == (1000, 1200)
    assert s.energy_mj == pytest.approx(1.5e6, rel=1e-4)  # accumulator x resolution µJ
    assert (s.ecc_corrected, s.ecc_uncorrected, s.ecc_deferred) == (3, 0, 1)
    assert (s.pcie_gen, s.pcie_width) == (5, 16) and s.pcie_bw_kbs == pytest.approx(
        64000e6 / 8 / 1024
    )
    assert s.throttle_reasons == ("power cap",) and s.xgmi_active == 7
    [p] = s.processes
    assert (p.pid, p.name, p.used_memory, p.gtt_memory) == (4242, "llama-server", 30 * GIB, 2 * GIB)
    fake.gpus[0].xgmi_read_kb = [
        v + 2048 if isinstance(v, int) else v for v in fake.gpus[0].xgmi_read_kb
    ]
    s2 = src.poll().gpus[0]  # two seconds later: 7 links x 2048 KB read
    assert s2.xgmi_rx_kbs == pytest.approx(7 * 2048 / 2) and s2.xgmi_tx_kbs == 0


def test_a_radeon_reports_what_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    src = binding(FakeAmdSmi([rx7900xtx(0, socket_power=300, fan=128)]), monkeypatch)
    src.open()
    s = src.poll().gpus[0]
    assert (s.temp_c, s.hotspot_temp_c) == (40, 45)  # edge, junction
    assert s.power_w == 300  # the average: Radeon has no current socket power
    assert s.fan_pct == pytest.approx(100 * 128 / 255)
    assert s.throttle_reasons == ()  # no violation flags: throttle_status (False)
    assert s.info.compute_partition is None and s.xgmi_active is None
    src = binding(FakeAmdSmi([rx7900xtx(0, socket_power=1e19, edge=0xFFFF)]), monkeypatch)
    src.open()
    s = src.poll().gpus[0]  # readings no GPU can give: unknown, the junction stands in
    assert (s.power_w, s.temp_c, s.hotspot_temp_c) == (None, 45, 45)


def test_an_unsupported_call_is_none_and_asked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAmdSmi([mi300x(0), mi300x(1)])
    fake.fail(1, "amdsmi_get_gpu_total_ecc_count", NOT_SUPPORTED)
    src = binding(fake, monkeypatch)
    src.open()
    for _ in range(3):
        sample = src.poll()
    assert sample.gpus[1].ecc_corrected is None and sample.gpus[0].ecc_corrected == 0
    assert fake.calls[(1, "amdsmi_get_gpu_total_ecc_count")] == 1
    assert fake.calls[(0, "amdsmi_get_gpu_total_ecc_count")] == 3


def test_a_call_the_binding_itself_fails_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """The binding's own Python raises on what the library gave it: a name that is not
    UTF-8 (it decodes market_name), a serial that is not hex (int(serial, 16)). That ended
    the source ("lltui: 'utf-8' codec can't decode byte 0xf8", exit 2); the field is unknown."""

    def not_utf8(*_: Any) -> Any:
        return b"\xf8".decode("utf-8")

    def not_hex(*_: Any) -> Any:
        return int("N/A", 16)

    fake = FakeAmdSmi([mi300x(0)])
    src = binding(fake, monkeypatch)
    monkeypatch.setattr(fake.module, "amdsmi_get_gpu_asic_info", not_utf8)
    monkeypatch.setattr(fake.module, "amdsmi_get_gpu_activity", not_hex)
    assert src.open().gpus[0].name == "AMD GPU 0"
    s = src.poll().gpus[0]
    assert s.util_gpu is None and s.memory_used == fake.gpus[0].vram_used and not s.lost


def test_a_gpu_that_is_gone_is_lost_and_the_rest_keep_updating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeAmdSmi([mi300x(0), mi300x(1)])
    src = binding(fake, monkeypatch)
    src.open()
    fake.lose(0)
    fake.gpus[1].vram_used = 7 * GIB
    sample = src.poll()
    assert sample.gpus[0].lost and "31" in (sample.gpus[0].error or "")
    assert sample.gpus[1].memory_used == 7 * GIB and not sample.gpus[1].lost


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (DRIVER_NOT_LOADED, "amdsmi: the amdgpu driver is not loaded"),
        (NO_PERM, "amdsmi: permission denied (is this user in the render and video groups?)"),
    ],
)
def test_init_failures_are_one_line(monkeypatch: pytest.MonkeyPatch, code: int, words: str) -> None:
    fake = FakeAmdSmi([mi300x(0)])
    fake.init_error = code
    with pytest.raises(SourceUnavailable) as err:
        binding(fake, monkeypatch).open()
    assert str(err.value) == words


def test_an_old_binding_lists_processes_from_fdinfo(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeAmdSmi(
        [rx7900xtx(0, processes=[{"name": "x", "pid": 1, "vram": 1}])], binding=BINDING_6_0
    )
    fake_proc(tmp_path, 777, [("0000:03:00.0", "5", 3 * 2**20, 4096)])
    src = binding(fake, monkeypatch, proc_root=str(tmp_path))
    src.open()
    [p] = src.poll().gpus[0].processes
    assert (p.pid, p.used_memory, p.gtt_memory) == (777, 3 * 2**30, 4 * 2**20)


# --- fdinfo -------------------------------------------------------------------------------------

FDINFO = """pos:\t0
flags:\t02100002
mnt_id:\t24
drm-driver:\tamdgpu
drm-client-id:\t{client}
drm-pdev:\t{pdev}
pasid:\t32771
drm-memory-vram:\t{vram} KiB
drm-memory-gtt: \t{gtt} KiB
drm-memory-cpu: \t0 KiB
drm-engine-gfx:\t1234 ns
"""


def fake_proc(root: Path, pid: int, fds: list[tuple[str, str, int, int]]) -> None:
    """A /proc tree: process ``pid`` with one amdgpu fd per (pdev, client, vram KiB, gtt KiB),
    each twice (a dup'd fd of the same client counts once), and a plain file."""
    d = root / "proc" / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "fdinfo").mkdir()
    n = 3
    for pdev, client, vram, gtt in fds:
        for _ in range(2):
            os.symlink("/dev/dri/renderD128", d / "fd" / str(n))
            (d / "fdinfo" / str(n)).write_text(
                FDINFO.format(client=client, pdev=pdev, vram=vram, gtt=gtt)
            )
            n += 1
    os.symlink("/tmp/log.txt", d / "fd" / str(n))
    (d / "fdinfo" / str(n)).write_text("pos:\t0\nflags:\t02\n")


def test_fdinfo_counts_each_drm_client_once_per_gpu(tmp_path: Path) -> None:
    fake_proc(tmp_path, 4242, [("0000:03:00.0", "7", 1024, 8), ("0000:04:00.0", "9", 2048, 0)])
    statics = [
        GpuStatic(0, "a", "x", "00000000:03:00.0", None),
        GpuStatic(1, "b", "y", "00000000:04:00.0", None),
    ]
    procs = read_drm_processes(statics, tmp_path)
    assert [(p.pid, p.used_memory, p.gtt_memory) for p in procs[0]] == [(4242, 2**20, 8 * 1024)]
    assert [(p.pid, p.used_memory) for p in procs[1]] == [(4242, 2 * 2**20)]


def test_fdinfo_of_other_drivers_and_newer_kernels() -> None:
    assert parse_fdinfo("drm-driver:\ti915\ndrm-pdev:\t0000:00:02.0\n") is None
    newer = parse_fdinfo("drm-driver:\tamdgpu\ndrm-pdev:\t0000:c3:00.0\ndrm-total-vram:\t512 MiB\n")
    assert newer is not None and newer.vram == 512 * 2**20 and newer.pdev == "00000000:C3:00.0"
    assert memory_by_gpu([newer, newer]) == {
        "00000000:C3:00.0": (1024 * 2**20, None)
    }  # no client id


# --- every field reaches gpus --json, the exporter, recordings ----------------------------------

AMD_FIELDS = (
    "gtt_used",
    "gtt_total",
    "hotspot_temp_c",
    "pcie_bw_kbs",
    "xgmi_active",
    "ecc_deferred",
)


def _amd_sample(monkeypatch: pytest.MonkeyPatch) -> RigSample:
    fake = FakeAmdSmi([mi300x(0, vram_used=GIB, gtt_used=GIB, ecc=(1, 0, 2))])
    src = binding(fake, monkeypatch)
    src.open()
    return src.poll()


def test_every_amd_field_reaches_gpus_json_and_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    sample = _amd_sample(monkeypatch)
    (g,) = rig_to_json(sample)["gpus"]
    assert all(g[f] is not None for f in AMD_FIELDS), {f: g[f] for f in AMD_FIELDS}
    assert (g["vendor"], g["gfx_target"], g["compute_partition"], g["memory_partition"]) == (
        "amd", "gfx942", "SPX", "NPS1",
    )  # fmt: skip
    assert "AMD Instinct MI300X" in rig_to_text(sample)


def test_every_amd_field_reaches_the_exporter_and_reads_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sample = _amd_sample(monkeypatch)
    sample = replace(sample, info=replace(sample.info, rocm_version="6.4.1"))
    families = {f.name: f for f in rig_families(sample, host="h")}
    amd_metrics = [m for m in GPU_METRICS if m.attr in AMD_FIELDS]
    assert len(amd_metrics) == len(AMD_FIELDS)
    for m in amd_metrics:
        assert families[m.name].samples, m.name
    (info,) = families["lltui_gpu_info"].samples
    assert dict(info[0])["gfx_target"] == "gfx942"
    series = [Series(f.name, s[0], s[1]) for f in families.values() for s in f.samples]
    (back,) = rigs_from_series(
        series, source="scrape", default_host="h", seq=1, t=0, wall=0
    ).values()
    g = back.gpus[0]
    assert g.hotspot_temp_c == sample.gpus[0].hotspot_temp_c and g.info.gfx_target == "gfx942"
    # the rig's ROCm release too (a scrape of an AMD rig dropped it: 'gpus' said no ROCm)
    assert back.info.rocm_version == "6.4.1"
    assert g.gtt_used == sample.gpus[0].gtt_used


def test_a_recording_keeps_every_amd_field(monkeypatch: pytest.MonkeyPatch) -> None:
    sample = _amd_sample(monkeypatch)
    data = json.loads(json.dumps(sample_to_dict(sample, sample.info)))
    assert sample_from_dict(data, sample.info) == sample


# --- auto and mixed rigs -------------------------------------------------------------------------


def test_amd_is_a_source_kind() -> None:
    assert str(parse_source_spec("amd")) == "amd" and str(parse_source_spec("amd:box")) == "amd:box"


def test_auto_opens_amd_when_there_is_no_nvidia_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeAmdSmi([mi300x(0)]).install(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVIDIA binding
    source, info = open_source("auto")
    try:
        assert info.source == "amdsmi" and not info.simulated
        assert info.gpus[0].name == "AMD Instinct MI300X"
    finally:
        source.close()


class Broken:
    name = "amd"

    def __init__(self, info: RigInfo) -> None:
        self.info = info

    def open(self) -> RigInfo:
        return self.info

    def poll(self) -> RigSample:
        raise SourceUnavailable("amd-smi did not answer here")

    def close(self) -> None:
        pass


def test_a_mixed_rig_numbers_every_gpu_and_survives_a_failing_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nvidia = SimSource("2x3090-nvlink")
    fake = FakeAmdSmi([rx7900xtx(0), rx7900xtx(1)])
    amd = binding(fake, monkeypatch)
    both = CombinedSource([nvidia, amd])
    info = both.open()
    assert both.name == "sim:2x3090-nvlink+amdsmi"
    assert [(g.index, g.vendor) for g in info.gpus] == [
        (0, "nvidia"),
        (1, "nvidia"),
        (2, "amd"),
        (3, "amd"),
    ]
    sample = both.poll()
    assert [g.index for g in sample.gpus] == [0, 1, 2, 3] and sample.error is None
    broken = CombinedSource([nvidia, Broken(amd.open())])
    broken.open()
    sample = broken.poll()
    assert [g.lost for g in sample.gpus] == [False, False, True, True]
    assert sample.error == "amd: amd-smi did not answer here"


def test_amd_source_falls_back_to_the_tools_without_the_binding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    monkeypatch.setattr("shutil.which", lambda _: None)
    with pytest.raises(SourceUnavailable) as err:
        AmdSource().open()
    assert str(err.value).startswith("the amdsmi binding is not importable; amd-smi is not on PATH")


def test_the_simulated_mi300x_rig_reports_what_amd_smi_would() -> None:
    source = SimSource("8xmi300x")
    info = source.open()
    assert info.cuda_version is None and info.rocm_version and info.nvml_version is None
    g = info.gpus[0]
    assert (g.vendor, g.gfx_target, g.compute_partition, g.cuda_index) == (
        "amd",
        "gfx942",
        "SPX",
        None,
    )
    sample = source.poll()
    for s in sample.gpus:
        assert s.xgmi_active == 7 and s.nvlink_active is None  # seven XGMI peers each
        assert s.temp_c == s.hotspot_temp_c and s.gtt_total and s.pstate is None


def test_a_rig_of_amd_gpus_alone_shows_no_cuda_column_or_cuda_index() -> None:
    """Every AMD GPU's CUDA cell was "-" under a CUDA column, and its detail screen said
    "CUDA index -": CUDA does not see them. The column stays where an NVIDIA GPU is."""
    from lltui.app.rig_model import RigModel
    from lltui.app.screens.gpu_detail import render_detail
    from lltui.core.monitor.history import RigHistory

    for profile, column in (("8xmi300x", False), ("2x4090-2x7900xtx", True)):
        source = SimSource(profile)
        source.open()
        sample = source.poll()
        for width in (None, 70):
            head = next(ln for ln in rig_to_text(sample, width).splitlines() if ln[:3] == "GPU")
            assert (" CU" in head) == column, head
        model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
        model.apply(sample)
        title = render_detail(sample.gpus[-1], model, 80, 60).splitlines()[0]
        assert "CUDA" not in title and "gfx target gfx" in title
        assert column or title.endswith("partition SPX/NPS1")


@pytest.mark.parametrize(
    ("profile", "said", "unsaid"),
    [
        ("8xmi300x", "XGMI links up 7", "NVLink"),  # an Instinct's Infinity Fabric
        ("2x4090-2x7900xtx", "PCIe gen", "NVLink"),  # a Radeon: no GPU-to-GPU links
        ("8xh100-sxm", "NVLink links 18 active 18", "XGMI"),
    ],
)
def test_the_detail_page_names_the_links_of_the_gpus_vendor(
    profile: str, said: str, unsaid: str
) -> None:
    """An AMD GPU's detail page read "NVLink links - active -": it has XGMI, or nothing."""
    from lltui.app.rig_model import RigModel
    from lltui.app.screens.gpu_detail import render_detail
    from lltui.core.monitor.history import RigHistory

    source = SimSource(profile)
    source.open()
    sample = source.poll()
    model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
    model.apply(sample)
    text = render_detail(sample.gpus[-1], model, 80, 60)
    pcie = next(ln for ln in text.splitlines() if ln.startswith("PCIe gen"))
    assert said in pcie and unsaid not in text, pcie


@pytest.mark.parametrize("profile", ["8xmi300x", "8xh100-sxm"])
def test_the_narrow_table_s_header_stands_over_its_columns(profile: str) -> None:
    """The narrow gpus table: its header's words start (the name) and end (the memory) where
    each row's cells do; they were one column to the right of the rows (with or without the
    CUDA column)."""
    import re

    source = SimSource(profile)
    source.open()
    lines = rig_to_text(source.poll(), 70).splitlines()
    source.close()
    at = next(k for k, ln in enumerate(lines) if ln.lstrip().startswith("GPU"))
    head, row = lines[at], lines[at + 1]
    name = row.split()[2 if " CU " in head else 1]
    assert head.index("name") == row.index(name), (head, row)
    mem = re.search(r"\S+/\S+G", row)
    assert mem is not None
    assert head.index("used/total") + len("used/total") == mem.end(), (head, row)


def test_an_amd_gpus_detail_shows_no_nvidia_only_field() -> None:
    """An AMD GPU's page read "compute -", "persistence -", "retired pages -", "XID -",
    "MIG -", "virtualization -" and "P-state -": fields only NVML has. It shows AMD's own
    instead (deferred ECC errors, the junction temperature); an NVIDIA GPU's page keeps them."""
    from lltui.app.rig_model import RigModel
    from lltui.app.screens.gpu_detail import render_detail
    from lltui.core.monitor.history import RigHistory

    source = SimSource("2x4090-2x7900xtx")
    source.open()
    sample = source.poll()
    model = RigModel(info=sample.info, interval=1.0, history=RigHistory())
    model.apply(sample)
    nvidia_only = ("compute", "persistence", "retired pages", "XID", "MIG", "virtual", "P-state")
    for g in sample.gpus:
        page = render_detail(replace(g, ecc_deferred=2), model, 80, 60)
        amd = g.info.vendor == "amd"
        assert [w in page for w in nvidia_only] == [not amd] * len(nvidia_only), page
        assert ("deferred 2" in page) == amd and ("junction" in page) == amd


def test_the_mixed_rig_keeps_cuda_numbers_for_the_nvidia_gpus_only() -> None:
    info = SimSource("2x4090-2x7900xtx").open()
    assert [g.cuda_index for g in info.gpus] == [0, 1, None, None]
    assert [g.vendor for g in info.gpus] == ["nvidia", "nvidia", "amd", "amd"]


def test_doctor_says_what_the_amd_source_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from lltui.core.doctor import MISSING, OK
    from lltui.services.doctor import _read_amd

    FakeAmdSmi([mi300x(0), mi300x(1)]).install(monkeypatch)
    check, _discrete = _read_amd()
    assert check.status == OK and (check.detail, check.version) == (
        "2 AMD GPU(s) through the amdsmi binding: AMD Instinct MI300X; amdgpu driver",
        "6.10.5",
    )
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    monkeypatch.setattr("shutil.which", lambda _: None)
    assert _read_amd()[0].status == MISSING
    # the tools: "through amd: ... 6.4.1" said neither amd-smi nor that 6.4.1 is ROCm's
    rocm_smi = Tools({("--json",): fixture("rocm-smi/7900xt-productname-use-meminfo.json")})
    for tools, which, detail, version in [
        (amd_smi_tools(), "amd-smi", "2 AMD GPU(s) through amd-smi: AMD Instinct MI300X; ROCm",
         "6.4.1"),
        (rocm_smi, "rocm-smi", "1 AMD GPU(s) through rocm-smi: Radeon RX 7900 XT", None),
    ]:  # fmt: skip
        here = AmdCliSource(
            runner=tools, which=lambda t, w=which: t if t == w else None, host_sampler=NO_HOST
        )
        monkeypatch.setattr("lltui.sources.gpu.amd.cli.AmdCliSource", lambda *a, h=here, **k: h)
        check = _read_amd()[0]
        assert (check.detail, check.version) == (detail, version)


def test_doctor_on_an_amd_rig_with_no_nvidia_driver_says_monitoring_works(monkeypatch, capsys):
    from lltui.cli import main

    FakeAmdSmi([mi300x(0), mi300x(1)]).install(monkeypatch)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # no NVIDIA binding, no driver
    code = main(["doctor"])
    out = capsys.readouterr().out
    assert code == 0 and out.rstrip().endswith("GPU monitoring works here."), out


@pytest.mark.parametrize("vendor", ["amd", "nvidia"])
def test_doctor_speaks_of_the_nccl_of_the_rig(monkeypatch, vendor) -> None:
    """An MI300X rig was told "libnccl.so.2 not found -> pip install nvidia-nccl-cu12 (only
    needed for `lltui nccl bench`)": its library is ROCm's RCCL, and the bench, which drives
    GPUs through the CUDA runtime, does not run on its GPUs."""
    from support.fake_pynvml import FakeNvml, make_gpus

    from lltui.services.doctor import run_checks
    from lltui.sources import nccl as nccl_source
    from lltui.sources.nccl.library import NcclProbe

    monkeypatch.delenv("LLTUI_NCCL_LIB", raising=False)
    missing = NcclProbe(False, None, None, None, None, (), "not found")
    monkeypatch.setattr(nccl_source, "probe_nccl", lambda *a, **k: missing)
    if vendor == "amd":
        FakeAmdSmi([mi300x(0), mi300x(1)]).install(monkeypatch)
        monkeypatch.setitem(sys.modules, "pynvml", None)
    else:
        FakeNvml(make_gpus(1)).install(monkeypatch)
        monkeypatch.setitem(sys.modules, "amdsmi", None)
        monkeypatch.setattr("shutil.which", lambda name, **_: None)
    (nccl,) = [c for c in run_checks() if c.name == "libnccl"]
    if vendor == "amd":
        assert nccl.detail == "librccl.so.1 not found" and nccl.hint
        assert "ships with ROCm" in nccl.hint and "does not run on AMD GPUs" in nccl.hint
    else:
        assert nccl.detail == "libnccl.so.2 not found"
        assert nccl.hint == "pip install nvidia-nccl-cu12 (only needed for `lltui nccl bench`)"


def test_doctor_says_why_the_nccl_library_named_did_not_load(monkeypatch) -> None:
    """LLTUI_NCCL_LIB naming a library that does not load: doctor said "libnccl.so.2 not
    found -> pip install nvidia-nccl-cu12", as if it had searched; it says the load's error,
    as lltui nccl does, and how to search instead."""
    from lltui.core.doctor import ERROR
    from lltui.services.doctor import check_nccl

    monkeypatch.setenv("LLTUI_NCCL_LIB", "/nonexistent/libnccl.so.2")
    check = check_nccl()
    assert check.status == ERROR
    assert check.detail.startswith("cannot load /nonexistent/libnccl.so.2"), check.detail
    assert check.hint and "unset LLTUI_NCCL_LIB" in check.hint


@pytest.mark.parametrize(("amd", "said"), [("AMD Radeon RX 7900 XTX", True), ("8060S", False)])
def test_doctor_with_nvidia_and_amd_gpus_names_the_build_that_sees_both(monkeypatch, amd, said):
    """One llama.cpp CUDA build cannot see the AMD GPU, a HIP build the NVIDIA one: doctor
    said nothing of it. An APU beside the NVIDIA GPU is left out by llama.cpp anyway."""
    from support.fake_pynvml import FakeNvml, make_gpus

    from lltui.services.doctor import run_checks

    FakeNvml(make_gpus(1)).install(monkeypatch)
    FakeAmdSmi([rx7900xtx(0, name=amd)]).install(monkeypatch)
    lines = [c.detail for c in run_checks() if c.name == "gpu-vendors"]
    assert len(lines) == said
    assert not said or "-DGGML_BACKEND_DL=ON -DGGML_CUDA=ON -DGGML_HIP=ON" in lines[0]


def test_with_no_binding_and_no_tool_opening_says_so_without_loading_either(tmp_path):
    """Every NVIDIA machine's ``auto`` asks for AMD GPUs: where nothing could answer, the
    binding's and the tools' modules are not imported to say so."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("amdsmi") is not None:
        pytest.skip("the amdsmi binding is installed here")
    code = (
        "import sys\nfrom lltui.sources.gpu.amd.source import AmdSource\n"
        "from lltui.core.monitor.models import SourceUnavailable\n"
        "try:\n    AmdSource().open()\nexcept SourceUnavailable as e:\n    print(e)\n"
        "print(sorted(m for m in sys.modules if m.startswith('lltui.sources.gpu.amd.')))"
    )
    env = {**os.environ, "PATH": str(tmp_path)}  # no amd-smi, no rocm-smi
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()
    assert out == [
        "the amdsmi binding is not importable; amd-smi is not on PATH here; "
        "rocm-smi is not on PATH here",
        "['lltui.sources.gpu.amd.source', 'lltui.sources.gpu.amd.tools']",
    ]

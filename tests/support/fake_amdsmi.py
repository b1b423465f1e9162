"""A FAKE of AMD's ``amdsmi`` Python binding, at the function level, for tests.

Not AMD's binding; it talks to no driver. It has the names, parameters, return shapes and
units of the real ``amdsmi`` package (``py-interface/amdsmi_interface.py`` of ROCm/amdsmi,
ROCm 6.3): ``amdsmi_init(flag)``, processor handles, ``AmdSmiMemoryType`` /
``AmdSmiTemperatureType`` / ``AmdSmiClkType`` enums that every call checks with
``isinstance`` (a wrong argument raises ``AmdSmiParameterException``, as the real one
does), ``AmdSmiLibraryException(err_code)`` with amdsmi.h's status codes, dicts with
``"N/A"`` where the real binding prints it, power caps in µW, energy as an accumulator times
a resolution in µJ, PCIe speed in MT/s and bandwidth in Mb/s, XGMI accumulators in KB.

Two versions of the binding are modelled (:data:`BINDING_6_0`, :data:`BINDING_6_3`):
6.0 has no ``amdsmi_get_violation_status`` and returns process *handles* from
``amdsmi_get_gpu_process_list``; 6.3 returns process dicts.

Use::

    fake = FakeAmdSmi([mi300x(0), mi300x(1)])
    fake.install(monkeypatch)          # sys.modules["amdsmi"] is now the fake
    fake.fail(1, "amdsmi_get_temp_metric", NOT_SUPPORTED)
    fake.lose(0)
"""

from __future__ import annotations

import sys
import types
from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

# amdsmi_status_t (amdsmi.h)
SUCCESS = 0
INVAL = 1
NOT_SUPPORTED = 2
NO_PERM = 10
NOT_FOUND = 31
DRIVER_NOT_LOADED = 34
NA = "N/A"


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code

    def get_error_code(self) -> int:
        return self.err_code

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | AMDSMI_STATUS_{self.err_code}"


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, received: Any, expected: Any) -> None:
        super().__init__(None)
        self.err_code = None
        self.err_msg = (
            f"Invalid parameter:\nActual type: {type(received)}\nExpected type: {expected}"
        )

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4


class amdsmi_processor_handle:  # the real binding's ctypes type name
    def __init__(self, index: int) -> None:
        self.index = index


@dataclass(frozen=True)
class Binding:
    version: str
    violation_status: bool
    process_dicts: bool


BINDING_6_0 = Binding("6.0", violation_status=False, process_dicts=False)
BINDING_6_3 = Binding("6.3", violation_status=True, process_dicts=True)

MIB = 1 << 20
GIB = 1 << 30


@dataclass
class FakeAmdGpu:
    """What one GPU reports. Temperatures in °C, power in W, memory in bytes."""

    name: str
    gfx: str
    vram: int
    bdf: str
    uuid: str
    vram_used: int = 0
    gtt_total: int = 64 * GIB
    gtt_used: int = 0
    gfx_activity: Any = 0
    umc_activity: Any = 0
    socket_power: Any = 100
    power_cap_w: float = 300.0
    max_power_cap_w: float = 300.0
    edge: int | None = 40
    hotspot: int = 45
    mem_temp: int | None = 50
    gfx_clk: int = 1000
    mem_clk: int = 1200
    energy_uj: float = 1.5e9
    ecc: tuple[int, int, int] = (0, 0, 0)
    fan: int | None = 128
    pcie: tuple[int, int, int] = (16, 32000, 64000)  # width, speed MT/s, bandwidth Mb/s
    max_pcie: tuple[int, int] = (16, 32000)
    compute_partition: str | None = None
    memory_partition: str | None = None
    throttled: bool = False
    violations: dict[str, bool] = field(default_factory=dict)
    xgmi_read_kb: list[Any] = field(default_factory=lambda: [NA] * 8)
    xgmi_write_kb: list[Any] = field(default_factory=lambda: [NA] * 8)
    processes: list[dict[str, Any]] = field(default_factory=list)


def mi300x(i: int, **kw: Any) -> FakeAmdGpu:
    """An MI300X as its binding reports it (192 GiB HBM3, 750 W, SPX/NPS1, 7 XGMI links)."""
    base: dict[str, Any] = dict(
        name="AMD Instinct MI300X",
        gfx="gfx942",
        vram=192 * GIB,
        bdf=f"0000:{0x0C + 0x16 * i:02x}:00.0",
        uuid=f"a3ff74a1-0000-1000-80{i:02x}-1c2d3e4f5a6b",
        edge=None,
        power_cap_w=750,
        max_power_cap_w=750,
        compute_partition="SPX",
        memory_partition="NPS1",
        fan=None,
        xgmi_read_kb=[1000 * (i + 1)] * 7 + [NA],
        xgmi_write_kb=[500 * (i + 1)] * 7 + [NA],
    )
    base.update(kw)
    return FakeAmdGpu(**base)


def rx7900xtx(i: int, **kw: Any) -> FakeAmdGpu:
    base: dict[str, Any] = dict(
        name="AMD Radeon RX 7900 XTX",
        gfx="gfx1100",
        vram=24 * GIB,
        bdf=f"0000:{0x03 + i:02x}:00.0",
        uuid=f"5bff744c-0000-1000-8000-00000000000{i}",
        power_cap_w=327,
        max_power_cap_w=402,
        pcie=(16, 16000, 0),
    )
    base.update(kw)
    return FakeAmdGpu(**base)


class FakeAmdSmi:
    """The fake module's state: its GPUs, the binding version, injected failures, calls."""

    def __init__(self, gpus: list[FakeAmdGpu], binding: Binding = BINDING_6_3) -> None:
        self.gpus = gpus
        self.binding = binding
        self.init_error: int | None = None
        self.failures: dict[tuple[int, str], int] = {}
        self.lost: set[int] = set()
        self.calls: Counter[tuple[int, str]] = Counter()
        self.initialised = False
        self.module = self._module()

    # -- test controls -----------------------------------------------------------------------
    def fail(self, gpu: int, fn: str, code: int) -> None:
        self.failures[(gpu, fn)] = code

    def lose(self, gpu: int) -> None:
        self.lost.add(gpu)

    def install(self, monkeypatch: Any) -> None:
        monkeypatch.setitem(sys.modules, "amdsmi", self.module)

    # -- the module --------------------------------------------------------------------------
    def _gpu(self, handle: Any, fn: str) -> FakeAmdGpu:
        if not isinstance(handle, amdsmi_processor_handle):
            raise AmdSmiParameterException(handle, amdsmi_processor_handle)
        if not self.initialised:
            raise AmdSmiLibraryException(32)  # AMDSMI_STATUS_NOT_INIT
        i = handle.index
        self.calls[(i, fn)] += 1
        if i in self.lost:
            raise AmdSmiLibraryException(NOT_FOUND)
        code = self.failures.get((i, fn))
        if code is not None:
            raise AmdSmiLibraryException(code)
        return self.gpus[i]

    def _module(self) -> types.ModuleType:
        m = types.ModuleType("amdsmi")
        for value in (
            AmdSmiException, AmdSmiLibraryException, AmdSmiParameterException, AmdSmiInitFlags,
            AmdSmiMemoryType, AmdSmiTemperatureType, AmdSmiTemperatureMetric, AmdSmiClkType,
            amdsmi_processor_handle,
        ):  # fmt: skip
            setattr(m, value.__name__, value)
        for name in dir(self):
            if name.startswith("amdsmi_"):
                setattr(m, name, getattr(self, name))
        if not self.binding.violation_status:
            delattr(m, "amdsmi_get_violation_status")
        return m

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.initialised = True

    def amdsmi_shut_down(self) -> None:
        self.initialised = False

    def amdsmi_get_processor_handles(self) -> list[amdsmi_processor_handle]:
        if not self.initialised:
            raise AmdSmiLibraryException(32)
        return [amdsmi_processor_handle(i) for i in range(len(self.gpus))]

    def amdsmi_get_gpu_asic_info(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_gpu_asic_info")
        return {
            "market_name": g.name, "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "subvendor_id": "0x1002", "device_id": "0x74a1", "rev_id": "0x00", "asic_serial": "0x0",
            "oam_id": "N/A", "num_compute_units": 304, "target_graphics_version": g.gfx,
        }  # fmt: skip

    def amdsmi_get_gpu_device_uuid(self, h: Any) -> str:
        return self._gpu(h, "amdsmi_get_gpu_device_uuid").uuid

    def amdsmi_get_gpu_device_bdf(self, h: Any) -> str:
        return self._gpu(h, "amdsmi_get_gpu_device_bdf").bdf

    def amdsmi_get_gpu_driver_info(self, h: Any) -> dict[str, str]:
        self._gpu(h, "amdsmi_get_gpu_driver_info")
        return {
            "driver_name": "amdgpu",
            "driver_version": "6.10.5",
            "driver_date": "2015/01/01 00:00",
        }

    def amdsmi_get_gpu_vram_info(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_gpu_vram_info")
        return {
            "vram_type": 0,
            "vram_vendor": 0,
            "vram_size": g.vram // MIB,
            "vram_bit_width": 8192,
        }

    def _mem_type(self, mem_type: Any) -> None:
        if not isinstance(mem_type, AmdSmiMemoryType):
            raise AmdSmiParameterException(mem_type, AmdSmiMemoryType)

    def amdsmi_get_gpu_memory_total(self, h: Any, mem_type: Any) -> int:
        g = self._gpu(h, "amdsmi_get_gpu_memory_total")
        self._mem_type(mem_type)
        return g.gtt_total if mem_type == AmdSmiMemoryType.GTT else g.vram

    def amdsmi_get_gpu_memory_usage(self, h: Any, mem_type: Any) -> int:
        g = self._gpu(h, "amdsmi_get_gpu_memory_usage")
        self._mem_type(mem_type)
        return g.gtt_used if mem_type == AmdSmiMemoryType.GTT else g.vram_used

    def amdsmi_get_power_cap_info(self, h: Any) -> dict[str, int]:
        g = self._gpu(h, "amdsmi_get_power_cap_info")
        cap = int(g.power_cap_w * 1e6)  # µW
        return {"power_cap": cap, "default_power_cap": cap, "dpm_cap": 0,
                "min_power_cap": 0, "max_power_cap": int(g.max_power_cap_w * 1e6)}  # fmt: skip

    def amdsmi_get_pcie_info(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_pcie_info")
        width, speed, bw = g.pcie
        return {
            "pcie_static": {"max_pcie_width": g.max_pcie[0], "max_pcie_speed": g.max_pcie[1],
                            "pcie_interface_version": 5, "slot_type": "OAM"},
            "pcie_metric": {"pcie_width": width, "pcie_speed": speed, "pcie_bandwidth": bw,
                            "pcie_replay_count": 0, "pcie_l0_to_recovery_count": 0},
        }  # fmt: skip

    def amdsmi_get_gpu_compute_partition(self, h: Any) -> str:
        g = self._gpu(h, "amdsmi_get_gpu_compute_partition")
        if g.compute_partition is None:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return g.compute_partition

    def amdsmi_get_gpu_memory_partition(self, h: Any) -> str:
        g = self._gpu(h, "amdsmi_get_gpu_memory_partition")
        if g.memory_partition is None:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return g.memory_partition

    def amdsmi_get_gpu_activity(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_gpu_activity")
        return {"gfx_activity": g.gfx_activity, "umc_activity": g.umc_activity, "mm_activity": NA}

    def amdsmi_get_power_info(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_power_info")
        # MI300 fills current_socket_power; MI200 and Radeon the average only (0xFFFF -> N/A)
        current = g.socket_power if g.edge is None else NA
        return {"current_socket_power": current, "average_socket_power": g.socket_power,
                "gfx_voltage": NA, "soc_voltage": NA, "mem_voltage": NA,
                "power_limit": int(g.power_cap_w)}  # fmt: skip

    def amdsmi_get_temp_metric(self, h: Any, sensor: Any, metric: Any) -> int:
        g = self._gpu(h, "amdsmi_get_temp_metric")
        if not isinstance(sensor, AmdSmiTemperatureType):
            raise AmdSmiParameterException(sensor, AmdSmiTemperatureType)
        if not isinstance(metric, AmdSmiTemperatureMetric):
            raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
        value = {0: g.edge, 1: g.hotspot, 2: g.mem_temp}.get(int(sensor))
        if value is None:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return value

    def amdsmi_get_clock_info(self, h: Any, clk_type: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_clock_info")
        if not isinstance(clk_type, AmdSmiClkType):
            raise AmdSmiParameterException(clk_type, AmdSmiClkType)
        clk = g.mem_clk if clk_type == AmdSmiClkType.MEM else g.gfx_clk
        return {
            "clk": clk,
            "min_clk": 100,
            "max_clk": 2100,
            "clk_locked": False,
            "clk_deep_sleep": False,
        }

    def amdsmi_get_energy_count(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_energy_count")
        resolution = 15.259
        acc = int(g.energy_uj / resolution)
        out: dict[str, Any] = {"power": acc, "counter_resolution": resolution, "timestamp": 0}
        if self.binding is not BINDING_6_0:
            out["energy_accumulator"] = acc
        return out

    def amdsmi_get_gpu_total_ecc_count(self, h: Any) -> dict[str, int]:
        g = self._gpu(h, "amdsmi_get_gpu_total_ecc_count")
        c, u, d = g.ecc
        return {"correctable_count": c, "uncorrectable_count": u, "deferred_count": d}

    def amdsmi_get_gpu_fan_speed(self, h: Any, sensor_idx: int) -> int:
        g = self._gpu(h, "amdsmi_get_gpu_fan_speed")
        if g.fan is None:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return g.fan

    def amdsmi_get_gpu_fan_speed_max(self, h: Any, sensor_idx: int) -> int:
        g = self._gpu(h, "amdsmi_get_gpu_fan_speed_max")
        if g.fan is None:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return 255

    def amdsmi_get_gpu_metrics_info(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_gpu_metrics_info")
        return {"temperature_edge": g.edge if g.edge is not None else NA,
                "temperature_hotspot": g.hotspot, "throttle_status": g.throttled,
                "xgmi_link_width": 16, "xgmi_link_speed": 32,
                "xgmi_read_data_acc": list(g.xgmi_read_kb),
                "xgmi_write_data_acc": list(g.xgmi_write_kb),
                "pcie_bandwidth_inst": NA}  # fmt: skip

    def amdsmi_get_violation_status(self, h: Any) -> dict[str, Any]:
        g = self._gpu(h, "amdsmi_get_violation_status")
        if g.edge is not None:  # MI300 and later only
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        flags = ("active_prochot_thrm", "active_ppt_pwr", "active_socket_thrm",
                 "active_vr_thrm", "active_hbm_thrm")  # fmt: skip
        return {f: g.violations.get(f, False) for f in flags} | {"acc_counter": 1000}

    def amdsmi_get_gpu_process_list(self, h: Any) -> list[Any]:
        g = self._gpu(h, "amdsmi_get_gpu_process_list")
        if not self.binding.process_dicts:
            return [object() for _ in g.processes]  # 6.0: handles for amdsmi_get_gpu_process_info
        return [
            {"name": p["name"], "pid": p["pid"], "mem": p["vram"] + p.get("gtt", 0),
             "engine_usage": {"gfx": 0, "enc": 0},
             "memory_usage": {"gtt_mem": p.get("gtt", 0), "cpu_mem": 0, "vram_mem": p["vram"]}}
            for p in g.processes
        ]  # fmt: skip

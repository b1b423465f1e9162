"""The NVML source against a fake nvidia-ml-py (tests/support/fake_pynvml.py), and CUDA ordering.

No GPU is needed: the fake is installed as ``pynvml`` in sys.modules. It models the binding
(which Python functions exist) and the driver (which C symbols exist) separately, so the
driver matrix below covers old and new bindings on old and new drivers.
"""

from __future__ import annotations

import inspect
import os
import sys
from typing import Any

import pytest
from support.fake_pynvml import (
    BINDING_11,
    BINDING_13,
    DEVICE_ERROR_CODES,
    DRIVER_NO_FIELD_VALUES,
    DRIVER_R450,
    DRIVER_R470,
    DRIVER_R535,
    DRIVER_R550,
    MIB,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNKNOWN,
    NVML_FI_DEV_POWER_AVERAGE,
    NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
    FakeGpu,
    FakeNvml,
    NVMLError,
    make_gpus,
)
from support.nvml_helpers import close_nvml_sources  # noqa: F401 (an autouse fixture)

from lltui.core.monitor.cuda_order import (
    CudaCandidate,
    cuda_indices,
    enumeration_order,
    pci_sort_key,
)
from lltui.core.monitor.models import GpuSample, RigSample, SourceUnavailable
from lltui.core.monitor.throttle import reasons_from_mask
from lltui.sources.gpu.nvml import (
    DEFAULT_LINK_TTL_S,
    DEFAULT_PCIE_TTL_S,
    DEFAULT_PROCESS_TTL_S,
    DEFAULT_SLOW_TTL_S,
    NvmlSource,
    cuda_version_text,
    probe_nvml,
)
from lltui.sources.gpu.sim import StepClock

EVERY_TTL = max(DEFAULT_SLOW_TTL_S, DEFAULT_PROCESS_TTL_S, DEFAULT_PCIE_TTL_S, DEFAULT_LINK_TTL_S)
ME = os.getpid()
PARENT = os.getppid()


def start(
    monkeypatch: pytest.MonkeyPatch,
    gpus: list[FakeGpu] | None = None,
    *,
    driver: Any = DRIVER_R535,
    binding: Any = BINDING_13,
    env: dict[str, str] | None = None,
) -> tuple[FakeNvml, NvmlSource, StepClock]:
    fake = FakeNvml(gpus if gpus is not None else make_gpus(2), driver=driver, binding=binding)
    fake.install(monkeypatch)
    clock = StepClock(1000.0, step=0.0)
    src = NvmlSource(clock=clock, wall=lambda: 1_767_225_600.0, env=env or {}, event_wait_s=0.002)
    return fake, src, clock


def rich_gpus(n: int = 2) -> list[FakeGpu]:
    """GPUs that answer every field, so every function is exercised."""
    gpus = make_gpus(n, nvlinks=2)
    for g in gpus:
        g.ecc_corrected, g.ecc_uncorrected = 3, 1
        g.retired_sbe, g.retired_dbe = [0x1000, 0x2000], [0x3000]
        g.compute_procs = [(ME, 1024 * MIB)]
        g.graphics_procs = [(PARENT, 64 * MIB)]
    return gpus


# -- reading values ---------------------------------------------------------------------------
def test_sample_reports_what_the_driver_reports_in_lltui_units(monkeypatch):
    fake, src, _ = start(monkeypatch, rich_gpus(2))
    info = src.open()
    sample = src.poll()
    assert isinstance(sample, RigSample)
    assert info.source == "nvml" and not info.simulated
    assert (info.driver_version, info.cuda_version) == ("535.104.05", "12.2")
    for fg, gs in zip(fake.gpus, sample.gpus, strict=True):
        st = gs.info
        assert (st.uuid, st.name, st.pci_bus_id) == (fg.uuid, fg.name, fg.pci_bus_id)
        assert st.memory_total == fg.memory_total
        assert st.power_limit_default_w == fg.default_limit_mw / 1000
        assert st.power_limit_max_w == fg.max_limit_mw / 1000
        assert (st.max_sm_clock_mhz, st.max_mem_clock_mhz) == (fg.max_sm_clock, fg.max_mem_clock)
        assert st.compute_capability == fg.compute_capability
        assert (st.pcie_gen_max, st.pcie_width_max) == (fg.pcie_gen_max, fg.pcie_width_max)
        assert st.nvlink_links == len(fg.nvlink_states)
        assert st.serial is None and st.vbios == fg.vbios and st.persistence_mode is True
        assert st.vendor == "nvidia"
        assert not gs.lost and gs.error is None
        assert gs.memory_used == fg.memory_used
        assert gs.memory_reserved == fg.memory_reserved
        assert gs.memory_free == fg.memory_total - fg.memory_used - fg.memory_reserved
        assert (gs.util_gpu, gs.util_mem) == (fg.util_gpu, fg.util_mem)
        assert gs.power_w == pytest.approx(fg.power_mw / 1000)
        assert gs.power_limit_w == pytest.approx(fg.enforced_limit_mw / 1000)
        assert gs.temp_c == fg.temp_c
        assert (gs.sm_clock_mhz, gs.mem_clock_mhz) == (fg.sm_clock, fg.mem_clock)
        assert gs.fan_pct == fg.fan_pct and gs.pstate == fg.pstate
        assert gs.throttle_reasons == reasons_from_mask(fg.clock_reasons)
        assert (gs.pcie_gen, gs.pcie_width) == (fg.pcie_gen, fg.pcie_width)
        assert (gs.pcie_tx_kbs, gs.pcie_rx_kbs) == (fg.pcie_tx_kbs, fg.pcie_rx_kbs)
        assert gs.nvlink_active == sum(fg.nvlink_states)
        assert (gs.ecc_corrected, gs.ecc_uncorrected) == (fg.ecc_corrected, fg.ecc_uncorrected)
        assert gs.retired_pages == len(fg.retired_sbe or []) + len(fg.retired_dbe or [])
    assert sample.host.mem_total is not None and sample.host.mem_total > 0


def test_nvml_is_initialised_once_and_shut_down_on_close(monkeypatch):
    fake, src, clock = start(monkeypatch)
    src.open()
    for _ in range(5):
        src.poll()
        clock.advance(1.0)
    # once by the source, once by the XID event thread, which holds NVML open while it waits
    assert fake.count(None, "nvmlInit") == 2
    assert fake.shutdowns == 0
    events = src.event_watcher
    assert events is not None
    src.close()
    src.close()
    assert events.join(10.0)
    assert fake.shutdowns == 2 and fake.initialised == 0
    with pytest.raises(SourceUnavailable):
        src.poll()


def test_sequence_numbers_and_clock(monkeypatch):
    _, src, clock = start(monkeypatch)
    src.open()
    first = src.poll()
    clock.advance(1.5)
    second = src.poll()
    assert (first.seq, second.seq) == (1, 2)
    assert second.t - first.t == pytest.approx(1.5)


def test_pstate_unknown_is_none(monkeypatch):
    fake, src, _ = start(monkeypatch, make_gpus(1))
    fake.gpus[0].pstate = 32
    src.open()
    assert src.poll().gpus[0].pstate is None


def test_an_unset_32_bit_reading_is_unknown(monkeypatch):
    """NVML's 0xFFFFFFFF came through as 4294967295 °C, MHz, % and 4294967 W."""
    fake, src, _ = start(monkeypatch, make_gpus(1))
    g = fake.gpus[0]
    g.temp_c = g.sm_clock = g.fan_pct = g.util_gpu = g.power_mw = g.pcie_width = 0xFFFFFFFF
    src.open()
    s = src.poll().gpus[0]
    broken = ("temp_c", "sm_clock_mhz", "fan_pct", "util_gpu", "power_w", "pcie_width")
    assert [getattr(s, f) for f in broken] == [None] * len(broken)
    assert (s.mem_clock_mhz, s.util_mem) == (g.mem_clock, g.util_mem)


# -- driver and binding matrix --------------------------------------------------------------
MATRIX = [
    # binding, driver, process function that answers, memory v2?, reasons function, hint?
    pytest.param(
        BINDING_11,
        DRIVER_R450,
        "nvmlDeviceGetComputeRunningProcesses",
        False,
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        False,
        id="old-binding-R450-v1",
    ),
    pytest.param(
        BINDING_13,
        DRIVER_R470,
        "nvmlDeviceGetComputeRunningProcesses_v2",
        False,
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        False,
        id="new-binding-R470-v2",
    ),
    pytest.param(
        BINDING_13,
        DRIVER_R535,
        "nvmlDeviceGetComputeRunningProcesses_v3",
        True,
        "nvmlDeviceGetCurrentClocksEventReasons",
        False,
        id="new-binding-R535-v3",
    ),
    pytest.param(
        BINDING_11,
        DRIVER_R535,
        "nvmlDeviceGetComputeRunningProcesses",
        False,
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        False,
        id="old-binding-R535-v1",
    ),
]


@pytest.mark.parametrize(("binding", "driver", "proc_fn", "mem_v2", "reason_fn", "hint"), MATRIX)
def test_driver_matrix(monkeypatch, binding, driver, proc_fn, mem_v2, reason_fn, hint):
    gpus = make_gpus(2)
    gpus[0].compute_procs = [(ME, 2048 * MIB), (PARENT, None)]
    gpus[0].graphics_procs = [(ME, 2048 * MIB)]
    fake, src, clock = start(monkeypatch, gpus, driver=driver, binding=binding)
    info = src.open()
    sample = src.poll()
    g0 = sample.gpus[0]
    fg = fake.gpus[0]

    assert isinstance(g0.info.name, str) and g0.info.name == fg.name
    assert g0.info.uuid == fg.uuid and g0.info.pci_bus_id == fg.pci_bus_id
    assert info.driver_version == driver.version
    assert info.cuda_version == cuda_version_text(driver.cuda_version)
    if mem_v2:
        assert (g0.memory_used, g0.memory_reserved) == (fg.memory_used, fg.memory_reserved)
    else:  # memory info v1 has no reserved figure and counts it as used
        assert g0.memory_reserved is None
        assert g0.memory_used == fg.memory_used + fg.memory_reserved
    assert g0.throttle_reasons == reasons_from_mask(fg.clock_reasons)
    assert fake.count(0, reason_fn) == 1

    by_pid = {p.pid: p for p in g0.processes}
    assert set(by_pid) == {ME, PARENT}
    assert by_pid[ME].kind == "C+G" and by_pid[ME].used_memory == 2048 * MIB
    assert by_pid[PARENT].kind == "C" and by_pid[PARENT].used_memory is None
    assert fake.count(0, proc_fn) == 1
    assert sample.gpus[1].processes == ()
    assert bool(sample.info.hints) is hint

    # The answering versions are remembered: the next process tick asks only them.
    fake.reset_counts()
    clock.advance(EVERY_TTL)
    src.poll()
    called = fake.functions_called(0)
    assert called[proc_fn] == 1
    assert sum(n for fn, n in called.items() if "ComputeRunningProcesses" in fn) == 1
    assert sum(n for fn, n in called.items() if "Clocks" in fn) == 1
    assert called["nvmlDeviceGetMemoryInfo"] == 1


def test_new_binding_on_r450_lists_no_processes_and_says_why_once(monkeypatch):
    gpus = make_gpus(2)
    for g in gpus:
        g.compute_procs = [(ME, 100 * MIB)]
    fake, src, clock = start(monkeypatch, gpus, driver=DRIVER_R450, binding=BINDING_13)
    src.open()
    sample = src.poll()
    assert all(g.processes == () for g in sample.gpus)
    assert all(g.memory_used is not None for g in sample.gpus)  # memory v1 still answers
    hints = [h for h in sample.info.hints if "disagree" in h]
    assert len(hints) == 1 and DRIVER_R450.version in hints[0]
    fake.reset_counts()
    clock.advance(EVERY_TTL)
    again = src.poll()
    assert fake.count(None, "nvmlDeviceGetComputeRunningProcesses") == 0
    assert again.info.hints == sample.info.hints


# -- every error on every call --------------------------------------------------------------
def _pids(gs: GpuSample, kind: str) -> tuple[int, ...] | None:
    pids = tuple(p.pid for p in gs.processes if kind in p.kind)
    return pids or None


def observe(gs: GpuSample, name: str) -> Any:
    if name == "compute_pids":
        return _pids(gs, "C")
    if name == "graphics_pids":
        return _pids(gs, "G")
    return getattr(gs, name)


LOST = "lost"
UNSUPPORTED = "unsupported"
MISSING = "missing"
TRANSIENT = "transient"


def category(error: int | BaseException) -> str:
    if not isinstance(error, int):
        return TRANSIENT
    if error == NVML_ERROR_GPU_IS_LOST:
        return LOST
    if error in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_NO_PERMISSION):
        return UNSUPPORTED
    if error in (NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH):
        return MISSING
    return TRANSIENT


# function -> (what it feeds, the driver/binding on which the source calls it,
#              categories after which another way still fills those fields)
TICK_FUNCTIONS: dict[str, tuple[tuple[str, ...], Any, Any, frozenset[str]]] = {
    "nvmlDeviceGetMemoryInfo": (
        ("memory_used", "memory_free", "memory_reserved"),
        DRIVER_R535,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetUtilizationRates": (
        ("util_gpu", "util_mem"),
        DRIVER_R535,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetFieldValues": (
        ("energy_mj", "power_w", "power_limit_w", "ecc_corrected", "retired_pages"),
        DRIVER_R535,
        BINDING_13,
        frozenset({UNSUPPORTED, MISSING}),
    ),
    "nvmlDeviceGetTotalEnergyConsumption": (
        ("energy_mj",),
        DRIVER_NO_FIELD_VALUES,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetPowerUsage": (("power_w",), DRIVER_NO_FIELD_VALUES, BINDING_13, frozenset()),
    "nvmlDeviceGetEnforcedPowerLimit": (
        ("power_limit_w",),
        DRIVER_NO_FIELD_VALUES,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetTemperature": (("temp_c",), DRIVER_R535, BINDING_13, frozenset()),
    "nvmlDeviceGetClockInfo": (
        ("sm_clock_mhz", "mem_clock_mhz"),
        DRIVER_R535,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetFanSpeed": (("fan_pct",), DRIVER_R535, BINDING_13, frozenset()),
    "nvmlDeviceGetPerformanceState": (("pstate",), DRIVER_R535, BINDING_13, frozenset()),
    "nvmlDeviceGetCurrentClocksEventReasons": (
        ("throttle_reasons",),
        DRIVER_R535,
        BINDING_13,
        frozenset({MISSING}),
    ),
    "nvmlDeviceGetCurrentClocksThrottleReasons": (
        ("throttle_reasons",),
        DRIVER_R470,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetCurrPcieLinkGeneration": (("pcie_gen",), DRIVER_R535, BINDING_13, frozenset()),
    "nvmlDeviceGetCurrPcieLinkWidth": (("pcie_width",), DRIVER_R535, BINDING_13, frozenset()),
    "nvmlDeviceGetPcieThroughput": (
        ("pcie_tx_kbs", "pcie_rx_kbs"),
        DRIVER_R535,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetNvLinkState": (("nvlink_active",), DRIVER_R535, BINDING_13, frozenset()),
    "nvmlDeviceGetTotalEccErrors": (
        (
            "ecc_corrected",
            "ecc_uncorrected",
            "ecc_aggregate_corrected",
            "ecc_aggregate_uncorrected",
        ),
        DRIVER_NO_FIELD_VALUES,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetRetiredPages": (
        ("retired_pages",),
        DRIVER_NO_FIELD_VALUES,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetComputeRunningProcesses_v3": (
        ("compute_pids",),
        DRIVER_R535,
        BINDING_13,
        frozenset({MISSING}),
    ),
    "nvmlDeviceGetGraphicsRunningProcesses_v3": (
        ("graphics_pids",),
        DRIVER_R535,
        BINDING_13,
        frozenset({MISSING}),
    ),
    # On R470 the new binding's unsuffixed name calls _v3, which R470 lacks: nothing older.
    "nvmlDeviceGetComputeRunningProcesses_v2": (
        ("compute_pids",),
        DRIVER_R470,
        BINDING_13,
        frozenset(),
    ),
    "nvmlDeviceGetComputeRunningProcesses": (
        ("compute_pids",),
        DRIVER_R450,
        BINDING_11,
        frozenset(),
    ),
}
ERRORS = [*DEVICE_ERROR_CODES, RuntimeError("driver hiccup")]


def _error_id(error: int | BaseException) -> str:
    if isinstance(error, int):
        return type(NVMLError(error)).__name__.replace("NVMLError_", "")
    return type(error).__name__


@pytest.mark.parametrize("error", ERRORS, ids=_error_id)
@pytest.mark.parametrize("function", list(TICK_FUNCTIONS))
def test_every_error_on_every_tick_call(monkeypatch, function, error):
    attrs, driver, binding, recovers_after = TICK_FUNCTIONS[function]
    fake, src, clock = start(monkeypatch, rich_gpus(2), driver=driver, binding=binding)
    src.open()
    healthy = src.poll()
    for name in attrs:
        assert observe(healthy.gpus[0], name) is not None, name  # the call feeds this field

    fake.fail(0, function, error)
    clock.advance(EVERY_TTL)
    fake.reset_counts()
    sample = src.poll()  # must not raise
    g0, g1 = sample.gpus
    kind = category(error)
    assert fake.count(0, function) >= 1

    # The other GPU is untouched whatever happened to GPU 0.
    assert not g1.lost and g1.error is None
    for name in attrs:
        assert observe(g1, name) == observe(healthy.gpus[1], name)

    if kind == LOST:
        assert g0.lost and "lost" in (g0.error or "")
        assert g0.memory_used is None and g0.processes == ()
        fake.reset_counts()
        clock.advance(EVERY_TTL)
        later = src.poll()
        assert later.gpus[0].lost and fake.count(0) == 0  # never asked again
        assert later.gpus[1].memory_used is not None
        return

    assert not g0.lost
    assert g0.memory_used is not None or function == "nvmlDeviceGetMemoryInfo"
    if kind in recovers_after:
        for name in attrs:
            assert observe(g0, name) == observe(healthy.gpus[0], name), name
        assert not any("disagree" in h for h in sample.info.hints)
    else:
        for name in attrs:
            assert observe(g0, name) is None, name

    if kind == TRANSIENT:
        words = str(error) if not isinstance(error, int) else str(NVMLError(error))
        assert g0.error is not None and words in g0.error
    elif kind == MISSING and kind not in recovers_after:
        assert sum("disagree" in h for h in sample.info.hints) == 1
    elif kind == UNSUPPORTED and kind not in recovers_after:
        assert g0.error is None  # not supported is not an error

    # Next tick: refused calls are not repeated; transient failures are retried.
    fake.reset_counts()
    clock.advance(EVERY_TTL)
    nxt = src.poll()
    if kind == TRANSIENT:
        assert fake.count(0, function) >= 1
        fake.heal(0, function)
        clock.advance(EVERY_TTL)
        healed = src.poll()
        healed = src.poll() if function == "nvmlDeviceGetNvLinkState" else healed
        for name in attrs:
            assert observe(healed.gpus[0], name) == observe(healthy.gpus[0], name), name
    else:
        assert fake.count(0, function) == 0
        assert fake.count(1, function) >= 1
    assert not nxt.gpus[0].lost


STATIC_FUNCTIONS = {
    "nvmlDeviceGetName": ("name", "GPU 0"),
    "nvmlDeviceGetUUID": ("uuid", "index:0"),  # (the key of a GPU that reads no UUID)
    "nvmlDeviceGetPciInfo": ("pci_bus_id", ""),
    "nvmlDeviceGetPowerManagementDefaultLimit": ("power_limit_default_w", None),
    "nvmlDeviceGetPowerManagementLimitConstraints": ("power_limit_max_w", None),
    "nvmlDeviceGetMaxClockInfo": ("max_sm_clock_mhz", None),
    "nvmlDeviceGetCudaComputeCapability": ("compute_capability", None),
    "nvmlDeviceGetVbiosVersion": ("vbios", None),
    "nvmlDeviceGetPersistenceMode": ("persistence_mode", None),
    "nvmlDeviceGetMaxPcieLinkGeneration": ("pcie_gen_max", None),
    "nvmlDeviceGetMaxPcieLinkWidth": ("pcie_width_max", None),
}


@pytest.mark.parametrize(
    "error",
    [
        NVML_ERROR_NOT_SUPPORTED,
        NVML_ERROR_NO_PERMISSION,
        NVML_ERROR_FUNCTION_NOT_FOUND,
        NVML_ERROR_TIMEOUT,
        NVML_ERROR_UNKNOWN,
        NVML_ERROR_GPU_IS_LOST,
        ValueError("odd answer"),
    ],
    ids=_error_id,
)
@pytest.mark.parametrize("function", list(STATIC_FUNCTIONS))
def test_every_error_on_static_reads(monkeypatch, function, error):
    attr, placeholder = STATIC_FUNCTIONS[function]
    fake, src, _ = start(monkeypatch, rich_gpus(2))
    fake.fail(0, function, error)
    info = src.open()  # never raises for one field of one GPU
    sample = src.poll()
    g0, g1 = sample.gpus
    assert getattr(g1.info, attr) is not None and not g1.lost
    if category(error) == LOST:
        assert g0.lost and g1.memory_used is not None
        return
    assert getattr(info.gpus[0], attr) == placeholder
    assert g0.memory_used is not None
    if category(error) == TRANSIENT:
        assert g0.error is not None  # the first tick says what could not be read


def test_memory_total_missed_at_open_is_filled_by_the_first_reading(monkeypatch):
    fake, src, _ = start(monkeypatch)
    fake.fail(0, "nvmlDeviceGetMemoryInfo", NVML_ERROR_TIMEOUT, times=1)
    info = src.open()
    assert info.gpus[0].memory_total is None  # unknown, not 0
    sample = src.poll()
    assert sample.gpus[0].memory_used == fake.gpus[0].memory_used
    assert sample.gpus[0].memory_total == fake.gpus[0].memory_total
    assert sample.info.gpus[0].memory_total == fake.gpus[0].memory_total
    assert sample.gpus[0].memory_pct is not None


def test_a_gpu_lost_at_open_is_listed_lost(monkeypatch):
    fake, src, _ = start(monkeypatch, make_gpus(3))
    fake.lose(1)
    info = src.open()
    assert len(info.gpus) == 3
    sample = src.poll()
    assert [g.lost for g in sample.gpus] == [False, True, False]


def test_a_gpu_nvml_will_not_open_is_left_out_with_a_hint(monkeypatch):
    fake, src, _ = start(monkeypatch, make_gpus(3))
    fake.fail(2, "nvmlDeviceGetHandleByIndex", NVML_ERROR_NO_PERMISSION)
    info = src.open()
    assert [g.index for g in info.gpus] == [0, 1]
    assert any("GPU 2: no permission" in h for h in info.hints)
    assert len(src.poll().gpus) == 2


def test_no_gpu_can_be_opened_is_unavailable(monkeypatch):
    fake, src, _ = start(monkeypatch, make_gpus(2))
    for i in range(2):
        fake.fail(i, "nvmlDeviceGetHandleByIndex", NVML_ERROR_NO_PERMISSION)
    with pytest.raises(SourceUnavailable, match="none of the 2"):
        src.open()
    assert fake.initialised == 0  # NVML shut down again


# -- a GPU lost mid-run --------------------------------------------------------------------
def test_gpu_lost_mid_run_others_keep_updating(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(3))
    src.open()
    before = src.poll()
    assert not any(g.lost for g in before.gpus)

    fake.lose(1)
    for g in (fake.gpus[0], fake.gpus[2]):
        g.util_gpu += 20
        g.memory_used += 512 * MIB
        g.energy_mj = (g.energy_mj or 0) + 5000
    clock.advance(1.0)
    after = src.poll()
    assert after.error is None
    assert after.gpus[1].lost and "lost" in (after.gpus[1].error or "")
    assert after.gpus[1].info == before.gpus[1].info  # identity kept for the UI
    for i in (0, 2):
        assert after.gpus[i].util_gpu == fake.gpus[i].util_gpu
        assert after.gpus[i].memory_used == fake.gpus[i].memory_used
        assert after.gpus[i].energy_mj == fake.gpus[i].energy_mj

    fake.reset_counts()
    for _ in range(3):
        clock.advance(EVERY_TTL)
        src.poll()
    assert fake.count(1) == 0
    assert fake.count(0) > 0 and fake.count(2) > 0


def test_every_gpu_lost_is_a_source_error_not_an_exception(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(2))
    src.open()
    src.poll()
    fake.lose(0)
    fake.lose(1)
    clock.advance(1.0)
    sample = src.poll()
    assert all(g.lost for g in sample.gpus)
    assert sample.error is not None and "every GPU is lost" in sample.error


def test_gpu_lost_inside_a_field_value_batch(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(2))
    src.open()
    src.poll()
    fake.fail_field(0, NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, NVML_ERROR_GPU_IS_LOST)
    clock.advance(1.0)
    sample = src.poll()
    assert sample.gpus[0].lost and not sample.gpus[1].lost


# -- field-value batching ---------------------------------------------------------------------
FAST_SINGLE_CALLS = (
    "nvmlDeviceGetTotalEnergyConsumption",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
)


def fast_tick_calls(fake: FakeNvml, src: NvmlSource, clock: StepClock, gpu: int = 0) -> Any:
    clock.advance(1.0)  # inside every TTL: a fast tick only
    fake.reset_counts()
    src.poll()
    return fake.functions_called(gpu)


def test_field_values_batch_energy_power_and_limit_in_one_call(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(2))
    src.open()
    src.poll()
    called = fast_tick_calls(fake, src, clock)
    assert called["nvmlDeviceGetFieldValues"] == 1
    assert not any(called[fn] for fn in FAST_SINGLE_CALLS)
    assert sum(called.values()) <= 10


def test_without_field_values_each_field_has_its_own_call(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(2), driver=DRIVER_NO_FIELD_VALUES)
    src.open()
    first = src.poll()
    called = fast_tick_calls(fake, src, clock)
    assert called["nvmlDeviceGetFieldValues"] == 0  # the failed batch is not retried
    assert called["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert called["nvmlDeviceGetPowerUsage"] == 1
    assert called["nvmlDeviceGetEnforcedPowerLimit"] == 0  # moved to the slow TTL
    assert sum(called.values()) <= 10
    g0 = first.gpus[0]
    fg = fake.gpus[0]
    assert g0.energy_mj == fg.energy_mj
    assert g0.power_w == pytest.approx(fg.power_mw / 1000)
    assert g0.power_limit_w == pytest.approx(fg.enforced_limit_mw / 1000)
    assert not first.info.hints  # a missing batch call is normal on old drivers


def test_fields_the_driver_does_not_know_fall_back_one_by_one(monkeypatch):
    # R470 knows the energy field id but not the power ones (185, 190).
    fake, src, clock = start(monkeypatch, make_gpus(1), driver=DRIVER_R470)
    src.open()
    first = src.poll()
    fg = fake.gpus[0]
    assert first.gpus[0].energy_mj == fg.energy_mj
    assert first.gpus[0].power_w == pytest.approx(fg.power_mw / 1000)
    assert first.gpus[0].power_limit_w == pytest.approx(fg.enforced_limit_mw / 1000)
    called = fast_tick_calls(fake, src, clock)
    assert called["nvmlDeviceGetFieldValues"] == 1
    assert called["nvmlDeviceGetTotalEnergyConsumption"] == 0
    assert called["nvmlDeviceGetPowerUsage"] == 1
    fg.enforced_limit_mw = 250_000
    clock.advance(EVERY_TTL)
    assert src.poll().gpus[0].power_limit_w == pytest.approx(250.0)


def test_a_limit_read_on_the_slow_ttl_holds_between_slow_ticks(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(1), driver=DRIVER_R470)
    src.open()
    fg = fake.gpus[0]
    first_limit = fg.enforced_limit_mw / 1000
    assert src.poll().gpus[0].power_limit_w == pytest.approx(first_limit)
    fg.enforced_limit_mw = 250_000
    clock.advance(1.0)  # a fast tick: the limit is not asked again, the last one stands
    assert src.poll().gpus[0].power_limit_w == pytest.approx(first_limit)
    clock.advance(EVERY_TTL)
    assert src.poll().gpus[0].power_limit_w == pytest.approx(250.0)


def test_average_power_unsupported_on_the_gpu_uses_power_usage(monkeypatch):
    gpus = make_gpus(2)
    gpus[0].power_average_supported = False  # Turing: no 1 s average field
    fake, src, clock = start(monkeypatch, gpus)
    src.open()
    first = src.poll()
    assert first.gpus[0].power_w == pytest.approx(gpus[0].power_mw / 1000)
    assert fast_tick_calls(fake, src, clock, 0)["nvmlDeviceGetPowerUsage"] == 1
    assert fast_tick_calls(fake, src, clock, 1)["nvmlDeviceGetPowerUsage"] == 0


def test_a_transient_per_field_error_is_none_for_that_tick_only(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(1))
    src.open()
    src.poll()
    fake.fail_field(0, NVML_FI_DEV_POWER_AVERAGE, NVML_ERROR_TIMEOUT)
    clock.advance(1.0)
    sample = src.poll()
    assert sample.gpus[0].power_w is None and "power" in (sample.gpus[0].error or "")
    assert sample.gpus[0].energy_mj is not None
    fake._field_failures.clear()
    clock.advance(1.0)
    assert src.poll().gpus[0].power_w is not None


# -- the not-supported memo -------------------------------------------------------------------
def test_not_supported_is_remembered_per_gpu_and_field(monkeypatch):
    gpus = make_gpus(2)
    gpus[0].fan_pct = None  # a passively cooled datacenter card
    fake, src, clock = start(monkeypatch, gpus)
    src.open()
    first = src.poll()
    assert first.gpus[0].fan_pct is None and first.gpus[0].error is None
    assert first.gpus[1].fan_pct == gpus[1].fan_pct
    for _ in range(4):  # the fan is a slow field: read on the slow TTL, GPU 1 only
        clock.advance(DEFAULT_SLOW_TTL_S)
        fake.reset_counts()
        src.poll()
        called0 = fake.functions_called(0)
        assert called0["nvmlDeviceGetFanSpeed"] == 0
        assert called0["nvmlDeviceGetTemperature"] == 1
        assert fake.functions_called(1)["nvmlDeviceGetFanSpeed"] == 1


def test_geforce_without_ecc_asks_once(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(1))  # no ECC, no retired pages
    src.open()
    first = src.poll()
    assert first.gpus[0].ecc_corrected is None and first.gpus[0].retired_pages is None
    clock.advance(EVERY_TTL)
    fake.reset_counts()
    src.poll()
    assert fake.count(0, "nvmlDeviceGetTotalEccErrors") == 0
    assert fake.count(0, "nvmlDeviceGetRetiredPages") == 0


# -- slow fields and their TTLs -----------------------------------------------------------
def test_pcie_throughput_never_runs_on_the_fast_path(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(2))
    src.open()
    first = src.poll()
    assert first.gpus[0].pcie_rx_kbs == fake.gpus[0].pcie_rx_kbs
    for _ in range(3):
        called = fast_tick_calls(fake, src, clock)
        assert called["nvmlDeviceGetPcieThroughput"] == 0
    fake.gpus[0].pcie_rx_kbs = 99_000
    clock.advance(DEFAULT_PCIE_TTL_S)
    fake.reset_counts()
    sample = src.poll()
    assert fake.count(0, "nvmlDeviceGetPcieThroughput") == 2
    assert sample.gpus[0].pcie_rx_kbs == 99_000


def test_ttls_are_constructor_arguments(monkeypatch):
    fake = FakeNvml(make_gpus(1)).install(monkeypatch)
    clock = StepClock(1000.0, step=0.0)
    src = NvmlSource(
        slow_ttl_s=0.5, process_ttl_s=10.0, pcie_ttl_s=100.0, link_ttl_s=0.5, clock=clock, env={}
    )
    src.open()
    src.poll()
    clock.advance(0.6)
    fake.reset_counts()
    src.poll()
    called = fake.functions_called(0)
    assert called["nvmlDeviceGetFanSpeed"] == 1  # slow TTL passed
    assert called["nvmlDeviceGetCurrPcieLinkGeneration"] == 1  # and the link TTL
    assert called["nvmlDeviceGetComputeRunningProcesses_v3"] == 0  # process TTL did not
    assert called["nvmlDeviceGetPcieThroughput"] == 0


def test_processes_refresh_on_their_ttl_and_are_enriched_from_the_host(monkeypatch):
    gpus = make_gpus(2)
    gpus[1].compute_procs = [(ME, 700 * MIB)]
    _fake, src, clock = start(monkeypatch, gpus)
    src.open()
    first = src.poll()
    (proc,) = first.gpus[1].processes
    assert proc.gpu_index == 1 and proc.used_memory == 700 * MIB and proc.kind == "C"
    assert proc.name is not None and proc.user is not None and proc.host_rss
    assert str(ME) not in (proc.name or "")

    gpus[1].compute_procs = []
    clock.advance(DEFAULT_PROCESS_TTL_S / 2)
    assert src.poll().gpus[1].processes == first.gpus[1].processes  # not due yet
    clock.advance(DEFAULT_PROCESS_TTL_S)
    assert src.poll().gpus[1].processes == ()


def test_a_vanished_pid_keeps_nvml_facts(monkeypatch):
    gpus = make_gpus(1)
    gpus[0].compute_procs = [(2**22 + 12345, 50 * MIB)]  # above Linux's pid_max
    _, src, _ = start(monkeypatch, gpus)
    src.open()
    (proc,) = src.poll().gpus[0].processes
    assert proc.used_memory == 50 * MIB and proc.name is None


# -- per-process SM utilisation -----------------------------------------------------------------
PROC_UTIL = "nvmlDeviceGetProcessUtilization"
PROCS_UTIL_INFO = "nvmlDeviceGetProcessesUtilizationInfo"


def util_gpus() -> list[FakeGpu]:
    gpus = make_gpus(2)
    gpus[0].compute_procs = [(ME, 2048 * MIB), (PARENT, 512 * MIB)]
    gpus[0].util_samples = [(ME, 100, 30), (PARENT, 150, 5), (ME, 200, 45)]
    return gpus


def sm_utils(sample: RigSample, gpu: int = 0) -> dict[int, float | None]:
    return {p.pid: p.sm_util for p in sample.gpus[gpu].processes}


@pytest.mark.parametrize(
    ("driver", "binding", "answers"),
    [
        (DRIVER_R550, BINDING_13, PROCS_UTIL_INFO),
        (DRIVER_R535, BINDING_13, PROC_UTIL),
        (DRIVER_R550, BINDING_11, PROC_UTIL),  # the old binding lacks the newer function
        (DRIVER_R450, BINDING_11, PROC_UTIL),
    ],
    ids=["R550", "R535", "R550-old-binding", "R450-old-binding"],
)
def test_sm_util_per_process_from_the_samples_since_the_last_read(
    monkeypatch, driver, binding, answers
):
    fake, src, clock = start(monkeypatch, util_gpus(), driver=driver, binding=binding)
    src.open()
    first = src.poll()
    assert sm_utils(first) == {ME: 45.0, PARENT: 5.0}  # the newest sample of each pid
    assert first.gpus[0].error is None
    assert fake.count(0, answers) == 1
    assert fake.count(1) > 0 and fake.count(1, answers) == 0  # no process: not asked

    # Only samples after the newest timestamp read count: PARENT had none since, so 0 %.
    fake.gpus[0].util_samples.append((ME, 300, 80))
    clock.advance(DEFAULT_PROCESS_TTL_S)
    fake.reset_counts()
    assert sm_utils(src.poll()) == {ME: 80.0, PARENT: 0.0}
    called = fake.functions_called(0)
    assert called[answers] == 1 and called[PROC_UTIL] + called[PROCS_UTIL_INFO] == 1

    # No sample since (NOT_FOUND): every process was idle, and that is no error.
    clock.advance(DEFAULT_PROCESS_TTL_S)
    idle = src.poll()
    assert sm_utils(idle) == {ME: 0.0, PARENT: 0.0} and idle.gpus[0].error is None

    # Not on a tick whose process TTL has not passed.
    clock.advance(DEFAULT_PROCESS_TTL_S / 4)
    fake.reset_counts()
    src.poll()
    assert fake.count(0, answers) == 0


def test_sm_util_not_supported_is_none_not_zero_and_asked_once(monkeypatch):
    gpus = util_gpus()
    gpus[0].util_samples = None  # MIG, or a GPU without per-process accounting
    fake, src, clock = start(monkeypatch, gpus)
    src.open()
    sample = src.poll()
    assert sm_utils(sample) == {ME: None, PARENT: None}
    assert sample.gpus[0].error is None
    assert [p.used_memory for p in sample.gpus[0].processes] == [2048 * MIB, 512 * MIB]
    clock.advance(DEFAULT_PROCESS_TTL_S)
    fake.reset_counts()
    assert sm_utils(src.poll()) == {ME: None, PARENT: None}
    assert fake.count(0, PROC_UTIL) == 0


def test_sm_util_no_samples_raised_as_success_by_the_binding_is_idle(monkeypatch):
    # nvidia-ml-py raises NVMLError(ret) for any answer to its size query but
    # INSUFFICIENT_SIZE: a driver that answers SUCCESS with no sample reads as NVMLError(0)
    fake, src, _clock = start(monkeypatch, util_gpus())
    fake.fail(0, PROC_UTIL, NVMLError(0))
    src.open()
    sample = src.poll()
    assert sm_utils(sample) == {ME: 0.0, PARENT: 0.0} and sample.gpus[0].error is None


def test_sm_util_values_that_are_not_percentages_are_left_out(monkeypatch):
    gpus = util_gpus()
    gpus[0].util_samples = [(ME, 100, 0xFFFFFFFF), (PARENT, 100, 12)]
    _fake, src, _clock = start(monkeypatch, gpus)
    src.open()
    assert sm_utils(src.poll()) == {ME: 0.0, PARENT: 12.0}


@pytest.mark.parametrize("error", ERRORS, ids=_error_id)
def test_every_error_on_process_utilisation(monkeypatch, error):
    fake, src, clock = start(monkeypatch, util_gpus(), driver=DRIVER_R550)
    src.open()
    fake.fail(0, PROCS_UTIL_INFO, error)
    sample = src.poll()  # must not raise
    g0 = sample.gpus[0]
    assert not sample.gpus[1].lost and sample.gpus[1].error is None
    kind = category(error)
    if kind == LOST:
        assert g0.lost and g0.processes == ()
        return
    pids = {ME, PARENT}
    if error == NVML_ERROR_NOT_FOUND:  # no sample in the period: idle, not an error
        assert sm_utils(sample) == dict.fromkeys(pids, 0.0) and g0.error is None
    elif kind == MISSING:  # older driver: the older function answers, from now on
        assert sm_utils(sample) == {ME: 45.0, PARENT: 5.0} and g0.error is None
        assert fake.count(0, PROC_UTIL) == 1
    elif kind == UNSUPPORTED:
        assert sm_utils(sample) == dict.fromkeys(pids, None) and g0.error is None
    else:
        assert sm_utils(sample) == dict.fromkeys(pids, None)
        words = str(error) if not isinstance(error, int) else str(NVMLError(error))
        assert g0.error is not None and words in g0.error
    assert {p.pid for p in g0.processes} == pids  # the list stands whatever the samples did
    assert g0.memory_used is not None

    fake.heal(0, PROCS_UTIL_INFO)
    fake.gpus[0].util_samples.append((PARENT, 900, 70))
    clock.advance(DEFAULT_PROCESS_TTL_S)
    fake.reset_counts()
    again = src.poll()
    if kind == UNSUPPORTED:  # remembered: not asked again
        assert sm_utils(again) == dict.fromkeys(pids, None)
        assert fake.count(0, PROCS_UTIL_INFO) + fake.count(0, PROC_UTIL) == 0
    else:
        assert sm_utils(again)[PARENT] == 70.0
        assert fake.count(0, PROCS_UTIL_INFO) + fake.count(0, PROC_UTIL) == 1


def test_nvlink_throughput_from_counter_deltas(monkeypatch):
    gpus = make_gpus(2, nvlinks=4)
    gpus[0].nvlink_states = [1, 1, 0, 1]
    _fake, src, clock = start(monkeypatch, gpus)
    src.open()
    first = src.poll()
    assert first.gpus[0].nvlink_active == 3
    assert first.gpus[0].nvlink_tx_kbs is None  # one reading is not a rate
    gpus[0].nvlink_tx_kib += 40_000
    gpus[0].nvlink_rx_kib += 10_000
    clock.advance(DEFAULT_SLOW_TTL_S)
    second = src.poll()
    assert second.gpus[0].nvlink_tx_kbs == pytest.approx(40_000 / DEFAULT_SLOW_TTL_S)
    assert second.gpus[0].nvlink_rx_kbs == pytest.approx(10_000 / DEFAULT_SLOW_TTL_S)
    gpus[0].nvlink_tx_kib = 0  # counter reset
    clock.advance(DEFAULT_SLOW_TTL_S)
    assert src.poll().gpus[0].nvlink_tx_kbs is None
    assert first.gpus[1].nvlink_active == 4


def test_no_nvlink_means_none_and_no_nvlink_calls(monkeypatch):
    fake, src, clock = start(monkeypatch, make_gpus(1))
    info = src.open()
    sample = src.poll()
    assert info.gpus[0].nvlink_links is None and sample.gpus[0].nvlink_active is None
    clock.advance(EVERY_TTL)
    fake.reset_counts()
    src.poll()
    assert fake.count(0, "nvmlDeviceGetNvLinkState") == 0


def test_nvlink_links_counted_by_state_when_the_field_is_unknown(monkeypatch):
    gpus = make_gpus(1, nvlinks=6)
    _fake, src, _ = start(monkeypatch, gpus, driver=DRIVER_NO_FIELD_VALUES)
    assert src.open().gpus[0].nvlink_links == 6


# -- energy counter units ---------------------------------------------------------------------
@pytest.mark.parametrize("driver", [DRIVER_R535, DRIVER_NO_FIELD_VALUES], ids=["batched", "single"])
def test_energy_is_the_millijoule_counter(monkeypatch, driver):
    fake, src, clock = start(monkeypatch, make_gpus(1), driver=driver)
    src.open()
    first = src.poll().gpus[0]
    assert isinstance(first.energy_mj, int)
    assert first.energy_mj == fake.gpus[0].energy_mj
    # 250 W for 2 s is 500 J = 500_000 mJ.
    fake.gpus[0].energy_mj = (fake.gpus[0].energy_mj or 0) + 500_000
    clock.advance(2.0)
    second = src.poll().gpus[0]
    assert second.energy_mj is not None and first.energy_mj is not None
    assert second.energy_mj - first.energy_mj == 500_000


def test_no_energy_counter_is_none(monkeypatch):
    gpus = make_gpus(1)
    gpus[0].energy_mj = None  # before Volta
    _, src, _ = start(monkeypatch, gpus)
    src.open()
    g = src.poll().gpus[0]
    assert g.energy_mj is None and g.error is None


# -- init failures ----------------------------------------------------------------------------
INIT_FAILURES = [
    (NVML_ERROR_LIBRARY_NOT_FOUND, "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)"),
    (NVML_ERROR_DRIVER_NOT_LOADED, "NVIDIA driver not loaded (the nvidia kernel module"),
    (NVML_ERROR_NO_PERMISSION, "no permission to use the NVIDIA driver"),
    (NVML_ERROR_LIB_RM_VERSION_MISMATCH, "different versions"),
    (NVML_ERROR_UNKNOWN, "NVML did not initialise: Unknown Error"),
]


@pytest.mark.parametrize(("code", "words"), INIT_FAILURES)
def test_init_failures_give_the_reason_in_words(monkeypatch, code, words):
    fake, src, _ = start(monkeypatch)
    fake.init_error = code
    with pytest.raises(SourceUnavailable) as caught:
        src.open()
    assert words in str(caught.value)
    assert "\n" not in str(caught.value)
    probe = probe_nvml()
    assert not probe.available and probe.reason is not None and words in probe.reason
    assert probe.hint


def test_no_gpus_is_unavailable_and_nvml_is_shut_down(monkeypatch):
    fake, src, _ = start(monkeypatch, [])
    with pytest.raises(SourceUnavailable, match="no NVIDIA GPU found"):
        src.open()
    assert fake.initialised == 0
    probe = probe_nvml()
    assert (
        not probe.available and probe.device_count == 0 and "no NVIDIA GPU" in (probe.reason or "")
    )
    assert fake.initialised == 0


def test_binding_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    with pytest.raises(SourceUnavailable, match="nvidia-ml-py is not installed"):
        NvmlSource().open()
    probe = probe_nvml()
    assert not probe.available and probe.reason == "nvidia-ml-py is not installed"
    assert "nvidia-ml-py" in (probe.hint or "")


def test_a_foreign_module_named_pynvml_is_not_the_binding(monkeypatch):
    import types

    monkeypatch.setitem(sys.modules, "pynvml", types.ModuleType("pynvml"))
    with pytest.raises(SourceUnavailable, match="not NVIDIA's nvidia-ml-py"):
        NvmlSource().open()
    probe = probe_nvml()
    assert not probe.available and "not NVIDIA's" in (probe.reason or "")


def test_probe_reports_versions_and_count_and_leaves_nvml_closed(monkeypatch):
    fake, _, _ = start(monkeypatch, make_gpus(3), driver=DRIVER_R470)
    probe = probe_nvml()
    assert probe.available and probe.reason is None
    assert probe.driver_version == DRIVER_R470.version
    assert probe.nvml_version == DRIVER_R470.nvml_version
    assert probe.cuda_version == "11.4" and probe.device_count == 3
    assert probe.hint is None
    assert fake.initialised == 0


def test_probe_with_old_binding_reads_bytes(monkeypatch):
    start(monkeypatch, make_gpus(1), driver=DRIVER_R450, binding=BINDING_11)
    probe = probe_nvml()
    assert probe.driver_version == DRIVER_R450.version and probe.cuda_version == "11.0"


@pytest.mark.parametrize(
    ("raw", "text"), [(12040, "12.4"), (11080, "11.8"), (12020, "12.2"), (13000, "13.0")]
)
def test_cuda_version_text(raw, text):
    assert cuda_version_text(raw) == text


# -- CUDA ordering ----------------------------------------------------------------------------
def cand(uuid: str, bus: str, cc: tuple[int, int] | None) -> CudaCandidate:
    return CudaCandidate(uuid, bus, cc)


MIXED = [  # NVML order: a 3090 on the lower bus, then a 4090, then another 3090
    cand("GPU-aaaa1111-0000", "00000000:17:00.0", (8, 6)),
    cand("GPU-bbbb2222-0000", "00000000:65:00.0", (8, 9)),
    cand("GPU-aaaa3333-0000", "00000000:B3:00.0", (8, 6)),
]


def test_cuda_default_order_is_fastest_first_then_bus():
    assert cuda_indices(MIXED) == [1, 0, 2]


def test_cuda_pci_bus_id_order_follows_the_bus():
    assert cuda_indices(MIXED, device_order="PCI_BUS_ID") == [0, 1, 2]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        ("1", [0, None, None]),  # index into CUDA's order: the 3090 on bus 17
        ("2,0", [None, 1, 0]),
        ("GPU-bbbb2222-0000", [None, 0, None]),
        ("GPU-aaaa3", [None, None, 0]),  # a unique UUID prefix
        ("aaaa1", [0, None, None]),  # without the GPU- prefix
        ("GPU-aaaa", [None, None, None]),  # ambiguous: CUDA stops there
        ("0,2,-1,1", [None, 0, 1]),  # CUDA stops at the first bad entry
        ("0,0,1", [None, 0, None]),  # a repeat is a bad entry
        ("", [None, None, None]),  # set but empty: no GPU
        ("7", [None, None, None]),
        ("MIG-1234,0", [None, None, None]),
        (" 0 , 1 ", [1, 0, None]),
    ],
)
def test_cuda_visible_devices(visible, expected):
    assert cuda_indices(MIXED, visible_devices=visible) == expected


def test_cuda_visible_devices_indexes_the_pci_order_when_asked():
    assert cuda_indices(MIXED, device_order="PCI_BUS_ID", visible_devices="1") == [None, 0, None]


def test_bus_ids_compare_as_numbers_not_text():
    gpus = [cand("GPU-1", "00000000:0b:00.0", (8, 6)), cand("GPU-2", "0000:0A:00.0", (8, 6))]
    assert cuda_indices(gpus) == [1, 0]
    assert pci_sort_key("garbage") > pci_sort_key("00000000:FF:1F.7")


def test_unknown_compute_capability_goes_last():
    gpus = [cand("GPU-1", "00000000:01:00.0", None), cand("GPU-2", "00000000:02:00.0", (5, 0))]
    assert enumeration_order(gpus, None) == [1, 0]


def test_source_applies_cuda_environment_and_says_when_orders_differ(monkeypatch):
    gpus = make_gpus(2)
    gpus[1].compute_capability = (8, 9)
    gpus[1].name = "NVIDIA GeForce RTX 4090"
    _, src, _ = start(monkeypatch, gpus, env={"CUDA_VISIBLE_DEVICES": gpus[0].uuid[:12]})
    info = src.open()
    assert [g.cuda_index for g in info.gpus] == [0, None]
    assert any("CUDA_DEVICE_ORDER=PCI_BUS_ID" in h for h in info.hints)


def test_source_with_pci_bus_id_order_has_no_order_hint(monkeypatch):
    gpus = make_gpus(2)
    gpus[1].compute_capability = (8, 9)
    _, src, _ = start(monkeypatch, gpus, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    info = src.open()
    assert [g.cuda_index for g in info.gpus] == [0, 1]
    assert not any("CUDA_DEVICE_ORDER" in h for h in info.hints)


# -- the fake stays true to nvidia-ml-py --------------------------------------------------------
def test_fake_matches_the_installed_nvidia_ml_py(monkeypatch):
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    real = pytest.importorskip("pynvml")
    assert not hasattr(real, "FAKE")
    fake = FakeNvml(make_gpus(1)).module
    functions = [n for n in dir(fake) if n.startswith("nvml") and callable(getattr(fake, n))]
    assert len(functions) > 30
    for name in functions:
        assert hasattr(real, name), name
        real_params = list(inspect.signature(getattr(real, name)).parameters)
        fake_params = list(inspect.signature(getattr(fake, name)).parameters)
        assert fake_params == real_params, name
    for name in dir(fake):
        if name.startswith(("NVML_", "nvmlMemory_", "nvmlEvent")) and not callable(
            getattr(fake, name)
        ):
            real_value = getattr(real, name)
            fake_value = getattr(fake, name)
            if hasattr(real_value, "value"):
                real_value, fake_value = real_value.value, fake_value.value
            assert fake_value == real_value, name
        if name.startswith("NVMLError_"):
            real_cls = getattr(real, name)
            assert getattr(fake, name)().value == real_cls().value, name
    assert (
        real.NVMLError(NVML_ERROR_NOT_SUPPORTED).__class__.__name__
        == type(NVMLError(NVML_ERROR_NOT_SUPPORTED)).__name__
    )
    assert str(NVMLError(NVML_ERROR_GPU_IS_LOST)) == str(real.NVMLError(NVML_ERROR_GPU_IS_LOST))
    fake_event = list(fake.c_nvmlEventData_t._fields_)
    real_event = list(real.c_nvmlEventData_t._fields_)
    # The same fields; ``device`` is a handle object in the fake, a device pointer in the real.
    assert [n for n, _ in fake_event] == [n for n, _ in real_event]
    assert fake_event[1:] == real_event[1:]


def test_fake_counts_calls_per_gpu_and_function(monkeypatch):
    fake = FakeNvml(make_gpus(2))
    mod = fake.module
    mod.nvmlInit()
    h1 = mod.nvmlDeviceGetHandleByIndex(1)
    mod.nvmlDeviceGetTemperature(h1, 0)
    mod.nvmlDeviceGetTemperature(h1, 0)
    assert fake.count(1, "nvmlDeviceGetTemperature") == 2
    assert fake.count(0) == 0
    with pytest.raises(mod.NVMLError_InvalidArgument):
        mod.nvmlDeviceGetHandleByIndex(5)


@pytest.mark.parametrize(
    ("driver", "binding"),
    [(DRIVER_R535, BINDING_13), (DRIVER_NO_FIELD_VALUES, BINDING_13), (DRIVER_R450, BINDING_11)],
    ids=["R535", "no-field-values", "R450-old-binding"],
)
def test_fast_tick_stays_within_ten_calls_per_gpu(monkeypatch, driver, binding):
    fake, src, clock = start(monkeypatch, rich_gpus(4), driver=driver, binding=binding)
    src.open()
    src.poll()
    step = min(DEFAULT_SLOW_TTL_S, DEFAULT_PROCESS_TTL_S, DEFAULT_PCIE_TTL_S) / 4
    for _ in range(3):
        clock.advance(step)
        fake.reset_counts()
        sample = src.poll()
        for i in range(4):
            assert 0 < fake.count(i) <= 10, fake.functions_called(i)
        assert all(g.memory_used is not None and g.energy_mj is not None for g in sample.gpus)


def test_auto_source_picks_nvml_when_it_has_gpus(monkeypatch):
    from lltui.sources.gpu.kinds import open_source

    FakeNvml(make_gpus(2)).install(monkeypatch)
    source, info = open_source("auto")
    try:
        assert isinstance(source, NvmlSource) and not info.simulated
        assert len(source.poll().gpus) == 2
    finally:
        source.close()


def test_the_installed_binding_on_this_machine_works_or_says_why(monkeypatch):
    """The real nvidia-ml-py, no fake: a GPU machine samples, any other gives one line."""
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    pytest.importorskip("pynvml")
    probe = probe_nvml()
    src = NvmlSource()
    if not probe.available:
        with pytest.raises(SourceUnavailable) as caught:
            src.open()
        assert str(caught.value) == probe.reason and "\n" not in str(caught.value)
        return
    try:
        info = src.open()
        sample = src.poll()
        assert len(info.gpus) == probe.device_count == len(sample.gpus)
        assert all(g.info.uuid.startswith(("GPU-", "MIG-")) for g in sample.gpus)
        assert all(g.memory_used is not None for g in sample.gpus if not g.lost)
    finally:
        src.close()


def test_with_no_driver_to_see_nvml_is_not_loaded_to_learn_so(monkeypatch):
    import sys

    from lltui.sources.gpu import kinds

    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setattr(kinds, "NVIDIA_DRIVER_PATHS", ("/nonexistent/nvidiactl",))
    source, info = kinds.open_source("auto")
    source.close()
    assert info.simulated and kinds.NO_NVIDIA_DRIVER in (info.simulated_reason or "")
    assert "pynvml" not in sys.modules


def test_memory_nvml_cannot_read_is_unknown_not_zero(monkeypatch):
    """A GPU whose memory query is not supported read as a total of 0 bytes: `- / 0 MiB`,
    and the exporter published 0."""
    fake, src, _clock = start(monkeypatch, make_gpus(2))
    fake.fail(0, "nvmlDeviceGetMemoryInfo", NVML_ERROR_NOT_SUPPORTED)
    info = src.open()
    assert info.gpus[0].memory_total is None
    assert info.gpus[1].memory_total is not None and info.gpus[1].memory_total > 0
    assert src.poll().gpus[0].memory_used is None

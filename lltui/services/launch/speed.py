"""The speed of a launched llama-server's served requests beside the prediction for its
command: shared by ``lltui launch`` and the launch view. Fed the server's log lines; each
finished request's timing is checked against the speed model at that request's size.

A request may become a calibration point of this rig (once per kind of work and launch)
only when what it measured is the work the speed model costs: the host otherwise idle over
the request (``/proc``: other processes' share of its CPUs, the server and lltui left out),
no other process busy on the server's GPUs (where the monitor's sample says), no other
request beside it, a model large enough for the speed model to apply
(:func:`lltui.core.speed.served.refusal` holds the rule). A point kept is then held until
several agree before the calibration moves, and moves it a bounded step
(:mod:`lltui.core.speed.calibration`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lltui.core.llama.timings import RequestTiming, parse_cached, parse_timing
from lltui.core.speed.served import (
    ServeConditions,
    ServedSpeeds,
    ServedTasks,
    SpeedCheck,
    refusal,
)

if TYPE_CHECKING:
    from lltui.core.cmdline.args import LlamaArgs
    from lltui.core.gguf.model import GgufModel
    from lltui.core.hardware.calibration import Calibration
    from lltui.core.hardware.host import HostSpec
    from lltui.core.memory.devices import DeviceSpec
    from lltui.core.memory.results import FitResult, SpeedEstimate
    from lltui.core.monitor.models import RigSample
    from lltui.services.plan import PlanReport
    from lltui.sources.gpu.procfs import OthersMeter

PidOf = Callable[[], "int | None"]
GpuBusy = Callable[[], "float | None"]
Rig = Callable[[], "RigSample | None"]


def calibration_key(args: LlamaArgs) -> str:
    """The memory flags a served point is kept under ("defaults" where none is given)."""
    return " ".join(args.memory_args) or "defaults"


@dataclass(frozen=True)
class Basis:
    """What a command's speed is predicted from: the model, where llama.cpp puts it, the
    devices and host it runs on, this rig's calibration; ``config``: the memory flags, the
    key a calibration point is kept under."""

    model: GgufModel
    result: FitResult
    devices: list[DeviceSpec]
    host: HostSpec
    calibration: Calibration | None
    config: str

    def estimate(self, prompt: bool, depth: int, tokens: int, calibrated: bool) -> SpeedEstimate:
        """fit's own prediction (the cards' power caps, clocks and links), or a served
        point would count them twice once calibrated."""
        from lltui.core.fit.estimate import FitOptions, speed_of

        opts = FitOptions(host=self.host, calibration=self.calibration if calibrated else None)
        return speed_of(
            self.model,
            self.result,
            self.devices,
            opts,
            depth=depth,
            prompt_tokens=max(1, tokens) if prompt else 512,
        )


class SpeedWatch:
    """Served speeds against predictions for one launch (thread-safe: lines come from the
    server's log reader). ``meter`` reads the host's load by other processes (None: unknown,
    and nothing is kept); ``gpu_busy`` the most SM time another process takes on the
    server's GPUs (None or returning None: not known)."""

    def __init__(
        self,
        basis: Basis,
        *,
        store: bool = True,
        env: dict[str, str] | None = None,
        meter: OthersMeter | None = None,
        gpu_busy: GpuBusy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.basis = basis
        self._store = store
        self._env = env
        self._meter = meter
        self._gpu_busy = gpu_busy
        self._clock = clock
        self._served = ServedSpeeds(self.predict)
        self._tasks = ServedTasks()
        self._kept: set[bool] = set()  # kinds (prompt or not) already kept this launch
        self._lock = threading.Lock()
        self.stored: list[str] = []  # what was kept, in words

    @classmethod
    def for_rig(cls, args: LlamaArgs, rig: Rig | None, pid: PidOf) -> SpeedWatch | None:
        """For the rig a front end sees: a monitor's (``rig`` gives its latest sample; a
        simulated one: the host alone), else (None) this machine's GPUs."""
        from lltui.services.devices import devices_from_sample, local_devices

        if rig is None:
            return cls.for_command(args, local_devices()[0], pid=pid)
        sample = rig()
        real = sample if sample is not None and not sample.simulated else None
        devices = devices_from_sample(real) if real is not None else []
        busy = lambda: gpu_busy_of_others(rig(), pid())  # noqa: E731
        return cls.for_command(args, devices, pid=pid, gpu_busy=busy)

    @classmethod
    def for_command(
        cls,
        args: LlamaArgs,
        devices: list[DeviceSpec],
        *,
        store: bool = True,
        env: dict[str, str] | None = None,
        pid: PidOf | None = None,
        gpu_busy: GpuBusy | None = None,
        meter: OthersMeter | None = None,
    ) -> SpeedWatch | None:
        """A watch for this command on these local devices (none: the host alone), the
        server's pid given by ``pid`` once it runs; None when the model or the estimate
        cannot be read."""
        from lltui.core.fit.estimate import estimate
        from lltui.core.memory.common import FitError
        from lltui.core.memory.results import FitOptions
        from lltui.services.bench import local_calibration
        from lltui.services.fit import read_model
        from lltui.sources.gpu.cpu import local_host
        from lltui.sources.gpu.procfs import OthersMeter
        from lltui.sources.models.read import ModelError

        if args.model_path is None:
            return None
        if args.rpc:  # the server's --rpc servers take layers too: predicted with them
            from lltui.services.devices import with_rpc

            devices = with_rpc(devices, args.rpc)[0]
        try:
            model = read_model(args.model_path, keep=True)
            host = local_host()
            cal = local_calibration(devices, host, env)
            result = estimate(model, args, devices, FitOptions(search=False, host=host))
        except (FitError, ModelError, ValueError, OSError):
            return None
        if meter is None and pid is not None:
            meter = OthersMeter(pid)
        config = calibration_key(args)
        return cls(
            Basis(model, result, devices, host, cal, config),
            store=store,
            env=env,
            meter=meter,
            gpu_busy=gpu_busy,
        )

    @property
    def calibrated(self) -> str | None:
        """What fit says of its prediction where this rig's calibration applies (None:
        the speed model as it is)."""
        return self.basis.estimate(False, 0, 128, calibrated=True).calibrated

    def predict(self, prompt: bool, depth: int, tokens: int) -> float | None:
        """Predicted tokens/s (this rig's calibration applied) of a prompt of ``tokens`` or
        of generation at ``depth``."""
        est = self.basis.estimate(prompt, depth, tokens, calibrated=True)
        tps = est.prefill_tps if prompt else est.decode_tps
        return tps if tps > 0 else None

    def feed(self, line: str) -> SpeedCheck | None:
        """A log line; the check of the request it finishes, if it does."""
        now = self._clock()
        with self._lock:
            if self._tasks.feed(line, now) and self._meter is not None:
                self._meter.mark()  # a request began: the host's load is read from here
        timing = parse_timing(line)
        if timing is None:
            cached = parse_cached(line)
            if cached is not None:
                with self._lock:
                    self._served.cached(*cached)
            return None
        with self._lock:
            check = self._served.feed(timing)
            if check is not None and self._store and check.prompt not in self._kept:
                check = self._judge(check, timing, now)
            if not timing.prompt:
                self._tasks.done(timing.task)  # its generation is its last timed part
        return check

    def _judge(self, check: SpeedCheck, timing: RequestTiming, now: float) -> SpeedCheck:
        """Keep the check as a calibration point where the request measured what the speed
        model costs; say why not where it missed by much (else it would only be noise)."""
        from lltui.core.speed.model import fixed_share

        est = self.basis.estimate(check.prompt, check.depth, check.tokens, calibrated=False)
        started, shared = self._tasks.window(check.task)
        since = started if started is not None else now - timing.ms / 1000
        why = refusal(
            ServeConditions(
                host_busy=self._meter.share_since(since) if self._meter is not None else None,
                gpu_busy=self._gpu_busy() if self._gpu_busy is not None else None,
                shared=shared,
                fixed_share=fixed_share(est, not check.prompt),
            )
        )
        if why is not None:
            no = f"not kept as a calibration point: {why}"
            return replace(check, calibration=no) if check.large_miss else check
        said = self._keep(check, est)
        if said is None:
            return check
        self._kept.add(check.prompt)
        self.stored.append(f"{'prompt' if check.prompt else 'generation'} speed {said}")
        return replace(check, calibration=said, kept=True)

    def _keep(self, check: SpeedCheck, est: SpeedEstimate) -> str | None:
        from lltui.services.bench import record_served

        try:
            basis = self.basis
            return record_served(
                basis.model.path,
                basis.config,
                not check.prompt,
                check.measured_tps,
                est,
                basis.devices,
                basis.host,
                self._env,
            )
        except OSError:
            return None  # a read-only data dir: the comparison is still shown


class RouterSpeed:
    """Served speeds of a router's models: the router forwards each model server's lines
    prefixed with its port, and a spawn line says which model a port serves; each model's
    lines go to a :class:`SpeedWatch` of what the plan predicted for it (its setup and
    estimate, so nothing is read or asked of an RPC server while the router runs). Nothing
    is kept as a calibration point: the model servers' pids are not known, so neither is the
    load beside a request."""

    stored: tuple[str, ...] = ()
    calibrated: str | None = None  # (each model's own watch, not the router's)

    def __init__(self, report: PlanReport, env: dict[str, str] | None = None) -> None:
        self._report = report
        self._env = env
        self._by_port: dict[int, tuple[str, SpeedWatch | None]] = {}
        self._made: dict[str, SpeedWatch | None] = {}  # one watch a model, however often loaded

    def predict(self, prompt: bool, depth: int, tokens: int) -> float | None:
        return None  # one prediction per model, not one for the router

    def feed(self, line: str) -> SpeedCheck | None:
        from lltui.core.llamalog.router import CHILD_LINE

        child = CHILD_LINE.match(line)
        if child is None:
            self._spawned(line)
            return None
        name, watch = self._by_port.get(int(child["port"]), ("", None))
        check = watch.feed(child["rest"]) if watch is not None else None
        return replace(check, model=name) if check is not None else None

    def _spawned(self, line: str) -> None:
        from lltui.core.llamalog.classify import classify
        from lltui.core.llamalog.events import Instance

        if "spawning" not in line:  # the router's other lines, read once elsewhere
            return
        event = classify(line).event
        if isinstance(event, Instance) and event.what == "spawned":
            if event.name not in self._made:
                self._made[event.name] = self._watch(event.name)
            self._by_port[int(event.value)] = (event.name, self._made[event.name])

    def _watch(self, name: str) -> SpeedWatch | None:
        from lltui.services.bench import local_calibration
        from lltui.sources.gpu.cpu import local_host

        plan = self._report.plan
        if name not in plan.model_names:
            return None
        setup = self._report.setups[plan.model_names.index(name)]
        planned = plan.model(name)
        if setup.model is None:
            return None
        devices = list(setup.devices)
        host = setup.options.host or local_host()
        config = calibration_key(planned.args)
        cal = local_calibration(devices, host, self._env)
        basis = Basis(setup.model, planned.result, devices, host, cal, config)
        return SpeedWatch(basis, store=False, env=self._env)


def gpu_busy_of_others(sample: RigSample | None, pid: int | None) -> float | None:
    """The most SM time (%) a process other than ``pid`` took on a GPU ``pid`` holds memory
    on (on any GPU where it holds none); None where no such share is reported."""
    if sample is None or pid is None:
        return None
    procs = [p for g in sample.gpus for p in g.processes]
    mine = {p.gpu_index for p in procs if p.pid == pid}
    shares = [
        p.sm_util
        for p in procs
        if p.pid != pid and p.sm_util is not None and (not mine or p.gpu_index in mine)
    ]
    return max(shares, default=None)

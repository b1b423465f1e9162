"""The speed of a launched llama-server's served requests beside the prediction for its
command: shared by ``lltui launch`` and the launch view. Fed the server's log lines; each
finished request's timing is checked against the speed model at that request's size, and a
large miss (30% or more, either way) is kept as a calibration point of this rig (once per
kind of work and launch), so the next predictions here move towards what the rig does."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from lltui.core.llama.timings import parse_timing
from lltui.core.speed.served import ServedSpeeds, SpeedCheck

if TYPE_CHECKING:
    from lltui.core.gguf.model import GgufModel
    from lltui.core.hardware.calibration import Calibration
    from lltui.core.hardware.host import HostSpec
    from lltui.core.llama.args import LlamaArgs
    from lltui.core.memory.devices import DeviceSpec
    from lltui.core.memory.results import FitResult, SpeedEstimate
    from lltui.core.monitor.models import RigSample


class SpeedWatch:
    """Served speeds against predictions for one launch (thread-safe: lines come from the
    server's log reader)."""

    def __init__(
        self,
        model: GgufModel,
        result: FitResult,
        devices: list[DeviceSpec],
        host: HostSpec,
        calibration: Calibration | None,
        config: str,
        *,
        store: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self._model = model
        self._result = result
        self._devices = devices
        self._host = host
        self._calibration = calibration
        self._config = config
        self._store = store
        self._env = env
        self._served = ServedSpeeds(self.predict)
        self._kept: set[bool] = set()  # kinds (prompt or not) already kept this launch
        self._lock = threading.Lock()
        self.last: dict[bool, SpeedCheck] = {}  # the latest check of each kind
        self.stored: list[str] = []  # what was kept, in words

    @classmethod
    def for_sample(cls, args: LlamaArgs, sample: RigSample | None) -> SpeedWatch | None:
        """For the GPUs of a rig sample (None or a simulated rig: the host alone)."""
        from lltui.services.devices import devices_from_sample

        real = sample if sample is not None and not sample.simulated else None
        return cls.for_command(args, devices_from_sample(real) if real is not None else [])

    @classmethod
    def for_command(
        cls,
        args: LlamaArgs,
        devices: list[DeviceSpec],
        *,
        store: bool = True,
        env: dict[str, str] | None = None,
    ) -> SpeedWatch | None:
        """A watch for this command on these local devices (none: the host alone); None when
        the model or the estimate cannot be read."""
        from lltui.core.fit.estimate import estimate
        from lltui.core.memory.common import FitError
        from lltui.core.memory.results import FitOptions
        from lltui.services.bench import local_calibration
        from lltui.services.fit import read_model
        from lltui.sources.gpu.cpu import local_host
        from lltui.sources.models.read import ModelError

        if args.model_path is None:
            return None
        try:
            model = read_model(args.model_path, keep=True)
            host = local_host()
            cal = local_calibration(devices, host, env)
            result = estimate(model, args, devices, FitOptions(search=False, host=host))
        except (FitError, ModelError, ValueError, OSError):
            return None
        config = " ".join(args.memory_args) or "defaults"
        return cls(model, result, devices, host, cal, config, store=store, env=env)

    def _estimate(self, prompt: bool, depth: int, tokens: int, calibrated: bool) -> SpeedEstimate:
        from lltui.core.speed.model import estimate_speed

        return estimate_speed(
            self._model,
            self._result,
            depth=depth,
            prompt_tokens=max(1, tokens) if prompt else 512,
            host=self._host,
            calibration=self._calibration if calibrated else None,
        )

    def predict(self, prompt: bool, depth: int, tokens: int) -> float | None:
        """Predicted tokens/s (this rig's calibration applied) of a prompt of ``tokens`` or
        of generation at ``depth``."""
        est = self._estimate(prompt, depth, tokens, calibrated=True)
        tps = est.prefill_tps if prompt else est.decode_tps
        return tps if tps > 0 else None

    def feed(self, line: str) -> SpeedCheck | None:
        """A log line; the check of the request it finishes, if it does."""
        timing = parse_timing(line)
        if timing is None:
            return None
        with self._lock:
            check = self._served.feed(timing)
            if check is None:
                return None
            self.last[check.prompt] = check
            if check.large_miss and self._store and check.prompt not in self._kept:
                self._kept.add(check.prompt)
                self._keep(check)
        return check

    def _keep(self, check: SpeedCheck) -> None:
        from lltui.services.bench import record_served

        est = self._estimate(check.prompt, check.depth, check.tokens, calibrated=False)
        try:
            record_served(
                self._model.path,
                self._config,
                not check.prompt,
                check.measured_tps,
                est,
                self._devices,
                self._host,
                self._env,
            )
        except OSError:
            return  # a read-only data dir: the comparison is still shown
        self.stored.append(f"{'prompt' if check.prompt else 'generation'} speed kept")

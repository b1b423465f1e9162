"""One estimate's inputs, travelling together: the model (and its hyperparameters, read once),
the settings of the command line, the devices llama.cpp sees and the ones it uses, and how
to estimate. Frozen and hashable, so the estimator's caches can key on it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.gguf.model import GgufModel
from lltui.core.memory.context import select_devices
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams, read_hparams
from lltui.core.memory.results import FitOptions


@dataclass(frozen=True, slots=True)
class FitProblem:
    """What to estimate. ``devices``: every offload device llama.cpp would see, in its order
    (RPC servers first, then local GPUs); ``used``: those ``-dev`` and ``-sm none`` pick."""

    model: GgufModel
    hp: Hparams
    args: LlamaArgs
    devices: tuple[DeviceSpec, ...]
    used: tuple[DeviceSpec, ...]
    options: FitOptions

    @classmethod
    def of(
        cls,
        model: GgufModel,
        args: LlamaArgs,
        devices: Sequence[DeviceSpec] = (),
        options: FitOptions | None = None,
        hp: Hparams | None = None,
    ) -> FitProblem:
        all_devs = tuple(devices)
        return cls(
            model=model,
            hp=read_hparams(model) if hp is None else hp,
            args=args,
            devices=all_devs,
            used=select_devices(all_devs, args),
            options=options or FitOptions(),
        )

    def with_args(self, args: LlamaArgs) -> FitProblem:
        """The same problem for other settings (the devices used picked again)."""
        return replace(self, args=args, used=select_devices(self.devices, args))

    def with_devices(self, devices: Sequence[DeviceSpec], used: Sequence[DeviceSpec]) -> FitProblem:
        return replace(self, devices=tuple(devices), used=tuple(used))

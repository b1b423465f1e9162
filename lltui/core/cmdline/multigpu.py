"""Split settings for llama.cpp across several GPUs, validated, and their llama-server flags."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real

from lltui.core.api_args import check_arg
from lltui.core.cmdline.args import spell
from lltui.core.cmdline.flag_values import check_proportions


class SplitMode(enum.Enum):
    """llama.cpp's ``--split-mode``."""

    NONE = 0  # one GPU holds everything
    LAYER = 1  # consecutive layers on consecutive GPUs (the default; any interconnect)
    ROW = 2  # weight rows split across GPUs; wants NVLink, and recent CUDA builds refuse it
    TENSOR = 3  # llama.cpp's tensor-parallel mode; wants NVLink/NVSwitch

    @property
    def flag(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str | int | SplitMode) -> SplitMode:
        """A mode by name ("layer") or by its value (1, as the enum numbers them)."""
        if isinstance(text, SplitMode):
            return text
        try:
            if isinstance(text, int) and not isinstance(text, bool):
                return cls(text)
            if isinstance(text, str):
                return cls[text.strip().upper()]
        except (KeyError, ValueError):
            pass
        names = ", ".join(m.flag for m in cls)
        raise ValueError(f"unknown split mode {text!r}; use one of: {names}")


SPLIT_SUM_TOLERANCE = 1e-3


def _as_flag(name: str, key: str, value: object) -> None:
    """A field's value in the range its llama-server flag takes (the flag table's check),
    refused naming the field: ``n_parallel: 10**12`` failed only later, in to_llama_args,
    naming ``-np``."""
    if value is None:
        return
    try:
        spell(key, value)
    except ValueError as exc:
        flag, _, why = str(exc).partition(": ")
        raise ValueError(f"{name}: {why} (as llama-server's {flag})") from None


@dataclass(frozen=True)
class MultiGPUConfig:
    """How llama-server should use the GPUs. Raises TypeError on construction for a value of
    a type a field does not take (``n_gpu="2"``), ValueError when the settings cannot work
    (tensor_split length, sum, main_gpu range, counts) or a value is past what its
    llama-server flag takes (``n_parallel=10**12``: -np's int32), naming the field."""

    n_gpu: int = 1
    split_mode: SplitMode | str | int = SplitMode.LAYER
    main_gpu: int = 0
    # per-GPU fractions, sum 1 (or "0.5,0.5", as -ts takes them)
    tensor_split: tuple[float, ...] | list[float] | str | None = None
    gpu_layers: int | None = None  # None: llama-server's default (all that fit)
    n_parallel: int = 1
    # what lltui warns of the GPUs these settings were chosen for (auto_config: fit's
    # warnings, such as NVIDIA and AMD GPUs in one server); no flag, not compared
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        check_arg("split_mode", self.split_mode, (SplitMode, str, int), "a SplitMode or its name")
        check_arg("gpu_layers", self.gpu_layers, (Integral, type(None)), "a whole number, or None")
        for name in ("n_gpu", "main_gpu", "n_parallel"):
            check_arg(name, getattr(self, name), (Integral,), "a whole number")
        check_arg(
            "tensor_split",
            self.tensor_split,
            (str, Sequence, type(None)),
            "fractions such as [0.5, 0.5] or '0.5,0.5', or None",
            items=(Real, str),
        )
        mode = SplitMode.parse(self.split_mode)
        object.__setattr__(self, "split_mode", mode)
        if self.n_gpu < 1:
            raise ValueError(f"n_gpu must be a whole number >= 1, got {self.n_gpu!r}")
        if not 0 <= self.main_gpu < self.n_gpu:
            raise ValueError(f"main_gpu {self.main_gpu} is not one of the {self.n_gpu} GPU(s)")
        if self.n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {self.n_parallel}")
        if self.gpu_layers is not None and self.gpu_layers < 0:
            raise ValueError(f"gpu_layers must be >= 0 or None, got {self.gpu_layers}")
        _as_flag("gpu_layers", "n_gpu_layers", self.gpu_layers)
        _as_flag("main_gpu", "main_gpu", self.main_gpu)
        _as_flag("n_parallel", "n_parallel", self.n_parallel)
        if self.tensor_split is not None:
            given = self.tensor_split
            words = given.replace("/", ",").split(",") if isinstance(given, str) else given
            try:  # ("0.5,0.5", as -ts takes it, too)
                split = tuple(float(x) for x in words if not isinstance(x, str) or x.strip())
            except (TypeError, ValueError):
                raise ValueError(f"tensor_split: {self.tensor_split!r} is not numbers") from None
            if len(split) != self.n_gpu:
                raise ValueError(
                    f"tensor_split has {len(split)} value(s) but n_gpu is {self.n_gpu}"
                )
            check_proportions("tensor_split", split)
            if abs(sum(split) - 1.0) > SPLIT_SUM_TOLERANCE:
                raise ValueError(f"tensor_split fractions must sum to 1, got {sum(split):.4f}")
            _as_flag("tensor_split", "tensor_split", split)
            object.__setattr__(self, "tensor_split", split)
        if mode is SplitMode.NONE and self.tensor_split is not None and self.n_gpu > 1:
            raise ValueError("split_mode none uses one GPU; drop tensor_split or pick layer")

    def to_llama_args(self) -> list[str]:
        """llama-server flags for these settings, spelled by the flag table."""
        args: list[str] = []
        if self.gpu_layers is not None:
            args += spell("n_gpu_layers", self.gpu_layers)
        args += spell("split_mode", SplitMode.parse(self.split_mode).flag)
        if self.main_gpu:
            args += spell("main_gpu", self.main_gpu)
        if self.tensor_split is not None and self.n_gpu > 1:
            args += spell("tensor_split", tuple(self.tensor_split))
        # always explicit: llama-server's own default is several slots, not one
        args += spell("n_parallel", self.n_parallel)
        return args

"""A :class:`LaunchSpec` as plain, TOML-ready data (a saved profile) and back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from lltui.core.llama.flag_table import SECRET_FIELDS
from lltui.core.llama.launch_spec import LaunchError, LaunchSpec
from lltui.core.llama.multigpu import SplitMode

_TUPLE_FIELDS = ("devices", "rpc", "extra_args", "visible_gpus")
_TABLE_FIELDS = ("nccl_env", "env")


def spec_to_dict(spec: LaunchSpec, *, include_secret: bool = True) -> dict[str, Any]:
    """The spec as TOML-ready data: only the fields that differ from the defaults."""
    defaults = {f.name: f.default for f in fields(LaunchSpec)}
    out: dict[str, Any] = {}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name != "model" and value == defaults.get(f.name):
            continue
        if f.name in SECRET_FIELDS and not include_secret:
            continue
        if isinstance(value, SplitMode):
            value = value.flag
        elif f.name in _TABLE_FIELDS:
            value = dict(value)
        elif f.name == "tensor_split":
            value = [float(x) for x in value]
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "model": (str,),
    "host": (str,),
    "port": (int,),
    "ctx_size": (int,),
    "n_parallel": (int,),
    "n_gpu_layers": (int,),
    "split_mode": (str,),
    "main_gpu": (int,),
    "tensor_split": (list,),
    "devices": (list,),
    "cache_type_k": (str,),
    "cache_type_v": (str,),
    "flash_attn": (str,),
    "batch_size": (int,),
    "ubatch_size": (int,),
    "load_mode": (str,),
    "rpc": (list,),
    "api_key": (str,),
    "api_key_file": (str,),
    "hf_token": (str,),
    "metrics": (bool,),
    "log_verbosity": (int,),
    "extra_args": (list,),
    "visible_gpus": (list,),
    "nccl_env": (dict,),
    "cuda_p2p": (bool,),
    "env": (dict,),
}


def spec_from_dict(data: Mapping[str, Any], where: str = "profile") -> LaunchSpec:
    """A spec from :func:`spec_to_dict` data; :class:`LaunchError` names the bad key."""
    unknown = sorted(set(data) - set(_FIELD_TYPES))
    if unknown:
        raise LaunchError(f"{where}: unknown key {unknown[0]!r}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        types = _FIELD_TYPES[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if key == "tensor_split" and isinstance(value, list):
            ok = all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
        elif key in _TUPLE_FIELDS and isinstance(value, list):
            ok = all(isinstance(x, str) for x in value)
        elif key in _TABLE_FIELDS and isinstance(value, dict):
            ok = all(isinstance(v, str) for v in value.values())
        if not ok:
            raise LaunchError(f"{where}: {key} has the wrong type ({type(value).__name__})")
        kwargs[key] = tuple(value) if isinstance(value, list) else value
    if "model" not in kwargs:
        raise LaunchError(f"{where}: no model")
    try:
        return LaunchSpec(**kwargs)
    except LaunchError as exc:
        raise LaunchError(f"{where}: {exc}") from None

"""A :class:`LaunchSpec` as plain, TOML-ready data (a saved profile) and back.

A profile holds the model, llama-server's flags as a list (``flags = ["-c", "8192", ...]``,
each in the flag table's spelling) and the launch's own settings (address, key file, log
level, environment). Profiles written by earlier versions, with one key per setting
(``ctx_size = 8192``), are read too: each such key is the long flag of the same name."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from lltui.core.cmdline.flag_table import BY_SPELLING, SECRET_FIELDS
from lltui.core.cmdline.launch_spec import LaunchError, LaunchSpec

_LAUNCH_TYPES: dict[str, tuple[type, ...]] = {
    "host": (str,),
    "port": (int,),
    "api_key": (str,),
    "api_key_file": (str,),
    "hf_token": (str,),
    "metrics": (bool,),
    "log_verbosity": (int,),
    "visible_gpus": (list,),
    "nccl_env": (dict,),
    "cuda_p2p": (bool,),
    "env": (dict,),
}
_TABLE_FIELDS = ("nccl_env", "env")
# earlier profiles: a key per setting, named as its long flag (two of them are not)
_LEGACY_FLAG_OF = {"n_parallel": "--parallel", "devices": "--device"}
_LEGACY_WORDS = {"n_gpu_layers": {-1: "auto", -2: "all"}}


def spec_to_dict(spec: LaunchSpec, *, include_secret: bool = True) -> dict[str, Any]:
    """The spec as TOML-ready data: the model, its flags, and the launch settings that
    differ from the defaults."""
    out: dict[str, Any] = {"model": spec.model}
    flags = spec.args.without({"model_path"}).to_argv()
    if flags:
        out["flags"] = flags
    defaults = {f.name: f.default for f in fields(LaunchSpec)}
    for name in _LAUNCH_TYPES:
        value = getattr(spec, name)
        if value == defaults.get(name):
            continue
        if name in SECRET_FIELDS and not include_secret:
            continue
        if name in _TABLE_FIELDS:
            value = dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def _legacy_flags(key: str, value: Any, where: str) -> list[str]:
    """An earlier profile's setting as the llama-server flags it stood for."""
    if key == "extra_args":
        return [str(x) for x in value]
    flag = _LEGACY_FLAG_OF.get(key, "--" + key.replace("_", "-"))
    if flag not in BY_SPELLING or isinstance(value, dict):
        raise LaunchError(f"{where}: unknown key {key!r}")
    if isinstance(value, list):
        return [flag, ",".join(str(x) for x in value)]
    word = _LEGACY_WORDS.get(key, {}).get(value) if isinstance(value, int) else None
    return [flag, word if word is not None else str(value)]


def _check_type(key: str, value: Any, where: str) -> Any:
    types = _LAUNCH_TYPES[key]
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
    if ok and isinstance(value, list):
        ok = all(isinstance(x, str) for x in value)
        if not ok:
            raise LaunchError(f"{where}: {key} must be a list of strings")
    elif ok and isinstance(value, dict):
        bad = next((k for k, v in value.items() if not isinstance(v, str)), None)
        if bad is not None:  # the table is right, one of its values is not
            raise LaunchError(f"{where}: {key}.{bad} must be a string (quote it)")
    if not ok:
        raise LaunchError(f"{where}: {key} has the wrong type ({type(value).__name__})")
    return tuple(value) if isinstance(value, list) else value


def spec_from_dict(data: Mapping[str, Any], where: str = "profile") -> LaunchSpec:
    """A spec from :func:`spec_to_dict` data (or an earlier profile's); :class:`LaunchError`
    names the bad key."""
    model = data.get("model")
    if not isinstance(model, str):
        raise LaunchError(f"{where}: no model" if model is None else f"{where}: model is not text")
    flags: list[str] = []
    launch: dict[str, Any] = {}
    for key, value in data.items():
        if key == "model":
            continue
        if key == "flags":
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise LaunchError(f"{where}: flags must be a list of words")
            flags += value
        elif key in _LAUNCH_TYPES:
            launch[key] = _check_type(key, value, where)
        else:
            flags += _legacy_flags(key, value, where)
    try:
        return LaunchSpec.of(model, flags, **launch)
    except LaunchError as exc:
        raise LaunchError(f"{where}: {exc}") from None

"""llama-server flags as a user types them for ``lltui launch``, read into :class:`LaunchSpec`
keyword arguments; every flag the spec does not model is passed through in order."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from lltui.core.llama.flags import KV_CACHE_TYPES, LOAD_MODES, flag_arity
from lltui.core.llama.launch_spec import (
    _FA_LEGACY_FALSE,
    _FA_LEGACY_TRUE,
    _LEGACY_LOAD_FLAGS,
    _SPELLING_TO_NAME,
    FLASH_ATTN_VALUES,
    SPEC_FLAGS,
    LaunchError,
    _is_flag,
    _normalise_flag,
)
from lltui.core.llama.multigpu import SplitMode


def _int(flag: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise LaunchError(f"{flag} needs a whole number, got {value!r}") from None


def _gpu_layers(flag: str, value: str) -> int:
    word = value.strip().lower()
    if word == "auto":
        return -1
    if word == "all":
        return -2
    n = _int(flag, value)
    if n < -2:
        raise LaunchError(f"{flag} takes a count, auto or all; got {value!r}")
    return n


def _split_list(value: str) -> list[str]:
    return [p.strip() for p in re.split(r"[,/]", value) if p.strip()]


def parse_llama_args(
    tokens: Sequence[str], arity: Mapping[str, int] | None = None
) -> dict[str, Any]:
    """Read llama-server flags as typed into :class:`LaunchSpec` keyword arguments.

    Flags the spec models become fields (``-ts 3,1`` -> ``tensor_split=(3.0, 1.0)``); the
    removed ``--no-mmap``/``--mlock`` become a load mode; the API key is taken out of the
    flags; everything else stays in ``extra_args`` in order. ``arity`` (flag -> number of
    values, from the binary's help) tells which tokens after an unknown flag are its values;
    without it a token that does not start with ``-`` is taken as a value.
    Raises :class:`LaunchError` for a missing or malformed value.
    """
    out: dict[str, Any] = {}
    extra: list[str] = []
    no_mmap = mlock = False
    i = 0
    while i < len(tokens):
        raw = tokens[i]
        token = _normalise_flag(raw)
        inline: str | None = None
        if raw.startswith("--") and "=" in raw:
            # only the flag's name is normalised: the value keeps its underscores
            head, _, tail = raw.partition("=")
            if _normalise_flag(head) in _SPELLING_TO_NAME:
                token, inline = _normalise_flag(head), tail
        name = _SPELLING_TO_NAME.get(token)
        if token in _LEGACY_LOAD_FLAGS:
            no_mmap = no_mmap or token == "--no-mmap"
            mlock = mlock or token == "--mlock"
            i += 1
            continue
        if name is None:
            extra.append(raw)
            i += 1
            # the binary's own table, else llama-server's as this version knows it
            n = arity.get(token) if arity is not None else flag_arity(token)
            if n is None:
                # Unknown arity: one following token that does not look like a flag.
                n = 1 if _is_flag(token) and i < len(tokens) and not _is_flag(tokens[i]) else 0
            take = tokens[i : i + n]
            extra += take
            i += len(take)
            continue
        _, n_values = SPEC_FLAGS[name]
        i += 1
        if n_values == 0:
            out[name] = True
            continue
        if name == "flash_attn" and inline is None:
            # Older builds had a bare -fa switch; newer ones take on|off|auto.
            nxt = tokens[i].lower() if i < len(tokens) else ""
            if nxt in FLASH_ATTN_VALUES or nxt in _FA_LEGACY_TRUE or nxt in _FA_LEGACY_FALSE:
                inline = tokens[i]
                i += 1
            else:
                out[name] = "on"
                continue
        if inline is None:
            if i >= len(tokens):
                raise LaunchError(f"{raw} needs a value")
            inline = tokens[i]
            i += 1
        out[name] = _field_value(name, raw, inline)
    if no_mmap or mlock:
        mode = "mlock" if (no_mmap and mlock) else "none" if no_mmap else "mmap+mlock"
        out.setdefault("load_mode", mode)
    out["extra_args"] = tuple(extra)
    return out


def _field_value(name: str, flag: str, value: str) -> Any:
    if name in ("ctx_size", "n_parallel", "main_gpu", "batch_size", "ubatch_size", "port"):
        return _int(flag, value)
    if name == "log_verbosity":
        return _int(flag, value)
    if name == "n_gpu_layers":
        return _gpu_layers(flag, value)
    if name == "split_mode":
        try:
            return SplitMode.parse(value)
        except ValueError as exc:
            raise LaunchError(f"{flag}: {exc}") from None
    if name == "tensor_split":
        parts = _split_list(value)
        try:
            return tuple(float(p) for p in parts)
        except ValueError:
            raise LaunchError(f"{flag} takes numbers such as 3,1; got {value!r}") from None
    if name in ("rpc", "devices"):
        return tuple(
            _split_list(value)
            if name == "devices"
            else [p.strip() for p in value.split(",") if p.strip()]
        )
    if name == "flash_attn":
        word = value.lower()
        if word in _FA_LEGACY_TRUE:
            return "on"
        if word in _FA_LEGACY_FALSE:
            return "off"
        if word not in FLASH_ATTN_VALUES:
            raise LaunchError(f"{flag} takes on, off or auto; got {value!r}")
        return word
    if name in ("cache_type_k", "cache_type_v"):
        if value.lower() not in KV_CACHE_TYPES:
            raise LaunchError(f"{flag} {value!r} is not one of: {', '.join(KV_CACHE_TYPES)}")
        return value.lower()
    if name == "load_mode":
        if value not in LOAD_MODES:
            raise LaunchError(f"{flag} takes one of {', '.join(LOAD_MODES)}; got {value!r}")
        return value
    return value

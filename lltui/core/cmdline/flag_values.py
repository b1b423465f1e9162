"""Value parsers for llama-server's flags: each accepts exactly what the pinned llama-server
accepts, except values that mean nothing (NaN, negative counts, ``8k`` read as 8), which are
refused with one line naming the flag.

llama.cpp reads whole numbers with ``std::stoi`` and proportions with ``std::stof``: both skip
leading blanks and stop at the first character that is not part of the number, so
``-c 8k`` silently means 8; lltui refuses such trailing text instead. Every parser takes the
flag as typed (for the message) and the value, and raises ValueError.
"""

from __future__ import annotations

import math
import re

from lltui.core.text import is_digits

# KV cache types llama-server accepts for -ctk/-ctv (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES: tuple[str, ...] = (
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q4_0",
    "q4_1",
    "iq4_nl",
    "q5_0",
    "q5_1",
)
SPLIT_MODES: tuple[str, ...] = ("none", "layer", "row", "tensor")
LOAD_MODES: tuple[str, ...] = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")

# common_arg_utils::is_truthy / is_falsey / is_autoy, case and all
TRUTHY: tuple[str, ...] = ("on", "enabled", "true", "1")
FALSEY: tuple[str, ...] = ("off", "disabled", "false", "0")
AUTOY: tuple[str, ...] = ("auto", "-1")

# -ngl sentinels, as llama.cpp stores them
NGL_AUTO = -1
NGL_ALL = -2
# -np -1: llama-server picks 4 slots with a unified KV cache
NP_AUTO = -1

# llama_max_devices(): -ts and -fitt take fewer values than this
MAX_DEVICES = 16
# llama_max_tensor_buft_overrides(), one of them the terminator: more aborts llama-server
MAX_OVERRIDES = 4095

_INT32_MAX = 2**31 - 1
_FLT_MAX = 3.4028234663852886e38
_FLT_MIN = 1.1754943508222875e-38  # smallest normal float: std::stof refuses smaller
_WHOLE = re.compile(r"^\s*[+-]?[0-9]+\s*$")
_MAX_DIGITS = 20  # past any 64-bit value
_LEADING_WHOLE = re.compile(r"^\s*[+-]?[0-9]+")
_PLAIN_FLOAT = re.compile(r"^\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\s*$")
_SEPARATORS = re.compile(r"[,/]+")


def whole(flag: str, value: str, *, minimum: int | None = None) -> int:
    """A whole number as std::stoi reads it, without trailing text; ``minimum`` refuses what
    llama-server would take but cannot mean (a negative count)."""
    lead = _LEADING_WHOLE.match(value)
    if lead and len(lead.group().strip().lstrip("+-")) > _MAX_DIGITS:
        # out of std::stoi's range, as llama-server says; and never handed to int()
        raise ValueError(f"{flag}: a number of {len(lead.group().strip())} digits is out of range")
    if not _WHOLE.match(value):
        lead = _LEADING_WHOLE.match(value)
        if lead:
            raise ValueError(
                f"{flag}: {value!r} is not a whole number "
                f"(llama-server would read it as {int(lead.group())})"
            )
        raise ValueError(f"{flag}: expected a whole number, got {value!r}")
    n = int(value.strip())
    if not -_INT32_MAX - 1 <= n <= _INT32_MAX:
        raise ValueError(f"{flag}: {n} is out of range")
    if minimum is not None and n < minimum:
        raise ValueError(f"{flag}: must be at least {minimum}, got {n}")
    return n


def count(flag: str, value: str) -> int:
    """A count: a whole number, 0 or more."""
    return whole(flag, value, minimum=0)


def positive(flag: str, value: str) -> int:
    return whole(flag, value, minimum=1)


def n_parallel(flag: str, value: str) -> int:
    n = whole(flag, value)
    if n == 0 or n < NP_AUTO:
        raise ValueError(f"{flag}: must be -1 (auto) or at least 1, got {n}")
    return n


def main_gpu(flag: str, value: str) -> int:
    # an index; llama.cpp reads a negative one with -sm none as "no GPU", which -dev none
    # says plainly, so lltui takes indices only
    return whole(flag, value, minimum=0)


def gpu_layers(flag: str, value: str) -> int:
    if value == "auto":
        return NGL_AUTO
    if value == "all":
        return NGL_ALL
    if value.strip().lower() in ("auto", "all"):
        raise ValueError(f"{flag}: write {value.strip().lower()!r} in lower case")
    n = whole(flag, value)
    if n < NGL_ALL:
        raise ValueError(f"{flag}: expected a count, auto or all, got {value!r}")
    return n


def _one_of(flag: str, value: str, allowed: tuple[str, ...], what: str) -> str:
    if value in allowed:
        return value
    hint = ""
    if value.lower() in allowed:
        hint = f" (write it in lower case: {value.lower()})"
    raise ValueError(f"{flag}: {what} {value!r}{hint}; use {', '.join(allowed)}")


def cache_type(flag: str, value: str) -> str:
    return _one_of(flag, value, KV_CACHE_TYPES, "unsupported cache type")


def split_mode(flag: str, value: str) -> str:
    return _one_of(flag, value, SPLIT_MODES, "invalid value, unknown split mode")


def load_mode(flag: str, value: str) -> str:
    return _one_of(flag, value, LOAD_MODES, "invalid value")


def flash_attn(flag: str, value: str) -> str:
    if value in TRUTHY:
        return "on"
    if value in FALSEY:
        return "off"
    if value in AUTOY:
        return "auto"
    if value.startswith("-") and value not in AUTOY:
        raise ValueError(
            f"{flag}: expected on, off or auto, got the flag {value!r} (a bare {flag} is from "
            f"older llama.cpp: write {flag} on)"
        )
    hint = f" (write it in lower case: {value.lower()})" if value.lower() in TRUTHY + FALSEY else ""
    raise ValueError(f"{flag}: unknown value {value!r}{hint}; use on, off or auto")


def on_off(flag: str, value: str) -> bool:
    if value in TRUTHY:
        return True
    if value in FALSEY:
        return False
    raise ValueError(f"{flag}: unknown value {value!r}; use on or off")


def split_list(value: str) -> list[str]:
    """``value`` split on runs of ``,`` and ``/`` as llama.cpp's regex iterator does: a leading
    empty part is kept (and refused later), a trailing one dropped."""
    parts = _SEPARATORS.split(value)
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    return parts


def proportion(flag: str, text: str) -> float:
    """One -ts proportion: a finite float32 that is not negative."""
    if not _PLAIN_FLOAT.match(text):
        if text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise ValueError(f"{flag}: proportions must be finite and not negative, got {text!r}")
        raise ValueError(f"{flag}: {text!r} is not a number")
    x = float(text)
    if abs(x) > _FLT_MAX or (x != 0 and abs(x) < _FLT_MIN):
        raise ValueError(f"{flag}: {text!r} is out of range for llama.cpp's proportions")
    if x < 0:
        raise ValueError(f"{flag}: proportions must be finite and not negative, got {text!r}")
    return x


def tensor_split(flag: str, value: str) -> tuple[float, ...]:
    parts = split_list(value)
    if len(parts) >= MAX_DEVICES:
        raise ValueError(
            f"{flag}: {len(parts)} proportions, llama.cpp takes at most {MAX_DEVICES - 1}"
        )
    return check_proportions(flag, tuple(proportion(flag, p) for p in parts))


def writable_split(counts: tuple[int, ...]) -> tuple[int, ...] | None:
    """A split as ``-ts`` can say it: trailing zeros dropped (a device left out gets 0
    anyway); None when it still needs more values than llama.cpp takes (16 GPUs: at most
    15, so the last must get nothing)."""
    trimmed = tuple(counts)
    while trimmed and trimmed[-1] == 0:
        trimmed = trimmed[:-1]
    if not trimmed or len(trimmed) >= MAX_DEVICES:
        return None
    return trimmed


def tensor_split_extra(split: tuple[float, ...], n_devices: int) -> str | None:
    """Why a ``-ts`` with more values than devices is not what it seems (llama.cpp takes
    the first ``n_devices`` values and drops the rest without a word); None when it fits."""
    if n_devices <= 0 or len(split) <= n_devices:
        return None
    kept = ",".join(f"{x:g}" for x in split[:n_devices])
    dropped = ",".join(f"{x:g}" for x in split[n_devices:])
    devices = "device" if n_devices == 1 else "devices"
    return (
        f"-ts gives {len(split)} values for {n_devices} {devices}: llama.cpp uses {kept} "
        f"and ignores {dropped}"
    )


def check_proportions(flag: str, split: tuple[float, ...]) -> tuple[float, ...]:
    """Proportions that mean something: finite, not negative, and not all vanishingly small
    unless all zero (all zero is llama.cpp's "by free memory")."""
    for x in split:
        if not math.isfinite(x):
            raise ValueError(f"{flag}: proportions must be finite and not negative, got {x!r}")
        if x < 0:
            raise ValueError(f"{flag}: proportions must be finite and not negative, got {x!r}")
        if x != 0 and x < _FLT_MIN:
            raise ValueError(f"{flag}: {x!r} is out of range for llama.cpp's proportions")
    if split and not any(split):
        raise ValueError(
            f"{flag}: proportions are all zero; leave {flag} out to split by free memory"
        )
    return split


def number_text(x: float) -> str:
    """A proportion as short as it can be written and still read back the same."""
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def fit_target(flag: str, value: str) -> tuple[int, ...]:
    parts = split_list(value)
    if len(parts) >= MAX_DEVICES:
        raise ValueError(f"{flag}: {len(parts)} values, llama.cpp takes at most {MAX_DEVICES - 1}")
    return tuple(count(flag, p) for p in parts)


def device_list(flag: str, value: str) -> tuple[str, ...]:
    """-dev: ``none``, or device names (which devices exist is for the rig to say)."""
    names = tuple(value.split(","))
    if names == ("none",):
        return ()
    for name in names:
        if not name:
            raise ValueError(f"{flag}: empty device name in {value!r}")
        if name == "none":
            raise ValueError(f"{flag}: 'none' stands alone (no device at all)")
    return names


def rpc_servers(flag: str, value: str) -> tuple[str, ...]:
    servers = tuple(value.split(","))
    for server in servers:
        host, sep, port = server.rpartition(":")
        if not sep or not host or not is_digits(port) or not 0 < int(port) < 65536:
            raise ValueError(f"{flag}: expected HOST:PORT, got {server!r}")
    return servers


def port(flag: str, value: str) -> int:
    n = whole(flag, value)
    if not 0 <= n <= 65535:
        raise ValueError(f"{flag}: must be between 0 and 65535, got {n}")
    return n


def text(flag: str, value: str) -> str:
    return value


POOLING_TYPES = ("none", "mean", "cls", "last", "rank")


def pooling(flag: str, value: str) -> str:
    return _one_of(flag, value, POOLING_TYPES, "invalid value")


def path_list(flag: str, value: str) -> tuple[str, ...]:
    """``--lora A,B``: comma-separated paths (llama.cpp's parse_csv_row, without quoting)."""
    items = tuple(x for x in value.split(",") if x)
    if not items:
        raise ValueError(f"{flag}: expected a file name")
    return items


def scaled_path_list(flag: str, value: str) -> tuple[str, ...]:
    """``--lora-scaled A:0.5,B:1``: the paths (scales do not change memory), checked as
    llama.cpp checks them."""
    out = []
    for item in value.split(","):
        path, sep, scale = item.partition(":")
        if not sep or ":" in scale or not path:
            raise ValueError(f"{flag}: expected FNAME:SCALE, got {item!r}")
        try:
            float(scale)
        except ValueError:
            raise ValueError(f"{flag}: bad scale {scale!r} in {item!r}") from None
        out.append(path)
    return tuple(out)


SPEC_TYPES = (
    "none",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
)


def spec_types(flag: str, value: str) -> tuple[str, ...]:
    """``--spec-type draft-simple,ngram-mod``: speculative decoding types, comma-separated."""
    return tuple(
        _one_of(flag, t, SPEC_TYPES, "unknown speculative decoding type") for t in value.split(",")
    )

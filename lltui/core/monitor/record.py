"""Recordings: RigInfo and RigSample as JSON-able dicts, and the JSONL format that holds them.

A recording is UTF-8 JSON Lines. Line 1 is the header::

    {"lltui_recording": 1, "lltui_version": "0.1.0", "created": "2026-01-01T00:00:00Z",
     "source": "nvml", "gpu_count": 2, "info": {RigInfo, every field}}

then one sample per line, compact: a GPU names its static facts by position in the header's
``info.gpus`` (``"gpu": 0``) instead of repeating them, and a field equal to its default
(``None``, ``false``, ``[]``) is left out. Should the rig's info change while recording, a line
``{"info": {...}}`` replaces it for the samples after it. Loading gives back dataclasses equal to
the ones written: tuples, ints, floats and Nones as they were.
"""

from __future__ import annotations

import json
import math
import types
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from lltui.core.monitor.models import GpuSample, GpuStatic, HostSample, RigInfo, RigSample

RECORDING_KEY = "lltui_recording"
RECORDING_VERSION = 1


class RecordingError(ValueError):
    """A line that is not what a recording holds; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line

    def where(self, name: str) -> str:
        """One line naming the file (and line) for the user."""
        at = f"{name}:{self.line}" if self.line is not None else name
        return f"{at}: {self}"


# -- generic dataclass <-> dict, driven by the models' type hints ------------------------------


def _is_default(f: Field[Any], value: Any) -> bool:
    if f.default is not MISSING:
        default = f.default
    elif f.default_factory is not MISSING:
        default = f.default_factory()
    else:
        return False
    return type(value) is type(default) and bool(value == default)


def _encode(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, tuple | list):
        return [_encode(v) for v in value]
    return value


def to_dict(obj: Any, *, compact: bool = True, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """A dataclass as a JSON-able dict; ``compact`` leaves out fields equal to their default."""
    out: dict[str, Any] = {}
    for f in fields(obj):
        if f.name in skip:
            continue
        value = getattr(obj, f.name)
        if compact and _is_default(f, value):
            continue
        out[f.name] = _encode(value)
    return out


class _Bad(Exception):
    """A value that does not fit its field; ``path`` is filled in on the way out."""

    def __init__(self, reason: str, path: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


Converter = Callable[[Any], Any]


def _scalar(ok: Callable[[Any], bool], word: str) -> Converter:
    def convert(value: Any) -> Any:
        if ok(value):
            return value
        raise _Bad(f"must be {word}, not {_json_kind(value)}")

    return convert


@cache
def _converter(tp: Any) -> Converter:
    """A checker-converter for one annotated type, built once per type (loading a long
    recording runs these for every field of every sample)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        nullable = len(options) != len(get_args(tp))
        converters = [_converter(a) for a in options]

        def union(value: Any) -> Any:
            if value is None:
                if nullable:
                    return None
                raise _Bad("must not be null")
            error: _Bad | None = None
            for convert in converters:
                try:
                    return convert(value)
                except _Bad as exc:
                    error = exc
            assert error is not None
            raise error

        return union
    if tp is bool:
        return _scalar(lambda v: type(v) is bool, "true or false")
    if tp is int:
        return _scalar(lambda v: type(v) is int, "an integer")
    if tp is float:
        return _scalar(lambda v: type(v) is float or type(v) is int, "a number")
    if tp is str:
        return _scalar(lambda v: type(v) is str, "a string")
    if origin is tuple:
        args = get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [_converter(args[0])]
            size = None
        else:
            items = [_converter(a) for a in args]
            size = len(args)

        def sequence(value: Any) -> Any:
            if type(value) is not list:
                raise _Bad(f"must be a list, not {_json_kind(value)}")
            if size is not None and len(value) != size:
                raise _Bad(f"must hold {size} items, not {len(value)}")
            out = []
            for i, v in enumerate(value):
                try:
                    out.append(items[0 if size is None else i](v))
                except _Bad as exc:
                    raise _Bad(exc.reason, (f"[{i}]", *exc.path)) from None
            return tuple(out)

        return sequence
    if isinstance(tp, type) and is_dataclass(tp):
        return lambda value: _build(tp, value, {})
    raise TypeError(f"recordings cannot hold {tp!r}")  # a model change this module missed


@cache
def _plan(cls: type) -> tuple[tuple[str, Converter, bool], ...]:
    hints = get_type_hints(cls)
    return tuple(
        (
            f.name,
            _converter(hints[f.name]),
            f.default is MISSING and f.default_factory is MISSING,
        )
        for f in fields(cls)
    )


def _build(cls: type, data: Any, given: dict[str, Any]) -> Any:
    if type(data) is not dict:
        raise _Bad(f"must be an object, not {_json_kind(data)}")
    kwargs = dict(given)
    for name, convert, required in _plan(cls):
        if name in given:
            continue
        if name in data:
            try:
                kwargs[name] = convert(data[name])
            except _Bad as exc:
                raise _Bad(exc.reason, (f".{name}", *exc.path)) from None
        elif required:
            raise _Bad("is missing", (f".{name}",))
    return cls(**kwargs)


def from_dict(cls: type, data: Any, where: str, **given: Any) -> Any:
    """Build dataclass ``cls`` from ``data``, checking each value against the field's type.

    ``given`` supplies fields the dict does not hold (a GPU's static facts); keys the class
    does not know are ignored so a newer lltui's extra fields do not stop an older one."""
    try:
        return _build(cls, data, given)
    except _Bad as exc:
        raise RecordingError(f"{where}{''.join(exc.path)} {exc.reason}") from None


# -- the header ------------------------------------------------------------------------------


def info_to_dict(info: RigInfo) -> dict[str, Any]:
    """Every field of the rig's info, Nones included, so the header reads on its own."""
    return to_dict(info, compact=False)


def info_from_dict(data: Any) -> RigInfo:
    info = from_dict(RigInfo, data, "info")
    assert isinstance(info, RigInfo)
    return info


def iso_utc(wall: float) -> str:
    return datetime.fromtimestamp(wall, tz=UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def header_dict(info: RigInfo, *, lltui_version: str, created: float) -> dict[str, Any]:
    return {
        RECORDING_KEY: RECORDING_VERSION,
        "lltui_version": lltui_version,
        "created": iso_utc(created),
        "source": info.source,
        "gpu_count": len(info.gpus),
        "info": info_to_dict(info),
    }


@dataclass(frozen=True, slots=True)
class RecordingHeader:
    version: int
    info: RigInfo
    lltui_version: str | None = None
    created: str | None = None  # ISO 8601, UTC
    source: str | None = None  # the source that was recorded


def parse_header(obj: Any) -> RecordingHeader:
    """The first line of a recording; RecordingError for anything else."""
    if not isinstance(obj, dict) or RECORDING_KEY not in obj:
        raise RecordingError(f'not an lltui recording (its first line has no "{RECORDING_KEY}")', 1)
    version = obj[RECORDING_KEY]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordingError(f"not an lltui recording (format version {version!r})", 1)
    if version > RECORDING_VERSION:
        raise RecordingError(
            f"recording format {version} is newer than this lltui reads ({RECORDING_VERSION});"
            " upgrade lltui to replay it",
            1,
        )
    if "info" not in obj:
        raise RecordingError("the header has no rig info", 1)
    try:
        info = info_from_dict(obj["info"])
    except RecordingError as exc:
        raise RecordingError(f"header: {exc}", 1) from None

    def text(key: str) -> str | None:
        value = obj.get(key)
        return value if isinstance(value, str) else None

    return RecordingHeader(version, info, text("lltui_version"), text("created"), text("source"))


# -- samples ---------------------------------------------------------------------------------


def dumps(obj: Any) -> str:
    """One compact JSON line, without the newline."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _finite_or_none(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


def loads_line(text: str, line: int) -> dict[str, Any]:
    """One line's JSON object; RecordingError naming the line for anything else. A reading
    that is NaN or infinite (``NaN``, ``Infinity``, ``1e999``) is read as unknown (None): no
    GPU reports such a value, and every consumer of a sample takes None for "not known"."""
    try:
        obj = json.loads(text, parse_float=_finite_or_none, parse_constant=lambda _name: None)
    except json.JSONDecodeError as exc:
        what = exc.msg.removesuffix(" at")  # "Unterminated string starting at" at column ...
        raise RecordingError(f"not JSON ({what} at column {exc.colno})", line) from None
    except RecursionError:
        raise RecordingError("not JSON (nested too deeply)", line) from None
    if not isinstance(obj, dict):
        raise RecordingError(f"expected a JSON object, found {_json_kind(obj)}", line)
    return obj


def sample_to_dict(sample: RigSample, info: RigInfo) -> dict[str, Any]:
    """A sample as one compact dict; its GPUs refer to ``info.gpus`` by position."""
    position = {static: i for i, static in enumerate(info.gpus)}
    gpus = []
    for g in sample.gpus:
        d = to_dict(g, skip=("info",))
        i = position.get(g.info)
        head: dict[str, Any] = {"gpu": i} if i is not None else {"static": to_dict(g.info)}
        gpus.append(head | d)
    out: dict[str, Any] = {"seq": sample.seq, "t": sample.t, "wall": sample.wall, "gpus": gpus}
    if sample.host != HostSample():
        out["host"] = to_dict(sample.host)
    if sample.error is not None:
        out["error"] = sample.error
    return out


def sample_from_dict(data: Any, info: RigInfo, line: int | None = None) -> RigSample:
    """Inverse of :func:`sample_to_dict`; RecordingError (with ``line``) for a bad record."""
    try:
        if not isinstance(data, dict):
            raise RecordingError(f"a sample must be an object, not {_json_kind(data)}")
        raw_gpus = data.get("gpus", [])
        if not isinstance(raw_gpus, list):
            raise RecordingError(f"gpus must be a list, not {_json_kind(raw_gpus)}")
        gpus = []
        for k, raw in enumerate(raw_gpus):
            where = f"gpus[{k}]"
            if not isinstance(raw, dict):
                raise RecordingError(f"{where} must be an object, not {_json_kind(raw)}")
            static: GpuStatic
            if "gpu" in raw:
                i = raw["gpu"]
                if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(info.gpus):
                    raise RecordingError(
                        f"{where}.gpu = {i!r} is not one of the {len(info.gpus)} GPUs in the header"
                    )
                static = info.gpus[i]
            elif "static" in raw:
                static = from_dict(GpuStatic, raw["static"], f"{where}.static")
            else:
                raise RecordingError(f"{where} names no GPU (no gpu or static key)")
            gpus.append(from_dict(GpuSample, raw, where, info=static))
        sample = from_dict(RigSample, data, "sample", info=info, gpus=tuple(gpus))
    except RecordingError as exc:
        raise RecordingError(str(exc), line) from None
    assert isinstance(sample, RigSample)
    return sample


def sample_time(obj: dict[str, Any], line: int | None = None) -> float:
    """The recorded ``t`` of a sample line, checking only its outline (seq, t, gpus)."""
    seq, t, gpus = obj.get("seq"), obj.get("t"), obj.get("gpus", [])
    if type(seq) is not int:
        raise RecordingError(f"sample.seq must be an integer, not {_json_kind(seq)}", line)
    if type(t) is not float and type(t) is not int:
        raise RecordingError(f"sample.t must be a number, not {_json_kind(t)}", line)
    if not math.isfinite(t):
        raise RecordingError(f"sample.t must be a finite number, not {t!r}", line)
    if type(gpus) is not list:
        raise RecordingError(f"sample.gpus must be a list, not {_json_kind(gpus)}", line)
    return float(t)


class Encoder:
    """Turns samples into recording lines, writing an info line when the rig's info changes."""

    def __init__(self, info: RigInfo) -> None:
        self.info = info

    def header(self, *, lltui_version: str, created: float) -> str:
        return dumps(header_dict(self.info, lltui_version=lltui_version, created=created))

    def lines(self, sample: RigSample) -> list[str]:
        out = []
        if sample.info != self.info:
            self.info = sample.info
            out.append(dumps({"info": info_to_dict(self.info)}))
        out.append(dumps(sample_to_dict(sample, self.info)))
        return out


class Decoder:
    """Reads the lines after the header in order; keeps the info in force."""

    def __init__(self, header: RecordingHeader) -> None:
        self.info = header.info

    def feed(self, obj: dict[str, Any], line: int) -> RigSample | None:
        """A sample, or None for a line that changes the info (another recording's header
        too: recordings joined into one file play one after the other)."""
        if "seq" in obj:
            return sample_from_dict(obj, self.info, line)
        if RECORDING_KEY in obj:  # another recording joined on (cat a.jsonl b.jsonl)
            try:
                self.info = parse_header(obj).info
            except RecordingError as exc:
                raise RecordingError(str(exc), line) from None
            return None
        if "info" in obj:
            try:
                self.info = info_from_dict(obj["info"])
            except RecordingError as exc:
                raise RecordingError(str(exc), line) from None
            return None
        raise RecordingError("neither a sample nor an info record", line)


TRUNCATED_HINT = "the last line is incomplete (the recording was cut short); it was skipped"

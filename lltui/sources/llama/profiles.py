"""Named launch profiles: one TOML file per profile in ``<config dir>/profiles/NAME.toml``.

A profile is a :class:`~lltui.core.cmdline.launch_spec.LaunchSpec` written out with only the
settings that differ from the defaults. The launch session saves it through
:func:`with_absolute_paths`, so a profile saved in one folder starts from any other.
Files are written atomically (a temporary file in the same directory, flushed, then renamed
over the old one) so a crash never leaves half a profile. A profile that holds an API key is
created with mode 0600 from the start.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from lltui import paths
from lltui.core.cmdline.launch_profile import spec_from_dict, spec_to_dict
from lltui.core.cmdline.launch_spec import LaunchError, LaunchSpec

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # whole: "$" let a final newline in
MAX_PROFILE_BYTES = 1 << 20  # a profile is a few hundred bytes; refuse to read a huge file


class ProfileError(Exception):
    """A profile that cannot be read or written; ``str()`` is one line, ``code`` the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def profile_path(name: str, directory: Path | None = None) -> Path:
    """The file of profile ``name``; raises :class:`ProfileError` for a name that is not a
    plain file name (letters, digits, ``_ . -``)."""
    if not _NAME.fullmatch(name) or name.endswith(".toml"):
        raise ProfileError(
            f"profile name {name!r} must be letters, digits, '_', '.' or '-' (at most 64), "
            "starting with a letter or digit"
        )
    return (directory or paths.profiles_dir()) / f"{name}.toml"


def with_absolute_paths(spec: LaunchSpec) -> LaunchSpec:
    """``spec`` with its model and API key file as absolute paths (symlinks kept: a link into
    a model cache stays a name the user knows)."""
    key_file = spec.api_key_file
    return replace(
        spec,
        args=spec.args.with_model(os.path.abspath(spec.model)),
        api_key_file=os.path.abspath(key_file) if key_file is not None else None,
    )


def list_profiles(directory: Path | None = None) -> list[str]:
    d = directory or paths.profiles_dir()
    if not d.is_dir():
        return []
    return sorted(p.stem for p in d.glob("*.toml") if _NAME.fullmatch(p.stem))


# --- writing TOML --------------------------------------------------------------------------


def _toml_string(value: str) -> str:
    out = ['"']
    for ch in value:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_key(key: str) -> str:
    return key if re.match(r"^[A-Za-z0-9_-]+$", key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProfileError(f"cannot store {value} in a profile")
        text = repr(value)
        return text if any(c in text for c in ".eE") else text + ".0"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise ProfileError(f"cannot store a {type(value).__name__} in a profile")


def to_toml(data: Mapping[str, Any]) -> str:
    """TOML text for flat data plus one level of tables (the spec's environment maps)."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, table in tables:
        lines += ["", f"[{_toml_key(key)}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


# --- saving and loading --------------------------------------------------------------------


def save_profile(name: str, spec: LaunchSpec, directory: Path | None = None) -> Path:
    """Write ``spec`` as profile ``name`` atomically; mode 0600 when it holds an API key."""
    path = profile_path(name, directory)
    data = spec_to_dict(spec)
    text = f"# lltui launch profile {name!r}\n" + to_toml(data)
    secret = bool(spec.secrets)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise ProfileError(
            f"cannot write profile {name!r} in {path.parent}: {exc.strerror}", 1
        ) from None
    try:
        # mkstemp creates the file 0600; widen it only when no secret is inside, as far as
        # the umask allows (read, never set: setting it would reach every thread)
        if not secret:
            os.fchmod(fd, 0o666 & ~paths.current_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise ProfileError(f"cannot write profile {name!r}: {exc.strerror}", 1) from None
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself survives a crash
        finally:
            os.close(dir_fd)
    return path


def load_profile(name: str, directory: Path | None = None) -> LaunchSpec:
    """The spec saved as ``name``; :class:`ProfileError` with the file named when it is
    missing, too large, not TOML or not a valid launch spec."""
    path = profile_path(name, directory)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        known = list_profiles(directory)
        hint = f" (known: {', '.join(known)})" if known else ""
        raise ProfileError(f"no launch profile {name!r} in {path.parent}{hint}") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror}", 1) from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(f"{path}: too large for a launch profile")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: {exc}") from None
    try:
        return spec_from_dict(data, where=str(path))
    except LaunchError as exc:
        raise ProfileError(str(exc)) from None

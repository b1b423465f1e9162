"""NCCL's configuration files, read as NCCL reads them (src/misc/param.cc initEnv).

When it starts, NCCL reads one user file, ``$NCCL_CONF_FILE`` where that is set and not empty
(since 2.23), else ``~/.nccl.conf``; then ``/etc/nccl.conf``. Each line ``NAME=VALUE`` is set
with ``setenv(NAME, VALUE, 0)``, which never replaces a variable already there: the
environment wins over both files, the user file over ``/etc/nccl.conf``, and within a file the
first line that sets a name wins. A line starting with ``#`` or without ``=`` is skipped;
nothing is trimmed (``NCCL_DEBUG = INFO`` sets ``'NCCL_DEBUG '`` to ``' INFO'``); name and value
are cut at 1023 bytes. Since 2.30 ``~`` is ``$HOME`` (before: the home directory of the
user's passwd entry), a line's trailing ``\\r`` is dropped and lines are read in pieces of
4095 bytes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.nccl.findings import INFO, WARN, Finding
from lltui.core.text import counted, one_line

SYSTEM_CONF = "/etc/nccl.conf"
CONF_FILE_SINCE = (2, 23, 0)  # NCCL_CONF_FILE read instead of ~/.nccl.conf
HOME_ENV_SINCE = (2, 30, 0)  # ~ is $HOME, '\r' dropped, fgets of 4096 bytes
_NAME_MAX = 1023
_LINE_MAX = 4095
ENVIRONMENT = "environment"


@dataclass(frozen=True, slots=True)
class ConfLine:
    """One ``NAME=VALUE`` line NCCL hands to setenv."""

    path: str
    line: int  # 1-based
    name: str
    value: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True, slots=True)
class ConfFile:
    """One file NCCL reads at start, why, and what it found there."""

    path: str
    why: str  # "NCCL_CONF_FILE", "~/.nccl.conf" or "system"
    status: str  # "read", "not found" or why it could not be read
    lines: tuple[ConfLine, ...] = ()


def conf_paths(
    environ: Mapping[str, str],
    version: tuple[int, ...] | None,
    passwd_home: str | None = None,
) -> list[tuple[str, str]]:
    """The files NCCL reads, in order, each with why (``version`` None: the newest NCCL's
    rules; ``passwd_home``: the home NCCL before 2.30 uses)."""
    new = version is None or version >= HOME_ENV_SINCE
    user = environ.get("NCCL_CONF_FILE") if version is None or version >= CONF_FILE_SINCE else None
    out: list[tuple[str, str]] = []
    if user:
        out.append((user, "NCCL_CONF_FILE"))
    else:
        home = environ.get("HOME") if new else passwd_home
        if home is not None:
            out.append((f"{home}/.nccl.conf", "~/.nccl.conf"))
    return [*out, (SYSTEM_CONF, "system")]


def parse_conf(path: str, data: bytes, version: tuple[int, ...] | None = None) -> list[ConfLine]:
    """The lines NCCL sets from a file's bytes."""
    new = version is None or version >= HOME_ENV_SINCE
    out = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        pieces = [raw[i : i + _LINE_MAX] for i in range(0, len(raw), _LINE_MAX)] if new else [raw]
        for piece in pieces:
            line = piece.split(b"\0", 1)[0]
            if new and line.endswith(b"\r"):
                line = line[:-1]
            if line.startswith(b"#") or b"=" not in line:
                continue
            name, value = line.split(b"=", 1)
            if name:  # setenv refuses an empty name
                out.append(ConfLine(path, number, _text(name), _text(value)))
    return out


def _text(data: bytes) -> str:
    return data[:_NAME_MAX].decode("utf-8", errors="replace")


@dataclass(frozen=True)
class NcclSettings:
    """The variables NCCL runs with: the environment plus what the files add."""

    env: dict[str, str]
    origin: dict[str, str]  # name -> "environment" or "PATH:LINE"
    files: tuple[ConfFile, ...]
    overridden: dict[tuple[str, int], str]  # (path, line) -> what set that name first


def apply_conf(environ: Mapping[str, str], files: Sequence[ConfFile]) -> NcclSettings:
    """What NCCL's setenv(NAME, VALUE, 0) makes of ``environ`` and ``files`` in order."""
    env = dict(environ)
    origin = dict.fromkeys(environ, ENVIRONMENT)
    overridden = {}
    for f in files:
        for line in f.lines:
            if line.name in env:
                overridden[(line.path, line.line)] = origin[line.name]
            else:
                env[line.name] = line.value
                origin[line.name] = line.where
    return NcclSettings(env, origin, tuple(files), overridden)


CONF_ORDER = "(read by NCCL at start: the environment wins, then the first line to set a name)"


def conf_file_line(f: Mapping[str, Any]) -> str:
    """One file of ``conf_files_json``, in words: where, why and what NCCL took from it."""
    said = f"{one_line(f['path'])} ({f['why']}): "
    if f["status"] != "read":
        return said + one_line(f["status"])
    settings = f["settings"]
    applied = sum(1 for c in settings if c["overridden_by"] is None)
    if not settings:
        return said + "no settings"
    return said + f"{counted(len(settings), 'setting')}, {applied} applied"


def conf_files_json(settings: NcclSettings) -> list[dict[str, Any]]:
    return [
        {
            **fields_of(f, "path why status"),
            "settings": [
                {
                    **fields_of(c, "line name value"),
                    "overridden_by": settings.overridden.get((c.path, c.line)),
                }
                for c in f.lines
            ],
        }
        for f in settings.files
    ]


def spaced_names(settings: NcclSettings) -> set[str]:
    """Names a file set with spaces around them: variables NCCL never reads."""
    return {c.name for f in settings.files for c in f.lines if c.name.strip() != c.name}


def conf_findings(settings: NcclSettings) -> list[Finding]:
    """A NCCL_CONF_FILE NCCL cannot read, names written with spaces, and lines NCCL does not
    apply because the environment or an earlier line set the name first."""
    out = []
    for f in settings.files:
        if f.why == "NCCL_CONF_FILE" and f.status != "read":
            tilde = " (NCCL does not expand ~)" if f.path.startswith("~") else ""
            out.append(
                Finding(
                    WARN,
                    "conf-file-unread",
                    f"NCCL_CONF_FILE={f.path}: {f.status}{tilde}; NCCL takes no settings from "
                    "it, and does not read ~/.nccl.conf instead",
                    "give NCCL_CONF_FILE the file's full path, or unset it",
                )
            )
        for c in f.lines:
            name = c.name.strip()
            if name != c.name and name.startswith(("NCCL_", "RCCL_")):
                out.append(
                    Finding(
                        WARN,
                        "conf-spaced-name",
                        f"{c.where} sets {c.name!r}: NCCL keeps the spaces around '=', so it "
                        f"sets a variable NCCL never reads, not {name}",
                        f"write {name}={c.value.strip()}",
                    )
                )
            by = settings.overridden.get((c.path, c.line))
            if by is not None and c.name.startswith(("NCCL_", "RCCL_")):
                by = "the environment" if by == ENVIRONMENT else by
                out.append(
                    Finding(
                        INFO,
                        "conf-overridden",
                        f"{c.where} sets {c.name}={c.value}, which NCCL does not apply: "
                        f"{by} sets it first",
                    )
                )
    return out

"""The models a llama-server router would serve from a directory (``--models-dir``), found as
the pinned build finds them (common/preset.cpp, load_from_models_dir), and a preset file read
within bounds.

A directory's ``NAME.gguf`` files are models named NAME; a subdirectory is a model named after
it, holding its file (or the first shard, ``-00001-of-``), a projector (a file whose name holds
``mmproj``) and a draft (a name starting ``mtp-``, ``dspark-`` or ``dflash-``). Other files are
not models; llama-server passes them over in silence, lltui names them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lltui.core.cmdline.preset import MAX_PRESET_BYTES

DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")
MAX_DIR_ENTRIES = 10_000  # a models directory holds models, not a disk


class ModelsDirError(Exception):
    """A directory or preset that cannot be read: ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class DirModel:
    name: str
    path: str
    mmproj: str | None = None
    draft: str | None = None


@dataclass(frozen=True, slots=True)
class DirScan:
    models: tuple[DirModel, ...]
    ignored: tuple[str, ...]  # entries that are not models, as named there (why, for a .gguf)


def _is_mmproj(name: str) -> bool:
    return "mmproj" in name


def _is_draft(name: str) -> bool:
    return name.startswith(DRAFT_PREFIXES)


def _entries(path: Path) -> list[os.DirEntry[str]]:
    out = []
    with os.scandir(path) as it:
        for entry in it:
            out.append(entry)
            if len(out) > MAX_DIR_ENTRIES:
                raise ModelsDirError(f"{path}: over {MAX_DIR_ENTRIES} entries: not a models folder")
    return sorted(out, key=lambda e: e.name)


def _subdir(entry: os.DirEntry[str]) -> DirModel | None:
    model = first_shard = mmproj = draft = None
    for e in _entries(Path(entry.path)):
        if not e.is_file() or not e.name.endswith(".gguf"):
            continue
        if _is_mmproj(e.name):
            mmproj = e.path
        elif _is_draft(e.name):
            draft = draft or e.path
        elif "-00001-of-" in e.name:
            first_shard = e.path
        else:
            model = e.path
    chosen = first_shard or model
    return DirModel(entry.name, chosen, mmproj, draft) if chosen else None


def scan_models_dir(directory: str) -> DirScan:
    """The models of a directory as llama-server's router lists them, and what it skips."""
    path = Path(directory)
    if not path.is_dir():
        raise ModelsDirError(f"{directory}: not a directory")
    models: list[DirModel] = []
    ignored: list[str] = []
    try:
        for entry in _entries(path):
            if entry.is_dir():
                found = _subdir(entry)
                if found is not None:
                    models.append(found)
                else:
                    ignored.append(entry.name + "/ (no .gguf model in it)")
                continue
            if not entry.name.endswith(".gguf"):
                ignored.append(entry.name)
            elif not entry.is_file():
                gone = entry.is_symlink() and not os.path.exists(entry.path)
                ignored.append(entry.name + (" (a broken link)" if gone else " (not a file)"))
            elif _is_mmproj(entry.name) or _is_draft(entry.name):
                kind = "projector" if _is_mmproj(entry.name) else "draft"
                ignored.append(f"{entry.name} (a {kind} beside no model of its own)")
            else:
                models.append(DirModel(entry.name.replace(".gguf", ""), entry.path))
    except OSError as exc:
        raise ModelsDirError(f"{directory}: {exc.strerror or exc}") from None
    return DirScan(tuple(models), tuple(ignored))


def read_preset_file(path: str) -> str:
    """A preset file's text (ModelsDirError: one line when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PRESET_BYTES + 1)
    except OSError as exc:
        raise ModelsDirError(f"{path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PRESET_BYTES:
        raise ModelsDirError(f"{path}: over {MAX_PRESET_BYTES // 1024} KiB: not a preset file")
    return data.decode("utf-8", errors="replace")

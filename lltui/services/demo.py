"""A model to try lltui on without a download (``lltui demo``), written where the user says:
into a folder, or to a .gguf path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lltui.sources.models.demo import DEMO, DEMO_FILE, DemoError, is_demo, write_demo

__all__ = ["Demo", "DemoError", "make_demo"]


@dataclass(frozen=True)
class Demo:
    path: Path
    size: int
    architecture: str
    n_layer: int
    n_ctx_train: int


def make_demo(where: str | None = None) -> Demo:
    """Write the demo model into the folder ``where`` (None: the current one), or to
    ``where`` itself when it names a ``.gguf`` file; the folder must be there already. The
    same file each time, written over only where it is the demo already. ValueError for a
    path that is neither (a file in its folder part too), a folder not there, or a file
    that is something else; DemoError (one line) when it cannot be written."""
    target = Path(where or ".")
    try:
        folder = target.parent if target.suffix.lower() == ".gguf" else target
        # the first part of the path there is must be a folder (foo.txt/x.gguf, foo.txt/sub)
        there = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if there is not None and not there.is_dir():
            raise ValueError(f"{there}: not a folder (give a folder or a .gguf path)")
        if there != folder:  # nothing is made but the model (a typo made folders as root)
            raise ValueError(f"{folder}: no such folder; nothing written")
        if folder is target:
            target = target / DEMO_FILE
        if target.is_dir():
            raise ValueError(f"{target}: is a folder")
        if target.exists() and not is_demo(target):
            raise ValueError(f"{target}: already exists and is not lltui's demo; nothing written")
    except OSError as exc:  # a name too long, a file where a folder should be
        raise DemoError(f"{target}: cannot write it: {exc.strerror or exc}") from None
    size = write_demo(target)
    return Demo(target, size, "llama", DEMO.n_layer, DEMO.n_ctx_train)

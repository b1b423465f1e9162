"""GGUF files in the folders people keep models in: ~/models, the Hugging Face cache,
LM Studio's and llama.cpp's own cache."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from lltui.core.gguf.refs import ModelFile
from lltui.paths import cache_home

MAX_DEPTH = 6
MAX_FILES = 500
SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def default_roots(environ: dict[str, str] | None = None) -> list[Path]:
    env = os.environ if environ is None else environ
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    cache = cache_home(env)
    hf_home = Path(env.get("HF_HOME") or cache / "huggingface")
    roots = [
        home / "models",
        Path(env["HF_HUB_CACHE"]) if env.get("HF_HUB_CACHE") else hf_home / "hub",
        home / ".lmstudio" / "models",
        cache / "lm-studio" / "models",
        Path(env["LLAMA_CACHE"]) if env.get("LLAMA_CACHE") else cache / "llama.cpp",
    ]
    if env.get("LLTUI_MODELS"):
        roots = [Path(p) for p in env["LLTUI_MODELS"].split(os.pathsep) if p] + roots
    return roots


def _walk(root: Path, depth: int) -> Iterable[os.DirEntry[str]]:
    try:
        with os.scandir(root) as it:
            entries = list(it)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=True):
                if depth < MAX_DEPTH and not entry.name.startswith("."):
                    yield from _walk(Path(entry.path), depth + 1)
            elif entry.name.lower().endswith(".gguf"):
                yield entry
        except OSError:
            continue


def find_models(roots: Sequence[Path] | None = None, limit: int = MAX_FILES) -> list[ModelFile]:
    """GGUF models under the roots, one entry per model (a split model by its first part),
    largest first; mmproj and other non-first split parts are left out."""
    found: dict[str, ModelFile] = {}
    split_sizes: dict[str, list[int]] = {}
    for root in roots if roots is not None else default_roots():
        for entry in _walk(root, 0):
            name = entry.name
            if "mmproj" in name.lower():
                continue
            try:
                size = entry.stat(follow_symlinks=True).st_size
            except OSError:
                continue
            m = SPLIT_RE.search(name)
            if m:
                folder = entry.path[: len(entry.path) - len(name)]
                first = folder + name[: m.start()] + f"-00001-of-{m.group(2)}.gguf"
                split_sizes.setdefault(first, []).append(size)
                continue
            real = os.path.realpath(entry.path)
            found.setdefault(real, ModelFile(entry.path, size))
            if len(found) >= limit:
                break
    for first, sizes in split_sizes.items():
        if os.path.exists(first):
            found.setdefault(os.path.realpath(first), ModelFile(first, sum(sizes), len(sizes)))
    return sorted(found.values(), key=lambda m: (-m.size, m.path))[:limit]

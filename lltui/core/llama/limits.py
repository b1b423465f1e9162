"""llama.cpp's own hard limits, where lltui's readers and parsers bound what they accept,
and its rule for naming the parts of a split model."""

from __future__ import annotations

import re

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS (llama-hparams.h)

# llama_split_path's "%s-%05d-of-%05d.gguf": llama.cpp loads a split model from part 1 only
SPLIT_NAME_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def first_split_part(path: str) -> str:
    """``path``, or the first part of the split model it is a later part of (llama-server
    refuses any other: "illegal split file idx")."""
    m = SPLIT_NAME_RE.match(path)
    if m is None or int(m["no"]) <= 1:
        return path
    return f"{m['prefix']}-00001-of-{m['count']}.gguf"

"""Several models on one command line, each with its own llama-server flags (``lltui fit``
and ``lltui launch``):

    lltui fit [shared flags] A.gguf [A's flags] B.gguf [B's flags] hf:owner/C [C's flags]

Flags before the first model apply to every model; flags after a model apply to that model
and override the shared ones (as a later flag does on llama-server's command line). lltui's
own options (``--gpus``, ``--json``, ...) may stand anywhere and apply to the whole set.
``--alias NAME`` among a model's flags names it (as llama-server's own ``--alias`` does);
otherwise the file's name is used. A word is a model when it names a ``.gguf`` file, an
``hf:`` reference, an ``https://`` URL or a file that exists; any other bare word is left
where it is, for the flag parser to judge.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from lltui.commands.own_options import Item


@dataclass
class ModelSet:
    shared: list[str] = field(default_factory=list)
    models: list[tuple[str, list[str]]] = field(default_factory=list)
    stray: str | None = None


def looks_like_model(word: str) -> bool:
    w = word.strip()
    if w.lower().endswith(".gguf") or w.startswith(("hf:", "https://", "http://")):
        return True
    return os.path.isfile(w)


def group_models(items: Sequence[Item]) -> ModelSet:
    """The words left once lltui's own options are out (:func:`split_own`), as shared
    flags, each model with its flags, and the first bare word that is no model."""
    from lltui.core.cmdline.flag_table import is_flag_token

    out = ModelSet()
    target = out.shared
    for item in items:
        if is_flag_token(item[0]):
            target += item
        elif looks_like_model(item[0]):
            words: list[str] = []
            out.models.append((item[0], words))
            target = words
        else:
            out.stray = out.stray or item[0]
    return out

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

from lltui.commands import CliError


@dataclass
class ModelSet:
    shared: list[str] = field(default_factory=list)
    models: list[tuple[str, list[str]]] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)  # lltui's own, repeatable
    switches: set[str] = field(default_factory=set)
    stray: str | None = None

    def last(self, name: str) -> str | None:
        found = self.values.get(name)
        return found[-1] if found else None


def looks_like_model(word: str) -> bool:
    w = word.strip()
    if w.lower().endswith(".gguf") or w.startswith(("hf:", "https://", "http://")):
        return True
    return os.path.isfile(w)


def split_model_set(
    argv: Sequence[str],
    own_values: Sequence[str],
    own_switches: Sequence[str],
    verb: str,
) -> ModelSet:
    """The command line split into shared flags, each model and its flags, and lltui's own
    options. A llama-server flag takes as many values as the flag table says; one the table
    does not know is refused here, naming it (CliError, exit 2)."""
    from lltui.core.llama.flag_table import is_flag_token, pinned_arity, unknown_flag_message

    out = ModelSet()
    own = (*own_values, *own_switches)
    target = out.shared
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, value = a.partition("=")
        if a in own_switches:
            out.switches.add(a)
            i += 1
            continue
        if name in own_values:
            if not eq:
                if i + 1 >= len(argv):
                    raise CliError(f"{verb}: {name} expects a value", 2)
                value = argv[i + 1]
                i += 1
            out.values.setdefault(name, []).append(value)
            i += 1
            continue
        if is_flag_token(a):
            n = pinned_arity(a)
            if n is None:
                raise CliError(f"{verb}: {unknown_flag_message(a)}", 2)
            values = argv[i + 1 : i + 1 + n]
            if any(w in own for w in values):
                values = []  # lltui's own option is not this flag's value: the parser says so
            target += [a, *values]
            i += 1 + len(values)
            continue
        if looks_like_model(a):
            words: list[str] = []
            out.models.append((a, words))
            target = words
        else:
            out.stray = out.stray or a
        i += 1
    return out

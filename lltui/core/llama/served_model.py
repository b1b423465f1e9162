"""Which model a llama-server process serves, from its command line: what the monitor shows
beside the process (several servers, or a router's model servers, on the same GPUs) and the
exporter puts in a label.

A router starts each model's server with ``--alias NAME --model PATH``; a server started by
hand names its model with ``-m PATH`` (or ``-hf REPO``) and perhaps ``--alias``. A router
itself (``--models-dir``/``--models-preset`` and no model) is ``router``. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

ROUTER = "router"
MAX_NAME = 64  # a label value, a column cell: long names are cut

_ALIAS = ("-a", "--alias")
_MODEL = ("-m", "--model")
_HF = ("-hf", "-hfr", "--hf-repo")
_ROUTER = ("--models-dir", "--models-preset")


def _is_server(argv: Sequence[str]) -> bool:
    if not argv:
        return False
    prog = PurePosixPath(argv[0]).name
    if prog.startswith("llama-server"):
        return True
    # the unified binary: ``llama serve ...``
    return prog == "llama" and len(argv) > 1 and argv[1] in ("serve", "server")


def _values(argv: Sequence[str], flags: Sequence[str]) -> list[str]:
    out = []
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name in flags:
            if eq:
                out.append(value)
            elif i + 1 < len(argv):
                out.append(argv[i + 1])
    return out


def _clean(name: str) -> str | None:
    text = "".join(c for c in name.strip() if c.isprintable())
    return text[:MAX_NAME] or None


def served_model(argv: Sequence[str]) -> str | None:
    """The model a llama-server command line serves: its first ``--alias``, else the file
    of ``-m`` without ``.gguf``, else the ``-hf`` repository; ``router`` for a router; None
    for any other program."""
    if not _is_server(argv):
        return None
    if aliases := _values(argv, _ALIAS):
        first = aliases[-1].split(",")[0]
        if _clean(first):
            return _clean(first)
    if models := _values(argv, _MODEL):
        name = PurePosixPath(models[-1]).name
        if name.lower().endswith(".gguf"):
            name = name[: -len(".gguf")]
        return _clean(name)
    if repos := _values(argv, _HF):
        return _clean(repos[-1])
    if _values(argv, _ROUTER):
        return ROUTER
    return None


def served_model_of_command(command: str | None) -> str | None:
    """The same from a command line joined by spaces (``ps``, nvidia-smi over ssh): a path
    with spaces in it reads wrong, so a source with the argv list sets the model itself."""
    if not command:
        return None
    return served_model(command.split())

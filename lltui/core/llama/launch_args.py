"""llama-server flags as a user types them for ``lltui launch``, read by the one parser
(:func:`lltui.core.llama.args.parse_llama_args`) into :class:`LaunchSpec` keyword arguments;
every flag the spec does not model is passed on as given, in order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lltui.core.llama.args import LlamaArgs
from lltui.core.llama.args import parse_llama_args as parse_args
from lltui.core.llama.flag_table import BinaryFlags
from lltui.core.llama.launch_spec import LaunchError
from lltui.core.llama.multigpu import SplitMode
from lltui.core.llama.spec_flags import SPEC_KEYS


def _binary(arity: Mapping[str, int] | BinaryFlags | None) -> BinaryFlags | None:
    if arity is None or isinstance(arity, BinaryFlags):
        return arity
    return BinaryFlags(flags=frozenset(arity), arity=dict(arity))


def spec_kwargs(args: LlamaArgs) -> dict[str, Any]:
    """The settings given on ``args``' command line as :class:`LaunchSpec` keywords, the rest
    of its flags in ``extra_args`` as given."""
    out: dict[str, Any] = {}
    extra: list[str] = []
    for g in args.given_args:
        name = SPEC_KEYS.get(g.key or "")
        if name is None:
            extra += g.tokens
            continue
        value: Any = getattr(args, g.key or "")
        if name == "split_mode":
            value = SplitMode.parse(value)
        elif name == "devices":
            value = value if value else ("none",)
        out[name] = value
    out["extra_args"] = tuple(extra)
    return out


def parse_llama_args(
    tokens: Sequence[str], arity: Mapping[str, int] | BinaryFlags | None = None
) -> dict[str, Any]:
    """Read llama-server flags as typed into :class:`LaunchSpec` keyword arguments.

    Flags the spec models become fields (``-ts 3,1`` -> ``tensor_split=(3.0, 1.0)``); the
    API key is taken out of the flags; everything else stays in ``extra_args`` in order.
    ``arity`` (a probed binary's flags, or flag -> number of values from its help) decides
    which flags exist; without it, a flag lltui does not know is kept in ``extra_args`` and
    :func:`~lltui.core.llama.launch_spec.build_command` checks it against the binary (or the
    pinned table). A flag lltui reads with a missing value or one llama-server refuses or
    that means nothing is a :class:`LaunchError` (one line).
    """
    try:
        # without the binary, a flag lltui does not know is left for build_command to check
        args = parse_args(tokens, binary=_binary(arity), keep_unknown=arity is None)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    return spec_kwargs(args)

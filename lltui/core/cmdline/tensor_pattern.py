"""``-ot PATTERN=BUFT`` patterns searched in tensor names, in time linear in the name.

Python's ``re`` backtracks: a pattern that repeats a repeat (``(.*)*X``) takes time
exponential in the length of a name it does not match, and a fit of one such ``-ot`` never
ends. Patterns run on RE2 (google-re2), an automaton that reads each character once. Its
``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII, as in llama.cpp's std::regex. What RE2 cannot
run (back-references, look-around, atomic groups, possessive repeats, ``\\Z``, ``(?x)``) is
searched with ``re``: such patterns are rare in ``-ot`` and are the user's own.

RE2's Python binding costs ~20 times ``re``'s per call on short names, so each answer is kept
per name, and each pattern's function is kept too: a model's names are few, and a search
over commands (``--best``) asks the same names of the same patterns (``--n-cpu-moe N`` is a
pattern per layer) for every candidate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

import re2

from lltui.core.cmdline.args import FFN_EXPS_REGEX

Search = Callable[[str], bool]
# answers kept per pattern: a model has a few thousand tensors; past this, a new table
_MEMO_MAX = 65_536
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a pattern RE2 refuses is re's, not an error to print


@lru_cache(maxsize=512)
def compile_search(pattern: str) -> Search:
    """A function telling whether ``pattern`` matches anywhere in a string, as
    ``re.search(pattern, s) is not None`` would. Raises re.error for a bad pattern."""
    compiled = re.compile(pattern)  # re's syntax and errors are the contract
    try:
        if "{," in pattern:  # re reads {,n} as {0,n}; RE2 as the characters
            raise re2.error(pattern)
        linear = re2.compile(pattern, _OPTIONS)
    except re2.error:
        return lambda s: compiled.search(s) is not None
    memo: dict[str, bool] = {}

    def search(name: str) -> bool:
        if not name:  # RE2's \B matches the empty string, re's does not: re answers it
            return compiled.search(name) is not None
        found = memo.get(name)
        if found is None:
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            found = memo[name] = linear.search(name) is not None
        return found

    return search


@lru_cache(maxsize=4096)
def _found_in(pattern: str, names: tuple[str, ...]) -> tuple[str, ...]:
    per_layer = _PER_LAYER.fullmatch(pattern)
    if per_layer is not None and per_layer.group(2) == FFN_EXPS_REGEX:
        return _experts_by_layer(names).get(per_layer.group(1), ())
    search = compile_search(pattern)
    return tuple(n for n in names if search(n))


# --n-cpu-moe N is N patterns of one shape, blk\.{i} and the experts' regex: one pass over
# the names finds every layer's (the digits after "blk." end at its "\.", so the pattern of
# layer i is found in a name exactly where one of these matches has the digits of i)
_PER_LAYER = re.compile(r"blk\\\.(\d+)(.*)", re.DOTALL)


@lru_cache(maxsize=64)
def _experts_by_layer(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    found = re.compile(r"blk\.(\d+)" + FFN_EXPS_REGEX)
    out: dict[str, list[str]] = {}
    for n in names:
        for layer in {m.group(1) for m in found.finditer(n)}:
            out.setdefault(layer, []).append(n)
    return {layer: tuple(ns) for layer, ns in out.items()}


def first_found(patterns: tuple[str, ...], names: tuple[str, ...]) -> dict[str, int]:
    """For each of ``names`` some pattern is found in, the index of the first (the -ot that
    llama.cpp applies). Each pattern is searched in the names once per model: a search over
    commands (``--n-cpu-moe N``, a pattern per layer) asks again with other counts."""
    first: dict[str, int] = {}
    for i, p in enumerate(patterns):
        for n in _found_in(p, names):
            first.setdefault(n, i)
    return first

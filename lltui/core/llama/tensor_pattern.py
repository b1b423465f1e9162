"""``-ot PATTERN=BUFT`` patterns searched in tensor names, in time linear in the name.

Python's ``re`` backtracks: a pattern that repeats a repeat (``(.*)*X``) takes time
exponential in the length of a name it does not match, and a fit of one such ``-ot`` never
ends. :func:`compile_search` parses the pattern with ``re``'s own parser (so its syntax and
errors are ``re``'s) and runs it as a Thompson automaton: every state is followed at once, each
character read once. Only whether a match exists is needed, so greedy and lazy repeats are
the same here. Patterns that need backtracking by their nature (back-references, look-around,
atomic groups, possessive repeats) or flags that change matching are searched with ``re``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

# re's own parser and its constants (public as sre_parse before Python 3.11; no stubs)
C: Any = importlib.import_module("re._constants")
P: Any = importlib.import_module("re._parser")

Search = Callable[[str], bool]
# past this many instructions (a{1000}{1000}) the automaton is not worth building
MAX_PROGRAM = 50_000
# flags that change only how a pattern is written or is the default for str patterns
_HARMLESS_FLAGS = re.UNICODE | re.VERBOSE


class _Unsupported(Exception):
    """A construct the automaton does not run: search with re instead."""


def compile_search(pattern: str, *, automaton: bool | None = None) -> Search:
    """A function telling whether ``pattern`` matches anywhere in a string, as
    ``re.search(pattern, s) is not None`` would. Raises re.error for a bad pattern.

    ``automaton``: None runs the automaton only for the shapes that make ``re`` backtrack
    without bound (``re`` is much faster per search on the rest, which are nearly all
    patterns people write); True runs it wherever it can (tests compare the two)."""
    compiled = re.compile(pattern)
    try:
        tree = P.parse(pattern)
        if tree.state.flags & ~_HARMLESS_FLAGS:
            raise _Unsupported
        if automaton is None and not _risky(list(tree)):
            raise _Unsupported
        return Automaton(_Compiler().program(tree))
    except (_Unsupported, RecursionError):
        return lambda s: compiled.search(s) is not None


class Automaton:
    """A compiled pattern run as a Thompson automaton: ``automaton(name)`` is whether it
    matches anywhere in ``name``."""

    __slots__ = ("program",)

    def __init__(self, program: list[Instr]) -> None:
        self.program = program

    def __call__(self, s: str) -> bool:
        return _run(self.program, s)


def _risky(items: list[Any]) -> bool:
    """Whether backtracking can take more than about quadratic time: a repeat inside a
    repeat, alternatives under an unbounded repeat, or three unbounded repeats."""
    unbounded = 0

    def walk(nodes: list[Any], repeats_around: int, open_loop: bool) -> bool:
        nonlocal unbounded
        for op, av in nodes:
            if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
                _lo, hi, body = av
                many = hi is C.MAXREPEAT or hi > 1
                if many and repeats_around:
                    return True
                unbounded += hi is C.MAXREPEAT
                if walk(list(body), repeats_around + many, open_loop or hi is C.MAXREPEAT):
                    return True
            elif op is C.BRANCH:
                if open_loop:
                    return True
                if any(walk(list(b), repeats_around, open_loop) for b in av[1]):
                    return True
            elif op is C.SUBPATTERN:
                if walk(list(av[3]), repeats_around, open_loop):
                    return True
            elif op in (C.ASSERT, C.ASSERT_NOT):
                if walk(list(av[1]), repeats_around, open_loop):
                    return True
            elif op is C.ATOMIC_GROUP and walk(list(av), repeats_around, open_loop):
                return True
        return False

    return walk(items, 0, False) or unbounded >= 3


# --- the program: one instruction per state ---------------------------------------------------

# (op, arg, next, alt): CHAR tests one character and goes to next; SPLIT goes to next and
# alt; JMP goes to next; ASSERT checks a position; MATCH ends.
CHAR, SPLIT, JMP, ASSERT, MATCH = range(5)
Instr = list[Any]


class _Compiler:
    def __init__(self) -> None:
        self.code: list[Instr] = []

    def emit(self, op: int, arg: Any = None) -> int:
        if len(self.code) >= MAX_PROGRAM:
            raise _Unsupported
        self.code.append([op, arg, None, None])
        return len(self.code) - 1

    def program(self, tree: Any) -> list[Instr]:
        entry = self.emit(JMP)  # instruction 0, where every search starts
        start, ends = self.seq(list(tree))
        self.code[entry][2] = start
        self.patch(ends, self.emit(MATCH))
        return self.code

    def patch(self, ends: list[tuple[int, int]], target: int) -> None:
        for index, slot in ends:
            self.code[index][slot] = target

    def seq(self, items: list[Any]) -> tuple[int, list[tuple[int, int]]]:
        """(first instruction, dangling exits) of a sequence."""
        start = self.emit(JMP)  # an empty sequence is this jump alone
        ends: list[tuple[int, int]] = [(start, 2)]
        for op, av in items:
            first, last = self.node(op, av)
            self.patch(ends, first)
            ends = last
        return start, ends

    def node(self, op: Any, av: Any) -> tuple[int, list[tuple[int, int]]]:
        if op in (C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN):
            i = self.emit(CHAR, _predicate(op, av))
            return i, [(i, 2)]
        if op is C.AT:
            i = self.emit(ASSERT, _position_test(av))
            return i, [(i, 2)]
        if op is C.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            if (add_flags | del_flags) & ~_HARMLESS_FLAGS:
                raise _Unsupported
            return self.seq(list(body))
        if op is C.BRANCH:
            return self.branch([list(b) for b in av[1]])
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, body = av
            return self.repeat(lo, hi, list(body))
        raise _Unsupported  # back-references, look-around, atomic and possessive forms

    def branch(self, alternatives: list[list[Any]]) -> tuple[int, list[tuple[int, int]]]:
        first, ends = self.seq(alternatives[0])
        for alt in alternatives[1:]:
            split = self.emit(SPLIT)
            start, alt_ends = self.seq(alt)
            self.code[split][2], self.code[split][3] = first, start
            first, ends = split, ends + alt_ends
        return first, ends

    def repeat(self, lo: int, hi: int, body: list[Any]) -> tuple[int, list[tuple[int, int]]]:
        unbounded = hi is C.MAXREPEAT
        copies = lo + (0 if unbounded else hi - lo)
        if copies * max(len(body), 1) > MAX_PROGRAM:
            raise _Unsupported
        entry = self.emit(JMP)
        ends: list[tuple[int, int]] = [(entry, 2)]
        for _ in range(lo):  # the required copies, one after another
            start, last = self.seq(body)
            self.patch(ends, start)
            ends = last
        if unbounded:  # then any number more: a loop
            split = self.emit(SPLIT)
            self.patch(ends, split)
            start, last = self.seq(body)
            self.code[split][2] = start
            self.patch(last, split)
            return entry, [(split, 3)]
        skip: list[tuple[int, int]] = []
        for _ in range(hi - lo):  # then each optional copy may end the repeat
            split = self.emit(SPLIT)
            self.patch(ends, split)
            start, last = self.seq(body)
            self.code[split][2] = start
            skip.append((split, 3))
            ends = last
        return entry, ends + skip


def _predicate(op: Any, av: Any) -> Callable[[str], bool]:
    if op is C.LITERAL:
        ch = chr(av)
        return ch.__eq__
    if op is C.NOT_LITERAL:
        ch = chr(av)
        return ch.__ne__
    if op is C.ANY:
        return "\n".__ne__
    tests: list[Callable[[str], bool]] = []
    negate = False
    for item_op, item in av:
        if item_op is C.NEGATE:
            negate = True
        elif item_op is C.LITERAL:
            tests.append(chr(item).__eq__)
        elif item_op is C.RANGE:
            tests.append(_in_range(chr(item[0]), chr(item[1])))
        elif item_op is C.CATEGORY:
            tests.append(_category(item))
        else:
            raise _Unsupported

    def inside(ch: str) -> bool:
        return any(t(ch) for t in tests) != negate

    return inside


def _in_range(lo: str, hi: str) -> Callable[[str], bool]:
    return lambda ch: lo <= ch <= hi


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _category(cat: Any) -> Callable[[str], bool]:
    table: dict[Any, Callable[[str], bool]] = {
        C.CATEGORY_DIGIT: str.isdecimal,
        C.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
        C.CATEGORY_SPACE: str.isspace,
        C.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
        C.CATEGORY_WORD: _is_word,
        C.CATEGORY_NOT_WORD: lambda ch: not _is_word(ch),
    }
    if cat not in table:
        raise _Unsupported
    return table[cat]


def _position_test(at: Any) -> Callable[[str, int], bool]:
    def boundary(s: str, i: int) -> bool:
        before = i > 0 and _is_word(s[i - 1])
        after = i < len(s) and _is_word(s[i])
        return before != after

    table: dict[Any, Callable[[str, int], bool]] = {
        C.AT_BEGINNING: lambda s, i: i == 0,
        C.AT_BEGINNING_STRING: lambda s, i: i == 0,
        C.AT_END: lambda s, i: i == len(s) or (i == len(s) - 1 and s[-1] == "\n"),
        C.AT_END_STRING: lambda s, i: i == len(s),
        C.AT_BOUNDARY: boundary,
        # as in re: \B never matches in an empty string
        C.AT_NON_BOUNDARY: lambda s, i: bool(s) and not boundary(s, i),
    }
    if at not in table:
        raise _Unsupported
    return table[at]


# --- running it --------------------------------------------------------------------------------


def _closure(program: list[Instr], states: list[int], s: str, i: int) -> tuple[list[int], bool]:
    """The character-reading states reachable from ``states`` at position ``i`` without
    reading, and whether MATCH is among them."""
    seen: set[int] = set()
    out: list[int] = []
    stack = list(reversed(states))
    while stack:
        pc = stack.pop()
        if pc in seen:
            continue
        seen.add(pc)
        op, arg, nxt, alt = program[pc]
        if op == CHAR:
            out.append(pc)
        elif op == MATCH:
            return out, True
        elif op == JMP:
            stack.append(nxt)
        elif op == SPLIT:
            stack.append(alt)
            stack.append(nxt)
        elif op == ASSERT and arg(s, i):
            stack.append(nxt)
    return out, False


def _run(program: list[Instr], s: str) -> bool:
    current: list[int] = []
    for i in range(len(s) + 1):
        # a search may begin anywhere: the start joins the states at every position
        current, matched = _closure(program, [*current, 0], s, i)
        if matched:
            return True
        if i == len(s):
            return False
        ch = s[i]
        current = [program[pc][2] for pc in current if program[pc][1](ch)]
    return False

"""-ot patterns: RE2 answers as re.search does, in time linear in the name."""

from __future__ import annotations

import random
import re
import time

import pytest

from lltui.core.cmdline.tensor_pattern import compile_search, first_found

NAMES = [
    "blk.0.ffn_up_exps.weight",
    "blk.17.ffn_gate_exps.weight",
    "blk.3.attn_q.weight",
    "token_embd.weight",
    "output_norm.weight",
    "blk.12.ffn_down_shexp.weight",
    "",
    "x",
    "blk.1.ffn_up.weight\n",
    "a_b c-d",
]

REAL_PATTERNS = [
    r"\.ffn_(up|down|gate|gate_up)_(ch|)exps",
    r"blk\.(1[0-9]|2[0-9])\.ffn_.*_exps\.=",
    r"blk\.([0-9]|1[0-5])\.",
    r"^token_embd",
    r"exps\.weight$",
    r"ffn_.*_exps",
    r"\bblk\b",
    r"[^a-z]weight",
    r"blk\.\d{1,2}\.ffn",
    r"(attn|ffn)_(q|k|v|up)",
    r"a{2,}?",
    r"\Ablk\.[0-9]+\.attn_q\.weight\Z",
    r"blk\.\d+\.(?:ffn_up|ffn_down)_exps\B",
    r"",
    r"x?",
    r"[\w.]+_exps",
    r"(?x) blk \. \d+",  # verbose: written differently, matched the same
]


@pytest.mark.parametrize("pattern", REAL_PATTERNS)
def test_real_patterns_agree_with_re(pattern):
    search = compile_search(pattern)
    for name in NAMES:
        assert search(name) == (re.search(pattern, name) is not None), (pattern, name)


ATOMS = ["a", "b", ".", r"\.", r"\d", r"\w", r"\s", "[ab]", "[^a]", "[a-c_]", "x", "_", "1"]
ALPHABET = "ab._1 xc2"


def _random_pattern(rng: random.Random, depth: int = 0) -> str:
    parts = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.55 or depth > 2:
            part = rng.choice(ATOMS)
        elif roll < 0.75:
            part = "(" + _random_pattern(rng, depth + 1) + ")"
        elif roll < 0.9:
            part = "(" + "|".join(_random_pattern(rng, depth + 1) for _ in range(2)) + ")"
        else:
            part = rng.choice(["^", "$", r"\b", r"\B"])
        if part not in ("^", "$", r"\b", r"\B") and rng.random() < 0.4:
            part += rng.choice(["*", "+", "?", "{2}", "{1,3}", "*?", "+?", "{0,2}"])
        parts.append(part)
    return "".join(parts)


def test_random_patterns_agree_with_re():
    rng = random.Random(20261124)
    checked = 0
    for _ in range(1500):
        pattern = _random_pattern(rng)
        try:
            expected = re.compile(pattern)
        except re.error:
            with pytest.raises(re.error):
                compile_search(pattern)
            continue
        search = compile_search(pattern)
        for _ in range(8):
            name = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))
            assert search(name) == (expected.search(name) is not None), (pattern, name)
            checked += 1
    assert checked > 8000


@pytest.mark.parametrize(
    "pattern", [r"(.*)*X", r"(a+)+X", r"(a|a)*X", r"(.*a){12}X", r"(\w+\s?)+$"]
)
def test_catastrophic_patterns_take_linear_time(pattern):
    search = compile_search(pattern)
    name = "a" * 60 + "!"  # re.search would take longer than the age of the universe on some
    started = time.process_time()
    for _ in range(10):
        search(name)
    assert time.process_time() - started < 5  # linear: milliseconds; a backtracker: never
    assert search("aaaX") == (re.search(pattern, "aaaX") is not None)


def test_backtracking_features_fall_back_to_re():
    for pattern in [r"(a)\1", r"a(?=b)", r"(?<!x)a", r"(?i)A", r"(?>a+)b", r"a++b"]:
        search = compile_search(pattern)
        for name in ["aa", "ab", "xa", "a", "aab", "AB"]:
            assert search(name) == (re.search(pattern, name) is not None), (pattern, name)


def test_an_open_lower_bound_is_read_as_re_reads_it():
    search = compile_search(r"a{,2}b")
    assert search("aab") and search("b")


def test_a_pattern_re2_refuses_prints_nothing(capfd):
    """RE2 logs what it cannot parse to stderr by default; such a pattern is re's to run."""
    assert compile_search(r"(a)\1")("aa")
    assert capfd.readouterr().err == ""


def test_bad_patterns_raise_re_errors():
    with pytest.raises(re.error):
        compile_search("(unclosed")


def test_a_pattern_is_compiled_once_and_its_answers_kept():
    # --best tries the same -ot/--n-cpu-moe patterns on the same names for every candidate
    first = compile_search(r"blk\.(3|4)\.ffn_.*_exps")
    again = compile_search(r"blk\.(3|4)\.ffn_.*_exps")
    assert first is again
    assert again("blk.3.ffn_up_exps.weight") and not again("blk.5.ffn_up_exps.weight")


def test_each_name_gets_the_first_pattern_found_in_it_as_re_would_pick():
    patterns = (*REAL_PATTERNS, r"(\w+)\1", r"exps")  # a back-reference: re answers it
    names = tuple(NAMES)
    first = first_found(patterns, names)
    for name in names:
        hits = [i for i, p in enumerate(patterns) if re.search(p, name)]
        assert first.get(name) == (hits[0] if hits else None), name
    assert first["blk.17.ffn_gate_exps.weight"] == 0  # also found by a later pattern


def test_the_n_cpu_moe_patterns_are_found_as_re_finds_them():
    # --n-cpu-moe N: a pattern per layer, answered from one pass over the names
    from lltui.core.cmdline.args import cpu_moe_overrides

    names = (
        *NAMES,
        "blk.5.ffn_gate_up_exps.weight",
        "blk.15.ffn_up_chexps.weight",
        "blk.05.ffn_down_exps.weight",
        "blk.1.blk.2.ffn_up_exps.weight",
        "blk.2.ffn_up_exps.blk.3.ffn_down_exps",
        "xblk.7.ffn_up_exps.weight",
        "blk.7.ffn_up_shexp.weight",
    )
    patterns = (
        *(o.pattern for o in cpu_moe_overrides(20)),
        r"blk\.05\.ffn_(up|down|gate|gate_up)_(ch|)exps",
    )
    first = first_found(patterns, names)
    for name in names:
        hits = [i for i, p in enumerate(patterns) if re.search(p, name)]
        assert first.get(name) == (hits[0] if hits else None), name
    assert first["blk.15.ffn_up_chexps.weight"] == 15 and first["blk.05.ffn_down_exps.weight"] == 20

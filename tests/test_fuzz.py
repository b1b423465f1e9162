"""Seeded fuzzing in CI: a fixed subset of bench/fuzz.py's cases, and every saved failure.

Each case must end in a result or a domain error (exit 0/1/2, one line on stderr, no
"internal error", no traceback, strict JSON for --json) within the time and memory bounds
of tests/support/fuzz_runner.py. Cases run in one worker subprocess shared by this module.

tests/fuzz_corpus/ keeps every input that once failed, with a note (.json) on what failed.
A note whose "xfail" is set is a known, unfixed failure: its test is marked
xfail(strict=True), so the suite stays green now and turns red when the bug is fixed; then
set "xfail" to null in the note (the input stays in the corpus as a regression test).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support import fuzz_runner as fr
from support.fuzz_inputs import TARGETS

SEED = 20250101
# cases per target in CI; LLTUI_FUZZ_CASES raises it for a longer local run
CASES = int(os.environ.get("LLTUI_FUZZ_CASES", "150"))
# targets whose cases take a second (a deadline to reach, a large input to read) run fewer
SLOW_TARGETS = {"net": 40, "scale": 30, "hooks": 30}
CI_TIMEOUT = 10.0  # seconds per case: a shared CI machine is slower than the bench's
# a known hang (xfail) is given less: fixed, it takes milliseconds; unfixed, minutes
KNOWN_HANG_TIMEOUT = 3.0


@pytest.fixture(scope="module")
def worker():
    with fr.Worker(timeout=CI_TIMEOUT) as w:
        yield w


def _explain(target: str, res: dict, where: str) -> str:
    lines = [f"{target} {where}: {res['status']}: {res.get('exc') or res.get('message') or ''}"]
    if res.get("where"):
        lines.append(f"  at {res['where']}")
    if res.get("case"):
        lines.append("  ops: " + "; ".join(res["case"]["ops"]))
    if res.get("traceback"):
        lines.append(res["traceback"])
    return "\n".join(lines)


@pytest.mark.parametrize("target", TARGETS)
def test_seeded_cases_end_in_a_result_or_a_domain_error(worker, target):
    """The seeded subset, minus the failures already kept (and marked) in the corpus."""
    known = {note["signature"] for note in _notes() if note.get("xfail")}
    failures = []
    cases = CASES if "LLTUI_FUZZ_CASES" in os.environ else SLOW_TARGETS.get(target, CASES)
    for index in range(cases):
        res = fr.gen(worker, target, SEED, index)
        if res["status"] in fr.OK_STATUSES:
            continue
        if fr.signature(target, res) in known:
            continue  # a known bug, tested (and expected to fail) by its corpus entry
        failures.append(_explain(target, res, f"seed {SEED} index {index}"))
    assert not failures, "\n\n".join(failures[:5])


def _notes() -> list[dict]:
    import json

    return [json.loads(p.read_text()) for p in fr.corpus_entries()]


def _corpus_params() -> list:
    params = []
    for path in fr.corpus_entries():
        import json

        note = json.loads(path.read_text())
        marks = []
        if note.get("xfail"):
            marks.append(
                pytest.mark.xfail(strict=True, reason=f"{note['signature']}: {note['xfail']}")
            )
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.mark.parametrize("note_path", _corpus_params())
def test_corpus_input_ends_in_a_result_or_a_domain_error(worker, note_path: Path):
    note, data = fr.load_entry(note_path)
    known_hang = note.get("xfail") and note["failure"]["status"] == "hang"
    res = fr.run_given(
        worker, note["case"], data, timeout=KNOWN_HANG_TIMEOUT if known_hang else None
    )
    assert res["status"] in fr.OK_STATUSES, _explain(note["case"]["target"], res, note_path.name)


def test_the_oracle_catches_what_it_must(worker):
    """The oracle itself: a crash, a hang and a domain error are told apart."""
    base = {"target": "topo", "name": "input.txt", "parser": None, "extra": {}, "ops": []}
    ok = fr.run_given(worker, {**base, "argv": ["topo", "--file", "{input}"]}, b"")
    assert ok["status"] == "domain" and ok["rc"] == 2
    bad = fr.run_given(worker, {**base, "argv": ["topo", "--file", "{input}", "--no-such"]}, b"x")
    assert bad["status"] == "domain"  # argparse's usage error is one line, exit 2
    crash = fr.run_given(
        worker, {**base, "parser": "smi_csv", "extra": {"fields": 5}, "argv": []}, b"1, 2\n"
    )
    assert crash["status"] == "crash" and crash["where"] != "?"


def test_the_oracle_catches_the_classes_of_round_3(worker, tmp_path):
    """Text that prints a bidi override raw, or a forged line; a recording that is not
    private or keeps a secret; a dcgm page read as total memory 0: each is a failure."""
    import stat

    from support.fuzz_classes import FORGED, check_dcgm, judge_record, judge_text

    assert judge_text("a\u202eb\n", "")["status"] == "bad-text"
    assert judge_text(f"x\n{FORGED} verdict: fits\n", "")["status"] == "bad-text"
    assert judge_text("x\\u000aFORGED-LINE\n", "") is None  # escaped: fine
    rec = tmp_path / "rec.jsonl"
    rec.write_text('{"command": "x --api-key sekrit"}')
    rec.chmod(0o644)
    assert "mode 644" in judge_record(rec, ["sekrit"])["message"]
    rec.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert "secret" in judge_record(rec, ["sekrit"])["message"]
    assert judge_record(rec, ["other"]) is None
    page = 'DCGM_FI_DEV_SM_CLOCK{gpu="0", UUID="GPU-1"} 139\n'
    (rig,) = check_dcgm(page).values()
    assert rig.gpus[0].info.memory_total is None

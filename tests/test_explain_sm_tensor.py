"""``lltui explain`` of a -sm tensor load: llama.cpp logs the devices of its Meta device and
one ``Meta()`` buffer of each kind, the largest device's. Logs of the pinned llama-server over
two loopback rpc-servers (tests/fixtures/llama-server/INDEX.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.core.llamalog.reader import scan_lines
from lltui.services.explain import ExplainRequest, explain

LOGS = Path(__file__).parent / "fixtures" / "llama-server"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sm-tensor") / "tiny-llama.gguf"
    gf.write_model(path, gf.llama_spec(), "Q8_0", name="tiny")
    return path


def test_the_scan_reads_the_meta_devices():
    facts = scan_lines((LOGS / "sm_tensor_even.log").read_text().splitlines())
    assert [name for name, _ in facts.meta_devices] == ["RPC0", "RPC1"]
    assert all(desc.startswith("127.0.0.1:") for _, desc in facts.meta_devices)
    assert facts.failures == ()  # --fit's "not implemented for SPLIT_MODE_TENSOR" is a warning


def test_an_even_split_is_explained_line_for_line(model):
    report = explain(
        ExplainRequest(str(LOGS / "sm_tensor_even.log"), model=str(model), ask_binary=False)
    )
    compared = report.comparison.checks
    meta = [c for c in compared if c.line.device == "Meta()"]
    assert {c.line.kind for c in meta} == {"model", "kv", "compute"}
    assert all(c.predicted_bytes is not None and c.exact for c in compared)
    assert report.failed is None
    assert any("-sm tensor over 2 devices" in n for n in report.notes)
    assert not any("even split" in n or "layer split" in n for n in report.notes)
    # each device's own share is listed, every layer on each
    rows = {r.name: r for r in report.device_rows()}
    shares = [r for name, r in rows.items() if name.startswith("RPC")]
    assert len(shares) == 2 and all(r.predicted and not r.logged for r in shares)


def test_a_split_the_log_does_not_print_is_not_claimed(model):
    """-ts 3,1 is not in the log: the shares follow free memory (even here), so the largest
    device's weights and KV are below the log's, and the lines say so rather than match."""
    report = explain(
        ExplainRequest(str(LOGS / "sm_tensor_ts31.log"), model=str(model), ask_binary=False)
    )
    by_kind = {c.line.kind: c for c in report.comparison.checks if c.line.device == "Meta()"}
    assert not by_kind["model"].exact and by_kind["model"].predicted_bytes is not None
    assert by_kind["model"].predicted_bytes < by_kind["model"].line.logged_bytes
    assert by_kind["compute"].exact  # every device plans the whole graph
    # the even split is said to be assumed; no layer split is looked for in the log
    assert any("assumes an even split" in n and "-ts" in n for n in report.notes)
    assert not any("layer split" in n for n in report.notes)

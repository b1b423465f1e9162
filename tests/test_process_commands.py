"""The process table's command column names what a llama.cpp process serves: the model's file
(or Hugging Face repository) first, where ``llama-server -m /models/...`` showed a path."""

from __future__ import annotations

import pytest
from support.app_helpers import sim_app

from lltui.core.monitor.commands import command_label


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (
            "/usr/local/bin/llama-server -m /models/llama-3-70b-q4_k_m.gguf -c 8192 -ngl 99",
            "llama-3-70b-q4_k_m.gguf · llama-server -c 8192 -ngl 99",
        ),
        ("llama-cli --model=/m/a.gguf -p hi", "a.gguf · llama-cli -p hi"),
        (
            "llama-server -hf unsloth/Qwen3-8B-GGUF:Q4_K_M --port 8080",
            "unsloth/Qwen3-8B-GGUF:Q4_K_M · llama-server --port 8080",
        ),
        ("/opt/llama.cpp/bin/rpc-server -H 0.0.0.0 -p 50052", "rpc-server -H 0.0.0.0 -p 50052"),
        ("/usr/lib/xorg/Xorg vt1 -displayfd 3", "/usr/lib/xorg/Xorg vt1 -displayfd 3"),
        ("python train.py --model big", "python train.py --model big"),
        ("llama-server -m", "llama-server -m"),
        ("", ""),
        ("evil\x1b]0;title\x07 \x1b[2J", "evil\\u001b]0;title\\u0007 \\u001b[2J"),
    ],
)
def test_command_label(command, shown):
    assert command_label(command) == shown


async def test_the_monitor_shows_the_model_a_server_serves_at_80_columns():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(3)
        await pilot.pause()
        table = app.screen.query_one("ProcessTable")
        cell = str(table.get_cell("41234", "command"))
        assert cell.startswith("Llama-3.1-405B"), cell
        table.set_filter("/models/")  # the filter still reads the whole command line
        await pilot.pause()
        assert table.row_count == 1


def test_model_flags_are_the_flag_tables():
    """The monitor spells the model flag itself (the flag table is not loaded for it): the
    same spellings as the table's."""
    from lltui.core.cmdline.flag_table import BY_KEY
    from lltui.core.monitor.commands import MODEL_FLAGS

    assert frozenset(BY_KEY["model_path"].spellings) == MODEL_FLAGS


def test_secret_flags_are_the_flag_tables():
    from lltui.core.cmdline.flag_table import FLAGS
    from lltui.core.cmdline.secrets import SECRET_FLAGS

    assert frozenset(s for f in FLAGS if f.secret_env for s in f.spellings) == SECRET_FLAGS

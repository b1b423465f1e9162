"""A process's command line as the process table shows it: for llama.cpp's programs the
model first (``llama-3-70b-q4_k_m.gguf · llama-server -c 8192 ...``), so what a server
serves is visible in a narrow column where ``/usr/local/bin/llama-server -m /models/...``
showed only its path."""

from __future__ import annotations

from lltui.core.cmdline.secrets import redact_command
from lltui.core.text import one_line

# llama.cpp's programs (llama-server, llama-cli, llama-bench ...), and its RPC server
LLAMA_PREFIX = "llama-"
RPC_SERVERS = ("rpc-server", "ggml-rpc-server")
# the model_path flag's spellings in lltui.core.cmdline.flag_table (a test keeps them equal):
# spelled here, the monitor does not load the whole flag table (a megabyte) for two words
MODEL_FLAGS = frozenset(("-m", "--model"))
_HF_FLAGS = frozenset(("-hf", "-hfr", "--hf-repo"))


def is_llama_program(executable: str) -> bool:
    name = executable.rsplit("/", 1)[-1]
    return name.startswith(LLAMA_PREFIX) or name in RPC_SERVERS


def command_label(command: str) -> str:
    """``command`` with, for a llama.cpp program, the model's file name (or Hugging Face
    repository) first, then the program's name without its folder and the other flags; any
    other command as it is; either with its secrets (``--api-key``, tokens) as ``***``."""
    command = one_line(redact_command(command))  # (a title can hold escape sequences)
    words = command.split()
    if not words or not is_llama_program(words[0]):
        return command
    program = words[0].rsplit("/", 1)[-1]
    model: str | None = None
    rest: list[str] = []
    i = 1
    while i < len(words):
        word = words[i]
        flag, eq, value = word.partition("=")
        if flag in MODEL_FLAGS or flag in _HF_FLAGS:
            if not eq and i + 1 < len(words):
                value = words[i + 1]
                i += 1
            if model is None and value:
                model = value.rsplit("/", 1)[-1] if flag in MODEL_FLAGS else value
                i += 1
                continue
            rest += [word] if eq or not value else [word, value]
        else:
            rest.append(word)
        i += 1
    if model is None:
        return " ".join([program, *rest])
    # the model first: it is what tells one server from another in a narrow column
    return " ".join([model, "·", program, *rest])

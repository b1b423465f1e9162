"""The llama-server settings a launch spec holds: LlamaArgs field -> LaunchSpec field, and
each one's spellings from the one flag table."""

from __future__ import annotations

from lltui.core.llama.flag_table import BY_KEY

# LlamaArgs setting -> LaunchSpec field; the flags themselves are the table's
SPEC_KEYS: dict[str, str] = {
    "model_path": "model",
    "n_ctx": "ctx_size",
    "n_parallel": "n_parallel",
    "n_gpu_layers": "n_gpu_layers",
    "split_mode": "split_mode",
    "tensor_split": "tensor_split",
    "main_gpu": "main_gpu",
    "devices": "devices",
    "type_k": "cache_type_k",
    "type_v": "cache_type_v",
    "flash_attn": "flash_attn",
    "n_batch": "batch_size",
    "n_ubatch": "ubatch_size",
    "load_mode": "load_mode",
    "rpc": "rpc",
    "host": "host",
    "port": "port",
    "api_key": "api_key",
    "api_key_file": "api_key_file",
    "hf_token": "hf_token",
    "log_verbosity": "log_verbosity",
    "metrics": "metrics",
}
# LaunchSpec field -> (spellings, number of values), first spelling first
SPEC_FLAGS: dict[str, tuple[tuple[str, ...], int]] = {
    name: (BY_KEY[key].spellings, BY_KEY[key].arity) for key, name in SPEC_KEYS.items()
}
SPELLING_TO_FIELD = {s: name for name, (spellings, _) in SPEC_FLAGS.items() for s in spellings}

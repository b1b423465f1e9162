"""llama.cpp's own hard limits, where lltui's readers and parsers bound what they accept."""

from __future__ import annotations

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS (llama-hparams.h)

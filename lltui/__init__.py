"""lltui: a terminal control room for llama.cpp on several NVIDIA GPUs."""

__version__ = "0.1.0"

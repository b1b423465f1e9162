"""llama.cpp's command line: the one flag table and parser (LlamaArgs), flag values, the
launch spec (settings plus address, secrets, environment), router presets, -ot patterns,
RPC hosts and the seed API's multi-GPU settings."""

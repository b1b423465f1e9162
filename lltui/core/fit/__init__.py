"""What llama.cpp will allocate: the GGUF header, ggml types, hyperparameters, placement of
tensors on devices, KV cache, compute buffers, quantization rules, and their reports."""

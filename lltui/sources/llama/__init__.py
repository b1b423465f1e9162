"""llama.cpp's programs: finding and building them, running llama-server under supervision,
its HTTP endpoints, and llama-fit-params as an oracle."""

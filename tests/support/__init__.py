"""What the tests share and test nothing themselves: the GGUF factory, llama.cpp fixtures (its
build, servers, rpc-servers), the FAKE pynvml, amdsmi and NCCL (clearly named: no GPU here),
ssh, Prometheus and hub servers started on 127.0.0.1, the fuzzer, and the published speed
points. Tests import them as ``from support import gguf_factory as gf``."""

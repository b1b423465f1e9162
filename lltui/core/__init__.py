"""Pure logic and models: standard library only, no UI, no NVML, no HTTP, no processes."""

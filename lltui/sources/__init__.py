"""The edges of the world: NVML, nvidia-smi, files, processes, simulated and replayed rigs."""

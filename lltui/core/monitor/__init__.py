"""The monitor's domain: GPU samples and their history, balance, energy, throttle reasons,
recordings and nvidia-smi's CSV. Every source returns these models."""

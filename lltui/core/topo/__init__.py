"""GPU topology: ``nvidia-smi topo -m`` parsed (matrix), advice drawn from it, and its reports."""

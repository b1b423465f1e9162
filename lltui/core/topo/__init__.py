"""GPU topology: the ``nvidia-smi topo -m`` model (matrix), its paste parser (parse, over the
line and cell tokenizer in tokens), advice drawn from it (advice), and its reports (report)."""

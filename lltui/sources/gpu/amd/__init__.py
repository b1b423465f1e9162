"""AMD GPUs (ROCm): the ``amd`` and ``amd:HOST`` sources.

Here, the ``amdsmi`` Python binding where it is importable and initialises
(:mod:`.binding`), else the ``amd-smi`` / ``rocm-smi`` command-line tools (:mod:`.cli`); on
a host over ssh, the tools. Per-process VRAM comes from the binding or amd-smi, else from
the kernel's DRM fdinfo (:mod:`.fdinfo`). :mod:`.source` chooses among them, importing
each only where it could answer; this package imports nothing.
"""

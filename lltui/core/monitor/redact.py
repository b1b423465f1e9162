"""A sample's process command lines with their secrets taken out (the rules:
:mod:`lltui.core.cmdline.secrets`), before a sample goes into a file others may read."""

from __future__ import annotations

from dataclasses import replace

from lltui.core.cmdline.secrets import redact_command
from lltui.core.monitor.models import RigSample


def redact_sample(sample: RigSample) -> RigSample:
    """``sample`` with the secrets taken out of every process's command line."""
    if not any(p.command for g in sample.gpus for p in g.processes):
        return sample
    gpus = tuple(
        replace(
            g,
            processes=tuple(
                replace(p, command=redact_command(p.command)) if p.command else p
                for p in g.processes
            ),
        )
        for g in sample.gpus
    )
    return replace(sample, gpus=gpus)

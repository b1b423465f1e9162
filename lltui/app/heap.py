"""The heap the start leaves free, handed back to the system once the first sample is shown.

Starting, the monitor parses its CSS, builds the command line's parser and loads its modules:
what that frees, glibc's malloc keeps in the process (about 1 MiB of an idle monitor's RSS,
which is measured against a bare Textual app's: bench/idle_cpu.py). ``malloc_trim`` gives it
back. Done only where ctypes is already loaded (NVML's binding loads it): loading it for
this would cost about what it frees.
"""

from __future__ import annotations

import gc
import sys


def release_free_heap() -> bool:
    """Collect garbage and give the heap's free pages back (glibc); False where there is no
    glibc malloc_trim, or ctypes is not loaded."""
    ctypes = sys.modules.get("ctypes")
    if ctypes is None or not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim  # not in musl: AttributeError
    except (OSError, AttributeError):
        return False
    frozen = gc.get_freeze_count() > 0
    if frozen:
        # The start ran with collection off and then froze what it had built (commands/ui.py),
        # with the cycles it dropped (the command line's parser, widgets built and replaced):
        # about 2,500 objects, thawed and collected here once; what lives is frozen again
        # (the model's first sample too: an object of it that later ends in a cycle stays,
        # a bounded few, once).
        gc.unfreeze()
    gc.collect()
    if frozen:
        gc.freeze()
    trim(0)
    return True

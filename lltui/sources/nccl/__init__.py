"""libnccl and libcudart through ctypes: find, load, version, communicators, all-reduce bench.

Finding the libraries needs no GPU: ``libnccl.so.2`` is looked for in ``LD_LIBRARY_PATH``, the
linker cache (``ldconfig -p``), the usual system directories, the ``nvidia-nccl-cu12`` /
``nvidia-nccl-cu13`` wheels and a copy bundled with torch, and ``ncclGetVersion`` answers
without a driver. Communicators and the bench need a GPU; without one they raise
:class:`NcclUnavailable` with one line that says why.

finder: where the libraries are; library: libnccl and its version; cudart: the CUDA runtime;
communicator: NCCLCommunicator; bench: the all-reduce sweep; info: the seed API's helpers;
report: what ``lltui nccl`` and the NCCL view show.
"""

from lltui.core.nccl.enums import NCCLRedOp, NCCLResult
from lltui.sources.nccl.bench import run_allreduce_bench
from lltui.sources.nccl.communicator import NCCLCommunicator
from lltui.sources.nccl.cudart import CudaRuntime, load_cudart, open_cuda
from lltui.sources.nccl.errors import CudaError, NCCLError, NcclUnavailable
from lltui.sources.nccl.finder import (
    find_cudart_candidates,
    find_nccl_candidates,
    parse_ldconfig,
)
from lltui.sources.nccl.info import (
    get_nccl_info,
    get_nccl_version,
    is_nccl_available,
    kaggle_nccl_config,
    print_nccl_info,
    setup_nccl_environment,
)
from lltui.sources.nccl.library import NcclLibrary, load_nccl, probe_nccl

__all__ = [
    "CudaError",
    "CudaRuntime",
    "NCCLCommunicator",
    "NCCLError",
    "NCCLRedOp",
    "NCCLResult",
    "NcclLibrary",
    "NcclUnavailable",
    "find_cudart_candidates",
    "find_nccl_candidates",
    "get_nccl_info",
    "get_nccl_version",
    "is_nccl_available",
    "kaggle_nccl_config",
    "load_cudart",
    "load_nccl",
    "open_cuda",
    "parse_ldconfig",
    "print_nccl_info",
    "probe_nccl",
    "run_allreduce_bench",
    "setup_nccl_environment",
]

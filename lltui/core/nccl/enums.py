"""NCCL's own enums and numbers as the seed API and nccl.h name them: data types, result
codes, reduction ops, and the version encoding."""

from __future__ import annotations

import enum
import re


class NCCLDataType(enum.Enum):
    """ncclDataType_t, with the values nccl.h gives them."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def nccl_tests_name(self) -> str:
        """The name nccl-tests prints in its ``type`` column."""
        return _TESTS_NAME[self]


_ITEMSIZE = {
    NCCLDataType.INT8: 1,
    NCCLDataType.UINT8: 1,
    NCCLDataType.INT32: 4,
    NCCLDataType.UINT32: 4,
    NCCLDataType.INT64: 8,
    NCCLDataType.UINT64: 8,
    NCCLDataType.FLOAT16: 2,
    NCCLDataType.FLOAT32: 4,
    NCCLDataType.FLOAT64: 8,
    NCCLDataType.BFLOAT16: 2,
}
_TESTS_NAME = {
    NCCLDataType.INT8: "int8",
    NCCLDataType.UINT8: "uint8",
    NCCLDataType.INT32: "int32",
    NCCLDataType.UINT32: "uint32",
    NCCLDataType.INT64: "int64",
    NCCLDataType.UINT64: "uint64",
    NCCLDataType.FLOAT16: "half",
    NCCLDataType.FLOAT32: "float",
    NCCLDataType.FLOAT64: "double",
    NCCLDataType.BFLOAT16: "bfloat16",
}


class NCCLResult(enum.Enum):
    """ncclResult_t."""

    SUCCESS = 0
    UNHANDLED_CUDA = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    REMOTE_ERROR = 6
    IN_PROGRESS = 7


class NCCLRedOp(enum.IntEnum):
    """ncclRedOp_t (the seed API passes these as plain ints: 0 = sum)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4  # since NCCL 2.10


# The names NCCL logs and nccl.h use for result codes ("-> 6" in a log is a remote error).
RESULT_NAMES: dict[int, str] = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}


def decode_nccl_version(code: int) -> str:
    """The integer ncclGetVersion returns, as ``major.minor.patch``.

    NCCL 2.9 changed the encoding from ``major*1000 + minor*100 + patch`` to
    ``major*10000 + minor*100 + patch``; codes below 10000 are the old form.
    """
    if code < 0:
        raise ValueError(f"not an NCCL version code: {code}")
    if code >= 10000:
        major, rest = divmod(code, 10000)
    else:
        major, rest = divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"2.25.1+cuda12.2"`` -> ``(2, 25, 1)``; None when it is not a version."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)

"""llama-server's flags, read with its own spellings and defaults: the names fit, quant,
launch and the API import. The table is :mod:`lltui.core.cmdline.flag_table`, the value
parsers :mod:`lltui.core.cmdline.flag_values`, the model and parser :mod:`lltui.core.cmdline.args`.
"""

from __future__ import annotations

from lltui.core.cmdline.args import (
    FFN_DENSE_REGEX,
    FFN_EXPS_REGEX,
    GivenFlag,
    LlamaArgs,
    TensorOverride,
    parse_llama_args,
    spell,
)
from lltui.core.cmdline.flag_table import (
    FLAGS,
    REMOVED,
    BinaryFlags,
    Flag,
    arity_of,
    canonical,
    pinned_arity,
)
from lltui.core.cmdline.flag_values import (
    KV_CACHE_TYPES,
    LOAD_MODES,
    NGL_ALL,
    NGL_AUTO,
    NP_AUTO,
    SPLIT_MODES,
)

__all__ = [
    "FFN_DENSE_REGEX",
    "FFN_EXPS_REGEX",
    "FLAGS",
    "KV_CACHE_TYPES",
    "LOAD_MODES",
    "NGL_ALL",
    "NGL_AUTO",
    "NP_AUTO",
    "REMOVED",
    "SPLIT_MODES",
    "BinaryFlags",
    "Flag",
    "GivenFlag",
    "LlamaArgs",
    "TensorOverride",
    "arity_of",
    "canonical",
    "parse_llama_args",
    "pinned_arity",
    "spell",
]

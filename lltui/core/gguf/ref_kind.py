"""Whether a model string names a file here or a remote GGUF, and how a URL is shown: all a
local model's fit and quant ask of a reference (:mod:`lltui.core.gguf.refs` parses one; its
dataclasses and patterns cost every plain fit about 4 ms to import)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

from lltui.core.cmdline.secrets import redact_urls

HF_PREFIX = "hf:"


def display_url(url: str) -> str:
    """``url`` without the user and password it may carry and with its secret query values
    as ``***`` (a signed URL's signature, a token), for messages, output and caches."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL urllib reads: whatever sits before an @ goes
        return redact_urls(re.sub(r"//[^/]*@", "//", url, count=1))
    if "@" in parts.netloc:
        url = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
    return redact_urls(url)


def is_remote_ref(text: str) -> bool:
    """True for ``hf:...`` and ``http(s)://...``: references read over the network."""
    t = text.strip()
    return t.startswith(HF_PREFIX) or t.lower().startswith(("https://", "http://"))

"""Read a remote model's header from a reference: ``hf:OWNER/REPO[:FILE|QUANT][@REV]`` through
the hub's listing, or an http(s) URL directly; every file by ranged requests, from the header
cache when it already holds it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from lltui.core.fit.gguf import GgufModel
from lltui.core.fit.remote_ref import RefError, UrlRef, parse_ref
from lltui.sources.remote_gguf import (
    ReadStats,
    RemoteError,
    join_headers,
    new_client,
    read_file_header,
    read_url_model,
)

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class RemoteModel:
    model: GgufModel
    stats: ReadStats


def read_remote(text: str, verb: str = "fit") -> RemoteModel:
    """The model ``text`` names and what reading it cost. RemoteError (one line) when it
    cannot be read; RepoChoice when it names a repository but not one model in it."""
    try:
        ref = parse_ref(text)
    except RefError as exc:
        raise RemoteError(str(exc)) from None
    stats = ReadStats()
    with new_client() as client:
        if isinstance(ref, UrlRef):
            return RemoteModel(read_url_model(ref, client, stats, _url_auth(ref.url)), stats)
        from lltui.sources import hf_hub

        tok = hf_hub.token()
        listing = hf_hub.list_repo(ref, tok)
        stats.requests += 0 if listing.cached else 1
        chosen = hf_hub.choose(listing, verb)
        files = hf_hub.remote_files(listing, chosen, tok)
        headers = [read_file_header(client, f, stats, head=f.etag is None) for f in files]
        return RemoteModel(join_headers(headers), stats)


def read_remote_model(text: str, verb: str = "fit") -> GgufModel:
    return read_remote(text, verb).model


def _url_auth(url: str) -> dict[str, str]:
    """The user's hub token for a URL on the hub's own host (the resolve links people copy);
    nothing for any other host."""
    hub_host = urlsplit(os.environ.get("HF_ENDPOINT", "").strip() or DEFAULT_ENDPOINT).netloc
    if urlsplit(url).netloc.lower() != hub_host.lower():
        return {}
    try:
        from lltui.sources import hf_hub

        tok = hf_hub.token()
    except RemoteError:  # huggingface_hub not installed: public files still read
        tok = None
    return {"Authorization": f"Bearer {tok}"} if tok else {}

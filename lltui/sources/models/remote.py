"""Read a remote model's header from a reference: ``hf:OWNER/REPO[:FILE|QUANT][@REV]`` through
the hub's listing, or an http(s) URL directly; every file by ranged requests, from the header
cache when it already holds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lltui.core.gguf.reader import GgufModel
from lltui.core.gguf.refs import HfRef, RefError, RepoModel, UrlRef, parse_ref
from lltui.sources.models.remote_gguf import (
    ReadStats,
    RemoteError,
    join_headers,
    net_deadline,
    new_client,
    read_file_header,
    read_url_model,
)

if TYPE_CHECKING:
    import httpx

    from lltui.sources.models.hf_hub import RepoListing

DEFAULT_ENDPOINT = "https://huggingface.co"


@dataclass(frozen=True)
class RemoteModel:
    model: GgufModel
    stats: ReadStats


def read_remote(text: str, verb: str = "fit", *, deadline_s: float | None = None) -> RemoteModel:
    """The model ``text`` names and what reading it cost, all within one deadline
    (``deadline_s``, else ``$LLTUI_NET_DEADLINE``, else DEFAULT_DEADLINE_S). RemoteError (one
    line) when it cannot be read; RepoChoice when it names a repository but not one model."""
    try:
        ref = parse_ref(text)
    except RefError as exc:
        raise RemoteError(str(exc)) from None
    stats = ReadStats(deadline=net_deadline(deadline_s))
    assert stats.deadline is not None
    with new_client(stats.deadline) as client:
        if isinstance(ref, UrlRef):
            return RemoteModel(read_url_model(ref, client, stats, _url_auth(ref.url)), stats)
        from lltui.sources.models import hf_hub

        tok = hf_hub.token()
        listing = hf_hub.list_repo(ref, tok, stats.deadline)
        stats.requests += 0 if listing.cached else 1
        chosen = hf_hub.choose(listing, verb)
        return RemoteModel(_read_one(client, listing, chosen, tok, stats), stats)


def _read_one(
    client: httpx.Client, listing: RepoListing, chosen: RepoModel, tok: str | None, stats: ReadStats
) -> GgufModel:
    from lltui.sources.models import hf_hub

    files = hf_hub.remote_files(listing, chosen, tok)
    headers = [read_file_header(client, f, stats, head=f.etag is None) for f in files]
    return join_headers(headers)


@dataclass(frozen=True)
class RepoQuant:
    """One model of a repository: its listing entry and its header, or why it was not read."""

    entry: RepoModel
    model: GgufModel | None
    error: str | None = None


@dataclass(frozen=True)
class RepoQuants:
    ref: HfRef
    commit: str | None
    quants: tuple[RepoQuant, ...]
    stats: ReadStats


def read_repo_quants(text: str, *, deadline_s: float | None = None) -> RepoQuants:
    """The header of every model of the repository ``text`` names (split models followed,
    projectors left out), by ranged reads through one client. A model that cannot be read
    carries its one-line error; the repository itself not read raises RemoteError."""
    from lltui.sources.models import hf_hub

    try:
        ref = parse_ref(text)
    except RefError as exc:
        raise RemoteError(str(exc)) from None
    if not isinstance(ref, HfRef):
        raise RemoteError(f"{text}: not a hf:OWNER/REPO reference")
    stats = ReadStats(deadline=net_deadline(deadline_s))
    assert stats.deadline is not None
    tok = hf_hub.token()
    listing = hf_hub.list_repo(ref, tok, stats.deadline)
    stats.requests += 0 if listing.cached else 1
    entries = [m for m in listing.models if m.kind == "model"]
    if not entries:
        raise RemoteError(f"{ref.text()}: no GGUF model in this repository")
    out = []
    with new_client(stats.deadline) as client:
        for m in entries:
            try:
                out.append(RepoQuant(m, _read_one(client, listing, m, tok, stats)))
            except RemoteError as exc:
                out.append(RepoQuant(m, None, str(exc)))
    return RepoQuants(ref, listing.commit, tuple(out), stats)


def read_remote_model(text: str, verb: str = "fit") -> GgufModel:
    return read_remote(text, verb).model


def _url_auth(url: str) -> dict[str, str]:
    """The user's hub token for a URL on the hub's own host (the resolve links people copy);
    nothing for any other host."""
    from lltui.sources.models.hf_hub import endpoint_host

    hub_host = endpoint_host(DEFAULT_ENDPOINT)
    if urlsplit(url).netloc.lower() != hub_host.lower():
        return {}
    try:
        from lltui.sources.models import hf_hub

        tok = hf_hub.token()
    except RemoteError:  # huggingface_hub not installed: public files still read
        tok = None
    return {"Authorization": f"Bearer {tok}"} if tok else {}

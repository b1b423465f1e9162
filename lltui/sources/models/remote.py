"""Read a remote model's header from a reference: ``hf:OWNER/REPO[:FILE|QUANT][@REV]`` through
the hub's listing, or an http(s) URL directly; every file by ranged requests, from the header
cache when it already holds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lltui.core.gguf.reader import GgufModel
from lltui.core.gguf.refs import (
    HfRef,
    RefError,
    RepoModel,
    UrlRef,
    best_model,
    hf_draft_file,
    hf_projector,
    hf_sidecar,
    hf_tag,
    parse_ref,
    select_file,
)
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
    projector: GgufModel | None = None  # what llama-server's -hf loads beside it (asked for)
    draft: GgufModel | None = None  # the draft sidecar -hf loads for --spec-type (asked for)


def read_remote(
    text: str,
    verb: str = "fit",
    *,
    deadline_s: float | None = None,
    projector: bool = False,
    draft_types: tuple[str, ...] = (),
) -> RemoteModel:
    """The model ``text`` names and what reading it cost, all within one deadline
    (``deadline_s``, else ``$LLTUI_NET_DEADLINE``, else DEFAULT_DEADLINE_S). RemoteError (one
    line) when it cannot be read; RepoChoice when it names a repository but not one model.
    ``projector``: for ``hf:`` also the multimodal projector ``-hf`` loads beside it;
    ``draft_types``: the ``--spec-type`` values whose sidecar -hf loads as the draft."""
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
        listing.refuse_preset()  # (first: llama-server looks no further, tag or file)
        chosen = hf_hub.choose(listing, verb)
        model = _read_one(client, listing, chosen, tok, stats)
        proj = _read_projector(client, listing, chosen, tok, stats) if projector else None
        tag = ref.selector if ref.selector and not ref.is_file else ""
        draft = _read_sidecar(client, listing, chosen, tok, stats, draft_types, tag)
        return RemoteModel(model, stats, proj, draft)


def _read_sidecar(
    client: httpx.Client,
    listing: RepoListing,
    chosen: RepoModel,
    tok: str | None,
    stats: ReadStats,
    spec_types: tuple[str, ...],
    tag: str,
    read: dict[str, GgufModel] | None = None,
) -> GgufModel | None:
    """The draft sidecar llama-server's -hf downloads and loads beside ``chosen`` for
    ``spec_types``, named by ``tag`` ("": by -hff), None: none asked for, or the repository
    ships none for them. ``read``: the sidecars read so far, by path (files share them)."""
    if not spec_types:
        return None
    paths = sorted(f.path for m in listing.models for f in m.files)
    pick = hf_sidecar(paths, chosen.path, tag, spec_types)
    return _read_beside(client, listing, pick, tok, stats, read, "{} as the draft")


def _read_beside(
    client: httpx.Client,
    listing: RepoListing,
    pick: str | None,
    tok: str | None,
    stats: ReadStats,
    read: dict[str, GgufModel] | None,
    said: str,
) -> GgufModel | None:
    """The file ``pick`` -hf loads beside the model, read once (``read``: those read so far,
    by path); RemoteError ("-hf also loads " + ``said`` of the error) where it cannot be."""
    entry = select_file(listing.models, pick) if pick is not None else None
    if entry is None:
        return None
    known = read if read is not None else {}
    if entry.path not in known:
        try:
            known[entry.path] = _read_one(client, listing, entry, tok, stats)
        except RemoteError as exc:
            raise RemoteError("-hf also loads " + said.format(exc), exc.code) from None
    return known[entry.path]


def _read_one(
    client: httpx.Client, listing: RepoListing, chosen: RepoModel, tok: str | None, stats: ReadStats
) -> GgufModel:
    from lltui.sources.models import hf_hub

    files = hf_hub.remote_files(listing, chosen, tok)
    headers = [read_file_header(client, f, stats, head=f.etag is None) for f in files]
    return join_headers(headers)


def _read_projector(
    client: httpx.Client,
    listing: RepoListing,
    chosen: RepoModel,
    tok: str | None,
    stats: ReadStats,
    read: dict[str, GgufModel] | None = None,
) -> GgufModel | None:
    """The projector llama-server's -hf downloads and loads beside ``chosen`` (None: the
    repository has none for it); RemoteError (naming it) when it cannot be read. ``read``:
    the projectors read so far, by path (a repository's files share one or two)."""
    paths = sorted(f.path for m in listing.models for f in m.files)
    pick = hf_projector(paths, chosen.path)
    return _read_beside(client, listing, pick, tok, stats, read, "{} (--no-mmproj leaves it out)")


def read_hf_draft(
    repo: str,
    hf_file: str | None,
    spec_types: tuple[str, ...],
    verb: str = "fit",
    *,
    deadline_s: float | None = None,
) -> GgufModel | None:
    """The draft model llama-server's ``-hfd OWNER/REPO[:QUANT]`` downloads and loads: the
    repository's file ``hf_file`` (``-md``'s value, which -hfd reads as a file of the
    repository; None when the repository has no such file: llama-server then loads -md as
    a path), else the sidecar or model :func:`~lltui.core.gguf.refs.hf_draft_file` picks.
    RemoteError (one line) when it cannot be read or the repository holds no draft (one
    with a preset.ini at its root: -hfd downloads only that, and llama-server fails)."""
    from lltui.core.gguf.refs import HF_PREFIX

    try:
        ref = parse_ref(HF_PREFIX + repo.strip())
    except RefError:
        ref = None
    if not isinstance(ref, HfRef) or ref.revision is not None:
        raise RemoteError(f"{repo}: expected OWNER/REPO[:QUANT]")
    stats = ReadStats(deadline=net_deadline(deadline_s))
    assert stats.deadline is not None
    from lltui.sources.models import hf_hub

    tok = hf_hub.token()
    listing = hf_hub.list_repo(HfRef(ref.repo), tok, stats.deadline)
    paths = sorted(f.path for m in listing.models for f in m.files)
    if listing.preset:  # -hfd downloads only the preset: -md's path, else no draft at all
        if hf_file is not None:
            return None
        raise RemoteError(
            f"{repo}: ships a preset.ini: llama-server's -hfd downloads only it and loads no "
            "draft, then fails ('failed to load draft model'); -md FILE or another -hfd "
            "names one"
        )
    if hf_file is not None:
        if hf_file not in paths:
            return None
        pick: str | None = hf_file
    else:
        pick = hf_draft_file(paths, ref.selector or "", spec_types)
    entry = select_file(listing.models, pick) if pick is not None else None
    if entry is None:
        named = f" of quantization {ref.selector}" if ref.selector else ""
        raise RemoteError(f"{repo}: no GGUF model{named} in this repository to draft with")
    with new_client(stats.deadline) as client:
        return _read_one(client, listing, entry, tok, stats)


def hf_repo_pick(text: str, *, deadline_s: float | None = None) -> str:
    """``hf:OWNER/REPO`` (no quantization, no file) as the file llama-server's ``-hf
    OWNER/REPO`` loads: Q4_K_M's, else Q8_0's, else the first model listed (common/
    download.cpp's find_best_model), as ``hf:OWNER/REPO:FILE``. RemoteError (one line) when
    the repository cannot be listed or holds no model."""
    from lltui.sources.models import hf_hub

    try:
        ref = parse_ref(text)
    except RefError as exc:
        raise RemoteError(str(exc)) from None
    if not isinstance(ref, HfRef) or ref.selector is not None:
        return text
    tok = hf_hub.token()
    listing = hf_hub.list_repo(ref, tok, net_deadline(deadline_s))
    listing.refuse_preset()
    pick = best_model(sorted(f.path for m in listing.models for f in m.files), "")
    if pick is None:
        raise RemoteError(f"{ref.text()}: no GGUF model in this repository")
    return ref.text(pick)


@dataclass(frozen=True)
class RepoQuant:
    """One model of a repository: its listing entry and its header, or why it was not read;
    with the projector and the draft sidecar ``-hf`` loads beside it (when asked for)."""

    entry: RepoModel
    model: GgufModel | None
    error: str | None = None
    projector: GgufModel | None = None
    draft: GgufModel | None = None


@dataclass(frozen=True)
class RepoQuants:
    ref: HfRef
    commit: str | None
    quants: tuple[RepoQuant, ...]
    stats: ReadStats


def read_repo_quants(
    text: str,
    *,
    deadline_s: float | None = None,
    projector: bool = False,
    draft_types: tuple[str, ...] = (),
) -> RepoQuants:
    """The header of every model of the repository ``text`` names (split models followed,
    projectors left out), by ranged reads through one client. A model that cannot be read
    carries its one-line error; the repository itself not read raises RemoteError.
    ``projector``: each with the projector ``-hf`` loads beside it; ``draft_types``: the
    ``--spec-type`` values whose sidecar -hf loads beside each, as its line names it."""
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
    listing.refuse_preset()  # -hf REPO:QUANT would run its preset's router, no file ranked
    entries = [m for m in listing.models if m.kind == "model"]
    if not entries:
        raise RemoteError(f"{ref.text()}: no GGUF model in this repository")
    out = []
    # each projector and sidecar read once, whichever files it goes beside
    projectors: dict[str, GgufModel] = {}
    sidecars: dict[str, GgufModel] = {}
    with new_client(stats.deadline) as client:
        for m in entries:
            try:
                model = _read_one(client, listing, m, tok, stats)
                proj = (
                    _read_projector(client, listing, m, tok, stats, projectors)
                    if projector
                    else None
                )
                tag = hf_tag(entries, m)
                draft = _read_sidecar(client, listing, m, tok, stats, draft_types, tag, sidecars)
                out.append(RepoQuant(m, model, projector=proj, draft=draft))
            except RemoteError as exc:
                out.append(RepoQuant(m, None, str(exc)))
    return RepoQuants(ref, listing.commit, tuple(out), stats)


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

"""Hugging Face repositories through huggingface_hub: the endpoint (``HF_ENDPOINT``), the user's
token (``HF_TOKEN`` or the token file ``hf auth login`` writes), revisions, the listing of a
repository's files and the hub's own errors, each as one line. Headers themselves are read
by ranges (lltui.sources.models.remote_gguf). huggingface_hub is imported only when an
``hf:`` reference is used (``pip install 'lltui[hf]'``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lltui.core.gguf.refs import (
    HfRef,
    RepoFile,
    RepoModel,
    choices_line,
    repo_models,
    select_file,
    tag_model,
)
from lltui.core.text import error_text
from lltui.sources.models.remote_gguf import (
    DEADLINE_ENV,
    TIMEOUT_S,
    RemoteError,
    RemoteFile,
    cache_dir,
    write_atomic,
)
from lltui.sources.net import Deadline

INSTALL_HINT = "hf: references need huggingface_hub: pip install 'lltui[hf]'"
_COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")
LISTING_FORMAT = 1


@dataclass(frozen=True)
class RepoListing:
    """A repository at one revision: its GGUF models, and whether it is gated or private."""

    ref: HfRef
    commit: str | None  # the commit the revision resolved to
    gated: bool
    private: bool
    models: tuple[RepoModel, ...]
    cached: bool = False  # read from the cache (a commit's files never change): no request
    preset: bool = False  # a preset.ini at its root: -hf downloads only it (a router's models)

    def refuse_preset(self) -> None:
        """RemoteError where the repository holds a ``preset.ini`` at its root: llama-server's
        ``-hf`` then downloads only that file and serves the models it names as a router
        (common/download.cpp), no model of the repository as such."""
        if self.preset:
            raise RemoteError(
                f"{HfRef(self.ref.repo).text()}: ships a preset.ini: llama-server's -hf "
                "downloads only it and serves its models as a router, none of this "
                "repository's files; plan them with lltui fit --models-preset preset.ini"
            )


class RepoChoice(RemoteError):
    """A reference that names a repository but no model in it: the listing to choose from."""

    def __init__(self, message: str, listing: RepoListing) -> None:
        super().__init__(message)
        self.listing = listing


def _hub() -> Any:
    _endpoint_env()  # huggingface_hub reads it at import, and fails on one that is no URL
    try:
        import huggingface_hub
    except ImportError:
        raise RemoteError(INSTALL_HINT) from None
    return huggingface_hub


def _endpoint_env() -> str:
    """``HF_ENDPOINT`` as set (empty: unset); RemoteError (bad input) where it is no URL."""
    env = os.environ.get("HF_ENDPOINT", "").strip()
    if env:
        from urllib.parse import urlsplit

        from lltui.core.gguf.refs import display_url

        shown = display_url(env)  # a user and password it may carry are not printed
        try:
            parts = urlsplit(env)
            parts.port  # noqa: B018 (a port that is no number raises here)
        except ValueError as exc:
            raise RemoteError(f"HF_ENDPOINT={shown!r} is not a URL ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RemoteError(f"HF_ENDPOINT={shown!r} is not an http(s) URL")
    return env


def endpoint_host(default: str) -> str:
    """The hub's host (``HF_ENDPOINT``'s, else ``default``'s), without importing
    huggingface_hub; RemoteError where HF_ENDPOINT is no URL."""
    from urllib.parse import urlsplit

    return urlsplit(_endpoint_env() or default).netloc


def endpoint() -> str:
    """The hub's address: ``HF_ENDPOINT`` as it is now, else huggingface_hub's default."""
    env = _endpoint_env()
    if env:
        return env.rstrip("/")
    return str(_hub().constants.ENDPOINT).rstrip("/")


def token() -> str | None:
    """The user's token as huggingface_hub finds it (HF_TOKEN, then the token file), unless
    HF_HUB_DISABLE_IMPLICIT_TOKEN is set; never printed."""
    hub = _hub()
    if os.environ.get("HF_HUB_DISABLE_IMPLICIT_TOKEN", "").strip().lower() in ("1", "true", "yes"):
        return None
    try:
        tok = hub.get_token()
    except Exception:  # an OIDC or OAuth refresh that fails: go on without a token
        return None
    return tok if isinstance(tok, str) and tok else None


def scrub(text: str, tok: str | None) -> str:
    """``text`` with the token blanked out, should a message ever carry it."""
    return text.replace(tok, "***") if tok else text


def hub_error(ref_text: str, exc: Exception, tok: str | None) -> RemoteError:
    """One line for an error huggingface_hub raised."""
    from huggingface_hub import errors

    if isinstance(exc, errors.GatedRepoError):
        msg = (
            "a gated repository: accept its conditions on the model page and set HF_TOKEN"
            if tok is None
            else "a gated repository and this token has no access: accept its conditions"
        )
    elif isinstance(exc, errors.RepositoryNotFoundError):
        msg = "no such repository" + (
            " (or it is private or gated: set HF_TOKEN)"
            if tok is None
            else " that this token can see"
        )
    elif isinstance(exc, errors.RevisionNotFoundError):
        msg = "no such revision"
    elif isinstance(exc, errors.HfHubHTTPError):
        code = getattr(getattr(exc, "response", None), "status_code", None)
        msg = f"the hub answered HTTP {code}" if code else "the hub refused the request"
        if isinstance(code, int) and code >= 500:  # the server failed, not the reference
            return RemoteError(scrub(f"{ref_text}: {msg}", tok), 1)
    elif isinstance(exc, errors.OfflineModeIsEnabled):
        msg = "HF_HUB_OFFLINE is set: the hub cannot be asked"
    else:
        msg = f"cannot reach {endpoint()} ({error_text(exc)})"
        return RemoteError(scrub(f"{ref_text}: {msg}", tok), 1)
    return RemoteError(scrub(f"{ref_text}: {msg}", tok))


def list_repo(ref: HfRef, tok: str | None, deadline: Deadline | None = None) -> RepoListing:
    """The repository's files at the revision asked for: one metadata request, or none for
    a commit (40 hex digits) listed before. The request is huggingface_hub's, on its own
    client: it runs in a thread of its own, waited for until ``deadline`` (the deadline of
    the whole read; a server that drips its answer is left behind then, not waited for)."""
    hub = _hub()
    immutable = ref.revision is not None and _COMMIT_RE.match(ref.revision) is not None
    if immutable:
        kept = _listing_load(ref)
        if kept is not None:
            return kept
    api = hub.HfApi(endpoint=endpoint(), library_name="lltui")
    wait = TIMEOUT_S if deadline is None else min(TIMEOUT_S, max(deadline.left(), 0.001))

    def ask() -> Any:
        return api.model_info(
            ref.repo, revision=ref.revision, files_metadata=True, token=tok or False, timeout=wait
        )

    try:
        info = _within(ask, deadline)
    except _Late:
        assert deadline is not None
        raise RemoteError(
            f"{ref.text()}: the hub took longer than {deadline.seconds:g} s to list the "
            f"repository (${DEADLINE_ENV} sets the deadline)",
            1,
        ) from None
    except Exception as exc:
        raise hub_error(ref.text(), exc, tok) from None
    files = []
    for s in info.siblings or ():
        lfs = getattr(s, "lfs", None)
        etag = (getattr(lfs, "sha256", None) if lfs is not None else None) or getattr(
            s, "blob_id", None
        )
        size = getattr(lfs, "size", None) if lfs is not None else None
        files.append(RepoFile(path=s.rfilename, size=size or s.size, etag=etag))
    gated, private = bool(info.gated), bool(info.private)
    if immutable and info.sha == ref.revision:
        _listing_store(ref, gated, private, files)
    return RepoListing(
        ref=ref,
        commit=info.sha,
        gated=gated,
        private=private,
        models=tuple(repo_models(files)),
        preset=_has_preset(files),
    )


def _has_preset(files: list[RepoFile]) -> bool:
    return any(f.path == "preset.ini" for f in files)


class _Late(Exception):
    """The deadline passed before the answer came."""


def _within(call: Callable[[], Any], deadline: Deadline | None) -> Any:
    """``call()`` in a daemon thread, its result or exception; _Late when ``deadline``
    passes first (the thread is left to end on its own timeout)."""
    if deadline is None:
        return call()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed to the caller
            box.append((False, exc))

    thread = threading.Thread(target=run, name="lltui-hub-listing", daemon=True)
    thread.start()
    thread.join(max(deadline.left(), 0.0))
    if not box:
        raise _Late
    ok, value = box[0]
    if not ok:
        raise value
    return value


def _listing_path(ref: HfRef) -> Any:
    key = hashlib.sha256(f"{endpoint()}\n{ref.repo}\n{ref.revision}".encode()).hexdigest()
    return cache_dir() / "listings" / f"{key[:40]}.json"


def _listing_load(ref: HfRef) -> RepoListing | None:
    try:
        data = json.loads(_listing_path(ref).read_text(encoding="utf-8"))
        if data.get("format") != LISTING_FORMAT or data.get("repo") != ref.repo:
            return None
        files = [
            RepoFile(str(f["path"]), f.get("size"), f.get("etag")) for f in data.get("files", [])
        ]
        return RepoListing(
            ref=ref,
            commit=ref.revision,
            gated=bool(data.get("gated")),
            private=bool(data.get("private")),
            models=tuple(repo_models(files)),
            cached=True,
            preset=_has_preset(files),
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _listing_store(ref: HfRef, gated: bool, private: bool, files: list[RepoFile]) -> None:
    data = {
        "format": LISTING_FORMAT,
        "repo": ref.repo,
        "commit": ref.revision,
        "gated": gated,
        "private": private,
        "files": [{"path": f.path, "size": f.size, "etag": f.etag} for f in files],
    }
    path = _listing_path(ref)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data).encode())
    except OSError:
        return


def choose(listing: RepoListing, verb: str = "fit") -> RepoModel:
    """The model the reference names: a file, or the model llama-server's -hf takes for the
    tag (:func:`~lltui.core.gguf.refs.tag_model`); RepoChoice (with the listing) when it
    names none."""
    ref = listing.ref
    base = HfRef(ref.repo, None, ref.revision).text()
    models = listing.models
    if not any(m.kind == "model" for m in models):
        raise RemoteError(f"{base}: no GGUF file in this repository")
    if ref.selector is None:
        raise RepoChoice(
            f"{base}: a repository; name a quantization or file "
            f"({choices_line(models)}), e.g. {base.split('@')[0]}:{_example(models)}",
            listing,
        )
    if ref.is_file:
        found = select_file(models, ref.selector)
        if found is None:
            raise RepoChoice(
                f"{ref.text()}: no such file in the repository ({choices_line(models)})",
                listing,
            )
        return found
    found = tag_model(models, ref.selector)
    if found is None:
        raise RepoChoice(
            f"{ref.text()}: no file of quantization {ref.selector} ({choices_line(models)})",
            listing,
        )
    return found


def _example(models: tuple[RepoModel, ...]) -> str:
    first = next(m for m in models if m.kind == "model")
    return first.quant or first.path


def remote_files(listing: RepoListing, model: RepoModel, tok: str | None) -> list[RemoteFile]:
    """Where to read each file of ``model``: the resolve URL at the listed commit (so every
    part comes from one revision), named by the reference with the file in it."""
    hub = _hub()
    ref = listing.ref
    rev = listing.commit or ref.revision or "main"
    auth = {"Authorization": f"Bearer {tok}"} if tok else {}
    hint = ""
    if listing.gated:
        hint = (
            "a gated repository: accept its conditions on the model page and set HF_TOKEN"
            if tok is None
            else "a gated repository and this token has no access: accept its conditions"
        )
    elif tok is None:
        hint = "private? set HF_TOKEN"
    if model.missing:
        gone = ", ".join(model.missing[:4]) + (" ..." if len(model.missing) > 4 else "")
        raise RemoteError(f"{ref.text(model.path)}: parts of this split model are missing: {gone}")
    out = []
    for f in model.files:
        url = hub.hf_hub_url(ref.repo, f.path, revision=rev, endpoint=endpoint())
        out.append(
            RemoteFile(
                url=url,
                name=ref.text(f.path),
                etag=f.etag,
                size=f.size,
                auth=auth,
                gated_hint=hint,
                cache_key=f"{endpoint()}/{ref.repo}/{f.path}",
            )
        )
    return out

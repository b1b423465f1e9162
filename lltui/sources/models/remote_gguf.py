"""GGUF headers read over HTTP: ranged requests that grow until the header parses, never the
whole file, and a cache of headers under the user cache directory keyed by URL and ETag.

A server that ignores ``Range`` (200 with the whole body) is read as a stream up to the
header's end and at most MAX_HEADER_BYTES; the connection is dropped after that.

Every read of one operation (a model's header, all its parts, a repository's models) runs
under one deadline (:mod:`lltui.sources.net`): DEFAULT_DEADLINE_S, or ``$LLTUI_NET_DEADLINE``
seconds. A server that sends a byte every few seconds ends there, not never.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from lltui import paths
from lltui.core.gguf.reader import (
    GgufError,
    GgufFile,
    GgufIncomplete,
    GgufModel,
    check_sizes,
    join_splits,
    parse_gguf_header,
)
from lltui.core.gguf.refs import UrlRef, display_url, split_urls
from lltui.core.gguf.values import as_int
from lltui.core.text import error_text, int_or_none
from lltui.core.units import MIB, fmt_bytes
from lltui.sources.net import Deadline, http_client

FIRST_REQUEST_BYTES = 2 * MIB  # a 150k-token vocabulary header is 6-10 MiB
MAX_HEADER_BYTES = 64 * MIB  # no model's header is larger; the most read from one file
TIMEOUT_S = 30.0  # one socket call (connect, a read)
DEFAULT_DEADLINE_S = 180.0  # a whole operation: every request and every byte of it
DEADLINE_ENV = "LLTUI_NET_DEADLINE"
CACHE_FORMAT = 1


class RemoteError(ValueError):
    """A remote model that cannot be read; ``str()`` is one line that names it. ``code``: 2
    for a reference that names nothing readable, 1 when the network or server failed."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def net_deadline(seconds: float | None = None) -> Deadline:
    """The deadline of one remote read: ``seconds``, else ``$LLTUI_NET_DEADLINE``, else
    DEFAULT_DEADLINE_S. RemoteError (bad input) for a variable that is not a number > 0."""
    if seconds is None:
        text = os.environ.get(DEADLINE_ENV, "").strip()
        seconds = DEFAULT_DEADLINE_S
        if text:
            try:
                seconds = float(text)
            except ValueError:
                raise RemoteError(f"{DEADLINE_ENV}={text!r}: not a number of seconds") from None
    if not 0 < seconds < 1e9:
        raise RemoteError(f"{DEADLINE_ENV}: {seconds:g} s is not a deadline (give seconds > 0)")
    return Deadline(seconds)


@dataclass
class ReadStats:
    """What reading remote headers cost (HTTP requests made, body bytes read, headers the
    cache held), and the deadline the whole read runs under."""

    requests: int = 0
    bytes_read: int = 0
    cache_hits: int = 0
    deadline: Deadline | None = field(default=None, repr=False)


@dataclass(frozen=True)
class RemoteFile:
    """One file to read: where (``url``), what to call it (``name``), its ETag and size when
    already known (from a repository listing), and the headers to send (``auth``: never
    printed)."""

    url: str
    name: str
    etag: str | None = None
    size: int | None = None
    auth: Mapping[str, str] = field(default_factory=dict, repr=False)
    gated_hint: str = ""  # said when the server refuses (401/403)
    cache_key: str | None = None  # what the cache knows it by with its ETag (default: url)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    return paths.cache_dir(env) / "gguf-headers"


def new_client(deadline: Deadline) -> httpx.Client:
    """A client for one operation: every request it makes ends by ``deadline``."""
    return http_client(
        deadline,
        trust_env=True,  # HTTPS_PROXY and the like, as before
        follow_redirects=True,
        timeout=httpx.Timeout(TIMEOUT_S, connect=10.0),
        headers={"Accept-Encoding": "identity", "User-Agent": "lltui"},
    )


# -- errors --------------------------------------------------------------------------------


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.netloc.rsplit("@", 1)[-1] or display_url(url)


def _status_error(f: RemoteFile, resp: httpx.Response) -> RemoteError:
    code = resp.status_code
    # the server that answered: after a redirect, not the one first asked
    answered = _host(str(resp.url))
    moved = f" from {answered}, redirected from {_host(f.url)}" if answered != _host(f.url) else ""
    if code in (401, 403):
        hint = f.gated_hint or (
            "set HF_TOKEN for a Hugging Face file" if "Authorization" not in f.auth else ""
        )
        return RemoteError(
            f"{f.name}: access denied (HTTP {code}{moved})" + (f": {hint}" if hint else "")
        )
    if code == 404:
        return RemoteError(f"{f.name}: not found (HTTP 404{moved})")
    if code == 416:
        return RemoteError(f"{f.name}: the server refused the byte range (HTTP 416{moved})")
    reason = resp.reason_phrase or "error"
    where = f"{answered}, redirected from {_host(f.url)}" if moved else answered
    return RemoteError(f"{f.name}: HTTP {code} {reason} from {where}", 1)


def _failed_url(exc: httpx.HTTPError) -> str | None:
    """The URL of the request that failed: after a redirect, where it was sent, not the
    URL first asked for."""
    try:
        return str(exc.request.url)
    except RuntimeError:  # an error raised before any request was made
        return None


def _transport_error(
    f: RemoteFile, exc: httpx.HTTPError, deadline: Deadline | None = None
) -> RemoteError:
    if isinstance(exc, httpx.TimeoutException) and deadline is not None and deadline.expired:
        what = (
            f"took longer than {deadline.seconds:g} s, the deadline for the whole read "
            f"(${DEADLINE_ENV} sets it)"
        )
    elif isinstance(exc, httpx.TimeoutException):
        what = f"timed out after {TIMEOUT_S:.0f} s"
    elif isinstance(exc, httpx.ConnectError):
        what = "cannot connect"
    elif isinstance(exc, httpx.TooManyRedirects):
        what = "too many redirects"
    else:
        what = error_text(exc)
    where = _host(f.url)
    failed = _failed_url(exc)
    if failed is not None and _host(failed) != where:
        where = f"{_host(failed)}, redirected from {where}"
    return RemoteError(f"{f.name}: {what} ({where})", 1)


# -- ranged reads --------------------------------------------------------------------------


class _Reader:
    """The first bytes of one remote file, grown on request: one ranged GET per growth, or
    one streamed response when the server ignores Range."""

    def __init__(self, client: httpx.Client, f: RemoteFile, stats: ReadStats) -> None:
        self.client = client
        self.f = f
        self.stats = stats
        self.buf = bytearray()
        self.total: int | None = f.size
        self.etag: str | None = f.etag
        self._stream: httpx.Response | None = None
        self._chunks: Iterator[bytes] | None = None

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    def grow(self, want: int) -> None:
        """Have at least ``want`` bytes (fewer at the end of the file)."""
        if self.total is not None:
            want = min(want, self.total)
        if len(self.buf) >= want:
            return
        if self._chunks is not None:
            self._read_stream(want)
            return
        start = len(self.buf)
        req = self.client.build_request(
            "GET", self.f.url, headers={**self.f.auth, "Range": f"bytes={start}-{want - 1}"}
        )
        try:
            resp = self.client.send(req, stream=True)
        except httpx.HTTPError as exc:
            raise _transport_error(self.f, exc, self.stats.deadline) from None
        self.stats.requests += 1
        if resp.status_code == 206:
            try:
                self._take_partial(resp, start, want)
            finally:
                resp.close()
            return
        if resp.status_code == 200 and start == 0:
            self._stream = resp
            self._chunks = resp.iter_bytes()
            length = int_or_none(resp.headers.get("Content-Length"))
            if length is not None:
                self.total = length
            self.etag = self.etag or _etag(resp.headers)
            self._read_stream(want)
            return
        resp.close()
        if resp.status_code == 200:
            raise RemoteError(f"{self.f.name}: the server stopped honouring byte ranges", 1)
        raise _status_error(self.f, resp)

    def _take_partial(self, resp: httpx.Response, start: int, want: int) -> None:
        first, _last, total = _content_range(resp.headers.get("Content-Range", ""))
        if first is None:
            raise RemoteError(f"{self.f.name}: a partial answer without a Content-Range", 1)
        if first != start:
            raise RemoteError(
                f"{self.f.name}: the server sent bytes from {first}, not the {start} asked for",
                1,  # (the server's fault, not the reference's)
            )
        if total is not None:
            self.total = total
        self.etag = self.etag or _etag(resp.headers)
        limit = want - start
        got = 0
        try:
            # each read as it arrives: a chunk size would wait for a whole chunk
            for chunk in resp.iter_bytes():
                take = chunk[: limit - got]
                self.buf += take
                got += len(take)
                self.stats.bytes_read += len(take)
                if got >= limit:
                    break
        except httpx.HTTPError as exc:
            raise _transport_error(self.f, exc, self.stats.deadline) from None
        if got == 0:
            raise RemoteError(f"{self.f.name}: the server sent an empty byte range")

    @property
    def streaming(self) -> bool:
        return self._chunks is not None

    def stop_stream(self) -> None:
        self.close()
        raise RemoteError(
            f"{self.f.name}: the server ignores byte ranges (HTTP 200, the whole "
            f"{fmt_bytes(self.total)} file); stopped reading after "
            f"{fmt_bytes(len(self.buf))} without the end of the header"
        )

    def _read_stream(self, want: int) -> None:
        assert self._chunks is not None
        if want > MAX_HEADER_BYTES:
            self.close()
            raise RemoteError(
                f"{self.f.name}: the server ignores byte ranges (HTTP 200, the whole "
                f"{fmt_bytes(self.total)} file); stopped reading after "
                f"{fmt_bytes(len(self.buf))} without the end of the header"
            )
        try:
            while len(self.buf) < want:
                chunk = next(self._chunks, b"")
                if not chunk:
                    self.total = len(self.buf)  # the body ended: that is the file
                    return
                self.buf += chunk
                self.stats.bytes_read += len(chunk)
        except httpx.HTTPError as exc:
            raise _transport_error(self.f, exc, self.stats.deadline) from None


def _content_range(v: str) -> tuple[int | None, int | None, int | None]:
    """``bytes 0-99/1234`` -> (0, 99, 1234); ``*`` total -> None."""
    try:
        unit, _, rng = v.strip().partition(" ")
        span, _, total = rng.partition("/")
        a, _, b = span.partition("-")
        if unit.lower() != "bytes":
            return None, None, None
        return int(a), int(b), (None if total == "*" else int(total))
    except ValueError:
        return None, None, None


def _etag(headers: Mapping[str, str]) -> str | None:
    tag = headers.get("X-Linked-Etag") or headers.get("ETag")
    if not tag:
        return None
    tag = tag.strip()
    if tag.startswith("W/"):
        tag = tag[2:]
    return tag.strip('"') or None


def _next_want(buf: bytes | bytearray, needed: int) -> int:
    """How many bytes to have next: what the parser asked for, plus room for the tensor table
    (its size is not known before it is reached), and at least twice what is at hand, so
    that any header takes a few requests."""
    n_tensors = struct.unpack_from("<Q", buf, 8)[0] if len(buf) >= 24 else 0
    table = min(n_tensors, 1 << 20) * 128
    return max(needed + table + 64 * 1024, len(buf) * 2)


def read_header(
    client: httpx.Client, f: RemoteFile, stats: ReadStats
) -> tuple[GgufFile, bytes, str | None]:
    """The header of one remote file: (parsed header, its bytes, the file's ETag)."""
    reader = _Reader(client, f, stats)
    try:
        want = FIRST_REQUEST_BYTES
        while True:
            reader.grow(want)
            if reader.total is None:
                raise RemoteError(f"{f.name}: the server did not say how large the file is", 1)
            try:
                header = parse_gguf_header(reader.buf, reader.total, f.name)
            except GgufIncomplete as inc:
                if len(reader.buf) >= reader.total:  # cannot happen: the parser saw it all
                    raise RemoteError(f"{f.name}: the header is cut short") from None
                if len(reader.buf) >= MAX_HEADER_BYTES:
                    if reader.streaming:
                        reader.stop_stream()
                    raise RemoteError(
                        f"{f.name}: the header is larger than {fmt_bytes(MAX_HEADER_BYTES)}; "
                        "not a model lltui reads remotely (download it)"
                    ) from None
                want = min(_next_want(reader.buf, inc.needed), MAX_HEADER_BYTES)
                if reader.streaming and len(reader.buf) >= want:
                    want = len(reader.buf) + 1
                continue
            except GgufError as exc:
                raise RemoteError(str(exc)) from None
            return header, bytes(reader.buf[: header.header_nbytes]), reader.etag
    finally:
        reader.close()


# -- cache ---------------------------------------------------------------------------------


def _cache_key(url: str, etag: str) -> str:
    return hashlib.sha256(f"{url}\n{etag}".encode()).hexdigest()[:40]


def _cache_load(url: str, etag: str | None, name: str) -> GgufFile | None:
    if not etag:
        return None
    base = cache_dir() / _cache_key(url, etag)
    try:
        meta = json.loads(base.with_suffix(".json").read_text(encoding="utf-8"))
        if (
            not isinstance(meta, dict)
            or meta.get("format") != CACHE_FORMAT
            or meta.get("url") != display_url(url)
            or meta.get("etag") != etag
        ):
            return None
        size = meta.get("file_size")
        gguf_path = base.with_suffix(".gguf")
        data = gguf_path.read_bytes()
        if not isinstance(size, int) or len(data) != meta.get("header_bytes"):
            return None
        return parse_gguf_header(data, size, name, array_file=str(gguf_path))
    except (OSError, ValueError, GgufIncomplete):
        return None


def _cache_store(url: str, etag: str | None, data: bytes, file_size: int) -> str | None:
    """Keep a header; the path of the copy (long arrays are read from it), or None."""
    if not etag:
        return _scratch_copy(data)
    base = cache_dir() / _cache_key(url, etag)
    meta = {
        "format": CACHE_FORMAT,
        "url": display_url(url),
        "etag": etag,
        "file_size": file_size,
        "header_bytes": len(data),
    }
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        gguf_path = base.with_suffix(".gguf")
        write_atomic(gguf_path, data)
        write_atomic(base.with_suffix(".json"), json.dumps(meta).encode())
        return str(gguf_path)
    except OSError:
        return _scratch_copy(data)


def write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_SCRATCH: list[tempfile.TemporaryDirectory[str]] = []


def _scratch_copy(data: bytes) -> str | None:
    """A header copy for this process only (no cache directory, or no ETag to key it)."""
    try:
        if not _SCRATCH:
            _SCRATCH.append(tempfile.TemporaryDirectory(prefix="lltui-gguf-"))
        fd, path = tempfile.mkstemp(dir=_SCRATCH[0].name, suffix=".gguf")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return path
    except OSError:
        return None


def read_file_header(
    client: httpx.Client, f: RemoteFile, stats: ReadStats, head: bool = True
) -> GgufFile:
    """One remote file's header: from the cache when its ETag is known (from a listing, or
    a HEAD request when ``head``) and a header for it is kept; else read by ranges, then kept."""
    etag = f.etag
    if etag is None and head:
        etag = _head_etag(client, f, stats)
    key = f.cache_key or f.url
    cached = _cache_load(key, etag, f.name)
    if cached is not None:
        stats.cache_hits += 1
        return cached
    header, data, etag_seen = read_header(client, f, stats)
    copy = _cache_store(key, etag or etag_seen, data, header.file_size)
    if copy is None:
        return header
    try:
        return parse_gguf_header(data, header.file_size, f.name, array_file=copy)
    except (GgufError, GgufIncomplete):
        return header


def _head_etag(client: httpx.Client, f: RemoteFile, stats: ReadStats) -> str | None:
    """The ETag a HEAD request answers; None when the server gives none or refuses HEAD (a
    URL signed for GET only): the ranged GET that follows says what is wrong, if anything."""
    try:
        resp = client.head(f.url, headers=dict(f.auth))
    except httpx.HTTPError as exc:
        raise _transport_error(f, exc, stats.deadline) from None
    stats.requests += 1
    if resp.status_code >= 400:
        return None
    return _etag(resp.headers)


def join_headers(headers: Sequence[GgufFile]) -> GgufModel:
    """One file's header, or a split model's in order, as the model (checked as a local one)."""
    try:
        check_sizes(headers[0])
        if len(headers) == 1:
            count = as_int(headers[0].metadata.get("split.count"))
            if count is not None and count > 1:
                raise GgufError(f"{headers[0].path}: split model of {count} files")
            return GgufModel(files=(headers[0],), tensors=headers[0].tensors)
        return join_splits(list(headers))
    except GgufError as exc:
        raise RemoteError(str(exc)) from None


def read_url_model(
    ref: UrlRef, client: httpx.Client, stats: ReadStats, auth: Mapping[str, str] | None = None
) -> GgufModel:
    """The model at a URL; a split model's other parts are found by their names."""
    first = RemoteFile(url=ref.url, name=display_url(ref.url), auth=dict(auth or {}))
    head = read_file_header(client, first, stats)
    count = as_int(head.metadata.get("split.count"))
    if count is None or count <= 1:
        return join_headers([head])
    urls = split_urls(ref.url, count)
    if urls is None:
        raise RemoteError(
            f"{display_url(ref.url)}: split model ({count} files) but the name does not end in "
            f"-NNNNN-of-{count:05d}.gguf"
        )
    rest = [
        RemoteFile(url=u, name=display_url(u), auth=dict(auth or {})) for u in urls if u != ref.url
    ]
    if len(rest) != count - 1:
        raise RemoteError(f"{first.name}: split model whose parts cannot be named from its URL")
    # parts are named in order; the one given may be any of them
    by_url = {f.url: read_file_header(client, f, stats) for f in rest} | {ref.url: head}
    return join_headers([by_url[u] for u in urls])

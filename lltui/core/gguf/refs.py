"""Model references that name a remote GGUF, and a repository's files as the models they hold.

``hf:OWNER/REPO[:FILE|QUANT][@REVISION]`` names a Hugging Face repository (and in it one file,
or the file(s) of one quantization, matched as llama.cpp's ``-hf`` matches a tag), and an
``https://`` (or ``http://``) URL names one file. Pure: nothing here touches the network.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from lltui.core.gguf.reader import SPLIT_NAME_RE
from lltui.core.gguf.ref_kind import HF_PREFIX, display_url, is_remote_ref
from lltui.core.llama.limits import first_split_part
from lltui.core.text import one_line
from lltui.core.units import fmt_bytes

_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\Z")
# the quantization a file name carries: Q4_K_M, IQ2_XXS, UD-Q4_K_XL, F16, BF16, MXFP4_MOE ...
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|TQ\d_\d|BF16|F16|F32|MXFP4(?:_MOE)?))"
    r"(?![A-Za-z0-9])",
    re.IGNORECASE,
)


class RefError(ValueError):
    """A reference that cannot name a remote model; ``str()`` is one line."""


@dataclass(frozen=True)
class HfRef:
    """``hf:OWNER/REPO[:FILE|QUANT][@REVISION]``."""

    repo: str
    selector: str | None = None  # a file path in the repository, or a quantization tag
    revision: str | None = None

    @property
    def is_file(self) -> bool:
        return self.selector is not None and self.selector.lower().endswith(".gguf")

    def text(self, selector: str | None = None) -> str:
        """The reference as written, with ``selector`` (a file) in place of the one given."""
        sel = self.selector if selector is None else selector
        out = HF_PREFIX + self.repo + (f":{sel}" if sel else "")
        return out + (f"@{self.revision}" if self.revision else "")


@dataclass(frozen=True)
class UrlRef:
    url: str


def llama_model_flags(ref: str) -> list[tuple[str, str]]:
    """How llama-server is told to load ``ref``: ``-m PATH`` (a split model by its first
    part, the only one it loads from), ``-hf OWNER/REPO[:QUANT]`` (with ``-hff FILE`` for a
    file), or ``-mu URL``. RefError for a reference it cannot download (a revision: it
    takes a repository's main branch)."""
    if not is_remote_ref(ref):
        return [("-m", first_split_part(ref))]
    parsed = parse_ref(ref)
    if not isinstance(parsed, HfRef):
        return [("-mu", ref.strip())]
    if parsed.revision is not None:
        raise RefError(f"{ref}: llama-server downloads a repository's main branch, no @rev")
    if parsed.selector is None or not parsed.is_file:
        tag = f":{parsed.selector}" if parsed.selector else ""
        return [("-hf", parsed.repo + tag)]
    return [("-hf", parsed.repo), ("-hff", parsed.selector)]


def parse_ref(text: str) -> HfRef | UrlRef:
    """The reference ``text`` names; RefError for one that is not well formed."""
    t = text.strip()
    if t.lower().startswith(("https://", "http://")):
        try:
            parts = urlsplit(t)
            parts.port  # noqa: B018 (a port that is no number raises here, not at the request)
        except ValueError as exc:
            raise RefError(f"{display_url(t)}: not a URL ({exc})") from None
        if not parts.netloc:
            raise RefError(f"{t}: a URL needs a host")
        return UrlRef(t)
    if not t.startswith(HF_PREFIX):
        raise RefError(f"{t}: not a remote reference (hf:OWNER/REPO or an https URL)")
    rest = t[len(HF_PREFIX) :]
    revision: str | None = None
    if "@" in rest:
        rest, revision = rest.rsplit("@", 1)
        if not revision:
            raise RefError(f"{t}: empty revision after @")
    repo, _, selector = rest.partition(":")
    if not _REPO_RE.match(repo):
        raise RefError(f"{t}: expected hf:OWNER/REPO[:FILE|QUANT][@REVISION]")
    if ":" in rest and not selector:
        raise RefError(f"{t}: empty file or quantization after ':'")
    return HfRef(repo=repo, selector=selector or None, revision=revision)


def quant_of(name: str) -> str | None:
    """The quantization a file name carries (the last one named; else its folder's), upper
    case; None if none."""
    found = _QUANT_RE.findall(name.rsplit("/", 1)[-1]) or _QUANT_RE.findall(name)
    return found[-1].upper() if found else None


def is_mmproj(name: str) -> bool:
    """A multimodal projector file (llama.cpp's --mmproj), not a model."""
    return "mmproj" in name.rsplit("/", 1)[-1].lower()


_SPLIT_STEM_RE = re.compile(r"^(.+)-([0-9]{5})-of-[0-9]{5}\Z", re.IGNORECASE)
_TAG_RE = re.compile(r"[-.]([A-Za-z0-9_]+)\Z")


def _quant_bits(path: str) -> int:
    """The bits of the quantization a file name ends in (Q4_K_M 4, F16 16, none 0), as
    common/download.cpp's extract_quant_bits reads them."""
    if not path.endswith(".gguf"):
        return 0
    stem = path[: -len(".gguf")]
    m = _SPLIT_STEM_RE.match(stem)
    tag = _TAG_RE.search(m.group(1) if m else stem)
    return _bits(tag.group(1) if tag else "")


def _bits(tag: str) -> int:
    digits = re.search(r"\d+", tag)
    return int(digits.group()) if digits else 0


def _first_part(path: str) -> bool:
    """Not a split model's later part (common/download.cpp's get_gguf_split_info index)."""
    m = _SPLIT_STEM_RE.match(path[: -len(".gguf")])
    return m is None or int(m.group(2)) == 1


def _best_sibling(paths: Sequence[str], model: str, keyword: str, tag: str = "") -> str | None:
    """common/download.cpp's find_best_sibling: a ``.gguf`` whose path holds ``keyword``, in
    the folder of ``model`` (a path, or "" for none) or one above it: the deepest such
    folder, then one that names ``tag`` exactly, then the quantization nearest the tag's
    bits (else the model's), then the first listed; None if none."""
    model_dirs = model.split("/")[:-1]
    bits = _bits(tag.upper()) if tag else _quant_bits(model)
    exact_name = f"-{tag.upper()}." if tag else None
    best: tuple[int, bool, int] | None = None
    chosen = None
    for p in paths:
        if not p.endswith(".gguf") or keyword not in p:
            continue
        dirs = p.split("/")[:-1]
        if dirs != model_dirs[: len(dirs)]:
            continue
        exact = exact_name is not None and exact_name in p.upper()
        key = (-len(dirs), not exact, abs(_quant_bits(p) - bits))
        if best is None or key < best:
            best, chosen = key, p
    return chosen


def hf_projector(paths: Sequence[str], model: str) -> str | None:
    """The projector llama-server's ``-hf`` downloads and loads beside ``model`` (the path of
    the model, a split model's first part) among a repository's ``paths``, in the order the
    hub lists them: common/download.cpp's find_best_mmproj. A ``.gguf`` whose path holds
    "mmproj" (in that case), in the model's folder or one above it: the deepest such folder,
    then the quantization nearest the model's in bits, then the first listed; None if none."""
    return _best_sibling(paths, model, "mmproj")


# the draft sidecars a repository may ship, by the --spec-type each is for and the word its
# file name holds (common/download.cpp's find_best_mtp, _dspark, _dflash, _eagle3)
DRAFT_SIDECARS = {
    "draft-mtp": "mtp-",
    "draft-dspark": "dspark-",
    "draft-dflash": "dflash-",
    "draft-eagle3": "eagle3-",
}
# what common/download.cpp's gguf_filename_is_model takes for no model (in the file's name)
_NOT_A_MODEL = ("mmproj", "imatrix", *DRAFT_SIDECARS.values())


def best_model(paths: Sequence[str], tag: str) -> str | None:
    """common/download.cpp's find_best_model: the first model file (a split model's first
    part) naming the tag (else Q4_K_M, then Q8_0, then any model); None if none."""
    models = [
        p
        for p in paths
        if p.endswith(".gguf")
        and not any(w in p.rsplit("/", 1)[-1] for w in _NOT_A_MODEL)
        and _first_part(p)
    ]
    for t in (tag,) if tag else ("Q4_K_M", "Q8_0"):
        pat = re.compile(re.escape(t) + "[.-]", re.IGNORECASE)
        found = next((p for p in models if pat.search(p)), None)
        if found is not None:
            return found
    return None if tag or not models else models[0]


def hf_draft_file(paths: Sequence[str], tag: str, spec_types: Sequence[str]) -> str | None:
    """The file llama-server's ``-hfd OWNER/REPO[:TAG]`` loads as the draft model, among the
    repository's ``paths`` in the order the hub lists them (common_models_handler_init and
    _apply): with no ``--spec-type`` given, a sidecar the repository ships (an MTP head, then
    DSpark, DFlash, Eagle3); with ``--spec-type``, the sidecar of a type given; else the
    model the tag names. None where there is none."""
    primary = best_model(paths, tag)
    if spec_types:
        return hf_sidecar(paths, primary or "", tag, spec_types) or primary
    for word in DRAFT_SIDECARS.values():
        if found := _best_sibling(paths, primary or "", word, tag):
            return found
    return primary


def hf_sidecar(paths: Sequence[str], model: str, tag: str, spec_types: Sequence[str]) -> str | None:
    """The draft sidecar llama-server downloads and loads for the ``--spec-type`` values given
    (draft-mtp, draft-dflash, draft-eagle3, draft-dspark) from the repository of ``model``
    (its path; ``tag``: the -hf tag, "" for none): of the types given, the first in that
    order the repository ships one for (the others are downloaded, not loaded); None if none
    (common_download_get_hf_plan and common_models_handler_apply)."""
    for t in ("draft-mtp", "draft-dflash", "draft-eagle3", "draft-dspark"):
        if t in spec_types and (found := _best_sibling(paths, model, DRAFT_SIDECARS[t], tag)):
            return found
    return None


def sidecar_type(path: str) -> str | None:
    """The --spec-type a draft sidecar's file name is for (``mtp-...gguf``: draft-mtp)."""
    name = path.rsplit("/", 1)[-1]
    return next((t for t, w in DRAFT_SIDECARS.items() if w in name), None)


@dataclass(frozen=True)
class RepoFile:
    """One file of a repository listing: its path, size and content id (ETag)."""

    path: str
    size: int | None = None
    etag: str | None = None


@dataclass(frozen=True)
class RepoModel:
    """One GGUF model of a repository: a file, or the parts of a split model in order."""

    files: tuple[RepoFile, ...]
    quant: str | None
    # "model", "mmproj", "draft" (a sidecar: mtp-, dspark-, dflash-, eagle3-) or "imatrix"
    kind: str

    @property
    def path(self) -> str:
        return self.files[0].path

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)

    @property
    def missing(self) -> tuple[str, ...]:
        """The parts of a split model the repository lacks, by their paths."""
        m = SPLIT_NAME_RE.match(self.path)
        if m is None:
            return ()
        have = {f.path for f in self.files}
        count = m.group("count")
        names = (f"{m.group('prefix')}-{i:05d}-of-{count}.gguf" for i in range(1, int(count) + 1))
        return tuple(n for n in names if n not in have)

    @property
    def complete(self) -> bool:
        return not self.missing


def repo_models(files: Sequence[RepoFile]) -> list[RepoModel]:
    """The GGUF models among a repository's files, split parts grouped, largest first
    (projectors and draft sidecars last)."""
    singles: list[RepoModel] = []
    groups: dict[tuple[str, str], list[RepoFile]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        m = SPLIT_NAME_RE.match(f.path)
        if m:
            groups.setdefault((m.group("prefix"), m.group("count")), []).append(f)
            continue
        singles.append(RepoModel((f,), quant_of(f.path), _kind(f.path)))
    for parts in groups.values():
        parts.sort(key=lambda f: f.path)
        singles.append(RepoModel(tuple(parts), quant_of(parts[0].path), _kind(parts[0].path)))
    return sorted(singles, key=lambda m: (m.kind != "model", -(m.size or 0), m.path))


def _kind(path: str) -> str:
    if is_mmproj(path):
        return "mmproj"
    if "imatrix" in path.rsplit("/", 1)[-1].lower():  # (gguf_filename_is_model: no model)
        return "imatrix"
    return "draft" if sidecar_type(path) is not None else "model"


def tag_model(models: Sequence[RepoModel], tag: str) -> RepoModel | None:
    """The model llama-server's ``-hf OWNER/REPO:TAG`` loads: the first model file in the
    hub's order whose path holds ``TAG.`` or ``TAG-`` (any case; F16 also names BF16's
    file, Q4_K_XL UD-Q4_K_XL's), a split model's first part (:func:`best_model`); None if
    none, where llama-server finds no file either. The hub's order is taken as its paths
    sorted: its tree listing, as read here, is (git trees list their entries in byte order)."""
    pick = best_model(sorted(f.path for m in models for f in m.files), tag)
    return select_file(models, pick) if pick is not None else None


def hf_tag(models: Sequence[RepoModel], model: RepoModel) -> str:
    """The tag ``-hf OWNER/REPO:TAG`` names ``model`` by (its quantization, where the tag
    picks it); "" where it takes ``-hf OWNER/REPO -hff FILE``."""
    return model.quant if model.quant and tag_model(models, model.quant) == model else ""


def select_file(models: Sequence[RepoModel], path: str) -> RepoModel | None:
    """The model one of whose files is ``path`` (any part of a split model names it)."""
    return next((m for m in models if any(f.path == path for f in m.files)), None)


def listing_lines(ref_text: str, models: Sequence[RepoModel], verb: str = "fit") -> list[str]:
    """A repository's models as a table a user picks from."""
    n_models = sum(1 for m in models if m.kind == "model")
    lines = [f"{ref_text}: {n_models} GGUF model(s)"]
    lines.append(f"  {'quant':<12} {'size':>10}  file")
    for m in models:
        label = m.kind if m.kind != "model" else (m.quant or "?")
        size = fmt_bytes(m.size) if m.size is not None else "?"
        extra = f" ({len(m.files)} parts)" if len(m.files) > 1 else ""
        if not m.complete:
            extra += " (parts missing)"
        if m.kind == "mmproj":
            extra += " (multimodal projector, not a model)"
        if m.kind == "draft":
            extra += f" (draft for --spec-type {sidecar_type(m.path)}, not a model)"
        if m.kind == "imatrix":
            extra += " (importance matrix for llama-quantize, not a model)"
        # file names are the hub's data: one line each
        lines.append(f"  {one_line(label):<12} {size:>10}  {one_line(m.path)}{extra}")
    example = next((m for m in models if m.kind == "model"), None)
    if example is not None:
        # its quant where -hf's tag picks it, else its file; the revision kept
        pick = hf_tag(models, example) or example.path
        try:
            choice = parse_ref(ref_text)
        except RefError:
            choice = None
        named = choice.text(pick) if isinstance(choice, HfRef) else f"{ref_text}:{pick}"
        lines.append(f"choose one: lltui {verb} {one_line(named)}")
    return lines


def listing_json(ref_text: str, commit: str | None, models: Sequence[RepoModel]) -> dict[str, Any]:
    """A repository's models for --json: one entry per model (a split model's parts in it)."""
    return {
        "reference": ref_text,
        "commit": commit,
        "models": [
            {
                "reference": f"{ref_text.split('@')[0]}:{m.path}"
                + (f"@{ref_text.split('@', 1)[1]}" if "@" in ref_text else ""),
                "file": m.path,
                "files": [f.path for f in m.files],
                "quant": m.quant,
                "kind": m.kind,
                "bytes": m.size,
                "complete": m.complete,
            }
            for m in models
        ],
    }


def choices_line(models: Sequence[RepoModel], limit: int = 8) -> str:
    """The models as one short line: ``Q4_K_M 4.7 GiB, Q8_0 8.1 GiB, ...``."""
    shown = [m for m in models if m.kind == "model"]
    items = [
        f"{one_line(m.quant or m.path)} {fmt_bytes(m.size) if m.size is not None else '?'}"
        for m in shown[:limit]
    ]
    if len(shown) > limit:
        items.append(f"{len(shown) - limit} more")
    return ", ".join(items) or "none"


def split_urls(url: str, count: int) -> list[str] | None:
    """The URLs of every part of a split model given the URL of one (its path ends in
    ``-NNNNN-of-NNNNN.gguf``; a query string is kept); None when the name is not a split's."""
    parts = urlsplit(url)
    m = SPLIT_NAME_RE.match(parts.path)
    if m is None or int(m.group("count")) != count:
        return None
    prefix = m.group("prefix")
    return [
        urlunsplit(parts._replace(path=f"{prefix}-{i + 1:05d}-of-{count:05d}.gguf"))
        for i in range(count)
    ]


def names_repo(text: str) -> bool:
    """Whether ``text`` is ``hf:OWNER/REPO[@REV]``: a repository, no file or quantization."""
    try:
        ref = parse_ref(text)
    except RefError:
        return False
    return isinstance(ref, HfRef) and ref.selector is None


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A GGUF file found on disk."""

    path: str
    size: int  # bytes of this file (for a split model: of all its parts)
    parts: int = 1

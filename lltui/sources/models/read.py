"""A model's GGUF header, read from a local file or by ranged requests from a remote one
(``hf:OWNER/REPO...``, an https URL), and the draft model, projector and adapters a command
line names beside it. Failures are one line (:class:`ModelError`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lltui.core.gguf.reader import GgufError, GgufModel, read_gguf

if TYPE_CHECKING:
    from lltui.core.cmdline.args import LlamaArgs
    from lltui.core.memory.parts import ExtraModels
    from lltui.sources.models.remote import RemoteModel


class ModelError(ValueError):
    """A model file that cannot be read; ``str()`` is one line."""


class RemoteModelError(ModelError):
    """A remote model that cannot be read; ``code`` 1 (network, server) or 2 (reference)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class ModelChoice(RemoteModelError):
    """A reference to a repository that names no one model in it: ``lines`` (a table of its
    models and sizes) and ``data`` (the same for --json) to choose from; ``named``: whether
    a file or quantization was given (and matched none, or several)."""

    def __init__(self, message: str, lines: list[str], data: dict[str, Any], named: bool):
        super().__init__(message, 2)
        self.lines = lines
        self.data = data
        self.named = named


def read_model(path: str, verb: str = "fit") -> GgufModel:
    """The GGUF header; ModelError with one line for a missing or corrupt file. A remote
    reference (hf:OWNER/REPO..., an https URL) is read by ranged requests."""
    from lltui.core.gguf.ref_kind import is_remote_ref

    if is_remote_ref(path):
        return _read_remote(path, verb)
    if "\0" in path:  # from a preset or a form: no file name holds one (open() would raise)
        raise ModelError(f"{path!r}: a file name cannot hold a NUL byte")
    try:
        return read_gguf(path)
    except GgufError as exc:
        raise ModelError(str(exc)) from None
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelError(f"{path}: is a directory, not a GGUF file") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_model_and_projector(
    path: str, verb: str = "fit", projector: bool = True, draft_types: tuple[str, ...] = ()
) -> tuple[GgufModel, GgufModel | None, GgufModel | None]:
    """The model, and for a ``hf:`` reference the multimodal projector llama-server's ``-hf``
    downloads and loads beside it (where ``--no-mmproj`` or ``--mmproj`` do not say otherwise:
    the caller's to judge, ``projector``): the repository's mmproj file llama.cpp picks, None
    where it has none; and, for the ``--spec-type`` values ``draft_types``, the draft
    sidecar it loads (``mtp-...gguf``; None where none is shipped). A file or URL has neither."""
    from lltui.core.gguf.ref_kind import HF_PREFIX

    if not path.strip().startswith(HF_PREFIX):
        return read_model(path, verb), None, None
    got = _remote(path, verb, projector=projector, draft_types=draft_types)
    return got.model, got.projector, got.draft


def read_extra_models(settings: LlamaArgs, verb: str = "fit") -> ExtraModels | None:
    """The headers of the draft model, projector and LoRA adapters ``settings`` name, read
    like the model (local files, hf: references, https URLs); None when there are none."""
    from lltui.core.memory.parts import ExtraModels

    # -mmu: llama-server downloads the projector at that URL (--mmproj's file where both)
    mmproj, mm_flag = (
        (settings.mmproj, "--mmproj") if settings.mmproj else (settings.mmproj_url, "-mmu")
    )
    if not (settings.draft_model or settings.draft_hf_repo or mmproj or settings.lora):
        return None

    def read(path: str, flag: str) -> GgufModel:
        try:
            return read_model(path, verb)
        except ModelChoice:
            raise
        except RemoteModelError as exc:
            raise RemoteModelError(f"{flag} {exc}", exc.code) from None
        except ModelError as exc:
            raise ModelError(f"{flag} {exc}") from None

    draft = _hf_draft(settings, verb) if settings.draft_hf_repo else None
    if draft is None and settings.draft_model:
        draft = read(settings.draft_model, "-md")
    return ExtraModels(
        draft=draft,
        mmproj=read(mmproj, mm_flag) if mmproj else None,
        loras=tuple(read(p, "--lora") for p in settings.lora),
    )


def _hf_draft(settings: LlamaArgs, verb: str) -> GgufModel | None:
    """The draft ``-hfd`` downloads (with ``-md FILE``: that file of the repository); None
    where -md names no file of it, which llama-server then loads as a path."""
    from lltui.sources.models.remote import read_hf_draft
    from lltui.sources.models.remote_gguf import RemoteError

    repo = settings.draft_hf_repo
    assert repo is not None
    try:
        return read_hf_draft(repo, settings.draft_model, settings.spec_types, verb)
    except RemoteError as exc:
        raise RemoteModelError(f"-hfd {exc}", exc.code) from None


def _read_remote(text: str, verb: str) -> GgufModel:
    return _remote(text, verb).model


def _remote(
    text: str, verb: str, projector: bool = False, draft_types: tuple[str, ...] = ()
) -> RemoteModel:
    from lltui.sources.models.remote import read_remote
    from lltui.sources.models.remote_gguf import RemoteError

    try:
        return read_remote(text, verb, projector=projector, draft_types=draft_types)
    except RemoteError as exc:
        from lltui.sources.models.hf_hub import RepoChoice

        if isinstance(exc, RepoChoice):
            from lltui.core.gguf.refs import HfRef, listing_json, listing_lines

            ref = exc.listing.ref
            base = HfRef(ref.repo, None, ref.revision).text()
            raise ModelChoice(
                str(exc),
                listing_lines(base, exc.listing.models, verb),
                listing_json(base, exc.listing.commit, exc.listing.models),
                ref.selector is not None,
            ) from None
        raise RemoteModelError(str(exc), exc.code) from None

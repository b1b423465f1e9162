"""The one check of the public API's arguments (lltui.api and the seed API's NCCL names): a
value of a type a function does not take is a TypeError, in one line naming the argument and
what it takes, before anything is read or set."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from numbers import Integral

_TEXT = (str, bytes, bytearray)


def _is(value: object, kinds: tuple[type, ...]) -> bool:
    """``isinstance``, where True is no number and a string no list of anything: each only
    where its own type is named."""
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, _TEXT):
        return isinstance(value, tuple(k for k in kinds if k in _TEXT))
    return isinstance(value, kinds)


def check_arg(
    name: str,
    value: object,
    kinds: tuple[type, ...],
    takes: str,
    items: tuple[type, ...] = (),
) -> None:
    """TypeError for a ``value`` of none of ``kinds``; with ``items``, for a list (of those
    ``kinds``) with an item of none of them."""
    if not _is(value, kinds):
        raise TypeError(f"{name}: {takes}, not {value!r}")
    if items and isinstance(value, Iterable):
        for i, item in enumerate(value):
            if not _is(item, items):
                raise TypeError(f"{name}: {takes}; item {i} is {item!r}")


def check_indices(name: str, value: object) -> None:
    """TypeError unless ``value`` is a list of CUDA device indices, or None."""
    check_arg(name, value, (Sequence, type(None)), "a list of CUDA indices, or None", (Integral,))

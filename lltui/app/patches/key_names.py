"""Textual's names of the keys that type ASCII punctuation; keys shown, and their characters
found, as Textual does it without looking each name up.

Textual names such a key after the character's Unicode name ("question_mark"). To show a
bound key, and each time a screen works out its bindings under a focused widget, it looks the
name up again in Python's Unicode name database (``key_to_character``, ``format_key``). The
pages each lookup reads stay resident: 0.8 MiB of an idle monitor's memory for its keys,
measured against a bare Textual app's (bench/idle_cpu.py). The names of these characters are
fixed by Unicode; tests/test_key_names.py checks them, and every answer given here for a key
Textual or lltui names, against Textual's own.
"""

from __future__ import annotations

import textual.keys
import textual.screen
from textual.binding import Binding
from textual.keys import KEY_DISPLAY_ALIASES, REPLACED_KEYS, Keys, format_key

# character -> Textual's key name (its Unicode name in snake case, Textual's replacements
# applied: "plus" not "plus_sign"). Letters and digits are their own names.
ASCII_KEY_NAMES: dict[str, str] = {
    " ": "space",
    "!": "exclamation_mark",
    '"': "quotation_mark",
    "#": "number_sign",
    "$": "dollar_sign",
    "%": "percent_sign",
    "&": "ampersand",
    "'": "apostrophe",
    "(": "left_parenthesis",
    ")": "right_parenthesis",
    "*": "asterisk",
    "+": "plus",
    ",": "comma",
    "-": "minus",
    ".": "full_stop",
    "/": "slash",
    ":": "colon",
    ";": "semicolon",
    "<": "less_than_sign",
    "=": "equals_sign",
    ">": "greater_than_sign",
    "?": "question_mark",
    "@": "at",
    "[": "left_square_bracket",
    "\\": "backslash",
    "]": "right_square_bracket",
    "^": "circumflex_accent",
    "_": "underscore",
    "`": "grave_accent",
    "{": "left_curly_bracket",
    "|": "vertical_line",
    "}": "right_curly_bracket",
    "~": "tilde",
}

_CHARACTERS = {name: char for char, name in ASCII_KEY_NAMES.items()}
_NAMED_KEYS = frozenset(key.value for key in Keys)
# What Textual's key_to_character finds for a name: the character, but not for the six
# names it replaced ("plus" for "plus_sign": the lookup does not know them), and of its named
# keys the five that are Unicode aliases of control characters.
_KEY_CHARACTERS: dict[str, str] = {
    name: char for name, char in _CHARACTERS.items() if name not in REPLACED_KEYS
} | {"escape": "\x1b", "delete": "\x7f", "tab": "\t", "space": " ", "backspace": "\x08"}

# The keys a text field types: every printable ASCII character, by itself and by its name.
TYPED_KEYS: frozenset[str] = frozenset(
    [chr(code) for code in range(32, 127)] + list(ASCII_KEY_NAMES.values())
)


def shown_key(key: str) -> str:
    """How Textual shows a key without modifiers: its alias ("esc"), the character a
    punctuation key types, else the name. Keys outside ASCII's names go to Textual."""
    alias = KEY_DISPLAY_ALIASES.get(key)
    if alias:
        return alias
    char = _CHARACTERS.get(key)
    if char is not None:
        return char
    if len(key) == 1 or key in _NAMED_KEYS:
        return key
    return format_key(key)  # a name that may be a Unicode character's: Textual looks it up


def key_display(binding: Binding) -> str:
    """What ``App.get_key_display`` gives for a binding, modifiers and all."""
    if binding.key_display:
        return binding.key_display
    modifiers, key = binding.parse_key()
    shown = shown_key(key)
    if "ctrl" in modifiers:
        modifiers.remove("ctrl")
        shown = f"^{shown}"
    return "+".join([*modifiers, shown])


def key_character(key: str) -> str | None:
    """What Textual's ``key_to_character`` gives: the character a key types, None for a key
    with modifiers or one that types none. Names outside ASCII's go to Textual."""
    _, separator, name = key.rpartition("+")
    if separator:
        return None
    if len(name) == 1:
        return name
    char = _KEY_CHARACTERS.get(name)
    if char is not None:
        return char
    if name in REPLACED_KEYS or name in _NAMED_KEYS:
        return None
    return textual.keys.key_to_character(key)


def find_key_characters_here() -> bool:
    """Have Textual's screens find a key's character with :func:`key_character` (they look
    every binding's name up while a widget has the focus); False, and left as it is, where
    Textual's screen module no longer uses its ``key_to_character``."""
    found = getattr(textual.screen, "key_to_character", None)
    if found is key_character:
        return True
    if found is not textual.keys.key_to_character:
        return False
    setattr(textual.screen, "key_to_character", key_character)  # noqa: B010
    return True

"""Keys shown as Textual shows them, without its Unicode name lookups (app/patches/key_names.py)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import unicodedata

import pytest
import textual.keys
from textual.app import App
from textual.binding import Binding
from textual.keys import KEY_NAME_REPLACEMENTS, Keys

import lltui.app
from lltui.app.patches.key_names import (
    ASCII_KEY_NAMES,
    TYPED_KEYS,
    find_key_characters_here,
    key_character,
    key_display,
    shown_key,
)


def lltui_bindings() -> list[Binding]:
    """Every binding of lltui's app, screens and widgets, compound keys split."""
    found: list[Binding] = []
    for info in pkgutil.walk_packages(lltui.app.__path__, "lltui.app."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and "BINDINGS" in vars(cls):
                found.extend(Binding.make_bindings(vars(cls)["BINDINGS"]))
    return found


def textual_display(binding: Binding) -> str:
    return App.get_key_display(App(), binding)


def test_the_names_are_textuals_names_of_the_characters():
    for code in range(32, 127):
        char = chr(code)
        if char.isalnum():
            assert char not in ASCII_KEY_NAMES
            continue
        name = unicodedata.name(char).lower().replace("-", "_").replace(" ", "_")
        assert ASCII_KEY_NAMES[char] == KEY_NAME_REPLACEMENTS.get(name, name)
        assert {char, ASCII_KEY_NAMES[char]} <= TYPED_KEYS
    assert "a" in TYPED_KEYS and "f1" not in TYPED_KEYS and "ctrl+a" not in TYPED_KEYS


def test_every_key_lltui_binds_is_shown_as_textual_shows_it():
    bindings = lltui_bindings()
    assert len(bindings) > 40  # the app's, every view's and the dialogs'
    for binding in bindings:
        assert key_display(binding) == textual_display(binding), binding.key


@pytest.mark.parametrize(
    "key",
    [
        *ASCII_KEY_NAMES.values(),
        *[chr(code) for code in range(32, 127)],
        *[key.value for key in Keys],
        "ctrl+question_mark",
        "shift+up",
        "ctrl+shift+left_square_bracket",
        "bullet",  # a Unicode name outside ASCII: Textual's lookup gives "•"
        "pound_sign",
        "no_such_key",
    ],
)
def test_any_key_is_shown_and_typed_as_textual_has_it(key):
    binding = Binding(key, "x")
    assert key_display(binding) == textual_display(binding)
    shown = Binding(key, "x", key_display="K")
    assert key_display(shown) == textual_display(shown) == "K"
    assert key_character(key) == textual.keys.key_to_character(key)


def test_every_key_lltui_binds_types_what_textual_says():
    for binding in lltui_bindings():
        assert key_character(binding.key) == textual.keys.key_to_character(binding.key)


def test_the_app_has_textuals_screens_find_characters_here(monkeypatch):
    import textual.screen
    from support.app_helpers import sim_app

    monkeypatch.setattr(textual.screen, "key_to_character", textual.keys.key_to_character)
    sim_app("kaggle-2xt4")
    assert textual.screen.key_to_character is key_character
    assert find_key_characters_here()  # once is enough
    monkeypatch.setattr(textual.screen, "key_to_character", lambda key: None)
    assert not find_key_characters_here()  # not Textual's own: left alone


def test_lltuis_keys_need_no_unicode_name_lookup(monkeypatch):
    """The lookups are what the module saves (their pages stay resident): lltui's keys are
    shown without one."""

    def refuse(*args: object) -> str:
        raise AssertionError("a Unicode name lookup")

    monkeypatch.setattr(textual.keys.unicodedata, "lookup", refuse)
    monkeypatch.setattr(textual.keys.unicodedata, "name", refuse)
    for binding in lltui_bindings():
        key_display(binding)
        key_character(binding.key)
    assert shown_key("question_mark") == "?"
    assert key_character("question_mark") == "?" and key_character("escape") == "\x1b"
    with pytest.raises(AssertionError):
        shown_key("dagger")  # outside ASCII's names: Textual looks it up (first time: cached)

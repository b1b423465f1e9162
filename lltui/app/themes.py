"""Built-in themes, lltui's own theme variables, and user themes from TOML files.

A user theme is a TOML file in the themes folder of the config dir::

    name = "solarized-rig"
    dark = true
    primary = "#268bd2"
    background = "#002b36"
    [variables]
    bar-vram = "#2aa198"

A file that cannot be used is reported and skipped; the app falls back to a built-in theme.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from textual.color import Color, ColorParseError
from textual.theme import Theme

# lltui's own variables, used by TCSS and by markup in the widgets. Every theme gets these
# defaults (from the app) and may override any of them.
APP_VARIABLE_DEFAULTS: dict[str, str] = {
    "bar-vram": "#5fafff",
    "bar-power": "#ffaf5f",
    "bar-util": "#87d787",
    "bar-empty": "#3a3a3a",
    "spark": "#87afd7",
    "gpu-ok": "#87d787",
    "gpu-warn": "#ffd75f",
    "gpu-hot": "#ff5f5f",
    "sim-banner": "#af5f00",
}

THEME_KEYS = (
    "primary",
    "secondary",
    "accent",
    "warning",
    "error",
    "success",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)

BUILTIN_THEMES: tuple[Theme, ...] = (
    Theme(
        name="dark",
        primary="#5fafff",
        secondary="#87afd7",
        accent="#ffaf5f",
        warning="#ffd75f",
        error="#ff5f5f",
        success="#87d787",
        foreground="#dadada",
        background="#121212",
        surface="#1c1c1c",
        panel="#262626",
        dark=True,
        variables={**APP_VARIABLE_DEFAULTS},
    ),
    Theme(
        name="light",
        primary="#005fd7",
        secondary="#5f5faf",
        accent="#d75f00",
        warning="#af8700",
        error="#d70000",
        success="#008700",
        foreground="#1c1c1c",
        background="#f5f5f5",
        surface="#ffffff",
        panel="#e4e4e4",
        dark=False,
        variables={
            "bar-vram": "#005fd7",
            "bar-power": "#d75f00",
            "bar-util": "#008700",
            "bar-empty": "#d0d0d0",
            "spark": "#5f87af",
            "gpu-ok": "#008700",
            "gpu-warn": "#af8700",
            "gpu-hot": "#d70000",
            "sim-banner": "#ffd7af",
        },
    ),
    Theme(
        name="high-contrast",
        primary="#00ffff",
        secondary="#ffffff",
        accent="#ffff00",
        warning="#ffff00",
        error="#ff0000",
        success="#00ff00",
        foreground="#ffffff",
        background="#000000",
        surface="#000000",
        panel="#1a1a1a",
        dark=True,
        variables={
            "bar-vram": "#00ffff",
            "bar-power": "#ffff00",
            "bar-util": "#00ff00",
            "bar-empty": "#444444",
            "spark": "#ffffff",
            "gpu-ok": "#00ff00",
            "gpu-warn": "#ffff00",
            "gpu-hot": "#ff0000",
            "sim-banner": "#ff00ff",
        },
    ),
)

BUILTIN_NAMES = tuple(t.name for t in BUILTIN_THEMES)
FALLBACK_THEME = "dark"


@dataclass(frozen=True)
class ThemeLoadResult:
    themes: tuple[Theme, ...]
    failures: tuple[str, ...]  # one line per file that could not be used


def _color(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where} must be a colour string")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(f"{where}: {value!r} is not a colour") from None
    return value


# a theme's name becomes a CSS class (-theme-NAME): the characters a class name takes
_THEME_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# what Textual's *-style variables take (text-style words)
_STYLE_WORDS = frozenset(
    (
        "none", "not", "bold", "b", "dim", "d", "italic", "i", "underline", "u", "underline2",
        "uu", "strike", "s", "reverse", "r", "blink", "overline", "o", "reset",
    )
)  # fmt: skip
_COLOR_WORDS = re.compile(r"auto(?: \d{1,3}%)?|initial")  # Textual's own non-colour values


def _textual_variable(key: str, value: object) -> str:
    """A value for one of Textual's variables: a text style for a *-style one, else a
    colour (or ``auto N%``); anything else breaks the stylesheet, or hangs the app."""
    if not isinstance(value, str):
        raise ValueError(f"variables.{key} must be a string")
    if "style" in key:
        if not value.split() or not set(value.split()) <= _STYLE_WORDS:
            raise ValueError(f"variables.{key}: {value!r} is not a text style (e.g. 'bold')")
        return value
    if _COLOR_WORDS.fullmatch(value.strip()):
        return value
    return _color(value, f"variables.{key}")


def _textual_variables() -> frozenset[str]:
    """The variables Textual's themes set (read from a theme, not listed by hand)."""
    return frozenset(Theme(name="probe", primary="#000000").to_color_system().generate())


def theme_from_mapping(data: dict[str, object]) -> Theme:
    """Build a Theme from a parsed TOML table; ValueError names what is wrong."""
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError("needs a name")
    if not _THEME_NAME.fullmatch(name):
        raise ValueError(f"name {name!r}: letters, digits, '-' and '_' only")
    if name in BUILTIN_NAMES:
        raise ValueError(f"name {name!r} is a built-in theme")
    if "primary" not in data:
        raise ValueError("needs a primary colour")
    unknown = sorted(set(data) - set(THEME_KEYS) - {"name", "dark", "variables"})
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}")
    colours = {k: _color(data[k], k) for k in THEME_KEYS if k in data}
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ValueError("dark must be true or false")
    variables = data.get("variables", {})
    if not isinstance(variables, dict):
        raise ValueError("[variables] must be a table")
    checked: dict[str, str] = {}
    textual = _textual_variables() if variables else frozenset()
    for key, value in variables.items():
        if key in APP_VARIABLE_DEFAULTS:
            checked[key] = _color(value, f"variables.{key}")
        elif key in textual:
            checked[key] = _textual_variable(key, value)
        else:
            raise ValueError(f"variables.{key}: no such variable (lltui's or Textual's)")
    return Theme(
        name=name,
        dark=dark,
        variables={**APP_VARIABLE_DEFAULTS, **checked},
        **colours,  # type: ignore[arg-type]
    )


def load_user_themes(folder: Path) -> ThemeLoadResult:
    """Every ``*.toml`` theme in ``folder``; failures are collected, never raised."""
    themes: list[Theme] = []
    failures: list[str] = []
    if not folder.is_dir():
        return ThemeLoadResult((), ())
    import tomllib  # here: most runs have no theme folder to read

    from lltui.paths import read_small_file  # a user's file, read as the config file is

    for path in sorted(folder.glob("*.toml")):
        try:
            data = tomllib.loads(read_small_file(path).decode("utf-8"))
            themes.append(theme_from_mapping(data))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValueError) as exc:
            failures.append(f"{path.name}: {exc}")
    return ThemeLoadResult(tuple(themes), tuple(failures))

"""Settings: defaults < config file < LLTUI_* environment < command line.

The file is TOML at ``$XDG_CONFIG_HOME/lltui/config.toml`` (``~/.config/lltui/config.toml``)::

    interval = 1.0          # seconds between samples
    theme = "dark"          # dark, light, high-contrast, a Textual theme or a user theme
    source = "auto"         # auto, nvml, smi, smi:HOST, sim:PROFILE, replay:FILE
    history_minutes = 60    # how much history the monitor keeps

    readonly = false        # no signal, launch, stop or file written (shared screens)
    serve_allow_flags = []  # llama-server flags that name files, allowed from `lltui serve`
    energy_price = 0.30     # price of a kWh, to show what the GPUs' energy cost
    currency = "EUR"

    [keymap]                # binding id = keys, as Textual spells them
    pause = "space"
    quit = "q,ctrl+q"

    [alerts]                # thresholds (see lltui.core.monitor.alerts) and hooks
    gpu_temp_critical = 88
    disabled = ["power_cap"]
    hook = ["notify-send", "lltui alert"]   # argv, no shell; LLTUI_ALERT_* in its environment
    hook_timeout_s = 10
    [alerts.hooks]
    xid = ["/usr/local/bin/page-oncall"]

User themes are TOML files in ``$XDG_CONFIG_HOME/lltui/themes/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from lltui.core.monitor.alert_settings import AlertConfig, alert_config_from_mapping
from lltui.paths import default_config_path

MIN_INTERVAL = 0.25  # NVML latency makes faster polling meaningless and costly
MAX_INTERVAL = 3600.0


class ConfigError(ValueError):
    """A config file or variable that cannot be used; ``str()`` names where and why."""


@dataclass(frozen=True)
class Settings:
    interval: float = 1.0
    theme: str = "dark"
    source: str = "auto"
    history_minutes: float = 60.0
    keymap: dict[str, str] = field(default_factory=dict)
    readonly: bool = False  # no signal, launch, stop or file written
    # the app is driven from a browser (``lltui serve`` starts it so; never from a file)
    served: bool = False
    # flags naming files (FILE_FLAGS) a launch from the browser view may carry
    serve_allow_flags: tuple[str, ...] = ()
    energy_price: float | None = None  # per kWh, in ``currency``
    currency: str = ""
    alerts: AlertConfig = field(default_factory=AlertConfig)
    config_path: str | None = None  # the file these came from, if any


def check_interval(value: Any, where: str, stepped: bool = False) -> float:
    """The one rule for an interval, wherever it is given (config file, LLTUI_INTERVAL, the
    global ``--interval``, a command's own): from MIN_INTERVAL to MAX_INTERVAL seconds, or
    anything above 0 for a replay stepped (``stepped``); else ConfigError naming ``where``."""
    try:
        if isinstance(value, bool):  # true is no number of seconds (float(True) is 1)
            raise TypeError
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: interval must be a number of seconds, got {value!r}") from None
    if not (0 if stepped else MIN_INTERVAL) <= v <= MAX_INTERVAL or v == 0:
        raise ConfigError(
            f"{where}: interval must be between {MIN_INTERVAL:g} and {MAX_INTERVAL:g} s"
            f" (shorter only for a --replay-step replay), got {v:g}"
        )
    return v


def check_values(data: dict[str, Any], where: str) -> None:
    """ConfigError with one line for a setting out of range (as a config file's would be),
    ``where``: what gave them (the command line)."""
    _from_mapping(data, Settings(), where)


def _from_mapping(data: dict[str, Any], base: Settings, where: str) -> Settings:
    known = {f.name for f in fields(Settings)} - {"config_path", "served"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(
            f"{where}: unknown setting {unknown[0]!r} (known: {', '.join(sorted(known))})"
        )
    out = base
    if "interval" in data:
        out = replace(out, interval=check_interval(data["interval"], where))
    for key in ("theme", "source"):
        if key in data:
            if not isinstance(data[key], str) or not data[key]:
                raise ConfigError(f"{where}: {key} must be a non-empty string")
            out = replace(out, **{key: data[key]})
    if "history_minutes" in data:
        try:
            if isinstance(data["history_minutes"], bool):
                raise TypeError
            minutes = float(data["history_minutes"])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: history_minutes must be a number") from None
        if not 1 <= minutes <= 24 * 60:
            raise ConfigError(f"{where}: history_minutes must be between 1 and 1440")
        out = replace(out, history_minutes=minutes)
    if "keymap" in data:
        keymap = data["keymap"]
        if not isinstance(keymap, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in keymap.items()
        ):
            raise ConfigError(f"{where}: [keymap] maps binding ids to key strings")
        out = replace(out, keymap={**out.keymap, **keymap})
    return _more_from_mapping(data, out, where)


def _more_from_mapping(data: dict[str, Any], out: Settings, where: str) -> Settings:
    """readonly, the flags a served app may pass, the energy price and the alerts."""
    if "readonly" in data:
        value = data["readonly"]
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no"):
            value = value.lower() in ("1", "true", "yes")  # from LLTUI_READONLY
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: readonly must be true or false, got {value!r}")
        out = replace(out, readonly=value)
    if "serve_allow_flags" in data:
        out = replace(out, serve_allow_flags=_file_flags(data["serve_allow_flags"], where))
    if "energy_price" in data:
        try:
            price = float(data["energy_price"])
        except (TypeError, ValueError):
            price = -1.0
        if isinstance(data["energy_price"], bool) or not 0 <= price < 1e6:
            raise ConfigError(
                f"{where}: energy_price must be a price per kWh (0 or more), "
                f"got {data['energy_price']!r}"
            )
        out = replace(out, energy_price=price)
    if "currency" in data:
        currency = data["currency"]
        if not isinstance(currency, str) or len(currency) > 8 or not currency.isprintable():
            raise ConfigError(f"{where}: currency must be a short word such as EUR or $")
        out = replace(out, currency=currency)
    if "alerts" in data:
        try:
            out = replace(out, alerts=alert_config_from_mapping(data["alerts"], "alerts"))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return out


def _file_flags(value: Any, where: str) -> tuple[str, ...]:
    from lltui.core.cmdline.flag_table import FILE_FLAGS, canonical

    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: serve_allow_flags is a list of flags, such as ['--log-file']")
    flags = tuple(canonical(v) for v in value)
    for flag in flags:
        if flag not in FILE_FLAGS:
            raise ConfigError(
                f"{where}: serve_allow_flags: {flag} is not a flag that names a file "
                f"(those are: {', '.join(sorted(FILE_FLAGS))})"
            )
    return flags


def load_settings(
    cli: dict[str, Any] | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Settings from every layer. Raises ConfigError with the file or variable named."""
    env = os.environ if environ is None else environ
    settings = Settings()
    explicit = path is not None or bool(env.get("LLTUI_CONFIG"))
    file = Path(path or env.get("LLTUI_CONFIG") or default_config_path())
    if file.exists():
        import tomllib  # only where there is a file: most runs have none

        from lltui.paths import NotASmallFile, read_small_file

        try:
            data = tomllib.loads(read_small_file(file).decode("utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file}: {exc}") from None
        except (OSError, UnicodeDecodeError, NotASmallFile) as exc:
            raise ConfigError(f"{file}: cannot read: {exc}") from None
        settings = replace(_from_mapping(data, settings, str(file)), config_path=str(file))
    elif explicit:
        raise ConfigError(f"{file}: no such config file")
    env_layer: dict[str, Any] = {}
    for key in ("interval", "theme", "source", "readonly", "energy_price"):
        value = env.get(f"LLTUI_{key.upper()}")
        if value:
            env_layer[key] = value
    if env_layer:
        settings = _from_mapping(env_layer, settings, "environment (LLTUI_*)")
    if cli:
        given = {k: v for k, v in cli.items() if v is not None and k != "served"}
        settings = replace(settings, served=bool(cli.get("served")))
        if given:
            settings = _from_mapping(given, settings, "command line")
    return settings

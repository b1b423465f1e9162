import pytest


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    """No test reads the user's config, themes or caches by accident."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for var in ("LLTUI_CONFIG", "LLTUI_INTERVAL", "LLTUI_THEME", "LLTUI_SOURCE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "config" / "lltui"

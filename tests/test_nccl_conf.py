"""NCCL's configuration files (~/.nccl.conf, $NCCL_CONF_FILE, /etc/nccl.conf) read as NCCL
reads them: `lltui nccl` looked at the environment only."""

import json

import pytest

from lltui.core.nccl import conf
from lltui.core.nccl.conf import conf_paths, parse_conf
from lltui.services.nccl import nccl_report


@pytest.fixture
def rig(tmp_path, monkeypatch):
    """A home with a .nccl.conf, a system file in place of /etc/nccl.conf, and the report
    for an environment (no libnccl: the newest NCCL's rules)."""
    home = tmp_path / "home"
    home.mkdir()
    system = tmp_path / "etc-nccl.conf"
    monkeypatch.setattr(conf, "SYSTEM_CONF", str(system))
    missing = str(tmp_path / "libnccl.so.2")

    def report(environ):
        return nccl_report(f"replay:{tmp_path / 'r.jsonl'}", lib_path=missing, environ=environ)

    return home, system, report


def test_values_from_the_files_apply_as_nccl_applies_them(rig):
    home, system, report = rig
    (home / ".nccl.conf").write_bytes(
        b"# comment=ignored\n"
        b"NCCL_DEBUG=INFO\r\n"  # CRLF: the \r is dropped
        b"NCCL_P2P_DISABLE=1\n"
        b"NCCL_DEBUG=WARN\n"  # the first line to set a name wins
        b"NCCL_IB_DISABLE=1\n"  # the environment wins over the files
        b"no equals sign\n"
        b"NCCL_SOCKET_IFNAME = eth0\n"  # nothing is trimmed: a name NCCL never reads
    )
    system.write_text("NCCL_P2P_DISABLE=0\nNCCL_SHM_DISABLE=1\n")
    r = report({"HOME": str(home), "NCCL_IB_DISABLE": "0"})
    user, etc = f"{home}/.nccl.conf", str(system)
    assert r.env["NCCL_DEBUG"] == "INFO" and r.env["NCCL_P2P_DISABLE"] == "1"
    assert r.env["NCCL_IB_DISABLE"] == "0" and r.env["NCCL_SHM_DISABLE"] == "1"
    assert r.env["NCCL_SOCKET_IFNAME"] is None
    assert r.env_from == {
        "NCCL_P2P_DISABLE": f"{user}:3",
        "NCCL_SHM_DISABLE": f"{etc}:2",
        "NCCL_IB_DISABLE": "environment",
        "NCCL_DEBUG": f"{user}:2",
        "NCCL_SOCKET_IFNAME ": f"{user}:7",
    }
    codes = [f.code for f in r.findings]
    assert "p2p-disabled" in codes and "debug-info" in codes  # findings see the file's values
    assert "conf-spaced-name" in codes
    overridden = [f.message for f in r.findings if f.code == "conf-overridden"]
    assert overridden == [
        f"{user}:4 sets NCCL_DEBUG=WARN, which NCCL does not apply: {user}:2 sets it first",
        f"{user}:5 sets NCCL_IB_DISABLE=1, which NCCL does not apply: the environment sets "
        "it first",
        f"{etc}:1 sets NCCL_P2P_DISABLE=0, which NCCL does not apply: {user}:3 sets it first",
    ]
    files = r.to_json()["conf_files"]
    assert [(f["path"], f["why"], f["status"]) for f in files] == [
        (user, "~/.nccl.conf", "read"),
        (etc, "system", "read"),
    ]


def test_nccl_conf_file_replaces_the_home_file(rig, tmp_path):
    home, _, report = rig
    (home / ".nccl.conf").write_text("NCCL_DEBUG=INFO\n")
    mine = tmp_path / "mine.conf"
    mine.write_text("NCCL_DEBUG=WARN\n")
    r = report({"HOME": str(home), "NCCL_CONF_FILE": str(mine)})
    assert r.env["NCCL_DEBUG"] == "WARN" and r.env_from["NCCL_DEBUG"] == f"{mine}:1"
    assert [f["why"] for f in r.conf_files] == ["NCCL_CONF_FILE", "system"]
    r = report({"HOME": str(home), "NCCL_CONF_FILE": "~/mine.conf"})
    assert r.env["NCCL_DEBUG"] is None  # neither that file (no ~ expansion) nor the home one
    unread = [f.message for f in r.findings if f.code == "conf-file-unread"]
    assert unread and "not found (NCCL does not expand ~)" in unread[0]


def test_the_files_an_older_nccl_reads():
    env = {"HOME": "/env-home", "NCCL_CONF_FILE": "/x.conf"}
    assert conf_paths(env, (2, 22, 3), "/pw")[0] == ("/pw/.nccl.conf", "~/.nccl.conf")
    assert conf_paths(env, (2, 29, 7), "/pw")[0] == ("/x.conf", "NCCL_CONF_FILE")
    assert conf_paths({"HOME": "/env-home"}, (2, 29, 7), "/pw")[0][0] == "/pw/.nccl.conf"
    assert conf_paths({"HOME": "/env-home"}, (2, 30, 3), "/pw")[0][0] == "/env-home/.nccl.conf"
    assert parse_conf("f", b"A=1\r\n", (2, 29, 7))[0].value == "1\r"  # kept before 2.30
    assert parse_conf("f", b"A=1\r\n", (2, 30, 3))[0].value == "1"


def test_cli_text_and_json_say_where_each_value_came_from(rig, monkeypatch, capsys):
    from lltui.cli import main

    home, system, _ = rig
    (home / ".nccl.conf").write_text("NCCL_P2P_LEVEL=NVL\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("NCCL_CONF_FILE", raising=False)
    monkeypatch.delenv("NCCL_P2P_LEVEL", raising=False)
    monkeypatch.setenv("LLTUI_NCCL_LIB", str(home / "libnccl.so.2"))
    main(["nccl", "--source", f"replay:{home / 'r.jsonl'}", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["env"]["NCCL_P2P_LEVEL"] == "NVL"
    assert data["env_from"]["NCCL_P2P_LEVEL"] == f"{home}/.nccl.conf:1"
    main(["nccl", "--source", f"replay:{home / 'r.jsonl'}"])
    out = capsys.readouterr().out
    level = next(ln for ln in out.splitlines() if "NCCL_P2P_LEVEL" in ln)
    assert level.endswith(f"[{home}/.nccl.conf:1]") and "NVL" in level
    assert f"  {home}/.nccl.conf (~/.nccl.conf): 1 setting, 1 applied" in out
    assert f"  {system} (system): not found" in out


def test_the_view_shows_the_file_line_beside_the_value():
    from lltui.app.screens.nccl import env_entries

    entries, _ = env_entries({"NCCL_DEBUG": "INFO"}, (), {"NCCL_DEBUG": "/h/.nccl.conf:2"})
    assert entries[0][1].endswith(r"\[/h/.nccl.conf:2][/]")


def test_a_secret_in_a_conf_file_is_masked_wherever_it_is_shown(rig, monkeypatch, capsys):
    """A value whose name says it is a secret was masked in the environment only: set by
    ~/.nccl.conf, $NCCL_CONF_FILE or /etc/nccl.conf it was printed whole in conf_files, in a
    finding's hint ('write NCCL_NET_PLUGIN_TOKEN=...') and message, and so in lltui report."""
    from lltui.app.state.nccl import read_report
    from lltui.cli import main

    home, system, _ = rig
    (home / ".nccl.conf").write_text("NCCL_NET_PLUGIN_TOKEN =hunter9\nNCCL_IB_TOKEN= hunter8\n")
    mine = home / "mine.conf"
    mine.write_text("NCCL_IB_TOKEN=hunter7\nNCCL_PLUGIN_TOKEN =hunter6\n")
    system.write_text("NCCL_NET_PLUGIN_TOKEN=hunter5\nNCCL_DB_PASSWORD=hunter4\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NCCL_IB_TOKEN", "hunter3")  # its lines in the files are overridden
    monkeypatch.delenv("NCCL_CONF_FILE", raising=False)
    monkeypatch.setenv("LLTUI_NCCL_LIB", str(home / "libnccl.so.2"))
    source = f"replay:{home / 'r.jsonl'}"
    shown = []
    for conf_file in (None, str(mine)):
        if conf_file:
            monkeypatch.setenv("NCCL_CONF_FILE", conf_file)
        view, _ = read_report(source)  # what the NCCL view shows
        assert view is not None and view.env["NCCL_IB_TOKEN"] == "***"
        assert {"conf-spaced-name", "conf-overridden"} <= {f.code for f in view.findings}
        shown += [f"{f.message} {f.hint}" for f in view.findings]
        shown += [str(view.conf_files), str(view.env)]
        for argv in (["nccl"], ["nccl", "--json"], ["report"], ["report", "--json"]):
            main([*argv, "--source", source])
            shown.append(capsys.readouterr().out)
    everything = "\n".join(shown)
    assert "NCCL_NET_PLUGIN_TOKEN" in everything and "hunter" not in everything
    assert "write NCCL_NET_PLUGIN_TOKEN=***" in everything

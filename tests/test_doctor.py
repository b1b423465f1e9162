import json

from lltui.cli import main
from lltui.core.doctor import ERROR, MISSING, OK, Check, checks_ok, checks_to_text
from lltui.sources import doctor


def test_doctor_without_a_driver_says_what_is_missing(capsys, monkeypatch):
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", "/nonexistent/llama-server")
    code = main(["doctor", "--json"])
    data = json.loads(capsys.readouterr().out)
    names = {c["name"]: c for c in data["checks"]}
    assert {"nvml", "nvidia-smi", "libnccl", "llama-server"} <= set(names)
    # this machine has no NVIDIA driver: NVML is missing, monitoring is not possible
    assert names["nvml"]["status"] == "missing" and names["nvml"]["hint"]
    assert data["ok"] is False and code == 1
    assert names["llama-server"]["status"] == "missing"
    assert "lltui llama install" in names["llama-server"]["hint"]


def test_doctor_text_has_no_traceback(capsys):
    main(["doctor"])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    assert "nvml" in out.out


def test_essential_checks_decide_ok():
    good = [Check("driver", OK, "loaded", essential=True), Check("libnccl", MISSING, "none")]
    assert checks_ok(good)
    assert "GPU monitoring works here" in checks_to_text(good)
    bad = [Check("nvml", ERROR, "broken", essential=True)]
    assert not checks_ok(bad)


def test_nvidia_smi_check_reports_a_failing_binary(monkeypatch, tmp_path):
    import subprocess

    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate'\nexit 9\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    check = doctor.check_nvidia_smi(subprocess.run)
    assert check.status == ERROR and "could not communicate" in check.detail

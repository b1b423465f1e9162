import json

from support.fake_pynvml import NVML_ERROR_LIBRARY_NOT_FOUND, FakeNvml, make_gpus

from lltui.cli import main
from lltui.core.doctor import ERROR, MISSING, OK, Check, checks_ok, checks_to_text
from lltui.services import doctor


def _no_driver(monkeypatch, tmp_path):
    """A machine without the NVIDIA driver, whatever this one has: NVML's library is not
    found and no nvidia-smi is on the PATH."""
    fake = FakeNvml(make_gpus(1)).install(monkeypatch)
    fake.init_error = NVML_ERROR_LIBRARY_NOT_FOUND
    monkeypatch.setenv("PATH", str(tmp_path))


def test_doctor_without_a_driver_says_what_is_missing(capsys, monkeypatch, tmp_path):
    _no_driver(monkeypatch, tmp_path)
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", "/nonexistent/llama-server")
    code = main(["doctor", "--json"])
    data = json.loads(capsys.readouterr().out)
    names = {c["name"]: c for c in data["checks"]}
    assert {"nvml", "nvidia-smi", "libnccl", "llama-server"} <= set(names)
    # no NVIDIA driver: NVML is missing, monitoring is not possible
    assert names["nvml"]["status"] == "missing" and names["nvml"]["hint"]
    assert data["ok"] is False and code == 1
    assert names["llama-server"]["status"] == "missing"
    assert "lltui llama install" in names["llama-server"]["hint"]


def test_doctor_and_gpus_give_one_reason_for_no_driver(capsys, monkeypatch, tmp_path):
    """doctor said "libnvidia-ml.so.1 not found" where gpus and fit said "no /dev/nvidiactl
    or /proc/driver/nvidia here", of the same machine."""
    import sys

    from lltui.sources.gpu import kinds

    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setattr(kinds, "NVIDIA_DRIVER_PATHS", ("/nonexistent/nvidiactl",))
    monkeypatch.setenv("PATH", str(tmp_path))
    main(["doctor", "--json"])
    names = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert names["nvml"]["detail"] == kinds.NO_NVIDIA_DRIVER
    assert "install the NVIDIA driver" in names["nvml"]["hint"]
    assert main(["gpus", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)
    assert f"no NVIDIA GPU here: {kinds.NO_NVIDIA_DRIVER}" in gpus["simulated_reason"]


def test_topo_gives_the_reason_for_no_driver_the_others_give(capsys, monkeypatch, tmp_path):
    """topo said "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)" where gpus, doctor
    and watch said "(no /dev/nvidiactl or /proc/driver/nvidia here)": it loaded nvidia-ml-py
    to read the topology without looking for the driver first, and with the binding loaded
    the rig behind it was opened as if the driver were there."""
    import sys

    from lltui.sources.gpu import kinds

    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setattr(kinds, "NVIDIA_DRIVER_PATHS", ("/nonexistent/nvidiactl",))
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["topo", "--json"]) == 0
    topo = json.loads(capsys.readouterr().out)
    assert main(["gpus", "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)
    assert topo["simulated_reason"] == gpus["simulated_reason"]
    assert f"no NVIDIA GPU here: {kinds.NO_NVIDIA_DRIVER}" in topo["simulated_reason"]


def test_doctor_with_a_driver_says_monitoring_works(capsys, monkeypatch, tmp_path):
    FakeNvml(make_gpus(2)).install(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    main(["doctor", "--json"])
    names = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert names["nvml"]["status"] == "ok"
    assert names["nvidia-smi"]["status"] == "missing"


def test_doctor_text_has_no_traceback(capsys, monkeypatch, tmp_path):
    _no_driver(monkeypatch, tmp_path)
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
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate'\nexit 9\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    check = doctor.check_nvidia_smi()
    assert check.status == ERROR and "could not communicate" in check.detail


def test_doctor_with_every_gpu_lost_does_not_say_monitoring_works(capsys, monkeypatch, tmp_path):
    fake = FakeNvml(make_gpus(2)).install(monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))
    fake.lose(1)
    main(["doctor", "--json"])
    names = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert names["gpus"]["status"] == "error" and "GPU1" in names["gpus"]["detail"]
    fake.lose(0)
    assert main(["doctor"]) == 1
    out = capsys.readouterr().out
    assert "every GPU is lost" in out and "GPU monitoring works" not in out


def test_doctor_names_a_config_file_lltui_cannot_use(capsys, monkeypatch, tmp_path):
    """Every command stops on a broken config file; doctor said nothing of it."""
    _no_driver(monkeypatch, tmp_path)
    bad = tmp_path / "config.toml"
    bad.write_text("interval = [\n")
    main(["--config", str(bad), "doctor", "--json"])
    names = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert names["config"]["status"] == ERROR and str(bad) in names["config"]["detail"]
    good = tmp_path / "good.toml"
    good.write_text("interval = 2\n")
    main(["--config", str(good), "doctor", "--json"])
    names = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert names["config"]["status"] == OK


def test_the_text_wraps_to_the_terminal_under_its_column():
    """`COLUMNS=80 lltui doctor` printed lines of 100 to 165 characters; a pipe (no width)
    keeps one line a check."""
    checks = [
        Check("libnccl", OK, "/a/very/long/path/" + "x" * 60 + "/libnccl.so.2", version="2.32.3"),
        Check("nvml", MISSING, "NVIDIA driver not loaded", hint="install the driver " * 6),
    ]
    wrapped = checks_to_text(checks, 80).splitlines()
    long = [line for line in wrapped if len(line) > 80]
    assert len(long) == 1 and long[0].endswith("/libnccl.so.2")  # a path is never cut
    assert any(line.startswith(" " * 16 + "-> ") for line in wrapped)
    assert "/a/very/long/path/" + "x" * 60 + "/libnccl.so.2" in "\n".join(wrapped)  # whole
    assert len(checks_to_text(checks).splitlines()) == 4  # two checks, a hint, the verdict

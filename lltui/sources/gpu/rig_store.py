"""What this rig measured of itself, kept under the XDG data dir
(``~/.local/share/lltui/bench/``), one JSON file per rig: the GPU models in CUDA order, the
NVIDIA driver and the host CPU name it; the llama.cpp build, the date, the fitted
:class:`Calibration` and the measured points (the most recent :data:`MAX_POINTS`) go in it.

The driver is read from ``/proc/driver/nvidia/version`` (no NVML needed for a lookup), so a
prediction finds its rig's calibration without starting anything."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lltui import paths
from lltui.core.hardware.calibration import Calibration

STORE_FORMAT = 1
MAX_POINTS = 64
_DRIVER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(?P<v>\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True, slots=True)
class RigIdentity:
    """What a calibration belongs to."""

    gpus: tuple[str, ...]  # GPU models in CUDA order; empty: the CPU alone
    driver: str | None
    cpu: str

    @property
    def key(self) -> str:
        text = json.dumps([list(self.gpus), self.driver, self.cpu])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        gpus = ", ".join(self.gpus) if self.gpus else "no GPU"
        driver = f", driver {self.driver}" if self.driver else ""
        return f"{gpus}{driver}; {self.cpu}"


@dataclass(frozen=True, slots=True)
class StoredPoint:
    """One llama-bench result and the uncalibrated prediction split by where time goes."""

    model: str
    config: str  # the llama-bench flags of its run
    test: str
    decode: bool
    measured_tps: float
    predicted_tps: float
    gpu_s: float
    host_s: float
    other_s: float
    date: str
    source: str = "llama-bench"  # or "llama-server" for a served request's timings


@dataclass(frozen=True, slots=True)
class RigRecord:
    rig: RigIdentity
    llama_build: str
    calibration: Calibration
    points: tuple[StoredPoint, ...] = field(default_factory=tuple)


def driver_version(proc: str = "/proc/driver/nvidia/version") -> str | None:
    try:
        text = Path(proc).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = _DRIVER.search(text)
    return m.group("v") if m else None


def store_dir(env: Mapping[str, str] | None = None) -> Path:
    return paths.data_dir(env) / "bench"


def record_path(rig: RigIdentity, env: Mapping[str, str] | None = None) -> Path:
    return store_dir(env) / f"rig-{rig.key}.json"


def load(rig: RigIdentity, env: Mapping[str, str] | None = None) -> RigRecord | None:
    """The stored record of this rig, or None (none yet, or unreadable: a fresh start)."""
    try:
        raw = json.loads(record_path(rig, env).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    try:
        return _decode(raw)
    except (KeyError, TypeError, ValueError):
        return None


def _decode(raw: dict) -> RigRecord:
    if raw.get("format") != STORE_FORMAT:
        raise ValueError("another format")
    r = raw["rig"]
    rig = RigIdentity(tuple(r["gpus"]), r.get("driver"), r["cpu"])
    c = raw["calibration"]
    cal = Calibration(
        rig=rig.describe(),
        date=str(c["date"]),
        gpu_decode=float(c["gpu_decode"]),
        gpu_prefill=float(c["gpu_prefill"]),
        host_decode=float(c["host_decode"]),
        host_prefill=float(c["host_prefill"]),
        points=int(c["points"]),
    )
    points = tuple(StoredPoint(**p) for p in raw.get("points", []))
    return RigRecord(rig, str(raw.get("llama_build", "")), cal, points)


def save(record: RigRecord, env: Mapping[str, str] | None = None) -> Path:
    """Write the record (atomically; the newest MAX_POINTS points kept)."""
    path = record_path(record.rig, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    cal = record.calibration
    raw = {
        "format": STORE_FORMAT,
        "rig": {"gpus": list(record.rig.gpus), "driver": record.rig.driver, "cpu": record.rig.cpu},
        "llama_build": record.llama_build,
        "calibration": {
            "date": cal.date,
            "gpu_decode": cal.gpu_decode,
            "gpu_prefill": cal.gpu_prefill,
            "host_decode": cal.host_decode,
            "host_prefill": cal.host_prefill,
            "points": cal.points,
        },
        "points": [asdict(p) for p in record.points[-MAX_POINTS:]],
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def merged_points(old: RigRecord | None, new: Sequence[StoredPoint]) -> tuple[StoredPoint, ...]:
    """The stored points and the new ones, a newer result of the same run replacing the old."""
    keep: dict[tuple[str, str, str, str], StoredPoint] = {}
    for p in [*(old.points if old else ()), *new]:
        keep.pop((p.model, p.config, p.test, p.source), None)
        keep[(p.model, p.config, p.test, p.source)] = p
    return tuple(keep.values())[-MAX_POINTS:]

"""What this rig measured of itself, kept under the XDG data dir
(``~/.local/share/lltui/bench/``), one JSON file per rig: the GPU models in CUDA order, the
NVIDIA driver and the host CPU name it; the llama.cpp build, the date, the fitted
:class:`Calibration` and the measured points (the most recent :data:`MAX_POINTS`) go in it.

The driver is read from ``/proc/driver/nvidia/version`` (no NVML needed for a lookup), so a
prediction finds its rig's calibration without starting anything.

Every fit, quant, launch and bench reads the file, so it is read defensively: at most
:data:`MAX_STORE_BYTES`, nested at most :data:`MAX_DEPTH` deep, each point checked on its
own (a point whose speeds are not finite and above zero is skipped and counted, the good ones
kept). A file that cannot be read at all is never overwritten: it is renamed
``rig-KEY.json.unreadable-TIMESTAMP`` beside itself (one fitted against another speed model:
``.stale-TIMESTAMP``), said once (stderr, or the caller's notes), and the rig starts afresh.
Writes go to a private temporary file renamed over the old one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import stat
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from lltui import paths
from lltui.core.hardware.calibration import Calibration
from lltui.core.speed.calibration import (
    SCALE_LIMIT,
    MeasuredPoint,
    far_off,
    fit_calibration,
)
from lltui.core.speed.params import params_mark

STORE_FORMAT = 1
MAX_POINTS = 64
MAX_SERVED = 16  # of them, served requests' (the newest; each launch keeps one of a kind)
SERVED = "llama-server"  # a point's source when a served request measured it
MAX_STORE_BYTES = 1 << 20  # MAX_POINTS points take about 30 KiB
MAX_DEPTH = 8  # the format nests three deep
SCALES = ("gpu_decode", "gpu_prefill", "host_decode", "host_prefill", "copy", "reduce")
NEWER_SCALES = ("copy", "reduce")  # a store written before them has none: 1.0
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_told: set[str] = set()  # stores already said to be unreadable, by path
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
    source: str = "llama-bench"  # or SERVED for a served request's timings
    copy_s: float = 0.0  # of the prediction: copies from host memory across the link
    reduce_s: float = 0.0  # and -sm tensor's all-reduces

    def measured(self) -> MeasuredPoint:
        """The point as the calibration fit takes it."""
        return MeasuredPoint(
            decode=self.decode,
            measured_s=1.0 / self.measured_tps if self.measured_tps > 0 else 0.0,
            gpu_s=self.gpu_s,
            host_s=self.host_s,
            other_s=self.other_s,
            served=self.source == SERVED,
            date=self.date,
            copy_s=self.copy_s,
            reduce_s=self.reduce_s,
        )

    @property
    def usable(self) -> bool:
        """Speeds that are speeds (finite, above zero) and a prediction's parts that are."""
        return 0 < self.predicted_tps < math.inf and self.measured().usable


@dataclass(frozen=True, slots=True)
class RigRecord:
    rig: RigIdentity
    llama_build: str
    calibration: Calibration
    points: tuple[StoredPoint, ...] = field(default_factory=tuple)
    skipped: int = 0  # points in the file that were no measurement (NaN, 0, negative ...)


class StoreUnreadable(ValueError):
    """A store file this version cannot read at all; ``str()`` says why in a few words."""


class StoreStale(StoreUnreadable):
    """A store whose calibration was fitted against another speed model's predictions (an
    earlier or later lltui's constants or rules): its scales would skew these predictions."""


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


# --- reading ---------------------------------------------------------------------------------


def load(
    rig: RigIdentity,
    env: Mapping[str, str] | None = None,
    *,
    say: Callable[[str], None] | None = None,
) -> RigRecord | None:
    """The stored record of this rig, or None: none yet, or one that cannot be read (set
    aside, and said through ``say``: one line on stderr by default)."""
    path = record_path(rig, env)
    try:
        record = decode_store(_read(path))
        if record.rig != rig:
            raise StoreUnreadable("it names another rig")
    except OSError:
        return None  # none yet, or not ours to read: nothing to set aside
    except StoreUnreadable as exc:
        with contextlib.suppress(OSError):
            set_aside(path, exc, say)
        return None
    return record


def _read(path: Path) -> bytes:
    """At most one byte past the cap, from a regular file only (never waits on a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):  # (before fdopen, which refuses a folder with an OSError)
        os.close(fd)
        raise StoreUnreadable(
            "a folder, not a file" if stat.S_ISDIR(mode) else "not a regular file"
        )
    with os.fdopen(fd, "rb") as f:
        return f.read(MAX_STORE_BYTES + 1)


def decode_store(data: str | bytes) -> RigRecord:
    """A store file's content as a record (StoreUnreadable: not one). Points that are no
    measurement are skipped and counted; the calibration is then fitted anew from the rest."""
    if len(data) > MAX_STORE_BYTES:
        raise StoreUnreadable(f"larger than {MAX_STORE_BYTES >> 10} KiB")
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise StoreUnreadable("not UTF-8 text") from None
    if _depth(text) > MAX_DEPTH:
        raise StoreUnreadable(f"nested deeper than {MAX_DEPTH}")
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StoreUnreadable(f"not JSON: {str(exc)[:80]}") from None
    if not isinstance(raw, dict):
        raise StoreUnreadable("not a JSON object")
    if raw.get("format") != STORE_FORMAT:
        raise StoreUnreadable(f"format {str(raw.get('format'))[:20]}, not {STORE_FORMAT}")
    if raw.get("speed_model") != params_mark():
        raise StoreStale("measured against another speed model (an earlier or later lltui's)")
    try:
        rig = _rig(raw["rig"])
        cal = _calibration(raw["calibration"], rig)
        build = raw.get("llama_build", "")
        listed = raw.get("points", [])
        if not isinstance(build, str) or not isinstance(listed, list):
            raise TypeError("a field of the wrong type")
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise StoreUnreadable(f"not a calibration store ({str(exc)[:60]})") from None
    points = tuple(p for p in map(_point, listed) if p is not None)
    skipped = len(listed) - len(points)
    measured = [p.measured() for p in points]
    wild = any(far_off(m) for m in measured if not m.served)
    if skipped or "held" not in raw["calibration"] or wild:
        # fitted with what is now skipped, before served points were held until several
        # agree (one request on a busy host could move every prediction), or with a point
        # too far off to be the rig's speed (it set its scale to the limit): fitted anew
        cal = fit_calibration(cal.rig, cal.date, measured)
    return RigRecord(rig, build, cal, points, skipped)


def _depth(text: str) -> int:
    """How deep the text's arrays and objects nest (strings left out), without recursion."""
    depth = deepest = 0
    for m in _BRACKET.finditer(_STRING.sub('""', text)):
        depth += 1 if m.group() in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _rig(r: object) -> RigIdentity:
    if not isinstance(r, dict):
        raise TypeError("rig")
    gpus, driver, cpu = r["gpus"], r.get("driver"), r["cpu"]
    if not (isinstance(gpus, list) and all(isinstance(g, str) for g in gpus)):
        raise TypeError("rig.gpus")
    if not (isinstance(cpu, str) and (driver is None or isinstance(driver, str))):
        raise TypeError("rig.cpu")
    return RigIdentity(tuple(gpus), driver, cpu)


def _calibration(c: object, rig: RigIdentity) -> Calibration:
    if not isinstance(c, dict):
        raise TypeError("calibration")
    scales: dict[str, Any] = {}
    for name in SCALES:
        v = c.get(name, 1.0) if name in NEWER_SCALES else c[name]
        if not _number(v) or not 1 / SCALE_LIMIT - 1e-9 <= v <= SCALE_LIMIT + 1e-9:
            raise ValueError(f"calibration.{name} {str(v)[:20]}")
        scales[name] = float(v)
    counts: dict[str, Any] = {}
    for name in ("points", "held"):
        n = c.get(name, 0)
        if not (isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 10 * MAX_POINTS):
            raise ValueError(f"calibration.{name}")
        counts[name] = n
    return Calibration(rig=rig.describe(), date=str(c["date"])[:40], **scales, **counts)


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


_POINT_TEXT = ("model", "config", "test", "date", "source")
_POINT_NUMBERS = ("measured_tps", "predicted_tps", "gpu_s", "host_s", "other_s")
_NEWER_NUMBERS = ("copy_s", "reduce_s")  # a point kept before them has none: 0


def _point(p: object) -> StoredPoint | None:
    """One stored point, or None where it is no measurement (skipped, counted)."""
    if not isinstance(p, dict) or not isinstance(p.get("decode"), bool):
        return None
    if not all(isinstance(p.get(k, ""), str) for k in _POINT_TEXT):
        return None
    if not all(_number(p.get(k)) for k in _POINT_NUMBERS):
        return None
    if not all(_number(p.get(k, 0.0)) for k in _NEWER_NUMBERS):
        return None
    known = {f.name for f in fields(StoredPoint)}
    try:
        point = StoredPoint(**{k: v for k, v in p.items() if k in known})
    except TypeError:  # a field missing
        return None
    return point if point.usable else None


# --- writing ---------------------------------------------------------------------------------


def save(
    record: RigRecord,
    env: Mapping[str, str] | None = None,
    *,
    say: Callable[[str], None] | None = None,
) -> Path:
    """Write the record: the newest MAX_POINTS usable points, to a private temporary file
    renamed over the old one. A file there that cannot be read is set aside first, never
    overwritten (OSError where it cannot be)."""
    path = record_path(record.rig, env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with contextlib.suppress(FileNotFoundError):
        try:
            decode_store(_read(path))
        except StoreUnreadable as exc:
            set_aside(path, exc, say)
    text = encode_store(record)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:  # mkstemp made it 0600
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def encode_store(record: RigRecord) -> str:
    """The file's text: strict JSON (a value that is not finite cannot get in)."""
    cal = record.calibration
    raw = {
        "format": STORE_FORMAT,
        "speed_model": params_mark(),
        "rig": {"gpus": list(record.rig.gpus), "driver": record.rig.driver, "cpu": record.rig.cpu},
        "llama_build": record.llama_build,
        "calibration": {
            "date": cal.date,
            **{name: getattr(cal, name) for name in SCALES},
            "points": cal.points,
            "held": cal.held,
        },
        "points": [asdict(p) for p in record.points if p.usable][-MAX_POINTS:],
    }
    return json.dumps(raw, indent=1, allow_nan=False) + "\n"


# what a store set aside is renamed with (NAME.KIND-TIMESTAMP), and why it was
ASIDE_KINDS = {"unreadable": "could not be read", "stale": "of another speed model"}


def kept_aside(path: Path) -> tuple[tuple[str, str], ...]:
    """(file, why) of each store set aside beside ``path``, in name order."""
    found = []
    for kind, why in ASIDE_KINDS.items():
        found += [(str(p), why) for p in path.parent.glob(f"{path.name}.{kind}-*")]
    return tuple(sorted(found))


def set_aside(
    path: Path, problem: StoreUnreadable, say: Callable[[str], None] | None = None
) -> Path:
    """Rename a store that cannot be read to ``NAME.unreadable-TIMESTAMP`` beside it (one
    of another speed model, :class:`StoreStale`: ``NAME.stale-TIMESTAMP``) and say so once
    (OSError: it could not be renamed; said once too)."""
    tell = say or _say
    why, stale = str(problem), isinstance(problem, StoreStale)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    kind = "stale" if stale else "unreadable"
    aside = path.with_name(f"{path.name}.{kind}-{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.{kind}-{stamp}-{n}")
    try:
        os.rename(path, aside)
    except OSError as exc:
        if str(path) not in _told:
            _told.add(str(path))
            tell(f"the calibration store {path} could not be read ({why}) nor set aside: {exc}")
        raise
    if stale:
        tell(f"the calibration in {path} was {why}; kept as {aside}: `lltui bench` measures anew")
    else:
        tell(f"the calibration store {path} could not be read ({why}); kept as {aside}, anew")
    return aside


def _say(line: str) -> None:
    from lltui.core.text import one_line

    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"lltui: {one_line(line)}\n")


@contextlib.contextmanager
def locked(env: Mapping[str, str] | None = None) -> Iterator[None]:
    """The store folder held against other lltui processes for one read-change-write (two
    launches that keep a point at once would otherwise lose one); unlocked where the
    folder cannot be made."""
    import fcntl

    folder = store_dir(env)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def merged_points(old: RigRecord | None, new: Sequence[StoredPoint]) -> tuple[StoredPoint, ...]:
    """The stored points and the new ones: a newer llama-bench result of the same run
    replaces the old; served requests each stay (several must agree), the newest
    MAX_SERVED of them."""
    keep: dict[tuple[str, str, str, str], StoredPoint] = {}
    served: list[StoredPoint] = []
    for p in [*(old.points if old else ()), *new]:
        if not p.usable:
            continue
        if p.source == SERVED:
            served.append(p)
            continue
        keep.pop((p.model, p.config, p.test, p.source), None)
        keep[(p.model, p.config, p.test, p.source)] = p
    return (*tuple(keep.values())[-(MAX_POINTS - MAX_SERVED) :], *served[-MAX_SERVED:])

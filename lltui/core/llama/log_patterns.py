"""The lines of llama-server's log, recognised: the line prefix, the patterns of the lines
the parser reads, and parsers of single lines (devices, the memory breakdown table)."""

from __future__ import annotations

import re
from typing import Any

from lltui.core.llama.log_models import DeviceInfo, LogLine, MemoryBreakdownRow

# --- line splitting ----------------------------------------------------------------------

PREFIX = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ([IWED]) (.*)$", re.DOTALL)
JSON_LEVELS = {"info": "I", "warn": "W", "error": "E", "debug": "D"}


# What the parser reads of one line: llama-server's own lines are far shorter, and a longer
# one (a prompt dump, a mangled file) holds nothing it reads; the cut also keeps every run of
# digits below what int() converts.
MAX_PARSED_CHARS = 4096


def split_line(raw: str) -> LogLine:
    """Split the ``M.SS.mmm.uuu L`` prefix off a text line, when it has one."""
    line = raw.rstrip("\r\n")[:MAX_PARSED_CHARS]
    m = PREFIX.match(line)
    if not m:
        return LogLine(message=line)
    minutes, sec, ms, us, level, msg = m.groups()
    t_us = ((int(minutes) * 60 + int(sec)) * 1000 + int(ms)) * 1000 + int(us)
    return LogLine(message=msg, level=level, t_us=t_us, prefixed=True)


def strip_tag(message: str) -> str:
    """Drop the ``srv``/``cmn``/``slot``/``spec`` tag the server puts before a function name."""
    if len(message) > 5 and message[:4] in ("srv ", "cmn ", "slot", "spec") and message[4] == " ":
        return message[5:].lstrip()
    return message


# --- patterns ----------------------------------------------------------------------------

FUNC = re.compile(r"^(?P<func>[A-Za-z_~][\w~]*(?:\(\))?):\s?(?P<rest>.*)$", re.DOTALL)
# Written so that no two parts can take the same characters (a name has no space and no
# ": "; the description runs greedily to the last "(N MiB,"): matching stays linear on a
# mangled line of thousands of tabs. The description's spaces are stripped by the reader.
DEVICE_ROW = re.compile(
    r"^\s*(?:-\s+)?(?P<name>(?:[^\s:]|:(?!\s))+)\s*:\s(?P<desc>.*)"
    r"\((?P<total>\d+) MiB,\s*(?P<free>\d+) MiB free\)\s*$"
)
CUDA_FOUND = re.compile(r"found (\d+) (CUDA|ROCm|MUSA) devices")  # (count, backend prefix)
CUDA_DEVICE = re.compile(
    r"^\s*Device\s+(?P<idx>\d+):\s+(?P<name>.+?),\s+compute capability\s+(?P<maj>\d+)\.(?P<min>\d+)"
    r"(?:,\s+VMM:\s+(?P<vmm>\w+))?(?:,\s+VRAM:\s+(?P<vram>\d+)\s+MiB)?"
)
USING_DEVICE = re.compile(r"using device (?P<name>\S+) \((?P<inner>.*)\) - (?P<free>\d+) MiB free")
LOAD_START = re.compile(
    r"loading model tensors.*?\((?:load_mode = (?P<mode>[\w+]+)|mmap = (\w+))\)"
)
OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
REPEATING = re.compile(r"offloading (\d+) repeating layers to GPU")
LAYER_DEV = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
KV_LAYER_DEV = re.compile(r"^layer\s+(\d+): dev = (\S+)")
BUFFER = re.compile(
    r"^\s*(?P<name>\S+)\s+(?P<kind>model|KV|compute|output|RS)\s+buffer size\s*=\s*"
    r"(?P<mib>-?[\d.]+)\s*MiB"
)
KV_SIZE = re.compile(
    r"^size\s*=\s*(?P<size>[\d.]+) MiB \(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,\s*"
    r"(?P<seqs>[\d/]+) seqs\)(?:,\s*K \((?P<kt>\w+)\):\s*(?P<k>[\d.]+) MiB)?"
    r"(?:,\s*V \((?P<vt>\w+)\):\s*(?P<v>[\d.]+) MiB)?"
)
# the value's trailing spaces are stripped by the reader, not by a lazy match (quadratic)
CONTEXT_KV = re.compile(r"^(?P<key>[a-z_][a-z0-9_]*)\s+= (?P<value>.*\S)")
GRAPH = re.compile(r"graph: nodes = (\d+), splits = (\d+)")
LORA_BUFFER = re.compile(r"^\s*(?P<name>\S+)\s+LoRA buffer size\s*=\s*(?P<mib>[\d.]+)\s*MiB")
CLIP_BACKEND = re.compile(r"CLIP using (\S+) backend")
MMPROJ_ESTIMATE = re.compile(r"estimated worst-case memory usage of mmproj is ([\d.]+) MiB")
SLOTS = re.compile(r"initializing, n_slots = (\d+), n_ctx_slot = (\d+)")
LOADING_MODEL = re.compile(r"^loading model '(.*)'$")
LISTENING = re.compile(r"listening on (\S+?)(?: - starting the main loop)?\s*$")
HTTP_LISTENING = re.compile(r"HTTP server is listening, hostname: (\S+), port: (\d+)")
EXITING = re.compile(r"exiting due to (.+?)\s*$")
BUILD = re.compile(r"common_params_print_info: (build .+?)\s*$")
VERBOSITY = re.compile(r"verbosity = (\d+)")
_BREAKDOWN_NUMS = re.compile(r"[-\d=+() ]*")
BREAKDOWN_GPU = re.compile(
    r"^(-?\d+)\s*=\s*(-?\d+)\s*\+\s*\(\s*(-?\d+)\s*=\s*(-?\d+)\s*\+\s*(-?\d+)\s*\+\s*(-?\d+)\s*\)"
    r"\s*\+\s*(-?\d+)$"
)
BREAKDOWN_OTHER = re.compile(r"^(-?\d+)\s*=\s*(-?\d+)\s*\+\s*(-?\d+)\s*\+\s*(-?\d+)$")
FIT_PROJECTED = re.compile(
    r"projected to use (-?\d+) MiB of (device|host) memory vs\. (-?\d+) MiB of (?:free|total)"
)
FIT_PROJECTION_ROW = re.compile(
    r"^\s*-\s+(?P<dev>.+?):\s+(?P<total>-?\d+) total,\s+(?P<used>-?\d+) used,\s+"
    r"(?P<free>-?\d+) free vs\. target of\s+(?P<target>-?\d+)"
)
FIT_LAYERS_ROW = re.compile(
    r"^\s*-\s+(?P<dev>.+?):\s+(?P<layers>\d+) layers(?:\s+\(\s*(?P<over>\d+) overflowing\))?,"
    r"\s+(?P<used>-?\d+) MiB used,\s+(?P<free>-?\d+) MiB free"
)
FIT_TARGET = re.compile(
    r"cannot meet free memory target of (-?\d+) MiB, need to reduce device memory by (-?\d+) MiB"
)
FIT_CTX = re.compile(
    r"context size reduced from (\d+) to (\d+) -> need (-?\d+) MiB less memory in total"
)
FIT_TOOK = re.compile(r"fitting params to free memory took ([\d.]+) seconds")
ARG_ERROR = re.compile(r"^(?:error: invalid argument: \S+|error while handling argument .*)$")
OOM = re.compile(
    r"out of memory|insufficient memory|failed to allocate|unable to allocate|cudaMalloc failed",
    re.IGNORECASE,
)


# --- the parser ----------------------------------------------------------------------------


def classify_problem(message: str) -> str:
    """A word for what kind of failure an error line reports."""
    if OOM.search(message):
        return "oom"
    if "couldn't bind" in message:
        return "bind"
    if ARG_ERROR.match(message.strip()):
        return "argument"
    if "CUDA error" in message:
        return "cuda"
    if "GGML_ASSERT" in message or "GGML_ABORT" in message:
        return "abort"
    if "failed to load model" in message or "error loading model" in message:
        return "load"
    if "fit params" in message:
        return "fit"
    return "error"


def _breakdown_cells(text: str) -> tuple[str, str] | None:
    """(label, numbers) of a ``|   - NAME (DESC) | numbers |`` row, split at its last inner
    bar: linear, where one regex with a lazy label backtracks for long runs of spaces."""
    row = text.strip()
    if len(row) < 2 or row[0] != "|" or row[-1] != "|":
        return None
    head, sep, nums = row[1:-1].rpartition("|")
    dash = head.lstrip()
    if not sep or not head[:1].isspace() or not dash.startswith("-"):
        return None
    label = dash[1:]
    if not label[:1].isspace() or not head[-1:].isspace() or not label.strip():
        return None
    if not _BREAKDOWN_NUMS.fullmatch(nums.strip()):
        return None
    return label.strip(), nums.strip()


def parse_breakdown_row(text: str) -> MemoryBreakdownRow | None:
    """One ``|   - NAME (DESC) | numbers |`` row of the memory breakdown table."""
    cells = _breakdown_cells(text)
    if cells is None:
        return None
    label, nums = cells
    if g := BREAKDOWN_GPU.match(nums):
        total, free, self_, model, context, compute, unaccounted = (int(x) for x in g.groups())
        name, _, desc = label.partition(" ")
        desc = desc.strip()
        if desc.startswith("(") and desc.endswith(")"):
            desc = desc[1:-1]
        return MemoryBreakdownRow(
            kind="device",
            name=name,
            description=desc or None,
            total_mib=total,
            free_mib=free,
            self_mib=self_,
            model_mib=model,
            context_mib=context,
            compute_mib=compute,
            unaccounted_mib=unaccounted,
        )
    if o := BREAKDOWN_OTHER.match(nums):
        self_, model, context, compute = (int(x) for x in o.groups())
        return MemoryBreakdownRow(
            kind="host" if label == "Host" else "buffer_type",
            name=label,
            self_mib=self_,
            model_mib=model,
            context_mib=context,
            compute_mib=compute,
        )
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def breakdown_from_json(row: Any) -> MemoryBreakdownRow | None:
    if not isinstance(row, dict):
        return None
    name, kind = row.get("name"), row.get("kind")
    numbers = [_int_or_none(row.get(k)) for k in ("self", "model", "context", "compute")]
    if not isinstance(name, str) or not isinstance(kind, str) or None in numbers:
        return None
    self_, model, context, compute = (int(n or 0) for n in numbers)
    desc = row.get("description")
    return MemoryBreakdownRow(
        kind=kind,
        name=name,
        self_mib=self_,
        model_mib=model,
        context_mib=context,
        compute_mib=compute,
        description=desc if isinstance(desc, str) else None,
        total_mib=_int_or_none(row.get("total")),
        free_mib=_int_or_none(row.get("free")),
        unaccounted_mib=_int_or_none(row.get("unaccounted")),
    )


def parse_list_devices(text: str) -> tuple[DeviceInfo, ...]:
    """The devices ``llama-server --list-devices`` prints (none on a CPU-only build)."""
    devices: list[DeviceInfo] = []
    in_list = False
    for raw in text.splitlines():
        line = split_line(raw).message
        if line.strip().startswith("Available devices"):
            in_list = True
            continue
        if not in_list:
            continue
        m = DEVICE_ROW.match(line)
        if m:
            devices.append(
                DeviceInfo(
                    name=m.group("name"),
                    description=m.group("desc").strip(),
                    total_mib=int(m.group("total")),
                    free_mib=int(m.group("free")),
                )
            )
    return tuple(devices)


# Lines the launcher waits for, exposed for it without a whole parser.
def is_ready_line(raw: str) -> str | None:
    """The URL if this line says the server is listening (and so ready), else None."""
    body = strip_tag(split_line(raw).message)
    m = FUNC.match(body)
    if not m or m.group("func") not in ("llama_server", "main"):
        return None
    rest = m.group("rest").strip()
    if lm := LISTENING.search(rest):
        return lm.group(1)
    return None

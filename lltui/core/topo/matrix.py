"""``nvidia-smi topo -m``: the matrix, parsed from what users paste, as frozen models.

The format: a header of column names (``GPUn``; ``NICn`` or NIC device names such as ``mlx5_0``;
then ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` on drivers that print them), one
row per device with one cell per device column (``X`` on the diagonal, ``NV#``, ``PIX``,
``PXB``, ``PHB``, ``NODE``, ``SYS``; ``SOC`` on old drivers) followed, on GPU rows, by the
affinity values, then a legend and, on newer drivers, a NIC legend (``NIC0: mlx5_0``).

Pastes arrive mangled: spaces for tabs, CRLF, prompts and prose around the matrix, cells run
together where tabs were lost (``NV12NV12``, ``SYS0-23``), columns cut by a narrow terminal,
legends cut short. The parser recovers what it can and records one warning per problem; it
never raises for any input. No matrix at all gives a :class:`Topology` with no GPUs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

CPU_AFFINITY = "cpu_affinity"
NUMA_AFFINITY = "numa_affinity"
GPU_NUMA_ID = "gpu_numa_id"
AFFINITY_COLUMNS = (CPU_AFFINITY, NUMA_AFFINITY, GPU_NUMA_ID)
COLUMN_TITLES = {
    CPU_AFFINITY: "CPU Affinity",
    NUMA_AFFINITY: "NUMA Affinity",
    GPU_NUMA_ID: "GPU NUMA ID",
}

# What each cell means, in the legend's own terms.
LINK_MEANINGS: dict[str, str] = {
    "X": "the device itself",
    "NV#": "a bonded set of # NVLinks",
    "PIX": "PCIe through at most one PCIe bridge (switch)",
    "PXB": "PCIe through several PCIe bridges, not the host bridge",
    "PHB": "PCIe through a PCIe host bridge, typically the CPU",
    "NODE": "PCIe and the interconnect between host bridges within a NUMA node",
    "SYS": "PCIe and the interconnect between NUMA nodes, such as QPI, UPI or Infinity Fabric",
    "SOC": "PCIe and the link between CPU sockets; old drivers' name for SYS",
}
PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")
# Nearest first; NVLink is nearer than any PCIe path.
LINK_DISTANCE = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6, "SOC": 6}

# ``nvidia-smi topo -p2p r`` status codes.
P2P_MEANINGS: dict[str, str] = {
    "OK": "peer-to-peer works",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology not supported",
    "NS": "not supported",
    "DBR": "disabled by a driver registry key",
    "U": "unknown",
}

NO_MATRIX = (
    "no nvidia-smi topo -m matrix found (expected a header line `GPU0 GPU1 ...` "
    "and rows such as `GPU0  X  NV4 ...`)"
)

_LINK = r"NV\d+|NODE|SYS|SOC|PHB|PXB|PIX"
_LINK_FULL = re.compile(rf"(?:{_LINK}|X)\Z")
_LINK_PART = re.compile(_LINK)
_CODE_LIKE = re.compile(r"[A-Z][A-Z0-9#]{1,7}\Z")
_TAIL_OK = re.compile(rf"(?:{_LINK}|\d|N/A|\.\.|…)")
_CPULIST = re.compile(r"\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\Z")
_ELLIPSIS = re.compile(r"(?:\.{2,}|…)\Z")
_DEVICE_LABEL = re.compile(r"(?:GPU|NIC)\d+|mlx5_\d+")
_MERGED_LABELS = re.compile(r"(?:(?:GPU|NIC)\d+|mlx5_\d+)+\Z")
_DEVICE_NAME = re.compile(r"[A-Za-z][\w.:-]*\Z")
_GPU_LABEL = re.compile(r"GPU(\d+)\Z")
_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)")
_LEGEND_HEAD = re.compile(r"\s*Legend\s*:", re.I)
_NIC_LEGEND_HEAD = re.compile(r"\s*NIC\s+Legend\s*:", re.I)
_LEGEND_LINE = re.compile(r"\s*(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#)\s*=")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")
_SENTINEL = "\x00"
_AFFIX = r"Aff(?:i(?:n(?:i(?:ty?)?)?)?)?"  # "Affinity", or what a cut left of it
_HEADER_NAMES = (
    (NUMA_AFFINITY, re.compile(rf"NUMA\s*{_AFFIX}", re.I)),
    (GPU_NUMA_ID, re.compile(r"GPU\s*NUMA(?:\s*ID?)?", re.I)),
    (CPU_AFFINITY, re.compile(rf"CPU\s*{_AFFIX}", re.I)),
)
# Control characters other than tab, and the spaces web pages put in copied text.
_CLEAN = {c: None for c in (*range(0, 9), *range(11, 32), 127)} | {
    0xA0: " ",
    0x2007: " ",
    0x202F: " ",
    0x3000: " ",
    0xFEFF: None,
}
MAX_NV_LINKS = 36  # NVML_NVLINK_MAX_LINKS: no GPU has more


MAX_DEVICES = 256  # GPUs + NICs; a longer matrix is garbage, not a rig

Pair = tuple[str, str, str]  # (device a, device b, cell as printed)
Named = tuple[str, str]  # (device, value as printed)


@dataclass(frozen=True, slots=True)
class Topology:
    """One rig's topology. Values are the strings as printed; an absent column is ``None``.

    ``links`` holds GPU pairs (a before b in GPU order), ``gpu_nic_links`` (GPU, NIC) pairs;
    ``nics`` are NIC labels as columns or rows name them (``NIC0`` or ``mlx5_2``) and
    ``nic_names`` maps a label to its device name where known. ``unreliable`` names fields a
    mangled paste may have cut (their values are kept as printed).
    """

    gpus: tuple[str, ...] = ()
    nics: tuple[str, ...] = ()
    links: tuple[Pair, ...] = ()
    gpu_nic_links: tuple[Pair, ...] = ()
    nic_names: tuple[Named, ...] = ()
    cpu_affinity: tuple[Named, ...] | None = None
    numa_affinity: tuple[Named, ...] | None = None
    gpu_numa_id: tuple[Named, ...] | None = None
    p2p: tuple[Pair, ...] = ()  # P2P read status per GPU pair, where it was read (OK, TNS, ...)
    legend_complete: bool | None = None  # None: no legend in the text
    unreliable: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    source: str = "text"  # "text", "nvidia-smi", "nvml", "sim:PROFILE"
    _index: dict[frozenset[str], str] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def found(self) -> bool:
        """Whether there was a matrix at all."""
        return bool(self.gpus)

    def __post_init__(self) -> None:
        # pair -> cell, so a matrix of n devices renders in n^2 lookups, not n^4 scans
        index = {frozenset((x, y)): cell for x, y, cell in (*self.links, *self.gpu_nic_links)}
        object.__setattr__(self, "_index", index)

    def link(self, a: str, b: str) -> str | None:
        """The cell between two devices (GPU or NIC), either order; ``X`` for one device."""
        if a == b:
            return "X"
        return self._index.get(frozenset((a, b)))

    def link_map(self) -> dict[str, str]:
        return {f"{a}-{b}": cell for a, b, cell in self.links}

    def gpu_nic_map(self) -> dict[str, str]:
        return {f"{a}-{b}": cell for a, b, cell in self.gpu_nic_links}

    def nic_map(self) -> dict[str, str]:
        return dict(self.nic_names)

    def affinity(self, column: str) -> dict[str, str] | None:
        values = getattr(self, column)
        return None if values is None else dict(values)

    def p2p_map(self) -> dict[str, str]:
        return {f"{a}-{b}": status for a, b, status in self.p2p}


def gpu_index(label: str) -> int | None:
    """``"GPU3"`` -> 3."""
    m = _GPU_LABEL.match(label)
    return int(m.group(1)) if m else None


def nvlink_count(cell: str | None) -> int | None:
    """``"NV12"`` -> 12; None for a cell that is not NVLink."""
    if cell and cell.startswith("NV") and cell[2:].isdigit():
        return int(cell[2:])
    return None


def link_distance(cell: str | None) -> int:
    """How far apart a cell says two devices are: 0 self, 1 NVLink, 2..6 PCIe paths."""
    if cell is None:
        return 99
    if nvlink_count(cell) is not None:
        return LINK_DISTANCE["NV"]
    return LINK_DISTANCE.get(cell, 99)


def link_meaning(cell: str) -> str:
    n = nvlink_count(cell)
    if n is not None:
        return f"{n} bonded NVLink{'s' if n != 1 else ''}"
    return LINK_MEANINGS.get(cell, "not a code nvidia-smi documents")


def is_cpu_list(text: str) -> bool:
    """``0-23,48-71`` style, every range ascending."""
    if not _CPULIST.match(text):
        return False
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if hi and int(hi) < int(lo):
            return False
    return True


def decode_text(data: bytes) -> str:
    """Bytes of a saved topo file to text: UTF-8, UTF-16 (PowerShell's ``>``) or anything
    else with undecodable bytes replaced."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    head = data[:4096]
    if len(head) >= 8 and head.count(b"\x00") * 3 > len(head):
        # UTF-16 without a byte order mark: the NULs sit on the odd (LE) or even (BE) bytes.
        odd = head[1::2].count(b"\x00")
        even = head[0::2].count(b"\x00")
        return data.decode("utf-16-le" if odd >= even else "utf-16-be", errors="replace")
    return data.decode("utf-8", errors="replace")


# --- parsing ------------------------------------------------------------------------------


def _clean_line(raw: str) -> str:
    line = _ANSI.sub("", raw).translate(_CLEAN)
    stripped = line.lstrip()
    if stripped.startswith("|"):  # a markdown table
        line = line.replace("|", " ")
    elif stripped.startswith(">"):  # a markdown quote, or a prompt
        line = stripped.lstrip(">")
    return line.rstrip()


def _header_tokens(line: str) -> list[str]:
    """Column names of a header line; affinity columns come back as sentinel + key."""
    for key, pattern in _HEADER_NAMES:
        line = pattern.sub(f" {_SENTINEL}{key} ", line)
    out: list[str] = []
    for word in line.split():
        if _MERGED_LABELS.match(word):
            out.extend(_DEVICE_LABEL.findall(word))
        else:
            out.append(word)
    return out


def _is_header(tokens: list[str]) -> bool:
    if not tokens or tokens[0] != "GPU0":
        return False
    if len(tokens) == 1:
        return True
    second = tokens[1]
    return not (_LINK_FULL.match(second) or _LINK_PART.match(second) or second[:1].isdigit())


def _nv_before_list(word: str, start: int, end: int) -> tuple[str, int]:
    """``NV40-23``: the NVLink count ran into a CPU list; give the list the digits it needs."""
    digits = word[start + 2 : end]
    for k in range(len(digits) - 1, 0, -1):
        count = int(digits[:k])
        tail = digits[k:] + word[end:]
        first = re.match(r"[\d,-]+", tail)
        if 1 <= count <= MAX_NV_LINKS and first and is_cpu_list(first.group().rstrip(",-")):
            return "NV" + digits[:k], start + 2 + k
    return word[start:end], end


def _split_run(word: str, limit: int | None) -> tuple[list[str], str]:
    """Cells that ran together where a tab was lost: ``NV12NV12`` -> NV12, NV12."""
    parts: list[str] = []
    pos = 0
    while pos < len(word) and (limit is None or len(parts) < limit):
        m = _LINK_PART.match(word, pos)
        if not m:
            break
        tok, end = m.group(), m.end()
        if tok.startswith("NV") and end < len(word) and word[end] in "-,":
            tok, end = _nv_before_list(word, pos, end)
        parts.append(tok)
        pos = end
    rest = word[pos:]
    if not parts or (rest and not _TAIL_OK.match(rest)):
        return [], word
    return parts, rest


@dataclass
class _Row:
    label: str
    cells: list[str]
    extra: list[str]
    merged: bool
    unknown: list[str]


def _parse_cells(rest: str, want: int | None) -> tuple[list[str], list[str], bool, list[str]]:
    """Device cells (at most ``want``), the words after them, whether cells had run
    together, and cells that are not codes nvidia-smi documents."""
    words = rest.split()
    cells: list[str] = []
    unknown: list[str] = []
    merged = False
    i = 0
    while i < len(words) and (want is None or len(cells) < want):
        w = words[i]
        if _LINK_FULL.match(w):
            cells.append(w)
            i += 1
            continue
        parts, remainder = _split_run(w, None if want is None else want - len(cells))
        if parts:
            cells.extend(parts)
            merged = True
            if remainder:
                words[i] = remainder
            else:
                i += 1
            continue
        if cells and _CODE_LIKE.match(w):
            cells.append(w)
            unknown.append(w)
            i += 1
            continue
        break
    return cells, words[i:], merged, unknown


def _row_label(line: str, known_names: Sequence[str]) -> tuple[str, str] | None:
    s = line.lstrip()
    m = _DEVICE_LABEL.match(s)
    if m:
        return m.group(), s[m.end() :]
    for name in sorted(known_names, key=len, reverse=True):
        if s.startswith(name):
            return name, s[len(name) :]
    m = re.match(r"(\S+)(.*)", s)
    if m and _DEVICE_NAME.match(m.group(1)):
        return m.group(1), m.group(2)
    return None


def _parse_row(line: str, want: int | None, known_names: Sequence[str]) -> _Row | None:
    found = _row_label(line, known_names)
    if found is None:
        return None
    label, rest = found
    cells, extra, merged, unknown = _parse_cells(rest, want)
    if not cells or cells[0] in unknown:
        return None
    known_label = bool(_DEVICE_LABEL.fullmatch(label)) or label in known_names
    if not known_label and (len(cells) < 2 or "X" not in cells):
        return None  # prose that happens to start with a word and a code
    return _Row(label, cells, extra, merged, unknown)


def _split_values(tokens: list[str]) -> tuple[list[str], bool]:
    """Affinity words, with ``N/A`` that ran into a neighbour split off."""
    out: list[str] = []
    merged = False
    for tok in tokens:
        if _ELLIPSIS.match(tok):
            continue
        if "N/A" in tok and tok != "N/A":
            merged = True
            out.extend(p for p in re.split(r"(N/A)", tok) if p)
        else:
            out.append(tok)
    return out, merged


def _value_ok(column: str, value: str) -> bool:
    if value == "N/A":
        return True
    if column == GPU_NUMA_ID:
        return value.isdigit() or value == "-1"
    return is_cpu_list(value)


def _label_key(label: str) -> tuple[int, int, str]:
    m = re.search(r"(\d+)$", label)
    kind = 0 if label.startswith("GPU") else 1
    return (kind, int(m.group(1)) if m else 0, label)


def compact_labels(labels: Iterable[str]) -> str:
    """GPU0, GPU1, GPU2, GPU5 -> "GPU0-GPU2, GPU5" (runs of one prefix collapsed)."""
    items = list(labels)
    out: list[str] = []
    i = 0
    while i < len(items):
        j = i
        m = re.match(r"([A-Za-z_]+?)(\d+)$", items[i])
        while m and j + 1 < len(items):
            n = re.match(r"([A-Za-z_]+?)(\d+)$", items[j + 1])
            if not n or n.group(1) != m.group(1) or int(n.group(2)) != int(m.group(2)) + j + 1 - i:
                break
            j += 1
        out.append(items[i] if j - i < 2 else f"{items[i]}-{items[j]}")
        if j - i == 1:
            out.append(items[j])
        i = j + 1
    return ", ".join(out)


def parse_topology(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` output, as printed or as pasted. Never raises."""
    lines = [_clean_line(raw) for raw in text.splitlines()]
    warnings: list[str] = []

    header_at = -1
    header: list[str] = []
    for idx, line in enumerate(lines):
        if "GPU0" not in line:
            continue
        tokens = _header_tokens(line)
        if _is_header(tokens):
            header_at, header = idx, tokens
            break

    device_cols: list[str] = []
    aff_cols: list[str] = []
    ellipsis = False
    if header_at >= 0:
        for tok in header:
            if tok.startswith(_SENTINEL):
                key = tok[1:]
                if key not in aff_cols:
                    aff_cols.append(key)
            elif _ELLIPSIS.match(tok):
                ellipsis = True
            elif aff_cols or ellipsis:
                warnings.append(f"unknown column {tok!r} after the affinity columns: ignored")
            elif _DEVICE_LABEL.fullmatch(tok) or _DEVICE_NAME.match(tok):
                if tok not in device_cols:
                    device_cols.append(tok)
            else:
                warnings.append(f"unknown column {tok!r} in the header: ignored")
        body = lines[header_at + 1 :]
    else:
        body = lines

    known_names = [c for c in device_cols if not c.startswith(("GPU", "NIC"))]
    want = len(device_cols) if header_at >= 0 else None
    rows: dict[str, _Row] = {}
    duplicates: list[str] = []
    cut_at_end = bool(text) and not text.endswith(("\n", "\r"))
    last_line = len(lines) - 1
    for at, line in enumerate(body, start=len(lines) - len(body)):
        if _LEGEND_HEAD.match(line) or _NIC_LEGEND_HEAD.match(line):
            if header_at >= 0:
                break
            continue
        if header_at >= 0 and "GPU0" in line and _is_header(_header_tokens(line)):
            warnings.append("a second matrix follows the first: only the first was read")
            break
        row = _parse_row(line, want, known_names)
        if row is None:
            continue
        if row.label in rows:
            duplicates.append(row.label)
            continue
        if len(rows) >= MAX_DEVICES:
            warnings.append(f"more than {MAX_DEVICES} devices: only the first were read")
            break
        stops_mid_row = cut_at_end and at == last_line and not row.extra
        if stops_mid_row and want is not None and 1 < len(row.cells) < want:
            # The text stops mid-row: its last cell may be a cut code ("NV1" of "NV12").
            row.cells.pop()
        rows[row.label] = row

    gpu_rows = [label for label in rows if label.startswith("GPU")]
    if not gpu_rows and not [c for c in device_cols if c.startswith("GPU")]:
        return Topology(warnings=(NO_MATRIX,))
    if not rows:
        return Topology(
            warnings=(f"{NO_MATRIX}: the header is there but no rows follow it",),
        )

    if header_at < 0:
        # Without a header the matrix is square over its rows: GPUs, then NICs.
        device_cols = list(rows)
        extras = {len(rows[g].extra) for g in gpu_rows}
        aff_cols = list(AFFINITY_COLUMNS[: max(extras, default=0)])
        warnings.append(
            "no header line: columns taken to be the rows in order"
            + (f", then {', '.join(COLUMN_TITLES[c] for c in aff_cols)}" if aff_cols else "")
        )
    if duplicates:
        warnings.append(f"rows repeated ({compact_labels(duplicates)}): the first of each was read")

    gpus = [c for c in device_cols if c.startswith("GPU")]
    gpus += sorted((g for g in gpu_rows if g not in gpus), key=_label_key)
    nics = [c for c in device_cols if not c.startswith("GPU")]
    nic_rows = [label for label in rows if not label.startswith("GPU")]
    nics += [n for n in nic_rows if n not in nics]
    col_index = {c: i for i, c in enumerate(device_cols)}

    unreliable: set[str] = set()
    missing_nic_cols = [n for n in nic_rows if n not in col_index]
    if missing_nic_cols and header_at >= 0:
        first_aff = aff_cols[0] if aff_cols else None
        msg = (
            f"the header and the GPU rows have no columns for {compact_labels(missing_nic_cols)} "
            "(copied from a narrow terminal?): GPU-NIC links read from the NIC rows"
        )
        if first_aff:
            msg += f"; {COLUMN_TITLES[first_aff]} may be cut"
            unreliable.add(first_aff)
        warnings.append(msg)
    missing_gpu_cols = [g for g in gpus if g not in col_index]
    if missing_gpu_cols and header_at >= 0:
        warnings.append(
            f"the header has no columns for {compact_labels(missing_gpu_cols)} "
            "(cut by a narrow terminal?): their links read from their own rows"
        )
    if ellipsis:
        warnings.append(
            "the matrix was abbreviated ('...'): columns after "
            f"{device_cols[-1] if device_cols else 'the GPUs'} are not shown"
        )

    def cell(row_label: str, col_label: str) -> str | None:
        row = rows.get(row_label)
        i = col_index.get(col_label)
        if row is None or i is None or i >= len(row.cells):
            return None
        return row.cells[i]

    # The diagonal tells whether a row's cells line up with the columns.
    for label, row in rows.items():
        i = col_index.get(label)
        if i is not None and i < len(row.cells) and row.cells[i] != "X":
            where = row.cells.index("X") if "X" in row.cells else len(device_cols)
            found = f"found X under {device_cols[where]}" if where < len(device_cols) else "no X"
            warnings.append(
                f"row {label}: {found} instead of under {label}; its cells may be shifted"
            )

    short = [
        f"{label} ({len(row.cells)} of {len(device_cols)})"
        for label, row in rows.items()
        if header_at >= 0
        and len(row.cells) < len(device_cols)
        and not (label in nic_rows and label in missing_nic_cols)
    ]
    if short:
        warnings.append(f"rows with fewer cells than columns (cut?): {', '.join(short)}")
    merged_rows = [label for label, row in rows.items() if row.merged]
    if merged_rows:
        warnings.append(
            f"cells ran together in {compact_labels(merged_rows)} (tabs lost?): "
            "split at the link codes"
        )
    unknown = sorted({u for row in rows.values() for u in row.unknown})
    if unknown:
        warnings.append(f"link codes nvidia-smi does not document: {', '.join(unknown)}")

    def pair_cell(a: str, b: str, conflicts: list[str]) -> str | None:
        ab, ba = cell(a, b), cell(b, a)
        if ab is not None and ba is not None and ab != ba:
            conflicts.append(f"{a}-{b} ({ab} in row {a}, {ba} in row {b})")
        return ab if ab is not None else ba

    conflicts: list[str] = []
    links: list[Pair] = []
    unknown_pairs: list[str] = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            c = pair_cell(a, b, conflicts)
            if c is None:
                unknown_pairs.append(f"{a}-{b}")
            else:
                links.append((a, b, c))
    if unknown_pairs:
        shown = ", ".join(unknown_pairs[:6]) + (" ..." if len(unknown_pairs) > 6 else "")
        warnings.append(f"no cell for {len(unknown_pairs)} GPU pair(s): {shown}")
    gpu_nic: list[Pair] = []
    for g in gpus:
        for n in nics:
            c = pair_cell(g, n, conflicts)
            if c is not None:
                gpu_nic.append((g, n, c))
    if conflicts:
        shown = ", ".join(conflicts[:4]) + (" ..." if len(conflicts) > 4 else "")
        warnings.append(f"the matrix is not symmetric: {shown}")

    affinity: dict[str, list[Named]] = {key: [] for key in aff_cols}
    bad_values: dict[tuple[str, str], list[str]] = {}
    count_problems: dict[int, list[str]] = {}
    merged_values: list[str] = []
    surplus_rows: list[str] = []
    for g in gpus:
        row = rows.get(g)
        if row is None:
            continue
        surplus = 0
        while surplus < len(row.extra) and _LINK_FULL.match(row.extra[surplus]):
            surplus += 1
        if surplus:
            surplus_rows.append(g)
        if header_at >= 0 and len(row.cells) < len(device_cols):
            continue  # a cut row: what follows its cells is not its affinity
        values, merged = _split_values(row.extra[surplus:])
        if merged:
            merged_values.append(g)
        if len(values) != len(aff_cols) and (aff_cols or values):
            count_problems.setdefault(len(values), []).append(g)
            unreliable.update(aff_cols)
        for key, value in zip(aff_cols, values, strict=False):
            affinity[key].append((g, value))
            if not _value_ok(key, value):
                bad_values.setdefault((key, value), []).append(g)
    if surplus_rows:
        warnings.append(
            f"rows {compact_labels(surplus_rows)} have more cells than the header has columns: "
            "the extra cells were ignored"
        )
    if merged_values:
        warnings.append(f"affinity values ran together in {compact_labels(merged_values)}")
    for n_values, labels in count_problems.items():
        warnings.append(
            f"{compact_labels(labels)}: {n_values} affinity value(s) for "
            f"{len(aff_cols)} column(s), read in order"
        )
    for (key, value), labels in bad_values.items():
        warnings.append(
            f"{COLUMN_TITLES[key]} of {compact_labels(labels)} is {value!r}, not a valid value "
            "(cut by a narrow terminal?)"
        )
        unreliable.add(key)
    missing_rows = [g for g in gpus if g not in rows]
    if missing_rows:
        warnings.append(f"no row for {compact_labels(missing_rows)}")

    # Legends live after the matrix; look at the whole text so a legend above it counts too.
    legend_codes: set[str] = set()
    legend_seen = False
    nic_legend: dict[str, str] = {}
    nic_legend_seen = False
    for line in lines:
        if _NIC_LEGEND_HEAD.match(line):
            nic_legend_seen = True
        elif _LEGEND_HEAD.match(line):
            legend_seen = True
        code = _LEGEND_LINE.match(line)
        if code:
            legend_codes.add(code.group(1))
            continue
        named = _NIC_LEGEND.match(line)
        if named and named.group(1) not in nic_legend:
            nic_legend[named.group(1)] = named.group(2)
    legend_complete: bool | None = None
    if legend_seen or legend_codes:
        needed = {"X", "PHB", "PXB", "PIX", "NV#"}
        legend_complete = needed <= legend_codes and bool({"SYS", "SOC"} & legend_codes)
        if not legend_complete:
            warnings.append("the legend is cut short: the paste may end early")
    numbered_nics = [n for n in nics if re.fullmatch(r"NIC\d+", n)]
    unnamed = [n for n in numbered_nics if n not in nic_legend]
    if unnamed:
        if nic_legend_seen or nic_legend:
            warnings.append(f"the NIC Legend is cut: no name for {compact_labels(unnamed)}")
        else:
            warnings.append(f"no NIC Legend: names of {compact_labels(unnamed)} unknown")
    nic_names: list[Named] = []
    for n in nics:
        if n in nic_legend:
            nic_names.append((n, nic_legend[n]))
        elif not n.startswith("NIC"):
            nic_names.append((n, n))  # old drivers name the columns after the devices

    return Topology(
        gpus=tuple(gpus),
        nics=tuple(nics),
        links=tuple(links),
        gpu_nic_links=tuple(gpu_nic),
        nic_names=tuple(nic_names),
        cpu_affinity=tuple(affinity[CPU_AFFINITY]) if CPU_AFFINITY in affinity else None,
        numa_affinity=tuple(affinity[NUMA_AFFINITY]) if NUMA_AFFINITY in affinity else None,
        gpu_numa_id=tuple(affinity[GPU_NUMA_ID]) if GPU_NUMA_ID in affinity else None,
        legend_complete=legend_complete,
        unreliable=tuple(sorted(unreliable)),
        warnings=tuple(warnings),
    )


def parse_p2p_matrix(text: str) -> tuple[Pair, ...]:
    """``nvidia-smi topo -p2p r`` (or w, n, a, p): the status of each GPU pair."""
    header: list[str] = []
    rows: dict[str, list[str]] = {}
    for raw in text.splitlines():
        words = _clean_line(raw).split()
        if not words:
            continue
        if not header and words[0] == "GPU0" and (len(words) == 1 or words[1] == "GPU1"):
            header = [w for w in words if _GPU_LABEL.match(w)]
            continue
        if header and _GPU_LABEL.match(words[0]) and words[0] not in rows:
            cells = words[1 : 1 + len(header)]
            if all(c == "X" or c in P2P_MEANINGS for c in cells):
                rows[words[0]] = cells
    out: list[Pair] = []
    for i, a in enumerate(header):
        for j in range(i + 1, len(header)):
            b = header[j]
            status = None
            if a in rows and j < len(rows[a]):
                status = rows[a][j]
            elif b in rows and i < len(rows[b]):
                status = rows[b][i]
            if status is not None and status != "X":
                out.append((a, b, status))
    return tuple(out)

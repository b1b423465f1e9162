"""``nvidia-smi topo -m`` and ``topo -p2p`` parsed from what users paste.

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
from dataclasses import dataclass, field

from lltui.core.topo.amd import looks_amd, parse_amd_topology
from lltui.core.topo.matrix import (
    AFFINITY_COLUMNS,
    COLUMN_TITLES,
    CPU_AFFINITY,
    GPU_NUMA_ID,
    NUMA_AFFINITY,
    P2P_MEANINGS,
    Named,
    Pair,
    Topology,
    compact_labels,
    gpu_index,
)
from lltui.core.topo.tokens import (
    DEVICE_LABEL,
    DEVICE_NAME,
    ELLIPSIS,
    LINK_FULL,
    SENTINEL,
    Row,
    clean_line,
    header_tokens,
    is_header,
    parse_row,
    split_values,
    value_ok,
)

NO_MATRIX = (
    "no nvidia-smi topo -m matrix found (expected a header line `GPU0 GPU1 ...` "
    "and rows such as `GPU0  X  NV4 ...`)"
)

P2P_ONLY = (
    "no nvidia-smi topo -m matrix found: this is `nvidia-smi topo -p2p` output (whether "
    "peer-to-peer works for each GPU pair, not the links between them); paste `nvidia-smi topo -m`"
)

_NIC_LEGEND = re.compile(r"\s*(NIC\d+)\s*:\s*(\S+)")
_LEGEND_HEAD = re.compile(r"\s*Legend\s*:", re.I)
_NIC_LEGEND_HEAD = re.compile(r"\s*NIC\s+Legend\s*:", re.I)
_LEGEND_LINE = re.compile(r"\s*(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#)\s*=")


MAX_DEVICES = 256  # GPUs + NICs; a longer matrix is garbage, not a rig


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


def _label_key(label: str) -> tuple[int, int, str]:
    m = re.search(r"(?<!\d)(\d{1,9})$", label)
    kind = 0 if label.startswith("GPU") else 1
    return (kind, int(m.group(1)) if m else 0, label)


@dataclass
class _Matrix:
    """What the parse has read so far; each step below adds to it and to its warnings."""

    has_header: bool
    device_cols: list[str]
    aff_cols: list[str]
    rows: dict[str, Row]
    warnings: list[str]
    gpus: list[str] = field(default_factory=list)
    nics: list[str] = field(default_factory=list)
    nic_rows: list[str] = field(default_factory=list)
    col_index: dict[str, int] = field(default_factory=dict)
    missing_nic_cols: list[str] = field(default_factory=list)
    unreliable: set[str] = field(default_factory=set)

    def cell(self, row_label: str, col_label: str) -> str | None:
        row = self.rows.get(row_label)
        i = self.col_index.get(col_label)
        if row is None or i is None or i >= len(row.cells):
            return None
        return row.cells[i]

    def pair_cell(self, a: str, b: str, conflicts: list[str]) -> str | None:
        """The cell of a pair from either row; a disagreement between the rows is noted."""
        ab, ba = self.cell(a, b), self.cell(b, a)
        if ab is not None and ba is not None and ab != ba:
            conflicts.append(f"{a}-{b} ({ab} in row {a}, {ba} in row {b})")
        return ab if ab is not None else ba


def _find_header(lines: list[str]) -> tuple[int, list[str]]:
    """The first header line (``GPU0 GPU1 ...``) and its tokens; -1 when there is none."""
    for idx, line in enumerate(lines):
        if "GPU0" not in line:
            continue
        tokens = header_tokens(line)
        if is_header(tokens):
            return idx, tokens
    return -1, []


def _header_columns(header: list[str], warnings: list[str]) -> tuple[list[str], list[str], bool]:
    """Device columns, affinity columns, and whether the matrix was abbreviated ('...')."""
    device_cols: list[str] = []
    aff_cols: list[str] = []
    ellipsis = False
    for tok in header:
        if tok.startswith(SENTINEL):
            key = tok[1:]
            if key not in aff_cols:
                aff_cols.append(key)
        elif ELLIPSIS.match(tok):
            ellipsis = True
        elif aff_cols or ellipsis:
            warnings.append(f"unknown column {tok!r} after the affinity columns: ignored")
        elif DEVICE_LABEL.fullmatch(tok) or DEVICE_NAME.match(tok):
            if tok not in device_cols:
                device_cols.append(tok)
        else:
            warnings.append(f"unknown column {tok!r} in the header: ignored")
    return device_cols, aff_cols, ellipsis


def _read_rows(
    text: str, lines: list[str], header_at: int, device_cols: list[str], warnings: list[str]
) -> tuple[dict[str, Row], list[str]]:
    """The device rows after the header (or anywhere without one), and repeated labels."""
    body = lines[header_at + 1 :] if header_at >= 0 else lines
    known_names = [c for c in device_cols if not c.startswith(("GPU", "NIC"))]
    want = len(device_cols) if header_at >= 0 else None
    rows: dict[str, Row] = {}
    duplicates: list[str] = []
    cut_at_end = bool(text) and not text.endswith(("\n", "\r"))
    last_line = len(lines) - 1
    for at, line in enumerate(body, start=len(lines) - len(body)):
        if _LEGEND_HEAD.match(line) or _NIC_LEGEND_HEAD.match(line):
            if header_at >= 0:
                break
            continue
        if header_at >= 0 and "GPU0" in line and is_header(header_tokens(line)):
            warnings.append("a second matrix follows the first: only the first was read")
            break
        row = parse_row(line, want, known_names)
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
    return rows, duplicates


def _p2p_status_only(rows: dict[str, Row]) -> bool:
    """The rows hold ``topo -p2p`` statuses (OK, CNS, ...) and no link at all."""
    cells = [c for row in rows.values() for c in row.cells if c != "X"]
    return bool(cells) and all(c in P2P_MEANINGS for c in cells)


def _place_devices(m: _Matrix, duplicates: list[str]) -> None:
    """Columns for a matrix without a header, then the GPUs and NICs in column order."""
    gpu_rows = [label for label in m.rows if label.startswith("GPU")]
    if not m.has_header:
        # Without a header the matrix is square over its rows: GPUs, then NICs.
        m.device_cols = list(m.rows)
        extras = {len(m.rows[g].extra) for g in gpu_rows}
        m.aff_cols = list(AFFINITY_COLUMNS[: max(extras, default=0)])
        m.warnings.append(
            "no header line: columns taken to be the rows in order"
            + (f", then {', '.join(COLUMN_TITLES[c] for c in m.aff_cols)}" if m.aff_cols else "")
        )
    if duplicates:
        labels = list(dict.fromkeys(duplicates))  # each once, however often it repeats
        more = f" and {len(labels) - 16} more" if len(labels) > 16 else ""
        times = f", {len(duplicates)} repeats" if len(duplicates) > len(labels) else ""
        m.warnings.append(
            f"rows repeated ({compact_labels(labels[:16])}{more}{times}): the first of "
            "each was read"
        )
    m.gpus = [c for c in m.device_cols if c.startswith("GPU")]
    m.gpus += sorted((g for g in gpu_rows if g not in m.gpus), key=_label_key)
    m.nics = [c for c in m.device_cols if not c.startswith("GPU")]
    m.nic_rows = [label for label in m.rows if not label.startswith("GPU")]
    m.nics += [n for n in m.nic_rows if n not in m.nics]
    m.col_index = {c: i for i, c in enumerate(m.device_cols)}


def _column_warnings(m: _Matrix, ellipsis: bool) -> None:
    """Devices whose rows are there but whose columns a narrow terminal cut."""
    m.missing_nic_cols = [n for n in m.nic_rows if n not in m.col_index]
    if m.missing_nic_cols and m.has_header:
        first_aff = m.aff_cols[0] if m.aff_cols else None
        msg = (
            "the header and the GPU rows have no columns for "
            f"{compact_labels(m.missing_nic_cols)} "
            "(copied from a narrow terminal?): GPU-NIC links read from the NIC rows"
        )
        if first_aff:
            msg += f"; {COLUMN_TITLES[first_aff]} may be cut"
            m.unreliable.add(first_aff)
        m.warnings.append(msg)
    missing_gpu_cols = [g for g in m.gpus if g not in m.col_index]
    if missing_gpu_cols and m.has_header:
        m.warnings.append(
            f"the header has no columns for {compact_labels(missing_gpu_cols)} "
            "(cut by a narrow terminal?): their links read from their own rows"
        )
    if ellipsis:
        m.warnings.append(
            "the matrix was abbreviated ('...'): columns after "
            f"{m.device_cols[-1] if m.device_cols else 'the GPUs'} are not shown"
        )


def _row_warnings(m: _Matrix) -> None:
    """Rows that do not line up: a misplaced diagonal, too few cells, cells run together."""
    n_cols = len(m.device_cols)
    # The diagonal tells whether a row's cells line up with the columns.
    for label, row in m.rows.items():
        i = m.col_index.get(label)
        if i is not None and i < len(row.cells) and row.cells[i] != "X":
            where = row.cells.index("X") if "X" in row.cells else n_cols
            found = f"found X under {m.device_cols[where]}" if where < n_cols else "no X"
            m.warnings.append(
                f"row {label}: {found} instead of under {label}; its cells may be shifted"
            )
    short = [
        f"{label} ({len(row.cells)} of {n_cols})"
        for label, row in m.rows.items()
        if m.has_header
        and len(row.cells) < n_cols
        and not (label in m.nic_rows and label in m.missing_nic_cols)
    ]
    if short:
        m.warnings.append(f"rows with fewer cells than columns (cut?): {', '.join(short)}")
    merged_rows = [label for label, row in m.rows.items() if row.merged]
    if merged_rows:
        m.warnings.append(
            f"cells ran together in {compact_labels(merged_rows)} (tabs lost?): "
            "split at the link codes"
        )
    unknown = sorted({u for row in m.rows.values() for u in row.unknown})
    if unknown:
        m.warnings.append(f"link codes nvidia-smi does not document: {', '.join(unknown)}")


def _pair_links(m: _Matrix) -> tuple[list[Pair], list[Pair]]:
    """GPU-GPU and GPU-NIC cells, with the pairs that have none and the rows that disagree."""
    conflicts: list[str] = []
    links: list[Pair] = []
    unknown_pairs: list[str] = []
    for i, a in enumerate(m.gpus):
        for b in m.gpus[i + 1 :]:
            c = m.pair_cell(a, b, conflicts)
            if c is None:
                unknown_pairs.append(f"{a}-{b}")
            else:
                links.append((a, b, c))
    if unknown_pairs:
        shown = ", ".join(unknown_pairs[:6]) + (" ..." if len(unknown_pairs) > 6 else "")
        m.warnings.append(f"no cell for {len(unknown_pairs)} GPU pair(s): {shown}")
    gpu_nic: list[Pair] = []
    for g in m.gpus:
        for n in m.nics:
            c = m.pair_cell(g, n, conflicts)
            if c is not None:
                gpu_nic.append((g, n, c))
    if conflicts:
        shown = ", ".join(conflicts[:4]) + (" ..." if len(conflicts) > 4 else "")
        m.warnings.append(f"the matrix is not symmetric: {shown}")
    return links, gpu_nic


def _affinities(m: _Matrix) -> dict[str, list[Named]]:
    """The affinity values after each GPU row's cells, checked against their columns."""
    affinity: dict[str, list[Named]] = {key: [] for key in m.aff_cols}
    bad_values: dict[tuple[str, str], list[str]] = {}
    count_problems: dict[int, list[str]] = {}
    merged_values: list[str] = []
    surplus_rows: list[str] = []
    for g in m.gpus:
        row = m.rows.get(g)
        if row is None:
            continue
        surplus = 0
        while surplus < len(row.extra) and LINK_FULL.match(row.extra[surplus]):
            surplus += 1
        if surplus:
            surplus_rows.append(g)
        if m.has_header and len(row.cells) < len(m.device_cols):
            continue  # a cut row: what follows its cells is not its affinity
        values, merged = split_values(row.extra[surplus:])
        if merged:
            merged_values.append(g)
        if len(values) != len(m.aff_cols) and (m.aff_cols or values):
            count_problems.setdefault(len(values), []).append(g)
            m.unreliable.update(m.aff_cols)
        for key, value in zip(m.aff_cols, values, strict=False):
            affinity[key].append((g, value))
            if not value_ok(key, value):
                bad_values.setdefault((key, value), []).append(g)
    _affinity_warnings(m, surplus_rows, merged_values, count_problems, bad_values)
    return affinity


def _affinity_warnings(
    m: _Matrix,
    surplus_rows: list[str],
    merged_values: list[str],
    count_problems: dict[int, list[str]],
    bad_values: dict[tuple[str, str], list[str]],
) -> None:
    if surplus_rows:
        m.warnings.append(
            f"rows {compact_labels(surplus_rows)} have more cells than the header has columns: "
            "the extra cells were ignored"
        )
    if merged_values:
        m.warnings.append(f"affinity values ran together in {compact_labels(merged_values)}")
    for n_values, labels in count_problems.items():
        m.warnings.append(
            f"{compact_labels(labels)}: {n_values} affinity value(s) for "
            f"{len(m.aff_cols)} column(s), read in order"
        )
    for (key, value), labels in bad_values.items():
        m.warnings.append(
            f"{COLUMN_TITLES[key]} of {compact_labels(labels)} is {value!r}, not a valid value "
            "(cut by a narrow terminal?)"
        )
        m.unreliable.add(key)
    missing_rows = [g for g in m.gpus if g not in m.rows]
    if missing_rows:
        m.warnings.append(f"no row for {compact_labels(missing_rows)}")


def _legends(lines: list[str], m: _Matrix) -> tuple[bool | None, list[Named]]:
    """Whether the legend is complete (None: no legend) and the NICs' device names."""
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
            m.warnings.append("the legend is cut short: the paste may end early")
    numbered_nics = [n for n in m.nics if re.fullmatch(r"NIC\d+", n)]
    unnamed = [n for n in numbered_nics if n not in nic_legend]
    if unnamed:
        if nic_legend_seen or nic_legend:
            m.warnings.append(f"the NIC Legend is cut: no name for {compact_labels(unnamed)}")
        else:
            m.warnings.append(f"no NIC Legend: names of {compact_labels(unnamed)} unknown")
    nic_names: list[Named] = []
    for n in m.nics:
        if n in nic_legend:
            nic_names.append((n, nic_legend[n]))
        elif not n.startswith("NIC"):
            nic_names.append((n, n))  # old drivers name the columns after the devices
    return legend_complete, nic_names


_P2P_MODE = re.compile(r"topo\s+-p2p\s*([A-Za-z])\b")
_P2P_LEGEND_LINE = re.compile(r"\s*(?:X|OK|CNS|GNS|TNS|NS|DBR|U)\s*=")


def _p2p_block(lines: list[str], warnings: list[str]) -> tuple[list[str], tuple[Pair, ...]]:
    """A ``topo -p2p r`` table pasted with the matrix (before or after it): the lines
    without it and its legend, and the status of each GPU pair it gives (none, with a
    warning, where the command above it asked for another capability: w, n, a or p)."""
    for at, line in enumerate(lines):
        words = line.split()
        if not words or words[0] != "GPU0" or any(gpu_index(w) is None for w in words):
            continue
        end = at + 1
        while end < len(lines):
            row = lines[end].split()
            cells = row[1 : 1 + len(words)]
            if not row or gpu_index(row[0]) is None or len(cells) != len(words):
                break
            if not all(c == "X" or c in P2P_MEANINGS for c in cells):
                break
            end += 1
        if end == at + 1:
            continue  # the header of a topo -m matrix (GPUs only), not of a P2P table
        pairs = parse_p2p_matrix("\n".join(lines[at:end]))
        above = next((ln for ln in reversed(lines[:at]) if ln.strip()), "")
        mode = _P2P_MODE.search(above)
        if mode and mode.group(1).lower() != "r":
            warnings.append(
                f"the `topo -p2p {mode.group(1)}` table is not the P2P read status "
                "(`topo -p2p r`): not used"
            )
            pairs = ()
        while end < len(lines) and (
            not lines[end].strip()
            or _LEGEND_HEAD.match(lines[end])
            or _P2P_LEGEND_LINE.match(lines[end])
        ):
            end += 1
        return lines[:at] + [""] * (end - at) + lines[end:], pairs
    return lines, ()


def parse_topology(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` output, as printed or as pasted (or AMD's: ``amd-smi
    topology``, ``rocm-smi --showtopo``, see :mod:`.amd`), with the ``topo -p2p r`` table
    where it was pasted too. Never raises."""
    if looks_amd(text):
        return parse_amd_topology(text)
    warnings: list[str] = []
    cleaned = [clean_line(raw) for raw in text.splitlines()]
    lines, p2p = _p2p_block(cleaned, warnings)
    header_at, header = _find_header(lines)
    device_cols, aff_cols, ellipsis = _header_columns(header, warnings)
    rows, duplicates = _read_rows(text, lines, header_at, device_cols, warnings)
    has_gpu_rows = any(label.startswith("GPU") for label in rows)
    if not has_gpu_rows and not [c for c in device_cols if c.startswith("GPU")]:
        return Topology(warnings=(P2P_ONLY if lines != cleaned else NO_MATRIX,))
    if not rows:
        return Topology(
            warnings=(f"{NO_MATRIX}: the header is there but no rows follow it",),
        )
    if _p2p_status_only(rows) and parse_p2p_matrix(text):
        return Topology(warnings=(P2P_ONLY,))
    m = _Matrix(header_at >= 0, device_cols, aff_cols, rows, warnings)
    _place_devices(m, duplicates)
    _column_warnings(m, ellipsis)
    _row_warnings(m)
    links, gpu_nic = _pair_links(m)
    affinity = _affinities(m)
    legend_complete, nic_names = _legends(lines, m)
    others = sorted({g for pair in p2p for g in pair[:2]} - set(m.gpus), key=_label_key)
    if others:
        m.warnings.append(
            f"the topo -p2p table has {compact_labels(others)}, which the matrix has not "
            "(another machine's, or a cut paste?): its statuses are not used"
        )
        p2p = ()
    return Topology(
        gpus=tuple(m.gpus),
        nics=tuple(m.nics),
        links=tuple(links),
        gpu_nic_links=tuple(gpu_nic),
        nic_names=tuple(nic_names),
        cpu_affinity=tuple(affinity[CPU_AFFINITY]) if CPU_AFFINITY in affinity else None,
        numa_affinity=tuple(affinity[NUMA_AFFINITY]) if NUMA_AFFINITY in affinity else None,
        gpu_numa_id=tuple(affinity[GPU_NUMA_ID]) if GPU_NUMA_ID in affinity else None,
        legend_complete=legend_complete,
        unreliable=tuple(sorted(m.unreliable)),
        warnings=tuple(m.warnings),
        p2p=p2p,
    )


def parse_p2p_matrix(text: str) -> tuple[Pair, ...]:
    """``nvidia-smi topo -p2p r`` (or w, n, a, p): the status of each GPU pair."""
    header: list[str] = []
    rows: dict[str, list[str]] = {}
    for raw in text.splitlines():
        words = clean_line(raw).split()
        if not words:
            continue
        if not header and words[0] == "GPU0" and (len(words) == 1 or words[1] == "GPU1"):
            header = [w for w in words if gpu_index(w) is not None]
            continue
        if header and gpu_index(words[0]) is not None and words[0] not in rows:
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

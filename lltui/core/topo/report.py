"""The topology as JSON (the ``topo --json`` contract) and as text, with its advice."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.text import counted
from lltui.core.topo.advice import Advice
from lltui.core.topo.matrix import (
    AFFINITY_COLUMNS,
    COLUMN_TITLES,
    Topology,
    link_distance,
    link_meaning,
    nvlink_count,
)


def topology_to_json(topo: Topology, advice: Sequence[Advice] = ()) -> dict[str, Any]:
    """The ``topo --json`` contract: absent columns are absent keys."""
    out: dict[str, Any] = {
        "gpus": list(topo.gpus),
        "links": topo.link_map(),
        "gpu_nic_links": topo.gpu_nic_map(),
        "nics": topo.nic_map(),
    }
    for key in AFFINITY_COLUMNS:
        values = topo.affinity(key)
        if values is not None:
            out[key] = values
    out["warnings"] = list(topo.warnings)
    out["advice"] = [fields_of(a, "severity code message hint") for a in advice]
    out["nic_labels"] = list(topo.nics)
    if topo.p2p:
        out["p2p"] = topo.p2p_map()
    out["legend_complete"] = topo.legend_complete
    out["unreliable"] = list(topo.unreliable)
    out["source"] = topo.source
    return out


def render_matrix(
    rows: Sequence[str],
    cols: Sequence[str],
    cell: Callable[[str, str], str | None],
    width: int = 80,
) -> list[str]:
    """A labelled matrix, its columns split into blocks that fit ``width``."""
    values = {(r, c): cell(r, c) or "?" for r in rows for c in cols}
    label_w = max((len(r) for r in rows), default=0) + 2
    col_w = max([len(c) for c in cols] + [len(v) for v in values.values()] + [3]) + 2
    per_block = max(1, (width - label_w) // col_w)
    out: list[str] = []
    for start in range(0, len(cols), per_block):
        block = cols[start : start + per_block]
        if out:
            out.append("")
        out.append(" " * label_w + "".join(c.ljust(col_w) for c in block).rstrip())
        for r in rows:
            line = r.ljust(label_w) + "".join(values[(r, c)].ljust(col_w) for c in block)
            out.append(line.rstrip())
    return out


def _wrap(text: str, width: int, indent: str, first: str | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        width=max(20, width),
        initial_indent=indent if first is None else first,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,  # a path (the title's file) is never cut mid-name
    )


def _summary(topo: Topology) -> str:
    cells = [c for _, _, c in topo.links]
    n = len(topo.gpus)
    parts = [counted(n, "GPU")]
    if topo.nics:
        parts.append(counted(len(topo.nics), "NIC"))
    text = ", ".join(parts)
    if cells and len(set(cells)) == 1 and len(cells) == n * (n - 1) // 2:
        text += f"; every GPU pair {cells[0]} ({link_meaning(cells[0])})"
    return text


def _nics_section(topo: Topology, width: int) -> list[str]:
    """The NICs by name, and the nearest NIC(s) to each GPU."""
    names = topo.nic_map()
    out = ["NICs"]
    listed = ", ".join(f"{n} {names[n]}" if names.get(n, n) != n else n for n in topo.nics)
    out += _wrap(listed, width, "  ")
    nearest: list[str] = []
    for g in topo.gpus:
        near = [(link_distance(c), n, c) for a, n, c in topo.gpu_nic_links if a == g]
        if near:
            best = min(d for d, _, _ in near)
            picks = [f"{n} ({c})" for d, n, c in near if d == best]
            nearest.append(f"{g}: {', '.join(picks)}")
    if nearest:
        out += _wrap("nearest NIC per GPU: " + "; ".join(nearest), width, "  ")
    return out


def _affinity_section(topo: Topology, present: list[str]) -> list[str]:
    """The affinity columns as a table, one GPU a line, with what the paste may have cut."""
    out = ["Affinity"]
    table = {k: topo.affinity(k) or {} for k in present}
    widths = {
        k: max([len(COLUMN_TITLES[k])] + [len(v) for v in table[k].values()]) + 2 for k in present
    }
    label_w = max(len(g) for g in topo.gpus) + 4
    titles = "".join(COLUMN_TITLES[k].ljust(widths[k]) for k in present)
    out.append(("  GPU".ljust(label_w) + titles).rstrip())
    for g in topo.gpus:
        line = f"  {g}".ljust(label_w) + "".join(
            table[k].get(g, "?").ljust(widths[k]) for k in present
        )
        out.append(line.rstrip())
    if topo.unreliable:
        out.append(
            f"  (cut in the paste, shown as printed: "
            f"{', '.join(COLUMN_TITLES.get(u, u) for u in topo.unreliable)})"
        )
    return out


def _legend_section(topo: Topology, width: int) -> list[str]:
    """What each cell code in the matrices means, nearest link first."""
    codes = sorted(
        {c for _, _, c in (*topo.links, *topo.gpu_nic_links)},
        key=lambda c: (link_distance(c), -(nvlink_count(c) or 0), c),
    )
    if not codes:
        return []
    out = ["Legend"]
    code_w = max(len(c) for c in codes) + 2
    for c in codes:
        out += _wrap(link_meaning(c), width, " " * (2 + code_w), f"  {c.ljust(code_w)}")
    return out


def _notes_sections(topo: Topology, advice: Sequence[Advice], width: int) -> list[list[str]]:
    """The parser's warnings and the advice, each a section."""
    sections: list[list[str]] = []
    if topo.warnings:
        warn = ["Warnings"]
        for w in topo.warnings:
            warn += _wrap(w, width, "    ", "  ! ")
        sections.append(warn)
    if advice:
        adv = ["Advice"]
        for a in advice:
            tag = f"  [{a.severity}] "
            adv += _wrap(a.message, width, " " * len(tag), tag)
            if a.hint:
                adv += _wrap(a.hint, width, " " * len(tag))
        sections.append(adv)
    return sections


def topology_to_text(
    topo: Topology,
    advice: Sequence[Advice] = (),
    *,
    width: int = 80,
    title: str | None = None,
) -> str:
    """A readable report: matrices (split to fit ``width``), NICs, affinity, legend,
    warnings and advice."""
    headline = f"{title or 'GPU topology'}: {_summary(topo)}"
    sections: list[list[str]] = [_wrap(headline, width, "  ", "")]
    if topo.gpus:
        sections.append(
            ["Links between GPUs", *render_matrix(topo.gpus, topo.gpus, topo.link, width)]
        )
    if topo.gpu_nic_links:
        nic_cols = [n for n in topo.nics if any(n == b for _, b, _ in topo.gpu_nic_links)]
        sections.append(["GPU to NIC", *render_matrix(topo.gpus, nic_cols, topo.link, width)])
    if topo.nics:
        sections.append(_nics_section(topo, width))
    present = [k for k in AFFINITY_COLUMNS if getattr(topo, k) is not None]
    if present and topo.gpus:
        sections.append(_affinity_section(topo, present))
    if topo.p2p:
        statuses = "; ".join(f"{k} {v}" for k, v in topo.p2p_map().items())
        sections.append(["Peer-to-peer (read)", *_wrap(statuses, width, "  ")])
    legend = _legend_section(topo, width)
    if legend:
        sections.append(legend)
    sections += _notes_sections(topo, advice, width)
    # One blank line after each section; none at the end.
    out = [line for section in sections for line in (*section, "")]
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)

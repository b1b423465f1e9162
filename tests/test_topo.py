"""nvidia-smi topo -m: the parser on real pastes and on crafted mangling, the live and NVML
sources, and ``lltui topo``."""

from __future__ import annotations

import json
import random
import stat
import sys
from pathlib import Path

import fake_topo_pynvml as fake
import pytest

from lltui.cli import main
from lltui.core.monitor.models import SourceUnavailable
from lltui.core.topo.advice import advise
from lltui.core.topo.matrix import (
    AFFINITY_COLUMNS,
    COLUMN_TITLES,
    CPU_AFFINITY,
    GPU_NUMA_ID,
    NUMA_AFFINITY,
    Topology,
    is_cpu_list,
)
from lltui.core.topo.parse import NO_MATRIX, decode_text, parse_p2p_matrix, parse_topology
from lltui.core.topo.report import topology_to_json, topology_to_text
from lltui.sources import topo as topo_source

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "real"
TOPO_FILES = sorted((FIXTURES / "topo").glob("*.txt")) if FIXTURES.is_dir() else []
needs_fixtures = pytest.mark.skipif(not TOPO_FILES, reason="shared fixtures not present")

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501


def truth_entries() -> dict[str, dict]:
    data = json.loads((FIXTURES / "truth.json").read_text())
    return {e["file"]: e for e in data["entries"] if e["kind"] == "topo"}


# --- a generator of topo -m text, written from the format ------------------------------------


def render(
    gpu_links: dict[tuple[int, int], str],
    n_gpus: int,
    *,
    nics: tuple[str, ...] = (),
    nic_links: dict[tuple[int, int], str] | None = None,
    affinity: dict[str, list[str]] | None = None,
    legend: bool = True,
    nic_column_names: bool = False,
) -> str:
    """Tab-separated ``nvidia-smi topo -m`` as a driver prints it. ``affinity`` maps column
    keys (in print order) to one value per GPU; NIC columns are NICn plus a NIC Legend, or
    the device names themselves (old drivers) with ``nic_column_names``."""
    nic_links = nic_links or {}
    affinity = affinity if affinity is not None else {}
    nic_labels = list(nics) if nic_column_names else [f"NIC{i}" for i in range(len(nics))]
    names = [f"GPU{i}" for i in range(n_gpus)] + nic_labels
    header = ["", *names, *(COLUMN_TITLES[k] for k in affinity)]
    lines = ["\t".join(header)]

    def cell(a: int, b: int) -> str:
        if a == b:
            return " X "
        if a < n_gpus and b < n_gpus:
            return gpu_links[(min(a, b), max(a, b))]
        if a < n_gpus:
            return nic_links[(a, b - n_gpus)]
        if b < n_gpus:
            return nic_links[(b, a - n_gpus)]
        return "SYS"

    for a, label in enumerate(names):
        cells = [cell(a, b) for b in range(len(names))]
        if a < n_gpus:
            values = [affinity[k][a] for k in affinity]
            if GPU_NUMA_ID in affinity and len(values) >= 2:
                # Current drivers print an empty cell before GPU NUMA ID.
                values = [*values[:-1], "", values[-1]]
            cells += values
        else:
            cells += [""] * len(affinity)
        lines.append("\t".join([label, *cells]))
    text = "\n".join(lines) + "\n"
    if legend:
        text += LEGEND
    if nics and not nic_column_names:
        text += "\nNIC Legend:\n\n" + "".join(f"  NIC{i}: {n}\n" for i, n in enumerate(nics))
    return text


def two_socket(n: int, same: str = "NODE", cross: str = "SYS") -> dict[tuple[int, int], str]:
    half = n // 2
    return {
        (i, j): same if (i < half) == (j < half) else cross
        for i in range(n)
        for j in range(i + 1, n)
    }


def expect_links(links: dict[tuple[int, int], str]) -> dict[str, str]:
    return {f"GPU{i}-GPU{j}": c for (i, j), c in sorted(links.items())}


RIG16 = {
    (i, j): ("NV4" if j == i + 1 and i % 2 == 0 else ("NODE" if i // 8 == j // 8 else "SYS"))
    for i in range(16)
    for j in range(i + 1, 16)
}
AFF16 = {
    CPU_AFFINITY: ["0-23,48-71"] * 8 + ["24-47,72-95"] * 8,
    NUMA_AFFINITY: ["0"] * 8 + ["1"] * 8,
    GPU_NUMA_ID: ["N/A"] * 16,
}
NICS4 = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
NIC_LINKS8 = {
    (g, n): ("PIX" if g // 2 == n else ("NODE" if g // 4 == n // 2 else "SYS"))
    for g in range(8)
    for n in range(4)
}


# --- real pastes ---------------------------------------------------------------------------


@needs_fixtures
def test_every_topo_fixture_has_a_truth_entry():
    entries = truth_entries()
    assert {f"topo/{p.name}" for p in TOPO_FILES} <= set(entries)


@needs_fixtures
@pytest.mark.parametrize("path", TOPO_FILES, ids=lambda p: p.name[:2])
def test_real_paste_matches_truth(path):
    entry = truth_entries()[f"topo/{path.name}"]
    truth = entry["truth"]
    topo = parse_topology(decode_text(path.read_bytes()))
    data = topology_to_json(topo)
    assert data["gpus"] == truth["gpus"]
    assert len(data["gpus"]) == truth["gpu_count"]
    if truth["reliable"]["links"]:
        assert data["links"] == truth["links"]
    if truth["reliable"]["gpu_nic_links"]:
        assert data["gpu_nic_links"] == truth["gpu_nic_links"]
    for key in AFFINITY_COLUMNS:
        if not truth["columns_present"][key]:
            assert key not in data
        elif truth["reliable"].get(key, True):
            assert data[key] == truth[key]
        else:
            # A mangled paste cannot give these back: the parser keeps them as printed and
            # says they are not to be trusted.
            assert key in data["unreliable"]
            assert any(COLUMN_TITLES[key] in w for w in data["warnings"])
    if truth["nic_legend"] is not None:
        assert data["nics"] == truth["nic_legend"]
    if truth["reliable"]["nic_names"]:
        assert list(data["nics"].values()) == truth["nic_names"]
    assert set(truth["nic_columns"]) <= set(data["nic_labels"])
    assert data["legend_complete"] == truth["legend_complete"]
    mangled = {"mangled", "abbreviated", "truncated_columns"} & set(entry["flags"])
    assert bool(data["warnings"]) == bool(mangled), data["warnings"]


@needs_fixtures
def test_crlf_and_lone_cr_read_like_lf():
    for path in TOPO_FILES:
        text = path.read_text()
        lf = text.replace("\r\n", "\n")
        base = topology_to_json(parse_topology(lf))
        assert topology_to_json(parse_topology(lf.replace("\n", "\r\n"))) == base
        assert topology_to_json(parse_topology(lf.replace("\n", "\r"))) == base


@needs_fixtures
def test_utf16_and_bom_files_decode_to_the_same_matrix():
    text = TOPO_FILES[0].read_text()
    base = topology_to_json(parse_topology(text))
    for data in (
        text.encode("utf-16"),  # with a byte order mark, as PowerShell writes
        text.encode("utf-16-le"),
        text.encode("utf-16-be"),
        b"\xef\xbb\xbf" + text.encode(),
    ):
        assert topology_to_json(parse_topology(decode_text(data))) == base


@needs_fixtures
def test_prose_prompts_and_colours_around_the_matrix_are_ignored():
    path = next(p for p in TOPO_FILES if p.name.startswith("03"))
    text = path.read_text()
    base = topology_to_json(parse_topology(text))
    wrapped = (
        "Here is my box, GPU0 is the top card.\n"
        "\x1b[32muser@box\x1b[0m:~$ nvidia-smi topo -m\n"
        f"{text}"
        "user@box:~$ echo done\n"
        "NODE is what I expected, X marks the GPU itself.\n"
    )
    assert topology_to_json(parse_topology(wrapped)) == base
    quoted = "".join(f"> {line}\n" for line in text.splitlines())
    assert topology_to_json(parse_topology(quoted))["links"] == base["links"]


@needs_fixtures
def test_tabs_lost_cells_split_at_link_codes():
    path = next(p for p in TOPO_FILES if p.name.startswith("01"))
    text = path.read_text()
    base = topology_to_json(parse_topology(text))
    squashed = topology_to_json(parse_topology(text.replace("\t", "")))
    assert squashed["links"] == base["links"]
    assert squashed["gpu_nic_links"] == base["gpu_nic_links"]
    assert squashed["nics"] == base["nics"]
    assert any("ran together" in w for w in squashed["warnings"])
    # The CPU list and the NUMA node ran into one number: no parser can split that.
    assert {CPU_AFFINITY, NUMA_AFFINITY} <= set(squashed["unreliable"])


@needs_fixtures
def test_no_mangling_of_a_real_paste_raises():
    rng = random.Random(20260101)
    edits = 0
    for path in TOPO_FILES:
        text = path.read_text()
        for _ in range(120):
            mutated = list(text)
            for _ in range(rng.randint(1, 6)):
                pos = rng.randrange(len(mutated) + 1)
                op = rng.random()
                if op < 0.3 and mutated:
                    del mutated[min(pos, len(mutated) - 1)]
                elif op < 0.55:
                    mutated.insert(pos, rng.choice(["\t", " ", "\n", "X", "NV", "0", "-", "\x00"]))
                elif op < 0.8:
                    mutated = mutated[:pos]
                else:
                    lines = "".join(mutated).splitlines(keepends=True)
                    rng.shuffle(lines)
                    mutated = list("".join(lines))
                edits += 1
            topo = parse_topology("".join(mutated))
            assert isinstance(topo, Topology)
            json.dumps(topology_to_json(topo, advise(topo)))
            topology_to_text(topo, advise(topo))
    assert edits > 1000


# --- crafted pastes --------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["tabs", "spaces", "crlf"])
def test_sixteen_gpus_with_nics_round_trip(style):
    nic_links = {
        (g, n): ("PIX" if g // 4 == n else ("NODE" if g // 8 == n // 2 else "SYS"))
        for g in range(16)
        for n in range(4)
    }
    text = render(RIG16, 16, nics=NICS4, nic_links=nic_links, affinity=AFF16)
    if style == "spaces":
        text = text.expandtabs(8)
    elif style == "crlf":
        text = text.replace("\n", "\r\n")
    data = topology_to_json(parse_topology(text))
    assert data["gpus"] == [f"GPU{i}" for i in range(16)]
    assert data["links"] == expect_links(RIG16)
    assert data["gpu_nic_links"] == {f"GPU{g}-NIC{n}": c for (g, n), c in sorted(nic_links.items())}
    assert data["nics"] == {f"NIC{i}": name for i, name in enumerate(NICS4)}
    for key, values in AFF16.items():
        assert data[key] == {f"GPU{i}": v for i, v in enumerate(values)}
    assert data["warnings"] == []
    assert data["legend_complete"] is True


def test_old_driver_without_numa_columns_and_named_nic_columns():
    nics = ("mlx5_2", "mlx5_0")
    nic_links = {(g, n): ("PIX" if g // 2 == n else "SYS") for g in range(4) for n in range(2)}
    links = two_socket(4, "PHB", "SYS")
    cpus = ["0-19,40-59"] * 4
    text = render(
        links,
        4,
        nics=nics,
        nic_links=nic_links,
        affinity={CPU_AFFINITY: cpus},
        nic_column_names=True,
    ).expandtabs(8)
    data = topology_to_json(parse_topology(text))
    assert data["links"] == expect_links(links)
    assert data["cpu_affinity"] == {f"GPU{i}": c for i, c in enumerate(cpus)}
    assert NUMA_AFFINITY not in data and GPU_NUMA_ID not in data
    assert data["gpu_nic_links"]["GPU1-mlx5_2"] == "PIX"
    assert data["gpu_nic_links"]["GPU3-mlx5_2"] == "SYS"
    assert data["nics"] == {"mlx5_2": "mlx5_2", "mlx5_0": "mlx5_0"}
    assert data["warnings"] == []


def test_no_affinity_columns_at_all():
    links = {(0, 1): "PIX"}
    data = topology_to_json(parse_topology(render(links, 2, affinity={}, legend=False)))
    assert data["links"] == {"GPU0-GPU1": "PIX"}
    assert not set(AFFINITY_COLUMNS) & set(data)
    assert data["legend_complete"] is None


def test_single_gpu():
    text = render({}, 1, affinity={CPU_AFFINITY: ["0-7"], NUMA_AFFINITY: ["0"]})
    data = topology_to_json(parse_topology(text))
    assert data["gpus"] == ["GPU0"] and data["links"] == {}
    assert data["cpu_affinity"] == {"GPU0": "0-7"}


@pytest.mark.parametrize(
    ("row", "link", "cpus", "node"),
    [
        ("GPU0\t X \tSYS0-23\t0", "SYS", "0-23", "0"),
        ("GPU0\t X \tNV40-23\t0", "NV4", "0-23", "0"),
        ("GPU0\t X \tNV120-23,48-71\t1", "NV12", "0-23,48-71", "1"),
        ("GPU0\t X \tNV18NV18\t0-51\t0", "NV18", "0-51", "0"),
    ],
)
def test_cells_merged_by_lost_tabs(row, link, cpus, node):
    n = 3 if row.count("NV18") == 2 else 2
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"
    data = topology_to_json(parse_topology(f"{header}\n{row}\n"))
    assert data["links"]["GPU0-GPU1"] == link
    if n == 3:
        assert data["links"]["GPU0-GPU2"] == link
    assert data["cpu_affinity"]["GPU0"] == cpus
    assert data["numa_affinity"]["GPU0"] == node
    assert any("ran together" in w for w in data["warnings"])


def test_terminal_cut_columns_keep_what_is_visible():
    links = two_socket(8, "NV8", "NV8")
    text = render(
        links,
        8,
        nics=NICS4,
        nic_links=NIC_LINKS8,
        affinity={CPU_AFFINITY: ["0-31,64-95"] * 4 + ["32-63,96-127"] * 4},
    ).expandtabs(8)
    width = 8 + 8 * 6  # label column and GPU0..GPU5 only
    cut = "\n".join(line[:width] for line in text.splitlines())
    data = topology_to_json(parse_topology(cut))
    seen = {k: v for k, v in expect_links(links).items() if int(k.split("-GPU")[1]) < 6}
    assert {k: data["links"][k] for k in seen} == seen
    # GPU6 and GPU7 lost their columns but their rows show their links to GPU0..GPU5.
    assert data["links"]["GPU0-GPU7"] == links[(0, 7)]
    assert "GPU6-GPU7" not in data["links"]
    assert any("no cell for 1 GPU pair" in w for w in data["warnings"])
    assert any("GPU6" in w and "no columns" in w for w in data["warnings"])


def test_a_cut_last_row_drops_its_partial_cell():
    links = {(0, 1): "NV12", (0, 2): "NV12", (1, 2): "NV12"}
    text = render(links, 3, affinity={CPU_AFFINITY: ["0-7"] * 3}, legend=False)
    cut = text[: text.rindex("NV12") + 3]  # the text stops inside "NV12" of the last row
    data = topology_to_json(parse_topology(cut))
    assert "NV1" not in data["links"].values()
    assert data["links"]["GPU0-GPU2"] == "NV12"  # from GPU0's row
    assert any("fewer cells" in w for w in data["warnings"])


def test_header_less_rows_are_read_as_a_square_matrix():
    text = render({(0, 1): "NV4"}, 2, affinity={CPU_AFFINITY: ["0-23", "0-23"]}, legend=False)
    rows_only = "\n".join(text.splitlines()[1:])
    data = topology_to_json(parse_topology(rows_only))
    assert data["links"] == {"GPU0-GPU1": "NV4"}
    assert data["cpu_affinity"] == {"GPU0": "0-23", "GPU1": "0-23"}
    assert any("no header" in w for w in data["warnings"])


def test_cut_legends_are_reported():
    text = render(
        two_socket(4),
        4,
        nics=NICS4[:2],
        nic_links={(g, n): "NODE" for g in range(4) for n in range(2)},
        affinity={CPU_AFFINITY: ["0-7"] * 4},
    )
    cut_nic = text[: text.index("  NIC1:")]
    data = topology_to_json(parse_topology(cut_nic))
    assert data["nics"] == {"NIC0": NICS4[0]}
    assert any("NIC Legend is cut" in w and "NIC1" in w for w in data["warnings"])
    cut_legend = text[: text.index("  PXB")]
    data = topology_to_json(parse_topology(cut_legend))
    assert data["legend_complete"] is False
    assert any("legend is cut" in w for w in data["warnings"])
    assert data["links"] == expect_links(two_socket(4))


def test_markdown_table_paste():
    text = (
        "|      | GPU0 | GPU1 | CPU Affinity | NUMA Affinity |\n"
        "|------|------|------|--------------|---------------|\n"
        "| GPU0 |  X   | NV2  | 0-23         | 0             |\n"
        "| GPU1 | NV2  |  X   | 0-23         | 0             |\n"
    )
    data = topology_to_json(parse_topology(text))
    assert data["links"] == {"GPU0-GPU1": "NV2"}
    assert data["numa_affinity"] == {"GPU0": "0", "GPU1": "0"}


def test_problems_each_get_a_warning():
    header = "\tGPU0\tGPU1\tGPU2\tCPU Affinity"
    asym = (
        f"{header}\nGPU0\t X \tNV4\tSYS\t0-7\nGPU1\tPHB\t X \tSYS\t0-7\nGPU2\tSYS\tSYS\t X \t0-7\n"
    )
    data = topology_to_json(parse_topology(asym))
    assert data["links"]["GPU0-GPU1"] == "NV4"  # the upper triangle is the cell as printed
    assert any("not symmetric" in w and "GPU0-GPU1" in w for w in data["warnings"])
    odd = (
        f"{header}\nGPU0\t X \tC2C\tSYS\t0-7\nGPU1\tC2C\t X \tSYS\t0-7\nGPU2\tSYS\tSYS\t X \t0-7\n"
    )
    data = topology_to_json(parse_topology(odd))
    assert data["links"]["GPU0-GPU1"] == "C2C"
    assert any("C2C" in w for w in data["warnings"])
    twice = asym.replace("PHB", "NV4") * 2
    data = topology_to_json(parse_topology(twice))
    assert any("second matrix" in w for w in data["warnings"])
    bad_cpu = asym.replace("PHB", "NV4").replace("SYS\t0-7\nGPU1", "SYS\t-31,64-95\nGPU1")
    data = topology_to_json(parse_topology(bad_cpu))
    assert CPU_AFFINITY in data["unreliable"]
    assert any("'-31,64-95'" in w for w in data["warnings"])
    shifted = (
        f"{header}\nGPU0\tNV4\t X \tSYS\t0-7\nGPU1\tNV4\t X \tSYS\t0-7\nGPU2\tSYS\tSYS\t X \t0-7\n"
    )
    data = topology_to_json(parse_topology(shifted))
    assert any("row GPU0" in w and "shifted" in w for w in data["warnings"])


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n   \n",
        "GPU0",
        "\tGPU0\tGPU1\n",
        "nvidia-smi: command not found\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
        "X = Self\nNV# = Connection traversing a bonded set of # NVLinks\n",
    ],
)
def test_no_matrix_is_no_gpus_and_one_reason(text):
    topo = parse_topology(text)
    assert not topo.found and topo.gpus == ()
    assert len(topo.warnings) == 1 and topo.warnings[0].startswith(NO_MATRIX)


def test_binary_garbage_never_raises():
    rng = random.Random(7)
    for size in (1, 17, 4096, 200_000):
        data = bytes(rng.randrange(256) for _ in range(size))
        topo = parse_topology(decode_text(data))
        assert not topo.found
    # Garbage around a real matrix still yields the matrix.
    text = render({(0, 1): "PHB"}, 2, affinity={CPU_AFFINITY: ["0-3", "0-3"]})
    noisy = decode_text(bytes(range(256)) + text.encode() + bytes(range(255, -1, -1)))
    assert parse_topology(noisy).link_map() == {"GPU0-GPU1": "PHB"}


def test_cpu_list_validation():
    assert is_cpu_list("0-23,48-71") and is_cpu_list("5") and is_cpu_list("0,2,4")
    assert not is_cpu_list("-31,64-95") and not is_cpu_list("63-32") and not is_cpu_list("")


def test_p2p_matrix():
    text = (
        " \tGPU0\tGPU1\tGPU2\n GPU0\tX\tOK\tTNS\n GPU1\tOK\tX\tNS\n GPU2\tTNS\tNS\tX\n"
        "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n"
    )
    assert parse_p2p_matrix(text) == (
        ("GPU0", "GPU1", "OK"),
        ("GPU0", "GPU2", "TNS"),
        ("GPU1", "GPU2", "NS"),
    )
    assert parse_p2p_matrix("garbage") == ()


def test_sim_profiles_parse_without_warnings_and_agree_with_the_profile():
    from lltui.sources.sim import PROFILES

    assert PROFILES
    for name, profile in PROFILES.items():
        topo = parse_topology(profile.topo_text)
        assert topo.warnings == (), (name, topo.warnings)
        n = len(profile.gpus)
        assert topo.gpus == tuple(f"GPU{i}" for i in range(n))
        assert topo.link_map() == expect_links(profile.links)
        assert topo.gpu_nic_map() == {
            f"GPU{g}-NIC{k}": c for (g, k), c in sorted(profile.nic_links.items())
        }
        assert topo.nic_map() == {f"NIC{i}": nic for i, nic in enumerate(profile.nics)}
        assert topo.affinity(CPU_AFFINITY) == {
            f"GPU{i}": v for i, v in enumerate(profile.cpu_affinity)
        }
        assert topo.affinity(NUMA_AFFINITY) == {
            f"GPU{i}": v for i, v in enumerate(profile.numa_affinity)
        }


# --- text output -----------------------------------------------------------------------------


def test_text_report_fits_80_columns_up_to_16_gpus():
    nic_links = {(g, n): "SYS" for g in range(16) for n in range(4)}
    topo = parse_topology(render(RIG16, 16, nics=NICS4, nic_links=nic_links, affinity=AFF16))
    text = topology_to_text(topo, advise(topo), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    for i in range(16):
        assert f"GPU{i} " in text or text.count(f"GPU{i}\n")
    # Every GPU pair's cell is in the matrix: count NV4 cells (each pair twice).
    pairs_nv4 = sum(1 for c in RIG16.values() if c == "NV4")
    matrix = text.split("GPU to NIC")[0]
    assert matrix.count("NV4 ") + matrix.count("NV4\n") >= 2 * pairs_nv4
    for title in ("Legend", "Affinity", "NICs", "Advice"):
        assert title in text


def test_text_report_shows_warnings_and_advice():
    header = "\tGPU0\tGPU1\tCPU Affinity"
    topo = parse_topology(f"{header}\nGPU0\t X \tSYS0-7\nGPU1\tSYS\t X \t0-7\n")
    advice = advise(topo)
    text = topology_to_text(topo, advice)
    assert "Warnings" in text and "ran together" in text
    assert all(a.code and a.message.split()[0] in text for a in advice)


# --- the live sources --------------------------------------------------------------------


def fake_smi_script(tmp_path: Path, topo_text: str, *, sleep: float = 0.0) -> Path:
    """A stand-in ``nvidia-smi`` executable (this machine has none) that prints saved output."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (tmp_path / "topo.txt").write_text(topo_text)
    (tmp_path / "p2p.txt").write_text(
        " \tGPU0\tGPU1\n GPU0\tX\tOK\n GPU1\tOK\tX\n\nLegend:\n\n  X    = Self\n"
    )
    (tmp_path / "query.txt").write_text(
        "0, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 24576, 8.6, 4, 16\n"
        "1, NVIDIA GeForce RTX 3090, 00000000:21:00.0, 24576, 8.6, 4, 16\n"
    )
    script = bindir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f"sleep {sleep}\n"
        f'case "$1 $2" in\n'
        f'  "topo -m") cat "{tmp_path}/topo.txt" ;;\n'
        f'  "topo -p2p") cat "{tmp_path}/p2p.txt" ;;\n'
        f'  --query-gpu=*) cat "{tmp_path}/query.txt" ;;\n'
        '  *) echo "unknown option $1" >&2; exit 2 ;;\n'
        "esac\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bindir


def nvlink_pair_fake() -> fake.FakeTopoNvml:
    b0, b1 = "00000000:01:00.0", "00000000:21:00.0"
    return fake.FakeTopoNvml(
        [
            fake.FakeGpu("NVIDIA GeForce RTX 3090", b0, 24576, (8, 6), [b1] * 4, range(24), 0),
            fake.FakeGpu("NVIDIA GeForce RTX 3090", b1, 24576, (8, 6), [b0] * 4, range(24), 0),
        ],
        {(0, 1): fake.NVML_TOPOLOGY_HOSTBRIDGE},
    )


def test_smi_source_runs_argv_with_a_timeout(tmp_path):
    text = render({(0, 1): "NV4"}, 2, affinity={CPU_AFFINITY: ["0-23"] * 2})
    bindir = fake_smi_script(tmp_path, text)
    seen: list[tuple[list[str], dict]] = []

    def run(argv, **kw):
        import subprocess

        seen.append((argv, kw))
        return subprocess.run(argv, **kw)

    live = topo_source.read_smi_topology(run=run, which=lambda n: str(bindir / n))
    assert live.topology.link_map() == {"GPU0-GPU1": "NV4"}
    assert live.topology.p2p_map() == {"GPU0-GPU1": "OK"}
    assert [g.compute_capability for g in live.gpus] == [(8, 6), (8, 6)]
    assert live.gpus[1].pci_bus_id == "00000000:21:00.0"
    assert live.gpus[0].memory_total == 24576 * 1024 * 1024
    for argv, kw in seen:
        assert isinstance(argv, list) and argv[0] == str(bindir / "nvidia-smi")
        assert kw["timeout"] > 0 and not kw.get("shell")


def test_smi_source_timeout_and_failure_are_one_line(tmp_path, monkeypatch):
    text = render({(0, 1): "NV4"}, 2)
    bindir = fake_smi_script(tmp_path, text, sleep=5)
    with pytest.raises(SourceUnavailable, match=r"did not answer within 0\.5 s"):
        topo_source.run_smi(["topo", "-m"], which=lambda n: str(bindir / n), timeout=0.5)
    bindir = fake_smi_script(tmp_path, text)
    with pytest.raises(SourceUnavailable, match="failed: unknown option --bogus"):
        topo_source.run_smi(["--bogus"], which=lambda n: str(bindir / n))
    with pytest.raises(topo_source.SmiMissing):
        topo_source.run_smi(["topo", "-m"], which=lambda n: None)


def test_smi_over_ssh_builds_a_batch_mode_argv():
    seen = []

    class Done:
        returncode = 0
        stdout = render({(0, 1): "PHB"}, 2)
        stderr = ""

    def run(argv, **kw):
        seen.append(argv)
        return Done()

    live = topo_source.read_smi_topology(host="gpu-box", run=run, which=lambda n: f"/usr/bin/{n}")
    assert live.topology.link_map() == {"GPU0-GPU1": "PHB"}
    assert live.topology.source == "nvidia-smi:gpu-box"
    argv = seen[0]
    assert argv[0] == "/usr/bin/ssh" and "BatchMode=yes" in argv
    assert argv[argv.index("gpu-box") + 1 :] == ["nvidia-smi", "topo", "-m"]
    assert argv[argv.index("gpu-box") - 1] == "--"  # nothing after it is an ssh option


@pytest.mark.parametrize("host", ["-oProxyCommand=touch /tmp/x", "box; rm -rf ~", "a b"])
def test_smi_over_ssh_refuses_hosts_ssh_would_misread(host):
    def run(argv, **kw):
        raise AssertionError(f"ran {argv}")

    with pytest.raises(ValueError, match="host"):
        topo_source.read_smi_topology(host=host, run=run, which=lambda n: f"/usr/bin/{n}")


def test_gpu_query_parser_handles_old_drivers_and_na():
    fields = tuple(f for f in topo_source.QUERY_FIELDS if f != "compute_cap")
    gpus = topo_source.parse_gpu_query(
        "0, Tesla V100-SXM2-16GB, 0000:06:00.0, 16160, 3, 16\n"
        "1, Tesla V100-SXM2-16GB, 0000:07:00.0, [N/A], [N/A], 16\nnot a row\n",
        fields,
    )
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].pci_bus_id == "00000000:06:00.0"
    assert gpus[0].compute_capability is None and gpus[0].pcie_gen_max == 3
    assert gpus[1].memory_total == 0 and gpus[1].pcie_gen_max is None


def test_fake_pynvml_agrees_with_the_real_binding():
    real = pytest.importorskip("pynvml")
    for name in fake.CONSTANT_NAMES:
        assert getattr(real, name) == getattr(fake, name), name
    for name in fake.FUNCTION_NAMES:
        assert callable(getattr(real, name)), name
    for cls in ("NVMLError", "NVMLError_NotSupported", "NVMLError_InvalidArgument"):
        assert hasattr(real, cls)


@needs_fixtures
def test_nvml_nvlink_bridge_matches_the_real_paste_of_that_rig():
    live = topo_source.read_nvml_topology(nvlink_pair_fake(), cpu_count=24)
    from_nvml = topology_to_json(live.topology)
    paste = topology_to_json(
        parse_topology(next(p for p in TOPO_FILES if p.name.startswith("18")).read_text())
    )
    for key in ("gpus", "links", *AFFINITY_COLUMNS):
        assert from_nvml[key] == paste[key], key
    assert from_nvml["p2p"] == {"GPU0-GPU1": "OK"}
    assert [g.name for g in live.gpus] == ["NVIDIA GeForce RTX 3090"] * 2


@needs_fixtures
def test_nvml_nvswitch_rig_matches_the_real_paste_of_an_8xh100():
    paste_path = next(p for p in TOPO_FILES if p.name.startswith("02"))
    paste = topology_to_json(parse_topology(paste_path.read_text()))
    gpus = []
    for i, bus in enumerate(("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")):
        cpus = [*range(0, 52), *range(104, 156)] if i < 4 else [*range(52, 104), *range(156, 208)]
        gpus.append(
            fake.FakeGpu(
                "NVIDIA H100 80GB HBM3",
                f"00000000:{bus}:00.0",
                81559,
                (9, 0),
                [fake.SWITCH] * 18,
                cpus,
                0 if i < 4 else 1,
            )
        )
    ancestors = {
        (i, j): fake.NVML_TOPOLOGY_NODE if (i < 4) == (j < 4) else fake.NVML_TOPOLOGY_SYSTEM
        for i in range(8)
        for j in range(i + 1, 8)
    }
    for kw in ({}, {"legacy_bus_ids": True, "missing": ["nvmlDeviceGetNvLinkRemoteDeviceType"]}):
        live = topo_source.read_nvml_topology(
            fake.FakeTopoNvml(gpus, ancestors, **kw), cpu_count=208
        )
        data = topology_to_json(live.topology)
        for key in ("gpus", "links", CPU_AFFINITY, NUMA_AFFINITY):
            assert data[key] == paste[key], (kw, key)


@needs_fixtures
def test_nvml_hybrid_cube_mesh_counts_links_per_pair():
    entry = truth_entries()["topo/04-8xV100-DGX1-hybrid-cube-mesh-4mlx5-unordered-old-legend.txt"][
        "truth"
    ]
    buses = [f"00000000:{b:02X}:00.0" for b in (0x06, 0x07, 0x0A, 0x0B, 0x85, 0x86, 0x89, 0x8A)]
    nvlinks: list[list[str]] = [[] for _ in range(8)]
    for key, cell in entry["links"].items():
        a, b = (int(x[3:]) for x in key.split("-"))
        if cell.startswith("NV"):
            nvlinks[a] += [buses[b]] * int(cell[2:])
            nvlinks[b] += [buses[a]] * int(cell[2:])
    gpus = [
        fake.FakeGpu("Tesla V100-SXM2-16GB", buses[i], 16160, (7, 0), [*links, ""], [*range(20)], 0)
        for i, links in enumerate(nvlinks)
    ]
    ancestors = {(i, j): fake.NVML_TOPOLOGY_SYSTEM for i in range(8) for j in range(i + 1, 8)}
    live = topo_source.read_nvml_topology(fake.FakeTopoNvml(gpus, ancestors), cpu_count=40)
    assert live.topology.link_map() == entry["links"]


def test_nvml_pcie_rig_with_p2p_status_and_failures():
    buses = ["00000000:17:00.0", "00000000:31:00.0", "00000000:B1:00.0", "00000000:CA:00.0"]
    gpus = [
        fake.FakeGpu(
            "NVIDIA L4", b, 23034, (8, 9), [], range(i // 2 * 24, i // 2 * 24 + 24), i // 2
        )
        for i, b in enumerate(buses)
    ]
    ancestors = {
        (i, j): fake.NVML_TOPOLOGY_NODE if i // 2 == j // 2 else fake.NVML_TOPOLOGY_SYSTEM
        for i in range(4)
        for j in range(i + 1, 4)
    }
    del ancestors[(1, 3)]  # the driver cannot tell this pair
    p2p = {(0, 2): fake.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED}
    nvml = fake.FakeTopoNvml(
        gpus,
        ancestors,
        p2p=p2p,
        fail={"nvmlDeviceGetCpuAffinity": {2: fake.NVMLError_NotSupported}},
    )
    live = topo_source.read_nvml_topology(nvml, cpu_count=48)
    topo = live.topology
    assert topo.link_map() == {
        "GPU0-GPU1": "NODE",
        "GPU0-GPU2": "SYS",
        "GPU0-GPU3": "SYS",
        "GPU1-GPU2": "SYS",
        "GPU2-GPU3": "NODE",
    }
    assert any("GPU1-GPU3" in w for w in topo.warnings)
    assert topo.p2p_map()["GPU0-GPU2"] == "TNS" and topo.p2p_map()["GPU0-GPU1"] == "OK"
    assert topo.cpu_affinity is None  # one GPU would not say: the column is left out
    assert topo.affinity(NUMA_AFFINITY) == {"GPU0": "0", "GPU1": "0", "GPU2": "1", "GPU3": "1"}
    assert nvml.calls[-1] == "nvmlShutdown" and not nvml.initialised
    codes = {a.code: a for a in advise(topo, live.gpus)}
    assert codes["p2p"].severity == "warn" and "GPU0-GPU2 TNS" in codes["p2p"].message


def test_nvml_cannot_start_is_one_line_and_shuts_down():
    with pytest.raises(SourceUnavailable, match="NVML did not initialise: Driver Not Loaded"):
        topo_source.read_nvml_topology(
            fake.FakeTopoNvml([], init_error=fake.NVMLError_DriverNotLoaded)
        )
    empty = fake.FakeTopoNvml([])
    with pytest.raises(SourceUnavailable, match="no GPU"):
        topo_source.read_nvml_topology(empty)
    assert empty.calls[-1] == "nvmlShutdown"


def test_nvml_lost_gpu_is_named_and_the_rest_are_read():
    nvml = nvlink_pair_fake()
    nvml.gpus.append(fake.FakeGpu("NVIDIA GeForce RTX 3090", "00000000:41:00.0", 24576, (8, 6)))
    nvml.ancestors.update({(0, 2): 30, (1, 2): 30})
    nvml.fail = {"nvmlDeviceGetHandleByIndex": {2: fake.NVMLError_GpuIsLost}}
    topo = topo_source.read_nvml_topology(nvml, cpu_count=24).topology
    assert topo.link_map() == {"GPU0-GPU1": "NV4"}
    assert any("GPU2" in w for w in topo.warnings)


def test_live_reader_falls_back_to_nvml_without_nvidia_smi():
    live = topo_source.read_live_topology(which=lambda n: None, nvml=nvlink_pair_fake())
    assert live.topology.source == "nvml" and live.topology.link_map() == {"GPU0-GPU1": "NV4"}
    with pytest.raises(SourceUnavailable, match="nvidia-smi is not on PATH, and NVML"):
        topo_source.read_live_topology(
            which=lambda n: None,
            nvml=fake.FakeTopoNvml([], init_error=fake.NVMLError_LibraryNotFound),
        )


# --- lltui topo ------------------------------------------------------------------------------

CONTRACT_KEYS = {"gpus", "links", "gpu_nic_links", "nics", "warnings", "advice"}


@needs_fixtures
def test_cli_json_from_a_file(capsys):
    path = next(p for p in TOPO_FILES if p.name.startswith("09"))
    truth = truth_entries()[f"topo/{path.name}"]["truth"]
    assert main(["topo", "--file", str(path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert CONTRACT_KEYS | {CPU_AFFINITY, NUMA_AFFINITY} <= set(data)
    assert GPU_NUMA_ID not in data
    assert data["links"] == truth["links"] and data["nics"] == truth["nic_legend"]
    for item in data["advice"]:
        assert set(item) == {"severity", "code", "message", "hint"}
        assert item["severity"] in ("info", "warn")


@needs_fixtures
def test_cli_text_from_stdin(capsys, monkeypatch):
    import io

    path = next(p for p in TOPO_FILES if p.name.startswith("04"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    assert main(["topo", "--file", "-"]) == 0
    out = capsys.readouterr().out
    assert "GPU topology from standard input: 8 GPUs, 4 NICs" in out
    assert "mlx5_2" in out and "NV2" in out and "Advice" in out


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "is empty"),
        (b"\n \n", "is empty"),
        (bytes(range(256)) * 40, "no nvidia-smi topo -m matrix"),
        (b"hello\nworld\n", "no nvidia-smi topo -m matrix"),
    ],
)
def test_cli_bad_input_is_exit_2_with_one_line(tmp_path, capsys, content, needle):
    path = tmp_path / "topo.txt"
    path.write_bytes(content)
    assert main(["topo", "--file", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert needle in captured.err and len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err


def test_cli_missing_file_and_directory_are_exit_2(tmp_path, capsys):
    assert main(["topo", "--file", str(tmp_path / "nope.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["topo", "--file", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_cli_without_nvidia_smi_or_nvml_is_exit_1(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(
        sys.modules, "pynvml", fake.FakeTopoNvml([], init_error=fake.NVMLError_LibraryNotFound)
    )
    assert main(["topo"]) == 1
    err = capsys.readouterr().err
    assert "nvidia-smi is not on PATH" in err and "--file" in err
    assert len(err.strip().splitlines()) == 1


def test_cli_uses_nvml_when_nvidia_smi_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "pynvml", nvlink_pair_fake())
    assert main(["topo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "nvml" and data["links"] == {"GPU0-GPU1": "NV4"}
    assert data["p2p"] == {"GPU0-GPU1": "OK"}


def test_cli_live_nvidia_smi(tmp_path, capsys, monkeypatch):
    text = render(
        {(0, 1): "PHB"}, 2, affinity={CPU_AFFINITY: ["0-15"] * 2, NUMA_AFFINITY: ["0"] * 2}
    )
    bindir = fake_smi_script(tmp_path, text)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.setenv("GGML_CUDA_P2P", "0")
    assert main(["topo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "nvidia-smi" and data["links"] == {"GPU0-GPU1": "PHB"}
    codes = {a["code"]: a for a in data["advice"]}
    # The live environment counts: GGML_CUDA_P2P=0 still turns peer access on.
    assert codes["ggml-cuda-p2p-set"]["severity"] == "warn"
    assert main(["topo"]) == 0
    assert "GPU topology from nvidia-smi topo -m: 2 GPUs" in capsys.readouterr().out


def test_cli_sim_profile(capsys):
    assert main(["--source", "sim:mixed-4090-3090", "topo", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "sim:mixed-4090-3090" and data["warnings"] == []
    codes = {a["code"]: a for a in data["advice"]}
    assert codes["cuda-device-order"]["severity"] == "warn"
    assert main(["topo", "--source", "sim:16xv100-dgx2"]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "GPU15" in out
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize(("source", "needle"), [("replay:x.jsonl", "replay"), ("bogus", "unknown")])
def test_cli_sources_topo_cannot_read_are_exit_2(capsys, source, needle):
    assert main(["topo", "--source", source]) == 2
    assert needle in capsys.readouterr().err

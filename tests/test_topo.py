"""nvidia-smi topo -m: the parser on real pastes and on crafted mangling, and the text
report. The live and NVML sources and ``lltui topo`` are in test_topo_live.py."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from support.topo_fixtures import (
    AFF16,
    NIC_LINKS8,
    NICS4,
    RIG16,
    TOPO_FILES,
    expect_links,
    render,
    truth_entries,
    two_socket,
)

from lltui.cli import main
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

# --- real pastes ---------------------------------------------------------------------------


def test_every_topo_fixture_has_a_truth_entry():
    entries = truth_entries()
    assert {f"topo/{p.name}" for p in TOPO_FILES} <= set(entries)


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


def test_crlf_and_lone_cr_read_like_lf():
    for path in TOPO_FILES:
        text = path.read_text()
        lf = text.replace("\r\n", "\n")
        base = topology_to_json(parse_topology(lf))
        assert topology_to_json(parse_topology(lf.replace("\n", "\r\n"))) == base
        assert topology_to_json(parse_topology(lf.replace("\n", "\r"))) == base


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


def test_a_row_repeated_thousands_of_times_is_one_short_warning():
    rows = ["        GPU0    GPU1", "GPU0     X      NV4", "GPU1    NV4      X"]
    data = topology_to_json(parse_topology("\n".join(rows + [rows[1]] * 5000)))
    (warning,) = [w for w in data["warnings"] if "repeated" in w]
    assert warning == "rows repeated (GPU0, 5000 repeats): the first of each was read"


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
    from lltui.sources.gpu.sim import PROFILES

    assert PROFILES
    for name, profile in PROFILES.items():
        topo = parse_topology(profile.topo_text)
        assert topo.warnings == (), (name, topo.warnings)
        n = len(profile.gpus)
        assert topo.gpus == tuple(f"GPU{i}" for i in range(n))
        assert topo.link_map() == expect_links(profile.links)
        if all(g.amd for g in profile.gpus):  # amd-smi topology: no affinity columns
            assert topo.source.startswith("amd-smi")
            continue
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


def test_a_cut_paste_judges_nothing_from_the_pairs_left():
    """The first 300 bytes of an 8xA100 paste (NV12 everywhere): the pairs it lost were not
    counted as missing links, and the advice called NV12 too slow for tensor parallelism and
    picked GPU0 for its 84 NVLinks."""
    (path,) = [p for p in TOPO_FILES if p.name.startswith("01-8xA100")]
    text = path.read_text()
    advice = advise(parse_topology(text[:300]))
    said = " ".join(a.message for a in advice)
    assert "GPU pair(s) are not in the matrix" in said
    assert "too slow" not in said and "NVLinks to the others" not in said
    assert not [a for a in advice if a.code == "allreduce-cost"]
    whole = " ".join(a.message for a in advise(parse_topology(text)))
    assert "every GPU pair is on NVLink" in whole


@pytest.mark.parametrize("name", ["p2p-r-8xH100-OK.txt", "p2p-r-2xL4-CNS.txt"])
def test_a_p2p_status_paste_is_not_read_as_links(name, capsys):
    """`nvidia-smi topo -p2p r` looks like `topo -m` but holds OK/CNS, not links: it was read
    as a matrix of undocumented link codes, with advice from them."""
    path = Path(__file__).resolve().parent / "fixtures" / "topo-format" / name
    topo = parse_topology(path.read_text())
    assert not topo.found and topo.gpus == ()
    assert len(topo.warnings) == 1 and "topo -p2p" in topo.warnings[0]
    assert parse_p2p_matrix(path.read_text())  # the live reader still reads it as P2P status
    assert main(["topo", "--file", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`nvidia-smi topo -p2p` output" in err[0]


@pytest.mark.parametrize("p2p_first", [False, True])
def test_a_paste_of_topo_m_and_p2p_r_reads_both(p2p_first, capsys, tmp_path):
    """Users paste `nvidia-smi topo -m` and `topo -p2p r` together: the P2P table was ignored
    after the matrix (advice: 'peer access may work; test it' though it said CNS), and before
    it the whole paste was refused as 'topo -p2p output' (exit 2). Both are read now, the
    P2P statuses attached as the live reader attaches them."""
    (matrix,) = [p for p in TOPO_FILES if p.name.startswith("12-2xRTX6000Ada")]
    p2p = Path(__file__).resolve().parent / "fixtures" / "topo-format" / "p2p-r-2xL4-CNS.txt"
    parts = [p2p.read_text(), matrix.read_text()]
    text = "\n".join(parts if p2p_first else parts[::-1])
    topo = parse_topology(text)
    assert topo.p2p == (("GPU0", "GPU1", "CNS"),) and topo.link_map() == {"GPU0-GPU1": "PHB"}
    assert topo.warnings == () and topo.legend_complete
    path = tmp_path / "both.txt"
    path.write_text(text)
    assert main(["topo", "--file", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["p2p"] == {"GPU0-GPU1": "CNS"}
    assert out["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}
    said = [a["message"] for a in out["advice"] if a["code"] == "p2p"]
    assert said == ["peer-to-peer is not available between GPU0-GPU1 CNS (chipset not supported)"]
    # a P2P table of GPUs the matrix has not is not attached to it
    eight = p2p.with_name("p2p-r-8xH100-OK.txt").read_text()
    other = parse_topology(matrix.read_text() + "\n" + eight)
    assert other.p2p == () and "GPU2-GPU7" in other.warnings[0]


def test_a_p2p_table_of_another_capability_is_not_taken_for_the_read_status():
    """`topo -p2p n` (NVLink) pasted with the matrix says NS for every PCIe pair: taken for
    the read status it would have said peer-to-peer is not available there."""
    (matrix,) = [p for p in TOPO_FILES if p.name.startswith("12-2xRTX6000Ada")]
    p2p = Path(__file__).resolve().parent / "fixtures" / "topo-format" / "p2p-r-2xL4-CNS.txt"
    nvlink = p2p.read_text().replace("-p2p r", "-p2p n").replace("CNS", "NS")
    topo = parse_topology(matrix.read_text() + "\n" + nvlink)
    assert topo.p2p == () and topo.link_map() == {"GPU0-GPU1": "PHB"}
    assert topo.warnings == ("the `topo -p2p n` table is not the P2P read status "
                             "(`topo -p2p r`): not used",)  # fmt: skip
    assert "topo -p2p` output" in parse_topology(nvlink).warnings[0]


def test_the_title_is_wrapped_between_words_never_inside_the_file_name(monkeypatch, capsys):
    """COLUMNS=60 lltui topo --file .../18-2xRTX3090-NVLink-bridge-...txt cut the file's
    name in two lines ('...NVLi' / 'nk-bridge...'): a word longer than a line is kept whole."""
    path = Path(__file__).parent / "fixtures" / "real" / "topo"
    path = path / "18-2xRTX3090-NVLink-bridge-NV4-with-prompts.txt"
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["topo", "--file", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"GPU topology from\n  {path}:\n  2 GPUs; every GPU pair NV4")

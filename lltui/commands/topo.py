"""``lltui topo``: ``nvidia-smi topo -m`` parsed (live, from a file or stdin), with advice."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lltui.commands import CliError, add_source_option, print_json, rig_request, source_spec

MAX_INPUT_BYTES = 8 * 1024 * 1024  # a 16-GPU, 16-NIC matrix with legends is a few KiB


def register(sub: Any) -> None:
    p = sub.add_parser(
        "topo",
        help="nvidia-smi topo -m parsed (live, from a file, or stdin) + advice",
        description="Show the GPU topology (NVLink, PCIe, NICs, CPU/NUMA affinity) with "
        "advice for llama.cpp: read live from nvidia-smi (NVML where nvidia-smi is "
        "missing), from a saved `nvidia-smi topo -m`, or from a simulated rig.",
    )
    p.add_argument(
        "--file",
        metavar="PATH",
        default=None,
        help="a saved `nvidia-smi topo -m` output (with `nvidia-smi topo -p2p r` too, if "
        "saved with it: its P2P statuses are read); - reads standard input",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    add_source_option(
        p, sub=True, note="smi:HOST reads a host over ssh, sim:PROFILE a simulated rig"
    )
    p.set_defaults(func=run)


def _read_input(path: str) -> tuple[bytes, str]:
    if path == "-":
        if sys.stdin is None:  # started with its standard input closed (<&-)
            raise CliError("standard input is closed", 2)
        stream = getattr(sys.stdin, "buffer", None)
        if stream is not None:
            return stream.read(MAX_INPUT_BYTES + 1), "standard input"
        return sys.stdin.read(MAX_INPUT_BYTES + 1).encode("utf-8", "replace"), "standard input"
    try:
        with open(path, "rb") as f:
            return f.read(MAX_INPUT_BYTES + 1), path
    except FileNotFoundError:
        raise CliError(f"{path}: no such file", 2) from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a saved nvidia-smi topo -m", 2) from None
    except PermissionError:
        raise CliError(f"{path}: permission denied", 2) from None
    except OSError as exc:
        raise CliError(f"{path}: cannot read: {exc.strerror or exc}", 2) from None


def run(args: argparse.Namespace) -> int:
    import dataclasses
    import shutil

    from lltui.core.monitor.models import GpuStatic, RigInfo, SourceUnavailable
    from lltui.core.monitor.simulated import simulated_json, simulated_line
    from lltui.core.topo.advice import advise
    from lltui.core.topo.matrix import Topology
    from lltui.core.topo.parse import decode_text, parse_topology
    from lltui.core.topo.report import topology_to_json, topology_to_text

    topo: Topology
    rig: RigInfo | None = None  # the rig in use, where --source names none or a simulated one
    gpus: tuple[GpuStatic, ...] = ()
    env: dict[str, str] | None = None
    if args.file is not None:
        data, where = _read_input(args.file)
        if not data.strip():
            raise CliError(f"{where} is empty: expected the output of nvidia-smi topo -m", 2)
        cut = len(data) > MAX_INPUT_BYTES
        topo = parse_topology(decode_text(data[:MAX_INPUT_BYTES]))
        if not topo.found:
            raise CliError(f"{where}: {topo.warnings[0] if topo.warnings else 'no matrix'}", 2)
        if cut:
            note = f"only the first {MAX_INPUT_BYTES // (1024 * 1024)} MiB of the input were read"
            topo = dataclasses.replace(topo, warnings=(*topo.warnings, note))
    else:
        from lltui.services.rig import topology_in_use

        request = rig_request(args)
        if request.is_fleet:  # (auto would show this machine's rig, or a simulated one)
            fleet = f"--hosts {request.hosts_file}" if request.hosts_file else request.source
            raise CliError(
                f"topo reads one rig, and {fleet} is a fleet: pick one host with "
                "`lltui --source smi:HOST topo` (amd:HOST for AMD GPUs)",
                2,
            )
        source = source_spec(args)
        try:
            # auto without nvidia-smi or NVML: the simulated rig the monitor shows, said so
            report, rig = topology_in_use(source, request.host_timeout_s)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
        except SourceUnavailable as exc:
            amd = (source or "").partition(":")[0].lower() == "amd"  # (--file reads both)
            tool = "amd-smi topology" if amd else "nvidia-smi topo -m"
            raise CliError(f"{exc}; save `{tool}` on the rig and pass it with --file", 1) from None
        topo, gpus, where = report.live.topology, report.live.gpus, report.live.where
        env = report.env

    advice = advise(topo, gpus, env=env)
    if args.json:
        print_json(topology_to_json(topo, advice) | simulated_json(rig))
    else:
        width = max(60, min(160, shutil.get_terminal_size((80, 24)).columns))
        if rig is not None and rig.simulated:
            print(simulated_line(rig))
        print(topology_to_text(topo, advice, width=width, title=f"GPU topology from {where}"))
    return 0

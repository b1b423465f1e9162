"""``lltui fit MODEL.gguf [llama-server flags] [--gpus SPEC] [--json] [--oracle]``.

Reads the GGUF header (never the weights) and estimates, per device, what llama-server will
allocate with these flags: weights, KV cache, compute buffers, the host output buffer, and
whether it fits. Flags are llama-server's own, pasted as they are; the ones that do not
change memory are accepted and ignored.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lltui.commands import CliError, print_json

# lltui's own options, mixed freely with the llama-server flags
OWN_VALUE = ("--gpus", "--margin", "--host-free", "--cpu")
OWN_FLAGS = ("--json", "--oracle", "-h", "--help")

HELP = """\
usage: lltui fit MODEL.gguf [llama-server flags] [--gpus SPEC] [--json] [--oracle]

Estimate, per device, the memory llama-server will allocate for MODEL.gguf with these
flags: weights, KV cache, compute buffers and the host output buffer, and whether it fits.
The GGUF header is read; the weights are not.

llama-server flags (its spellings and defaults; other flags are accepted and ignored):
  -c -np -kvu/-no-kvu -ctk -ctv -fa -b -ub -ngl -sm -ts -mg -dev -ot --cpu-moe --n-cpu-moe
  -nkvo --swa-full -lm -nr --no-host --rpc (long forms too)

lltui options:
  --gpus SPEC      devices to estimate for instead of the local GPUs: 24GiB,24GiB | T4,T4 |
                   2xA100-80GB | cpu | sim:PROFILE | rpc:HOST:PORT[:cpu][=SIZE],...
  --margin MIB     memory kept per GPU for what llama.cpp does not count (CUDA context,
                   cuBLAS, the pool); default: -fitt, else 1024
  --host-free SIZE host memory available (default: what this machine has free)
  --cpu PROFILE    CPU weight repacking rules: x86 (default), x86-avx512, arm, none
  --oracle         also run llama-fit-params with the same flags and show its numbers
  --json           print JSON
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fit",
        help="per-device memory llama-server will use for a GGUF, and whether it fits",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        prefix_chars="+",  # every argument reaches run(): llama-server flags look like options
    )
    p.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def split_args(argv: list[str]) -> tuple[str | None, list[str], dict[str, Any]]:
    """(model path, llama-server flags, lltui options) from the fit command line."""
    from lltui.core.llama_flags import flag_arity

    model: str | None = None
    llama: list[str] = []
    own: dict[str, Any] = {"json": False, "oracle": False, "help": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            own["help"] = True
            i += 1
            continue
        if a in ("--json", "--oracle"):
            own[a[2:]] = True
            i += 1
            continue
        if a in OWN_VALUE:
            if i + 1 >= len(argv):
                raise CliError(f"fit: {a} expects a value", 2)
            own[a[2:].replace("-", "_")] = argv[i + 1]
            i += 2
            continue
        if a.startswith("-") and len(a) > 1:
            n = flag_arity(a)
            if n is None:
                llama.append(a)  # the flag parser gives the one-line error
                i += 1
                continue
            llama.extend(argv[i : i + 1 + n])
            i += 1 + n
            continue
        if model is not None:
            raise CliError(f"fit: unexpected argument {a!r} (one model file only)", 2)
        model = a
        i += 1
    return model, llama, own


def run(args: argparse.Namespace) -> int:
    from lltui.core.devices_spec import DeviceSpec, parse_gpus_spec, rpc_device
    from lltui.core.fit import FitError, FitOptions, estimate
    from lltui.core.gguf import GgufError, read_gguf
    from lltui.core.llama_flags import parse_llama_args
    from lltui.core.units import MIB, parse_size

    model_path, llama_argv, own = split_args(list(args.argv))
    if own["help"]:
        sys.stdout.write(HELP)
        return 0
    try:
        settings = parse_llama_args(llama_argv)
    except ValueError as exc:
        raise CliError(f"fit: {exc}", 2) from None
    model_path = model_path or settings.model_path
    if not model_path:
        raise CliError("fit: no model: give MODEL.gguf (or -m MODEL.gguf)", 2)

    notes: list[str] = []
    margin = 1024 * MIB
    if own.get("margin") is not None:
        try:
            margin = int(float(own["margin"]) * MIB)
        except ValueError:
            raise CliError(f"fit: --margin expects MiB, got {own['margin']!r}", 2) from None
        if margin < 0:
            raise CliError("fit: --margin must not be negative", 2)
    elif settings.fit_target_mib:
        margin = settings.fit_target_mib[0] * MIB
    host_free: int | None = None
    if own.get("host_free") is not None:
        try:
            host_free = parse_size(own["host_free"])
        except ValueError as exc:
            raise CliError(f"fit: --host-free: {exc}", 2) from None
    repack = own.get("cpu") or "x86"

    try:
        model = read_gguf(model_path)
    except GgufError as exc:
        raise CliError(str(exc), 2) from None
    except FileNotFoundError:
        raise CliError(f"{model_path}: no such file", 2) from None
    except IsADirectoryError:
        raise CliError(f"{model_path}: is a directory, not a GGUF file", 2) from None
    except OSError as exc:
        raise CliError(f"{model_path}: cannot read: {exc.strerror or exc}", 2) from None

    devices: list[DeviceSpec]
    spec_text = own.get("gpus")
    local = spec_text is None
    if spec_text is not None:
        try:
            spec = parse_gpus_spec(spec_text)
        except ValueError as exc:
            raise CliError(f"fit: {exc}", 2) from None
        if spec.sim_profile is not None:
            devices = _sim_devices(spec.sim_profile)
        else:
            devices = list(spec.devices)
    else:
        devices, note = _local_devices()
        if note:
            notes.append(note)
    # llama-server's --rpc servers come first in its device list
    known_rpc = {d.endpoint for d in devices if d.kind == "rpc"}
    extra_rpc = [ep for ep in settings.rpc if ep not in known_rpc]
    if extra_rpc:
        rpc_now = [d for d in devices if d.kind == "rpc"]
        start = len(rpc_now)
        added = [rpc_device(ep, None, start + i) for i, ep in enumerate(extra_rpc)]
        devices = rpc_now + added + [d for d in devices if d.kind != "rpc"]
        notes.append(
            "--rpc servers' free memory is unknown; give it with --gpus rpc:HOST:PORT=SIZE"
        )
    if host_free is None:
        host_free = _host_available()

    opts = FitOptions(margin_bytes=margin, host_free_bytes=host_free, repack_profile=repack)
    try:
        result = estimate(model, settings, devices, opts)
    except FitError as exc:
        raise CliError(f"fit: {exc}", 2) from None

    oracle: dict[str, Any] | None = None
    if own["oracle"]:
        oracle = _oracle(model, model_path, settings, devices, opts, local)

    if own["json"]:
        from lltui.core.fit import result_to_json

        data = result_to_json(result)
        if notes:
            data["notes"] = notes
        if oracle is not None:
            data["oracle"] = oracle
        print_json(data)
    else:
        from lltui.core.fit import oracle_to_text, result_to_text

        text = result_to_text(result)
        for n in notes:
            text += f"\nnote: {n}"
        if oracle is not None:
            text += "\n\n" + oracle_to_text(oracle)
        print(text)
    return 0


def _sim_devices(profile: str) -> list[Any]:
    from lltui.core.devices_spec import DeviceSpec
    from lltui.core.units import MIB
    from lltui.sources.sim import PROFILES

    if profile not in PROFILES:
        known = ", ".join(sorted(PROFILES))
        raise CliError(f"fit: --gpus sim:{profile}: no such profile ({known})", 2)
    gpus = PROFILES[profile].gpus
    return [
        DeviceSpec(
            name=f"CUDA{i}",
            kind="cuda",
            total_bytes=g.memory_mib * MIB,
            free_bytes=g.memory_mib * MIB,
            description=g.name,
        )
        for i, g in enumerate(gpus)
    ]


def _local_devices() -> tuple[list[Any], str | None]:
    """This machine's NVIDIA GPUs in CUDA order with their free memory, via NVML."""
    from lltui.core.devices_spec import cuda_devices
    from lltui.core.models import SourceUnavailable

    try:
        from lltui.sources.registry import SourceSpec, make_source

        source = make_source(SourceSpec("nvml"))
        source.open()
        try:
            sample = source.poll()
        finally:
            source.close()
    except (SourceUnavailable, ImportError, OSError) as exc:
        return [], f"no local NVIDIA GPU ({exc}); estimated for the host only (see --gpus)"
    gpus = [g for g in sample.gpus if not g.lost]
    if not gpus:
        return [], "no local NVIDIA GPU; estimated for the host only (see --gpus)"
    ordered = sorted(
        gpus,
        key=lambda g: g.info.cuda_index if g.info.cuda_index is not None else g.info.index,
    )
    mems = [
        (g.info.name, g.info.memory_total, g.memory_free)
        for g in ordered
        if g.info.cuda_index is not None or all(x.info.cuda_index is None for x in gpus)
    ]
    return list(cuda_devices(mems)), None


def _host_available() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return None


def _oracle(
    model: Any, path: str, settings: Any, devices: list[Any], opts: Any, local: bool
) -> dict[str, Any]:
    """llama-fit-params' numbers beside an estimate made under its rules."""
    from dataclasses import replace

    from lltui.core.fit import FitError, estimate, oracle_compare
    from lltui.sources.fit_oracle import OracleError, run_oracle

    if not local and any(d.kind == "cuda" for d in devices):
        return {
            "available": False,
            "error": "llama-fit-params measures this machine's devices, not --gpus ones",
        }
    np_ = settings.n_parallel_resolved
    # llama-fit-params: no unified KV, weights not mapped, outputs sized by n_batch, no fit
    same_rules = replace(settings, kv_unified=False, n_parallel=np_, load_mode="none", fit=False)
    try:
        ours = estimate(model, same_rules, devices, replace(opts, server=False, search=False))
    except FitError as exc:
        return {"available": False, "error": str(exc)}
    try:
        res = run_oracle(path, settings.memory_args, n_parallel=np_)
    except OracleError as exc:
        return {"available": False, "error": str(exc)}
    return oracle_compare(ours, res)

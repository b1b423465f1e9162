"""Layering: the core and the sources never pull in the UI; the core pulls in no I/O libraries;
each of lltui's layers imports only the layers below it; no two modules import each other,
however indirectly."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import lltui

CORE_FORBIDDEN = ("textual", "rich", "pynvml", "httpx", "psutil", "subprocess", "ctypes")
PACKAGE = pathlib.Path(lltui.__file__).parent

# layer -> the layers it may import (its own included). "lltui" is the package's __init__
# (the version), "config" the settings file and XDG paths.
ALLOWED: dict[str, set[str]] = {
    "lltui": {"lltui"},
    "core": {"core"},
    "paths": {"paths"},
    # config -> core: the settings hold the alert thresholds as the core's typed model
    # (AlertConfig), checked key by key when the file is read
    "config": {"config", "paths", "core"},
    "sources": {"paths", "sources", "core", "config", "lltui"},
    "services": {"paths", "services", "sources", "core", "config", "lltui"},
    # the front ends reach the sources only through services (the one door)
    "api": {"api", "services", "core", "lltui"},
    "app": {"paths", "app", "services", "core", "config", "lltui"},
    "commands": {"paths", "commands", "app", "services", "core", "config", "lltui", "api"},
    "cli": {"paths", "cli", "commands", "config", "lltui"},
    "__main__": {"cli"},
}


# Inside the core: each subpackage -> the subpackages it may import (besides its own and the
# core's plain modules: units, text, doctor). Read top-down: fit (search, quant tables,
# reports) over speed, over the memory model and quant rules, over the ggml graph, over GGUF;
# llamalog (llama.cpp's output read) over cmdline (flags, the launch spec) over llama
# (builds, limits, metrics) and hardware (the GPU catalog)
# at the bottom. llama -> fit, say, is a sideways arrow this table does not name, and the test
# below fails on it.
CORE_ALLOWED: dict[str, set[str]] = {
    "fit": {"speed", "memory", "quant", "ggml", "gguf", "hardware", "llama", "cmdline"},
    # a log beside the estimate: the log's facts (llamalog), the flags and build rules
    # (llama), the estimate's buffers and the placement of layers (memory), the header (gguf)
    "explain": {"memory", "gguf", "llama", "cmdline", "llamalog"},
    "speed": {"memory", "gguf", "hardware", "llama", "cmdline"},
    "memory": {"ggml", "gguf", "hardware", "llama", "cmdline"},
    "quant": {"gguf"},
    "ggml": {"gguf"},
    "gguf": {"llama", "cmdline"},  # llama.cpp's own limits (MAX_LAYERS); a URL's secrets
    "hardware": set(),
    "llama": set(),
    "cmdline": {"llama"},  # llama.cpp's own limits (MAX_LAYERS)
    "llamalog": {"llama", "cmdline"},  # the line formats each build prints (builds.py)
    "monitor": {"llama", "cmdline", "llamalog", "hardware"},  # llamalog: a server log's placement
    "topo": {"monitor", "hardware"},
    "nccl": {"topo", "monitor", "hardware"},
}
# (stop_signals: SIGTERM and SIGHUP as an exception while a block runs, for the commands
# and the build alike; api_args: the one check of the public API's arguments, lltui.api's and
# the seed API's NCCL names)
CORE_PLAIN = {"units", "text", "jsonout", "doctor", "core", "gc_pause", "periodic", "stop_signals"}
CORE_PLAIN |= {"api_args"}
# The sources by domain, the same way; ssh is the plain transport GPU sources and RPC hosts
# share; proc_group (stopping a process group) and periodic (a step run on an interval) are
# the plain tools every domain uses. A new GPU backend is a folder under gpu/ with no new arrow.
SOURCES_ALLOWED: dict[str, set[str]] = {
    "gpu": {"ssh"},
    "models": set(),
    "llama": {"ssh", "gpu"},  # a CUDA build asks NVML which GPUs it is for
    "nccl": set(),
}
SOURCES_PLAIN = {"ssh", "sources", "net", "http_server", "proc_group"}
# The services the same way, read top-down: a use case calls those below it (a launch checks
# the fit, which prices speed like a bench, on the devices of a rig), never sideways. A service
# not named here (rig, nccl, doctor, llama, signals, demo) calls no other.
SERVICES_ALLOWED: dict[str, set[str]] = {
    "launch": {"fit", "plan", "explain", "bench", "devices", "follow"},
    "plan": {"fit", "devices"},
    "explain": {"fit"},
    "fit": {"bench", "devices", "rig"},
    "bench": {"devices"},
    "devices": {"rig"},
    "follow": {"rig", "explain", "fit"},  # a followed server's plan: its log, else predicted
    "exporter": {"rig", "follow"},
    "alerts": {"rig", "follow"},
    # follow: the log a launch left; bench and devices: this rig's calibration, for a server
    # running here, as fit and launch price it
    "report": {"rig", "nccl", "explain", "follow", "bench", "devices"},
}
SERVICES_PLAIN = {"services"}


def _module_files() -> dict[str, pathlib.Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, pathlib.Path]) -> str | None:
    # "lltui.core.fit.estimate.FitResult" -> "lltui.core.fit.estimate"
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph() -> dict[str, set[str]]:
    """Every lltui module -> the lltui modules it imports anywhere in its text (lazy imports
    inside functions and TYPE_CHECKING blocks count: they are dependencies all the same)."""
    modules = _module_files()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(_resolve(a.name, modules) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.update(_resolve(f"{node.module}.{a.name}", modules) for a in node.names)
        graph[name] = {d for d in deps if d is not None and d != name and d.startswith("lltui")}
    return graph


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys\nprint('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def _modules_in(prefix: str) -> list[str]:
    return sorted(m for m in _module_files() if m.startswith(prefix + "."))


def test_core_and_sources_do_not_import_textual():
    names = _modules_in("lltui.core") + _modules_in("lltui.sources")
    assert len(names) > 5, "no modules found"
    assert "lltui.core.fit.estimate" in names, "subpackages are walked"
    mods = _modules_after("\n".join(f"import {n}" for n in names))
    assert "textual" not in mods
    assert not any(m.startswith("textual.") for m in mods)


def test_core_imports_only_the_standard_library():
    names = _modules_in("lltui.core")
    # compare with a bare interpreter: only what the core modules themselves add counts
    baseline = _modules_after("")
    mods = _modules_after("\n".join(f"import {n}" for n in names)) - baseline
    bad = sorted(m for m in mods if m.split(".")[0] in CORE_FORBIDDEN)
    assert bad == []


def test_cli_help_does_not_import_textual():
    mods = _modules_after("from lltui.cli import build_parser\nbuild_parser()")
    assert "textual" not in mods


# what a fit of a local model for given GPUs never needs: each is an import (its dataclasses
# made at import cost most of a fit's start), and the search, log reader, alert tracker,
# RPC client, rig store and the other subcommands are not a plain fit's
NOT_IN_A_PLAIN_FIT = (
    "httpx",  # a local model reads no network
    "shutil",  # bz2 and lzma with it: argparse's own width lookup (lltui.cli gives the width)
    "difflib",  # the GPU names nearest one the catalog does not know
    "lltui.core.fit.best",
    "lltui.core.fit.planner",
    "lltui.core.fit.plan",  # several models' plan (lltui.services.plan), not one model's
    "lltui.core.gguf.refs",  # a remote reference's parsing: a file here is no reference
    "lltui.core.llamalog.models",
    "lltui.core.memory.tensor_parallel",  # -sm tensor's alone
    "lltui.core.monitor.alerts",
    "lltui.core.monitor.models",
    "lltui.core.monitor.gpus_report",  # --json says simulated: false from a module of its own
    "lltui.services.bench",
    "lltui.services.plan",
    "lltui.sources.gpu.rig_store",
    "lltui.sources.gpu.kinds",  # the source kinds: --source's help spells them when printed
    "lltui.sources.llama.rpc_probe",
    "lltui.commands.launch",
    "lltui.commands.gpus",
)


def test_fit_and_quant_of_a_local_model_load_only_what_they_use(tmp_path):
    from support import gguf_factory as gf

    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec(n_layer=2), "F16")
    for verb, *json in (("fit",), ("quant",), ("fit", "--json"), ("quant", "--json")):
        code = (
            "import contextlib, io\nfrom lltui.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main([{verb!r}, {str(path)!r}, '--gpus', '4090,4090', *{json!r}])"
        )
        mods = _modules_after(code)
        assert "lltui.core.fit.estimate" in mods, "the command ran"
        loaded = [m for m in NOT_IN_A_PLAIN_FIT if m in mods]
        if verb == "quant":  # the quant ranking is a search
            loaded = [m for m in loaded if m != "lltui.core.fit.best"]
        assert loaded == [], verb


def test_every_module_has_a_layer():
    layers = {_layer(m) for m in _import_graph()}
    assert layers <= set(ALLOWED), f"modules outside any layer: {layers - set(ALLOWED)}"


def test_layers_import_only_downwards():
    bad = [
        f"{module} ({_layer(module)}) imports {dep} ({_layer(dep)})"
        for module, deps in sorted(_import_graph().items())
        for dep in sorted(deps)
        if _layer(dep) not in ALLOWED.get(_layer(module), set())
    ]
    assert bad == []


def test_front_ends_reach_the_sources_only_through_services():
    graph = _import_graph()
    front = [m for m in graph if _layer(m) in {"commands", "app", "api"}]
    through = {d for m in front for d in graph[m] if _layer(d) == "sources"}
    assert front, "the front ends are walked"
    assert through == set()  # not one: a front end's new use of a source is a service function


def _core_part(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else parts[1]


def _core_violations(
    graph: dict[str, set[str]],
    layer: str = "core",
    allowed: dict[str, set[str]] = CORE_ALLOWED,
    plain: set[str] = CORE_PLAIN,
) -> list[str]:
    """Imports between the subpackages of ``layer`` that ``allowed`` does not name."""
    bad = []
    for module, deps in sorted(graph.items()):
        if _layer(module) != layer:
            continue
        src = _core_part(module)
        for dep in sorted(deps):
            if _layer(dep) != layer:
                continue
            dst = _core_part(dep)
            if dst == src or dst in plain:
                continue
            if src in plain or dst not in allowed.get(src, set()):
                bad.append(f"{module} ({src}) imports {dep} ({dst})")
    return bad


def test_source_domains_import_only_what_the_design_names():
    graph = _import_graph()
    parts = {_core_part(m) for m in graph if _layer(m) == "sources"}
    assert parts <= set(SOURCES_ALLOWED) | SOURCES_PLAIN, parts
    assert _core_violations(graph, "sources", SOURCES_ALLOWED, SOURCES_PLAIN) == []


def test_services_call_only_the_services_the_design_names():
    graph = _import_graph()
    assert _core_violations(graph, "services", SERVICES_ALLOWED, SERVICES_PLAIN) == []
    sideways = {"lltui.services.rig": {"lltui.services.fit"}}
    assert _core_violations(sideways, "services", SERVICES_ALLOWED, SERVICES_PLAIN) == [
        "lltui.services.rig (rig) imports lltui.services.fit (fit)"
    ]


def test_core_subpackages_import_only_what_the_design_names():
    graph = _import_graph()
    parts = {_core_part(m) for m in graph if _layer(m) == "core"}
    assert parts <= set(CORE_ALLOWED) | CORE_PLAIN, parts - set(CORE_ALLOWED) - CORE_PLAIN
    assert _core_violations(graph) == []
    # and it catches the arrow the design keeps out
    sideways = {"lltui.core.cmdline.args": {"lltui.core.fit.estimate"}}
    assert _core_violations(sideways) == [
        "lltui.core.cmdline.args (cmdline) imports lltui.core.fit.estimate (fit)"
    ]


def test_no_import_cycles():
    assert _cycles(_import_graph()) == []


def test_the_checks_can_fail():
    # the two graph checks find what they are meant to find
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    assert _layer("lltui.core.fit.estimate") == "core"
    assert "app" not in ALLOWED["core"] and "api" not in ALLOWED["sources"]

"""The models a router is asked to serve, read, and the preset lltui writes for it.

A :class:`RouterRequest` names its models one of three ways: a directory (llama-server's
``--models-dir`` layout), a preset file (``--models-preset``), or models on the command line
each with its flags. Whichever it is, lltui reads every model as ``lltui fit`` would, plans
the set (:func:`lltui.services.plan.plan_models`) and writes its own preset: one section per
model, with the model's file, its flags and the flags the plan pins, so the router loads each
model exactly as planned. Bad input for one model leaves that model out with one line; the
others are served. The router's own command line carries no model flag (it would override
every model's own, llama-server giving the command line precedence over a preset).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from lltui.core.cmdline.args import ADDING_KEYS, GivenFlag, LlamaArgs, drop_flags, parse_llama_args
from lltui.core.cmdline.flag_table import BinaryFlags
from lltui.core.cmdline.launch_spec import LAUNCH_KEYS, LaunchError, flags_argv, read_flags
from lltui.core.cmdline.preset import (
    GLOBAL_SECTION,
    Preset,
    PresetError,
    entry_words,
    parse_preset,
    unknown_keys,
    words_to_entries,
    write_preset,
)
from lltui.core.fit.plan import PlannedModel
from lltui.core.gguf.refs import names_repo
from lltui.services.fit import FitFailed
from lltui.services.plan import (
    ALIAS_FLAGS,
    ROUTER_SOURCES,
    PlanEntry,
    read_entry,
    router_source,
)

# the router's own flags: lltui sets them (it loads the models itself, by the plan)
ROUTER_FLAGS = (
    "--models-dir",
    "--models-preset",
    "--models-max",
    "--models-autoload",
    "--no-models-autoload",
)
LOG_FILE_FLAG = "--log-file"
LOAD_ON_STARTUP = "load-on-startup"
PIN_KEY = "lltui-pin"  # lltui's own: the model is pinned (as --pin NAME)
PRIORITY_KEY = "lltui-priority"  # lltui's own: its priority (as --priority NAME=N)
# the flags that add up and take a comma list (the router keeps one of each: a list keeps all)
_COMMA_LISTS = frozenset({"overrides", "draft_overrides", "rpc", "lora", "spec_types"})
# the flags a section names its model with (common/arg.cpp): a file, a repository's (its
# file, or the one its tag names) or a URL, as the router passes them to the model's server
_MODEL_FLAGS = {"-m": "m", "--model": "m", "-hf": "hf", "-hfr": "hf", "--hf-repo": "hf",
                "-hff": "hff", "--hf-file": "hff", "-mu": "mu", "--model-url": "mu"}  # fmt: skip


@dataclass(frozen=True)
class RouterRequest:
    """What a front end was given. ``source``: a models directory or a preset file;
    ``entries``: models given on the command line (each with the shared flags already
    before its own); ``words``: llama-server flags for every model, and the address and
    keys for the router; ``keep``: models kept loaded (loaded at start, never unloaded for
    another); ``load``: more models to load at start; ``on_demand``: lltui listens on the
    address and loads models as requests name them (:mod:`.ondemand`), the router on a
    private loopback port; ``priority``: (model, n) for the eviction policy (higher stays)."""

    source: str | None = None
    entries: tuple[PlanEntry, ...] = ()
    words: tuple[str, ...] = ()
    host: str | None = None
    port: int | None = None
    keep: tuple[str, ...] = ()
    load: tuple[str, ...] = ()
    margin_mib: float | None = None
    gpus: str | None = None  # the devices the plan assumes (--gpus), else this machine's
    host_free_bytes: int | None = None  # the host memory it assumes, else what is free now
    keys_on_command_line: bool = True
    on_demand: bool = False
    priority: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ModelsRead:
    """The models of a request, ready to plan, and a line for each thing left out."""

    entries: tuple[PlanEntry, ...]
    load: tuple[str, ...]  # names a preset marks load-on-startup
    notes: tuple[str, ...]
    pin: tuple[str, ...] = ()  # names a preset marks lltui-pin
    priority: tuple[tuple[str, int], ...] = ()  # a preset's lltui-priority


def split_shared(words: Sequence[str]) -> tuple[LlamaArgs, LlamaArgs, list[str]]:
    """The shared flags: (the router's own: address, keys, log level; every model's; the
    router's words past lltui's model of flags: ``--log-file FILE``)."""
    for w in words:
        if w.split("=", 1)[0] in ROUTER_FLAGS:
            raise LaunchError(
                f"{w}: lltui runs the router itself (its models from its own preset, loaded "
                "by the plan): give --models DIR|PRESET.ini"
            )
    # --log-file is the router's: each model's server copied into every section wrote one
    # file over the one before; the router's own log carries its models' lines
    words, log_file = _router_log(words)
    shared = read_flags(words)
    if shared.model_path is not None:
        raise LaunchError("a router's models come from --models, not -m")
    own = shared.given & LAUNCH_KEYS
    launch_words = [w for g in shared.given_args if g.key in own for w in g.tokens]
    return read_flags(launch_words), shared.without(own), log_file


def _router_log(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """(``words`` without ``--log-file FILE``, those words)."""
    rest: list[str] = []
    log: list[str] = []
    it = iter(words)
    for w in it:
        if w == LOG_FILE_FLAG:
            log = [w, next(it, "")]
        elif w.startswith(LOG_FILE_FLAG + "="):
            log = [w]
        else:
            rest.append(w)
    return rest, log


def _with(base: LlamaArgs, words: Sequence[str]) -> LlamaArgs:
    return _over(base, read_flags(words)) if words else base


def router_layer(args: LlamaArgs, where: str) -> tuple[LlamaArgs, tuple[str, ...]]:
    """One layer of a model's flags (the router's command line, a preset section) as
    llama-server's router reads it: into a map of one value an option, the last given
    (common_params_to_map, the preset file's reader), and a line for each flag that adds up
    on a server's own command line (``-ot A -ot B``) and loses values here."""
    given: dict[str, list[GivenFlag]] = {}
    for g in args.given_args:
        if g.key in ADDING_KEYS:
            given.setdefault(g.key, []).append(g)
    notes = []
    for key, flags in given.items():
        if len({g.values for g in flags}) > 1:
            last = flags[-1]
            joined = " (give one, its values comma-separated)" if key in _COMMA_LISTS else ""
            notes.append(
                f"{where}: {last.flag} is given {len(flags)} times; llama-server's router "
                f"keeps only the last, {' '.join(last.tokens)}{joined}"
            )
    return args.one_each(), tuple(notes)


def _over(base: LlamaArgs, later: LlamaArgs) -> LlamaArgs:
    """``later``'s settings over ``base``'s, as llama-server's router layers a model's
    ([*], its section, the router's command line): one value an option, the later layer's,
    ``-ot``, ``--rpc`` and the like too (they do not add up across layers)."""
    return base.without(later.given & ADDING_KEYS).then(later)


def read_models(request: RouterRequest, shared: LlamaArgs) -> ModelsRead:
    """The models the request names, each with the shared flags (a preset's sections under
    them: the router's command line overrides the file); LaunchError for a source that
    cannot be read at all."""
    from lltui.sources.llama.router_models import ModelsDirError

    if request.source is None:
        return ModelsRead(request.entries, (), ())
    if request.entries:
        raise LaunchError("give the models either with --models or on the command line")
    shared, notes = router_layer(shared, "the command line")
    try:
        if os.path.isdir(request.source):
            read = _from_dir(request.source, shared)
        else:
            read = _from_preset(request.source, shared)
    except ModelsDirError as exc:
        raise LaunchError(str(exc)) from None
    return replace(read, notes=(*notes, *read.notes))


def _from_dir(directory: str, shared: LlamaArgs) -> ModelsRead:
    from lltui.sources.llama.router_models import scan_models_dir

    scan = scan_models_dir(directory)
    notes = []
    if scan.ignored:
        shown = ", ".join(scan.ignored[:5]) + (", ..." if len(scan.ignored) > 5 else "")
        notes.append(f"{directory}: {len(scan.ignored)} not a model: {shown}")
    entries = []
    for m in scan.models:
        words: list[str] = []
        if m.mmproj:
            words += ["--mmproj", m.mmproj]
        if m.draft:
            words += ["-md", m.draft]
        entries.append(PlanEntry(m.path, _with(shared, words), name=m.name, listed=True))
    if not entries:
        raise LaunchError(f"{directory}: no .gguf model in it")
    return ModelsRead(tuple(entries), (), tuple(notes))


def _from_preset(path: str, shared: LlamaArgs) -> ModelsRead:
    from lltui.sources.llama.router_models import read_preset_file

    try:
        preset = parse_preset(read_preset_file(path), path)
    except PresetError as exc:
        raise LaunchError(str(exc)) from None
    binary = _binary()
    glob = preset.global_section
    if glob is not None and (bad := unknown_keys(glob, binary)):
        raise LaunchError(
            f"{path}:{bad[0].line}: [{GLOBAL_SECTION}] has a key llama-server does not know: "
            f"{bad[0].key!r} (every model would get it; the router would not start)"
        )
    try:  # (the router's command line comes last: llama-server has it override the file)
        words = [w for e in glob.entries for w in entry_words(e, binary)] if glob else []
        base, said = router_layer(read_flags(words), f"{path}: [{GLOBAL_SECTION}]")
    except (PresetError, LaunchError) as exc:
        raise LaunchError(f"{path}: [{GLOBAL_SECTION}]: {exc}") from None
    entries, load, notes, pin, priority = [], [], list(said), [], []
    for section in preset.sections:
        found, said = _section_entry(path, preset, section.name, base, shared, binary)
        notes += said
        if isinstance(found, str):
            notes.append(found)
            continue
        entries.append(found)
        if _on(section.get(LOAD_ON_STARTUP)):
            load.append(section.name)
        if _on(section.get(PIN_KEY)):
            pin.append(section.name)
        if (value := section.get(PRIORITY_KEY)) is not None:
            try:
                priority.append((section.name, int(value.strip())))
            except ValueError:
                notes.append(f"{path}: [{section.name}] {PRIORITY_KEY} {value!r} is no integer")
    if not entries:
        raise LaunchError(f"{path}: no model to serve" + (f" ({notes[0]})" if notes else ""))
    return ModelsRead(tuple(entries), tuple(load), tuple(notes), tuple(pin), tuple(priority))


def _on(value: str | None) -> bool:
    return (value or "").strip().lower() in ("on", "enabled", "true", "1")


def _section_entry(
    path: str,
    preset: Preset,
    name: str,
    base: LlamaArgs,
    shared: LlamaArgs,
    binary: BinaryFlags | None,
) -> tuple[PlanEntry | str, tuple[str, ...]]:
    """A section as a model to plan, or the line that says why it is left out: ``base``
    ([*]'s settings), the section's, then the router's command line (``shared``), each
    overriding the one before, as llama-server's router gives them; and the lines
    :func:`router_layer` says of the section."""
    section = preset.section(name)
    assert section is not None
    if bad := unknown_keys(section, binary):
        why = f"{path}:{bad[0].line}: [{name}] left out: llama-server has no option {bad[0].key!r}"
        return why, ()
    words: list[str] = []
    named: dict[str, str] = {}  # how the model is named: m, hf, hff, mu (the last given)
    try:
        for e in section.entries:
            got = entry_words(e, binary)
            if got and got[0] in _MODEL_FLAGS and len(got) == 2:
                named[_MODEL_FLAGS[got[0]]] = got[1]
            else:
                words += got
        own, notes = router_layer(read_flags(words), f"{path}: [{name}]")
        args = _over(_over(base, own), shared)
    except (PresetError, LaunchError) as exc:
        return f"{path}: [{name}] left out: {exc}", ()
    model = _model_ref(named)
    if not model:
        return (
            f"{path}:{section.line}: [{name}] left out: it names no model (model = PATH, "
            "hf-repo = OWNER/REPO[:QUANT] or model-url = URL)"
        ), notes
    if names_repo(model):  # no tag: the file the router's -hf picks (Q4_K_M, Q8_0, first)
        from lltui.sources.models.remote import hf_repo_pick
        from lltui.sources.models.remote_gguf import RemoteError

        try:
            model = hf_repo_pick(model)
        except RemoteError as exc:
            return f"{path}: [{name}] left out: {exc}", notes
    return PlanEntry(model, args, name=name, listed=True), notes


def _model_ref(named: dict[str, str]) -> str | None:
    """The model a section's keys name, as lltui reads it (a path, ``hf:``, a URL): a
    repository's before a URL before a file, as llama-server downloads the first two into
    the path -m names."""
    from lltui.core.gguf.refs import HF_PREFIX

    if repo := named.get("hf", "").strip():
        file = named.get("hff", "").strip()  # (a file named, the tag goes unread)
        return HF_PREFIX + (f"{repo.split(':', 1)[0]}:{file}" if file else repo)
    if url := named.get("mu", "").strip():
        return url
    model = named.get("m", "").strip()
    return os.path.abspath(model) if model else None


def _binary() -> BinaryFlags | None:
    from lltui.sources.llama import launch_prep

    _path, flags, _origin, _why = launch_prep.find_binary(required=False)
    return flags


# --- the preset lltui writes -----------------------------------------------------------------


# flags whose values name devices: RPC devices are renumbered when a server is left out
_DEVICE_FLAGS = frozenset({"-dev", "--device", "-devd", "--device-draft", "--spec-draft-device",
                           "-mmdev", "--mmproj-device"})  # fmt: skip


def _renamed(words: Sequence[str], renames: dict[str, str]) -> list[str]:
    out = list(words)
    for i in range(len(out) - 1):
        if out[i] in _DEVICE_FLAGS and renames:
            out[i + 1] = ",".join(renames.get(d.strip(), d.strip()) for d in out[i + 1].split(","))
    return out


def section_for(
    p: PlannedModel, binary: BinaryFlags | None, aliases: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """A model's section: its file, then its flags and the plan's pinned ones, spelled as
    the binary spells them; ``--rpc`` naming only the servers the plan says its server
    loads onto (a server given ``--rpc`` connects to each, and an RPC server serves one at
    a time), its ``-dev`` names renumbered to match; ``aliases``: its other names."""
    words = drop_flags(flags_argv(p.args, binary), ALIAS_FLAGS)  # the section names it
    if aliases:  # the router serves it under these too
        words += ["--alias", ",".join(aliases)]
    if tuple(dict.fromkeys(p.args.rpc)) != p.rpc:
        words = drop_flags(words, ("--rpc",))
        words = _renamed(words, dict(p.rpc_renames))
        if p.rpc:
            words += ["--rpc", ",".join(p.rpc)]
    try:
        return [*model_entries(p.ref or p.path), *words_to_entries(words, binary)]
    except PresetError as exc:
        raise LaunchError(f"{p.name}: {exc}") from None


def model_entries(ref: str) -> list[tuple[str, str]]:
    """How a preset names the model: its file (absolute), or llama-server's download keys
    for ``hf:OWNER/REPO[:QUANT|FILE]`` (``hf-repo``, ``hf-file``) and a URL (``model-url``)."""
    from lltui.core.gguf.refs import RefError, is_remote_ref, llama_model_flags

    try:
        flags = llama_model_flags(ref if is_remote_ref(ref) else os.path.abspath(ref))
    except RefError as exc:
        raise PresetError(str(exc)) from None
    keys = {"-m": "model", "-hf": "hf-repo", "-hff": "hf-file", "-mu": "model-url"}
    return [(keys[flag], value) for flag, value in flags]


def preset_text(
    models: Sequence[PlannedModel], binary: BinaryFlags | None, header: Sequence[str] = ()
) -> str:
    try:
        sections = [(p.name, section_for(p, binary, aliases)) for p, aliases in _aliases(models)]
        return write_preset(sections, header=header)
    except PresetError as exc:
        raise LaunchError(str(exc)) from None


def _aliases(models: Sequence[PlannedModel]) -> list[tuple[PlannedModel, list[str]]]:
    return list(zip(models, served_aliases([(p.name, p.args) for p in models]), strict=True))


def served_aliases(models: Sequence[tuple[str, LlamaArgs]]) -> list[list[str]]:
    """Each model's (name, flags) names its ``--alias`` gives besides its own (the router
    serves it under them too), less those a model is named or an earlier one has: the router
    would not start on such a clash (a command line's ``--alias`` already names the model)."""
    taken = {name for name, _ in models}
    out = []
    for _name, args in models:
        given = [a.strip() for g in args.given_args if g.flag in ALIAS_FLAGS
                 for v in g.values for a in v.split(",")]  # fmt: skip
        aliases = [a for a in dict.fromkeys(given) if a and a not in taken]
        taken.update(aliases)
        out.append(aliases)
    return out


def alias_map(models: Sequence[tuple[str, LlamaArgs]]) -> dict[str, str]:
    """Each alias the router serves a model under -> the model's name."""
    aliased = zip(models, served_aliases(models), strict=True)
    return {a: name for (name, _), aliases in aliased for a in aliases}


def router_args(more: Sequence[str] = ()) -> LlamaArgs:
    """The router's own flags: no model limit (the plan is the limit) and no autoload, so a
    request for a model that is not loaded does not load it behind the plan's back; then
    ``more`` (its log file)."""
    return parse_llama_args(["--models-max", "0", "--no-models-autoload", *more])


def named(names: Sequence[str], wanted: Sequence[str], what: str) -> tuple[str, ...]:
    """``wanted`` checked against the models' names (LaunchError naming the bad one)."""
    for n in wanted:
        if n not in names:
            raise LaunchError(f"{what} {n}: no model of that name (models: {', '.join(names)})")
    return tuple(dict.fromkeys(wanted))


def with_keep(entries: Sequence[PlanEntry], keep: Sequence[str]) -> tuple[PlanEntry, ...]:
    return tuple(replace(e, keep=True) if e.name in keep else e for e in entries)


def given_entries(
    models: Sequence[tuple[str, Sequence[str]]],
    shared: Sequence[str],
    verb: str = "fit",
    env: Mapping[str, str] | None = None,
) -> tuple[tuple[PlanEntry, ...], tuple[str, ...]]:
    """The models of a set as given, and a line for each one left out: each model with the
    ``shared`` words first and then its own; with no model, those a router would serve from
    ``--models-dir DIR`` or ``--models-preset FILE`` among ``shared`` (the shared ones over
    each section's, as llama-server's router has them), as ``lltui launch --models`` reads
    them. FitFailed (one line) for words llama-server refuses, a folder or preset that
    cannot be read, or no model."""
    source = router_source(shared, bool(models))
    if source is None:
        if not models:
            raise FitFailed(
                f"{verb}: no model given (a .gguf model, or --models-dir DIR or "
                "--models-preset FILE)",
                2,
            )
        return tuple(read_entry(m, [*shared, *own], verb, env) for m, own in models), ()
    if len({w for w in shared if w in ROUTER_SOURCES}) > 1:
        raise FitFailed(f"{verb}: give --models-dir or --models-preset, not both", 2)
    rest, skip = [], False
    for w in shared:
        if skip or w in ROUTER_SOURCES:
            skip = not skip
            continue
        rest.append(w)
    try:
        read = read_models(RouterRequest(source=source), parse_llama_args(rest, env=env))
    except (ValueError, LaunchError) as exc:
        raise FitFailed(f"{verb}: {exc}", 2) from None
    return read.entries, read.notes

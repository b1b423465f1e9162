"""lltui's own options on the command lines that take llama-server's flags (``fit``, ``quant``,
``bench``, ``launch``): one table of them, one splitter that takes them out of the words,
and the help each command prints for them, written from the same table.

Every other word is left in order for the llama-server flag parser: a flag with as many
values as the pinned flag table says it takes, or a bare word (a model). A flag that neither
lltui nor llama-server has is refused here with the nearest spelling of either ("did you
mean --gpus?"), where it is lltui's own option that was mistyped; ``launch`` leaves the
others to the llama-server it finds (a newer build may have flags the pinned table lacks).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from lltui.commands import CliError

FIT, QUANT, BENCH, LAUNCH = "fit", "quant", "bench", "launch"
ESTIMATES = (FIT, QUANT)


def _goals() -> tuple[str, ...]:
    from lltui.core.fit.best import GOAL_WORDS, GOALS

    return (*GOALS, *GOAL_WORDS)


def _fit_goals() -> tuple[str, ...]:
    from lltui.core.fit.best import GOALS
    from lltui.core.fit.planner import PLAN_GOALS

    return GOALS + PLAN_GOALS


def _cpu_spec(value: str) -> bool:
    """fit's ``--host cores=16,mem=...``; llama-server's ``--host ADDRESS`` has no ``=``."""
    return "=" in value


@dataclass(frozen=True)
class OwnOption:
    """One of lltui's options: how it is spelled, the commands that take it, its help.
    ``metavar`` None: a switch (else every value is kept: :class:`Split` gives the last or all).
    ``kept``: left among the words too, for what reads them after (launch's ``--profile``,
    and llama-server's own ``--host`` that lltui reads). ``claims``: whether a value is this
    option's (else the word is llama-server's flag of the same name). ``group``: a heading
    of its own in the help."""

    name: str
    metavar: str | None
    commands: tuple[str, ...]
    help: str
    kept: bool = False
    claims: Callable[[str], bool] | None = None
    group: str = ""
    choices: Callable[[], Sequence[str]] | None = None  # the values it takes, where few

    def expects(self) -> str:
        """What a missing value should have been, in words."""
        said = f"expects a value ({self.metavar})"
        return said + (f": one of {', '.join(self.choices())}" if self.choices else "")


ROUTER = "several models (llama-server's router mode)"

OWN_OPTIONS: tuple[OwnOption, ...] = (
    # fit and quant
    OwnOption(
        "--gpus",
        "SPEC",
        ESTIMATES,
        "devices to estimate for instead of the rig in use (this machine's GPUs; where it "
        "has none, the simulated rig the monitor shows, said so): 24GiB,24GiB | T4,T4 | "
        '2xA100-80GB | "NVIDIA GeForce RTX 4090" | cpu (the host only) | sim:PROFILE | '
        "rpc:HOST:PORT[:cpu][=SIZE],...",
    ),
    OwnOption(
        "--margin",
        "MIB",
        ESTIMATES,
        "memory kept per GPU for what llama.cpp does not count (CUDA context, cuBLAS, the "
        "pool); default: -fitt, else 1024",
    ),
    OwnOption(
        "--host-free", "SIZE", ESTIMATES, "host memory available (default: what is free here)"
    ),
    OwnOption(
        "--cpu",
        "PROFILE",
        ESTIMATES,
        "CPU weight repacking rules: x86 (default), x86-avx512, arm, none",
    ),
    OwnOption(
        "--host",
        "SPEC",
        ESTIMATES,
        "the host CPU for the speed of what it runs (weights and KV left on it): "
        "cores=16,isa=avx512,ghz=3.5,mem=2xDDR5-5600 (or mem=90 GB/s), unified (the GPUs "
        "read its memory: nothing crosses a link); default: this "
        "machine's (cores, vector unit and clock from Linux; memory from the DIMMs' records "
        "where readable) for local GPUs, else a desktop CPU",
        claims=_cpu_spec,
    ),
    OwnOption(
        "--oracle",
        None,
        (FIT,),
        "also run llama-fit-params with the same flags and show its numbers",
    ),
    OwnOption(
        "--best",
        "GOAL",
        (FIT,),
        "also rank command lines that fit, searched over -ngl, --n-cpu-moe (MoE: experts "
        "first), -ctk/-ctv, -ub, -c and on several GPUs -ts (each GPU's layers sized to its "
        "memory after fixed costs, shown where it fits more than llama.cpp's default split): "
        "context (the largest context) or gpu-only (nothing on the CPU). The planner's "
        "goals choose by speed among -sm layer/tensor, sets and orders of GPUs (-dev), "
        "-ts (llama.cpp's, each GPU's room, the most layers on the fastest), --n-cpu-moe or "
        "-ngl (the least that fits) and -ub, at -c: decode (or speed), prompt, joules "
        "(energy per token) or fewest-gpus (within 90% of the fastest decode); with tensor "
        "or layer on this rig, and llama.cpp's --fit beside",
        choices=_fit_goals,
    ),
    OwnOption(
        "--best",
        "GOAL",
        (QUANT,),
        "rank the quantizations by the best command line each has for GOAL (context, speed "
        "or decode, gpu-only; see lltui fit --best): for hf:OWNER/REPO the GGUF files the "
        "repository offers (each header read by ranged requests), else the types above; with "
        "the file size and what each line gives up",
        choices=_goals,
    ),
    # bench
    OwnOption(
        "--budget",
        "S",
        (BENCH,),
        "stop llama-bench after S seconds in all (default 300); what ran counts",
    ),
    OwnOption("--quick", None, (BENCH,), "one run per point, no filled-context point"),
    OwnOption("-r", "N", (BENCH,), "llama-bench repetitions per point (default 2)"),
    OwnOption("--no-store", None, (BENCH,), "measure and compare, keep nothing"),
    OwnOption(
        "--busy-ok",
        None,
        (BENCH,),
        "keep points measured while other processes took more than 10% of the CPUs' time or "
        "of a GPU's (left out by default: their speeds are partly the others')",
    ),
    OwnOption(
        "--show", None, (BENCH,), "print this rig's calibration and the points behind it (no model)"
    ),
    OwnOption("--reset", None, (BENCH,), "remove this rig's calibration file (no model)"),
    # launch
    OwnOption(
        "--dry-run", None, (LAUNCH,), "print the exact command and environment, start nothing"
    ),
    OwnOption(
        "--json",
        None,
        (LAUNCH,),
        "JSON lines instead of text (ready, exit; or the dry-run command)",
    ),
    OwnOption(
        "--profile",
        "NAME",
        (LAUNCH,),
        "start from a saved profile; flags given here override it",
        kept=True,
    ),
    OwnOption(
        "--save-profile",
        "NAME",
        (LAUNCH,),
        "save these settings as a profile, paths made absolute so it starts from any folder "
        "(mode 0600 if it holds an API key)",
        kept=True,
    ),
    OwnOption(
        "--host",
        "H",
        (LAUNCH,),
        "address to listen on (default 127.0.0.1: this machine only)",
        kept=True,
    ),
    OwnOption("--port", "P", (LAUNCH,), "port (default 8080; 0 picks a free one)", kept=True),
    OwnOption(
        "--api-key-file",
        "F",
        (LAUNCH,),
        "file with the API key(s), one per line; the key is never printed",
        kept=True,
    ),
    OwnOption(
        "--keep-running",
        None,
        (LAUNCH,),
        "start the server, say once it is ready, and return, leaving it running (its log in "
        "a file; the line says how to stop it); Ctrl-C before it is ready stops it, a hang-up "
        "leaves it loading",
    ),
    OwnOption(
        "--force",
        None,
        (LAUNCH,),
        "start it even where lltui fit says it will not fit (by default that is refused, "
        "with a command that fits)",
    ),
    OwnOption(
        "--host-free",
        "SIZE",
        (LAUNCH,),
        "host memory available to the fit check and a router's plan, as for lltui fit "
        "(default: what is free at that moment)",
    ),
    OwnOption(
        "--rpc-host",
        "[USER@]HOST[:PORT]",
        (LAUNCH,),
        "(repeatable) start llama.cpp's rpc-server on HOST over ssh, listening on PORT there "
        "(default 50052), and give llama-server its devices (--rpc); all of them stop when "
        "lltui stops, however it stops",
    ),
    OwnOption(
        "--rpc-bind",
        "ADDR",
        (LAUNCH,),
        "the address rpc-server binds on each host (default 127.0.0.1 there: llama-server "
        "reaches it through the ssh connection). RPC has no authentication: any other "
        "address is for a private network only",
    ),
    OwnOption(
        "--rpc-server",
        "PATH",
        (LAUNCH,),
        "rpc-server's path on the hosts (default: rpc-server or ggml-rpc-server on PATH there)",
    ),
    OwnOption(
        "--models",
        "DIR|PRESET.ini",
        (LAUNCH,),
        "serve the models of a folder (NAME.gguf files, or folders holding a model, its "
        "mmproj and a draft) or of a llama-server preset; or give several models on the "
        "command line, flags after each for it alone. lltui plans them together (as lltui "
        "fit A B ... does), writes a preset that pins each model's context and split (-c -ngl "
        "-ts -fit off) and starts the router with no model limit and no autoload: models "
        "load only through lltui, and a load the plan says will not fit with the models "
        "loaded is refused, naming what to unload",
        group=ROUTER,
    ),
    OwnOption(
        "--pin",
        "NAME",
        (LAUNCH,),
        "(repeatable) keep NAME loaded: loaded at start, never named to unload",
        group=ROUTER,
    ),
    OwnOption(
        "--load",
        "NAME",
        (LAUNCH,),
        "(repeatable) load NAME once the router is ready",
        group=ROUTER,
    ),
    OwnOption(
        "--priority",
        "NAME=N",
        (LAUNCH,),
        "(repeatable) NAME's priority when lltui unloads models to load another (default 0; "
        "a lower priority is unloaded first)",
        group=ROUTER,
    ),
    OwnOption(
        "--no-on-demand",
        None,
        (LAUNCH,),
        "no proxy: clients talk to the router itself, and a request for a model that is not "
        "loaded is refused (by default lltui listens on the address, the router on a private "
        "port, and a request loads its model, unloading the ones the plan says must go)",
        group=ROUTER,
    ),
    OwnOption(
        "--gpus",
        "SPEC",
        (LAUNCH,),
        "the devices the plan assumes, as for lltui fit (e.g. rpc:HOST:PORT:cpu for an RPC "
        "server running the CPU backend); default: the GPUs here and the --rpc servers, "
        "asked for their free memory",
        group=ROUTER,
    ),
    # every one of them
    OwnOption("--json", None, (FIT, QUANT, BENCH), "print JSON"),
)

HELP_SWITCHES = ("-h", "--help")


def options_of(verb: str) -> tuple[OwnOption, ...]:
    return tuple(o for o in OWN_OPTIONS if verb in o.commands)


def options_help(verb: str, group: str = "", width: int = 92) -> str:
    """The help lines of ``verb``'s options in ``group`` (each name, its value, its help
    wrapped beside it), written from the table."""
    column = 19
    lines: list[str] = []
    for o in options_of(verb):
        if o.group != group:
            continue
        label = f"  {o.name}" + (f" {o.metavar}" if o.metavar else "")
        body = textwrap.wrap(o.help, width - column, break_on_hyphens=False)
        if len(label) + 1 > column:  # a long name: its help starts on the next line
            lines.append(label)
            label = ""
        lines.append(label.ljust(column) + body[0])
        lines += [" " * column + more for more in body[1:]]
    if not group:
        lines.append("  -h, --help".ljust(column) + "show this help")
    return "\n".join(lines)


Item = tuple[str, ...]  # a llama-server flag and its values, or one bare word


@dataclass
class Split:
    """A command line with lltui's own options taken out: their values (every one given,
    in order) and switches, and the other words as items, in order."""

    values: dict[str, list[str]] = field(default_factory=dict)
    switches: set[str] = field(default_factory=set)
    items: list[Item] = field(default_factory=list)
    help: bool = False
    unknown: list[str] = field(default_factory=list)  # flags left for the binary (launch)

    def last(self, name: str) -> str | None:
        found = self.values.get(name)
        return found[-1] if found else None

    def all(self, name: str) -> tuple[str, ...]:
        return tuple(self.values.get(name, ()))

    @property
    def words(self) -> list[str]:
        """Every word that is not lltui's own (kept options included), in order."""
        return [w for item in self.items for w in item]

    def single(self) -> tuple[str | None, list[str], str | None]:
        """One model: the first bare word, the llama-server flags, and a second bare word
        (None when there is none)."""
        from lltui.core.cmdline.flag_table import is_flag_token

        bare = [item[0] for item in self.items if not is_flag_token(item[0])]
        flags = [w for item in self.items if is_flag_token(item[0]) for w in item]
        return (bare[0] if bare else None), flags, (bare[1] if len(bare) > 1 else None)


def split_own(argv: Sequence[str], verb: str, *, strict: bool = True) -> Split:
    """lltui's own options of ``verb`` out of ``argv`` (``--gpus X`` or ``--gpus=X``).
    ``strict``: a flag the pinned llama-server does not have is refused here (CliError,
    exit 2), with the nearest spelling; otherwise only where that is lltui's own option,
    the rest left among the words (and in :attr:`Split.unknown`)."""
    from lltui.core.cmdline.flag_table import is_flag_token, pinned_arity

    own = {o.name: o for o in options_of(verb)}
    out = Split()
    i = 0
    while i < len(argv):
        word = argv[i]
        name, eq, value = word.partition("=") if word.startswith("--") else (word, "", "")
        option = own.get(name)
        if word in HELP_SWITCHES:
            out.help = True
            i += 1
            continue
        if option is not None and option.metavar is None:
            if eq:
                raise CliError(f"{verb}: {name} takes no value", 2)
            out.switches.add(name)
            out.items += [(word,)] if option.kept else []
            i += 1
            continue
        if option is not None and option.metavar is not None:
            taken = 1 if eq else 2
            if not eq:
                if i + 1 >= len(argv):
                    raise CliError(f"{verb}: {name} {option.expects()}", 2)
                value = argv[i + 1]
            if option.claims is None or option.claims(value):
                out.values.setdefault(name, []).append(value)
                out.items += [tuple(argv[i : i + taken])] if option.kept else []
                i += taken
                continue
        if is_flag_token(word):
            n = pinned_arity(word)
            if n is None:
                _unknown(word, verb, own, strict)
                out.unknown.append(word)
                out.items.append((word,))
                i += 1
                continue
            values = tuple(argv[i + 1 : i + 1 + n])
            if any(v.partition("=")[0] in own or v in HELP_SWITCHES for v in values):
                values = ()  # lltui's own option is not this flag's value: the parser says so
            out.items.append((word, *values))
            i += 1 + len(values)
            continue
        out.items.append((word,))
        i += 1
    return out


def _unknown(word: str, verb: str, own: dict[str, OwnOption], strict: bool) -> None:
    """A flag no one here takes: refused with the nearest spelling where that is lltui's
    own, or (``strict``) in every case; else left for the llama-server found later."""
    from lltui.core.cmdline.flag_table import closest_flag, unknown_flag_message

    name = word.partition("=")[0]
    elsewhere = sorted({c for o in OWN_OPTIONS if o.name == name for c in o.commands})
    if elsewhere and name not in own:
        others = " and ".join(f"lltui {c}" for c in elsewhere)
        raise CliError(f"{verb}: {name} is an option of {others}, not of lltui {verb}", 2)
    near = closest_flag(word, also=own)
    if near in own:
        raise CliError(
            f"{verb}: {name} is neither an option of lltui {verb} nor a llama-server flag; "
            f"did you mean {near}?",
            2,
        )
    if strict:
        raise CliError(f"{verb}: {unknown_flag_message(word, also=own)}", 2)


def memory_options(words: Split, verb: str) -> tuple[float | None, int | None]:
    """``--margin MIB`` and ``--host-free SIZE``, read (None where not given)."""
    from lltui.core.units import parse_size

    margin: float | None = None
    if (text := words.last("--margin")) is not None:
        try:
            margin = float(text)
            int(margin * 1024 * 1024)
        except (ValueError, OverflowError):
            raise CliError(f"{verb}: --margin expects MiB, got {text!r}", 2) from None
    host_free: int | None = None
    if (size := words.last("--host-free")) is not None:
        try:
            host_free = parse_size(size)
        except ValueError as exc:
            raise CliError(f"{verb}: --host-free: {exc}", 2) from None
    return margin, host_free

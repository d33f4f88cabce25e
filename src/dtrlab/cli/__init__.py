"""The dtrlab command line: a thin typer layer over dtrlab's functions, plus other modules' commands.

Owns argument checking and printing; a DtrlabError becomes one line `dtrlab: ...` and exit code 2.
"""

from __future__ import annotations

import copy
import gc
import importlib
import os
import sys
from typing import Any, Iterable, List, Optional

# dtrlab does no linear algebra, and numpy's OpenBLAS starts a thread per core that spins ~0.1 s of
# CPU after numpy loads: on a 2-core machine, a core taken from every dtrlab process and each of its
# workers (which inherit this). Set before anything imports numpy; a user's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import typer
from typer.core import TyperGroup
from typer.main import get_command_name

from ..version import __version__
from ..coercion import plain_coercions
from ..errors import DtrlabError
from ..defaults import DEFAULT_RUNTIME
from .options import (BYTES_OPT, ENGINE_OPT, JSON_LIST_OPT, JSON_OPT, OVERHEAD_LIMIT_OPT, POLICIES_FILE_OPT,
                      POLICY_OPT, RATIO_OPT, TRACE_OPT, TRACES_LIST_OPT,
                      RUNTIME_HELP, SEED_OPT, SOURCE_ARG, TRACES_OPT, EngineName)
from ..formats import bytes_text, count_text, ns_text, overhead_text
from ..output import console, print_json
from ..trace import resolve_source
from ..trace.fetch import DEFAULT_NAME, SHA256, URL

USER_ERROR_EXIT = 2

# Usage errors of the click that typer runs on (newer typers carry their own copy of click,
# so `import click` would name different classes); typer re-exports BadParameter from it.
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _fail(message: str, code: int = USER_ERROR_EXIT) -> None:
    typer.echo(f"dtrlab: {message}", err=True)
    raise typer.Exit(code)


class _Group(TyperGroup):
    """The root group: every command runs inside it, so one handler turns user errors into one line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        plain_coercions(self)  # typer builds the group anew each run, its commands already made

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except DtrlabError as exc:
            _show_cause(exc, ctx.meta.get(DEBUG_KEY, False))
            _fail(str(exc))


DEBUG_KEY = "dtrlab.debug"  # in click's ctx.meta, which every command's context shares


def _show_cause(exc: DtrlabError, debug: bool) -> None:
    """What precedes a user error's one line on stderr: with --debug, the whole traceback (the
    exception it stands for, where the user's code raised, first); else the user's own frames,
    when their code raised (errors.UserCodeError)."""
    import traceback

    if debug:
        typer.echo("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip(), err=True)
        if getattr(exc, "details", ""):  # e.g. a live step's difference from its plan, in full
            typer.echo(exc.details, err=True)
    elif getattr(exc, "frames", ""):
        typer.echo("Traceback of your code (most recent call last; dtrlab --debug shows every frame):\n"
                   + exc.frames.rstrip(), err=True)


app = typer.Typer(
    cls=_Group,
    name="dtrlab",
    help="Simulate Dynamic Tensor Rematerialization on execution traces.",
    invoke_without_command=True,
    add_completion=False,
    # Plain click help: typer's rich help imports rich's markdown and syntax modules, ~130 ms.
    rich_markup_mode=None,
    # A bug in dtrlab keeps its plain traceback; the pretty one prints locals (whole arrays).
    pretty_exceptions_enable=False,
)
trace_app = typer.Typer(cls=TyperGroup, help="Read traces and describe them.", invoke_without_command=True)
app.add_typer(trace_app, name="trace")
traces_app = typer.Typer(cls=TyperGroup, help="Fetch (or add) the public DTR traces; list and remove fetched sets.",
                         invoke_without_command=True)
app.add_typer(traces_app, name="traces")


def _help_without_command(ctx: typer.Context) -> None:
    # A bare `dtrlab` (or `dtrlab trace`) asks what there is: help on stdout, exit 0.
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dtrlab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit."),
          debug: bool = typer.Option(False, "--debug",
                                     help="On a mistake, print the whole traceback (dtrlab's frames too) "
                                          "before its one line.")) -> None:
    """Simulate Dynamic Tensor Rematerialization on execution traces."""
    ctx.meta[DEBUG_KEY] = debug
    _help_without_command(ctx)


@trace_app.callback()
def _trace(ctx: typer.Context) -> None:
    """Read traces and describe them."""
    _help_without_command(ctx)


@traces_app.callback()
def _traces(ctx: typer.Context) -> None:
    """Fetch (or add) the public DTR traces; list and remove fetched sets."""
    _help_without_command(ctx)


# --- printing ---------------------------------------------------------------------------------


# --- trace info -------------------------------------------------------------------------------

_INFO_ROWS = (
    ("operators", "operators (constants included)", count_text),
    ("forward_operators", "  forward", count_text),
    ("backward_operators", "  backward", count_text),
    ("constants", "constants", count_text),
    ("tensors", "tensors (aliases included)", count_text),
    ("storages", "storages", count_text),
    ("aliases", "aliases", count_text),
    ("compute_ns", "compute", ns_text),
    ("storage_bytes", "all storages", bytes_text),
    ("constant_bytes", "constants' storages", bytes_text),
    ("baseline_peak_bytes", "unconstrained peak", bytes_text),
    ("largest_op_bytes", "largest operator need", bytes_text),
    ("schedule_steps", "schedule steps", count_text),
    ("compute_steps", "  compute", count_text),
    ("get_steps", "  get", count_text),
    ("pin_steps", "  pin", count_text),
    ("release_steps", "  release", count_text),
)


def _info(program) -> dict:
    from ..sim.simulate import baseline
    from ..trace.stats import trace_stats

    info = trace_stats(program).to_dict()
    # The budget ratios of `simulate` are taken of this peak; with the cache it costs nothing.
    info["baseline_peak_bytes"] = baseline(program).peak_bytes
    return info


@trace_app.command("info")
def trace_info(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[List[str]] = TRACES_LIST_OPT,
    as_json: bool = typer.Option(False, "--json", help="Print JSON: an object, or a list for several traces."),
    strict: bool = typer.Option(False, "--strict", help="A RELEASE of an unknown name is an error."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Read and lower anew; write nothing to the cache."),
) -> None:
    """Statistics of each trace in SOURCE: operators, tensors, storages, sizes, schedule."""
    source = resolve_source(source, traces)
    from ..trace import load

    programs = load(source, list(trace) if trace else None, cache=not no_cache, strict=strict)
    infos = [_info(p) for p in programs]
    if as_json:
        print_json(infos[0] if len(infos) == 1 else infos)
        return
    from rich.table import Table

    table = Table(title=f"{source}", title_justify="left")
    table.add_column("")
    for info in infos:
        table.add_column(info["name"] + (" (synthetic)" if info["synthetic"] else ""), justify="right")
    for key, label, fmt in _INFO_ROWS:
        table.add_row(label, *(fmt(info[key]) for info in infos))
    table.add_row("largest operator", *(f"{i['largest_op']} (line {i['largest_op_line']})" for i in infos))
    console().print(table)


# --- simulate ---------------------------------------------------------------------------------


_RESULT_KEYS = ("outcome", "overhead", "clock_ns", "baseline_compute_ns", "baseline_peak_bytes",
                "budget_bytes", "ratio", "evictions", "eager_evictions", "distinct_evicted", "peak_bytes",
                "remat_ns", "score_evals", "policy", "runtime", "engine", "trace")


@app.command()
def simulate(
    source: Optional[str] = SOURCE_ARG,
    traces: Optional[str] = TRACES_OPT,
    trace: Optional[str] = TRACE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    runtime: str = typer.Option(DEFAULT_RUNTIME, "--runtime", help=RUNTIME_HELP),
    overhead_limit: Optional[float] = OVERHEAD_LIMIT_OPT,
    engine: EngineName = ENGINE_OPT,
    seed: int = SEED_OPT,
    as_json: bool = JSON_OPT,
    strict: bool = typer.Option(False, "--strict", help="A RELEASE of an unknown name is an error."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Read and lower anew; write nothing to the cache."),
    schedule_out: Optional[str] = typer.Option(None, "--schedule-out", metavar="FILE",
                                               help="Write the run's schedule (docs/schedules.md) to FILE."),
) -> None:
    """Run DTR on one trace under one memory budget and report what it cost."""
    source = resolve_source(source, traces)
    from ..sim.policies import get_policy
    from ..sim.policyfile import policy_given
    from ..sim.runtimes import get_runtime
    from ..sim.simulate import budget_of, check_budget_args, check_compatible
    from ..sim.simulate import simulate as run_simulation
    from ..trace import load_one
    from ..trace.synth import SYNTHETIC

    check_budget_args(ratio, budget_bytes)
    # Check names before reading the trace: a typo should not wait for a large file.
    policy = policy_given(policy, policies_file)
    check_compatible(get_policy(policy), get_runtime(runtime))
    program = load_one(source, trace, cache=not no_cache, strict=strict)
    budget = budget_of(program, ratio, budget_bytes)
    if schedule_out is None:
        result = _watched(lambda watch: run_simulation(program, budget, policy, runtime,
                                                       overhead_limit=overhead_limit, seed=seed,
                                                       engine=engine.value, progress=watch),
                          program.n_ops, overhead_limit)
    else:
        from ..schedule.emit import simulate_schedule, write_run_schedule

        result, schedule = _watched(lambda watch: simulate_schedule(
            program, budget, policy, runtime, overhead_limit=overhead_limit, seed=seed, engine=engine.value,
            progress=watch), program.n_ops, overhead_limit)
        write_run_schedule(schedule_out, program, result, schedule)
    d = result.to_dict()
    d["ratio"] = ratio
    out = {k: d[k] for k in _RESULT_KEYS}
    out["engine_note"] = result.engine_note or None  # why the Python engine ran, when not asked for
    if as_json:
        print_json(out)
        return
    from rich.table import Table

    synthetic = SYNTHETIC in (program.meta.get("annotations") or ())
    title = f"{result.trace}{' (synthetic)' if synthetic else ''}: {result.policy} / {result.runtime}"
    table = Table(title=f"{title} ({result.engine} engine)",
                  title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    budget_text = bytes_text(result.budget_bytes) + (f", ratio {ratio:g}" if ratio is not None else "")
    rows = [
        ("outcome", result.outcome),
        ("overhead", overhead_text(result.overhead, 6)),
        ("budget", budget_text),
        ("peak memory", bytes_text(result.peak_bytes)),
        ("clock", ns_text(result.clock_ns)),
        ("recompute", ns_text(result.remat_ns)),
        ("evictions (policy)", count_text(result.evictions)),
        ("  distinct storages", count_text(result.distinct_evicted)),
        ("evictions (eager)", count_text(result.eager_evictions)),
        ("score evaluations", count_text(result.score_evals)),
        ("baseline compute", ns_text(result.baseline_compute_ns)),
        ("baseline peak", bytes_text(result.baseline_peak_bytes)),
    ]
    if result.engine_note:
        rows.append(("engine", f"{result.engine}: {result.engine_note}"))
    for label, value in rows:
        table.add_row(label, value)
    console().print(table)


def _watched(run, n_ops: int, overhead_limit: float | None):
    """run(watch) with a RunWatch: progress lines on a terminal's stderr after 2 s, a thrash said on
    stderr, and Ctrl-C ending the run with its figures so far on one line (exit 130, nothing kept)."""
    from ..sim.progress import RunInterrupted, RunWatch, Snapshot, describe

    err = console(stderr=True)
    warn = lambda line: err.print(f"dtrlab: {line}", markup=False, highlight=False)  # noqa: E731
    watch = RunWatch(warn if err.is_terminal else lambda line: None, n_ops, warn=warn,
                     overhead_limit=overhead_limit)
    try:
        return run(watch)
    except RunInterrupted as exc:
        p = exc.partial
        snap = Snapshot(p.clock_ns, p.remat_ns, p.evictions, p.eager_evictions, 0, 0)
        last = f" (operator {watch.last.ops_created:,} of {n_ops:,})" if watch.last else ""
        typer.echo(f"dtrlab: interrupted{last}: {describe(snap)}, {p.engine} engine; "
                   "a partial run, not a result", err=True)
        raise typer.Exit(130) from None


# --- policies ---------------------------------------------------------------------------------


@app.command()
def policies(as_json: bool = JSON_LIST_OPT) -> None:
    """The registered eviction policies, with the reference simulator's names for them."""
    from ..sim.cengine import compiled_policy
    from ..sim.policies import POLICIES

    rows = [{"name": p.name, "reference": p.reference, "needs": sorted(p.needs), "formula": p.text,
             "compiled": compiled_policy(p), "description": p.description} for p in POLICIES.values()]
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table(title="eviction policies (--policy NAME, or the reference name)", title_justify="left")
    for column in ("name", "reference", "needs", "description"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], row["reference"] or "", ", ".join(row["needs"]), row["description"])
    console().print(table)


# --- traces fetch / list / remove ---------------------------------------------------------------


@traces_app.command("fetch")
def traces_fetch(
    name: str = typer.Option(DEFAULT_NAME, "--name", metavar="NAME",
                             help="Store the set under NAME (then: --traces NAME)."),
    url: str = typer.Option(URL, "--url", metavar="URL", help="Where to download logs.zip from (a mirror)."),
    sha256: str = typer.Option(SHA256, "--sha256", metavar="HEX", help="The sha256 the file must have."),
) -> None:
    """Download the DTR authors' logs.zip (the public traces), check it and store it as a named set."""
    from ..trace.fetch import fetch_set, progress_bar

    err = console(stderr=True)
    with progress_bar(err) as progress:
        fetched = fetch_set(name, url, sha256, progress=progress)
    stored = fetched.stored
    if fetched.downloaded_bytes:
        # The bar is drawn only on a terminal and vanishes; this one line is what a log keeps.
        typer.echo(f"downloaded {fetched.downloaded_bytes:,} bytes from {url} in {fetched.wall_s:.1f} s, "
                   f"sha256 checked", err=True)
        typer.echo(f"{stored.name}: {stored.path} (use --traces {stored.name})")
    else:
        typer.echo(f"{stored.name}: already fetched, {stored.path} (sha256 checked; nothing downloaded)")


@traces_app.command("add")
def traces_add(
    name: str = typer.Argument(..., metavar="NAME", help="Store the set under NAME (then: --traces NAME)."),
    file: str = typer.Argument(..., metavar="FILE", help="A logs.zip already downloaded."),
    sha256: str = typer.Option(SHA256, "--sha256", metavar="HEX",
                               help="The sha256 the file must have (default: the public logs.zip's)."),
) -> None:
    """Add a logs.zip downloaded already (offline): checked as `traces fetch` checks it, then stored."""
    from ..trace.fetch import add_set

    stored, added = add_set(name, file, sha256)
    if added:
        typer.echo(f"{stored.name}: {stored.path} ({stored.size_bytes:,} bytes from {file}, sha256 checked; "
                   f"use --traces {stored.name})")
    else:
        typer.echo(f"{stored.name}: already there, {stored.path} (sha256 checked; nothing copied)")


@traces_app.command("list")
def traces_list(as_json: bool = JSON_LIST_OPT) -> None:
    """The fetched trace sets: name, file, size and sha256."""
    from rich.table import Table

    from ..trace.fetch import list_sets, sets_dir

    sets = list_sets()
    if as_json:
        print_json([s.to_dict() for s in sets])
        return
    if not sets:
        typer.echo(f"no trace sets in {sets_dir()} (fetch the public traces with `dtrlab traces fetch`)")
        return
    table = Table(title=f"trace sets in {sets_dir()} (--traces NAME)", title_justify="left")
    for column in ("name", "file", "bytes", "sha256", "what"):
        table.add_column(column, justify="right" if column == "bytes" else "left")
    for s in sets:
        table.add_row(s.name, str(s.path), count_text(s.size_bytes), s.sha256,
                      "the DTR authors' logs.zip" if s.public else "another file")
    console().print(table)


@traces_app.command("remove")
def traces_remove(name: str = typer.Argument(..., metavar="NAME", help="The set to delete.")) -> None:
    """Delete a fetched trace set."""
    from ..trace.fetch import remove_set

    typer.echo(f"removed {name}: {remove_set(name)}")


# --- other modules' commands --------------------------------------------------------------------

# Each of these modules, when present, adds its commands with `register(app)`, named here so that a
# run imports only the module of the command it names (tests/test_cli.py checks the names against
# what each module registers).
EXTENSIONS = {
    "dtrlab.cli.sweep": ("sweep", "results"),
    "dtrlab.cli.analysis": ("scan", "explain-oom", "compare", "diverge", "bisect", "ablate", "estar-drift", "rank"),
    "dtrlab.cli.report": ("reproduce",),
    "dtrlab.cli.capture": ("capture",),
    "dtrlab.cli.timeline": ("timeline",),
    "dtrlab.cli.live": ("run",),
    "dtrlab.cli.schedule": ("schedule",),
    "dtrlab.cli.optimal": ("optimal",),
    "dtrlab.cli.staged": ("stage",),
}


def _register_extensions(target: typer.Typer, names: Iterable[str] = EXTENSIONS) -> None:
    for name in names:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # Only "this module (or its package) is not there" is skipped; a module that exists
            # but fails to import something else is a bug and keeps its traceback.
            if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
                continue
            raise
        module.register(target)


def _name(info: Any) -> str:
    """A registered command's or group's name, as the command line spells it."""
    return info.name or get_command_name(info.callback.__name__)


def _with(commands: list, groups: list) -> typer.Typer:
    """A copy of the root app (its settings and callback) holding these commands and groups."""
    made = copy.copy(app)
    made.registered_commands, made.registered_groups = list(commands), list(groups)
    return made


def full_app() -> typer.Typer:
    """The root app with every command: dtrlab's own (`app`) and every present extension's."""
    made = _with(app.registered_commands, app.registered_groups)
    _register_extensions(made)
    return made


def _app_for(args: list[str]) -> typer.Typer:
    """The app that runs args: only the command they name, with its module alone imported, when the
    name is one dtrlab knows; else (root help, a misspelt name) every command. Typer builds every
    command it holds on each run, so the narrow app saves the other commands' imports and building."""
    name = next((a for a in args if not a.startswith("-")), None)
    if name is None or {"--help", "--version"} & set(args[:args.index(name)]):
        return full_app()
    made = _with(app.registered_commands, app.registered_groups)
    _register_extensions(made, [m for m, names in EXTENSIONS.items() if name in names])
    commands = [c for c in made.registered_commands if _name(c) == name]
    groups = [g for g in made.registered_groups if _name(g) == name]
    return _with(commands, groups) if commands or groups else full_app()


def main(argv: list[str] | None = None) -> None:
    """The `dtrlab` console script: user errors are one line on stderr and exit code 2."""
    try:
        args = sys.argv[1:] if argv is None else list(argv)
        code = _app_for(args)(args=args, prog_name="dtrlab", standalone_mode=False)
    except DtrlabError as exc:  # raised outside a command (a command's own are handled by _Group)
        typer.echo(f"dtrlab: {exc}", err=True)
        code = USER_ERROR_EXIT
    except _ClickException as exc:  # click's usage errors: one line too, not a panel
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        typer.echo(f"dtrlab: {exc.format_message()}{hint}", err=True)
        code = exc.exit_code
    except typer.Abort:
        typer.echo("dtrlab: aborted", err=True)
        code = 1
    if argv is None:
        # The console script's process ends here. Its last collection would walk every object the
        # imports made (numpy's, typer's, rich's): ~10% of a cached `simulate`. Frozen, they are
        # freed as ever, unwalked. (A caller passing argv, such as a test, keeps its collector.)
        gc.freeze()
    sys.exit(code if isinstance(code, int) else 0)

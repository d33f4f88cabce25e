"""The command-line arguments and options that several commands take: SOURCE, --traces, --trace, the budget.

Declared once here and shared by the command modules (typer reuses a parameter's declaration).
"""

from __future__ import annotations

from enum import Enum

import typer

from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME, ENGINES

SOURCE_HELP = ("A trace file (.log/.jsonl, maybe .gz), a folder with manifest.json, or a logs.zip "
               "(default: the traces shipped with dtrlab).")

SOURCE_ARG = typer.Argument(None, show_default=False, help=SOURCE_HELP)
TRACES_OPT = typer.Option(None, "--traces", metavar="NAME",
                          help="A trace set stored by `dtrlab traces fetch`, instead of SOURCE.")
POLICIES_FILE_OPT = typer.Option(None, "--policies", metavar="FILE",
                                 help="A TOML file of named score formulas ([policies.NAME] score = \"...\"); "
                                      "see docs/policies.md.")
EngineName = Enum("EngineName", {name: name for name in ENGINES}, type=str)  # --engine's choices

POLICY_HELP = ("Eviction policy: a name (see `dtrlab policies`), a formula 'score: ...', or a Python "
               "function module:function.")

RUNTIME_HELP = ("Runtime: eager-optimized, optimized, eager, lazy, banishing (or the reference's class "
                "name), with the eviction search's shortcuts after + (NAME+sample, NAME+small; "
                "see docs/sweeps.md).")

POLICY_OPT = typer.Option(None, "--policy", "-p", help=POLICY_HELP + " Default: " + DEFAULT_POLICY + ".")
RUNTIME_OPT = typer.Option(DEFAULT_RUNTIME, "--runtime", help=RUNTIME_HELP)

TRACE_HELP = "The trace whose name starts with NAME (needed when SOURCE holds several)."
TRACE_OPT = typer.Option(None, "--trace", "-t", metavar="NAME", help=TRACE_HELP)
TRACES_LIST_OPT = typer.Option(None, "--trace", "-t", metavar="NAME",
                               help="Only traces whose name starts with NAME (repeatable; default: all).")


def policy_list_opt(extra: str):
    """--policy (-p) repeated: a command over several policies; `extra` says what they do there."""
    return typer.Option(None, "--policy", "-p", metavar="P", help=POLICY_HELP + " Repeatable" + extra)


JSON_LIST_OPT = typer.Option(False, "--json", help="Print a JSON list.")
JSON_OPT = typer.Option(False, "--json", help="Print one JSON object.")
# A budget: exactly one of the two (sim.simulate.check_budget_args says which mistake was made).
# -r is the budget as a ratio of the unbounded peak everywhere: one (--ratio) for a command about
# one run, a SPEC (--ratios, which --ratio also names) for a command over many.
RATIO_HELP = "Budget as a ratio of the trace's unbounded peak (ratio 1.0 evicts nothing)."
RATIO_OPT = typer.Option(None, "--ratio", "-r", metavar="R", help=RATIO_HELP)
BYTES_OPT = typer.Option(None, "--budget-bytes", "-b", metavar="B", help="Budget in bytes.")
RATIOS_HELP = ("Budget ratios of the unbounded peak: a list 0.1,0.2 and/or inclusive ranges START:STOP:STEP "
               "(exact decimals: 0.090:0.120:0.001).")


def ratios_opt(default=None, extra_help: str = ""):
    """--ratios (also --ratio, -r): the SPEC of a command over many budgets."""
    return typer.Option(default, "--ratios", "--ratio", "-r", metavar="SPEC", help=RATIOS_HELP + extra_help)


# How many times, and on how many processes, a command runs.
WORKERS_OPT = typer.Option(None, "--workers", "-j", metavar="N", help="Worker processes (default: one a core).")


def steps_opt(default: int, help: str, *aliases: str):
    """--steps (-k): how many steps of a model a command runs."""
    return typer.Option(default, "--steps", *aliases, "-k", metavar="K", help=help)


BATCH_OPT = typer.Option(None, "--batch", "-n", help="Batch size (default: the model's).")

# What a simulation is given beside its budget and policy.
SEED_HELP = "Seed of the random policies and of a sampled search (+sample)."
SEED_OPT = typer.Option(0, "--seed", help=SEED_HELP)
ENGINE_HELP = ("Simulator engine: auto (the compiled one wherever it runs the policy), c or python; "
               "the results are the same.")
ENGINE_OPT = typer.Option(EngineName.auto, "--engine", help=ENGINE_HELP)
OVERHEAD_LIMIT_HELP = "Stop a run with remat_limit (infeasible) once its overhead must exceed X."
OVERHEAD_LIMIT_OPT = typer.Option(None, "--overhead-limit", metavar="X", help=OVERHEAD_LIMIT_HELP)

# The step a command runs: a zoo MODEL or a user's --script, and its sizes.
MODEL_ARG = typer.Argument(None, help="A zoo model: resnet32, lstm, transformer, unet, densenet.")
SCRIPT_OPT = typer.Option(None, "--script", metavar="FILE.py:FUNCTION",
                          help="A user's step factory: FUNCTION(batch=..., device=...) "
                               "(the arguments it accepts) returns a zero-argument step.")
DEVICE_OPT = typer.Option("cpu", "--device", help="cpu or cuda.")
SIZE_OPT = typer.Option(None, "--size", metavar="KEY=VALUE",
                        help="A model size argument, e.g. hidden=256 (repeatable).")

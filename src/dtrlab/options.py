"""The command-line arguments and options that several commands take: SOURCE, --traces, --trace, the budget.

Declared once here and shared by the command modules (typer reuses a parameter's declaration).
"""

from __future__ import annotations

from enum import Enum

import typer

from .defaults import ENGINES

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

TRACE_HELP = "The trace whose name starts with NAME (needed when SOURCE holds several)."
TRACE_OPT = typer.Option(None, "--trace", "-t", metavar="NAME", help=TRACE_HELP)
JSON_OPT = typer.Option(False, "--json", help="Print one JSON object.")
# A budget: exactly one of the two (sim.simulate.check_budget_args says which mistake was made).
RATIO_OPT = typer.Option(None, "--ratio", "-r", metavar="R", help="Budget as a ratio of the peak.")
BYTES_OPT = typer.Option(None, "--budget-bytes", "-b", metavar="B", help="Budget in bytes.")

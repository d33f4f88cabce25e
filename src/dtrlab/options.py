"""The command-line arguments and options that several commands take: SOURCE, --traces and --policies.

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

"""What the CLI commands share when they print: JSON without inf or nan, and rich consoles.

Every command module prints its JSON and makes its consoles through here, so a non-finite figure
is null everywhere and a table written to a pipe or a file keeps its full width.
"""

from __future__ import annotations

import json
import math
import sys
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

# Off a terminal rich would lay tables out in 80 columns and cut names (`resnet…`); wider than
# any table dtrlab prints, so a pipe or a file gets every name whole.
PIPE_WIDTH = 100_000


def console(stderr: bool = False) -> Console:
    """A rich Console on stdout, as wide as the terminal or PIPE_WIDTH off one; or one on stderr.

    stderr keeps rich's width: it carries progress and stage rules, drawn across the width.
    Made per call: click's test runner swaps sys.stdout, and a Console keeps the file it saw.
    """
    from rich.console import Console  # late: rich costs start-up time that --help need not pay

    out = Console(file=sys.stderr if stderr else sys.stdout, highlight=False)
    if not stderr and not out.is_terminal:
        out.width = PIPE_WIDTH
    return out


def clean(value: Any) -> Any:
    """JSON has no inf/nan: they become null, in nested dicts and lists too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def print_json(value: Any) -> None:
    typer.echo(json.dumps(clean(value), indent=2, allow_nan=False))


NONE_FOUND = "none found"


def print_findings(out: Console, table: Any) -> None:
    """A rich table of findings (switches, inversions, storages...), or, when it has no rows, its
    title and NONE_FOUND on one line: an empty table's frame reads as a failure to look."""
    if table.row_count:
        out.print(table)
    else:
        out.print(f"{table.title or 'findings'}: {NONE_FOUND}")

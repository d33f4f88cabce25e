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


class Ticker:
    """Items done of a long step that has no bar of its own (total None: not known ahead): a rich
    bar on a terminal (bar=False: none), and off one (a log) a line at most every PERIOD_S seconds
    and one at the end, so that no stage is silent for long there either."""

    PERIOD_S = 2.0

    def __init__(self, out: Console, what: str, total: int | None = None, bar: bool = True) -> None:
        self.out, self.what, self.total = out, what, total
        self.show_bar, self.lines = bar and out.is_terminal, not out.is_terminal
        self.done, self.detail, self.bar, self.said = 0, "", None, 0

    def __enter__(self) -> Ticker:
        import time

        self.start = self.last = time.monotonic()
        if self.show_bar:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("{task.fields[detail]}"), console=self.out,
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task(self.what, total=self.total, detail="")
        return self

    def tick(self, detail: str = "") -> None:
        """One item done; `detail` says which (the next line shows it)."""
        import time

        self.done += 1
        self.detail = detail
        if self.bar is not None:
            self.bar.update(self.task, advance=1, detail=detail)
        elif self.lines and time.monotonic() - self.last >= self.PERIOD_S:
            self.last = time.monotonic()
            self._line()

    def _line(self) -> None:
        import time

        self.said = self.done
        of = f"/{self.total}" if self.total is not None else ""
        detail = f" ({self.detail})" if self.detail else ""
        self.out.print(f"  {self.what}: {self.done}{of}{detail}, {time.monotonic() - self.start:.0f} s", style="dim")

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
        elif self.lines and self.done > self.said and exc[0] is None:
            self._line()

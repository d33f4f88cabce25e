"""How dtrlab writes a run's figures as text, for every printer: the command line, the report,
the timelines. Plain functions with no dependencies, so a library module may use them too.
"""

from __future__ import annotations

import math

NO_FIGURE = "-"  # what a table shows where a run has no figure (an overhead of a run that did not finish)


def overhead_text(overhead: float | None, digits: int = 3) -> str:
    """An overhead with `digits` decimals; NO_FIGURE for a run that did not finish (None, as
    dtrlab.sim.result.run_overhead gives it, or a missing value of a table: NaN)."""
    if overhead is None or not math.isfinite(overhead):
        return NO_FIGURE
    return f"{overhead:.{digits}f}"

"""How dtrlab writes a run's figures as text, for every printer: the command line, the report,
the timelines. Plain functions with no dependencies, so a library module may use them too.
"""

from __future__ import annotations

import math

NO_FIGURE = "-"  # what a table shows where a run has no figure (an overhead of a run that did not finish)


_SCALES = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def bytes_text(n: int, scaled: bool = True) -> str:
    """Bytes, exact ("1,234,567 B"), with the binary unit beside from a KiB up when `scaled`
    ("1,234,567 B (1.18 MiB)"): the exact figure always, since a budget is decided by the last bytes."""
    n = int(n)
    if scaled:
        for unit, scale in _SCALES:
            if abs(n) >= scale:
                return f"{n:,} B ({n / scale:.2f} {unit})"
    return f"{n:,} B"


def count_text(n: float) -> str:
    """A count with thousands separated (a float rounded to the nearest whole)."""
    return f"{n:,.0f}"


def ns_text(n: int) -> str:
    """Nanoseconds, exact, with milliseconds beside."""
    return f"{int(n):,} ({n / 1e6:,.1f} ms)"


def overhead_text(overhead: float | None, digits: int = 3) -> str:
    """An overhead with `digits` decimals; NO_FIGURE for a run that did not finish (None, as
    dtrlab.sim.result.run_overhead gives it, or a missing value of a table: NaN)."""
    if overhead is None or not math.isfinite(overhead):
        return NO_FIGURE
    return f"{overhead:.{digits}f}"

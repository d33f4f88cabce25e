"""The fast and the slow run of a switch over the simulated clock, from their event logs: resident
memory against the budget, cumulative recompute time, and each eviction by storage, with the
first divergent eviction (analysis.divergence) marked. Owns SwitchSeries and the figure."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formats import overhead_text
from ..sim.instruments import EVENT_KINDS, EVICT, EVICT_EAGER, LOCK, REMAT
from .source import Timeline

FAST_COLOUR, SLOW_COLOUR = "#1f77b4", "#c0392b"


@dataclass(frozen=True, eq=False)
class SwitchSeries:
    """What the figure draws of one run (small enough to keep in the report's memo).

    memory: int64 rows [clock_ns, memory_bytes] per compute, remat and eviction; recompute: rows
    [clock_ns, cumulative recompute ns] per rematerialization; evictions: rows [clock_ns, storage]."""

    label: str
    budget_bytes: int
    overhead: float | None
    memory: np.ndarray
    recompute: np.ndarray
    evictions: np.ndarray


def series(tl: Timeline, label: str) -> SwitchSeries:
    log = tl.log
    program = tl.program
    rows = log.kind != EVENT_KINDS[LOCK]
    memory = np.stack([log.clock_ns[rows], log.memory_bytes[rows]], axis=1)
    remat = log.kind == EVENT_KINDS[REMAT]
    cost = program.op_cost_ns[program.tensor_op[log.tensor[remat]]]
    recompute = np.stack([log.clock_ns[remat], np.cumsum(cost)], axis=1)
    ev = np.isin(log.kind, [EVENT_KINDS[EVICT], EVENT_KINDS[EVICT_EAGER]])
    evictions = np.stack([log.clock_ns[ev], log.storage[ev]], axis=1)
    return SwitchSeries(label, tl.budget_bytes, tl.result.overhead, memory.astype(np.int64),
                        recompute.astype(np.int64), evictions.astype(np.int64))


def figure(title: str, fast: SwitchSeries, slow: SwitchSeries, divergence=None):
    """Three panels sharing the clock; `divergence` (analysis.divergence.diverge(program, fast, slow),
    so its `a` is the fast run) is marked with a dotted line in each run's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 8.5), sharex=True, gridspec_kw={"height_ratios": [1.2, 1, 1.3]})
    mib, ms = 2.0 ** 20, 1e6
    # The slow run first: it is the longer, and the fast one is drawn over it.
    for s, colour, z in ((slow, SLOW_COLOUR, 2), (fast, FAST_COLOUR, 3)):
        name = f"{s.label} (overhead {overhead_text(s.overhead)})"
        axes[0].step(s.memory[:, 0] / ms, s.memory[:, 1] / mib, where="post", color=colour, lw=0.8, alpha=0.8,
                     label=name, zorder=z)
        axes[0].axhline(s.budget_bytes / mib, color=colour, ls="--", lw=1, label=f"budget of {s.label}")
        rec = s.recompute
        axes[1].step(np.r_[0, rec[:, 0]] / ms, np.r_[0, rec[:, 1]] / ms, where="post", color=colour, lw=1.2,
                     label=name, zorder=z)
        axes[2].plot(s.evictions[:, 0] / ms, s.evictions[:, 1], ".", ms=1.5 if z == 3 else 0.8, mew=0, color=colour,
                     alpha=0.7, rasterized=True, zorder=z)
        axes[2].plot([], [], "s", color=colour, ms=4, label=f"{s.label}: {len(s.evictions):,} evictions")
    if divergence is not None and divergence.index is not None:
        for choice, colour in ((divergence.a, FAST_COLOUR), (divergence.b, SLOW_COLOUR)):
            if choice.clock_ns is not None:
                for ax in axes:
                    ax.axvline(choice.clock_ns / ms, color=colour, ls=":", lw=1.4)
        at = min(c.clock_ns for c in (divergence.a, divergence.b) if c.clock_ns is not None)
        axes[0].annotate(f"first divergent eviction (#{divergence.index + 1}): storage {divergence.a.chosen} "
                         f"vs {divergence.b.chosen}", xy=(at / ms, 0.45), xycoords=("data", "axes fraction"),
                         xytext=(6, 0), textcoords="offset points", fontsize=8)
    axes[0].set_ylabel("resident memory (MiB)")
    axes[1].set_ylabel("cumulative recompute (ms)")
    axes[2].set_ylabel("storage evicted")
    axes[2].set_xlabel("simulated clock (ms)")
    axes[0].set_title(title)
    for ax in axes:
        ax.grid(True, alpha=0.25)
        # Right of the axes, never over the series.
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    return fig


def switch_runs(program, a, b, policy: str, runtime: str):
    """(fast, slow, divergence) of two budgets (analysis.scan.Budget): both runs' series, the faster
    (less recompute) first, and where their policy evictions part (None where no score to compare)."""
    from ..analysis.divergence import diverge
    from ..errors import UsageError
    from .source import record

    runs = [(x, record(program, x.budget_bytes, policy, runtime, ratio=x.ratio)) for x in (a, b)]
    runs.sort(key=lambda xr: xr[1].result.remat_ns)
    (fa, ta), (sb, tb) = runs
    try:
        found = diverge(program, fa, sb, policy, runtime)
    except UsageError:  # a random policy, or a run the compiled engine cannot do: no marker
        found = None
    return series(ta, f"ratio {fa.label}" if fa.ratio is not None else fa.label), \
        series(tb, f"ratio {sb.label}" if sb.ratio is not None else sb.label), found


def save_png(fig, path) -> str:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return str(path)


def draw_switch(program, a, b, policy: str, runtime: str, path) -> str:
    """`dtrlab compare --plot`: the figure of the runs under budgets a and b, written to path (PNG)."""
    from pathlib import Path

    from ..errors import UsageError

    if not Path(path).parent.is_dir():
        raise UsageError(f"{Path(path).parent}: no such folder")
    fast, slow, found = switch_runs(program, a, b, policy, runtime)
    title = f"{program.name} / {policy} / {runtime}: {fast.label} (fast) against {slow.label} (slow)"
    return save_png(figure(title, fast, slow, found), path)

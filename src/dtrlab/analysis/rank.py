"""The leaderboard: for each policy and trace, the mean overhead over a budget grid, the smallest
feasible ratio, and the stability of its curve (switches, the largest neighbour factor, inversions).

`rank_runs` runs what a leaderboard needs through the results store; `leaderboard` reads store
rows (a frame, as `Store.rows` gives it) and is what the report can call on its own frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from .feasibility import inversions
from .regimes import DEFAULT_FACTOR, switches
from .runs import runs_of

ALL_TRACES = "all"  # the trace column of a policy's row over every trace
# Below any real factor between two overheads: switches() at this factor lists every neighbour pair.
_ANY_FACTOR = math.nextafter(1.0, 2.0)


@dataclass(frozen=True)
class RankRow:
    """One policy on one trace (or on every trace: trace == ALL_TRACES).

    grid_feasible / grid_runs: budgets of the grid that ran ok, of those that ran or failed.
    mean_overhead: the mean over the grid's feasible budgets (None when none is feasible); an
        infeasible budget is not averaged in, it is counted in grid_feasible.
    min_feasible_ratio: the smallest ratio that ran ok, grid and fine scans together (over every
        trace: the largest of the traces' smallest, the ratio from which each trace has run once).
    budgets: every budget the stability figures read (the grid and the fine scans).
    switches: neighbouring feasible budgets whose overheads differ by more than the factor.
    max_neighbour_factor: the largest overhead factor between neighbouring feasible budgets.
    inversions: runs of infeasible budgets with a feasible budget on both sides.
    """

    policy: str
    trace: str
    grid_runs: int
    grid_feasible: int
    mean_overhead: float | None
    min_feasible_ratio: float | None
    budgets: int
    switches: int
    max_neighbour_factor: float | None
    inversions: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _trace_row(policy: str, trace: str, runs: list, grid: frozenset, factor: float) -> RankRow:
    on_grid = [r for r in runs if r.ratio in grid and (r.feasible or r.infeasible)]
    ok_grid = [r for r in on_grid if r.feasible]
    measured = [r.overhead for r in ok_grid if r.overhead is not None]
    feasible_ratios = [r.ratio for r in runs if r.feasible and r.ratio is not None]
    neighbours = switches(runs, _ANY_FACTOR)
    return RankRow(policy, trace, len(on_grid), len(ok_grid),
                   sum(measured) / len(measured) if measured else None,
                   min(feasible_ratios, default=None), len(runs), len(switches(runs, factor)),
                   max((s.factor for s in neighbours), default=1.0 if feasible_ratios else None),
                   len(inversions(runs)))


def _all_row(policy: str, rows: list[RankRow], means: list[float]) -> RankRow:
    smallest = [r.min_feasible_ratio for r in rows]
    factors = [r.max_neighbour_factor for r in rows if r.max_neighbour_factor is not None]
    return RankRow(policy, ALL_TRACES, sum(r.grid_runs for r in rows), sum(r.grid_feasible for r in rows),
                   sum(means) / len(means) if means else None,
                   None if None in smallest or not smallest else max(smallest),
                   sum(r.budgets for r in rows), sum(r.switches for r in rows),
                   max(factors, default=None), sum(r.inversions for r in rows))


def leaderboard(frame, grid: Sequence[float], names: Mapping[str, str] | None = None,
                factor: float = DEFAULT_FACTOR) -> list[RankRow]:
    """One row per (policy, trace) of the store rows in `frame`, then one per policy over every
    trace (its mean over every feasible grid budget of every trace), policies best first: most
    feasible grid budgets, then the lowest mean overhead. `names` maps a stored policy (a
    built-in's name, a formula's text) to the name shown; timeouts count as not run."""
    names = names or {}
    grid_set = frozenset(float(r) for r in grid)
    per_policy: dict[str, list[RankRow]] = {}
    means: dict[str, list[float]] = {}
    for (policy, trace), rows in frame.groupby(["policy", "trace"], sort=False):
        runs = runs_of(rows)
        shown = names.get(policy, policy)
        per_policy.setdefault(shown, []).append(_trace_row(shown, trace, runs, grid_set, factor))
        means.setdefault(shown, []).extend(r.overhead for r in runs if r.feasible and r.overhead is not None
                                            and r.ratio in grid_set)
    totals = [_all_row(p, rows, means[p]) for p, rows in per_policy.items()]
    order = sorted(totals, key=lambda r: (-r.grid_feasible, math.inf if r.mean_overhead is None else r.mean_overhead))
    out = []
    for total in order:
        out.extend(sorted(per_policy[total.policy], key=lambda r: r.trace))
        out.append(total)
    return out


def shown_names(policies: Sequence[str]) -> dict[str, str]:
    """Stored policy (as a run spec names it: a built-in's name, a registered formula's text) ->
    the name a user gave it, for `leaderboard(..., names)`."""
    from ..sim.policies import get_policy
    from ..sweep.grid import portable_name

    return {portable_name(get_policy(p)): p for p in policies}


def fine_scans(specs: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """`--fine` values: `SPEC` (every trace) or `NAME=SPEC` (the traces whose name starts with NAME),
    as trace-name prefix ("" for every trace) -> ratios."""
    from ..errors import UsageError
    from ..sweep.grid import parse_ratios

    out: dict[str, set[float]] = {}
    for spec in specs:
        prefix, _, ratios = spec.rpartition("=")
        if "=" in spec and not prefix.strip():
            raise UsageError(f"--fine {spec!r}: no trace name before '='")
        out.setdefault(prefix.strip(), set()).update(parse_ratios(ratios))
    return {k: tuple(sorted(v)) for k, v in out.items()}


def _fine_for(name: str, fine: Mapping[str, Sequence[float]]) -> set[float]:
    return {r for prefix, ratios in fine.items() if name.startswith(prefix) for r in ratios}


def rank_runs(source: str, programs: Sequence, policies: Sequence[str], grid: Sequence[float],
              fine: Mapping[str, Sequence[float]] | Sequence[float] = (), *, store, executor="local", workers: int | None = None,
              scheduler: str | None = None, runtime: str | None = None, overhead_limit: float | None = None,
              timeout_s: float | None = None, progress: bool = True, seed: int = 0, engine: str = "auto"):
    """Run the grid and fine ratios of every (trace, policy) through the results store (what it
    has is read back, so a second call simulates nothing); (store rows, name shown per policy, summary).
    `fine`: ratios for every trace, or trace-name prefix -> ratios (as `fine_scans` gives them)."""
    from ..sim.runtimes import DEFAULT_RUNTIME
    from ..sweep.grid import build_specs
    from ..sweep.run import run_sweep
    from ..sweep.store import Store

    fine = fine if isinstance(fine, Mapping) else {"": tuple(fine)}
    specs = [s for program in programs
             for s in build_specs(str(source), [program], policies, [runtime or DEFAULT_RUNTIME],
                                  sorted(set(grid) | _fine_for(program.name, fine)), overhead_limit=overhead_limit,
                                  seed=seed, engine=engine)]
    names = shown_names(policies)
    with Store(store) as opened:
        summary = run_sweep(specs, opened, executor, workers, scheduler, timeout_s=timeout_s,
                            progress=progress, report=False)
        frame = opened.rows(s.key for s in specs)
    return frame, names, summary


def figure(frame, names: Mapping[str, str] | None = None):
    """Overhead against ratio, one panel per trace, one line per policy (feasible budgets only;
    log scale, since thrashing policies pay orders of magnitude more)."""
    import matplotlib

    matplotlib.use("Agg")  # never a display: the figure is written to a file
    import matplotlib.pyplot as plt

    names = names or {}
    traces = sorted(frame["trace"].unique())
    cols = min(3, len(traces)) or 1
    rows_n = max(1, math.ceil(len(traces) / cols))
    fig, axes = plt.subplots(rows_n, cols, figsize=(5 * cols, 3.4 * rows_n), squeeze=False)
    for ax, trace in zip(axes.flat, traces):
        for policy, rows in frame[frame["trace"] == trace].groupby("policy", sort=False):
            ok = [r for r in runs_of(rows) if r.feasible and r.ratio is not None]
            ax.plot([r.ratio for r in ok], [r.overhead for r in ok], marker=".", lw=1, ms=3,
                    label=names.get(policy, policy))
        ax.set_title(trace)
        ax.set_yscale("log")
        ax.set_xlabel("budget ratio")
        ax.set_ylabel("overhead")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(traces):]:
        ax.axis("off")
    fig.tight_layout()
    # One legend for every panel, right of them all: over a panel it would hide its curves.
    fig.legend(*axes.flat[0].get_legend_handles_labels(), fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return fig


def save_figure(fig, out: str | Path) -> Path:
    import matplotlib.pyplot as plt

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return out

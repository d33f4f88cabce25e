"""The report's refinement: each refined curve is scanned down to the fine grid wherever two neighbours differ.

Owns refine_to_fine(): rounds of sweep.run.refine_specs (the loop of `dtrlab sweep --refine`) with every
new ratio put on the fine grid (multiples of plan.FINE_STEP), plus every fine budget inside an inversion,
until no two neighbours differ across a gap and no inversion spans a budget that was not run.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Callable, Mapping, Sequence

from ..analysis.feasibility import inversions
from ..analysis.runs import runs_of
from ..sweep.grid import RunSpec, budget_from_ratio, ratio_literal
from ..sweep.run import Refinement, SweepSummary, refine_specs
from ..sweep.store import Store
from ..trace.lower import Program
from .plan import FINE_STEP, REFINE_POINTS, SWITCH_FACTOR


def _at(spec: RunSpec, ratio: Decimal, programs: Mapping[str, Program]) -> RunSpec:
    r = float(str(ratio))
    return replace(spec, ratio=r, budget_bytes=budget_from_ratio(programs[spec.trace_sha256], r))


def on_fine_grid(specs: Sequence[RunSpec], programs: Mapping[str, Program]) -> list[RunSpec]:
    """The specs with their ratios rounded to the fine grid (one spec per key, none at ratio 0)."""
    out: dict[str, RunSpec] = {}
    for s in specs:
        ratio = ratio_literal(s.ratio).quantize(FINE_STEP)
        if ratio > 0:
            spec = _at(s, ratio, programs)
            out.setdefault(spec.key, spec)
    return list(out.values())


def inside_inversions(specs: Sequence[RunSpec], store: Store, programs: Mapping[str, Program]) -> list[RunSpec]:
    """Every fine budget strictly between an inversion's last and next feasible budget (of each
    curve of `specs`, as stored): two infeasible neighbours agree in outcome, so refine_specs leaves
    the budgets between them alone, yet the inversion names them; a fine scan there can find more."""
    protos: dict[tuple, RunSpec] = {}  # curve -> one of its specs, to make the new ones from
    curve_of: dict[str, tuple] = {}
    for s in specs:
        if s.ratio is not None:
            curve_of[s.key] = protos.setdefault(s.group, s).group
    frame = store.rows(curve_of)
    out: dict[str, RunSpec] = {}
    for group, rows in frame.groupby(frame["key"].map(lambda k: list(protos).index(curve_of[k]))):
        proto = list(protos.values())[group]
        for inv in inversions(runs_of(rows)):
            r = ratio_literal(inv.last_feasible.ratio).quantize(FINE_STEP) + FINE_STEP
            while r < ratio_literal(inv.next_feasible.ratio):
                spec = _at(proto, r, programs)
                out.setdefault(spec.key, spec)
                r += FINE_STEP
    return list(out.values())


def refine_to_fine(specs: Sequence[RunSpec], store: Store, programs: Mapping[str, Program],
                   sweep: Callable[[list[RunSpec], list[RunSpec]], SweepSummary]) -> Refinement:
    """Refine the stored curves of `specs` wherever two neighbours differ (in outcome, or in overhead
    by more than the switch factor): REFINE_POINTS new ratios between them a round, on the fine grid,
    until every such pair is FINE_STEP apart; and run every fine budget inside an inversion. Ends,
    since the grid between two budgets is finite; a report then never names a switch or an inversion
    across budgets it did not run."""
    specs, ran, summary = list(specs), 0, None
    while True:
        have = {s.key for s in specs}
        found = on_fine_grid(refine_specs(specs, store, programs, REFINE_POINTS, SWITCH_FACTOR), programs)
        found += inside_inversions(specs, store, programs)
        new = list({s.key: s for s in found if s.key not in have}.values())
        if not new:
            return Refinement(tuple(specs), ran, summary)
        specs += new
        summary = sweep(specs, new)
        ran += summary.ran
        if summary.interrupted:
            return Refinement(tuple(specs), ran, summary)

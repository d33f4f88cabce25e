"""The report's mechanisms: every switch and inversion of the subject policy's curves, measured by
analysis.mechanism through the report's memo (sharing its counts, OOM explanations and divergences).

Owns which runs the section measures and where each figure is taken from; the rules are analysis.mechanism's.
"""

from __future__ import annotations

import math
from pathlib import Path

from ..analysis.churn import storage_counts
from ..analysis.divergence import diverge, policy_log
from ..analysis.oom import explain_oom
from ..analysis.mechanism import (KINDS, Signature, counts_table, event_log, evictions_of, mechanisms, pairs_of,
                                  worst_moment)
from ..analysis.scan import Budget
from ..errors import UsageError
from ..sim import cengine
from ..sim.policies import get_policy
from ..sim.runtimes import get_runtime
from ..sim.result import OK, OOM
from ..sim.simulate import baseline
from .memo import memo
from .plan import RUNTIME, SUBJECT_POLICY, Plan


class _Runs:
    """The runs a switch or inversion reads, each simulated once for its counts, its event log and its
    policy evictions: a run that finished or ran out of memory under the overhead cap is the same run
    with the cap or without it, and a run the cap stopped is replayed with that cap. The last few are
    kept (neighbouring pairs share runs); where the compiled engine does not run the policy, each
    consumer takes its own path."""

    KEEP = 4

    def __init__(self, program, overhead_limit: float) -> None:
        self.program = program
        self.kept: dict[int, dict] = {}
        self.pol, self.rt = get_policy(SUBJECT_POLICY), get_runtime(RUNTIME)
        self.compiled = cengine.supports(self.pol, self.rt)
        self.remat_limit_ns = baseline(program).compute_ns * (overhead_limit - 1) if self.compiled else None

    def of(self, run) -> dict | None:
        if not self.compiled:
            return None
        got = self.kept.pop(run.budget_bytes, None)
        if got is None:
            limit = math.inf if run.outcome in (OK, OOM) else self.remat_limit_ns
            got = cengine.run_compiled(self.program, run.budget_bytes, self.pol, self.rt, limit, counts=True,
                                       events=True)
        self.kept[run.budget_bytes] = got
        while len(self.kept) > self.KEEP:
            del self.kept[next(iter(self.kept))]
        return got

    def counts(self, run):
        """storage_counts(...) of the run, as it gives them."""
        got = self.of(run)
        if got is None:
            return None
        return {k: v for k, v in got.items() if k not in ("events", "storage_counts")}, got["storage_counts"]


def _counts(out: Path, program, run, plan: Plan, runs: _Runs):
    # The key of the pipeline's churn of pairs for runs the overhead cap cannot change (ok and oom
    # runs never passed it); a remat_limit run is replayed with the cap that stopped it.
    key = {"trace": program.sha256, "budget": run.budget_bytes, "policy": SUBJECT_POLICY}
    limit = None
    if run.outcome not in (OK, OOM):
        limit = plan.overhead_limit
        key["overhead_limit"] = limit
    _, arrays = memo(out, "counts", key,
                     lambda: runs.counts(run) or storage_counts(program, run.budget_bytes, SUBJECT_POLICY, RUNTIME,
                                                               limit))
    return evictions_of(arrays)


def _explained(out: Path, ooms, program):
    """run -> its OomReport: the pipeline's explanation when it made one, else a replay of our own
    (the pipeline explains within its limits; every inversion here gets its frontier figures)."""
    def explain(run):
        case = next((c for c in ooms if c.trace == program.name and c.policy == SUBJECT_POLICY
                     and c.report.budget_bytes == run.budget_bytes), None)
        if case is not None:
            return case.report
        key = {"trace": program.sha256, "budget": run.budget_bytes, "policy": SUBJECT_POLICY}
        return memo(out, "mechanism-oom", key,
                    lambda: explain_oom(program, run.budget_bytes, SUBJECT_POLICY, RUNTIME))
    return explain


def _divergence(out: Path, program, runs: _Runs):
    def divergence(a, b):
        # The key of the pipeline's focus (a: the fast run, b: the slow one), so the focus is not
        # replayed; a run the cap stopped gives only its log up to the cap (its count in all is None).
        key = {"trace": program.sha256, "a": a.budget_bytes, "b": b.budget_bytes, "policy": SUBJECT_POLICY}
        capped = tuple(run.outcome not in (OK, OOM) for run in (a, b))
        if any(capped):
            key["capped"] = capped

        def log(run):
            got = runs.of(run)
            return None if got is None else policy_log(got["events"])
        try:
            return memo(out, "divergence", key, lambda: diverge(program, Budget(a.ratio, a.budget_bytes),
                                                                Budget(b.ratio, b.budget_bytes), SUBJECT_POLICY,
                                                                RUNTIME, logs=(log(a), log(b)),
                                                                whole=tuple(not c for c in capped)))
        except UsageError:  # no compiled engine: the divergence needs its eviction log
            return None
    return divergence


def _deepest(out: Path, program, plan: Plan, runs: _Runs):
    def deepest(run):
        # The memo keeps worst_moment's figures, not the log (a row per engine event).
        key = {"trace": program.sha256, "budget": run.budget_bytes, "policy": SUBJECT_POLICY,
               "overhead_limit": plan.overhead_limit}

        def log():
            got = runs.of(run)
            return got["events"] if got is not None else event_log(program, run.budget_bytes, SUBJECT_POLICY,
                                                                    RUNTIME, plan.overhead_limit)
        return memo(out, "deepest", key, lambda: worst_moment(log()))
    return deepest


def mechanisms_of(out: Path, found: dict, by_name: dict, ooms, plan: Plan) -> tuple[Signature, ...]:
    """The Signature of every switch and inversion of the subject policy's curves, trace by trace."""
    sigs: list[Signature] = []
    for (trace, policy), curve in sorted(found.items()):
        if policy != SUBJECT_POLICY:
            continue
        program = by_name[trace]
        runs = _Runs(program, plan.overhead_limit)
        sigs += mechanisms(program, pairs_of(curve.switches, curve.inversions), SUBJECT_POLICY, RUNTIME,
                           counts=lambda run, p=program, r=runs: _counts(out, p, run, plan, r),
                           explain=_explained(out, ooms, program), divergence=_divergence(out, program, runs),
                           deepest=_deepest(out, program, plan, runs))
    return tuple(sigs)


def mechanism_counts(repro) -> dict[str, dict[str, int]]:
    """trace -> {churn, frontier, both, neither -> count}, for every trace of the reproduction."""
    table = counts_table(repro.mechanisms)
    return {t["name"]: table.get(t["name"], dict.fromkeys(KINDS, 0))
            for t in repro.traces}


def section(repro) -> dict:
    """What the report's mechanisms section reads: the table's columns and rows, the counts per trace."""
    from ..analysis.mechanism import (CHURN_JACCARD_MIN, CHURN_RATE_MIN, FRONTIER_MIN_REMATS, MECHANISM_COLUMNS,
                                      mechanism_row)

    return {"rules": {"churn_rate": CHURN_RATE_MIN, "jaccard": CHURN_JACCARD_MIN, "remats": FRONTIER_MIN_REMATS},
            "columns": MECHANISM_COLUMNS, "rows": [mechanism_row(s) for s in repro.mechanisms],
            "counts": mechanism_counts(repro), "kinds": KINDS}

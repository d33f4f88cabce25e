"""The report's mechanisms: every switch and inversion of the subject policy's curves, measured by
analysis.mechanism through the report's memo (the runs' facts of report.runfacts, the pipeline's OOM
explanations and its focus's divergence).

Owns which runs the section measures and where each figure is taken from; the rules are analysis.mechanism's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..analysis.divergence import diverge
from ..analysis.oom import explain_oom
from ..analysis.mechanism import (KINDS, Signature, counts_table, event_log, evictions_of, mechanisms, pairs_of,
                                  worst_moment)
from ..analysis.scan import Budget
from ..errors import UsageError
from . import pool
from .memo import memo, stored
from .plan import RUNTIME, SUBJECT_POLICY, Plan
from .runfacts import available, counts_of, facts, is_capped


def _counts(out: Path, program, run, plan: Plan):
    return evictions_of(counts_of(out, program, run, plan.overhead_limit))


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


def _divergence_key(program, a, b) -> dict:
    # The key of the pipeline's focus (a: the fast run, b: the slow one), so the focus is not
    # replayed; a run the cap stopped is looked at only as far as the cap let it go (its count
    # in all is None).
    key = {"trace": program.sha256, "a": a.budget_bytes, "b": b.budget_bytes, "policy": SUBJECT_POLICY}
    capped = (is_capped(a), is_capped(b))
    if any(capped):
        key["capped"] = capped
    return key


def divergence_of(out: Path, program, overhead_limit: float):
    """divergence(a, b) -> the first Divergence of runs a (the fast or feasible one) and b of the
    subject policy, through the memo, from the runs' facts where there are facts; None without the
    compiled engine."""
    def divergence(a, b):
        key = _divergence_key(program, a, b)

        def compute():
            sides = [facts(out, program, run, overhead_limit) for run in (a, b)]
            return diverge(program, Budget(a.ratio, a.budget_bytes), Budget(b.ratio, b.budget_bytes), SUBJECT_POLICY,
                           RUNTIME, logs=tuple(None if f is None else f.head for f in sides),
                           totals=tuple(None if f is None or f.capped else f.policy_evictions for f in sides))
        try:
            return memo(out, "divergence", key, compute)
        except UsageError:  # no compiled engine: the divergence needs its eviction log
            return None
    return divergence


def _deepest(out: Path, program, plan: Plan):
    def deepest(run):
        got = facts(out, program, run, plan.overhead_limit)
        if got is not None:
            return got.deepest
        # The memo keeps worst_moment's figures, not the log (a row per engine event).
        key = {"trace": program.sha256, "budget": run.budget_bytes, "policy": SUBJECT_POLICY,
               "overhead_limit": plan.overhead_limit}
        return memo(out, "deepest", key, lambda: worst_moment(event_log(program, run.budget_bytes, SUBJECT_POLICY,
                                                                          RUNTIME, plan.overhead_limit)))
    return deepest


def _one_divergence(out: str, sha: str, a, b, overhead_limit: float) -> None:
    divergence_of(Path(out), pool.program(sha), overhead_limit)(a, b)


def prefetch_divergences(out: Path, found: dict, by_name: dict, plan: Plan, workers: int | None,
                         tick: Callable[[str], None] = lambda _: None) -> int:
    """The first divergence of every switch and inversion the memo lacks, on `workers` processes
    (report.pool; each replays its two runs on the Python engine up to where they part, for the score
    terms there); tick(what) after each. Returns how many were computed. The runs' facts must be in
    the memo (runfacts.prefetch), else each worker simulates its own."""
    if not available():
        return 0
    tasks, programs = [], {}
    for (trace, policy), curve in sorted(found.items(), key=lambda item: -by_name[item[0][0]].n_ops):
        program = by_name[trace]
        if policy != SUBJECT_POLICY:
            continue
        for kind, a, b, _ in pairs_of(curve.switches, curve.inversions):
            if not stored(out, "divergence", _divergence_key(program, a, b)):
                programs[program.sha256] = program
                tasks.append(pool.Task(_one_divergence, (str(out), program.sha256, a, b, plan.overhead_limit),
                                       f"{trace} {kind} at {b.label}"))
    pool.run_tasks(tasks, programs, workers, tick)
    return len(tasks)


def runs_read(found: dict, by_name: dict) -> list[tuple]:
    """(program, run) of every run the mechanisms read, in their order."""
    return [(by_name[trace], run) for (trace, policy), curve in sorted(found.items()) if policy == SUBJECT_POLICY
            for _, ref, bad, _ in pairs_of(curve.switches, curve.inversions) for run in (ref, bad)]


def mechanisms_of(out: Path, found: dict, by_name: dict, ooms, plan: Plan,
                  tick: Callable[[str], None] = lambda _: None) -> tuple[Signature, ...]:
    """The Signature of every switch and inversion of the subject policy's curves, trace by trace;
    tick(what) after each."""
    sigs: list[Signature] = []
    for (trace, policy), curve in sorted(found.items()):
        if policy != SUBJECT_POLICY:
            continue
        program = by_name[trace]

        def ticked(pairs, trace=trace):
            for pair in pairs:
                yield pair
                tick(f"{trace} {pair[0]} at {pair[2].label}")
        sigs += mechanisms(program, ticked(pairs_of(curve.switches, curve.inversions)), SUBJECT_POLICY, RUNTIME,
                           counts=lambda run, p=program: _counts(out, p, run, plan),
                           explain=_explained(out, ooms, program),
                           divergence=divergence_of(out, program, plan.overhead_limit),
                           deepest=_deepest(out, program, plan))
    return tuple(sigs)


def pair_count(found: dict) -> int:
    """How many switches and inversions mechanisms_of measures."""
    return sum(len(curve.switches) + len(curve.inversions) for (_, policy), curve in found.items()
               if policy == SUBJECT_POLICY)


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

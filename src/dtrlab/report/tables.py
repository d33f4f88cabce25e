"""The report's tables as rows of plain values: one row per curve, one per inversion (with its OOM).

Owns what the HTML and the Markdown both show in their tables; the templates say how they look.
"""

from __future__ import annotations

from ..formats import bytes_text
from ..analysis.oom import frontier_text
from ..sim.result import OOM


def curve_rows(repro) -> list[dict]:
    """One row per (trace, policy): runs, feasible, smallest feasible ratio, switches, inversions."""
    rows = []
    for (t, p), c in sorted(repro.curves.items()):
        ok = [r for r in c.runs if r.feasible]
        sw = c.switches
        rows.append({"trace": t, "policy": p, "runs": len(c.runs), "feasible": len(ok),
                     "min_feasible": min((r.ratio for r in ok if r.ratio is not None), default=None),
                     "switches": len(sw), "max_factor": max((s.factor for s in sw), default=None),
                     "inversions": len(c.inversions)})
    return rows


def inversion_rows(repro) -> list[dict]:
    rows = []
    for (t, p), c in sorted(repro.curves.items()):
        for k, inv in enumerate(c.inversions):
            case = next((o for o in repro.ooms if o.trace == t and o.policy == p and o.inversion == k), None)
            rows.append({"trace": t, "policy": p, "last_feasible": inv.last_feasible.ratio,
                         "infeasible": ", ".join(f"{r.ratio:g}" for r in inv.infeasible),
                         "outcomes": "/".join(sorted({r.outcome for r in inv.infeasible})),
                         "next_feasible": inv.next_feasible.ratio,
                         "explanation": _oom_line(case) if case else (
                             "not an OOM (overhead cap)" if all(r.outcome != OOM for r in inv.infeasible)
                             else "not explained (see the notes)")})
    return rows


def _oom_line(case) -> str:
    r = case.report
    verdict = ("pool empty, pinned + locked + need exceed the budget by "
               f"{bytes_text(r.shortfall_bytes, scaled=False)}" if r.frontier_exceeds_budget else
               "the frontier alone does not explain it")
    return f"at {case.ratio:g}: {frontier_text(r)}; {verdict}"

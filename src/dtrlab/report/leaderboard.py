"""The report's leaderboard: the DTR paper's policies, the shipped remedies and a user's policies,
ranked by analysis.rank over the plan's grid and, for the policies scanned finely, its fine windows.

Owns which runs the leaderboard adds to a reproduction and the Leaderboard value the templates read;
every run goes through the results store, like the rest of the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pandas as pd

from ..analysis.rank import ALL_TRACES, RankRow, leaderboard, shown_names
from ..analysis.rank import figure as rank_figure
from ..sweep.grid import RunSpec, build_specs
from ..trace.lower import Program
from .plan import RUNTIME, SUBJECT_POLICY, SWITCH_FACTOR, Plan


@dataclass(frozen=True)
class Leaderboard:
    """policies: every policy ranked (names as given); fine: those whose rows also read the plan's fine
    windows (the subject policy's windows, scanned for them too); rows: analysis.rank's, best first."""

    policies: tuple[str, ...]
    fine: tuple[str, ...]
    grid: tuple[float, ...]
    windows: int  # traces of this reproduction that have a fine window
    rows: tuple[RankRow, ...]
    frame: pd.DataFrame  # the runs the rows read (store rows), for the figure

    def totals(self) -> list[RankRow]:
        """The rows over every trace, best first."""
        return [r for r in self.rows if r.trace == ALL_TRACES]


def ranked_policies(plan: Plan, extra: Sequence[str]) -> tuple[str, ...]:
    """The plan's policies, then its remedies, then a user's (each once, in that order)."""
    return tuple(dict.fromkeys([*plan.policies, *plan.remedies, *extra]))


def fine_policies(plan: Plan, extra: Sequence[str]) -> tuple[str, ...]:
    """The policies whose stability the leaderboard reads on the plan's fine windows: the subject
    policy (whose windows the study scans anyway), the remedies and a user's policies."""
    return tuple(dict.fromkeys([SUBJECT_POLICY, *plan.remedies, *extra])) if plan.windows else ()


def specs(path: str, programs: Sequence[Program], plan: Plan, extra: Sequence[str], **limit) -> list[RunSpec]:
    """The runs the leaderboard needs beyond the coarse curves and the subject's fine windows: the
    remedies' and a user's policies over the grid and the windows."""
    added = [p for p in ranked_policies(plan, extra) if p not in plan.policies]
    grid = plan.coarse()
    out = build_specs(path, programs, added, [RUNTIME], grid, **limit) if added and grid else []
    windowed = [p for p in fine_policies(plan, extra) if p != SUBJECT_POLICY]
    for program in programs:
        window = plan.window(program)
        if window and windowed:
            out += build_specs(path, [program], windowed, [RUNTIME], window, **limit)
    return out


def build(frame: pd.DataFrame, plan: Plan, extra: Sequence[str], windows: int) -> Leaderboard:
    """The leaderboard of the store rows in `frame` (the coarse curves, the subject's windows, `specs`)."""
    policies = ranked_policies(plan, extra)
    rows = leaderboard(frame, plan.coarse(), shown_names(policies), SWITCH_FACTOR)
    return Leaderboard(policies, fine_policies(plan, extra), plan.coarse(), windows, tuple(rows), frame)


def figure(board: Leaderboard):
    """Overhead against ratio, a panel per trace, a line per ranked policy (analysis.rank's figure)."""
    return rank_figure(board.frame, shown_names(board.policies))


def context(board: Leaderboard | None) -> dict | None:
    """What the report's leaderboard section reads: the ranked rows and what each policy is."""
    if board is None:
        return None
    from ..sim.policies import get_policy

    def about(name: str) -> dict:
        policy = get_policy(name)
        return {"name": name, "text": policy.text or name, "description": policy.description,
                "fine": name in board.fine and board.windows > 0}

    totals = board.totals()
    return {"totals": totals, "rows": [r for r in board.rows if r.trace != ALL_TRACES],
            "policies": {r.policy: about(r.policy) for r in totals}, "grid": board.grid,
            "windows": board.windows, "fine": [p for p in board.fine if board.windows]}

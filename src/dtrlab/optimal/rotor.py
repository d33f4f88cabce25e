"""A rotor-style plan for a chain: which states and which stages' activations to hold while each stage's
backward runs, by a dynamic program over stages with their own costs and sizes (the heterogeneous-chain
checkpointing of Beaumont, Herrmann, Pallez and Shilova, 2019, written here from the paper's idea).

Owns ChainCosts and Keep (a chain as the dynamic program sees it), RotorTable (the dynamic program, at
every memory level at once) and RotorPlan (what it holds, stage by stage). chain.py measures the costs
from a program and replays the plan into a schedule.

- **The problem.** Reversing stages s..t starts from stage s's starting state, held, with m bytes free
  for more holdings; each stage's backward runs once, the last first, and needs that stage's
  *activations* (what its forward makes that the backward reads). The cost is every stage forward
  run, the first forward's included (so the recompute is the cost less the forward's own), and every
  remaking of activations from a partial keep (below).
- **The choice** at s..t with m bytes: (a) *checkpoint*: advance from s to a later stage s' (running
  s..s'-1), hold s' 's starting state, reverse s'..t with m less its bytes, let it go, then reverse
  s..s'-1 with m; or (b) *forward-all*: run stage s keeping its activations and the next state, reverse
  s+1..t with m less those bytes, then run stage s's backward. A single stage runs once more, keeping
  its activations, when they fit.
- **Partial keeps** extend (b): a stage may offer smaller sets than its activations, each with the cost
  of making the activations again from it before the stage's backward (which then needs room for
  both). Keep 0 of every stage is its activations, made again at no cost: rotor's forward-all. (The
  LSTM's cells offer their three gate activations, 10.4 MB, against the 24.4 MB of all of them: made
  again from those, they skip the cell's two matrix products.)
- **Memory levels.** Bytes are counted in units of the memory over `levels`, each size rounded up, so a
  plan never holds more than its memory. The table has a row per sub-chain (n^2 / 2) and a column per
  level, each entry a minimum over up to n choices: time grows as n^3 x levels / 6, memory as
  n^2 x levels. DEFAULT_LEVELS (500) keeps the LSTM's 259 stages to seconds and ~300 MB, while a unit
  (the table's top over 500: about 1 MB at the LSTM's ratio 0.1) stays well under its smallest state
  (3.5 MB), so rounding loses at most about a unit per holding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

DEFAULT_LEVELS = 500  # memory levels of the table (module docstring: why 500)
_NEVER_FITS = np.iinfo(np.int64).max // 4  # the levels of a keep a stage does not offer


@dataclass(frozen=True)
class Keep:
    """What a forward-all of a stage may keep: held_bytes while the later stages reverse (with the next
    state's shared_bytes counted once), remake_ns to make the activations again from it before the
    stage's backward, and backward_bytes, it and the activations together, held then."""

    held_bytes: int
    remake_ns: int
    shared_bytes: int
    backward_bytes: int


@dataclass(frozen=True)
class ChainCosts:
    """A chain of n stages as the dynamic program sees it: forward_ns[j] stage j's forward; state_bytes[j]
    its starting state held (state_bytes[0] is the program's start: 0, always there); activation_bytes[j]
    what stage j's backward reads of what its forward makes; keeps[j] what a forward-all of it may keep,
    keeps[j][0] its activations (remade at 0 ns); gradient_bytes[j] the most the backward's own storages
    take at once while stage j's backward runs (empty: none), room the stage's backward needs besides."""

    forward_ns: tuple[int, ...]
    state_bytes: tuple[int, ...]
    activation_bytes: tuple[int, ...]
    keeps: tuple[tuple[Keep, ...], ...]
    gradient_bytes: tuple[int, ...] = ()

    @property
    def n_stages(self) -> int:
        return len(self.forward_ns)


@dataclass(frozen=True)
class RotorPlan:
    """While stage j's backward runs: states[j] the stages k >= 1 whose starting state is held, kept[j]
    the (stage, keep) pairs held (made by a forward-all, keep an index into ChainCosts.keeps[stage]);
    forward_ns the cost of the stage forwards and remakings the plan runs, the first forward's
    included; memory_bytes the memory it was made for."""

    states: tuple[tuple[int, ...], ...]
    kept: tuple[tuple[tuple[int, int], ...], ...]
    forward_ns: int
    memory_bytes: int


def _levels_of(sizes_bytes: np.ndarray, unit_bytes: int) -> np.ndarray:
    """Sizes in memory levels, rounded up."""
    return -(-sizes_bytes // unit_bytes)


def _shifted(costs: np.ndarray, by_levels: np.ndarray) -> np.ndarray:
    """out[r, m] = costs[r, m - by_levels[r]], infinite where that level is below zero: a row's cost once
    its row's holding has taken by_levels[r] of the memory."""
    index = np.arange(costs.shape[1])[None, :] - by_levels[:, None]
    out = np.take_along_axis(costs, np.clip(index, 0, None), axis=1)
    out[index < 0] = math.inf
    return out


class RotorTable:
    """The dynamic program over a chain (module docstring) for every memory up to memory_bytes:
    cost[l][s, m] is the least cost of reversing stages s..s+l with m levels free, choice[l][s, m] the
    choice that makes it (d > 0: a checkpoint at s + d; -1 - i: keep i of stage s)."""

    def __init__(self, costs: ChainCosts, memory_bytes: int, levels: int = DEFAULT_LEVELS) -> None:
        self.costs = costs
        self.unit_bytes = max(1, -(-int(memory_bytes) // levels))
        self.levels = int(memory_bytes) // self.unit_bytes
        self._sizes()
        self.cost: list[np.ndarray] = []
        self.choice: list[np.ndarray] = []
        self._fill()

    def _sizes(self) -> None:
        """Every holding in levels: a state; what a stage's backward needs run alone (its activations and
        its gradients' room); and per keep i of stage s (columns) what it holds with the next state while
        s + 1.. reverse, what stage s's backward needs then (the gradients' room too), and its remaking ns
        (a keep a stage does not offer never fits)."""
        c, n = self.costs, self.costs.n_stages
        self.state_levels = _levels_of(np.array(c.state_bytes, np.int64), self.unit_bytes)
        gradient = np.array(c.gradient_bytes or [0] * n, np.int64)
        self.alone_levels = _levels_of(np.array(c.activation_bytes, np.int64) + gradient, self.unit_bytes)
        width = max((len(k) for k in c.keeps), default=0)
        self.keep_levels = np.full((n, width), _NEVER_FITS, np.int64)
        self.keep_need_levels = np.full((n, width), _NEVER_FITS, np.int64)
        self.remake_ns = np.zeros((n, width), np.float64)
        for j in range(n - 1):
            for i, keep in enumerate(c.keeps[j]):
                with_next = keep.held_bytes + c.state_bytes[j + 1] - keep.shared_bytes
                self.keep_levels[j, i] = -(-with_next // self.unit_bytes)
                self.keep_need_levels[j, i] = -(-(keep.backward_bytes + int(gradient[j])) // self.unit_bytes)
                self.remake_ns[j, i] = keep.remake_ns

    def _fill(self) -> None:
        """The table, sub-chains of one length at a time (all their starts at once), shortest first."""
        n, width = self.costs.n_stages, self.levels + 1
        forward = np.array(self.costs.forward_ns, np.float64)
        prefix = np.concatenate([[0.0], np.cumsum(forward)])
        x = self.state_levels
        level = np.arange(width)
        single = np.where(level[None, :] >= self.alone_levels[:, None], forward[:, None], math.inf)
        self.cost.append(single)
        self.choice.append(np.zeros(single.shape, np.int16))
        held = [_shifted(single, x)]  # held[l][r, m]: cost[l][r, m - x[r]] (r's state held as a checkpoint)
        for length in range(1, n):
            rows = n - length
            best = np.full((rows, width), math.inf)
            choice = np.zeros((rows, width), np.int16)
            candidate = np.empty_like(best)
            better = np.empty(best.shape, bool)
            for i in range(self.keep_levels.shape[1]):  # forward-all of stage s, keep i
                np.add(_shifted(self.cost[length - 1][1:], self.keep_levels[:rows, i]),
                       (forward[:rows] + self.remake_ns[:rows, i])[:, None], out=candidate)
                candidate[level[None, :] < self.keep_need_levels[:rows, i, None]] = math.inf
                self._take(best, choice, candidate, better, -1 - i)
            for d in range(1, length + 1):  # checkpoint at s + d
                np.add(held[length - d][d:d + rows], self.cost[d - 1][:rows], out=candidate)
                candidate += (prefix[d:d + rows] - prefix[:rows])[:, None]
                self._take(best, choice, candidate, better, d)
            self.cost.append(best)
            self.choice.append(choice)
            held.append(_shifted(best, x[:rows]))

    @staticmethod
    def _take(best: np.ndarray, choice: np.ndarray, candidate: np.ndarray, better: np.ndarray, code: int) -> None:
        """Where candidate is cheaper than best, take it and its choice code."""
        np.less(candidate, best, out=better)
        np.copyto(best, candidate, where=better)
        np.copyto(choice, code, where=better)

    def level_of(self, memory_bytes: int) -> int:
        """The memory's level in the table (rounded down, at most the table's top)."""
        return min(self.levels, int(memory_bytes) // self.unit_bytes)

    def forward_ns(self, memory_bytes: int) -> float:
        """The least cost of reversing the whole chain with memory_bytes (infinite: no plan fits)."""
        return float(self.cost[-1][0, self.level_of(memory_bytes)])

    def plan(self, memory_bytes: int) -> RotorPlan | None:
        """The plan that makes forward_ns(memory_bytes), or None when none fits."""
        n, top = self.costs.n_stages, self.level_of(memory_bytes)
        if not math.isfinite(self.cost[-1][0, top]):
            return None
        states: list[tuple[int, ...]] = [()] * n
        kept: list[tuple[tuple[int, int], ...]] = [()] * n
        work = [(0, n - 1, top, (), ())]  # (first stage, last, free levels, states held, keeps held)
        while work:
            s, t, m, held, keeping = work.pop()
            d = int(self.choice[t - s][s, m])
            if s == t:
                states[s], kept[s] = held, keeping
            elif d < 0:  # forward-all with keep -1 - d; stage s's backward runs after s + 1..t
                mine = keeping + ((s, -1 - d),)
                states[s], kept[s] = held, mine
                work.append((s + 1, t, m - int(self.keep_levels[s, -1 - d]), held + (s + 1,), mine))
            else:
                work.append((s, s + d - 1, m, held, keeping))
                work.append((s + d, t, m - int(self.state_levels[s + d]), held + (s + d,), keeping))
        return RotorPlan(tuple(states), tuple(kept), int(round(self.cost[-1][0, top])), int(memory_bytes))


__all__ = ["ChainCosts", "Keep", "RotorPlan", "RotorTable", "DEFAULT_LEVELS"]

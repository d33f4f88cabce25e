"""DTR's save set through PyTorch's own partitioner: torch.compile with a knapsack solver
(torch._functorch.config.activation_memory_budget_solver) whose choice is DTR's, as a mode of the
comparison ("compile-dtr", at a ratio).

Owns DtrKnapsack and its runner. When the partitioner is under an activation memory budget below 1,
it lists the forward nodes that even its most aggressive min-cut will not recompute (in the zoo's
models: convolutions, matmuls, norms' reductions) and asks a knapsack solver which of them to
recompute; a min-cut, free to recompute every other node, then picks the saved values. DtrKnapsack
answers with DTR: it lowers the partitioner's own joint graph (forward and backward) into a Program
(staged/lower.py: one measured pass), simulates DTR on it at `ratio` of its unconstrained peak, and
recomputes the candidates that the simulation recomputes in the backward. The other nodes are the
min-cut's, so this point is DTR's decisions where PyTorch asks for them, and PyTorch's elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch._inductor.custom_graph_pass import CustomKnapsackSolver

from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME
from ..schedule.emit import simulate_schedule
from ..schedule.format import COMPUTE
from ..sim.result import OK
from ..sim.simulate import baseline, budget_from_ratio
from ..staged.lower import lower_graph
from ..staged.staging import UNIT_COST_NS, StagingOutOfMemory

# The activation memory budget the compiled step runs under: any value in (0, 1) below the
# partitioner's own aggressive choices sends it to the knapsack; the budget itself is DTR's ratio.
KNAPSACK_BUDGET = 1e-6


@dataclass(frozen=True)
class Decision:
    """One joint graph's answer: how many candidates the partitioner offered, the names of those DTR
    recomputes, and the simulation's overhead on the joint graph."""

    candidates: int
    recomputed: tuple[str, ...]
    overhead: float


def _real(value) -> torch.Tensor:
    """A real tensor shaped as a placeholder's (fake) value: normal numbers for floating point, zeros
    otherwise (valid indices)."""
    out = torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype, device=value.device)
    return out.normal_() if out.is_floating_point() else out.zero_()


def recomputed_in_backward(schedule, op_node: tuple, backward: set) -> set:
    """The nodes whose operator the schedule computes again after the backward's first operator ran:
    what DTR does not keep from the forward to the backward."""
    seen, started, again = set(), False, set()
    for kind, op in zip(schedule.kind.tolist(), schedule.target.tolist()):
        if kind != COMPUTE:
            continue
        node = op_node[op]
        started = started or node in backward
        if started and op in seen:
            again.add(node)
        seen.add(op)
    return again


class DtrKnapsack(CustomKnapsackSolver):
    """The partitioner's knapsack answered by a DTR simulation of its joint graph at `ratio` (see the
    module's words); each answer is kept in `decisions`. Raises StagingOutOfMemory when DTR does not
    fit the joint graph at the ratio. `costs`: how the simulation costs operators (dtrlab.stage's)."""

    def __init__(self, ratio: float, policy: str = DEFAULT_POLICY, runtime: str = DEFAULT_RUNTIME,
                 costs: str = "measured") -> None:
        self.ratio, self.policy, self.runtime, self.costs = ratio, policy, runtime, costs
        self.decisions: list[Decision] = []

    def __call__(self, memory, joint_graph, max_memory, node_info, candidates):
        gm = joint_graph.owning_module
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            inputs = [_real(n.meta["val"]) for n in joint_graph.nodes if n.op == "placeholder"]
            program, gmap = lower_graph(gm, inputs, name="joint-graph",
                                        unit_cost_ns=UNIT_COST_NS if self.costs == "unit" else None)
        budget = budget_from_ratio(program, self.ratio)
        result, schedule = simulate_schedule(program, budget, self.policy, self.runtime)
        if result.outcome != OK:
            raise StagingOutOfMemory(f"DTR does not fit the partitioner's joint graph in {budget:,} B (ratio "
                                     f"{self.ratio:g} of {baseline(program).peak_bytes:,} B; its inputs alone take "
                                     f"{program.constant_bytes:,} B): {result.outcome}")
        again = recomputed_in_backward(schedule, gmap.op_node, set(node_info.required_bw_nodes))
        recompute = [i for i, n in enumerate(candidates) if n in again]
        saved = [i for i, n in enumerate(candidates) if n not in again]
        self.decisions.append(Decision(len(candidates), tuple(candidates[i].name for i in recompute), result.overhead))
        return saved, recompute

    def uuid(self):
        return None  # no cached compilation: each answer rests on a measured pass


def partitioned_runner(mode, world: Callable[[], None], costs: str = "measured"):
    """`world`'s model compiled in place by inductor (compiled.compiled_runner) with DtrKnapsack at
    mode.setting (and `costs`) as the partitioner's knapsack solver. Its first step compiles."""
    from .compiled import compiled_runner

    solver = DtrKnapsack(mode.setting, costs=costs)
    return compiled_runner(mode, world, KNAPSACK_BUDGET, solver, detail=lambda: described(solver.decisions))


def described(decisions: list[Decision]) -> str:
    """A few words on what DTR decided in each joint graph it was asked about."""
    if not decisions:
        return "the partitioner asked nothing (no candidate to recompute)"
    return "; ".join(f"DTR recomputes {len(d.recomputed)} of {d.candidates} candidates ({d.overhead:.2f}x on the joint graph)"
                     for d in decisions)

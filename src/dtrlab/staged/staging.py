"""dtrlab.stage: a training step planned once under a memory budget and run again and again as one
rewritten graph, with DTR's recomputations and frees compiled in.

Owns the staging pipeline (trace, lower, simulate, check, rewrite) and the staged callable; it reads
the simulation only as a Schedule (dtrlab.schedule) and the public simulate API.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME
from ..errors import DtrlabError, UsageError
from ..schedule.check import Replay, check_schedule
from ..schedule.emit import simulate_schedule
from ..sim.result import OK
from ..sim.simulate import baseline, budget_from_ratio, check_budget_bytes
from ..trace.lower import Program
from .graph import Holders, StepGraph, find_holders, held_by, structure_key, trace_step, write_back
from .lower import GraphMap, lower_graph
from .measure import MeasuredPeak, allocator_peak_bytes, measure_peak
from .rewrite import rewrite


class StagingOutOfMemory(DtrlabError):
    """The simulation of the step under the budget runs out of memory: no schedule to stage."""


@dataclass(frozen=True, eq=False)
class Plan:
    """One staging: the traced graph, its Program, the planner's answer (the simulator's RunResult, or
    the solver's OptimalResult) and its schedule, the checker's replay of it, the rewritten GraphModule,
    and where the staging time went (ns)."""

    graph: StepGraph
    program: Program
    gmap: GraphMap
    budget_bytes: int | None
    result: Any  # RunResult (planner "dtr") or dtrlab.optimal's OptimalResult (planner "optimal")
    schedule: Any
    replay: Replay
    module: torch.fx.GraphModule
    times_ns: dict


# How a staged step's operators are costed for the simulation: "measured" by one timed pass of the
# graph (what decides a real budget), or "unit" (every operator UNIT_COST_NS: decisions that do not
# depend on the machine's timing, for reproducible plans and tests).
COSTS = ("measured", "unit")
UNIT_COST_NS = 1_000

# How a plan's graph runs: "graph", the rewritten GraphModule's generated code, each aten operator
# called at its C++ entry (fastcall.py; bitwise the eager step), or "inductor", that graph compiled by
# torch.compile's inductor (inductor.py: close within its GRAD_TOLERANCE, its peak by the allocator).
BACKENDS = ("graph", "inductor")

# Who makes the schedule: "dtr", the simulator running `policy` (DTR's online decisions), or
# "optimal", dtrlab.optimal's solver (the best schedule it finds in `time_limit_s`, docs/optimal.md).
PLANNERS = ("dtr", "optimal")


def plan(step: Callable, holders: Holders, args: tuple, budget_bytes: int | None, ratio: float | None,
         policy: str, runtime: str, repeat: int = 1, costs: str = "measured", planner: str = "dtr",
         time_limit_s: float | None = None) -> Plan:
    """Trace, lower (one measured pass), plan (simulate with the schedule emitted, or solve), check, rewrite."""
    clock = time.perf_counter_ns
    t0 = clock()
    graph = trace_step(step, holders, args)
    t1 = clock()
    _, inputs = graph.inputs(args, holders, release=False)
    program, gmap = lower_graph(graph.gm, inputs, repeat=repeat,
                                unit_cost_ns=UNIT_COST_NS if costs == "unit" else None)
    t2 = clock()
    budget = budget_from_ratio(program, ratio) if ratio is not None else budget_bytes
    if planner == "optimal":
        result, schedule = _solve(program, budget, time_limit_s)
    else:
        result, schedule = simulate_schedule(program, budget, policy, runtime)
    if planner == "dtr" and result.outcome != OK:
        peak = baseline(program).peak_bytes
        raise StagingOutOfMemory(
            f"the step does not fit in {budget:,} B under {result.policy}/{result.runtime}: the simulation "
            f"stops ({result.outcome}) after {len(schedule)} events; its unconstrained peak is {peak:,} B "
            f"(ratio {budget / peak:.3f}), and its inputs and state alone take "
            f"{program.constant_bytes:,} B")
    t3 = clock()
    replay = check_schedule(program, schedule, budget)
    t4 = clock()
    module = rewrite(graph.gm, program, gmap, schedule)
    t5 = clock()
    times = {"trace_ns": t1 - t0, "lower_ns": t2 - t1, "simulate_ns": t3 - t2, "check_ns": t4 - t3,
             "rewrite_ns": t5 - t4, "total_ns": t5 - t0}
    return Plan(graph, program, gmap, budget, result, schedule, replay, module, times)


class StagedStep:
    """A step staged under a budget: call it as the step itself. It plans again (and counts it in
    `plans`) when the state's structure changes, as after an optimizer's first step makes its state."""

    def __init__(self, step: Callable, holders: Holders, budget_bytes: int | None, ratio: float | None,
                 policy: str, runtime: str, args: tuple, costs: str = "measured", planner: str = "dtr",
                 time_limit_s: float | None = None, backend: str = "graph") -> None:
        self.step, self.holders = step, holders
        self.budget_bytes, self.ratio, self.policy, self.runtime = budget_bytes, ratio, policy, runtime
        self.costs, self.planner, self.time_limit_s, self.backend = costs, planner, time_limit_s, backend
        self._runners: dict[int, Callable] = {}  # a plan's runner, by the plan's id
        self.plans: list[Plan] = [self._plan(args)]

    def _plan(self, args: tuple) -> Plan:
        return plan(self.step, self.holders, args, self.budget_bytes, self.ratio, self.policy, self.runtime,
                    costs=self.costs, planner=self.planner, time_limit_s=self.time_limit_s)

    @property
    def plan(self) -> Plan:
        return self.plans[-1]

    def _prepared(self, args: tuple) -> tuple[Plan, list, list]:
        """The plan for the state as it is (planned again if its structure changed) and its inputs
        (graph.inputs: every input, the graph's own). The holders' tensors are taken once for the
        check and the inputs (again after a new plan, whose tracing may have made state), and not
        kept: they hold the previous gradients the graph lets go."""
        held = held_by(self.holders)
        if structure_key(self.holders, args, held) != self.plan.graph.key:
            self.plans.append(self._plan(args))
            held = held_by(self.holders)
        every, inputs = self.plan.graph.inputs(args, self.holders, held=held)
        return self.plan, every, inputs

    def _runner(self, p: Plan) -> Callable:
        """What runs `p`'s graph (made once a plan): its code with each operator called at its C++ entry
        (fastcall.py); for backend "inductor", from the plan's second run on, the graph compiled by
        inductor: a plan run once, as before an optimizer's first step makes its state, is not worth
        a compilation."""
        runner = self._runners.get(id(p))
        if runner is None:  # the first run
            from .fastcall import fast_forward

            runner = self._runners[id(p)] = fast_forward(p.module)
        elif self.backend == "inductor" and not hasattr(runner, "compiled_from"):
            from .inductor import compiled

            runner = self._runners[id(p)] = compiled(p.module, p.gmap.random)
        return runner

    @property
    def compiled(self) -> bool:
        """Whether the current plan runs compiled (backend "inductor", from the plan's second run on)."""
        return hasattr(self._runners.get(id(self.plan)), "compiled_from")

    def __call__(self, *args):
        p, every, inputs = self._prepared(args)
        run = self._runner(p)
        # The graph is the backward already: autograd recording it would keep every value it saves alive.
        with torch.no_grad():
            outs = run(*inputs)
        del inputs
        return write_back(p.graph, every, outs)

    def measured(self, *args) -> tuple[Any, MeasuredPeak]:
        """One step run under a peak counter (measure.py): its return value and the real peak, counted
        by storage identity after every node (backend "graph"), or by the CPU allocator (compiled code
        allocates below the dispatcher)."""
        p, every, inputs = self._prepared(args)
        with torch.no_grad():
            if self.backend == "graph":
                outs, peak = measure_peak(p.module, inputs)
            else:
                run, box = self._runner(p), []
                peak = MeasuredPeak(allocator_peak_bytes(lambda: box.append(run(*inputs)), inputs), 0, "allocator")
                outs = box.pop()
        del inputs
        return write_back(p.graph, every, outs), peak


def _solve(program: Program, budget: int | None, time_limit_s: float | None):
    """The solver's best schedule under `budget` (dtrlab.optimal); StagingOutOfMemory if it has none."""
    from ..optimal.defaults import DEFAULT_TIME_LIMIT_S
    from ..optimal.solve import solve_optimal

    if budget is None:
        budget = baseline(program).peak_bytes  # unbounded: nothing to recompute
    res = solve_optimal(program, budget, time_limit_s=time_limit_s or DEFAULT_TIME_LIMIT_S)
    if res.schedule is None:
        raise StagingOutOfMemory(f"the solver finds no schedule of the step in {budget:,} B ({res.status} after "
                                 f"{res.solve_s:.0f} s; its bound: {res.bound_overhead:.3g}x)")
    return res, res.schedule


def stage(step: Callable, *, budget_bytes: int | None = None, ratio: float | None = None,
          policy: str = DEFAULT_POLICY, runtime: str = DEFAULT_RUNTIME, args: tuple = (),
          modules=None, optimizers=None, costs: str = "measured", planner: str = "dtr",
          time_limit_s: float | None = None, backend: str = "graph") -> StagedStep:
    """Stage `step` (a callable running one training step: forward, backward, optimizer update) under
    `budget_bytes`, or `ratio` of its own unconstrained peak, or unbounded (neither). `args`: example
    tensors the step takes (its batch); the modules and optimizers it works on are found by
    find_holders unless given. Raises NotStageable (a step that cannot be traced whole) or
    StagingOutOfMemory (one that does not fit), each one line. `costs`: one of COSTS; `planner`: one of
    PLANNERS ("optimal" solves for `time_limit_s`, default dtrlab.optimal's); `backend`: one of BACKENDS
    (how the plan's graph runs)."""
    if budget_bytes is not None and ratio is not None:
        raise UsageError("give at most one of budget_bytes and ratio")
    if budget_bytes is not None:
        check_budget_bytes(budget_bytes, "budget_bytes")
    if costs not in COSTS:
        raise UsageError(f"costs must be one of {', '.join(COSTS)}, not {costs!r}")
    if planner not in PLANNERS:
        raise UsageError(f"planner must be one of {', '.join(PLANNERS)}, not {planner!r}")
    if backend not in BACKENDS:
        raise UsageError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    holders = find_holders(step, modules, optimizers)
    return StagedStep(step, holders, budget_bytes, ratio, policy, runtime, tuple(args), costs, planner, time_limit_s,
                      backend)

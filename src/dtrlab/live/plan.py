"""What a plan says a live step does: its program, and each operator's expected instructions as engine ids.

A plan is a capture of the same step (capture.recorder.record's instructions, or a trace read
from a file). `make_plan` lowers it once into the Program the engines follow, and walks it once
more, as the step will meet it, into Groups: one per operator that makes or writes tensors, in
order, each with its arguments and results as the Program's tensor ids and how far the schedule
goes once it is done. A planned live session (session.py) then checks each operator against its
Group and lets the engine take the schedule to the Group's end; it never lowers an instruction.

The walk meets the plan as the step makes it: the CONSTANTs an operator's inputs introduce come
before its CALL or MUTATE; a MUTATE is followed by the moves of the other tensors on the storages
it wrote (capture/naming.py's REBIND_OP: CALL, MEMORY, ALIAS 0, RELEASE) and, when the operator
also returns new tensors, by a CALL of the same operator at no cost; RELEASEs and annotations
between operators are taken with the next operator's steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..capture.naming import REBIND_OP, VIEW_OP
from ..errors import UsageError
from ..trace.lower import Lowering, Program, lower
from ..trace.read import Annotate, Call, Constant, Copy, Instruction, Mutate, Release, TraceSource, TraceText

# The plan's, followed as they are; a live step's are not compared. A COPY is the owner's reference
# to a constant's storage (capture/naming.py), taken with the next operator's steps.
UNCHECKED = (Release, Annotate, Copy)


@dataclass(frozen=True)
class Group:
    """One operator of the plan that makes or writes tensors.

    index: the plan's instruction (0-based) of its CALL or MUTATE; op: that instruction's operator
    in the program; args: its argument tensors; mutated: the argument positions a MUTATE writes
    (empty for a CALL). The CALL of its new tensors (the operator's own, or the one after its
    MUTATE): call_op (-1 for none), call_index, call_args (after the MUTATE's moves), results
    (the expected MEMORY size and ALIAS of each). moves: (old, new) tensors of a MUTATE, its written arguments' new versions, then the
    other tensors it moves (REBIND_OP). constants: the plan's CONSTANTs named by the time it runs;
    steps_end: the schedule's length once it is lowered (its releases and moves included)."""

    index: int
    name: str
    op: int
    args: tuple[int, ...]
    mutated: tuple[int, ...]
    call_op: int
    call_index: int
    call_args: tuple[int, ...]
    results: tuple[tuple[int, int], ...]
    moves: tuple[tuple[int, int], ...]
    constants: int
    steps_end: int


@dataclass(frozen=True)
class PlanConstant:
    """A CONSTANT of the plan (or a VIEW_OP's tensor: made outside the step on a storage a name
    already holds): its tensor, MEMORY size, the plan's index of that MEMORY, and the schedule's
    length once it is lowered."""

    tensor: int
    size_bytes: int
    index: int
    steps_end: int


@dataclass(frozen=True, eq=False)
class Plan:
    """A plan, ready to follow: its instructions, their program, its Groups and CONSTANTs in order,
    for each REBIND_OP operator its argument (the written tensor's new version) and the tensor
    whose window it takes again (`rebound`), and each storage's tensors."""

    instructions: tuple[Instruction, ...]
    program: Program
    groups: tuple[Group, ...]
    constants: tuple[PlanConstant, ...]
    rebound: dict[int, tuple[int, int]]
    storage_tensors: tuple[tuple[int, ...], ...]

    def rest(self, start: int) -> list[Instruction]:
        """The plan's compared instructions from index `start` on."""
        return [x for x in self.instructions[start:] if not isinstance(x, UNCHECKED)]


def make_plan(plan: "Plan | TraceText | Sequence[Instruction]") -> Plan:
    """A Plan of a capture's instructions or of a trace read from a file (a Plan is itself)."""
    if isinstance(plan, Plan):
        return plan
    if not isinstance(plan, TraceText):
        plan = TraceText(TraceSource("plan", "plan", "<plan>", True, lambda: b""), "", tuple(plan), 0)
    program = lower(plan)  # every structural check a trace file gets
    return _walk(tuple(plan.instructions), program)


def _results(ins, i: int, x: Call) -> tuple[tuple[int, int], ...]:
    return tuple((ins[i + 2 * k].size_bytes, ins[i + 2 * k + 1].alias) for k in range(len(x.results)))


def _walk(ins: tuple[Instruction, ...], program: Program) -> Plan:
    low = Lowering(program.name)
    steps = low.builder.steps
    groups: list[Group] = []
    constants: list[PlanConstant] = []
    rebound: dict[int, tuple[int, int]] = {}
    i, n = 0, len(ins)
    while i < n:
        x = ins[i]
        if isinstance(x, Annotate):
            low.annotate(x)
            i += 1
        elif isinstance(x, Release):
            low.release(x)
            i += 1
        elif isinstance(x, Copy):
            low.copy(x)
            i += 1
        elif isinstance(x, Constant):
            mem = ins[i + 1]
            t = low.constant(x, mem.size_bytes)
            constants.append(PlanConstant(t, mem.size_bytes, i + 1, len(steps)))
            i += 2
        elif isinstance(x, Call) and x.name == VIEW_OP:  # a tensor from outside on a named storage:
            op = _call(low, x, _results(ins, i + 1, x))  # met as a constant is, an alias in the program
            constants.append(PlanConstant(low.builder.op_out_start[op], ins[i + 1].size_bytes, i + 1, len(steps)))
            i += 3
        elif isinstance(x, Call) and x.name != REBIND_OP:
            args = tuple(low.bound[a] for a in x.args)
            results = _results(ins, i + 1, x)
            op = _call(low, x, results)
            groups.append(Group(i, x.name, op, args, (), op, i, args, results, (), len(constants), len(steps)))
            i += 1 + 2 * len(x.results)
        elif isinstance(x, Mutate):
            index = i
            args = tuple(low.bound[a] for a in x.args)
            olds = [low.bound[x.args[m]] for m in x.mutate]
            news = low.mutate(x)
            op = len(low.builder.op_cost) - 1
            moves = list(zip(olds, news))
            i += 1
            while i < n and isinstance(ins[i], Call) and ins[i].name == REBIND_OP:
                rebind, release = ins[i], ins[i + 3]
                old, via = low.bound[release.name], low.bound[rebind.args[0]]
                rebind_op = _call(low, rebind, _results(ins, i + 1, rebind))
                new = low.builder.op_out_start[rebind_op]
                low.release(release)
                rebound[rebind_op] = (via, old)
                moves.append((old, new))
                i += 4
            call_op, call_index, call_args, results = -1, -1, (), ()
            nxt = ins[i] if i < n else None
            if isinstance(nxt, Call) and nxt.name == x.name and nxt.time_ns == 0:
                call_args = tuple(low.bound[a] for a in nxt.args)
                results = _results(ins, i + 1, nxt)
                call_op = _call(low, nxt, results)
                call_index = i
                i += 1 + 2 * len(nxt.results)
            groups.append(Group(index, x.name, op, args, tuple(x.mutate), call_op, call_index, call_args, results,
                                tuple(moves), len(constants), len(steps)))
        else:  # COPY_FROM: a trace's, never a capture's
            raise UsageError(f"a live step cannot follow the plan's instruction {i + 1} ({x}): "
                             "a capture of a PyTorch step has none of these")
    low.pin_outputs()
    mine = list(zip(program.step_kind.tolist(), program.step_target.tolist()))
    assert steps == mine, "the plan's walk and its lowering disagree"  # one meaning of each instruction
    on_storage: list[list[int]] = [[] for _ in range(program.n_storages)]
    for t, st in enumerate(program.tensor_storage.tolist()):
        on_storage[st].append(t)
    return Plan(ins, program, tuple(groups), tuple(constants), rebound, tuple(map(tuple, on_storage)))


def _call(low: Lowering, x: Call, results) -> int:
    """Lower a CALL (with its results' MEMORY and ALIAS); its operator."""
    low.call(x, [size for size, _ in results], [alias for _, alias in results])
    return len(low.builder.op_cost) - 1

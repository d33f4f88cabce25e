"""An independent oracle for the optimal tests: every schedule of a small program, searched by Dijkstra.

A plain module (not a conftest). It reads the Program directly, with the schedule checker's rules
(docs/schedules.md), and shares no code with dtrlab.optimal.
"""

from __future__ import annotations

import heapq

from dtrlab.trace.lower import PIN, Program


def brute_force_optimum(program: Program, budget_bytes: int) -> int | None:
    """The least recompute ns of any schedule within the budget (None: no schedule fits).

    A state is (next first computation, resident storages, defined tensors); a move computes an
    operator (the next one, or one already computed) or frees a resident non-constant storage."""
    n_ops = program.n_ops
    cost = program.op_cost_ns.tolist()
    const = program.op_constant.tolist()
    args = [program.args_of(o).tolist() for o in range(n_ops)]
    start, nout = program.op_out_start.tolist(), program.op_n_out.tolist()
    t_storage, t_alias = program.tensor_storage.tolist(), program.tensor_alias_arg.tolist()
    t_size, s_size = program.tensor_size_bytes.tolist(), program.storage_size_bytes.tolist()
    s_const = [const[program.tensor_op[r]] for r in program.storage_root.tolist()]
    s_tensors: list[int] = [0] * program.n_storages  # bitmask of each storage's tensors
    for t, s in enumerate(t_storage):
        s_tensors[s] |= 1 << t
    need = [sum(t_size[start[o]:start[o] + nout[o]]) for o in range(n_ops)]
    pins = 0
    for kind, t in zip(program.step_kind.tolist(), program.step_target.tolist()):
        if kind == PIN and not const[program.tensor_op[t]]:
            pins |= 1 << t
    arg_mask = [sum(1 << a for a in set(args[o])) for o in range(n_ops)]

    def memory(resident: int) -> int:
        return sum(s_size[s] for s in range(program.n_storages) if resident >> s & 1)

    first = (0, 0, 0)
    best = {first: 0}
    heap = [(0, first)]
    while heap:
        c, state = heapq.heappop(heap)
        if best.get(state, -1) < c:
            continue
        nxt, resident, defined = state
        if nxt == n_ops and defined & pins == pins:
            return c
        moves = []
        mem = memory(resident)
        for o in range(min(nxt + 1, n_ops)):
            if o < nxt and const[o]:
                continue
            if defined & arg_mask[o] != arg_mask[o] or mem + need[o] > budget_bytes:
                continue
            r, d = resident, defined
            for u in range(start[o], start[o] + nout[o]):
                if t_alias[u] < 0:
                    r |= 1 << t_storage[u]
                d |= 1 << u
            moves.append((c + (cost[o] if o < nxt else 0), (max(nxt, o + 1), r, d)))
        for s in range(program.n_storages):
            if resident >> s & 1 and not s_const[s]:
                moves.append((c, (nxt, resident & ~(1 << s), defined & ~s_tensors[s])))
        for c2, s2 in moves:
            if c2 < best.get(s2, c2 + 1):
                best[s2] = c2
                heapq.heappush(heap, (c2, s2))
    return None


def small_program(seed: int, n_ops: int, max_outputs: int = 2):
    """A small random program (dtrlab's synthetic traces, lowered in memory)."""
    from dtrlab.trace.synth import synthetic_trace

    instructions = synthetic_trace(seed, n_ops, max_args=2, max_outputs=max_outputs, size_bytes=(4, 64),
                                   time_ns=(1, 100))
    return _lowered(f"small-{seed}", instructions)


def _lowered(name: str, instructions: list):
    """The program of an instruction list, lowered in memory as its written file would be."""
    import hashlib

    from dtrlab.trace.lower import lower
    from dtrlab.trace.read import TraceSource, TraceText
    from dtrlab.trace.write import format_trace

    data = format_trace(instructions).encode()
    source = TraceSource(name, name, f"{name}.jsonl", None, lambda: data)
    return lower(TraceText(source, hashlib.sha256(data).hexdigest(), tuple(instructions), 0))


def rnn_program(seed: int, cells: int):
    """A small recurrent step (a chain of cells, then its backward in reverse), lowered in memory: per
    cell a pre-activation and a state from the last state and a weight; the backward reads them back,
    accumulating the weight's gradient. Sizes and times drawn from `seed`."""
    import random

    from dtrlab.trace.read import BACKWARD, Alias, Annotate, Call, Constant, Memory, Release

    rng = random.Random(seed)
    out: list = []

    def emit(make, *fields):
        out.append(make(len(out) + 1, *fields))

    def call(name, args, result, size):
        emit(Call, name, tuple(args), (result,), rng.randint(1, 100))
        emit(Memory, result, size)
        emit(Alias, result, -1)

    state, pre = 4 * rng.randint(2, 8), 4 * rng.randint(2, 16)
    emit(Constant, "w")
    emit(Memory, "w", 4 * rng.randint(1, 8))
    call("init", ["w"], "h0", state)
    for t in range(1, cells + 1):
        call("mm", [f"h{t - 1}", "w"], f"a{t}", pre)
        call("tanh", [f"a{t}"], f"h{t}", state)
    emit(Annotate, BACKWARD)
    call("loss_backward", [f"h{cells}"], f"g{cells}", state)
    for t in range(cells, 0, -1):
        call("tanh_backward", [f"g{t}", f"a{t}"], f"ga{t}", pre)
        call("mm_backward_w", [f"ga{t}", f"h{t - 1}"], f"gw{t}", state)
        call("mm_backward", [f"ga{t}", "w"], f"g{t - 1}", state)
        for name in (f"a{t}", f"ga{t}", f"g{t}", f"h{t}"):
            emit(Release, name)
    emit(Release, "g0")
    emit(Release, "h0")
    return _lowered(f"rnn-{seed}", out)

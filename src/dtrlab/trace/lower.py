"""Lowering a trace into a Program: operators, tensors, storages and the schedule as flat arrays.

Owns the meaning of each instruction (the reference parser's rules) and the structural checks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..errors import TraceError
from .read import (BACKWARD, INT64_MAX, KIND_NAMES, Alias, Annotate, Call, Constant, Copy, CopyFrom,
                   Memory, Mutate, Release, TraceText)

# Schedule step kinds. COMPUTE's target is an operator; the others' a tensor.
COMPUTE, GET, PIN, RELEASE = 0, 1, 2, 3

CONSTANT_OP = "constant"


@dataclass(frozen=True, eq=False)
class Program:
    """A lowered trace. Tensor ids are creation order; an operator's outputs are consecutive."""

    name: str
    sha256: str
    # operators
    op_cost_ns: np.ndarray  # int64
    op_out_start: np.ndarray  # int32: first output tensor
    op_n_out: np.ndarray  # int32
    op_arg_ptr: np.ndarray  # int32, n_ops + 1: CSR into op_args
    op_args: np.ndarray  # int32 tensor ids, in argument order (repeats kept)
    op_backward: np.ndarray  # bool
    op_constant: np.ndarray  # bool
    op_line: np.ndarray  # int32: source line of the instruction
    op_names: tuple[str, ...]
    # tensors
    tensor_op: np.ndarray  # int32
    tensor_size_bytes: np.ndarray  # int64: the operator's output size (0 for an alias)
    tensor_alias_arg: np.ndarray  # int32: index of the aliased argument, or -1
    tensor_storage: np.ndarray  # int32
    tensor_names: tuple[str, ...]
    # storages (a storage's id is the order of its root tensor)
    storage_size_bytes: np.ndarray  # int64
    storage_root: np.ndarray  # int32: root tensor id
    # schedule
    step_kind: np.ndarray  # int8: COMPUTE, GET, PIN, RELEASE
    step_target: np.ndarray  # int32
    meta: dict = field(default_factory=dict, compare=False)

    @property
    def n_ops(self) -> int:
        return len(self.op_cost_ns)

    @property
    def n_tensors(self) -> int:
        return len(self.tensor_op)

    @property
    def n_storages(self) -> int:
        return len(self.storage_size_bytes)

    @property
    def compute_ns(self) -> int:
        return int(self.op_cost_ns.sum())

    @property
    def storage_constant(self) -> np.ndarray:
        """Per storage: whether a constant makes it (resident from its place to the end, counted)."""
        return self.op_constant[self.tensor_op[self.storage_root]]

    @property
    def constant_bytes(self) -> int:
        """The bytes of every storage a constant makes: what no schedule can free."""
        return int(self.storage_size_bytes[self.storage_constant].sum())

    def args_of(self, op: int) -> np.ndarray:
        return self.op_args[self.op_arg_ptr[op]:self.op_arg_ptr[op + 1]]

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.__dict__.items() if isinstance(v, np.ndarray)}


class _Builder:
    """Accumulates the program in Python lists; `finish` freezes it into arrays."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.op_cost, self.op_out_start, self.op_n_out = [], [], []
        self.op_arg_ptr, self.op_args = [0], []
        self.op_backward, self.op_constant, self.op_line, self.op_names = [], [], [], []
        self.t_op, self.t_size, self.t_alias, self.t_storage, self.t_names = [], [], [], [], []
        self.s_size, self.s_root = [], []
        self.steps: list[tuple[int, int]] = []
        self.total_cost = self.total_size = 0

    def _check_totals(self, line: int) -> None:
        # numpy sums of int64 arrays wrap around silently; a total that cannot fit is corrupt input.
        if self.total_cost > INT64_MAX:
            raise TraceError(self.path, line, "total operator time does not fit in 64 bits")
        if self.total_size > INT64_MAX:
            raise TraceError(self.path, line, "total storage size does not fit in 64 bits")

    def add_op(self, name: str, cost: int, args: list[int], sizes: list[int], aliases: list[int],
               out_names: list[str], backward: bool, line: int, constant: bool = False) -> list[int]:
        op = len(self.op_cost)
        self.total_cost += cost
        self.total_size += sum(size for size, alias in zip(sizes, aliases) if alias < 0)
        self._check_totals(line)
        self.op_cost.append(cost)
        self.op_out_start.append(len(self.t_op))
        self.op_n_out.append(len(sizes))
        self.op_args.extend(args)
        self.op_arg_ptr.append(len(self.op_args))
        self.op_backward.append(backward)
        self.op_constant.append(constant)
        self.op_line.append(line)
        self.op_names.append(name)
        outs = []
        for size, alias, out_name in zip(sizes, aliases, out_names):
            t = len(self.t_op)
            self.t_op.append(op)
            self.t_alias.append(alias)
            self.t_names.append(out_name)
            if alias >= 0:
                self.t_size.append(0)
                self.t_storage.append(self.t_storage[args[alias]])
            else:
                self.t_size.append(size)
                self.t_storage.append(len(self.s_size))
                self.s_size.append(size)
                self.s_root.append(t)
            outs.append(t)
        self.steps.append((COMPUTE, op))
        return outs

    def finish(self, name: str, sha256: str) -> Program:
        i32, i64 = np.int32, np.int64
        kinds, targets = zip(*self.steps) if self.steps else ((), ())
        return Program(
            name=name, sha256=sha256,
            op_cost_ns=np.array(self.op_cost, i64), op_out_start=np.array(self.op_out_start, i32),
            op_n_out=np.array(self.op_n_out, i32), op_arg_ptr=np.array(self.op_arg_ptr, i32),
            op_args=np.array(self.op_args, i32), op_backward=np.array(self.op_backward, bool),
            op_constant=np.array(self.op_constant, bool), op_line=np.array(self.op_line, i32),
            op_names=tuple(self.op_names),
            tensor_op=np.array(self.t_op, i32), tensor_size_bytes=np.array(self.t_size, i64),
            tensor_alias_arg=np.array(self.t_alias, i32), tensor_storage=np.array(self.t_storage, i32),
            tensor_names=tuple(self.t_names),
            storage_size_bytes=np.array(self.s_size, i64), storage_root=np.array(self.s_root, i32),
            step_kind=np.array(kinds, np.int8), step_target=np.array(targets, i32),
        )


class Lowering:
    """The meaning of each instruction, one at a time, into a growing _Builder.

    `lower()` feeds it a whole trace; the live runtime (live/session.py) feeds it a step's
    instructions as the step runs, and the engine follows `builder.steps` as they grow.

    A name holds one reference from its definition to its RELEASE; after that it names nothing,
    so a use of it is an error (naming the RELEASE's line) and a second RELEASE is a RELEASE of an
    unknown name. The reference keeps a released name bound and would drop a second reference,
    freeing a tensor that another name still holds; no public trace does either. A tensor's count
    of references is therefore the number of live names bound to it, never below 0 while used.
    """

    def __init__(self, path: str, strict: bool = False) -> None:
        self.path = path
        self.strict = strict  # a RELEASE of an unknown or already released name is an error
        self.builder = _Builder(path)
        self.bound: dict[str, int] = {}  # name -> tensor id; rebinding keeps the name's first position
        self.released: dict[str, int] = {}  # name -> line of its RELEASE (the name stays in `bound`)
        self.refs: list[int] = []  # per tensor: names and copies still holding it
        self.backward = False

    def _err(self, line: int, reason: str) -> TraceError:
        return TraceError(self.path, line, reason)

    def lookup(self, name: str, line: int) -> int:
        if name in self.released:
            raise self._err(line, f"tensor {name!r} is used after its RELEASE (line {self.released[name]})")
        try:
            return self.bound[name]
        except KeyError:
            raise self._err(line, f"reference to undefined tensor {name!r}") from None

    def _check_new(self, name: str, line: int) -> None:
        # The reference refuses to rebind a name too: the pinned outputs follow first bindings.
        if name in self.released:
            raise self._err(line, f"tensor {name!r} is defined again after its RELEASE (line {self.released[name]})")
        if name in self.bound:
            raise self._err(line, f"tensor {name!r} is defined twice")

    def call(self, x: Call, sizes: list[int], aliases: list[int], args: list[int] | None = None) -> list[int]:
        """A CALL with its results' MEMORY sizes and ALIAS indices (checked by the caller); args:
        its arguments' tensors when the caller has looked them up already."""
        self.backward = self.backward or "backward" in x.name
        if args is None:
            args = [self.lookup(a, x.line) for a in x.args]
        for result in x.results:
            self._check_new(result, x.line)
        if len(set(x.results)) != len(x.results):
            raise self._err(x.line, "CALL names the same result twice")
        outs = self.builder.add_op(x.name, x.time_ns, args, sizes, aliases, list(x.results), self.backward, x.line)
        for result, t in zip(x.results, outs):
            self.bound[result] = t
            self.refs.append(1)
        return outs

    def constant(self, x: Constant, size_bytes: int) -> int:
        self._check_new(x.name, x.line)
        (t,) = self.builder.add_op(CONSTANT_OP, 0, [], [size_bytes], [-1], [x.name], self.backward, x.line,
                                   constant=True)
        self.builder.steps.append((PIN, t))
        self.bound[x.name] = t
        self.refs.append(1)
        return t

    def copy(self, x: Copy) -> None:
        src = self.lookup(x.src, x.line)
        self._check_new(x.dst, x.line)
        self.bound[x.dst] = src
        self.refs[src] += 1
        self.builder.steps.append((GET, src))

    def release(self, x: Release) -> None:
        t = self.bound.get(x.name)
        if t is None or x.name in self.released:
            if self.strict:
                raise self._err(x.line, f"RELEASE of undefined tensor {x.name!r}" if t is None else
                                f"second RELEASE of {x.name!r} (first on line {self.released[x.name]})")
            return
        self.refs[t] -= 1
        self.released[x.name] = x.line
        self.builder.steps.append((RELEASE, t))

    def mutate(self, x: Mutate) -> list[int]:
        self.backward = self.backward or "backward" in x.name
        if len(set(x.mutate)) != len(x.mutate):
            raise self._err(x.line, "MUTATE names the same argument twice")
        b = self.builder
        args = [self.lookup(a, x.line) for a in x.args]
        sizes = [int(b.s_size[b.t_storage[args[m]]]) for m in x.mutate]
        names = [b.t_names[args[m]] + "$" for m in x.mutate]
        outs = b.add_op(x.name, x.time_ns, args, sizes, [-1] * len(sizes), names, self.backward, x.line)
        for m, t in zip(x.mutate, outs):
            old = self.bound[x.args[m]]
            self.bound[x.args[m]] = t
            self.refs.append(1)
            self.refs[old] -= 1
            b.steps.append((RELEASE, old))
        return outs

    def copy_from(self, x: CopyFrom) -> None:
        old = self.lookup(x.dst, x.line)
        src = self.lookup(x.src, x.line)
        if old == src:  # `COPY_FROM x <- x`, or a name already holding SRC's tensor: nothing moves
            return
        self.bound[x.dst] = src
        self.refs[old] -= 1
        self.refs[src] += 1
        self.builder.steps.append((RELEASE, old))
        self.builder.steps.append((GET, src))

    def annotate(self, x: Annotate) -> None:
        if x.annotation == BACKWARD:
            self.backward = True

    def pin_outputs(self) -> None:
        """Outputs still referenced at the end are pinned, in the order their names were first bound."""
        for t in self.bound.values():
            if self.refs[t] > 0:
                self.builder.steps.append((PIN, t))


def lower(text: TraceText, strict: bool = False) -> Program:
    """The program the reference simulator builds from these instructions (Lowering's rules).

    strict: a RELEASE of an unknown or already released name is an error (else it is ignored)."""
    path = text.source.path
    ins = text.instructions
    lowering = Lowering(path, strict)
    n = len(ins)
    i = 0
    while i < n:
        x = ins[i]
        i += 1
        if isinstance(x, Call):
            args = [lowering.lookup(a, x.line) for a in x.args]
            sizes, aliases = [], []
            for result in x.results:
                mem = ins[i] if i < n else None
                ali = ins[i + 1] if i + 1 < n else None
                if not isinstance(mem, Memory) or mem.name != result:
                    where = mem.line if mem is not None else x.line
                    raise TraceError(path, where, f"CALL {x.name} (line {x.line}) needs MEMORY for {result!r} here")
                if not isinstance(ali, Alias) or ali.name != result:
                    where = ali.line if ali is not None else mem.line
                    raise TraceError(path, where, f"CALL {x.name} (line {x.line}) needs ALIAS for {result!r} here")
                if not -1 <= ali.alias < len(x.args):
                    raise TraceError(path, ali.line, f"ALIAS {ali.alias} is out of range for {len(x.args)} arguments")
                sizes.append(mem.size_bytes)
                aliases.append(ali.alias)
                i += 2
            lowering.call(x, sizes, aliases, args)
        elif isinstance(x, Constant):
            mem = ins[i] if i < n else None
            if not isinstance(mem, Memory) or mem.name != x.name:
                raise TraceError(path, mem.line if mem is not None else x.line,
                                 f"CONSTANT {x.name!r} (line {x.line}) needs its MEMORY line here")
            i += 1
            lowering.constant(x, mem.size_bytes)
        elif isinstance(x, Copy):
            lowering.copy(x)
        elif isinstance(x, Release):
            lowering.release(x)
        elif isinstance(x, Mutate):
            lowering.mutate(x)
        elif isinstance(x, CopyFrom):
            lowering.copy_from(x)
        elif isinstance(x, Annotate):
            lowering.annotate(x)
        elif isinstance(x, (Memory, Alias)):
            kind = "MEMORY" if isinstance(x, Memory) else "ALIAS"
            raise TraceError(path, x.line, f"{kind} for {x.name!r} does not follow a CALL or CONSTANT that names it")
        else:  # pragma: no cover - read.parse_line only makes the kinds above
            raise AssertionError(x)

    b = lowering.builder
    if not b.op_cost:
        raise TraceError(path, ins[-1].line, "empty trace: no operators")
    lowering.pin_outputs()
    program = b.finish(text.source.name, text.sha256)
    # What the arrays no longer show, kept for trace statistics (and in the program cache).
    counts = Counter(map(type, ins))
    program.meta["instructions"] = {KIND_NAMES[k]: counts.get(k, 0) for k in KIND_NAMES}
    program.meta["skipped_lines"] = text.skipped_lines
    program.meta["annotations"] = sorted({x.annotation for x in ins if isinstance(x, Annotate)})
    return program

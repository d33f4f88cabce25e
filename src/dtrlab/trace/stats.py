"""Per-trace statistics: counts of instructions, operators, tensors and schedule steps, and sizes.

Owns the definitions behind `dtrlab trace info`; computed from a lowered Program alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .lower import COMPUTE, GET, PIN, RELEASE, Program
from .synth import SYNTHETIC


@dataclass(frozen=True)
class TraceStats:
    """What one lowered trace holds. Counts follow the reference parser's conventions:

    operators: every operator, constants included (each constant is an operator of cost 0);
        forward_operators + backward_operators == operators; an operator is backward from the
        first CALL/MUTATE whose name contains "backward" (or an ANNOTATE BACKWARD) on.
    tensors: every tensor, alias tensors and MUTATE's new versions included.
    storages: distinct buffers (an alias shares its argument's storage).
    aliases: tensors that alias an argument (they take 0 bytes).
    constant_bytes: bytes of the constants' storages.
    compute_ns: the sum of all operator times (the unconstrained compute time).
    schedule_steps: compute + get + pin + release steps of the lowered schedule.
    largest_op_bytes: the most memory one operator needs resident at once: the bytes of its
        outputs' new storages plus the storages of its non-constant inputs, each storage
        counted once (an input used twice, or an output aliasing an input, adds nothing).
        Constant inputs are left out because they stay pinned whatever the budget.
    instructions: instruction counts by kind after the START skip (None when unknown, e.g.
        for a Program built by hand); skipped_lines: lines skipped up to START.
    synthetic: the trace carries the ANNOTATE SYNTHETIC label of trace.synth (not measured data).
    """

    name: str
    sha256: str
    operators: int
    forward_operators: int
    backward_operators: int
    constants: int
    tensors: int
    storages: int
    aliases: int
    storage_bytes: int
    constant_bytes: int
    compute_ns: int
    schedule_steps: int
    compute_steps: int
    get_steps: int
    pin_steps: int
    release_steps: int
    largest_op_bytes: int
    largest_op: str  # the operator's name
    largest_op_line: int  # its line in the source
    instructions: dict[str, int] | None
    skipped_lines: int | None
    synthetic: bool

    def to_dict(self) -> dict:
        return asdict(self)


def op_memory_bytes(program: Program) -> np.ndarray:
    """Per operator: new output storage bytes plus distinct non-constant input storage bytes (int64)."""
    n_ops = program.n_ops
    out_bytes = np.zeros(n_ops, np.int64)
    # tensor_size_bytes is 0 for an alias, so this sums exactly the new storages.
    np.add.at(out_bytes, program.tensor_op, program.tensor_size_bytes)
    arg_op = np.repeat(np.arange(n_ops, dtype=np.int64), np.diff(program.op_arg_ptr))
    arg_storage = program.tensor_storage[program.op_args].astype(np.int64)
    producer = program.tensor_op[program.storage_root[arg_storage]]
    keep = ~program.op_constant[producer]
    # One (operator, storage) pair per distinct input storage.
    pairs = np.unique(arg_op[keep] * program.n_storages + arg_storage[keep])
    in_bytes = np.zeros(n_ops, np.int64)
    np.add.at(in_bytes, pairs // max(program.n_storages, 1),
              program.storage_size_bytes[pairs % max(program.n_storages, 1)])
    return out_bytes + in_bytes


def trace_stats(program: Program) -> TraceStats:
    """The statistics of one lowered program (see TraceStats for the definitions)."""
    steps = np.bincount(program.step_kind.astype(np.int64), minlength=4)
    need = op_memory_bytes(program)
    top = int(np.argmax(need)) if len(need) else 0
    const_storages = program.tensor_storage[program.op_out_start[program.op_constant]]
    backward = int(program.op_backward.sum())
    return TraceStats(
        name=program.name,
        sha256=program.sha256,
        operators=program.n_ops,
        forward_operators=program.n_ops - backward,
        backward_operators=backward,
        constants=int(program.op_constant.sum()),
        tensors=program.n_tensors,
        storages=program.n_storages,
        aliases=int((program.tensor_alias_arg >= 0).sum()),
        storage_bytes=int(program.storage_size_bytes.sum()),
        constant_bytes=int(program.storage_size_bytes[const_storages].sum()),
        compute_ns=program.compute_ns,
        schedule_steps=len(program.step_kind),
        compute_steps=int(steps[COMPUTE]),
        get_steps=int(steps[GET]),
        pin_steps=int(steps[PIN]),
        release_steps=int(steps[RELEASE]),
        largest_op_bytes=int(need[top]) if len(need) else 0,
        largest_op=program.op_names[top] if len(need) else "",
        largest_op_line=int(program.op_line[top]) if len(need) else 0,
        instructions=dict(program.meta["instructions"]) if program.meta.get("instructions") else None,
        skipped_lines=program.meta.get("skipped_lines"),
        synthetic=SYNTHETIC in (program.meta.get("annotations") or ()),
    )


__all__ = ["TraceStats", "op_memory_bytes", "trace_stats"]

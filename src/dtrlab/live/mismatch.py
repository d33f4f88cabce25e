"""A live step's first difference from its plan, said in one line: the user's line of code that
issued the operator, what differs, and its likely cause; the plan's instructions in the details.

Owns PlanMismatch and its wording; the session (session.py) finds the difference.
"""

from __future__ import annotations

from ..errors import UsageError
from ..trace.read import Alias, Call, Constant, Instruction, Memory, Mutate
from .where import user_frame

LINE_CHARS = 199  # the one line, the CLI's prefix included, stays under 200 characters
PREFIX = "dtrlab: "
DEBUG_HINT = " (more: dtrlab --debug run ...)"
# Kernels PyTorch picks by looking at its tensors (their types, devices, dtypes): one run taking
# them and another not is a choice made differently, not another step.
_PATH_CHOSEN = ("_foreach_", "_fused_")


class PlanMismatch(UsageError):
    """The step made an instruction its plan does not have there (it is not the planned step).
    str(): one line; `details`: the plan's instruction and the step's in full, and the user's frame."""

    def __init__(self, line: str, details: str = "") -> None:
        super().__init__(line)
        self.details = details or line


def op_name(name: str) -> str:
    """`aten.linalg_vector_norm.default` -> `linalg_vector_norm`; `aten.add.Tensor` -> `add.Tensor`."""
    if name.startswith("aten."):
        name = name[5:]
    return name[:-8] if name.endswith(".default") else name


def brief(x: Instruction | str) -> str:
    """A few words for an instruction (or a phrase, as is)."""
    if isinstance(x, str):
        return x
    if isinstance(x, Mutate):
        return f"{op_name(x.name)} writing in place"
    if isinstance(x, Call):
        return op_name(x.name)
    if isinstance(x, Memory):
        return f"{x.size_bytes:,} bytes"
    if isinstance(x, Alias):
        return "a result on a new storage" if x.alias < 0 else f"a view of argument {x.alias}"
    if isinstance(x, Constant):
        return "a tensor made outside the step"
    return type(x).__name__


def likely_cause(here: Instruction | str, there: Instruction | None) -> str:
    """Why the step and its plan most likely differ here."""
    names = [x.name for x in (here, there) if isinstance(x, (Call, Mutate))]
    if any(op_name(n).startswith(_PATH_CHOSEN) for n in names):
        return "PyTorch chose a foreach or fused kernel in one run only"
    if there is None:
        return "the step ran more operators than its capture"
    if isinstance(here, (Memory, Alias)) or isinstance(there, (Memory, Alias)):
        return "a result of another size or aliasing: the step made at other sizes?"
    return "is the plan a capture of this step? (one whose operators depend on its data differs)"


def plan_mismatch(index: int | None, here: Instruction | str, plan: tuple[Instruction, ...],
                  likely: str = "", outer=None) -> PlanMismatch:
    """The first difference: at the plan's instruction `index` (None: after its last). The line
    names the user's line of code running now (where.user_frame, up to the frame `outer`)."""
    there = plan[index] if index is not None else None
    likely = likely or likely_cause(here, there)
    where = user_frame(outer)
    if index is None:
        details = (f"the step differs from its plan after the plan's last instruction ({len(plan)}): "
                   f"{here} here, where the plan has ended ({likely})")
        differs = f"{brief(here)} here, after the plan's end"
    else:
        details = (f"the step differs from its plan at the plan's instruction {index + 1}: {here} here, "
                   f"{there} in the plan ({likely})")
        differs = f"{brief(here)} here, {brief(there)} in the plan"
    at = ""
    if where is not None:
        at = f" at {where.short()}"
        details += f"; the step was at {where.long()}" + (f" ({where.phase()})" if where.phase() else "")
    head = "the step differs from its plan"
    short_at = f" at {where.short().split(' (')[0]}" if where is not None else ""
    for line in (f"{head}{at}: {differs} ({likely}){DEBUG_HINT}", f"{head}{short_at}: {differs} ({likely}){DEBUG_HINT}",
                 f"{head}{short_at}: {differs} ({likely})", f"{head}{short_at}: {differs}{DEBUG_HINT}"):
        if len(PREFIX + line) <= LINE_CHARS:
            return PlanMismatch(line, details)
    return PlanMismatch(line[:LINE_CHARS - len(PREFIX)], details)

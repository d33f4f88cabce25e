"""Why a run ran out of memory: the pending rematerialization stack and what holds each resident byte.

Owns OomReport, explain_oom (run with the OOM instrument on) and format_oom (readable text).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..formats import bytes_text
from ..sim.instruments import LOCKED, PINNED_CONSTANT, PINNED_OUTPUT, Instruments, OomSnapshot
from ..sim.policies import DEFAULT_POLICY
from ..sim.result import OOM
from ..sim.runtimes import DEFAULT_RUNTIME
from ..sim.simulate import simulate
from ..trace.lower import Program


@dataclass(frozen=True)
class PendingFrame:
    """One computation waiting on the stack: depth 0 is the one the schedule asked for."""

    depth: int
    op_name: str
    op_line: int  # the trace line of the operator's instruction
    tensor_name: str
    output_bytes: int
    remat: bool


@dataclass(frozen=True)
class Holder:
    """A resident storage and why the policy could not evict it."""

    storage: int
    name: str  # its root tensor's name
    size_bytes: int
    reason: str  # pinned constant, pinned output, locked, outside pool, evictable
    frame: int  # depth of the innermost pending frame reading it, -1 if none

    @property
    def why(self) -> str:
        if self.reason == LOCKED:
            return f"locked by frame {self.frame}" if self.frame >= 0 else "locked"
        return self.reason


@dataclass(frozen=True)
class OomReport:
    """An OOM explained. frontier_bytes: resident bytes the policy may not touch (pinned + locked)."""

    trace: str
    policy: str
    runtime: str
    budget_bytes: int
    memory_bytes: int
    need_bytes: int
    clock_ns: int
    pool_empty: bool
    frames: tuple[PendingFrame, ...]
    holders: tuple[Holder, ...]  # largest first

    def bytes_by_reason(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for h in self.holders:
            out[h.reason] = out.get(h.reason, 0) + h.size_bytes
        return out

    @property
    def pinned_bytes(self) -> int:
        return sum(h.size_bytes for h in self.holders if h.reason in (PINNED_CONSTANT, PINNED_OUTPUT))

    @property
    def locked_bytes(self) -> int:
        return sum(h.size_bytes for h in self.holders if h.reason == LOCKED)

    @property
    def frontier_bytes(self) -> int:
        return self.pinned_bytes + self.locked_bytes

    @property
    def shortfall_bytes(self) -> int:
        """How far the frontier plus the next compute's need goes past the budget."""
        return self.frontier_bytes + self.need_bytes - self.budget_bytes

    @property
    def frontier_exceeds_budget(self) -> bool:
        """The study's claim: nothing evictable is left and what stays pinned or locked, plus the
        next compute, does not fit."""
        return self.pool_empty and self.shortfall_bytes > 0

    def to_dict(self) -> dict:
        return {"trace": self.trace, "policy": self.policy, "runtime": self.runtime,
                "budget_bytes": self.budget_bytes, "memory_bytes": self.memory_bytes,
                "need_bytes": self.need_bytes, "clock_ns": self.clock_ns, "pool_empty": self.pool_empty,
                "pinned_bytes": self.pinned_bytes, "locked_bytes": self.locked_bytes,
                "frontier_bytes": self.frontier_bytes, "shortfall_bytes": self.shortfall_bytes,
                "frontier_exceeds_budget": self.frontier_exceeds_budget,
                "bytes_by_reason": self.bytes_by_reason(), "depth": len(self.frames),
                "frames": [f.__dict__ for f in self.frames],
                "holders": [dict(h.__dict__, why=h.why) for h in self.holders]}


def frontier_text(report: OomReport) -> str:
    """An OOM's frontier in one line (the report's tables and claims say it so): the pending
    frames, and the bytes held against the budget."""
    return (f"{len(report.frames)} frames ({sum(f.remat for f in report.frames)} remats), "
            f"locked {bytes_text(report.locked_bytes, scaled=False)}, "
            f"pinned {bytes_text(report.pinned_bytes, scaled=False)}, "
            f"need {bytes_text(report.need_bytes, scaled=False)}, budget {bytes_text(report.budget_bytes, scaled=False)}")


def report_of(program: Program, snap: OomSnapshot, policy: str, runtime: str) -> OomReport:
    """Put names on an OOM snapshot."""
    names, tensor_names = program.op_names, program.tensor_names
    frames = tuple(PendingFrame(f.depth, names[f.op], int(program.op_line[f.op]), tensor_names[f.tensor],
                                f.need_bytes, f.remat) for f in snap.frames)
    roots = program.storage_root
    holders = tuple(sorted((Holder(r.storage, tensor_names[int(roots[r.storage])], r.size_bytes, r.reason, r.frame)
                            for r in snap.residents), key=lambda h: (-h.size_bytes, h.storage)))
    return OomReport(program.name, policy, runtime, snap.budget_bytes, snap.memory_bytes, snap.need_bytes,
                     snap.clock_ns, snap.pool_size == 0, frames, holders)


def explain_oom(program: Program, budget_bytes: int, policy: str = DEFAULT_POLICY,
                runtime: str = DEFAULT_RUNTIME, engine: str = "auto", seed: int = 0) -> OomReport:
    """Run once with the OOM instrument (on `engine`, simulate's choice) and explain where it stopped."""
    res = simulate(program, budget_bytes, policy, runtime, engine=engine, seed=seed,
                   instruments=Instruments(per_storage=False, oom_snapshot=True))
    if res.outcome != OOM:
        raise UsageError(f"{program.name} does not run out of memory under {budget_bytes} bytes "
                         f"with {res.policy} / {res.runtime} (outcome {res.outcome})")
    return report_of(program, res.observations.oom, res.policy, res.runtime)


def format_oom(report: OomReport, frames_shown: int = 12, holders_shown: int = 15) -> str:
    """The report as text: the verdict, the byte account, the stack, the largest holders."""
    r = report
    lines = [f"{r.trace}: {r.policy} / {r.runtime} runs out of memory at clock {r.clock_ns:,} ns",
             f"  budget            {bytes_text(r.budget_bytes)}",
             f"  resident          {bytes_text(r.memory_bytes)}",
             f"  next compute      {bytes_text(r.need_bytes)} ({r.frames[-1].op_name if r.frames else '?'})"]
    by_reason = r.bytes_by_reason()
    for reason in sorted(by_reason, key=lambda k: -by_reason[k]):
        count = sum(1 for h in r.holders if h.reason == reason)
        lines.append(f"    {reason:<16} {bytes_text(by_reason[reason])} in {count} storages")
    lines.append(f"  evictable pool    {'empty' if r.pool_empty else 'NOT empty'}")
    verdict = ("pinned + locked + need exceed the budget by " + bytes_text(r.shortfall_bytes)
               if r.frontier_exceeds_budget else "the frontier alone does not explain the OOM")
    lines.append(f"  verdict           {verdict}")
    depth = len(r.frames)
    lines.append(f"pending computations: {depth} deep ({sum(f.remat for f in r.frames)} rematerializations)")
    shown = list(range(depth)) if depth <= frames_shown else (
        list(range(frames_shown // 3)) + [-1] + list(range(depth - (frames_shown - frames_shown // 3), depth)))
    for k in shown:
        if k < 0:
            lines.append("    ...")
            continue
        f = r.frames[k]
        lines.append(f"  #{f.depth:<4} {'remat ' if f.remat else 'compute'} {f.op_name} -> {f.tensor_name} "
                     f"({f.output_bytes:,} B, line {f.op_line})")
    lines.append(f"largest residents ({len(r.holders)} in all):")
    for h in r.holders[:holders_shown]:
        lines.append(f"  {h.size_bytes:>14,} B  {h.name:<12} {h.why}")
    return "\n".join(lines)

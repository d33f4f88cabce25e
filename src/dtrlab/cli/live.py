"""The `dtrlab run` command, added to the CLI by `register(app)`: a real PyTorch step under a budget.

A thin layer over live/runs.py: it checks the options before torch is imported (the CLI's start-up
never imports it) and prints a table, or one JSON object.
"""

from __future__ import annotations

from typing import List, Optional

import typer

from ..capture.factory import make_step
from .options import BATCH_OPT, DEVICE_OPT, MODEL_ARG, SCRIPT_OPT, SIZE_OPT
from ..defaults import DEFAULT_POLICY, LIVE_CLOCKS
from ..errors import UsageError
from ..formats import bytes_text, count_text, ns_text, overhead_text
from .options import (BYTES_OPT, ENGINE_OPT, JSON_OPT, POLICIES_FILE_OPT, POLICY_OPT, RATIO_OPT, EngineName,
                       steps_opt)
from ..output import clean, console, print_json



def run(
    model: Optional[str] = MODEL_ARG,
    script: Optional[str] = SCRIPT_OPT,
    batch: Optional[int] = BATCH_OPT,
    size: Optional[List[str]] = SIZE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    policy: Optional[str] = POLICY_OPT,
    policies_file: Optional[str] = POLICIES_FILE_OPT,
    clock: str = typer.Option(LIVE_CLOCKS[0], "--clock",
                              help="logical: each operator costs what the plan says (deterministic); "
                                   "measured: each run its elapsed time."),
    plan: Optional[str] = typer.Option(None, "--plan", metavar="SOURCE",
                                       help="A trace of this same step to follow (a file, folder or zip); "
                                            "default: capture the step first."),
    trace: Optional[str] = typer.Option(None, "--trace", "-t", help="The trace in --plan's SOURCE."),
    steps: int = steps_opt(1, "Run K steps, a fresh session each, and report each."),
    device: str = DEVICE_OPT,
    compare_sim: bool = typer.Option(False, "--compare-sim",
                                     help="Also simulate the plan, side by side, and say whether the "
                                          "decisions are the same."),
    seed: int = typer.Option(0, "--seed", help="Seed of torch (the model's weights, dropout) and of the random policy."),
    threads: Optional[int] = typer.Option(None, "--threads", metavar="N",
                                          help="torch's CPU threads for the plain and the live steps alike "
                                               "(default: torch's own). The measured clock and the wall times "
                                               "depend on it."),
    engine: EngineName = ENGINE_OPT,
    check: bool = typer.Option(False, "--check",
                               help="After each live step, run a plain step from the same state and compare "
                                    "gradients, parameters, buffers and optimizer state bitwise."),
    staged: bool = typer.Option(False, "--staged",
                                help="Stage the step instead (docs/staged.md): trace it once, simulate, compile "
                                     "the schedule into its graph, and time it beside the plain step, the "
                                     "staging time apart (as dtrlab stage does)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Run a real training step under a memory budget, evicting and rematerializing (DTR, live)."""
    from ..sim.policyfile import policy_given
    from ..sim.simulate import check_budget_args

    check_budget_args(ratio, budget_bytes)
    if staged:
        live_only = {"--plan": plan is not None, "--trace": trace is not None, "--compare-sim": compare_sim,
                     "--check": check, "--policies-file": policies_file is not None,
                     "--clock measured": clock != LIVE_CLOCKS[0], "--engine": engine != EngineName.auto}
        given = [name for name, on in live_only.items() if on]
        if given:
            raise UsageError(f"{', '.join(given)} belong to the live runtime, not --staged (which compares its "
                             "state with a plain step's always)")
        from .staged import run_staged

        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        run_staged(model, script, batch, device, size, ratio, budget_bytes, policy or DEFAULT_POLICY, "none",
                   steps, seed, as_json)
        return
    if clock not in LIVE_CLOCKS:
        raise UsageError(f"--clock must be {' or '.join(LIVE_CLOCKS)}, got {clock!r}")
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    if threads is not None and threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}")
    policy = policy_given(policy, policies_file)
    plan_text = None
    if plan is not None:
        from ..trace import read_one

        plan_text = read_one(plan, trace)
    elif trace is not None:
        raise UsageError("--trace picks a trace of --plan's source; give --plan")
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    step, label, _ = make_step(model, script, batch, device, size)
    from ..live.runs import run_live

    report = run_live(step, label, ratio=ratio, budget_bytes=budget_bytes, policy=policy, clock=clock,
                      steps=steps, device=device, seed=seed, compare_sim=compare_sim, plan=plan_text,
                      engine=engine.value, check=check)
    head = {"model": label, "device": device, "policy": policy, "clock": clock, "ratio": ratio,
            "engine": report.steps[0].engine, "threads": torch.get_num_threads(),
            "plan": plan or "captured", "budget_bytes": report.budget_bytes,
            "plan_peak_bytes": report.plan_peak_bytes, "plain_wall_s": report.plain_wall_s, "check": check}
    if as_json:
        out = {**head, "steps": [dict(r.to_dict(), wall_ratio=r.wall_s / report.plain_wall_s)
                                 for r in report.steps]}
        if report.sim is not None:
            out["simulated"] = report.sim.to_dict()
            # compared on the logical clock only: measured, each run costs its own time
            out["same_decisions"] = [_verdict(r, report.sim, clock)[0] for r in report.steps]
        print_json(clean(out))
        return
    _print_table(head, report)


def _verdict(run, sim, clock: str) -> tuple[bool | None, str]:
    """(the same decisions?, a line saying what was compared): None on the measured clock."""
    from ..live.runs import DECISION_FIGURES, decision_differences

    if clock != LIVE_CLOCKS[0]:
        return None, (f"decisions are not compared on the {clock} clock: each run costs its own time, "
                      "the simulation the plan's")
    compared = "the outcome, every eviction in order, the rematerializations, the eager evictions, the peak " \
               "and the final clock"
    if run.outcome != "ok":
        compared += " (all until the step stopped)"
    differ = decision_differences(run, sim)
    if not differ:
        return True, f"the same decisions as the simulation: {compared}"
    names = dict(zip(DECISION_FIGURES, ("outcome", "evictions", "rematerializations", "eager evictions",
                                        "peak", "final clock")))
    return False, (f"decisions differ from the simulation's in: {', '.join(names[f] for f in differ)} "
                   "(docs/live.md, \"Decision parity\")")


def _check_cell(r) -> str:
    if r.check is None:
        return "not run (out of memory)"
    if r.check["equal"]:
        return f"equal ({r.check['compared']:,} values)"
    return f"{len(r.check['differing']):,} of {r.check['compared']:,} differ"


def _print_table(head: dict, report) -> None:
    from rich.table import Table


    ratio = f", ratio {head['ratio']:g} of the plan's peak" if head["ratio"] is not None else ""
    table = Table(title=f"{head['model']} on {head['device']}: {head['policy']}, {head['clock']} clock, "
                        f"budget {bytes_text(head['budget_bytes'])}{ratio} ({head['engine']} engine)",
                  title_justify="left")
    table.add_column("")
    live = report.steps
    for r in live:
        table.add_column("live" if len(live) == 1 else f"live step {r.step}", justify="right")
    sim = report.sim
    if sim is not None:
        table.add_column("simulated", justify="right")

    rows = [
        ("outcome", [r.outcome for r in live], sim and sim.outcome),
        ("budget", [bytes_text(r.budget_bytes) for r in live], sim and bytes_text(sim.budget_bytes)),
        ("peak resident", [bytes_text(r.peak_bytes) for r in live], sim and bytes_text(sim.peak_bytes)),
        ("evictions (policy)", [count_text(r.evictions) for r in live], sim and count_text(sim.evictions)),
        ("evictions (eager)", [count_text(r.eager_evictions) for r in live], sim and count_text(sim.eager_evictions)),
        ("rematerializations", [count_text(r.remats) for r in live], sim and count_text(sim.remats)),
        ("clock", [ns_text(r.clock_ns) for r in live], sim and ns_text(sim.clock_ns)),
        ("recompute", [ns_text(r.remat_ns) for r in live], sim and ns_text(sim.remat_ns)),
        ("overhead (clock / compute)", [overhead_text(r.overhead, 6) for r in live], sim and overhead_text(sim.overhead, 6)),
        ("wall time", [f"{r.wall_s * 1e3:,.1f} ms" for r in live], sim and ""),
        ("  against a plain step", [f"{r.wall_s / report.plain_wall_s:.2f}x" for r in live], sim and ""),
    ]
    if any(r.cuda_peak_bytes is not None for r in live):
        rows.append(("CUDA max allocated", [bytes_text(r.cuda_peak_bytes) for r in live], sim and ""))
    if any(r.early_bytes for r in live):
        rows.append(("new bytes before room was made", [bytes_text(r.early_bytes) for r in live], sim and ""))
    if any(r.unplanned_remats for r in live):
        rows.append(("replays outside the plan", [count_text(r.unplanned_remats) for r in live], sim and ""))
    if head["check"]:
        rows.append(("check: a plain step, bitwise", [_check_cell(r) for r in live], sim and ""))
    for label, cells, sim_cell in rows:
        table.add_row(label, *cells, *([sim_cell] if sim is not None else []))
    out = console()
    out.print(table)
    out.print(f"plain PyTorch step: {head['plain_wall_s'] * 1e3:,.1f} ms ({head['threads']} CPU threads); "
              f"plan ({head['plan']}): peak {bytes_text(head['plan_peak_bytes'])}")
    for r in live:
        if r.error:
            out.print(f"step {r.step}: {r.error}")
        if sim is not None:
            out.print(f"step {r.step}: {_verdict(r, sim, head['clock'])[1]}")
        if r.check is not None:
            c = r.check
            if c["compared"] == 0:
                out.print(f"step {r.step}: --check found nothing to compare (the step's function reaches no "
                          "module, optimizer or tensor)")
            elif c["equal"]:
                out.print(f"step {r.step}: --check: gradients, parameters, buffers and optimizer state "
                          f"({c['compared']:,} values) bitwise equal to a plain step's from the same state")
            else:
                shown = ", ".join(c["differing"][:5]) + (" ..." if len(c["differing"]) > 5 else "")
                out.print(f"step {r.step}: --check: {len(c['differing']):,} of {c['compared']:,} values differ "
                          f"from a plain step's from the same state: {shown}")


def register(app: typer.Typer) -> None:
    app.command("run")(run)

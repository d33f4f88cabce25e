"""The `dtrlab stage` command, added to the CLI by `register(app)`: stage a zoo model's or a user's step
under a budget, run it beside the plain step, and print the staging time apart from the per-step time.

A thin layer over dtrlab.stage: torch is imported only when the command runs.
"""

from __future__ import annotations

import statistics
import time
from typing import List, Optional

import typer

from ..capture.factory import make_step
from .options import BATCH_OPT, DEVICE_OPT, MODEL_ARG, SCRIPT_OPT, SIZE_OPT
from ..defaults import DEFAULT_POLICY, DEFAULT_RUNTIME
from ..errors import UsageError
from .options import BYTES_OPT, JSON_OPT, RATIO_OPT, steps_opt
from ..output import print_json

OPTIMIZERS = ("none", "sgd", "adam")
# The most staged steps run before timing: each new plan (the state a first step makes, an optimizer's
# state) is one, and its compilation (backend "inductor") one more.
WARM_LIMIT = 4


def _world(model, script, batch, device, size, optimizer: str, seed: int):
    """The step as the command names it, made from `seed`, with the optimizer's update added after it."""
    import torch

    torch.manual_seed(seed)
    step, label, _ = make_step(model, script, batch, device, size)
    if optimizer == "none":
        return step, label
    if not hasattr(step, "model"):
        raise UsageError(f"--optimizer {optimizer} needs the step's model as step.model")
    opt = (torch.optim.SGD(step.model.parameters(), lr=0.01, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(step.model.parameters(), lr=1e-3))

    def full():
        step()
        opt.step()
    full.model, full.optimizer = step.model, opt
    return full, label


def _median_s(fn, steps: int) -> float:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def stage_command(
    model: Optional[str] = MODEL_ARG,
    script: Optional[str] = SCRIPT_OPT,
    batch: Optional[int] = BATCH_OPT,
    device: str = DEVICE_OPT,
    size: Optional[List[str]] = SIZE_OPT,
    ratio: Optional[float] = RATIO_OPT,
    budget_bytes: Optional[int] = BYTES_OPT,
    policy: str = typer.Option(DEFAULT_POLICY, "--policy", "-p", help="The simulator's eviction policy."),
    optimizer: str = typer.Option("none", "--optimizer", help="An update added after the step: none, sgd "
                                                              "(momentum 0.9) or adam."),
    steps: int = steps_opt(5, "Steps timed, plain and staged (medians)."),
    seed: int = typer.Option(0, "--seed", help="Seed of torch (the model's weights, dropout)."),
    backend: str = typer.Option("graph", "--backend",
                                help="How the staged graph runs: graph (its plain aten calls, bitwise the eager "
                                     "step) or inductor (compiled by torch.compile's inductor: close, not "
                                     "bitwise; its peak counted by the allocator)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Stage one training step under a budget (trace, simulate, rewrite) and time it against the plain step."""
    run_staged(model, script, batch, device, size, ratio, budget_bytes, policy, optimizer, steps, seed, as_json,
               backend)


def run_staged(model, script, batch, device: str, size, ratio: float | None, budget_bytes: int | None,
               policy: str, optimizer: str, steps: int, seed: int, as_json: bool, backend: str = "graph") -> None:
    """What `dtrlab stage` and `dtrlab run --staged` do: stage the step, time `steps` staged and plain
    steps from the same seed, and print the staging time apart from the per-step medians."""
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    from ..staged.staging import BACKENDS

    if backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    import torch

    from ..staged.graph import find_holders, lifted_state
    from ..staged.inductor import GRAD_TOLERANCE, max_relative_difference
    from ..staged.measure import allocator_peak_bytes
    from ..staged.staging import stage

    plain, label = _world(model, script, batch, device, size, optimizer, seed)
    step, _ = _world(model, script, batch, device, size, optimizer, seed)
    # The same seed before each side's steps: dropout draws the same numbers in both.
    torch.manual_seed(seed + 1)
    t0 = time.perf_counter()
    staged = stage(step, budget_bytes=budget_bytes, ratio=ratio, policy=policy, runtime=DEFAULT_RUNTIME,
                   backend=backend)
    staged()  # a step that makes state (an optimizer's first) plans again: both plans are staging time
    warm = 1
    while backend != "graph" and not staged.compiled and warm < WARM_LIMIT:
        staged()  # and the compilation, on the last plan's second run
        warm += 1
    staging_s = time.perf_counter() - t0
    staged_s = _median_s(staged, steps)
    _, measured = staged.measured()
    cuda_peak = None
    if device == "cuda":  # the caching allocator's own peak over one more step (docs/staged.md)
        # a generator: read before the step, it holds none of the old gradients the step lets go
        cuda_peak = allocator_peak_bytes(staged, (t for t in lifted_state(staged.holders)))
    torch.manual_seed(seed + 1)
    for _ in range(warm):  # as many steps as the staged side's staging ran, from the same seed
        plain()
    plain_s = _median_s(plain, steps)
    for _ in range(1 + (cuda_peak is not None)):  # the measured step, and the CUDA-counted one
        plain()
    # Parameters, buffers, gradients and optimizer state, as the staged step lifts them, bitwise.
    mine, theirs = lifted_state(staged.holders), lifted_state(find_holders(plain))
    same = len(mine) == len(theirs) and all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(mine, theirs))
    p = staged.plan
    differs = max_relative_difference(theirs, mine)
    summary = {"model": label, "device": device, "policy": policy, "optimizer": optimizer,
               "budget_bytes": p.budget_bytes, "ratio": ratio, "plans": len(staged.plans),
               "staging_s": round(staging_s, 3),
               "last_plan_ms": {k.removesuffix("_ns"): round(v / 1e6, 1) for k, v in p.times_ns.items()},
               "plain_step_ms": round(plain_s * 1e3, 3), "staged_step_ms": round(staged_s * 1e3, 3),
               "wall_overhead": round(staged_s / plain_s, 3), "simulated_overhead": round(p.replay.overhead, 4),
               "recomputations": p.replay.n_recompute, "simulated_peak_bytes": p.replay.peak_bytes,
               "backend": backend, "compiled": staged.compiled,
               "measured_peak_bytes": measured.peak_bytes,
               "measured_by": measured.kind, "cuda_peak_bytes": cuda_peak,
               "rng_state_bytes": measured.rng_bytes, "state_equals_plain": same,
               "state_max_relative_difference": differs, "state_within_tolerance": differs <= GRAD_TOLERANCE}
    if as_json:
        print_json(summary)
        return
    for key, value in summary.items():
        typer.echo(f"{key:22} {value}")


def register(app: typer.Typer) -> None:
    app.command("stage")(stage_command)

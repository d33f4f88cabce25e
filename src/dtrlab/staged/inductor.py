"""The staged graph compiled by torch.compile's inductor: the "inductor" way of running a plan.

Owns the compile settings and how close the result must be. The rewritten GraphModule (the schedule's
recomputations and frees in place) goes through dynamo and inductor as it is, under settings that keep
the schedule's meaning:
- no common-subexpression elimination (AOT autograd's `cse`): a recomputation is a copy of its node,
  and merging it with the first computation would keep that value alive across the schedule's free;
- random operators through ATen's own kernels (inductor's `fallback_random`): the same numbers as the
  eager step and as the GraphModule, where inductor's own generator would draw others;
- no fusion (`max_fusion_size` 1): a fused kernel runs nodes the schedule keeps apart together, and
  on the test MLP at ratio 0.8 fusion took the peak 38% over the budget (1,947,436 B against
  1,414,809; 1,231,968 without fusion: docs/staged.md);
- a number read out of a tensor stays inside the graph (`capture_scalar_outputs`: Adam's step count);
  a plan that replays random operators is not compiled at all (staging.py): dynamo, which does not
  trace the generator's state, would split its graph at each replay and keep each piece's inputs
  alive past the schedule's frees;
- one compile thread (no pool of workers on a shared machine).
Inductor fuses and reorders floating-point sums, so its results are close, not bitwise
(GRAD_TOLERANCE); and it may place kernels in another order than the schedule's, so its peak is
measured (measure.allocator_peak_bytes), never taken from the plan.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

# How close an inductor-compiled step is to eager: the largest difference over all of a step's
# tensors (gradients, updated parameters, optimizer state), relative to the largest value among them.
# Inductor fuses and reorders floating-point sums, so bits differ; a convolution's bias before a batch
# norm has a gradient of rounding noise only, so a tensor-by-tensor relative bound would mean nothing.
# Where a step has a sum that cancels (a convolution's weight gradient before a batch norm, on the zoo's
# default ResNet-32 and U-Net) inductor's own numerics exceed it, as torch.compile's of the plain step
# do (docs/staged.md, "How close").
GRAD_TOLERANCE = 1e-4


def max_relative_difference(want: list[torch.Tensor], got: list[torch.Tensor]) -> float:
    """The largest elementwise difference between `want` and `got` (floating-point tensors, pairwise),
    over the largest magnitude in `want`: what GRAD_TOLERANCE bounds. Infinite if the two differ in
    length, shape or dtype."""
    if len(want) != len(got) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(want, got)):
        return float("inf")
    pairs = [(a, b) for a, b in zip(want, got) if a.is_floating_point() and a.numel()]
    if not pairs:
        return 0.0
    scale = max(a.abs().max().item() for a, _ in pairs) or 1.0
    return max((a.double() - b.double()).abs().max().item() for a, b in pairs) / scale


def settings() -> contextlib.ExitStack:
    """The settings a staged graph is compiled and run under (above), patched for its calls only."""
    from torch._dynamo import config as dynamo_config
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config

    stack = contextlib.ExitStack()
    stack.enter_context(functorch_config.patch(cse=False))
    stack.enter_context(inductor_config.patch(fallback_random=True, max_fusion_size=1, compile_threads=1))
    stack.enter_context(dynamo_config.patch(capture_scalar_outputs=True))
    return stack


def compiled(module: torch.fx.GraphModule) -> Callable:
    """`module` compiled by inductor (on its first call), each call under settings()."""
    fn = torch.compile(module, backend="inductor", dynamic=False)

    def run(*inputs):
        with settings():
            return fn(*inputs)
    run.compiled_from = module
    return run

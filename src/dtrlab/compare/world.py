"""The training step every mode of the comparison runs: a zoo model's forward, loss and backward
with an SGD update (momentum 0.9), made afresh from a seed, so each mode starts from the same state.

Owns that step (the staged benchmark's too) and the state it holds, as staging lifts it.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..capture.zoo import ZOO
from ..staged.graph import find_holders, lifted_state

LR, MOMENTUM = 0.01, 0.9


def zoo_step(name: str, sizes: dict, seed: int = 0) -> Callable[[], None]:
    """`name`'s zoo step at `sizes` from `seed`, followed by an SGD update; the callable carries its
    `model` and `optimizer` (what dtrlab.stage finds)."""
    torch.manual_seed(seed)
    step = ZOO[name].make(**sizes)
    opt = torch.optim.SGD(step.model.parameters(), lr=LR, momentum=MOMENTUM)

    def full() -> None:
        step()
        opt.step()
    full.model, full.optimizer = step.model, opt
    return full


def state_of(step: Callable) -> list[torch.Tensor]:
    """The tensors a step holds between steps: parameters, buffers, gradients, optimizer state."""
    return lifted_state(find_holders(step))


def grads_of(step: Callable) -> list[torch.Tensor | None]:
    """The step's model's gradients, in parameter order."""
    return [p.grad for p in step.model.parameters()]

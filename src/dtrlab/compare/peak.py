"""The real peak of an eager step: capture's Recorder (the one storage-identity counter, weakref
finalizers on every tensor) run over one step, with the step's state counted from the start.

Owns only what the Recorder does not: naming the state (parameters, buffers, gradients, optimizer
state) before the step's first operator, as staged/measure.py counts a staged step's lifted inputs.
"""

from __future__ import annotations

import gc
from typing import Callable

import torch

from ..capture.recorder import Recorder


def eager_peak_bytes(step: Callable[[], object], state: Callable[[], list[torch.Tensor]] = list) -> int:
    """The most bytes of distinct live storages at once while `step` runs, counting the tensors
    `state()` returns from before its first operator (each storage once) and every tensor the step
    makes, until it dies. `state` is a function so that no list here outlives the naming: a list
    held through the step would keep the old gradients its zero_grad drops alive, and counted."""
    gc.collect()  # garbage from before the step must not be counted, nor released, inside it
    recorder = Recorder()
    with recorder:
        for t in state():
            recorder.namer.name_of(t)
        t = None
        step()
    return recorder.capture().peak_bytes

"""Staged DTR: a training step traced once into one graph, planned by the simulator under a budget,
and run as that graph rewritten by the schedule (docs/staged.md).

Imports dtrlab.schedule, trace/ and sim/'s public simulate API; never the engines' insides or the live runtime.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"stage": "staging", "StagedStep": "staging", "Plan": "staging", "StagingOutOfMemory": "staging",
            "NotStageable": "graph", "MeasuredPeak": "measure"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

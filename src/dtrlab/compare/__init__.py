"""The staged DTR step against PyTorch's own ways to trade time for memory (torch.utils.checkpoint
per block, selective checkpointing, torch.compile's activation memory budget), each mode's real peak
measured and its step timed in turns with the others' (docs/checkpointing.md).

Imports dtrlab.staged (the staged step) and dtrlab.capture (the zoo, the storage counter); above both.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"compare": "points", "Point": "points", "Mode": "modes", "MODES": "modes", "prepare": "modes",
            "NoBlocks": "modes", "find_blocks": "blocks", "checkpointed": "blocks", "eager_peak_bytes": "peak",
            "zoo_step": "world", "Matched": "matched", "at_matched_memory": "matched"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

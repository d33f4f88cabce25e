"""The live step's graph: storages (the unit of memory), tensor versions and the calls that made them.

Owns the plain records; nothing here runs an operator (session.py does).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch


class Storage:
    """One block of memory. Resident while its root holds a value; a constant is never evicted.

    handles: the live wrappers' handles on this storage (its external references); locks: calls
    in flight that read it (a locked storage is not evictable). The rest is what a policy's score
    reads (scoring.py): compute_ns (cost of the calls that wrote it, once each), last_access_ns
    (the clock when it was last an argument), evictions and remats so far, and the storages its
    calls read (parents) and the storages made by calls that read it (children)."""

    __slots__ = ("id", "nbytes", "root", "constant", "handles", "locks", "records", "compute_ns",
                 "last_access_ns", "evictions", "remats", "parents", "children", "__weakref__")

    def __init__(self, sid: int, nbytes: int, constant: bool) -> None:
        self.id = sid
        self.nbytes = nbytes
        self.root: Record | None = None
        self.constant = constant
        self.handles: set[Handle] = set()
        self.locks = 0
        self.records: list[Record] = []  # every tensor version on this storage
        self.compute_ns = 0
        self.last_access_ns: float = -math.inf  # as the engine's: never an argument yet
        self.evictions = 0
        self.remats = 0
        self.parents: dict[int, Storage] = {}  # by id, in the order met (traversals are ordered)
        self.children: dict[int, Storage] = {}

    @property
    def resident(self) -> bool:
        return self.root is not None and self.root.value is not None

    def __repr__(self) -> str:
        return f"Storage({self.id}, {self.nbytes} B{', constant' if self.constant else ''})"


class Record:
    """A tensor version: its metadata, how to make it again, and its value or None.

    Made by `call` (output `index`), or, for a window (a wrapper rebound to a new version of
    its storage), the same strided window on the storage's root; a constant has neither."""

    __slots__ = ("storage", "call", "index", "window", "shape", "stride", "offset", "dtype", "device",
                 "value", "__weakref__")

    def __init__(self, storage: Storage, value: torch.Tensor, call: "Call | None" = None, index: int = -1,
                 window: bool = False) -> None:
        self.storage = storage
        self.call = call
        self.index = index
        self.window = window
        self.shape, self.stride, self.offset = value.shape, value.stride(), value.storage_offset()
        self.dtype, self.device = value.dtype, value.device
        self.value: torch.Tensor | None = value
        storage.records.append(self)

    def like(self, raw: torch.UntypedStorage) -> torch.Tensor:
        """This record's window (shape, strides, offset) on the given bytes."""
        return torch.empty((0,), dtype=self.dtype, device=self.device).set_(raw, self.offset, self.shape,
                                                                            self.stride)


@dataclass(frozen=True)
class OpCost:
    """An operator's cost on the session's clock, split as the trace format splits it: the part
    that writes (a MUTATE's: charged to the new versions) and the part that makes results (a CALL's)."""

    mutate_ns: int
    call_ns: int

    @property
    def total_ns(self) -> int:
        return self.mutate_ns + self.call_ns


class Call:
    """One operator execution, kept to be replayed: arguments as records (leaves of `spec`).

    mutated: positions (into leaves) of the tensors it writes in place; new_roots: for each
    storage it writes that was made inside the step, the root of the storage's new version.
    rng: the default generator's state before it ran, for a random operator."""

    __slots__ = ("func", "spec", "leaves", "records", "mutated", "new_roots", "rng", "outputs", "cost")

    def __init__(self, func, spec, leaves: list, mutated: tuple[int, ...], rng) -> None:
        self.func = func
        self.spec = spec
        self.leaves = leaves
        self.records = [x for x in leaves if isinstance(x, Record)]
        self.mutated = mutated
        # Weak references: a call's results do not keep themselves alive through their recipe.
        self.new_roots: dict[int, weakref.ref] = {}  # old storage id -> root of its new version
        self.rng = rng
        self.outputs: list[weakref.ref | None] = []  # per flattened output, None for no new record
        self.cost = OpCost(0, 0)  # set after the first run; a replay costs the same on a logical clock


class Handle:
    """What a live wrapper points to: rebound to the new record when its storage is written."""

    __slots__ = ("record", "serial", "__weakref__")

    def __init__(self, record: Record, serial: int) -> None:
        self.record = record
        self.serial = serial  # creation order: the trace pins outputs left at the end in this order

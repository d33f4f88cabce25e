"""Synthetic traces: a deterministic generator of random, valid instruction lists.

Owns what "valid" means constructively; used by property tests and demos, never passed off as measured data.
"""

from __future__ import annotations

import random
from .read import (BACKWARD, START, Alias, Annotate, Call, Constant, Copy, CopyFrom, Instruction,
                   Memory, Mutate, Release)

# The first line of every synthetic trace: an annotation the lowering ignores, so a file
# written from one says what it is wherever it is copied to.
SYNTHETIC = "SYNTHETIC"


class _Gen:
    """Emits instructions with consecutive line numbers and never-reused tensor names."""

    def __init__(self, rng: random.Random, size_bytes: tuple[int, int], time_ns: tuple[int, int],
                 prefix: str, keep_constants: bool = False, window: int | None = None) -> None:
        self.rng = rng
        self.window = window
        self.keep_constants = keep_constants
        self.constants: set[str] = set()  # filled only when constants are kept
        self.size_bytes = size_bytes
        self.time_ns = time_ns
        self.prefix = prefix
        self.out: list[Instruction] = []
        self.live: list[str] = []  # names bound and not yet released, in binding order
        self.counter = 0
        self.n_ops = 0
        self.backward = False

    def emit(self, make, *fields) -> None:
        self.out.append(make(len(self.out) + 1, *fields))

    def fresh(self) -> str:
        self.counter += 1
        return f"{self.prefix}{self.counter}"

    def size(self) -> int:
        # Multiples of 4 bytes, as float32 tensors have; 0 happens (empty tensors exist).
        lo, hi = self.size_bytes
        return 4 * self.rng.randint(lo // 4, hi // 4)

    def recent(self) -> list[str]:
        """The names an operator may read: every live one, or the last `window` bound."""
        return self.live if self.window is None else self.live[-self.window:]

    def time(self) -> int:
        return self.rng.randint(*self.time_ns)

    def op_name(self, base: str) -> str:
        # The reference marks an operator backward once a name containing "backward" appears.
        return f"{base}_backward" if self.backward and self.rng.random() < 0.5 else base

    def constant(self) -> None:
        name = self.fresh()
        self.emit(Constant, name)
        self.emit(Memory, name, self.size())
        self.live.append(name)
        if self.keep_constants:
            self.constants.add(name)

    def call(self, max_args: int, max_outputs: int, p_alias: float) -> None:
        rng = self.rng
        pool = self.recent()
        args = tuple(rng.choice(pool) for _ in range(rng.randint(0, min(max_args, len(pool)))))
        results = tuple(self.fresh() for _ in range(rng.randint(1, max_outputs)))
        self.emit(Call, self.op_name(rng.choice(("conv", "matmul", "add", "relu", "split"))),
                  args, results, self.time())
        for result in results:
            self.emit(Memory, result, self.size())
            alias = rng.randrange(len(args)) if args and rng.random() < p_alias else -1
            self.emit(Alias, result, alias)
        self.live.extend(results)
        self.n_ops += 1

    def mutate(self, max_args: int) -> None:
        rng = self.rng
        # Distinct argument names: mutating one name twice in one MUTATE is rejected by the lowering.
        pool = self.recent()
        args = tuple(rng.sample(pool, rng.randint(1, min(max_args, len(pool)))))
        mutate = tuple(sorted(rng.sample(range(len(args)), rng.randint(1, len(args)))))
        if self.constants:  # writing a constant would release its old version
            mutate = tuple(k for k in mutate if args[k] not in self.constants)
            if not mutate:
                return
        self.emit(Mutate, self.op_name(rng.choice(("add_", "relu_", "mul_"))), args, mutate, self.time())
        self.n_ops += 1

    def copy(self) -> None:
        dst = self.fresh()
        self.emit(Copy, dst, self.rng.choice(self.recent()))
        self.live.append(dst)

    def copy_from(self) -> None:
        dst, src = self.rng.sample(self.recent(), 2)
        if dst in self.constants:  # rebinding a constant's name would let it go
            return
        self.emit(CopyFrom, dst, src)

    def release(self) -> None:
        if not self.constants:
            self.emit(Release, self.live.pop(self.rng.randrange(len(self.live))))
            return
        for _ in range(8):  # draw again past constants; a live set of constants only releases nothing
            k = self.rng.randrange(len(self.live))
            if self.live[k] not in self.constants:
                self.live[k], self.live[-1] = self.live[-1], self.live[k]
                self.emit(Release, self.live.pop())
                return

    def body(self, n_ops: int, max_args: int, max_outputs: int, p_alias: float,
             backward_at: int | None) -> None:
        rng = self.rng
        for _ in range(rng.randint(1, 3)):
            self.constant()
        while self.n_ops < n_ops:
            if backward_at is not None and self.n_ops == backward_at and not self.backward:
                self.emit(Annotate, BACKWARD)
                self.backward = True
            r = rng.random()
            if not self.live or r < 0.08:
                self.constant()
            elif r < 0.55:
                self.call(max_args, max_outputs, p_alias)
            elif r < 0.63:
                self.mutate(max_args)
            elif r < 0.73:
                self.copy()
            elif r < 0.78 and len(self.live) >= 2:
                self.copy_from()
            else:
                self.release()
        # Release most of what is left; the rest stays referenced and is pinned at the end.
        kept = []  # one pass (removing names one by one grew as the square of what is live)
        for name in self.live:
            if name not in self.constants and rng.random() < 0.7:
                self.emit(Release, name)
            else:
                kept.append(name)
        self.live = kept


def synthetic_trace(seed: int = 0, n_ops: int = 20, *, max_args: int = 3, max_outputs: int = 3,
                    p_alias: float = 0.2, backward: bool = True, start: bool = False,
                    size_bytes: tuple[int, int] = (0, 1 << 20), time_ns: tuple[int, int] = (1, 100_000),
                    keep_constants: bool = False, window: int | None = None,
                    rng: random.Random | None = None) -> list[Instruction]:
    """A random valid trace of `n_ops` operators (CALL and MUTATE; constants come on top).

    Always includes constants and, given enough operators, multi-output calls, aliases,
    MUTATE, COPY, COPY_FROM and RELEASE; `backward` puts an ANNOTATE BACKWARD half-way.
    `start` puts a warm-up section and a START annotation first (the reader skips to it).
    The first line is ANNOTATE SYNTHETIC. The same arguments give the same trace; `rng`
    (e.g. a hypothesis `randoms()`) replaces the seeded generator. `keep_constants` never lets a
    constant go (no RELEASE, no COPY_FROM onto its name, no MUTATE of it), as a training step keeps its parameters:
    DTR pins constants while the baseline may free a released one, so only then does DTR's unbounded
    peak equal the baseline's and ratio 1.0 evict nothing. `window` lets an operator read only the
    last `window` names bound, as a program's operators read recent values: without it a read may
    reach any live name, so what is released joins one evicted neighbourhood that grows with the
    trace (the worst case for e*), and with it neighbourhoods stay local.
    """
    if n_ops < 1:
        raise ValueError("n_ops must be at least 1")
    if max_args < 1 or max_outputs < 1:
        raise ValueError("max_args and max_outputs must be at least 1")
    if window is not None and window < 2:
        raise ValueError("window must be at least 2")
    rng = rng if rng is not None else random.Random(seed)
    gen = _Gen(rng, size_bytes, time_ns, "w", keep_constants, window)
    gen.emit(Annotate, SYNTHETIC)
    if start:
        gen.body(rng.randint(1, 3), max_args, max_outputs, p_alias, None)
        gen.emit(Annotate, START)
        gen.emit(Annotate, SYNTHETIC)  # the label must survive the skip to START
        # Fresh names after START: the lowering never sees the warm-up's tensors.
        out = gen.out
        gen = _Gen(rng, size_bytes, time_ns, "x", keep_constants, window)
        gen.out = out
    gen.body(n_ops, max_args, max_outputs, p_alias, n_ops // 2 if backward else None)
    return gen.out


__all__ = ["SYNTHETIC", "synthetic_trace"]

"""The pure-Python engine: DTR on a Program, step for step as the reference runtime does it.

It is the readable definition of the semantics and the oracle the compiled engine is held to;
it also runs user-defined policies. No recursion: rematerialization uses an explicit stack.

It has two sources of events. `Engine(program, ...).run()` walks a lowered trace's schedule;
`Engine.follow(builder, ...)` follows a trace.lower.Lowering's tables and schedule as they grow,
one `step` at a time, and tells an executor (the live runtime, live/session.py) what to run and
what to drop: its `compute(op, tensors, remat)` runs operator `op` (a first run or a
rematerialization) and gives values to `tensors`, returning what the run cost on its clock; its
`drop(storage, by_policy)` drops the values of the storage's tensors. The bookkeeping is this file's alone.
"""

from __future__ import annotations

import math
from collections import Counter

from ..trace.lower import COMPUTE, GET, PIN, RELEASE, Program
from ..errors import UsageError
from . import formula as fm
from .policies import EQ_CLASS, FRESH_NEIGHBORHOOD, HISTORY, NEIGHBORHOOD, Policy, StorageFeatures
from .result import OK, OOM, REMAT_LIMIT
from .runtimes import Runtime

INF = math.inf


_MASK = (1 << 64) - 1


class _SplitMix:
    """splitmix64, the same stream as the compiled engine's, so random runs agree across engines."""

    def __init__(self, seed: int) -> None:
        self.x = seed & 0x7FFFFFFFFFFFFFFF

    def next(self) -> int:
        self.x = (self.x + 0x9E3779B97F4A7C15) & _MASK
        z = self.x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Uniform in [0, n) without modulo bias."""
        limit = _MASK - _MASK % n
        r = self.next()
        while r >= limit:
            r = self.next()
        return r % n


def _remove_all(items: list, x, count: int) -> None:
    """Remove the `count` copies of x from `items` in place: one pass, not one per copy."""
    if count == 1:
        items.remove(x)
    else:
        items[:] = [y for y in items if y != x]


def scan_pool(pool, score) -> tuple:
    """The reference's choice over `pool` (in its order): the last candidate whose score is <= the
    best so far, stopping at the first score of exactly 0. Returns (chosen, its score, scores
    evaluated); the live runtime chooses with it too."""
    best, best_s, evals = INF, -1, 0
    for s in pool:
        cost = score(s)
        evals += 1
        if cost <= best:
            best, best_s = cost, s
        elif cost != cost and best == INF:
            best_s = s  # a NaN score counts as +inf: it ties with inf, to the last
        if cost == 0:
            break
    return best_s, best, evals


class OutOfMemory(Exception):
    """The budget cannot be met: nothing evictable is left (a run's OOM)."""


class Interrupted(Exception):
    """The progress callback raised (Ctrl-C): the run ends where it is; `cause` is what it raised."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(repr(cause))
        self.cause = cause


class _RematLimit(Exception):
    pass


class _Region:
    """Evicted storages reachable from a base storage in one direction, and the material edge."""

    __slots__ = ("interior", "frontier", "compute")

    def __init__(self) -> None:
        self.interior: set[int] = set()
        self.frontier: set[int] = set()
        self.compute = 0

    def clear(self) -> None:
        self.interior.clear()
        self.frontier.clear()
        self.compute = 0


class _Regions(dict):
    """storage -> its _Region in one direction, made when first read (most storages never need one:
    making them all up front was most of an engine's start on a long trace)."""

    def __missing__(self, s: int) -> _Region:
        region = self[s] = _Region()
        return region


class Engine:
    """State of one run. `run()` walks the schedule and returns the counters."""

    def __init__(self, program: Program | None, budget_bytes: float, policy: Policy, runtime: Runtime,
                 remat_limit_ns: float = INF, seed: int = 0, observer=None) -> None:
        self.p = program
        self.budget = budget_bytes
        self.policy = policy
        self.rt = runtime
        self.remat_limit = remat_limit_ns
        self.rng = _SplitMix(seed)
        self.obs = observer
        self.ex = None  # the executor of a followed source (none for a trace)
        self.regions_on = runtime.optimized and NEIGHBORHOOD in policy.needs
        self.eq_on = runtime.optimized and EQ_CLASS in policy.needs
        self.history_on = HISTORY in policy.needs

        if program is not None:
            self.t_storage = program.tensor_storage.tolist()
            self.t_op = program.tensor_op.tolist()
            self.op_cost = program.op_cost_ns.tolist()
            self.op_start = program.op_out_start.tolist()
            self.op_nout = program.op_n_out.tolist()
            self.t_size = program.tensor_size_bytes.tolist()
            self._arg_ptr, self._args = program.op_arg_ptr.tolist(), program.op_args.tolist()
            self.s_size = program.storage_size_bytes.tolist()
            self.s_root = program.storage_root.tolist()
        self.op_size: list[int] = []  # per operator: the bytes of its outputs (0 for an alias)
        self.op_args: list[list[int]] = []

        # tensors: graph edges grow as operators are created (and shrink when banished)
        self.parents: list[list[int]] = []
        self.children: list[list[int]] = []
        self.defined: list[bool] = []
        # storages
        self.s_tensors: list[list[int]] = []
        self.s_compute: list[int] = []
        self.material: list[bool] = []
        self.ref_int: list[int] = []
        self.ref_ext: list[int] = []
        self.pinned: list[bool] = []
        self.last_access: list[float] = []  # the reference's last_access_int
        self.pool: dict[int, None] = {}  # insertion-ordered set of evictable storages
        # the pool as a dense array (removal swaps in the last), as the compiled engine keeps it,
        # for the search's sample; and the pool's bytes, for its small-storage filter
        self.pool_arr: list[int] = []
        self.pool_pos: dict[int, int] = {}
        self.pool_bytes = 0
        self.region_fwd: _Regions | None = _Regions() if self.regions_on else None
        self.region_rev: _Regions | None = _Regions() if self.regions_on else None
        # equivalence classes: union-find over nodes, value kept at the root
        self.ecn: list[int | None] = []
        self.ecn_made: list[bool] = []
        self.uf_parent: list[int] = []
        self.uf_value: list[int] = []
        # banishing
        self.evicted_dependents: list[set[int]] = []

        self.clock = 1
        self.memory = 0
        self.peak = 0
        self.remat_ns = 0
        self.model_ns = 0
        self.evictions = 0
        self.eager_evictions = 0
        self.evicted_roots: set[int] = set()
        self.score_evals = 0
        self.ops_created = 0
        # per-storage history, kept only for a policy that reads it
        self.s_evictions: list[int] | None = [] if self.history_on else None
        self.s_remats: list[int] | None = [] if self.history_on else None
        self._score = _formula_score(self, policy.formula) if policy.formula is not None else self._function_score
        self._steps: list = []
        self._avail: int | None = None  # a followed program's steps the source has reached (None: all)
        self.steps_done = 0
        # progress: progress.py's call every `progress_every` units of work, at the compiled engine's
        # points (after a schedule step, a computation, a policy eviction); None: never
        self.progress = None
        self.progress_every = 1
        self._tick_left = 0
        self._step_now = 0
        if program is not None:
            self._grow()

    @classmethod
    def follow(cls, builder, executor, budget_bytes: float, policy: Policy, runtime: Runtime,
               seed: int = 0) -> "Engine":
        """An engine on a trace.lower._Builder's lists, which it reads as they grow (see `step`)."""
        if runtime.banishing:
            raise UsageError(f"runtime {runtime.name}: a followed source supports the runtimes without banishing")
        e = cls(None, budget_bytes, policy, runtime, INF, seed)
        e.ex = executor
        b = builder
        e.t_storage, e.t_op, e.op_cost, e.op_start, e.op_nout = b.t_storage, b.t_op, b.op_cost, b.op_out_start, b.op_n_out
        e.t_size, e._arg_ptr, e._args, e.s_size, e.s_root = b.t_size, b.op_arg_ptr, b.op_args, b.s_size, b.s_root
        e._steps = b.steps
        return e

    @classmethod
    def follow_program(cls, program: Program, executor, budget_bytes: float, policy: Policy, runtime: Runtime,
                       seed: int = 0) -> "Engine":
        """An engine on a whole program whose schedule a source takes a step at a time (`step_to`),
        telling `executor` what to run and drop as `follow` does (a live step following its plan)."""
        if runtime.banishing:
            raise UsageError(f"runtime {runtime.name}: a followed source supports the runtimes without banishing")
        e = cls(program, budget_bytes, policy, runtime, INF, seed)
        e.ex = executor
        e._steps = list(zip(program.step_kind.tolist(), program.step_target.tolist()))
        e._avail = 0
        return e

    def _grow(self) -> None:
        """Per-operator, per-tensor and per-storage state for what the tables hold now (in place:
        compiled scores read these lists)."""
        n_ops, n_old = len(self.op_cost), len(self.op_size)
        if n_ops > n_old:
            ptr, args, start, nout, size = self._arg_ptr, self._args, self.op_start, self.op_nout, self.t_size
            self.op_args.extend(args[ptr[o]:ptr[o + 1]] for o in range(n_old, n_ops))
            self.op_size.extend(sum(size[start[o]:start[o] + nout[o]]) for o in range(n_old, n_ops))
        k = len(self.t_storage) - len(self.defined)
        if k > 0:
            self.parents.extend([] for _ in range(k))
            self.children.extend([] for _ in range(k))
            self.defined.extend([False] * k)
        k = len(self.s_size) - len(self.material)
        if k > 0:
            self.s_tensors.extend([] for _ in range(k))
            self.s_compute.extend([0] * k)
            self.material.extend([False] * k)
            self.ref_int.extend([0] * k)
            self.ref_ext.extend([0] * k)
            self.pinned.extend([False] * k)
            self.last_access.extend([-INF] * k)
            self.ecn.extend([None] * k)
            self.ecn_made.extend([False] * k)
            if self.rt.banishing:
                self.evicted_dependents.extend(set() for _ in range(k))
            if self.history_on:
                self.s_evictions.extend([0] * k)
                self.s_remats.extend([0] * k)

    # --- pool and locks ------------------------------------------------------------------
    def _make_evictable(self, s: int) -> None:
        if s not in self.pool:
            self.pool[s] = None
            self.pool_pos[s] = len(self.pool_arr)
            self.pool_arr.append(s)
            self.pool_bytes += self.s_size[s]

    def _make_unevictable(self, s: int) -> bool:
        if s in self.pool:
            del self.pool[s]
            last = self.pool_arr.pop()
            k = self.pool_pos.pop(s)
            if last != s:
                self.pool_arr[k] = last
                self.pool_pos[last] = k
            self.pool_bytes -= self.s_size[s]
            return True
        return False

    def _lock(self, s: int) -> None:
        if self.ref_int[s] == 0:
            self._make_unevictable(s)
        self.ref_int[s] += 1
        if self.obs:
            self.obs.on_lock(self, s)

    def _unlock(self, s: int) -> None:
        self.ref_int[s] -= 1
        if self.ref_int[s] == 0:
            self._make_evictable(s)
        if self.obs:
            self.obs.on_unlock(self, s)

    # --- eviction ------------------------------------------------------------------------
    def _evict(self, s: int, by_policy: bool) -> None:
        if self.ex is not None:
            self.ex.drop(s, by_policy)
        self.material[s] = False
        self.memory -= self.s_size[s]
        self._make_unevictable(s)
        for t in self.s_tensors[s]:
            self.defined[t] = False
        root = self.s_root[s]
        if self.rt.banishing:
            for t in self.s_tensors[s]:
                for p in self.parents[t]:
                    ps = self.t_storage[p]
                    if self.s_root[ps] != root:
                        self.evicted_dependents[ps].add(t)
        if by_policy:
            self.evictions += 1
            self.evicted_roots.add(root)
            if self.history_on:
                self.s_evictions[s] += 1
        else:
            self.eager_evictions += 1
        if self.obs:
            self.obs.on_evict(self, s, by_policy)
        if self.regions_on:
            fwd, rev = self.region_fwd, self.region_rev
            for ps in list(rev[s].frontier):
                self._absorb(fwd[ps], fwd[s], s)
            for cs in list(fwd[s].frontier):
                self._absorb(rev[cs], rev[s], s)
            fwd[s].clear()
            rev[s].clear()
        if self.eq_on:
            node = self._uf_new(self.s_compute[s])
            self.ecn[s] = node
            for n in self._evicted_neighbors(s):
                self._uf_merge(self.ecn[n], node)

    def _absorb(self, region: _Region, other: _Region, s: int) -> None:
        # The reference's incremental e* upkeep: take in an evicted frontier storage and its
        # region; `s` is counted again if it was already inside (kept for parity).
        region.frontier.discard(s)
        region.frontier.update(other.frontier)
        diff = other.interior - region.interior
        diff.add(s)
        sc = self.s_compute
        region.compute += sum(sc[x] for x in diff)
        region.interior |= diff

    def _rebuild(self, base: int, forward: bool) -> _Region:
        region = (self.region_fwd if forward else self.region_rev)[base]
        region.clear()
        self._traverse(base, forward, region)
        return region

    def _traverse(self, base: int, forward: bool, region: _Region) -> None:
        edges = self.children if forward else self.parents
        interior, frontier = region.interior, region.frontier
        material, t_storage, sc = self.material, self.t_storage, self.s_compute
        stack = [base]
        compute = 0
        while stack:
            s = stack.pop()
            for t in self.s_tensors[s]:
                for u in edges[t]:
                    us = t_storage[u]
                    if material[us]:
                        if us != base:
                            frontier.add(us)
                        continue
                    if us not in interior:
                        compute += sc[us]
                        interior.add(us)
                        stack.append(us)
        region.compute += compute

    def _evicted_neighbors(self, s: int) -> set[int]:
        out = set()
        material, t_storage = self.material, self.t_storage
        for t in self.s_tensors[s]:
            for u in self.parents[t]:
                us = t_storage[u]
                if not material[us] and us != s:
                    out.add(us)
            for u in self.children[t]:
                us = t_storage[u]
                if not material[us] and us != s:
                    out.add(us)
        return out

    def _uf_new(self, value: int) -> int:
        self.uf_parent.append(len(self.uf_parent))
        self.uf_value.append(value)
        return len(self.uf_parent) - 1

    def _uf_find(self, x: int) -> int:
        parent = self.uf_parent
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def _uf_merge(self, a: int, b: int) -> None:
        ra, rb = self._uf_find(a), self._uf_find(b)
        if ra != rb:
            self.uf_parent[ra] = rb
            self.uf_value[rb] += self.uf_value[ra]

    # --- scores --------------------------------------------------------------------------
    def _eq_class(self, s: int) -> int:
        roots = {self._uf_find(self.ecn[n]) for n in self._evicted_neighbors(s)}
        return sum(self.uf_value[r] for r in roots)

    def _fresh(self, s: int) -> tuple[int, int | float]:
        """e* cost and staleness by a fresh traversal: staleness of the newest member."""
        fwd, rev = _Region(), _Region()
        self._traverse(s, True, fwd)
        self._traverse(s, False, rev)
        latest = self.last_access[s]
        fresh = 0
        for u in fwd.interior | rev.interior:
            fresh += self.s_compute[u]
            latest = max(latest, self.last_access[u])
        return fresh, self.clock - latest

    def _features(self, s: int) -> StorageFeatures:
        la = self.last_access[s]
        needs = self.policy.needs
        nb = anc = eq = fresh = 0
        fresh_stale = 0
        if NEIGHBORHOOD in needs:
            anc = self.region_rev[s].compute
            nb = self.region_fwd[s].compute + anc
        if EQ_CLASS in needs:
            eq = self._eq_class(s)
        if FRESH_NEIGHBORHOOD in needs:
            fresh, fresh_stale = self._fresh(s)
        hist = (self.s_evictions[s], self.s_remats[s]) if self.history_on else (0, 0)
        return StorageFeatures(self.s_compute[s], self.s_size[s], self.clock - la, la, self.clock,
                               nb, anc, eq, fresh, fresh_stale, *hist, self.budget, self.memory)

    def _function_score(self, s: int):
        return self.policy.score(self._features(s))

    def terms_function(self, names: tuple[str, ...]):
        """A function of a storage giving the values of the features `names` now (the instruments'
        score terms), read as the formula's score reads them."""
        return _compiled(self, "(" + "".join(f"{_FEATURE_SOURCE[n]}, " for n in names) + ")",
                         any(fm.FEATURES[n][1] == FRESH_NEIGHBORHOOD for n in names))

    def _choose(self) -> int:
        if self.policy.is_random:
            self.score_evals += 1
            pool = list(self.pool)
            return pool[self.rng.below(len(pool))]
        try:
            best_s, best, evals = self._search()
            self.score_evals += evals
        except OverflowError:
            raise UsageError(f"policy {self.policy.name}: a score is too large for a float "
                             f"(at clock {self.clock})") from None
        if self.obs:
            self.obs.on_choose(self, best_s, best)
        return best_s

    def _search(self) -> tuple:
        """The eviction search: exact over the pool, or with the runtime's shortcuts (a sample of
        ceil(sqrt(pool)) draws from the dense array; small storages left out). A search that finds
        no candidate falls back to the exact one, then to it without the small filter."""
        rt = self.rt
        if not (rt.sample or rt.small_percent):
            return scan_pool(self.pool, self._score)
        n = len(self.pool_arr)
        size, total, percent = self.s_size, self.pool_bytes, rt.small_percent

        def kept(s: int) -> bool:
            return not percent or size[s] * n * 100 >= total * percent

        best_s, best, evals = -1, INF, 0
        if rt.sample:
            arr, below = self.pool_arr, self.rng.below
            best_s, best, evals = scan_pool((s for s in (arr[below(n)] for _ in range(math.isqrt(n - 1) + 1))
                                             if kept(s)), self._score)
        if best_s < 0:
            best_s, best, more = scan_pool((s for s in self.pool if kept(s)), self._score)
            evals += more
        if best_s < 0 and percent:
            best_s, best, more = scan_pool(self.pool, self._score)
            evals += more
        return best_s, best, evals

    def _free(self, need: int) -> None:
        while self.memory + need > self.budget:
            if not self.pool:
                raise OutOfMemory(need)
            self._evict(self._choose(), True)
            if self.progress is not None:
                self._tick()

    def _tick(self) -> None:
        self._tick_left -= 1
        if self._tick_left <= 0:
            self._tick_left = self.progress_every
            try:
                self.progress(self.clock, self.remat_ns, self.evictions, self.eager_evictions, self.ops_created,
                              self._step_now)
            except BaseException as exc:  # Ctrl-C among them: the run ends with its figures so far
                raise Interrupted(exc) from exc

    # --- computing -----------------------------------------------------------------------
    def _create(self, op: int) -> list[int]:
        """The reference's `compute` bookkeeping for a new operator: tensors, edges, storages."""
        start, n = self.op_start[op], self.op_nout[op]
        outs = list(range(start, start + n))
        args = self.op_args[op]
        for t in outs:
            s = self.t_storage[t]
            self.parents[t] = list(args)
            if all(self.t_op[x] != op for x in self.s_tensors[s]):
                self.s_compute[s] += self.op_cost[op]  # each operator counts once per storage
            self.s_tensors[s].append(t)
            self.ref_ext[s] += 1
        for a in args:
            self.children[a].extend(outs)
        if self.rt.banishing:
            for t in outs:
                s = self.t_storage[t]
                for a in args:
                    if self.s_root[self.t_storage[a]] != self.s_root[s]:
                        self.evicted_dependents[self.t_storage[a]].add(t)
        if self.eq_on:
            for t in outs:
                s = self.t_storage[t]
                if not self.ecn_made[s]:
                    self.ecn_made[s] = True
                    self.ecn[s] = self._uf_new(0)
        self.ops_created += 1
        return outs

    def _compute(self, t: int, remat: bool) -> list[int]:
        op = self.t_op[t]
        start, n = self.op_start[op], self.op_nout[op]
        sibs = [u for u in range(start, start + n) if u != t]
        dup = [u for u in sibs if self.defined[u]]
        remat_sibs = [u for u in sibs if not self.defined[u]]
        remat_storages = [self.t_storage[u] for u in sibs + [t] if not self.material[self.t_storage[u]]]
        cost = self.op_cost[op]
        if self.ex is not None:
            cost = self.ex.compute(op, [t] + remat_sibs, remat)
            if not remat and cost != self.op_cost[op]:
                self._recost(op, cost)
        self.clock += cost
        self.memory += self.op_size[op]
        if self.memory > self.peak:
            self.peak = self.memory
        for u in [t] + remat_sibs:
            self.material[self.t_storage[u]] = True
            self.defined[u] = True
        if remat:
            self.remat_ns += cost
        else:
            self.model_ns += cost
        for u in dup:
            self.memory -= self.t_size[u]
        for s in remat_storages:
            self._make_evictable(s)
            if remat and self.history_on:
                self.s_remats[s] += 1  # as the instruments count: a shared storage counts twice
        if self.obs:
            self.obs.on_compute(self, t, remat)
        if self.regions_on:
            affected_fwd, affected_rev = set(), set()
            for s in remat_storages:
                fwd = self._rebuild(s, True)
                rev = self._rebuild(s, False)
                affected_fwd.update(rev.frontier)
                affected_rev.update(fwd.frontier)
            for s in affected_fwd:
                self._rebuild(s, True)
            for s in affected_rev:
                self._rebuild(s, False)
        if self.eq_on:
            for s in remat_storages:
                root = self._uf_find(self.ecn[s])
                self.uf_value[root] -= self.s_compute[s]
                self.ecn[s] = None
        return remat_sibs

    def _touch_parents(self, t: int) -> None:
        for p in self.parents[t]:
            ps = self.t_storage[p]
            if not self.rt.banishing or self.ref_ext[ps] > 0:
                self.last_access[ps] = self.clock

    def _materialize(self, t0: int, remat0: bool, frame0: list | None = None) -> None:
        # Frames: [tensor, remat, undefined parents, next index, waiting for a child]; a tensor
        # of -1 is an operator not yet known (`prepare`): its arguments are left locked.
        stack = [frame0 or self._enter(t0, remat0)]
        while stack:
            frame = stack[-1]
            t, remat, undefined, i, waiting = frame
            if i < len(undefined):
                p = undefined[i]
                if not waiting and not self.defined[p]:
                    frame[4] = True
                    stack.append(self._enter(p, True))
                    continue
                self._lock(self.t_storage[p])
                frame[3] = i + 1
                frame[4] = False
                continue
            if t < 0:
                return
            need = self.op_size[self.t_op[t]]
            if self.obs:
                self.obs.on_pressure(self, t, stack)
            if self.memory + need > self.budget:
                self._free(need)
            remat_sibs = self._compute(t, remat)
            for p in self.parents[t]:
                ps = self.t_storage[p]
                self._unlock(ps)
                if self.rt.banishing:
                    deps = self.evicted_dependents[ps]
                    for u in remat_sibs + [t]:
                        if self.s_root[self.t_storage[u]] != self.s_root[ps]:
                            deps.discard(u)
                    self._try_banish(ps)
            stack.pop()
            if self.remat_ns > self.remat_limit:
                raise _RematLimit()
            if self.progress is not None:
                self._tick()

    def _enter(self, t: int, remat: bool) -> list:
        self._touch_parents(t)
        parents = self.parents[t]
        for p in parents:
            if self.defined[p]:
                self._lock(self.t_storage[p])
        return [t, remat, [p for p in parents if not self.defined[p]], 0, False]

    # --- references ----------------------------------------------------------------------
    def _pin(self, t: int) -> None:
        s = self.t_storage[t]
        if self.pinned[s]:
            return
        self._lock(s)
        self.pinned[s] = True
        if self.obs:
            self.obs.on_pin(self, s)

    def _release(self, t: int) -> None:
        s = self.t_storage[t]
        self.ref_ext[s] -= 1
        if self.rt.banishing:
            if self.ref_ext[s] == 0:
                self._try_banish(s)
        elif self.rt.eager and self.ref_ext[s] == 0 and self.material[s] and not self.pinned[s]:
            self._evict(s, False)

    def _try_banish(self, s: int) -> None:
        if self.ref_ext[s] > 0 or self.evicted_dependents[s]:
            return
        if self.material[s]:
            self.ref_int[s] = 0
            self._evict(s, False)
        root = self.s_root[s]
        # An edge is listed once per use (an operator may take one argument many times) and the
        # reference removes one copy per use, so all copies go. Lists change in place, as the
        # reference's do: the loop in _materialize may be walking one of them.
        for t in self.s_tensors[s]:
            for p, uses in Counter(self.parents[t]).items():
                ps = self.t_storage[p]
                if self.s_root[ps] != root:
                    self.evicted_dependents[ps].discard(t)
                    _remove_all(self.children[p], t, uses)
            for c, uses in Counter(self.children[t]).items():
                if self.s_root[self.t_storage[c]] != root:
                    _remove_all(self.parents[c], t, uses)
                    self._pin(c)

    # --- the schedule --------------------------------------------------------------------
    def _step(self, kind: int, x: int) -> None:
        if kind == COMPUTE:
            outs = self._create(x)
            self._materialize(outs[0], False)
            for t in outs:
                self.last_access[self.t_storage[t]] = self.clock
        elif kind == GET:
            self.ref_ext[self.t_storage[x]] += 1
        elif kind == PIN:
            if not self.defined[x]:
                self._materialize(x, True)
            self._pin(x)
        elif kind == RELEASE:
            self._release(x)

    def run(self) -> str:
        kinds, targets = self.p.step_kind.tolist(), self.p.step_target.tolist()
        self._tick_left = self.progress_every
        try:
            if self.progress is None:
                for kind, x in zip(kinds, targets):
                    self._step(kind, x)
            else:
                for k, (kind, x) in enumerate(zip(kinds, targets)):
                    self._step_now = k
                    self._step(kind, x)
                    self._tick()
        except OutOfMemory:
            return OOM
        except _RematLimit:
            return REMAT_LIMIT
        return OK

    # --- a followed source -----------------------------------------------------------------
    def step(self, until: tuple[int, int] | None = None) -> None:
        """Take the schedule's steps added since the last call, or those before `until` (a step,
        left next). The tables grow only between calls (the source lowers while the engine waits).
        Raises OutOfMemory."""
        self._grow()
        steps = self._steps
        end = len(steps) if self._avail is None else self._avail
        while self.steps_done < end and steps[self.steps_done] != until:
            kind, x = steps[self.steps_done]
            self.steps_done += 1
            self._step(kind, x)

    def step_to(self, end: int) -> None:
        """A followed program's source has reached step `end`: take the steps before it. Raises OutOfMemory."""
        self._avail = max(self._avail, end)
        self.step()

    def prepare(self, args: list[int]) -> None:
        """Make an operator's arguments resident and lock them before the operator is known (its
        outputs are told after it ran: `finish`). As `_materialize` enters a known operator: the
        arguments are touched at the clock, the resident ones locked, the others rematerialized,
        then locked. Raises OutOfMemory."""
        self.step()
        for p in args:
            ps = self.t_storage[p]
            if not self.rt.banishing or self.ref_ext[ps] > 0:
                self.last_access[ps] = self.clock
        for p in args:
            if self.defined[p]:
                self._lock(self.t_storage[p])
        self._materialize(-1, False, [-1, False, [p for p in args if not self.defined[p]], 0, False])

    def finish(self, args: list[int], op: int | None) -> None:
        """After `prepare(args)` and the operator's run: `op`, its operator in the tables (None for
        one that made nothing and wrote nothing), is created, room is made for its outputs, it is
        computed; then the arguments are unlocked and the rest of the schedule taken."""
        if op is not None:
            self.step(until=(COMPUTE, op))  # releases queued while it ran come first
            self.steps_done += 1
            outs = self._create(op)
            need = self.op_size[op]
            if self.memory + need > self.budget:
                self._free(need)
            self._compute(outs[0], False)
            for t in outs:
                self.last_access[self.t_storage[t]] = self.clock
        for p in args:
            self._unlock(self.t_storage[p])
        self.step()

    def materialize(self, t: int) -> None:
        """Make tensor t resident now (a value read outside an operator). Raises OutOfMemory."""
        self.step()
        if not self.defined[t]:
            self._materialize(t, True)

    def residents(self) -> list[tuple[int, int, bool, bool]]:
        """(storage, bytes, pinned, locked) of each storage in memory."""
        return [(s, self.s_size[s], self.pinned[s], self.ref_int[s] > 0 and not self.pinned[s])
                for s in range(len(self.material)) if self.material[s]]

    def evict(self, s: int) -> None:
        """Evict an evictable storage now, as the policy would (tests force evictions with it)."""
        if s not in self.pool:
            raise ValueError(f"storage {s} is not evictable")
        self._evict(s, True)

    def _recost(self, op: int, cost: int) -> None:
        """An operator's cost, known once it has run (a measured clock): its storages' compute follows."""
        delta = cost - self.op_cost[op]
        self.op_cost[op] = cost
        for s in {self.t_storage[t] for t in range(self.op_start[op], self.op_start[op] + self.op_nout[op])}:
            self.s_compute[s] += delta


# Each feature of the score language, read off the engine's state (`e`) for storage `s`.
_FEATURE_SOURCE = {
    "compute": "e.s_compute[s]", "size": "e.s_size[s]", "staleness": "e.clock - e.last_access[s]",
    "estar": "e.region_fwd[s].compute + e.region_rev[s].compute", "ancestors": "e.region_rev[s].compute",
    "eqclass": "e._eq_class(s)", "fresh_estar": "fresh[0]", "fresh_staleness": "fresh[1]",
    "last_access": "e.last_access[s]", "clock": "e.clock", "evictions": "e.s_evictions[s]",
    "remats": "e.s_remats[s]", "budget": "e.budget", "resident": "e.memory",
}


def _compiled(engine: Engine, body: str, fresh: bool):
    """`body`, an expression over the engine `e` and storage `s`, as a function of s; `fresh`: it
    reads the fresh traversal."""
    fresh_line = "    fresh = e._fresh(s)\n" if fresh else ""
    namespace = dict(fm.NAMESPACE, e=engine)
    exec(f"def f(s):\n{fresh_line}    return {body}\n", namespace)  # noqa: S102 - our own text
    return namespace["f"]


def _formula_score(engine: Engine, formula: fm.Formula):
    """The formula compiled once into a Python function of the storage, for this engine."""
    if formula.is_random:
        return None
    return _compiled(engine, fm.python_source(formula, _FEATURE_SOURCE), FRESH_NEIGHBORHOOD in formula.needs)

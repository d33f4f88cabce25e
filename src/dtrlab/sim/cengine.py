"""Glue to the compiled engine: the derived arrays it walks, and the policy in its terms."""

from __future__ import annotations

import math

import numpy as np

from ..trace.lower import Program
from .policies import EQ_CLASS, NEIGHBORHOOD, Policy
from .result import OK, OOM, REMAT_LIMIT
from .runtimes import Runtime

try:
    from . import _cengine
except ImportError:  # pragma: no cover - depends on the build
    _cengine = None

MAX_OUTPUTS = 64  # the compiled engine keeps an operator's outputs on the stack

# Numerator kinds and specials, as _cengine.c numbers them.
NUM_E, NUM_EQ, NUM_LOCAL, NUM_ONE, NUM_FRESH, NUM_ANCESTORS = range(6)
SPECIAL_SCORE, SPECIAL_LRU, SPECIAL_RANDOM = range(3)

# name -> (numerator, divide by size, divide by staleness (2: the neighbourhood's), special)
_SHAPES = {
    "dtr": (NUM_E, 1, 1, SPECIAL_SCORE),
    "dtr-eq": (NUM_EQ, 1, 1, SPECIAL_SCORE),
    "dtr-local": (NUM_LOCAL, 1, 1, SPECIAL_SCORE),
    "dtr-unopt": (NUM_FRESH, 1, 2, SPECIAL_SCORE),
    "dtr-fresh": (NUM_FRESH, 1, 1, SPECIAL_SCORE),
    "msps": (NUM_ANCESTORS, 1, 0, SPECIAL_SCORE),
    "lru": (NUM_ONE, 0, 0, SPECIAL_LRU),
    "size": (NUM_ONE, 1, 0, SPECIAL_SCORE),
    "random": (NUM_ONE, 0, 0, SPECIAL_RANDOM),
}
for _cost, _num in (("e", NUM_E), ("eq", NUM_EQ), ("local", NUM_LOCAL), ("none", NUM_ONE)):
    for _size in (1, 0):
        for _stale in (1, 0):
            _name = "ab-" + "-".join([_cost] + (["size"] if _size else []) + (["stale"] if _stale else []))
            _special = SPECIAL_RANDOM if (_cost == "none" and not _size and not _stale) else SPECIAL_SCORE
            _SHAPES[_name] = (_num, _size, _stale, _special)


def compiled_policy(policy: Policy) -> bool:
    """Whether the compiled engine knows this policy (every built-in one, when it is built)."""
    return _cengine is not None and policy.builtin and policy.name in _SHAPES


def supports(policy: Policy, runtime: Runtime, program: Program) -> bool:
    return (compiled_policy(policy) and not runtime.banishing
            and int(program.op_n_out.max(initial=0)) <= MAX_OUTPUTS)


def _adjacency(src: np.ndarray, dst: np.ndarray, birth: np.ndarray, n: int):
    """CSR of distinct (src -> dst) edges, each at its first birth, ascending birth per src."""
    order = np.lexsort((birth, dst, src))
    src, dst, birth = src[order], dst[order], birth[order]
    first = np.ones(len(src), bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    src, dst, birth = src[first], dst[first], birth[first]
    order = np.lexsort((birth, src))
    ptr = np.zeros(n + 1, np.int32)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    return ptr, dst[order].astype(np.int32), birth[order].astype(np.int32)


def _prepared(program: Program) -> tuple:
    """The arrays the compiled engine walks, derived once per program."""
    prep = program.meta.get("_cengine_bufs")
    if prep is not None:
        return prep
    i32, i64 = np.int32, np.int64
    op_size = np.zeros(program.n_ops, i64)
    np.add.at(op_size, program.tensor_op, program.tensor_size_bytes)
    # storage -> tensors, ascending tensor id (a stable sort keeps creation order)
    order = np.argsort(program.tensor_storage, kind="stable").astype(i32)
    s_tptr = np.zeros(program.n_storages + 1, i32)
    np.cumsum(np.bincount(program.tensor_storage, minlength=program.n_storages), out=s_tptr[1:])
    # storage-level edges: (input storage, output storage) of every operator, born with it
    n_args = np.diff(program.op_arg_ptr)
    arg_op = np.repeat(np.arange(program.n_ops, dtype=i32), n_args)
    per_arg = program.op_n_out[arg_op]
    src = np.repeat(program.tensor_storage[program.op_args], per_arg)
    birth = np.repeat(arg_op, per_arg)
    first_out = np.repeat(program.op_out_start[arg_op], per_arg)
    within = np.arange(len(src)) - np.repeat(np.cumsum(per_arg) - per_arg, per_arg)
    dst = program.tensor_storage[first_out + within]
    keep = src != dst  # a storage is never its own neighbour in a traversal
    src, dst, birth = src[keep], dst[keep], birth[keep]
    f_ptr, f_list, f_birth = _adjacency(src, dst, birth, program.n_storages)
    r_ptr, r_list, r_birth = _adjacency(dst, src, birth, program.n_storages)
    prep = tuple(np.ascontiguousarray(a) for a in (
        program.op_cost_ns.astype(i64), op_size, program.op_out_start.astype(i32),
        program.op_n_out.astype(i32), program.op_arg_ptr.astype(i32), program.op_args.astype(i32),
        program.tensor_op.astype(i32), program.tensor_storage.astype(i32),
        program.tensor_size_bytes.astype(i64), program.storage_size_bytes.astype(i64),
        program.storage_root.astype(i32), s_tptr, order,
        program.step_kind.astype(np.int8), program.step_target.astype(i32),
        f_ptr, f_list, f_birth, r_ptr, r_list, r_birth))
    program.meta["_cengine_bufs"] = prep
    return prep


_OUTCOMES = {0: OK, 1: OOM, 2: REMAT_LIMIT}


def run_compiled(program: Program, budget_bytes: int | None, policy: Policy, runtime: Runtime,
                 remat_limit_ns: float = math.inf, seed: int = 0, counts: bool = False,
                 log: bool = False, engine_stats: bool = False, check: bool = False) -> dict:
    """One run on the compiled engine: the RunResult counters, plus per-storage counts, the
    eviction log (clock_ns, storage, by_policy rows) and the engine's own work when asked.

    engine_stats adds `region_rebuilds` (e* regions traversed afresh) and `region_updates`
    (trusted reverse regions updated in place instead; see _cengine.c). check compares every
    trusted region with a fresh traversal after each step and raises AssertionError at the first
    difference: slow, for tests."""
    num, den_size, den_stale, special = _SHAPES[policy.name]
    arrays = None
    if counts:
        arrays = tuple(np.zeros(program.n_storages, np.int64) for _ in range(3))
    out = _cengine.run(_prepared(program), -1 if budget_bytes is None else int(budget_bytes), num,
                       den_size, den_stale, special, int(runtime.eager),
                       int(runtime.optimized and NEIGHBORHOOD in policy.needs),
                       int(runtime.optimized and EQ_CLASS in policy.needs),
                       float(remat_limit_ns), int(seed) & 0x7FFFFFFFFFFFFFFF, arrays, log, check)
    out["outcome"] = _OUTCOMES[out["outcome"]]
    raw_log = out.pop("log")
    work = {k: out.pop(k) for k in ("region_rebuilds", "region_updates")}
    if engine_stats:
        out.update(work)
    if counts:
        out["storage_counts"] = dict(zip(("policy_evictions", "eager_evictions", "rematerializations"), arrays))
    if log:
        out["eviction_log"] = np.frombuffer(raw_log, np.int64).reshape(-1, 3)
    return out

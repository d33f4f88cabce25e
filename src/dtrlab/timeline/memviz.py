"""A run as a PyTorch memory snapshot (the pickle of `torch.cuda.memory._snapshot()`), for
pytorch.org/memory_viz: one segment, the device trace of alloc / free_requested / free_completed
(and oom) actions, and the blocks as they stand at the end of the run or window.

Owns the placement: addresses come from first-fit in one segment; they are modelled, not measured
(the simulator knows sizes, not where an allocator would put them).
"""

from __future__ import annotations

import bisect
import pickle
from dataclasses import dataclass
from pathlib import Path


from ..sim.instruments import COMPUTE, EVENT_KINDS, EVICT, EVICT_EAGER, REMAT
from .source import Timeline

# Where the modelled segment starts (a plausible device address; any would do).
SEGMENT_BASE = 0x7F0000000000
# CUDA's caching allocator rounds every block to 512 bytes; the model does too, so blocks look as
# they would (requested_size keeps the exact bytes, and the peak is of those).
ALIGN_BYTES = 512
DEVICE, STREAM = 0, 0


class FirstFit:
    """First-fit placement in one growing segment: free gaps by address, the lowest that fits wins."""

    def __init__(self) -> None:
        self.starts: list[int] = []  # free gaps, by address
        self.sizes: list[int] = []
        self.top = 0  # the segment's end: everything above is unused
        self.high_water = 0

    def alloc(self, size: int) -> int:
        for k, gap in enumerate(self.sizes):
            if gap >= size:
                offset = self.starts[k]
                if gap == size:
                    del self.starts[k], self.sizes[k]
                else:
                    self.starts[k] += size
                    self.sizes[k] -= size
                return offset
        if self.starts and self.starts[-1] + self.sizes[-1] == self.top:  # the last gap touches the top
            offset = self.starts.pop()
            self.sizes.pop()
        else:
            offset = self.top
        self.top = offset + size
        self.high_water = max(self.high_water, self.top)
        return offset

    def free(self, offset: int, size: int) -> None:
        k = bisect.bisect_left(self.starts, offset)
        self.starts.insert(k, offset)
        self.sizes.insert(k, size)
        if k + 1 < len(self.starts) and offset + size == self.starts[k + 1]:  # merge with the next
            self.sizes[k] += self.sizes.pop(k + 1)
            self.starts.pop(k + 1)
        if k > 0 and self.starts[k - 1] + self.sizes[k - 1] == offset:  # and with the previous
            self.sizes[k - 1] += self.sizes.pop(k)
            self.starts.pop(k)
        if self.starts and self.starts[-1] + self.sizes[-1] == self.top:
            self.top = self.starts.pop()
            self.sizes.pop()


def _rounded(size: int) -> int:
    return -(-size // ALIGN_BYTES) * ALIGN_BYTES


def _free(trace: list, offset: int, size: int, clock_ns: int, frames: list) -> None:
    for action in ("free_requested", "free_completed"):
        trace.append({"action": action, "addr": SEGMENT_BASE + offset, "size": size, "stream": STREAM,
                      "time_us": clock_ns // 1000, "frames": frames})


@dataclass(frozen=True)
class MemvizStats:
    """What a written snapshot holds."""

    entries: int  # device trace entries
    allocs: int
    frees: int
    segment_bytes: int
    peak_bytes: int  # the largest sum of requested bytes alive, over the entries written


def snapshot(tl: Timeline) -> tuple[dict, MemvizStats]:
    """The snapshot dict of tl (its window) and the counts of what it holds."""
    program, log = tl.program, tl.log
    keep = tl.kept()
    size_of = program.storage_size_bytes
    names = program.tensor_names
    roots = program.storage_root
    out_start, n_out, t_storage, t_op = (program.op_out_start, program.op_n_out, program.tensor_storage,
                                         program.tensor_op)
    t_size = program.tensor_size_bytes
    made = (EVENT_KINDS[COMPUTE], EVENT_KINDS[REMAT])
    freed = (EVENT_KINDS[EVICT], EVENT_KINDS[EVICT_EAGER])
    fit = FirstFit()
    placed: dict[int, int] = {}  # resident storage -> offset in the segment
    trace: list[dict] = []
    alive = peak = 0
    allocs = frees = 0
    entered = False

    def frames_of(s: int, what: str) -> list[dict]:
        # memory_viz shows a block's stack; a simulated block's "stack" is what made it and why.
        return [{"filename": program.name, "line": 0, "name": f"{what} {names[int(roots[s])]}"}]

    for r, (k, clock, s, t) in enumerate(zip(log.kind.tolist(), log.clock_ns.tolist(), log.storage.tolist(),
                                             log.tensor.tolist())):
        inside = bool(keep[r])
        if tl.window is not None and clock > tl.window.end_ns:
            break  # the snapshot is taken at the window's end
        if inside and not entered:
            # The trace starts here; what is resident already counts (its allocs came before it).
            entered = True
            alive = peak = sum(int(size_of[x]) for x in placed)
        if k in made:
            op = int(t_op[t])
            what = "compute" if k == made[0] else "remat"
            copies = []  # outputs already resident: computed again, then dropped (the engine counts them)
            for u in range(int(out_start[op]), int(out_start[op] + n_out[op])):
                su = int(t_storage[u])
                size = int(size_of[su]) if t_size[u] else 0
                if size == 0:
                    continue
                if su in placed:
                    size = int(t_size[u])
                    copies.append((fit.alloc(_rounded(size)), size, su))
                    offset = copies[-1][0]
                else:
                    offset = placed[su] = fit.alloc(_rounded(size))
                if inside:
                    trace.append({"action": "alloc", "addr": SEGMENT_BASE + offset, "size": size,
                                  "stream": STREAM, "time_us": clock // 1000, "frames": frames_of(su, what)})
                    alive += size
                    peak = max(peak, alive)
                    allocs += 1
            for offset, size, su in copies:
                fit.free(offset, _rounded(size))
                if inside:
                    _free(trace, offset, size, clock, frames_of(su, "drop the copy of"))
                    alive -= size
                    frees += 1
        elif k in freed and s in placed:
            size = int(size_of[s])
            offset = placed.pop(s)
            fit.free(offset, _rounded(size))
            if inside:
                _free(trace, offset, size, clock, frames_of(s, "evict" if k == freed[0] else "evict (eager)"))
                alive -= size
                frees += 1
    oom = tl.oom
    if oom is not None and (tl.window is None or tl.window.start_ns <= oom.clock_ns <= tl.window.end_ns):
        trace.append({"action": "oom", "addr": 0, "size": oom.need_bytes, "stream": STREAM,
                      "time_us": oom.clock_ns // 1000, "device_free": max(oom.budget_bytes - oom.memory_bytes, 0),
                      "frames": []})
    total = max(_rounded(fit.high_water), ALIGN_BYTES)
    blocks, cursor = [], 0
    for s, offset in sorted(placed.items(), key=lambda kv: kv[1]):
        if offset > cursor:
            blocks.append({"address": SEGMENT_BASE + cursor, "size": offset - cursor, "requested_size": 0,
                           "state": "inactive", "frames": []})
        size = int(size_of[s])
        blocks.append({"address": SEGMENT_BASE + offset, "size": _rounded(size), "requested_size": size,
                       "state": "active_allocated", "frames": frames_of(s, "resident")})
        cursor = offset + _rounded(size)
    if cursor < total:
        blocks.append({"address": SEGMENT_BASE + cursor, "size": total - cursor, "requested_size": 0,
                       "state": "inactive", "frames": []})
    active = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    segment = {"device": DEVICE, "address": SEGMENT_BASE, "total_size": total, "allocated_size": active,
               "active_size": active, "requested_size": sum(b["requested_size"] for b in blocks),
               "stream": STREAM, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
               "frames": [], "blocks": blocks}
    data = {"segments": [segment], "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "modelled_by": "dtrlab (first-fit placement)"}}
    return data, MemvizStats(len(trace), allocs, frees, total, peak)


def write_memviz(tl: Timeline, path: str | Path) -> MemvizStats:
    data, stats = snapshot(tl)
    with open(path, "wb") as f:
        pickle.dump(data, f, protocol=pickle.HIGHEST_PROTOCOL)
    return stats

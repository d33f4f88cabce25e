"""Why a captured trace's simulated peak can exceed the recorder's: MUTATE as a copy against an in-place write.

Owns in_place() (a trace with every MUTATE rewritten as a write into the same storage) and PeakGap
(the recorder's peak and both simulated ones). Needs no torch: the report reads it.

The trace format, as simrd parses it, makes a MUTATE a new version of the tensor on a new storage
of the whole written storage's size, and releases the old version; the old storage lives on while
another view of it is alive. PyTorch writes in place: through a view, into the one storage. The
captured LSTM shows it: LSTMCell splits its gates into four views of one storage and applies
sigmoid_/tanh_ to each, so the trace holds up to four extra copies of the gates a step.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from ..sim.simulate import baseline
from ..trace.lower import lower
from ..trace.read import (Alias, Call, Constant, CopyFrom, Instruction, Memory, Mutate, Release, TraceSource,
                          TraceText, open_source, read_trace)


@dataclass(frozen=True)
class PeakGap:
    """One trace's unconstrained peaks: as simulated (MUTATE a copy), with MUTATE in place, and
    the recorder's (live storages counted once, by data pointer, when the trace was captured)."""

    trace: str
    sha256: str
    mutates: dict  # operator name -> MUTATE instructions
    simulated_peak_bytes: int
    in_place_peak_bytes: int
    recorded_peak_bytes: int

    @property
    def gap_bytes(self) -> int:
        return self.simulated_peak_bytes - self.recorded_peak_bytes

    @property
    def gap_percent(self) -> float:
        return 100.0 * self.gap_bytes / self.recorded_peak_bytes if self.recorded_peak_bytes else 0.0

    @property
    def explained(self) -> bool:
        """True when writing in place gives exactly the recorder's peak."""
        return self.in_place_peak_bytes == self.recorded_peak_bytes


def in_place(instructions: tuple[Instruction, ...]) -> tuple[Instruction, ...]:
    """The same trace with each MUTATE written as an in-place write: the operator makes an alias of
    each written argument (same storage, no new bytes), and the argument's name is rebound to it
    (COPY_FROM releases the old version; the new name is then dropped)."""
    taken = {x.name for x in instructions if isinstance(x, (Constant, Memory))}
    out: list[Instruction] = []
    k = 0
    for x in instructions:
        if not isinstance(x, Mutate):
            out.append(x)
            continue
        names = []
        for _ in x.mutate:
            k += 1
            name = f"inplace{k}"
            while name in taken:  # a trace may use any names: never reuse one of its own
                name = "_" + name
            names.append(name)
        out.append(Call(x.line, x.name, x.args, tuple(names), x.time_ns))
        for name, m in zip(names, x.mutate):
            out += [Memory(x.line, name, 0), Alias(x.line, name, m)]
        for name, m in zip(names, x.mutate):
            out += [CopyFrom(x.line, x.args[m], name), Release(x.line, name)]
    return tuple(out)


def peak_gap(text: TraceText, recorded_peak_bytes: int) -> PeakGap:
    """The three peaks of one trace (both simulated ones through dtrlab's own lowering)."""
    simulated = baseline(lower(text)).peak_bytes
    rewritten = baseline(lower(replace(text, instructions=in_place(text.instructions)))).peak_bytes
    mutates = Counter(x.name for x in text.instructions if isinstance(x, Mutate))
    return PeakGap(text.source.name, text.sha256, dict(sorted(mutates.items())), simulated, rewritten,
                   recorded_peak_bytes)


def recorded_sources(path: str | Path) -> list[tuple[TraceSource, int]]:
    """The traces of a folder whose manifest.json gives a recorder peak (`recorded_peak_bytes`,
    as `dtrlab.capture.ship` writes it), each with that peak; none for other sources."""
    manifest = Path(path) / "manifest.json"
    if not manifest.is_file():
        return []
    peaks = {m.get("name", m.get("log")): m.get("recorded_peak_bytes")
             for m in json.loads(manifest.read_text()).get("models", []) if isinstance(m, dict)}
    return [(s, int(peaks[s.title])) for s in open_source(path) if isinstance(peaks.get(s.title), int)]


def peak_gaps(path: str | Path, sha256s: set[str] | None = None) -> tuple[PeakGap, ...]:
    """A PeakGap for each trace of `path` that carries a recorder peak (those in sha256s, if given)."""
    out = []
    for source, recorded in recorded_sources(path):
        text = read_trace(source)
        if sha256s is None or text.sha256 in sha256s:
            out.append(peak_gap(text, recorded))
    return tuple(out)


def measure_zoo() -> list[PeakGap]:  # pragma: no cover - minutes on a CPU; the docs' table
    """Capture every zoo model at its default sizes (torch, CPU) and measure its three peaks."""
    import torch

    from .recorder import record
    from .save import to_text
    from .zoo import ZOO

    torch.manual_seed(0)
    out = []
    for name, model in ZOO.items():
        step = model.make(device="cpu")
        step()  # warm-up: lazily made buffers are not part of the step
        capture = record(step)
        out.append(peak_gap(to_text(capture, name), capture.peak_bytes))
    return out


if __name__ == "__main__":  # pragma: no cover
    for g in measure_zoo():
        print(f"{g.trace}: {sum(g.mutates.values())} MUTATEs, recorder {g.recorded_peak_bytes:,} B, simulated "
              f"{g.simulated_peak_bytes:,} B ({g.gap_percent:.1f}%), in place {g.in_place_peak_bytes:,} B")

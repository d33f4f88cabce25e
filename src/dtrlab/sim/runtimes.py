"""The runtimes (how storages are freed and which bookkeeping runs), by name and reference alias,
and the eviction search's shortcuts, named options a runtime's name takes after a `+`."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import UsageError


@dataclass(frozen=True)
class Runtime:
    """One DTR runtime: eager eviction at last release, incremental e*/eq-class upkeep, banishing."""

    name: str
    reference: str  # the reference simulator's class name
    eager: bool  # free a storage when its last external reference is released
    optimized: bool  # maintain e* regions and equivalence classes incrementally
    banishing: bool  # the reference's RuntimeV1: free and detach storages for good
    # the search's shortcuts (exact when both are off, as the reference searches)
    sample: bool = False  # score ceil(sqrt(pool)) storages drawn at random (with --seed), not all
    small_percent: int = 0  # leave out storages below this % of the pool's mean size (0: none)


RUNTIMES: dict[str, Runtime] = {
    r.name: r
    for r in (
        Runtime("eager-optimized", "RuntimeV2EagerOptimized", True, True, False),
        Runtime("optimized", "RuntimeV2Optimized", False, True, False),
        Runtime("eager", "RuntimeV2Eager", True, False, False),
        Runtime("lazy", "RuntimeV2", False, False, False),
        Runtime("banishing", "RuntimeV1", False, False, True),
    )
}
_ALIASES = {r.reference.lower(): r for r in RUNTIMES.values()}

# The DTR authors' own runtime cut its search's cost these two ways: `NAME+sample`, `NAME+small`,
# or both (`eager-optimized+sample+small`). A search that finds no candidate (a sample of small
# storages only) falls back to the exact one.
SMALL_PERCENT = 1
SEARCH_OPTIONS = {"sample": dict(sample=True), "small": dict(small_percent=SMALL_PERCENT)}

from ..defaults import DEFAULT_RUNTIME  # noqa: F401 - re-exported: one definition, in defaults


def get_runtime(name: str | Runtime) -> Runtime:
    if isinstance(name, Runtime):
        return name
    key, *options = name.strip().lower().split("+")
    runtime = RUNTIMES.get(key.strip()) or _ALIASES.get(key.strip())
    if runtime is None:
        known = ", ".join(RUNTIMES)
        raise UsageError(f"unknown runtime {name!r} (known: {known}, or the reference class names; "
                         f"search shortcuts after +: {', '.join(SEARCH_OPTIONS)})")
    wanted = sorted({o.strip() for o in options}, key=list(SEARCH_OPTIONS).index) if all(
        o.strip() in SEARCH_OPTIONS for o in options) else None
    if wanted is None:
        bad = next(o.strip() for o in options if o.strip() not in SEARCH_OPTIONS)
        raise UsageError(f"unknown search option {bad!r} in runtime {name!r} "
                         f"(known: {', '.join(SEARCH_OPTIONS)})")
    if not wanted:
        return runtime
    fields = {k: v for o in wanted for k, v in SEARCH_OPTIONS[o].items()}
    return replace(runtime, name="+".join([runtime.name, *wanted]), **fields)

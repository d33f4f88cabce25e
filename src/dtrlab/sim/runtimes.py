"""The runtimes (how storages are freed and which bookkeeping runs), by name and reference alias."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError


@dataclass(frozen=True)
class Runtime:
    """One DTR runtime: eager eviction at last release, incremental e*/eq-class upkeep, banishing."""

    name: str
    reference: str  # the reference simulator's class name
    eager: bool  # free a storage when its last external reference is released
    optimized: bool  # maintain e* regions and equivalence classes incrementally
    banishing: bool  # the reference's RuntimeV1: free and detach storages for good


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

from ..defaults import DEFAULT_RUNTIME  # noqa: F401 - re-exported: one definition, in defaults


def get_runtime(name: str | Runtime) -> Runtime:
    if isinstance(name, Runtime):
        return name
    key = name.strip().lower()
    runtime = RUNTIMES.get(key) or _ALIASES.get(key)
    if runtime is None:
        known = ", ".join(RUNTIMES)
        raise UsageError(f"unknown runtime {name!r} (known: {known}, or the reference class names)")
    return runtime

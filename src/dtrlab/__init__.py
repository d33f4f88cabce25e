"""dtrlab: a toolkit for studying Dynamic Tensor Rematerialization."""
from .version import __version__  # noqa: F401


def __getattr__(name: str):
    # dtrlab.stage loads torch: only on first use, so the CLI and the simulator never pay for it.
    if name == "stage":
        from .staged.staging import stage
        return stage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

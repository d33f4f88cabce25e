"""What the CLI commands share when they print: JSON without inf or nan.

Every command module prints its JSON through here, so a non-finite figure is null everywhere.
"""

from __future__ import annotations

import json
import math
from typing import Any

import typer


def clean(value: Any) -> Any:
    """JSON has no inf/nan: they become null, in nested dicts and lists too."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def print_json(value: Any) -> None:
    typer.echo(json.dumps(clean(value), indent=2, allow_nan=False))

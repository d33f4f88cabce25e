"""Command-line values converted by plain Python: bool, str, int, float, Path, Enum, Optional, List, Tuple.

Owns `plain_coercions(command)`. Recent typers convert every parameter's value through a
pydantic TypeAdapter, built when the command runs; importing pydantic and building the adapters
costs about 110 ms a process, most of a cached `dtrlab simulate`. dtrlab's parameters are all of
the simple types above, so each gets a plain converter instead. A typer without that machinery
(no `_runtime_param` on its parameters), and any annotation not listed, keep typer's own path.
"""

from __future__ import annotations

import enum
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import typer

_TRUE, _FALSE = {"1", "true", "t", "yes", "y", "on"}, {"0", "false", "f", "no", "n", "off"}


def _bool(value: Any) -> bool:
    # A flag arrives as a bool already; a string is read as click reads one.
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ValueError(value)


_SCALARS: dict[Any, tuple[Callable[[Any], Any], str]] = {
    bool: (_bool, "true or false"),
    str: (str, "a string"),
    int: (int, "an integer"),
    float: (float, "a number"),
    Path: (Path, "a path"),
}


@dataclass(frozen=True)
class _PlainParam:
    """Stands in for typer's RuntimeParam: `coerce` is the one method typer calls on it."""

    convert: Callable[[Any], Any]
    what: str

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        # The same rules as typer's RuntimeParam.coerce for a missing or a lone multi-value.
        many = param.multiple or param.nargs == -1
        if value is None:
            return () if many else None
        if many and isinstance(value, str):
            raise typer.BadParameter("Value must be an iterable.", ctx=ctx, param=param)
        try:
            return self.convert(value)
        except (TypeError, ValueError):
            raise typer.BadParameter(f"{value!r} is not {self.what}", ctx=ctx, param=param) from None


def _converter(annotation: Any) -> tuple[Callable[[Any], Any], str] | None:
    """A function converting a command-line value to `annotation`, and what it expects; None if not plain."""
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation, "one of " + ", ".join(str(m.value) for m in annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union and len(args) == 2 and type(None) in args:
        return _converter(next(a for a in args if a is not type(None)))
    if origin is list and len(args) == 1:
        inner = _converter(args[0])
        return None if inner is None else ((lambda v, c=inner[0]: [c(x) for x in v]), inner[1])
    if origin is tuple and args and Ellipsis not in args:
        inners = [_converter(a) for a in args]
        if any(i is None for i in inners):
            return None
        converts = [i[0] for i in inners]

        def tuple_of(values: Any) -> tuple:
            if len(values) != len(converts):
                raise ValueError(f"{len(converts)} values are needed")
            return tuple(c(v) for c, v in zip(converts, values))

        return tuple_of, f"{len(converts)} values (" + ", ".join(i[1] for i in inners) + ")"
    return None


def plain_coercions(command: Any, parent: Any = None) -> None:
    """Give every parameter of `command` and of its subcommands a plain converter where there is one.

    The help option is included: click makes it on first use (and keeps it), so it is made here,
    in a context like the one a run gives the command.
    """
    ctx = command.context_class(command, parent=parent, **command.context_settings)
    help_option = command.get_help_option(ctx)
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        descriptor = getattr(param, "type_descriptor", None)
        if getattr(param, "_runtime_param", False) is not None or descriptor is None:
            continue  # not a typer with pydantic conversion, or converted already
        if getattr(descriptor, "file_annotation", None) is not None:
            continue  # typer opens files itself
        found = _converter(descriptor.annotation)
        if found is not None:
            param._runtime_param = _PlainParam(*found)
    for sub in getattr(command, "commands", {}).values():
        plain_coercions(sub, ctx)

"""A user's step factory (`--script FILE.py:FUNCTION`): loading it, calling it, and running its step.

Owns what a mistake in the user's code becomes: one line naming the user's file and line and what is
wrong (UserCodeError), with the user's own frames when their code raised, never dtrlab's.
"""

from __future__ import annotations

import functools
import json
import importlib.util
import inspect
import os
import sysconfig
import traceback
from pathlib import Path
from types import TracebackType
from typing import Callable

from ..errors import DtrlabError, UsageError, UserCodeError

_DTRLAB_DIR = os.path.realpath(Path(__file__).resolve().parents[1]) + os.sep
# Frames under these folders are not the user's: dtrlab's own, and the installed libraries' (torch's).
_NOT_THEIRS = (_DTRLAB_DIR, *sorted({os.path.realpath(p) + os.sep for p in (
    sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")) if p}))

# What gives each argument a factory may ask for, for the line that says nothing gave it.
_GIVEN_BY = {"batch": "--batch N", "device": "--device"}


def _theirs(filename: str) -> bool:
    """Whether a frame's file is the user's: not dtrlab's, not a library's, not Python's own."""
    return not filename.startswith("<") and not os.path.realpath(filename).startswith(_NOT_THEIRS)


def _user_frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(tb) if _theirs(f.filename)]


def _raised_in_dtrlab(tb: TracebackType | None) -> bool:
    """Whether the innermost frame is dtrlab's own code: an error there is a bug in dtrlab, even
    when the user's step called it (an error of an operator the step ran is raised in torch's)."""
    frames = traceback.extract_tb(tb)
    return bool(frames) and os.path.realpath(frames[-1].filename).startswith(_DTRLAB_DIR)


def _raised(exc: BaseException, what: str, fallback: str) -> UserCodeError:
    """The UserCodeError of `exc`, raised by the user's code: at its innermost user frame."""
    frames = _user_frames(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else fallback
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = "".join(traceback.format_list(frames))
    return UserCodeError(f"{where}: {what} raised {type(exc).__name__}" + (f": {message}" if message else ""),
                         frames=text)


def _where(obj: object, fallback: str) -> str:
    """file:line of a function's definition (or of a callable object's __call__)."""
    code = getattr(obj, "__code__", None) or getattr(getattr(obj, "__call__", None), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else fallback


def load_factory(spec: str) -> tuple[Callable, str, str]:
    """The function FUNCTION of FILE.py named by `spec`, its name, and file:line of its definition.
    The script runs as a module; an error in it is the user's, at its file and line."""
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise UsageError(f"--script takes FILE.py:FUNCTION, got {spec!r}")
    if not Path(path).is_file():
        raise UsageError(f"{path}: no such file")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    if module_spec is None or module_spec.loader is None:
        raise UsageError(f"{path}: not a Python file (--script takes FILE.py:FUNCTION)")
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except SyntaxError as exc:
        line = exc.lineno if exc.lineno is not None else 1
        raise UserCodeError(f"{exc.filename or path}:{line}: syntax error: {exc.msg}") from exc
    except Exception as exc:  # the script's own top-level code
        raise _raised(exc, "the script", f"{path}:1") from exc
    factory = getattr(module, func, None)
    if factory is None:
        raise UsageError(f"{path} has no function {func!r}")
    if not callable(factory):
        raise UsageError(f"{path}: {func} is a {type(factory).__name__}, not a function")
    return factory, func, _where(factory, f"{path}:1")


def call_factory(factory: Callable, kwargs: dict, what: str, where: str | None = None) -> Callable:
    """Call a step factory with the keyword arguments it accepts, and check that it gave a step.

    `where` (file:line) marks a user's factory: its mistakes and errors are UserCodeErrors there,
    and the step it returns is guarded (run_guarded). A zoo factory (where None) is dtrlab's own.
    """
    params = inspect.signature(factory).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    # device is offered to every factory; a factory that takes none runs where it chooses.
    prefix = f"{where}: " if where else ""
    unknown = [k for k in kwargs if k not in params and not takes_any and k != "device"]
    if unknown:
        raise UsageError(f"{prefix}{what} takes no argument {', '.join(sorted(unknown))} "
                         f"(it takes: {', '.join(params) or 'nothing'})")
    given = {k: v for k, v in kwargs.items() if k in params or takes_any}
    for name, p in params.items():
        if p.default is not p.empty or name in given and p.kind is not p.POSITIONAL_ONLY:
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        hint = _GIVEN_BY.get(name, f"--size {name}=VALUE")
        raise UsageError(f"{prefix}{what} needs the argument {name!r}, which nothing gives: give {hint}, "
                         "or give it a default")
    if where is None:
        step = factory(**given)
    else:
        try:
            step = factory(**given)
        except DtrlabError:
            raise
        except Exception as exc:
            raise _raised(exc, what, where) from exc
    if not callable(step):
        hint = " (does it end with `return step`?)" if step is None else ""
        raise UsageError(f"{prefix}{what} returned {_named(step)}, not a step: a function that takes no "
                         f"arguments{hint}")
    needs = _required(step)
    if needs:
        raise UsageError(f"{_where(step, where) + ': ' if where else ''}the step {what} returned takes the "
                         f"argument{'s' if len(needs) > 1 else ''} {', '.join(needs)}; a step takes none")
    return step if where is None else run_guarded(step, what)


def _named(value: object) -> str:
    if value is None:
        return "None"
    text = repr(value)
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({text if len(text) <= 40 else text[:37] + '...'})"


def _required(step: Callable) -> list[str]:
    """The parameters a step cannot be called without (none for a step that can be called bare)."""
    try:
        params = inspect.signature(step).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: calling it will tell
        return []
    return [p.name for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def run_guarded(step: Callable, what: str) -> Callable:
    """The user's step, whose errors are UserCodeErrors at the user's line. dtrlab's own errors
    pass through as they are: an out-of-memory stop (a DtrlabError) and a bug of dtrlab's (raised
    in dtrlab's code, not in the user's or in an operator the step ran) keep their meaning."""
    @functools.wraps(step)
    def guarded():
        try:
            return step()
        except DtrlabError:
            raise
        except Exception as exc:
            if _raised_in_dtrlab(exc.__traceback__):
                raise
            raise _raised(exc, f"the step of {what}", _where(step, what)) from exc
    return guarded


def _size_kwargs(sizes: list[str]) -> dict:
    """KEY=VALUE options as keyword arguments; values are JSON (3, [2, 2]) or plain strings."""
    out = {}
    for item in sizes:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--size takes KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
        if isinstance(out[key], list):
            out[key] = tuple(out[key])
    return out


def make_step(model: str | None, script: str | None, batch: int | None, device: str,
              size: list[str] | None) -> tuple:
    """The step a command's MODEL|--script, --batch, --device and --size name: (step, label, the
    factory's keyword arguments). Shared by `dtrlab capture` and `dtrlab run`; imports torch. A
    mistake in a user's script is one line at its file and line (capture.factory)."""
    if (model is None) == (script is None):
        raise UsageError("give exactly one of MODEL and --script")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"--device must be cpu or cuda, got {device!r}")
    if batch is not None and batch < 1:
        raise UsageError(f"--batch must be at least 1, got {batch}")
    try:
        import torch
    except ModuleNotFoundError:
        raise UsageError("this command needs torch: pip install -e '.[capture]'") from None
    from .zoo import ZOO

    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError("CUDA is not available on this machine")
    kwargs = _size_kwargs(list(size or []))
    kwargs["device"] = device
    if model is not None:
        if model not in ZOO:
            raise UsageError(f"unknown model {model!r} (models: {', '.join(ZOO)})")
        kwargs["batch"] = batch if batch is not None else kwargs.get("batch", ZOO[model].batch)  # --size batch=N too
        return call_factory(ZOO[model].make, kwargs, model), model, kwargs
    factory, name, where = load_factory(script)
    if batch is not None:
        kwargs["batch"] = batch
    return call_factory(factory, kwargs, name, where), Path(script.rpartition(":")[0]).stem, kwargs

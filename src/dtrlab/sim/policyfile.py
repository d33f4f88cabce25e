"""Policy files: a TOML file declaring named score formulas (`--policies FILE.toml`), and which
policies a command runs given its --policy values and such a file.

```toml
[policies.anti-thrash]
score = "(compute + estar) / (size * staleness ** 2)"   # "score: ..." or "random" too
description = "DTR with staleness squared"
```
Reading a file registers its formulas in this process; a sweep's workers get each one as its
formula text (sweep.grid.portable_name), so nothing but the text has to travel.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import DtrlabError, TraceError, UsageError
from . import formula as fm
from .policies import DEFAULT_POLICY, get_policy, is_reserved, register_policy

TABLE = "policies"
KEYS = {"score": True, "description": False}  # key -> required
_TOML_AT = re.compile(r"^(?P<reason>.*?) \(at line (?P<line>\d+), column \d+\)$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def _toml():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib


class PolicyFileError(TraceError):
    """A policy file that cannot be used: `path:line: reason`, like a bad trace."""


@dataclass(frozen=True)
class Declared:
    """One policy of a file: its name, formula text as written, description and line."""

    name: str
    score: str
    description: str
    line: int


def _line_of(text: str, name: str) -> int:
    """The line declaring policy `name` ([policies.NAME] or NAME = {...}); 1 when not found."""
    quoted = rf"(?:{re.escape(name)}|\"{re.escape(name)}\"|'{re.escape(name)}')"
    pattern = re.compile(rf"^\s*(?:\[\s*{TABLE}\s*\.\s*{quoted}\s*\]|{quoted}\s*=)")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.match(line):
            return number
    return 1


def read_policy_file(path: str | Path) -> tuple[Declared, ...]:
    """The policies a file declares, checked (TOML, keys, names, formulas); PolicyFileError if not."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the policy file ({exc.strerror or exc})") from None
    tomllib = _toml()  # imported when a file is read: a plain simulate reads none
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_AT.match(str(exc))
        line, reason = (int(m["line"]), m["reason"]) if m else (1, str(exc))
        raise PolicyFileError(str(path), line, f"not TOML: {reason}") from None
    extra = sorted(set(data) - {TABLE})
    if extra:
        raise PolicyFileError(str(path), 1, f"unknown table {extra[0]!r} (a policy file holds [{TABLE}.NAME] tables)")
    table = data.get(TABLE)
    if not isinstance(table, dict) or not table:
        raise PolicyFileError(str(path), 1, f"no policies: declare [{TABLE}.NAME] with score = \"...\"")
    out: dict[str, Declared] = {}
    for name, entry in table.items():
        line = _line_of(text, name)

        def fail(reason: str) -> None:
            raise PolicyFileError(str(path), line, f"policy {name!r}: {reason}")

        key = name.lower()
        if not _NAME.match(key) or ":" in key:
            fail("a name is letters, digits, '.', '_' and '-'")
        if key in out:
            fail(f"declared twice (names ignore case; first on line {out[key].line})")
        if is_reserved(key):
            fail("is a built-in policy's name; choose another")
        if not isinstance(entry, dict):
            fail("must be a table with score = \"...\"")
        for k, required in KEYS.items():
            if required and k not in entry:
                fail(f"has no {k}")
        unknown = sorted(set(entry) - set(KEYS))
        if unknown:
            fail(f"unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
        if not all(isinstance(entry.get(k, ""), str) for k in KEYS):
            fail(f"{', '.join(KEYS)} must be strings")
        try:
            fm.parse(entry["score"])
        except DtrlabError as exc:
            fail(str(exc))
        out[key] = Declared(key, entry["score"], entry.get("description", ""), line)
    return tuple(out.values())


def use_policy_file(path: str | Path | None) -> tuple[str, ...]:
    """Read a policy file and register its formulas here (a name declared again replaces the
    earlier formula: the last file read decides); the names, in the file's order."""
    if path is None:
        return ()
    declared = read_policy_file(path)
    for d in declared:
        register_policy(d.name, d.score, description=d.description, replace=True)
    return tuple(d.name for d in declared)


def policies_given(policy: Sequence[str] | str | None, policies_file: str | None,
                   default: Sequence[str] = (DEFAULT_POLICY,)) -> list[str]:
    """What a command that runs several policies runs: every --policy, then every policy of the
    file; neither given, `default`."""
    given = [policy] if isinstance(policy, str) else list(policy or ())
    names = list(dict.fromkeys([*given, *use_policy_file(policies_file)]))
    for name in names:
        get_policy(name)  # an unknown name or a bad formula is one line before any work
    return names or list(default)


def policy_given(policy: str | None, policies_file: str | None) -> str:
    """What a command that runs one policy runs: --policy (a name, perhaps from the file, or a
    formula); without it, the file's only policy, or the default policy when there is no file."""
    declared = use_policy_file(policies_file)
    if policy is not None:
        get_policy(policy)
        return policy
    if len(declared) > 1:
        raise UsageError(f"{policies_file} declares {len(declared)} policies ({', '.join(declared)}): "
                         "pick one with --policy NAME")
    return declared[0] if declared else DEFAULT_POLICY


"""Rendering the report: report.html (one file, figures inline as base64 PNG) and summary.md.

Owns the jinja2 environment and the values the templates read; the templates say the layout.
"""

from __future__ import annotations

import base64
import math

import jinja2

from .. import __version__
from ..formats import bytes_text, count_text, overhead_text
from .claims import DEMONSTRATED, HYPOTHESIS, study_missing
from .mechanisms import section as mechanisms_section
from .findings import MAX_LISTED, found_line, found_on, inversion_text, switch_text
from .leaderboard import context as leaderboard_context
from .plan import RUNTIME, SUBJECT_POLICY, SWITCH_FACTOR
from .study import FETCH_AND_REPRODUCE, SHIPPED
from .tables import curve_rows, inversion_rows


# The report's terms that a reader of the study may not know, defined in the first screen, before
# any of them is used: (term, anchor id, definition).
GLOSSARY = (
    ("e*", "g-estar", "the DTR score's cost term: the compute time to rematerialize a tensor plus that of the "
     "evicted tensors around it that would have to be recomputed with it (its evicted neighbourhood); the score "
     "divides it by the tensor's size and staleness, and the policy evicts the lowest score"),
    ("pinned", "g-pinned", "resident bytes the runtime never evicts: constants (parameters, inputs) and outputs "
     "the step must keep"),
    ("locked", "g-locked", "resident bytes that are inputs of a (re)computation pending on the stack: they "
     "cannot be evicted until it has run"),
    ("remat_limit", "g-remat-limit", "the outcome of a run stopped once its overhead passes the cap: it is "
     "counted as infeasible, like oom (out of memory)"),
)


def _env(autoescape: bool) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("dtrlab.report", "templates"),
                             autoescape=autoescape, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["ratio"] = lambda x: "-" if x is None else f"{x:g}"
    env.filters["factor"] = lambda x: "-" if x is None or not math.isfinite(x) else f"{x:.2f}x"
    env.filters["overhead"] = overhead_text
    env.filters["bytes"] = bytes_text
    env.filters["count"] = count_text
    env.filters["switch_text"] = switch_text
    env.filters["inversion_text"] = inversion_text
    env.filters["found_line"] = found_line
    return env


def _context(repro, figures: dict) -> dict:
    claims = list(repro.claims)
    f = repro.focus
    found = found_on(repro.curves, repro.traces, SUBJECT_POLICY)
    return {
        "repro": repro, "version": __version__, "runtime": RUNTIME, "subject": SUBJECT_POLICY,
        "factor": SWITCH_FACTOR, "cap": repro.plan.overhead_limit,
        "demonstrated": [c for c in claims if c.kind == DEMONSTRATED],
        "hypotheses": [c for c in claims if c.kind == HYPOTHESIS],
        "found": found, "max_listed": MAX_LISTED,
        "truncated": any(len(x.switches) > MAX_LISTED or len(x.inversions) > MAX_LISTED for x in found),
        "fetch": FETCH_AND_REPRODUCE, "study_missing": study_missing(claims),
        "curves": curve_rows(repro), "inversions": inversion_rows(repro), "focus": f,
        "figures": figures, "runs": len(repro.frame), "mech": mechanisms_section(repro),
        "leaderboard": leaderboard_context(repro.leaderboard), "baselines": repro.baselines, "inf": math.inf,
        "overhead": overhead_text,
        "glossary": GLOSSARY, "source_is_path": repro.source != SHIPPED,
    }


def _embed(figures: dict) -> dict:
    return {name: dict(fig, data=base64.b64encode(fig["png"].read_bytes()).decode("ascii"))
            for name, fig in figures.items()}


def render_html(repro, figures: dict) -> str:
    return _env(True).get_template("report.html.j2").render(**_context(repro, _embed(figures)))


def render_markdown(repro, figures: dict) -> str:
    return _env(False).get_template("summary.md.j2").render(**_context(repro, figures))

"""A run's event log as CSV, one row per event (the window's), for pandas: the log's columns with
the kind by name, the operator and the storage's tensor by name, and one column per score term."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..sim.instruments import INT_COLUMNS, KIND_NAMES
from .source import Timeline


def frame(tl: Timeline) -> pd.DataFrame:
    """The window's rows of the log as a DataFrame (the CSV's columns, in order)."""
    program, log = tl.program, tl.log.select(tl.kept())
    tensor = log.tensor
    has_tensor = tensor >= 0
    op = np.where(has_tensor, program.tensor_op[np.maximum(tensor, 0)], -1)
    op_names = np.asarray(program.op_names + ("",), dtype=object)
    names = np.asarray(program.tensor_names, dtype=object)
    cols: dict = {"kind": np.asarray(KIND_NAMES, dtype=object)[log.kind]}
    cols.update({name: getattr(log, name) for name in INT_COLUMNS})
    cols["op"] = op_names[op]  # -1 picks the trailing "": no operator
    cols["storage_tensor"] = np.where(log.storage >= 0, names[program.storage_root[np.maximum(log.storage, 0)]], "")
    cols["score"] = log.score
    for k, term in enumerate(log.term_names):
        cols[f"term_{term}"] = log.terms[:, k]
    return pd.DataFrame(cols)


def write_csv(tl: Timeline, path: str | Path) -> int:
    """Write the CSV; the number of event rows."""
    df = frame(tl)
    df.to_csv(path, index=False)
    return len(df)

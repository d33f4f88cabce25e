"""The study dtrlab reproduces: its public traces, known by content, and how a user gets them.

Owns STUDY_TRACES and the one line that fetches the study's traces and reproduces its claims.
"""

from __future__ import annotations

# The public traces the study measured, by content (the same bytes under any path or in logs.zip).
STUDY_TRACES = {
    "lstm": "f17c569c87bcd1368cc1d1eb0ad79cc75ac8eea0985755c6cd437d7faff2a31f",
    "resnet32": "38c94cada99aca654ad9589d99eabc2267a51835593b598085f9f8221a7bacaf",
}

# The study's two pathologies, by trace content: (ratios the solver is asked about, what DTR does there).
# ResNet-32 runs out of memory at budgets above ones where it fits (0.101 fits, 0.102-0.106 do not);
# the LSTM's overhead jumps between neighbouring budgets (1.38x at 0.265, 10.1x at 0.266).
PATHOLOGY_WINDOWS = {
    STUDY_TRACES["resnet32"]: ("0.095:0.115:0.005", "feasibility inversion"),
    STUDY_TRACES["lstm"]: ("0.26,0.265,0.266,0.27", "regime switch"),
}

# `dtrlab traces fetch` stores simrd's logs.zip under the name "study"; every command takes --traces NAME.
FETCH_AND_REPRODUCE = "dtrlab traces fetch && dtrlab reproduce --traces study"

# What a report calls its source when none is given (the traces inside dtrlab): a label, not a path.
SHIPPED = "the traces shipped with dtrlab"

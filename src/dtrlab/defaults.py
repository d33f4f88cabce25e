"""The defaults every command shares, in a module that imports nothing, so a command's options can
show them without loading the simulator (start-up time)."""

DEFAULT_POLICY = "dtr"  # the DTR heuristic, the paper's and the study's subject
DEFAULT_RUNTIME = "eager-optimized"  # the reference's RuntimeV2EagerOptimized, the paper's configuration
# A regime switch: neighbouring feasible budgets whose overheads differ by more than this factor
# (the study's own threshold; its LSTM switches are 2x to 7.3x).
DEFAULT_SWITCH_FACTOR = 2.0
# The live runtime's clocks (dtrlab run --clock): a cost table from the captured trace, or real time.
LIVE_CLOCKS = ("logical", "measured")
ENGINES = ("auto", "c", "python")  # the engines by name; auto: the compiled one wherever it runs the run

"""The defaults every command shares, in a module that imports nothing, so a command's options can
show them without loading the simulator (start-up time)."""

DEFAULT_POLICY = "dtr"  # the DTR heuristic, the paper's and the study's subject
DEFAULT_RUNTIME = "eager-optimized"  # the reference's RuntimeV2EagerOptimized, the paper's configuration
# A regime switch: neighbouring feasible budgets whose overheads differ by more than this factor
# (the study's own threshold; its LSTM switches are 2x to 7.3x).
DEFAULT_SWITCH_FACTOR = 2.0
# How a budget is written wherever one value may be either (sim.simulate.parse_budget reads it).
BUDGET_NOTATION = ("a ratio of the unbounded peak has a decimal point (0.104, 1.0); bytes are a whole "
                   "number (1046362631) or carry a unit (2GiB, 512MB)")
# The report's overhead limit (dtrlab reproduce --overhead-limit): runs recomputing more than
# (limit - 1) x the baseline stop as remat_limit, since some baselines (lru, size on the LSTM)
# thrash for minutes a budget otherwise; the study's overheads are far below it.
REPORT_OVERHEAD_LIMIT = 20.0
# The DTR paper's budget curve: every policy it compares, at ratios 0.1, 0.2, ..., 1.0 (the report's
# coarse curves and the leaderboard's default grid).
PAPER_POLICIES = ("dtr", "dtr-eq", "dtr-local", "msps", "lru", "size", "random")
COARSE_RATIOS = "0.1:1.0:0.1"
# The live runtime's clocks (dtrlab run --clock): a cost table from the captured trace, or real time.
LIVE_CLOCKS = ("logical", "measured")
ENGINES = ("auto", "c", "python")  # the engines by name; auto: the compiled one wherever it runs the run

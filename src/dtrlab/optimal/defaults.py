"""The optimal solver's names and defaults, in one numpy-free module (the CLI imports it at start-up).

Used by solvers.py, solve.py and commands.py.
"""

SOLVERS = ("highs", "cpsat")
DEFAULT_SOLVER = "highs"
DEFAULT_TIME_LIMIT_S = 600.0
DEFAULT_GAP = 1e-4  # the overhead gap at which a solve stops: (best - bound) <= gap x the program's compute
DEFAULT_THREADS = 1

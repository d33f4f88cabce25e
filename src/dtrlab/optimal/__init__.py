"""Optimal baselines: the best rematerialization schedule a solver finds for a budget, and a proven bound.

graph.py (items and stages), model.py (the stage MILP), solvers.py (HiGHS, CP-SAT), warm.py (a schedule as
a starting solution), bound.py (the crossing bound), solve.py (the whole solve, replayed by the schedule
checker), defaults.py, commands.py (`dtrlab optimal`). docs/optimal.md.
"""

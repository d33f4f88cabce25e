"""Optimal baselines: the best rematerialization schedule a solver finds for a budget, and a proven bound.

graph.py (the storage-level graph), model.py (the stage MILP), solvers.py (HiGHS, CP-SAT), solve.py
(the whole solve, replayed by the schedule checker), commands.py (`dtrlab optimal`).
"""

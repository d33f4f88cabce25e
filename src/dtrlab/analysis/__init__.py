"""Analyses over simulation results: regimes, feasibility, OOM frontiers, churn, divergence, bisection.

Plain functions over RunResults or Runs; the CLI in commands.py is a thin layer over them.
"""

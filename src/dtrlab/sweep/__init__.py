"""Budget sweeps: grids of RunSpecs, executors that run them, and the DuckDB store of results.

Import the parts from their modules (grid, store, executors, run); the Dask machinery loads only when used.
"""

# The results file of a sweep when none is named; here, not in store.py, so the commands can show
# it as their default without importing DuckDB.
DEFAULT_STORE = "dtrlab-results.duckdb"

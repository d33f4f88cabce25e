"""Budget sweeps: grids of RunSpecs, executors that run them, and the DuckDB store of results.

Import the parts from their modules (grid, store, executors, run); the Dask machinery loads only when used.
"""

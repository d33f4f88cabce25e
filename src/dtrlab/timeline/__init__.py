"""Timelines of one run for the viewers people already use: Perfetto's protobuf, PyTorch's memory
snapshot (memory_viz) and CSV, all written from the run's event log (timeline.source)."""

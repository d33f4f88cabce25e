"""PyTorch trace capture (the optional `capture` extra): record a training step as a DTR trace.

Importing dtrlab.capture needs torch; the rest of dtrlab never imports this package.
"""

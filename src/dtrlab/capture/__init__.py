"""PyTorch trace capture (the optional `capture` extra): record a training step as a DTR trace.

Its modules need torch, except capture.peakgap (a captured trace's peaks, which the report reads).
"""

"""dtrlab: a toolkit for studying Dynamic Tensor Rematerialization."""
__version__ = "0.1.0"

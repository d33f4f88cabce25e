"""dtrlab's version, in a module that imports nothing (the store and the fetcher stamp it)."""

__version__ = "0.1.0"

"""Builds the optional compiled engine; dtrlab falls back to pure Python without it."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dtrlab.sim._cengine",
            sources=["src/dtrlab/sim/_cengine.c"],
            extra_compile_args=["-O2", "-std=gnu99"],
            optional=True,
        )
    ]
)

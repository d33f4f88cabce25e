"""Builds the compiled engine. Optional on a user's machine (dtrlab falls back to pure Python without
a C compiler); required when DTRLAB_REQUIRE_COMPILED=1 (CI), where a failed build fails the install."""
import os

from setuptools import Extension, setup

REQUIRED = os.environ.get("DTRLAB_REQUIRE_COMPILED") == "1"

setup(
    ext_modules=[
        Extension(
            "dtrlab.sim._cengine",
            sources=["src/dtrlab/sim/_cengine.c"],
            extra_compile_args=["-O2", "-std=gnu99"],
            optional=not REQUIRED,
        )
    ]
)

"""The defaults every command shares, in a module that imports nothing, so a command's options can
show them without loading the simulator (start-up time)."""

DEFAULT_POLICY = "dtr"  # the DTR heuristic, the paper's and the study's subject
DEFAULT_RUNTIME = "eager-optimized"  # the reference's RuntimeV2EagerOptimized, the paper's configuration

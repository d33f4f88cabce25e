"""The semantics version: what every stored result (a results-store row, a report memo, a cached
lowered program) is keyed by, so that nothing computed by older code is ever served as current.

Bump SEMANTICS_VERSION with any change that can change a result: the lowering of a trace, an engine's
decisions or counters, a policy's score, an analysis's output. tests/test_semantics.py recomputes a
fingerprint of such results and fails when it changes without a bump (or a bump comes without a new
fingerprint); its message says what to do.
"""

from __future__ import annotations

SEMANTICS_VERSION = 3
# 1: the results of e5122e2.
# 2: a COPY_FROM between two names of one tensor is a no-op in lowering.
# 3: the compiled engine makes a new storage's equivalence-class node at creation (eqclass scores).

"""The live tests: torch's deterministic algorithms and one thread (replays must be bitwise)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def deterministic_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install -e '.[capture]')")
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # results then do not depend on how many cores are free
    yield
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(threads)

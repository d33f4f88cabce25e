"""Shared by the live tests: plain-versus-live runs of a step and an independent byte count."""

from __future__ import annotations

import random

import pytest
import torch

from dtrlab.live.check import bits, same_bits  # noqa: F401 (`run --check`'s, reused)
from dtrlab.live.session import LiveSession


@pytest.fixture(autouse=True)
def deterministic_torch():
    """Deterministic algorithms and one thread (replays must be bitwise); a module that imports
    this fixture uses it in every test. Not a conftest.py: that name would shadow tests/conftest."""
    threads = torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # results then do not depend on how many cores are free
    yield
    torch.use_deterministic_algorithms(False)
    torch.set_num_threads(threads)


def random_evictions(seed: int, p: float):
    """An after-op hook that evicts each evictable storage with probability p (seeded)."""
    rnd = random.Random(seed)

    def force(session: LiveSession) -> None:
        for s in session.evictable():
            if rnd.random() < p:
                session.evict(s)

    return force


def resident_by_identity(session: LiveSession) -> int:
    """Bytes of the distinct storages behind every value the session holds, by data pointer;
    independent of the session's own counter."""
    seen: dict[int, int] = {}
    for v in session.held():
        st = v.untyped_storage()
        seen[st.data_ptr() or -id(v)] = st.nbytes()
    return sum(seen.values())


def compare_training(make, session_kwargs: dict, seed: int = 1):
    """Run `make()`'s (model, step) plainly and under a LiveSession from the same seeds; return
    (session, list of (name, plain, live) for every gradient, parameter and buffer)."""
    plain_model, plain_step = make()
    torch.manual_seed(seed)
    plain_step()
    live_model, live_step = make()
    session = LiveSession(**session_kwargs)
    torch.manual_seed(seed)
    with session:
        live_step()
    pairs = []
    for (name, p0), p1 in zip(plain_model.named_parameters(), live_model.parameters()):
        assert (p0.grad is None) == (p1.grad is None), name
        if p0.grad is not None:
            pairs.append((f"{name}.grad", p0.grad, session.value(p1.grad)))
        pairs.append((name, p0.detach(), p1.detach()))
    for (name, b0), b1 in zip(plain_model.named_buffers(), live_model.buffers()):
        pairs.append((name, b0, b1))
    return session, pairs


def by_last_access(f) -> float:
    """A policy as a Python function of StorageFeatures (`live_helpers:by_last_access`): LRU."""
    return f.last_access_ns

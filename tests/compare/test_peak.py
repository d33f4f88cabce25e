"""The peak counters against hand-computed cases: the storage counter (capture's Recorder, with the
state named first) and the CPU allocator's count that compiled code is measured by."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from dtrlab.staged.measure import allocator_peak_bytes  # noqa: E402
from dtrlab.compare.peak import eager_peak_bytes  # noqa: E402

F32 = 4


def test_the_storage_peak_is_the_hand_count_of_live_storages():
    a, unused = torch.zeros(1000), torch.zeros(500)

    def step():
        b = a + 1           # a, b live: 8,000 B
        c = b * 2           # a, b, c: 12,000 B, the peak
        del b
        c.sum()             # a, c and a scalar: 8,004 B
    assert eager_peak_bytes(step) == 3 * 1000 * F32  # a counted from its first use
    # named as state: counted from the start, used or not; a view adds no storage
    assert eager_peak_bytes(step, lambda: [a, unused, a[:10]]) == 3 * 1000 * F32 + 500 * F32


def test_a_state_tensor_the_step_drops_stops_counting_when_it_dies():
    a = torch.zeros(1000)
    holder = [torch.zeros(2000)]  # as a parameter's old gradient, dropped by the step's zero_grad

    def step():
        holder.pop()
        torch.ones(2500) + a.sum()   # a, ones, a's sum, the result: 24,004 B; with the dropped one, 32,004
    assert eager_peak_bytes(step, lambda: [a, holder[0]]) == (1000 + 2500 + 2500 + 1) * F32


def test_the_allocator_count_is_the_same_hand_count_and_sees_what_dispatch_does_not():
    a, unused = torch.zeros(1000), torch.zeros(500)

    def step():
        b = a + a
        c = b * b
        del b
        c.sum()
    assert allocator_peak_bytes(step, [a, unused]) == 3 * 1000 * F32 + 500 * F32

    def with_numbers():
        b = a + 1   # the allocator also holds the Python numbers, wrapped as small tensors that no
        b * 2       # dispatch mode is shown: a few bytes beside b * 2's 12,000
    assert eager_peak_bytes(with_numbers) == 3 * 1000 * F32
    assert 3 * 1000 * F32 < allocator_peak_bytes(with_numbers, [a]) <= 3 * 1000 * F32 + 16
